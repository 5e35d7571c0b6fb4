import dataclasses
import json
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest

from threshold import ConfigError, ThresholdError
from threshold.config import DEFAULT_STORAGE, Execution, resolve_storage
from threshold.search.record import study_rows
from threshold.search.spec import StudySettings
from threshold.search.study import (
    SearchConfig,
    StorageError,
    create_or_load_study,
    default_storage_missing,
    load_study,
    open_storage,
    sqlite_missing,
    sqlite_path,
    sqlite_url,
)
from threshold.suite.parse import load_suite
from threshold.tasks import TaskConfig
from threshold.train import TrainConfig


def settings(**search) -> StudySettings:
    task = TaskConfig(ops=("max", "med", "add"), n=10)
    return StudySettings(task, TrainConfig(max_steps=100), SearchConfig(**search))


def test_study_name_and_settings_round_trip(tmp_path):
    storage = open_storage(f"sqlite:///{tmp_path}/s.db")
    s = settings()
    study = create_or_load_study(s, storage)
    assert study.study_name.startswith("listops10-max+med+add-add-")
    _, loaded = load_study(study.study_name, storage)
    assert loaded == s
    attrs = study.user_attrs
    assert all(len(json.dumps(v)) < 2000 for v in attrs.values())
    assert {"task", "train", "search", "version", "git_commit"} <= set(attrs)
    # The same settings find the same study; other settings make another one.
    assert create_or_load_study(s, storage).study_name == study.study_name
    assert create_or_load_study(settings(budget=7), storage).study_name != study.study_name


def test_the_value_is_named_for_the_dashboard_also_on_an_older_study(tmp_path):
    """optuna-dashboard titles its plots by the study's metric name ("Objective 0" without)."""
    url = f"sqlite:///{tmp_path}/s.db"
    study = create_or_load_study(settings(), open_storage(url))
    assert study.metric_names == ["add test accuracy (greedy)"]
    older = optuna.create_study(study_name="older", storage=url, direction="maximize")
    for key, value in settings(budget=9).to_attrs().items():
        older.set_user_attr(key, value)
    assert older.metric_names is None
    create_or_load_study(settings(budget=9), open_storage(url), "older")
    assert optuna.load_study(study_name="older", storage=url).metric_names == [
        "add test accuracy (greedy)"
    ]


def test_reusing_a_name_with_other_settings_is_refused(tmp_path):
    storage = open_storage(f"sqlite:///{tmp_path}/s.db")
    create_or_load_study(settings(), storage, name="mine")
    with pytest.raises(ConfigError, match=r"'mine' exists with other settings.*d_hi"):
        create_or_load_study(settings(d_hi=64, budget=60), storage, name="mine")


def test_a_study_found_by_name_takes_a_new_budget_and_precision(tmp_path):
    """The stopping rules are not what a study measures: a study that used its budget goes on
    under its name with a larger one (``find --study NAME --budget 60``)."""
    url = f"sqlite:///{tmp_path}/s.db"
    create_or_load_study(settings(budget=12), open_storage(url), name="mine")
    create_or_load_study(settings(budget=18, precision=2.0), open_storage(url), name="mine")
    _, stored = load_study("mine", open_storage(url))
    assert (stored.search.budget, stored.search.precision) == (18, 2.0)
    assert stored == settings(budget=18, precision=2.0)


def test_sqlite_storage_is_in_wal_mode_and_readable_by_plain_optuna(tmp_path):
    import sqlite3

    url = f"sqlite:///{tmp_path}/s.db"
    create_or_load_study(settings(), open_storage(url), name="s1")
    with sqlite3.connect(tmp_path / "s.db") as con:
        assert con.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert [s.study_name for s in optuna.get_all_study_summaries(url)] == ["s1"]


def test_unknown_study_and_bad_urls(tmp_path):
    storage = open_storage(f"sqlite:///{tmp_path}/s.db")
    with pytest.raises(ThresholdError, match="'nope' is not in this storage"):
        load_study("nope", storage)
    with pytest.raises(StorageError, match="not a database URL"):
        open_storage("studies/threshold.db")
    with pytest.raises(StorageError, match="cannot be opened"):
        open_storage("postgresql+psycopg://nobody@127.0.0.1:1/none")
    with pytest.raises(StorageError, match="does not exist"):
        open_storage(f"sqlite:///{tmp_path}/missing.db", create=False)
    assert not (tmp_path / "missing.db").exists()


def test_the_storage_is_resolved_once_as_the_execution_is_made(tmp_path, monkeypatch):
    """A named storage wins, else $THRESHOLD_STORAGE, else the default file; the URL is fixed when
    the settings are made, kept by a copy, and handed to a worker resolved, whatever the worker's
    environment says; ``storage`` keeps whether one was named (cluster slurm leaves it out)."""
    named, env = sqlite_url(tmp_path / "named.db"), sqlite_url(tmp_path / "env.db")
    monkeypatch.delenv("THRESHOLD_STORAGE", raising=False)
    assert resolve_storage(None) == DEFAULT_STORAGE == Execution().storage_url
    monkeypatch.setenv("THRESHOLD_STORAGE", env)
    made = Execution()
    assert (made.storage, made.storage_url) == (None, env) == (None, resolve_storage(None))
    assert Execution(named).storage_url == named == resolve_storage(named)
    copy = made.but(workers=2)
    assert (copy.storage, copy.storage_url, copy.workers) == (None, env, 2)
    assert made.but(storage=named).storage_url == named
    monkeypatch.delenv("THRESHOLD_STORAGE")
    assert made.storage_url == env  # read once, when made
    job = json.loads(json.dumps(made.to_json()))  # as find hands it to a worker process
    assert Execution(**job).storage_url == env


def test_sqlite_urls_are_read_in_one_place(tmp_path):
    url = sqlite_url(tmp_path / "s.db")
    assert sqlite_path(url) == tmp_path / "s.db" and sqlite_missing(url)
    assert sqlite_path("postgresql+psycopg://me@host/db") is None
    assert not sqlite_missing("postgresql+psycopg://me@host/db")  # not a file: not known missing
    open_storage(url)
    assert not sqlite_missing(url)
    # only the default, not named, is "no studies yet" when missing; a named file is an error
    assert default_storage_missing(DEFAULT_STORAGE, named=False) == (
        not sqlite_path(DEFAULT_STORAGE).exists()
    )
    assert not default_storage_missing(DEFAULT_STORAGE, named=True)
    assert not default_storage_missing(sqlite_url(tmp_path / "missing.db"), named=False)


def test_status_rows(tmp_path):
    storage = open_storage(f"sqlite:///{tmp_path}/s.db")
    study = create_or_load_study(settings(), storage, name="s1")
    study.set_user_attr("estimate", json.dumps({"params_p80": 1000.0}))
    (row,) = study_rows(storage)
    answer = row.pop("answer")  # no run: the point is not located (threshold.search.bounds)
    assert row == {
        "study": "s1",
        "n_complete": 0,
        "n_running": 0,
        "estimate": {"params_p80": 1000.0},
    }
    assert (answer["kind"], answer["located"], answer["interval"]) == ("none", False, None)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"budget": 2}, "below the initial bracket"),
        ({"precision": 1.0}, "precision 1.0"),
        ({"d_lo": 64, "d_hi": 32}, "d range"),
        ({"level": 1.2}, "level 1.2"),
    ],
)
def test_bad_search_config(kwargs, match):
    with pytest.raises(ConfigError, match=match):
        SearchConfig(**kwargs)


def test_storage_side_loads_no_torch(loaded_by):
    """Storage commands (status, dashboard, report) read settings and runs without torch."""
    storage_side = ["threshold.search.study", "threshold.search.notes", "threshold.search.sampler"]
    assert loaded_by(storage_side, ["torch"]) == []
    from threshold.config import TrainConfig as Settings

    assert TrainConfig is Settings  # the one class, whichever module it is imported from


# --- A study's name across a new field (issue 68) ----------------------------------------------

SUITES = sorted((Path(__file__).parent.parent / "studies").glob("*.toml"))
NAMES = Path(__file__).parent / "fixtures" / "study-names.json"


def stored_studies() -> dict[tuple[str, str], StudySettings]:
    """The settings of every [[study]] of the suites in studies/, by (file, label)."""
    return {(path.name, s.label): s.settings for path in SUITES for s in load_suite(path).studies}


def test_the_suites_studies_keep_their_recorded_names():
    """Every study of studies/*.toml has the name recorded when the names were held still: a
    change that renames them (a new field written at its default, say) starts fresh studies
    where the same command should resume. Change the record only when a suite's settings are
    changed on purpose."""
    recorded = json.loads(NAMES.read_text())
    names = {key: s.default_name() for key, s in stored_studies().items()}
    kept = {(f, label): name for f, labels in recorded.items() for label, name in labels.items()}
    common = sorted(set(kept) & set(names))
    assert len(common) >= 40
    assert {k: names[k] for k in common} == {k: kept[k] for k in common}


def with_new_field(settings: StudySettings, part: str, value=None) -> StudySettings:
    """``settings`` whose ``part`` (task, train or search) is of a subclass with one field more,
    ``new_knob`` (default 3), at its default or at ``value``: a field added as a future commit
    would add it."""
    old = getattr(settings, part)
    new = dataclasses.make_dataclass(
        type(old).__name__,
        [("new_knob", int, dataclasses.field(default=3))],
        bases=(type(old),),
        frozen=True,
    )
    given = {f.name: getattr(old, f.name) for f in dataclasses.fields(old) if f.init}
    knob = {} if value is None else {"new_knob": value}
    return dataclasses.replace(settings, **{part: new(**given, **knob)})


@pytest.mark.parametrize("part", ["task", "train", "search"])
def test_a_new_field_with_a_default_renames_no_study(part, tmp_path):
    """A field added to the task's, the recipe's or the search's settings, with a default,
    leaves every stored study's name and stored settings as they were (the same command
    resumes it); set away from its default it names another study."""
    studies = stored_studies()
    for key, settings in studies.items():
        grown = with_new_field(settings, part)
        assert grown.default_name() == settings.default_name(), key
        assert grown.to_attrs() == settings.to_attrs(), key
        assert with_new_field(settings, part, 4).default_name() != settings.default_name(), key
    # On a real storage: the study made before the field existed is the one found after.
    storage = open_storage(f"sqlite:///{tmp_path}/s.db")
    settings = studies[("cpu.toml", "max")]
    before = create_or_load_study(settings, storage)
    after = create_or_load_study(with_new_field(settings, part), storage)
    assert after.study_name == before.study_name and len(storage.get_all_studies()) == 1


# --- Another application's database (issue 68) -------------------------------------------------

READERS = [["status"], ["refit"], ["report", "-o", "rep"], ["survey", "s"], ["analyze", "s"]]


@pytest.mark.parametrize("contents", ["another application's", "empty"])
def test_a_view_of_a_file_without_studies_writes_nothing_to_it(contents, tmp_path, cli):
    """status, refit, report, survey and analyze on another application's SQLite file, or on an
    empty one: one line, exit 2, the file byte for byte as it was and nothing beside it."""
    path = tmp_path / "other.db"
    if contents == "empty":
        path.touch()
    else:
        with sqlite3.connect(path) as con:
            con.execute("CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT)")
            con.execute("INSERT INTO customers VALUES (1, 'Ada')")
        con.close()
    before = path.read_bytes()
    for args in READERS:
        result = cli([*args, "--storage", f"sqlite:///{path}"])
        assert result.exit_code == 2, (args, result.stderr, result.exception)
        assert "holds no studies" in result.stderr and "nothing was written" in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr
        assert path.read_bytes() == before, args
        assert sorted(p.name for p in tmp_path.iterdir()) == ["other.db"], args


def test_find_writes_into_another_applications_file_only_when_told(tmp_path, cli):
    path = tmp_path / "other.db"
    with sqlite3.connect(path) as con:
        con.execute("CREATE TABLE customers (id INTEGER PRIMARY KEY)")
    con.close()
    before = path.read_bytes()
    args = ["find", "--tasks", "max", "--mod", "5", "--d-lo", "4", "--d-hi", "16", "--workers"]
    args += ["0", "--storage", f"sqlite:///{path}"]
    refused = cli(args)
    assert refused.exit_code == 2 and "not Optuna's (customers)" in refused.stderr
    assert "--other-tables" in refused.stderr and path.read_bytes() == before
    told = cli([*args, "--other-tables"])
    assert told.exit_code == 0, told.stderr
    with sqlite3.connect(path) as con:
        tables = {n for (n,) in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    con.close()
    assert {"customers", "studies", "trials"} <= tables
    assert cli(["status", "--storage", f"sqlite:///{path}"]).exit_code == 0


def test_a_view_of_a_study_storage_leaves_its_file_as_it_was(tmp_path, cli):
    """status on a plain Optuna file (its journal not WAL) changes no byte of it."""
    url = f"sqlite:///{tmp_path}/plain.db"
    optuna.create_study(storage=url, study_name="p").add_trial(optuna.trial.create_trial(value=0.5))
    before = (tmp_path / "plain.db").read_bytes()
    result = cli(["status", "--storage", url])
    assert result.exit_code == 0, result.stderr
    assert (tmp_path / "plain.db").read_bytes() == before


def test_a_trial_is_dead_only_where_its_own_worker_is_gone():
    """A RUNNING trial is retried at once only where the process that took it (host:pid, and
    that trial's number: a retry's copy of its failed trial's attributes names no one) was on
    this host and is no longer a process (issue 68)."""
    from threshold.search.runs import taken_by
    from threshold.search.study import _dead_here

    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    pid = int(gone.stdout)
    here = socket.gethostname()
    assert _dead_here(f"{here}:{pid}:7", 7)
    assert not _dead_here(taken_by(7), 7)  # this process: alive
    assert not _dead_here(f"{here}:{pid}:6", 7)  # the failed trial's, copied onto its retry
    assert not _dead_here(f"elsewhere:{pid}:7", 7)  # another machine's: its heartbeats decide
    assert not _dead_here(None, 7) and not _dead_here("junk", 7)


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="no /proc process table")
def test_a_worker_killed_and_not_yet_reaped_is_gone():
    """A zombie (killed, its parent not yet waited for it; a container's first process may never
    reap one), which a signal 0 still reaches, is gone: the worker killed with its `find` was one
    when the same command, run at once, took its trial as alive and decided another size."""
    from threshold.search.study import _dead_here

    here = socket.gethostname()
    zombie = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        zombie.kill()
        for _ in range(200):  # until the kill has landed: the process is a zombie
            stat = Path(f"/proc/{zombie.pid}/stat").read_text()
            if stat.rsplit(")", 1)[1].split()[0] == "Z":
                break
            time.sleep(0.05)
        assert _dead_here(f"{here}:{zombie.pid}:7", 7)
    finally:
        zombie.wait()


# A worker's loop over a study's queue: ask (a waiting trial first), note its number, tell it.
_POP = """
import json, sys
import optuna
from threshold.search.study import ask_trial, open_storage
url, out = sys.argv[1:3]
study = optuna.load_study(study_name="queue", storage=open_storage(url, create=False))
got = []
while True:
    trial = ask_trial(study, url)
    if "fixed_params" not in study._storage.get_trial(trial._trial_id).system_attrs:
        study.tell(trial, state=optuna.trial.TrialState.FAIL)  # the queue is empty
        break
    got.append(trial.number)
    try:
        study.tell(trial, 0.0)
    except RuntimeError:  # told by another worker that took it too
        pass
json.dump(got, open(out, "w"))
"""


def test_workers_asking_at_once_on_sqlite_take_each_waiting_trial_once(tmp_path):
    # Optuna takes a waiting trial by reading its state, then setting it: on SQLite two workers
    # asking at once took the same one (a grid's cell trained twice); ask_trial asks in turn
    url = sqlite_url(tmp_path / "q.db")
    study = optuna.create_study(storage=open_storage(url), study_name="queue")
    for i in range(60):
        study.enqueue_trial({"x": i})
    outs = [tmp_path / f"got{k}.json" for k in range(4)]
    procs = [subprocess.Popen([sys.executable, "-c", _POP, url, str(o)]) for o in outs]
    assert all(p.wait(timeout=300) == 0 for p in procs)
    got = [n for o in outs for n in json.loads(o.read_text())]
    assert sorted(got) == list(range(60))  # every queued trial taken, none twice
    assert (tmp_path / "q.db.ask.lock").exists()


# A worker failing the stale trials of dead workers, again and again, until a start time.
_FAIL = """
import sys, time
import optuna
from threshold.search.study import fail_stale, open_storage
url, start = sys.argv[1], float(sys.argv[2])
storage = open_storage(url, heartbeat_s=1, create=False)
study = optuna.load_study(study_name="stale", storage=storage)
time.sleep(max(0.0, start - time.time()))
for _ in range(5):
    fail_stale(study, url)
"""


def test_workers_failing_stale_trials_at_once_on_sqlite_retry_each_once(tmp_path):
    # Optuna fails a stale trial by reading its state, then setting it: on SQLite two workers
    # doing so at once each enqueued a retry (a dense grid's cell trained and recorded twice)
    url = sqlite_url(tmp_path / "s.db")
    study = optuna.create_study(storage=open_storage(url, heartbeat_s=1), study_name="stale")
    for i in range(40):  # running, never beating: stale once their start is 2 s old
        study.enqueue_trial({"x": i})
        study.ask()
    start = time.time() + 4.0
    procs = [subprocess.Popen([sys.executable, "-c", _FAIL, url, str(start)]) for _ in range(4)]
    assert all(p.wait(timeout=300) == 0 for p in procs)
    trials = study.get_trials(deepcopy=False)
    retries = [t.system_attrs["failed_trial"] for t in trials if "failed_trial" in t.system_attrs]
    assert sum(t.state == optuna.trial.TrialState.FAIL for t in trials) == 40
    assert sorted(retries) == list(range(40))  # each dead trial retried, none twice
