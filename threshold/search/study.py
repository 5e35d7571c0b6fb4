"""Studies and storage: the only module that opens an Optuna storage.

One study per (mixture, measured op, every setting). Its settings are stored as study user
attributes (task, train, search: one JSON each, under RDB's 2 KB value limit), with the package
version and git commit; reusing a study name with other settings is refused, but for its stopping
rules (the run budget and the precision), which a study found again takes from the caller, so a
study that stopped can be given more runs under its name. The URL comes resolved from
:func:`threshold.config.resolve_storage` (an :class:`~threshold.config.Execution`'s
``storage_url``). A SQLite file (the default) is in WAL mode, so several worker processes on one
machine can share it (readers never block the writer; writers wait up to a busy timeout instead
of failing).
PostgreSQL URLs work unchanged (psycopg). Heartbeats mark trials of a killed worker as failed, and
a failed trial is put back as a waiting trial with the same size and seed. Checkpoints go to an
Optuna file-system artifact store beside the database.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
import socket
import sqlite3
import warnings
from contextlib import AbstractContextManager, closing, nullcontext
from datetime import datetime, timedelta
from pathlib import Path

import optuna
import sqlalchemy
from filelock import FileLock
from optuna.artifacts import FileSystemArtifactStore
from optuna.storages import RDBStorage, RetryHeartbeatStaleTrialCallback, fail_stale_trials
from optuna.storages._rdb.models import TrialHeartbeatModel  # its table; no public reader
from optuna.trial import TrialState

from threshold.config import DEFAULT_STORAGE, Execution, resolve_storage
from threshold.errors import ConfigError, ThresholdError
from threshold.files import atomic_write
from threshold.meta import git_commit, version
from threshold.search.runs import TAKEN_BY
from threshold.search.settings import STOP_RULES, SearchConfig
from threshold.search.spec import StudySettings, read_settings

__all__ = [
    "RESULT_ATTR",
    "SearchConfig",
    "StorageError",
    "artifact_store",
    "ask_lock",
    "ask_trial",
    "check_study_name",
    "copy_storage",
    "create_or_load_study",
    "default_storage_missing",
    "fail_stale",
    "load_study",
    "metric_name",
    "name_metric",
    "open_storage",
    "sqlite_missing",
    "sqlite_path",
    "sqlite_url",
    "training_state_path",
]

log = logging.getLogger(__name__)

# The study's finding in one line (its note's headline, threshold.search.notes), its first user
# attribute: optuna-dashboard lists a study's attributes 5 to a page, in the order they were set.
RESULT_ATTR = "80% point"


class StorageError(ThresholdError):
    """The storage URL is malformed, or the database cannot be reached."""


def default_storage_missing(url: str, named: bool) -> bool:
    """True when ``url`` is the default storage, not named (nor set by ``$THRESHOLD_STORAGE``),
    and its file does not exist yet: a fresh checkout with no studies, not an error."""
    return not named and url == DEFAULT_STORAGE and sqlite_missing(url)


_SQLITE = "sqlite:///"  # a SQLite file's URL: this, then the file's path


def sqlite_path(url: str) -> Path | None:
    """The file of a SQLite storage URL (``sqlite:///PATH``); None for any other storage."""
    return Path(url.removeprefix(_SQLITE)) if url.startswith(_SQLITE) else None


def ask_trial(study: optuna.Study, url: str) -> optuna.Trial:
    """A new trial of ``study`` (a waiting one first: a retry, a grid's queued cell), without
    Optuna's warning that heartbeats want ``optimize`` (a worker beats with its own thread).

    On SQLite it is asked holding a file lock beside the database (:func:`ask_lock`): Optuna
    takes a waiting trial by reading its state and then setting it running, which SQLite does not
    make one step, so workers asking at once took the same waiting trial (a dense grid's cell
    trained by two workers, the slower one ended by Optuna's "already finished" on its next
    report; four processes on a queue of 60 took 3-19 twice). A database server locks the row
    itself."""
    with ask_lock(url), warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Heartbeat of storage is supposed")
        return study.ask()


def fail_stale(study: optuna.Study, url: str) -> None:
    """Fail the trials of dead workers, each retried once (Optuna's heartbeat callback), holding
    the lock a trial is asked under (:func:`ask_lock`). Optuna fails a stale trial by reading its
    state and then setting it, which SQLite does not make one step either, so two workers doing
    so at once each enqueued a retry of it: a dense grid's cell trained twice, recorded twice."""
    with ask_lock(url), warnings.catch_warnings():  # "experimental" since Optuna 2.9
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        fail_stale_trials(study)


def ask_lock(url: str) -> AbstractContextManager:
    """The lock held while a trial of the storage at ``url`` is asked, or stale trials are
    failed: a file beside a SQLite database (``NAME.db.ask.lock``, one machine: SQLite is not
    shared by others), else none."""
    path = sqlite_path(url)
    if path is None or path.name in ("", ":memory:"):
        return nullcontext()
    return FileLock(f"{path}.ask.lock")


def sqlite_url(path: Path) -> str:
    """The storage URL of the SQLite file ``path``."""
    return f"{_SQLITE}{path}"


def sqlite_missing(url: str) -> bool:
    """True when ``url`` names a SQLite file that does not exist (yet): a storage with no study."""
    path = sqlite_path(url)
    return path is not None and not path.exists()


# Optuna's 13 tables, and SQLite's own (AUTOINCREMENT's counters, ANALYZE's statistics).
_OPTUNA_TABLES = frozenset(TrialHeartbeatModel.metadata.tables) | {"alembic_version"}
_SQLITE_TABLES = frozenset(("sqlite_sequence", "sqlite_stat1", "sqlite_stat4"))


def _sqlite_uri(path: Path, writes: bool) -> str:
    """The file's URI for sqlite3: read-only (``mode=ro``) unless the caller writes."""
    return path.resolve().as_uri() + ("" if writes else "?mode=ro")


def _check_tables(path: Path, url: str, create: bool, other_tables: bool) -> None:
    """Read the file's tables (read-only): one to read must hold Optuna's; one to create a study
    in may not hold another application's, unless ``other_tables``."""
    with closing(sqlite3.connect(_sqlite_uri(path, False), uri=True)) as con:
        rows = con.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
    tables = {name for (name,) in rows}
    foreign = sorted(tables - _OPTUNA_TABLES - _SQLITE_TABLES)
    named = ", ".join(foreign[:4]) + (", ..." if len(foreign) > 4 else "")
    if not create and "studies" not in tables:
        what = f"another application's tables ({named})" if foreign else "no tables"
        raise StorageError(
            f"storage {url!r} holds no studies: it has {what}, not Optuna's; nothing was written"
            " to it. Name the storage `threshold find` wrote (--storage)"
        )
    if create and foreign and not other_tables:
        raise StorageError(
            f"storage {url!r} holds tables that are not Optuna's ({named}): another"
            " application's database? Name a file of its own (--storage), or pass --other-tables"
            " to add the studies' tables beside them"
        )


def _check_writable(con: sqlite3.Connection, url: str) -> None:
    """Refuse a SQLite file this process cannot write: the header's user version written back
    unchanged (a write that changes nothing, but SQLite checks it as one)."""
    version = int(con.execute("PRAGMA user_version").fetchone()[0])
    try:
        con.execute(f"PRAGMA user_version = {version}")
    except sqlite3.OperationalError as e:
        raise _read_only(url, e) from None


def _read_only(url: str, e: Exception) -> StorageError:
    return StorageError(
        f"storage {url!r} is read-only here ({e}): make the file and its folder writable by "
        "this user (chmod u+w), or copy it to a folder you can write and give that --storage"
    )


# Optuna's tables that a study's runs write (the schema's version tables are only read).
_VERSION_TABLES = ("version_info", "alembic_version")


def _check_server_writable(storage: RDBStorage, url: str) -> None:
    """Refuse a database server (PostgreSQL) where this user may not write the study's tables:
    every transaction read-only (a standby, ``default_transaction_read_only``), or a role without
    INSERT or UPDATE on one of Optuna's tables (granted SELECT only, say). Asked of the server,
    nothing written; else the first write fails deep in a study, in Optuna's misleading words."""
    if storage.engine.dialect.name != "postgresql":
        return
    tables = [t.name for t in TrialHeartbeatModel.metadata.sorted_tables]
    tables = [t for t in tables if t not in _VERSION_TABLES]
    query = sqlalchemy.text(
        "SELECT t, p FROM unnest(CAST(:tables AS text[])) AS t, unnest(ARRAY['INSERT', 'UPDATE'])"
        " AS p WHERE NOT has_table_privilege(t, p)"
    )
    try:
        with storage.engine.connect() as con:
            read_only = con.execute(sqlalchemy.text("SHOW transaction_read_only")).scalar()
            missing = sorted({t for t, _ in con.execute(query, {"tables": tables})})
    except sqlalchemy.exc.SQLAlchemyError as e:
        first = str(e).strip().splitlines()[0]
        raise StorageError(f"storage {url!r} cannot be checked for writing: {first}") from None
    if read_only == "on":
        why = "its transactions are read-only: transaction_read_only is on"
        fix = "use the primary server, or ALTER ROLE ... SET default_transaction_read_only = off"
    elif missing:
        named = ", ".join(missing[:3]) + (", ..." if len(missing) > 3 else "")
        why = f"no INSERT or UPDATE on {len(missing)} of Optuna's tables: {named}"
        fix = (
            "GRANT INSERT, UPDATE ON ALL TABLES IN SCHEMA public and USAGE ON ALL SEQUENCES IN "
            "SCHEMA public to this user"
        )
    else:
        return
    storage.engine.dispose()
    raise StorageError(
        f"storage {url!r} is read-only for this user ({why}): {fix}, or give a --storage this "
        "user can write"
    )


def _dead_here(taken: object, number: int) -> bool:
    """Whether ``taken`` (:func:`threshold.search.runs.taken_by`, for trial ``number``) names a
    process of this host that no longer exists: a worker killed outright (kill -9 of its
    process group), whose trial is failed and retried at once rather than after its missed
    heartbeats, so a resumed study makes the decisions the uninterrupted one made (a new size
    decided beside a dead trial's would differ)."""
    host, pid, of = [*str(taken).rsplit(":", 2), "", ""][:3]
    if host != socket.gethostname() or not pid.isdigit() or of != str(number):
        return False
    return _gone(int(pid))


_PROC = Path("/proc/self/stat")  # Linux's process table, where a zombie shows as one


def _gone(pid: int) -> bool:
    """Whether process ``pid`` no longer runs: no such process, or a zombie. A worker killed
    with its parent (``kill -9 -PGID``) stays a zombie until the host's init reaps it, and a
    container's first process may never do so; a signal 0 still reaches a zombie."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:  # alive, another user's
        return False
    if not _PROC.exists():  # no /proc (macOS): as far as can be told, it runs
        return False
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):  # gone meanwhile
        return True
    return state in ("Z", "X")


class _Storage(RDBStorage):
    """Optuna's RDB storage, where a RUNNING trial that never sent a heartbeat also goes stale,
    and so does one whose worker, on this host, is no longer a process (:func:`_dead_here`).

    Optuna times a trial out only from its last heartbeat, so a trial left RUNNING before its
    first one (its worker killed between creating it and starting the heartbeat thread, or a trial
    made by a tool without heartbeats) would stay pending forever: the study would never end.
    """

    def _get_stale_trial_ids(self, study_id: int) -> list[int]:
        stale = super()._get_stale_trial_ids(study_id)
        cutoff = datetime.now() - timedelta(seconds=self.grace_period)  # Optuna's clock: local
        running = self.get_all_trials(study_id, deepcopy=False, states=(TrialState.RUNNING,))
        dead = [t._trial_id for t in running if _dead_here(t.system_attrs.get(TAKEN_BY), t.number)]
        stale += [tid for tid in dead if tid not in stale]
        old = [t._trial_id for t in running if t.datetime_start and t.datetime_start < cutoff]
        old = [tid for tid in old if tid not in stale]
        if not old:
            return stale
        beats = TrialHeartbeatModel.trial_id
        with self.engine.connect() as con:
            beating = set(con.execute(sqlalchemy.select(beats).where(beats.in_(old))).scalars())
        return stale + [tid for tid in old if tid not in beating]


def open_storage(
    url: str | None = None,
    heartbeat_s: int = Execution.heartbeat_s,
    create: bool = True,
    write: bool | None = None,
    other_tables: bool = False,
) -> RDBStorage:
    """An RDB storage with heartbeats and retry of stale trials; SQLite files in WAL mode.

    ``write`` (default: ``create``): the caller writes, so a SQLite file this process may only
    read (its mode, its owner, a read-only mount) is refused here, in one line, before anything
    runs; SQLite would only say so at the first write, deep in a study. ``url`` None: the one
    :func:`threshold.config.resolve_storage` chooses.

    A SQLite file opened to read (neither ``create`` nor ``write``: ``status``, ``report``,
    ``dashboard``, ``refit``) is opened read-only and must hold Optuna's tables: an empty file or
    another application's database is refused with nothing written (no table, no journal mode).
    One opened to create a study that holds tables that are not Optuna's is refused unless
    ``other_tables`` (``--other-tables``).
    """
    url = resolve_storage(url)
    if "://" not in url:
        raise StorageError(
            f"storage {url!r} is not a database URL: use sqlite:///PATH or "
            "postgresql+psycopg://USER@HOST/DB"
        )
    path = sqlite_path(url)
    if (url.startswith("sqlite://") and path is None) or str(path) in (".", ":memory:"):
        raise StorageError(
            f"storage {url!r} is not a file (in memory), so worker processes cannot share it: "
            "use sqlite:///PATH"
        )
    engine_kwargs: dict = {}
    if path is not None:
        if path.is_dir():
            raise StorageError(f"storage {url!r} is a directory: name a database file in it")
        if not path.exists() and not create:
            raise StorageError(f"storage {url!r} does not exist")
        if not path.parent.exists() and url != DEFAULT_STORAGE:  # a mistyped path, not a study
            raise StorageError(
                f"storage {url!r} cannot be made: folder {str(path.parent)!r} does not exist;"
                " create it first, or check the path"
            )
        writes = create if write is None else write
        try:
            if not create or path.exists():
                _check_tables(path, url, create, other_tables)
            path.parent.mkdir(parents=True, exist_ok=True)
            with closing(sqlite3.connect(_sqlite_uri(path, writes or create), uri=True)) as con:
                if writes or create:  # WAL is a property of the file: set it once
                    con.execute("PRAGMA journal_mode=WAL")
                damage = _damage(con)
                if writes and not damage:  # a damaged file is left as it is
                    _check_writable(con, url)
        except sqlite3.OperationalError as e:  # WAL set on a file not yet in it is a write too
            if "readonly" in str(e) and writes:
                raise _read_only(url, e) from None
            raise StorageError(f"storage {url!r} cannot be opened: {e}") from None
        except (OSError, sqlite3.Error) as e:  # not a database, no permission, a file as parent
            raise StorageError(f"storage {url!r} cannot be opened: {e}") from None
        if damage:
            raise StorageError(
                f"storage {url!r} is damaged ({damage}): restore it from a copy, or recover its"
                " rows with `sqlite3 FILE .recover`"
            )
        engine_kwargs = {"connect_args": {"timeout": 60}}
    else:
        engine_kwargs = {"pool_pre_ping": True}
    try:
        with warnings.catch_warnings():  # heartbeats are "experimental" since Optuna 2.8
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            storage = _Storage(
                url,
                engine_kwargs=engine_kwargs,
                heartbeat_interval=heartbeat_s,
                grace_period=3 * heartbeat_s,
                heartbeat_stale_trial_callback=RetryHeartbeatStaleTrialCallback(max_retry=3),
            )
    except ImportError as e:
        raise StorageError(f"storage {url!r} needs a driver that is not installed: {e}") from None
    except Exception as e:  # sqlalchemy's errors for bad URLs or unreachable servers
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise StorageError(f"storage {url!r} cannot be opened: {first}") from None
    if path is None and (create if write is None else write):
        _check_server_writable(storage, url)
    return storage


def copy_storage(url: str, dest: Path) -> None:
    """The SQLite database at ``url`` copied whole into the one file ``dest`` (its write-ahead
    log folded in, consistent while workers write to it): a copy to move, as a lend's state."""
    path = sqlite_path(url)
    if path is None or not path.is_file():
        raise StorageError(f"storage {url!r} is not a SQLite file: only one can be copied")
    dest.unlink(missing_ok=True)
    src, copy = sqlite3.connect(path), sqlite3.connect(dest)
    try:
        src.backup(copy)
        copy.execute("PRAGMA journal_mode=DELETE")  # one file, no -wal beside it
    finally:
        src.close()
        copy.close()


def _damage(con: sqlite3.Connection) -> str | None:
    """The first problem SQLite's quick check finds in the file (a corrupt inner page, which
    opening does not notice and a read meets as a traceback deep in Optuna), or None. It reads
    every page once: milliseconds for a study database."""
    first = con.execute("PRAGMA quick_check(1)").fetchone()
    return None if first is None or first[0] == "ok" else first[0].splitlines()[-1].strip()


class _AtomicArtifactStore(FileSystemArtifactStore):
    """Optuna's file-system store, but a write goes to a temporary file renamed into place.

    Optuna records an artifact's id on the trial before writing the file, so a worker killed
    mid-write would leave half a checkpoint under an id that the trial (and its retry, which
    inherits the attribute) points to. Here that id names no file instead.
    """

    def write(self, artifact_id: str, content_body) -> None:
        with atomic_write(self._get_filepath(artifact_id)) as f:
            shutil.copyfileobj(content_body, f)


def _artifact_base(url: str | None) -> Path:
    """Checkpoints beside a SQLite file (``<dir>/artifacts``), else ``$THRESHOLD_ARTIFACTS``."""
    path = sqlite_path(resolve_storage(url))
    base = os.environ.get("THRESHOLD_ARTIFACTS")
    if base is None:
        base = str(path.parent / "artifacts") if path is not None else "studies/artifacts"
    return Path(base)


def artifact_store(url: str | None = None) -> FileSystemArtifactStore:
    """Checkpoints beside a SQLite file (``<dir>/artifacts``), else ``$THRESHOLD_ARTIFACTS``."""
    base = _artifact_base(url)
    base.mkdir(parents=True, exist_ok=True)
    return _AtomicArtifactStore(str(base))


def training_state_path(url: str | None, study_name: str, d_model: int, seed: int) -> Path:
    """Where a trial of ``study_name`` at ``d_model`` and ``seed`` keeps its training state while
    it trains, beside the checkpoints (``training/<study>/``): a retry of the trial (same size,
    same seed) finds it there and continues the run (:mod:`threshold.train.state`)."""
    slug = re.sub(r"[^A-Za-z0-9._-]", "_", study_name)[:80]
    if slug != study_name:  # names that differ only in the characters replaced stay apart
        slug += "-" + hashlib.sha1(study_name.encode()).hexdigest()[:8]
    return _artifact_base(url) / "training" / slug / f"d{d_model}-seed{seed}.state"


def check_study_name(name: str) -> str:
    """``name``, if Optuna can store it and a person can read it; else :class:`ConfigError`."""
    if not name.strip():
        raise ConfigError(
            f"study name {name!r} is empty: give a name, or leave out --study for the derived one"
        )
    if len(name) > 512:  # Optuna's column width
        raise ConfigError(
            f"study name {name[:24] + '...'!r} is {len(name)} characters long: use at most 512"
        )
    if not name.isprintable():
        raise ConfigError(f"study name {name!r} has control characters: use printable ones")
    return name


def create_or_load_study(
    settings: StudySettings, storage: RDBStorage, name: str | None = None, sampler=None
) -> optuna.Study:
    """The study named ``name`` (default: derived from the settings), created if new.

    An existing study must have the same settings but for its stopping rules (``STOP_RULES``:
    the budget and the precision), which it takes from ``settings``: ``find --study NAME
    --budget 60`` gives a study that stopped at 40 runs 20 more. Any other difference raises
    :class:`ConfigError` naming the settings that differ.
    """
    name = check_study_name(settings.default_name() if name is None else name)
    attrs = settings.to_attrs()
    existing = {s.study_name: s for s in storage.get_all_studies()}
    if name in existing:
        stored = existing[name].user_attrs
        keys = sorted(set(attrs) | ({"pretrain"} & set(stored)))
        differ = [k for k in keys if stored.get(k) != attrs.get(k)]
        if differ and not _stop_rules_only(stored, attrs, differ):
            detail = _differences(stored, attrs, differ)
            raise ConfigError(
                f"study {name!r} exists with other settings ({detail}): "
                "choose another --study name or the same settings"
            )
        study = optuna.load_study(study_name=name, storage=storage, sampler=sampler)
        if differ:  # the budget or precision changed: the workers read them from the study
            study.set_user_attr("search", attrs["search"])
        name_metric(study, settings)  # a study made before its value had a name
        return study
    study = optuna.create_study(
        study_name=name, storage=storage, sampler=sampler, direction="maximize"
    )
    study.set_user_attr(RESULT_ATTR, "no runs yet")
    for key, value in attrs.items():
        study.set_user_attr(key, value)
    study.set_user_attr("version", version())
    study.set_user_attr("git_commit", git_commit())
    name_metric(study, settings)
    return study


def metric_name(settings: StudySettings) -> str:
    """What a trial's value is, as Optuna and optuna-dashboard show it (not "Objective 0")."""
    return settings.value_name()


def name_metric(study: optuna.Study, settings: StudySettings) -> None:
    """Name the study's value (:func:`metric_name`) where it has no name yet."""
    if study.metric_names is not None:
        return
    with warnings.catch_warnings():  # "experimental" since Optuna 3.2
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        study.set_metric_names([metric_name(settings)])


def _stop_rules_only(stored: dict, attrs: dict, differ: list[str]) -> bool:
    """Whether the stored and the given settings differ in the search's stopping rules alone."""
    if differ != ["search"]:
        return False
    old, new = json.loads(stored["search"]), json.loads(attrs["search"])
    return {k: v for k, v in old.items() if k not in STOP_RULES} == {
        k: v for k, v in new.items() if k not in STOP_RULES
    }


def _differences(stored: dict, attrs: dict, keys: list[str]) -> str:
    parts = []
    for key in keys:
        try:
            old, new = json.loads(stored.get(key, "{}")), json.loads(attrs.get(key, "{}"))
        except ValueError:
            parts.append(key)
            continue
        if not (isinstance(old, dict) and isinstance(new, dict)):  # the pretraining op list
            parts.append(f"{key}: {old or 'none'} -> {new or 'none'}")
            continue
        changed = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
        parts.extend(f"{key}.{k}: {old.get(k)!r} -> {new.get(k)!r}" for k in changed[:3])
    return "; ".join(parts)


def load_study(name: str, storage: RDBStorage, sampler=None) -> tuple[optuna.Study, StudySettings]:
    """An existing threshold study and its settings; :class:`ThresholdError` if unknown."""
    check_study_name(name)
    names = [s.study_name for s in storage.get_all_studies()]
    if name not in names:
        known = ", ".join(names[:5]) or "none"
        raise ThresholdError(f"study {name!r} is not in this storage (studies: {known})")
    study = optuna.load_study(study_name=name, storage=storage, sampler=sampler)
    return study, read_settings(study.user_attrs)
