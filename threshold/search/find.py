"""Running a search: prepare the study, start worker processes, follow them, and read the study.

:func:`run_search` is the one loop behind ``threshold find``, ``threshold run`` and
:func:`threshold.find_threshold`: the study is made (or found again with the same settings), its
worker processes are started (``python -m threshold.cli.worker_process``, no command-line
parsing), followed until they end, and stopped on an interrupt, leaving none behind. No torch
here: which devices the workers get is asked of a child process (:mod:`~.device_probe`), so the
process that follows a search never loads torch nor holds a GPU.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from optuna.storages import BaseStorage

from threshold.config import Execution
from threshold.errors import ConfigError, ThresholdError
from threshold.interrupt import raise_if_interrupted
from threshold.search.objective import ObjectiveSettings
from threshold.search.record import read_study
from threshold.search.sampler import policy_settings
from threshold.search.spec import StudySettings
from threshold.search.study import check_study_name, create_or_load_study, open_storage
from threshold.tasks.generate import build_test_set
from threshold.tasks.sequences import chance_rate

__all__ = [
    "Follower",
    "Interrupted",
    "SearchOutcome",
    "die_with_parent",
    "follow_workers",
    "prepare_study",
    "probe_device",
    "run_search",
    "snapshot",
    "start_workers",
    "stop_workers",
    "worker_devices",
    "worker_trials",
]

PARENT_ENV = "THRESHOLD_WORKER_PARENT"  # set on workers started by find and run: their parent
NVIDIA_GPUS = Path("/proc/driver/nvidia/gpus")  # a folder a GPU the NVIDIA driver sees (Linux)


class Interrupted(KeyboardInterrupt):
    """The search was interrupted; its workers were stopped. ``study`` names it, to resume."""

    def __init__(self, study: str) -> None:
        super().__init__(study)
        self.study = study


@dataclass(frozen=True)
class SearchOutcome:
    study: str
    storage: str
    estimate: dict | None  # the transition estimate stored on the study (None: no run yet)
    n_trials: int  # completed runs
    wall_s: float
    n_new: int = 0  # of them, the runs completed by this search (0: it was done before)
    answer: dict | None = None  # located or bound (threshold.search.bounds.answer)

    def to_json(self) -> dict:
        return {
            "study": self.study,
            "storage": self.storage,
            "located": bool(self.answer and self.answer["located"]),
            "answer": self.answer,
            "transition": self.estimate,
            "n_trials": self.n_trials,
            "n_new": self.n_new,
            "wall_s": self.wall_s,
        }


def run_search(
    settings: StudySettings,
    execution: Execution | None = None,
    name: str | None = None,
    on_update: Callable[[dict], None] | None = None,
    poll_s: float = 2.0,
    on_run: Callable[[dict, dict], None] | None = None,
    create_only: bool = False,
) -> SearchOutcome:
    """Run (or resume) the study of ``settings`` with worker processes until its policy stops.

    ``on_update(snapshot)`` sees the study every ``poll_s`` seconds and once at the end;
    ``on_run(row, snapshot)`` sees each run that ends (complete or failed) while the search
    runs, once, with the study as it was then (see :func:`snapshot`). Bad settings are refused
    before anything is written; an interrupt stops the workers (their running trials are marked
    failed) and raises :class:`Interrupted`. ``execution`` None: the defaults of
    :class:`Execution`. ``create_only``: create (or check) the study and start no worker; workers
    started elsewhere (``threshold worker``, a cluster's job array) run its trials.
    """
    execution = execution or Execution()
    if not create_only:
        worker_devices(execution)  # refused here, before the study is written
    t0 = time.perf_counter()
    name, url = prepare_study(settings, execution, name)
    if create_only:
        final = snapshot(open_storage(url, create=False), name)
        wall = round(time.perf_counter() - t0, 1)
        return SearchOutcome(
            name, url, final["estimate"], final["n_trials"], wall, answer=final["answer"]
        )
    try:
        procs, (follow,), (final,) = follow_workers(
            lambda: start_workers(name, execution, isinstance(settings, ObjectiveSettings)),
            lambda db: [Follower(db, name, on_update, on_run)],
            url,
            poll_s,
        )
    except KeyboardInterrupt:
        raise Interrupted(name) from None
    failed = [p.returncode for p in procs if p.returncode != 0]
    if failed:
        raise ThresholdError(
            f"study {name!r}: {len(failed)} worker(s) failed (exit {failed[0]}); see their "
            "output above, then run the search again to resume it"
        )
    wall = round(time.perf_counter() - t0, 1)
    return SearchOutcome(
        name, url, final["estimate"], final["n_trials"], wall, follow.completed, final["answer"]
    )


def follow_workers(start, follows, url: str, poll_s: float) -> tuple[list, list, list]:
    """Start the workers (``start()``) and follow their studies until every worker has ended:
    ``follows(db)`` makes the :class:`Follower` of each (after the start, on one connection pool
    of ``url`` for the whole run), each polled every ``poll_s`` seconds and once more at the
    end. Returns (the workers, the followers, their last polls). An interrupt stops the workers
    (their running trials are marked failed) and goes on as ``KeyboardInterrupt``."""
    procs: list[subprocess.Popen] = []
    try:
        procs = start()
        followers = follows(open_storage(url, create=False))
        while any(p.poll() is None for p in procs):
            raise_if_interrupted()
            for follower in followers:
                follower.poll()
            time.sleep(poll_s)
        raise_if_interrupted()  # one dropped here while the workers ended on it (exit 130)
        return procs, followers, [follower.poll(last=True) for follower in followers]
    except KeyboardInterrupt:
        stop_workers(procs)
        raise


# Longest a finished run's line waits for the estimate its worker writes next (a worker killed
# between the two never writes it).
ESTIMATE_WAIT_S = 10.0


class Follower:
    """What the search's callbacks see: the study every poll, and each run once as it ends."""

    def __init__(self, db, name: str, on_update, on_run) -> None:
        self.db, self.name, self.on_update, self.on_run = db, name, on_update, on_run
        self.seen = {r["number"] for r in snapshot(db, name)["trials"] if _ended(r)}
        self.completed = 0  # runs completed during this search
        self.behind_since: float | None = None  # when a run was seen before its estimate

    def poll(self, last: bool = False) -> dict | None:
        if not (last or self.on_update or self.on_run):
            return None
        snap = snapshot(self.db, self.name)
        if not last and self._estimate_behind(snap):
            snap = None  # a run's line waits for the estimate its worker writes after it
        for row in snap["trials"] if snap is not None else ():
            if _ended(row) and row["number"] not in self.seen:
                self.seen.add(row["number"])
                self.completed += row["state"] == "COMPLETE"
                if self.on_run is not None:
                    self.on_run(row, snap)
        if self.on_update is not None and snap is not None:
            self.on_update(snap)
        return snap

    def _estimate_behind(self, snap: dict) -> bool:
        """Whether a run has completed whose worker has not yet written the estimate that counts
        it (it tells the trial, then writes the estimate): its line would show the posterior of
        the runs before it. Waited for at most :data:`ESTIMATE_WAIT_S` from when it is seen."""
        done = sum(r["state"] == "COMPLETE" for r in snap["trials"])
        est = snap["estimate"]
        if est is None or int(est.get("n_runs", 0)) >= done:
            self.behind_since = None
            return False
        now = time.monotonic()
        self.behind_since = self.behind_since or now
        return now - self.behind_since < ESTIMATE_WAIT_S


def _ended(row: dict) -> bool:
    return row["state"] in ("COMPLETE", "FAIL")


def prepare_study(
    settings: StudySettings, execution: Execution, name: str | None
) -> tuple[str, str]:
    """Create (or check and reuse) the study; returns its name and the storage URL."""
    if name is not None:
        check_study_name(name)  # before the storage is created
    if not isinstance(settings, ObjectiveSettings):  # an objective's is checked as it is made
        check_searchable(settings)
    url = execution.storage_url
    storage = open_storage(url, execution.heartbeat_s, other_tables=execution.other_tables)
    study = create_or_load_study(settings, storage, name)
    return study.study_name, url


def check_searchable(settings: StudySettings) -> None:
    """Refuse, before a study is written, what its workers would refuse on their first trial:
    a measured op whose test set has one answer (every run would be right by chance), or a
    level the chance rate puts out of reach. Draws the measured op's test set (nothing cached),
    not torch."""
    op = settings.task.measured_op
    chance = chance_rate(build_test_set(settings.task, op), settings.train.decoding)
    if chance >= 1:
        task = settings.task
        other = " or --split groups" if task.split != "groups" else ""
        raise ConfigError(
            f"the test set of {op} has one answer only (chance {chance:g} at --mod {task.n},"
            f" --split {task.split}, --split-seed {task.split_seed}): a run that learned nothing"
            f" would score 1.0; use a larger --mod, another --split-seed{other}",
            "split_seed",
        )
    policy_settings(settings, chance)


def worker_trials(execution: Execution) -> int:
    """Trials each worker of ``execution`` trains at once (:meth:`Execution.trials_on` of the
    device it will find), read without starting torch: a GPU where the device is ``cuda`` or
    ``auto`` and the NVIDIA driver sees one."""
    device = execution.device
    gpu = device.startswith("cuda") or (device == "auto" and any(NVIDIA_GPUS.glob("*")))
    return execution.trials_on("cuda" if gpu else "cpu")


def worker_devices(execution: Execution) -> list[str]:
    """The device of each worker process; more workers than the machine runs at once (one a
    core on the CPU, one a GPU on CUDA) are refused unless ``execution.oversubscribe``. A device
    other than ``cpu`` is checked by :func:`probe_device` (a child process: torch's import), but
    ``auto`` where no NVIDIA driver is loaded: that is the CPU, and each worker says so itself."""
    workers, device = execution.workers, execution.device
    cpu_only = device == "cpu" or (device == "auto" and not any(NVIDIA_GPUS.glob("*")))
    resolved = None if cpu_only else probe_device(device)
    if resolved is not None and resolved["type"] == "cuda":
        index = resolved["index"]
        count = 1 if index is not None else resolved["count"]
        if workers > count and not execution.oversubscribe:
            raise ConfigError(
                f"--workers {workers} on {device}: one worker a GPU (processes that share one slow "
                f"each other 3-4x), and there are {count}; use --workers {count} and "
                "--trials-at-once to fill a GPU, or --oversubscribe to start them anyway"
            )
        if index is not None:
            return [f"cuda:{index}"] * workers
        return [f"cuda:{i % count}" for i in range(workers)]
    cores = os.cpu_count() or 1
    if workers > cores and not execution.oversubscribe:
        raise ConfigError(
            f"--workers {workers} is more than this machine runs at once ({cores} cores, one "
            f"worker each): use --workers {cores} or fewer, or --oversubscribe to start them anyway"
        )
    return [device] * workers


def probe_device(name: str) -> dict:
    """Device ``name`` as torch resolves it on this machine (``type``, and on CUDA its ``index``
    and the GPUs' ``count``), asked of ``python -m threshold.search.device_probe``; a device torch
    refuses is a :class:`ConfigError` with its reason."""
    command = [sys.executable, "-m", "threshold.search.device_probe", name]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        why = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise ThresholdError(
            f"device {name!r} could not be checked: python -m threshold.search.device_probe "
            f"exited {done.returncode} ({why}); run it to see why"
        )
    answer = json.loads(lines[-1])
    if "error" in answer:
        raise ConfigError(answer["error"])
    return answer


def start_workers(
    name: str, execution: Execution, objective: bool = False, studies: list[str] | None = None
) -> list[subprocess.Popen]:
    """``execution.workers`` processes of ``threshold worker``, each with one torch thread (and
    on CUDA a GPU of its own); ``objective``: the study is an objective's, which each imports by
    its path and calls (:func:`threshold.search.objective_run.run_objective_worker`); ``studies``:
    each runs all of these together (:func:`threshold.search.shared.run_shared_worker`).
    Interrupted while starting them, it stops the ones it started; each worker also ends with
    this process (Linux), so none is left behind whatever stops this one."""
    devices = worker_devices(execution)
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    env[PARENT_ENV] = str(os.getpid())
    procs: list[subprocess.Popen] = []
    try:
        for dev in devices:
            own = replace(execution, workers=1, device=dev)
            job = {"study_name": name, "execution": own.to_json(), "objective": objective}
            if studies is not None:
                job["studies"] = list(studies)
            command = [sys.executable, "-m", "threshold.cli.worker_process", json.dumps(job)]
            procs.append(subprocess.Popen(command, env=env))
    except BaseException:
        stop_workers(procs)
        raise
    return procs


def die_with_parent() -> None:
    """In a worker started by :func:`start_workers`: end (SIGTERM, so a running trial is marked
    failed) when the process that started it ends, even if that one was killed outright."""
    parent = os.environ.get(PARENT_ENV)
    if parent is None or not sys.platform.startswith("linux"):
        return
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    if os.getppid() != int(parent):  # the parent ended before the line above
        os.kill(os.getpid(), signal.SIGTERM)


def stop_workers(procs: list[subprocess.Popen], grace_s: float = 60) -> None:
    """Interrupt workers (their running trials are marked failed), then kill any that hang."""
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    for p in procs:
        try:
            p.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def snapshot(storage: BaseStorage | str, name: str) -> dict:
    """Trials (size, parameters, seed, accuracy, time, state, progress), the estimate, the
    answer, located or bound (:attr:`~threshold.search.record.StudyView.answer`), and the
    study's budget of runs."""
    view = read_study(storage, name)
    rows = [
        {
            "number": r.number,
            "state": r.state,
            "d_model": r.d_model,
            "params_total": r.params_total,
            "seed": r.seed,
            "accuracy": r.value,
            "stop_reason": r.stop_reason,
            "seconds": r.seconds,
            "step": r.last_step,
            "val_accuracy": r.val_accuracy,
        }
        for r in view.runs
    ]
    estimate = view.estimate.to_dict() if view.estimate is not None else None
    return {
        "study": name,
        "trials": rows,
        "estimate": estimate,
        "answer": view.answer,
        "n_trials": len(view.completed),
        "budget": view.settings.search.budget,
        "size_name": getattr(view.settings, "size_name", "d"),  # an objective's, in its words
    }
