"""A lend: a suite carried on from one lent GPU to the next, none of its runs started again.

A lent GPU gives one command of about ten minutes on a bare machine, and at most eight files
back. :func:`run_lend` makes those minutes one stretch of a longer run. It unpacks the last
lend's state (one compressed archive, :data:`STATE_FILE`, in parts when it is larger than a file
the lent machine returns: the suite's study database, the training state of each unfinished run,
and the models its transfer studies' runs were pretrained to, so none is pretrained again), runs the
suite as ``threshold run`` does for the seconds it is given, then stops it as Ctrl-C would: the
workers mark their running trials failed and enqueue each again, its training state saved at
most ``save_every_s`` seconds before. The new state is packed for the next lend, whose workers
run the enqueued trials first and continue each run from its state, as ``threshold train
--out`` continues a run: the same run, bit for bit on the CPU, as if it had never been cut
(:mod:`threshold.train.state`; the steps after the last save are trained again). The archive
also keeps the record of every lend (``lends.json``), so the state says how far it has come and
what each lend added. The checkpoints of the runs a lend finished come back in an archive of
their own (:func:`checkpoint_name`), kept beside the state for the analyses on the CPU but not
carried to the next lend, which never reads them: the state stays the size of one pack's
training states however many runs have ended.

Only the search layer opens the storage and only the engine writes training states: a lend
moves their files and reads them back. Nothing here prints: :func:`run_lend` tells its callback
what it continues (:class:`~threshold.suite.run.Event` ``lend_start``), the suite's own events
and what it reached (``lend_end``).
"""

from __future__ import annotations

import _thread
import json
import os
import shutil
import tarfile
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import torch

from threshold.errors import ThresholdError
from threshold.files import atomic_write
from threshold.search.record import read_study, study_names
from threshold.search.study import (
    copy_storage,
    open_storage,
    sqlite_missing,
    sqlite_url,
    training_state_path,
)
from threshold.suite.run import Event, git_state, run_suite
from threshold.suite.spec import Suite
from threshold.tasks import default_cache_dir
from threshold.train.graphs import CAPTURE_FILE_ENV, read_capture_counts

__all__ = [
    "DATABASE",
    "RECORD_FILE",
    "STATE_FILE",
    "LendError",
    "checkpoint_name",
    "pack_checkpoints",
    "pack_state",
    "run_lend",
    "standing",
    "state_files",
    "unpack_checkpoints",
    "unpack_state",
]

STATE_FILE = "state.tar.gz"  # the state a lend reads and returns (gzip: the weights barely shrink)
PART_BYTES = 15 * 2**20  # a larger state comes in parts (state.tar.gz.1, ...): 16 MiB a file back
RECORD_FILE = "lend.json"  # what one lend continued, ran and reached, beside the state
DATABASE = "lend.db"  # the study database, inside the state (the artifact store beside it)
HISTORY = "lends.json"  # the record of every lend so far, inside the state
PRETRAINED = "pretrained"  # the transfer studies' pretrained models, inside the state and cache
# The artifact store beside the database (search.study.artifact_store: the finished runs'
# checkpoints) and its folder of the unfinished runs' training states (training_state_path).
ARTIFACTS, TRAINING = "artifacts", "training"
FORMAT = "threshold-lend/1"
CAPTURES = "captures.jsonl"  # the workers' counts of CUDA graphs, in the work folder, not packed


class LendError(ThresholdError):
    """A lend's state cannot be read or written."""


def state_files(folder: Path, name: str = STATE_FILE) -> list[Path]:
    """The files of archive ``name`` in ``folder``: the file, or its parts in order (none: no
    such archive there)."""
    if (folder / name).is_file():
        return [folder / name]
    parts = {p: p.name.removeprefix(name + ".") for p in folder.glob(name + ".*")}
    return sorted((p for p, n in parts.items() if n.isdigit()), key=lambda p: int(parts[p]))


def checkpoint_name(lend: int) -> str:
    """The archive of the checkpoints of the runs that lend ``lend`` finished."""
    return f"checkpoints-{lend}.tar.gz"


def unpack_state(folder: Path, work: Path) -> list[dict]:
    """Unpack the state in ``folder`` (:func:`state_files`) into ``work``; the lends so far
    (none when there is no state yet: the first lend starts the suite)."""
    work.mkdir(parents=True, exist_ok=True)
    _unpack(state_files(folder), work)
    history = work / HISTORY
    return json.loads(history.read_text()) if history.exists() else []


def unpack_checkpoints(folder: Path, work: Path) -> int:
    """Unpack every lend's checkpoints in ``folder`` into the state unpacked in ``work`` (the
    artifact store beside its database, where analyses and reports look); how many lends'."""
    lends = {p.name.split(".")[0] for p in folder.glob("checkpoints-*.tar.gz*")}
    for stem in sorted(lends):
        _unpack(state_files(folder, stem + ".tar.gz"), work)
    return len(lends)


def _unpack(files: list[Path], work: Path) -> None:
    if not files:
        return
    try:
        with tempfile.TemporaryFile() as whole:
            for path in files:  # the parts are one archive cut in pieces
                with path.open("rb") as part:
                    shutil.copyfileobj(part, whole)
            whole.seek(0)
            with tarfile.open(fileobj=whole, mode="r:gz") as tar:
                tar.extractall(work, filter="data")  # no links, no paths outside work
    except (OSError, EOFError, tarfile.TarError) as e:
        raise LendError(
            f"lend state {', '.join(map(str, files))} cannot be unpacked ({e}): restore it from "
            "git (git checkout -- <it>), or move it away to start the suite anew"
        ) from None


def pack_state(work: Path, folder: Path, history: list[dict]) -> int:
    """Pack what the next lend needs from ``work`` into ``folder`` as :data:`STATE_FILE` (or in
    parts, :func:`_write`): the database, the unfinished runs' training states, the pretrained
    models and ``history``; the finished runs' checkpoints go to their own archive
    (:func:`pack_checkpoints`), so the state carried to the next lend stays small. Its size in
    bytes."""
    (work / HISTORY).write_text(json.dumps(history, indent=1) + "\n")
    with tempfile.TemporaryDirectory(prefix="lend-db-") as tmp:
        db = Path(tmp) / DATABASE
        if (work / DATABASE).exists():  # one consistent file, its write-ahead log folded in
            copy_storage(sqlite_url((work / DATABASE).resolve()), db)
        kept = [
            (db, DATABASE),
            (work / ARTIFACTS / TRAINING, f"{ARTIFACTS}/{TRAINING}"),
            (work / PRETRAINED, PRETRAINED),
            (work / HISTORY, HISTORY),
        ]
        return _write(folder, STATE_FILE, kept)


def pack_checkpoints(work: Path, folder: Path, lend: int) -> int:
    """The checkpoints in ``work``'s artifact store (the runs finished in this lend: none is
    carried in) into ``folder`` as :func:`checkpoint_name` (or its parts); bytes (0: none)."""
    store = work / ARTIFACTS
    files = sorted(p for p in store.iterdir() if p.is_file()) if store.is_dir() else []
    if not files:
        return 0
    return _write(folder, checkpoint_name(lend), [(p, f"{ARTIFACTS}/{p.name}") for p in files])


def _write(folder: Path, name: str, members: list[tuple[Path, str]]) -> int:
    """``members`` (path, name in the archive; missing ones left out) as ``folder/name``, a
    gzipped tar written whole or not at all, or, larger than :data:`PART_BYTES`, as parts
    ``name.1``, ``name.2``, ... of that size, which :func:`state_files` finds; its bytes."""
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="lend-pack-") as tmp:
        archive = Path(tmp) / name
        with archive.open("wb") as f, tarfile.open(fileobj=f, mode="w:gz", compresslevel=6) as tar:
            for path, arcname in members:
                if path.exists():
                    tar.add(path, arcname=arcname, filter=_plain)
        size = archive.stat().st_size
        for old in state_files(folder, name):
            old.unlink()
        if size <= PART_BYTES:
            shutil.move(archive, folder / name)
            return size
        with archive.open("rb") as whole:
            for number in range(1, size // PART_BYTES + 2):
                chunk = whole.read(PART_BYTES)
                if not chunk:
                    break
                (folder / f"{name}.{number}").write_bytes(chunk)
    return size


def _plain(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
    """Files and folders only, owned by no one; a torn write's ``*.tmp`` and a set-aside
    ``*.stale`` state are left out."""
    if info.name.endswith((".tmp", ".stale")) or not (info.isfile() or info.isdir()):
        return None
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


def standing(suite: Suite, url: str) -> list[dict]:
    """Where each study of ``suite`` stands in the storage at ``url``: its runs finished, and
    each unfinished run (waiting for a worker, or left running by a killed one) with the step
    its saved training state has reached (0: none saved, it starts at step 0)."""
    db = None if sqlite_missing(url) else open_storage(url, create=False)
    known = set(study_names(db)) if db is not None else set()
    rows = []
    for study in suite.studies:
        row = {"label": study.label, "study": study.name, "runs": 0, "unfinished": []}
        if study.name in known:
            view = read_study(db, study.name)
            row["runs"] = sum(r.state == "COMPLETE" for r in view.runs)
            for run in view.runs:
                if run.state in ("WAITING", "RUNNING") and run.d_model is not None:
                    path = training_state_path(url, study.name, run.d_model, run.seed or 0)
                    row["unfinished"].append(
                        {"d": run.d_model, "seed": run.seed, "state": run.state} | _saved_step(path)
                    )
            row["estimate"] = view.estimate.to_dict() if view.estimate is not None else None
            row["answer"] = view.answer  # located or bound, as every view says it
        rows.append(row)
    return rows


def _saved_step(path: Path) -> dict:
    """The step and step budget of the training state at ``path`` ({"step": 0}: none)."""
    if not path.exists():
        return {"step": 0}
    try:
        saved = torch.load(path, map_location="cpu", weights_only=True)
        return {"step": int(saved["step"]), "max_steps": int(saved["key"]["train"]["max_steps"])}
    except Exception:  # a torn or foreign file: the engine sets it aside and starts at 0
        return {"step": 0}


def run_lend(
    suite: Suite,
    state_dir: Path,
    out: Path,
    seconds: float,
    on_event: Callable[[Event], None] | None = None,
    save_every_s: float = 15.0,
    stop_when: Callable[[], bool] | None = None,
    work: Path | None = None,
) -> dict:
    """Continue ``suite`` from the state in ``state_dir`` for about ``seconds``; the new state
    and this lend's record go to ``out`` (:data:`STATE_FILE`, :data:`RECORD_FILE`); returns the
    record.

    The suite runs as ``threshold run`` runs it (``suite.execution``: device, workers, trials at
    once), on the state's database, with each running trial's training state saved every
    ``save_every_s`` seconds. At ``seconds`` (or as soon as ``stop_when()`` is true, polled
    every 0.1 s: the tests' cut at a known point) the suite is interrupted, its workers stop and
    enqueue their trials again, and the state is packed; an interrupt from outside (the lent
    machine's own limit, Ctrl-C) is packed too, and raised again after. ``work`` (default: a
    temporary folder) holds the unpacked state while the suite runs.
    """
    if not state_dir.is_dir():  # a mistyped folder would start the suite anew, unnoticed
        raise LendError(
            f"lend state folder {str(state_dir)!r} does not exist: give the folder of the last "
            "lend's state (an empty folder starts the suite)"
        )
    emit = on_event or (lambda event: None)
    t0, started = time.perf_counter(), datetime.now(UTC)
    with tempfile.TemporaryDirectory(prefix="lend-") as tmp:
        work = Path(work or tmp)
        history = unpack_state(state_dir, work)
        pretrained = _carry_pretrained(work, suite.execution.cache_dir)
        url = sqlite_url((work / DATABASE).resolve())
        execution = replace(suite.execution, storage=url, save_every_s=save_every_s)
        # no reports: the state is the record, and `threshold report` reads it on the CPU
        suite = replace(suite, execution=execution, reports_dir=work / "reports", reports=())
        before = standing(suite, url)
        number = len(history) + 1
        emit(Event("lend_start", suite.name, {"lend": number, "studies": before}))
        captures = work / CAPTURES
        captures.unlink(missing_ok=True)
        with _environment(CAPTURE_FILE_ENV, str(captures)):  # its workers' captures, as they go
            cut, outside = _run_until(suite, seconds, stop_when, emit)
        after = standing(suite, url)
        commit, dirty = git_state(Path(__file__).parent)
        record = {
            "format": FORMAT,
            "lend": number,
            "suite": suite.name,
            "started": started.strftime("%Y-%m-%d %H:%M:%S UTC"),
            "commit": commit,
            "dirty": dirty,
            "device": execution.device,
            "trials_at_once": execution.trials_at_once,
            "seconds": seconds,
            "cut": cut,  # stopped by the time limit (else the suite finished first)
            "run_s": round(time.perf_counter() - t0, 1),
            "continued": before,
            "reached": after,
            # the CUDA graphs the workers captured and the captures that failed (a pack that
            # trained eagerly): what the lend measured is the graphed engine only if none did
            "capture": read_capture_counts(captures),
        }
        out.mkdir(parents=True, exist_ok=True)
        pretrained()
        size = pack_state(work, out, [*history, _brief(record)])
        ckpt_size = pack_checkpoints(work, out, number)
        record |= {
            "state_bytes": size,
            "state_files": [p.name for p in state_files(out)],
            "checkpoint_bytes": ckpt_size,
            "checkpoint_files": [p.name for p in state_files(out, checkpoint_name(number))],
            "wall_s": round(time.perf_counter() - t0, 1),
        }
        with atomic_write(out / RECORD_FILE, text=True) as f:
            f.write(json.dumps(record, indent=1) + "\n")
    emit(Event("lend_end", suite.name, record))
    if outside:
        raise KeyboardInterrupt
    return record


def _carry_pretrained(work: Path, cache_dir: Path | None) -> Callable[[], None]:
    """The pretrained models of the state (a transfer study's runs start from them) put into the
    data cache, where the workers look for them, so a lend does not pretrain its continued runs
    again; the function returned keeps the ones made meanwhile in the state."""
    cache = (default_cache_dir() if cache_dir is None else Path(cache_dir)) / PRETRAINED
    kept = work / PRETRAINED
    cache.mkdir(parents=True, exist_ok=True)
    for path in kept.glob("*.ckpt"):
        if not (cache / path.name).exists():
            shutil.copy2(path, cache / path.name)
    since = time.time()

    def keep() -> None:
        kept.mkdir(parents=True, exist_ok=True)
        for path in cache.glob("*.ckpt"):
            if path.stat().st_mtime >= since - 1 and not (kept / path.name).exists():
                shutil.copy2(path, kept / path.name)

    return keep


@contextmanager
def _environment(name: str, value: str) -> Iterator[None]:
    """``$name`` set to ``value`` for the processes started inside the block."""
    before = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = before


def _brief(record: dict) -> dict:
    """What the state's history keeps of a lend: when, how long, and each study's runs."""
    reached = {
        s["label"]: {
            "runs": s["runs"],
            "unfinished": [[u["d"], u["step"]] for u in s["unfinished"]],
        }
        for s in record["reached"]
    }
    keys = ("lend", "started", "commit", "device", "seconds", "cut", "run_s")
    return {k: record[k] for k in keys} | {"reached": reached}


def _run_until(suite: Suite, seconds: float, stop_when, emit) -> tuple[bool, bool]:
    """Run the suite until it ends or its time is up; (cut by the time, cut from outside).

    The time's end interrupts the main thread (``_thread.interrupt_main``: as a SIGINT would,
    through its handler), which the suite takes as Ctrl-C: its workers stop, their trials are
    enqueued again. A lock keeps the timer from striking once the suite has returned.
    """
    lock, state = threading.Lock(), {"running": True, "fired": False}
    done = threading.Event()
    deadline = time.monotonic() + seconds

    def watch() -> None:
        while not done.wait(0.1):
            if time.monotonic() >= deadline or (stop_when is not None and stop_when()):
                with lock:
                    if state["running"]:
                        state["fired"] = True
                        _thread.interrupt_main()
                return

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        try:
            run_suite(suite, on_event=emit, poll_s=1.0)  # a run that ends is seen within 1 s
        finally:
            with lock:
                state["running"] = False
            done.set()
    except KeyboardInterrupt:
        return True, not state["fired"]
    return False, False
