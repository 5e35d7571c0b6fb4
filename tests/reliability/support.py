"""What the reliability tests share: one tiny study, its uninterrupted outcome, and polling.

The study is what ``threshold find`` makes of ``FIND_ARGS`` (MAX mod 5 of depth 1, d 4..16, 100
steps a run, 4 runs), so the same settings can be created in-process, run by ``threshold worker``
processes or by ``threshold find`` itself, and every run compared with one uninterrupted
reference. Its runs take a second; a test that kills or signals a worker mid-run sets
``THRESHOLD_TEST_HOLD`` (:func:`hold_env`), where the worker stops and waits for it.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import optuna
from optuna.trial import TrialState

from threshold.search.spec import StudySettings
from threshold.search.study import SearchConfig, open_storage
from threshold.search.worker import HOLD_AFTER_ENV, HOLD_AT_ENV, HOLD_ENV
from threshold.tasks import TaskConfig
from threshold.train import TrainConfig

STEPS, BUDGET = 100, 4
# `threshold find` arguments that give SETTINGS; heartbeat 1 s, so a dead trial is stale after 3 s.
# Depth 1: 9-token sequences (depth 2: up to 60), whose decoding is most of a tiny run's CPU.
FIND_ARGS = ["--tasks", "max", "--mod", "5", "--depth", "1", "--n-train", "2000", "--n-test",
             "100", "--d-lo", "4", "--d-hi", "16", "--steps", str(STEPS), "--budget", str(BUDGET),
             "--heartbeat", "1"]  # fmt: skip
SETTINGS = StudySettings(
    TaskConfig(ops=("max",), n=5, depth=1, n_train=2000, n_test=100),
    TrainConfig(max_steps=STEPS, warmup_steps=STEPS // 10),  # the recipe's, fitted to the run
    SearchConfig(d_lo=4, d_hi=16, budget=BUDGET),
)
GRACE_S = 3 * 1 + 1.5  # three missed beats of 1 s, and a margin for the database clock (whole s)


def reader(url: str):
    """One storage connection for polling (a new one per poll is slow on a busy machine)."""
    return open_storage(url, heartbeat_s=1, create=False)


def trials(storage, name: str) -> list[optuna.trial.FrozenTrial]:
    return optuna.load_study(study_name=name, storage=storage).get_trials(deepcopy=False)


def wait_until(condition, timeout: float, what: str, every: float = 0.2):
    """Poll ``condition()`` until it returns something truthy; fail naming ``what``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


def hold_env(path: Path, at: str = "training", after: int = 1) -> dict:
    """The environment that makes a worker stop mid-run (``at`` "training"; "writing": trained,
    its result not yet written) once the study has ``after`` completed trials, write its process
    id to ``path`` and wait there (``threshold.search.holds.hold``)."""
    return {HOLD_ENV: str(path), HOLD_AT_ENV: at, HOLD_AFTER_ENV: str(after)}


def wait_for_hold(path: Path, proc: subprocess.Popen, timeout: float = 180) -> int:
    """The id of the worker process that stopped at its hold (``path``), once it has."""

    def held():
        if proc.poll() is not None:
            raise AssertionError(f"the process exited with {proc.returncode} before its hold")
        return path.exists() and int(path.read_text())

    return wait_until(held, timeout, "a worker to stop mid-run at its hold")


def running_in_training(storage, name: str, after_completed: int = 1):
    """A RUNNING trial whose worker has started training, once ``after_completed`` are done."""
    ts = trials(storage, name)
    if sum(t.state == TrialState.COMPLETE for t in ts) < after_completed:
        return None
    return next((t for t in ts if t.state == TrialState.RUNNING and "worker" in t.user_attrs), None)


def outcome(storage, name: str) -> tuple[list[tuple[int, int, float]], dict]:
    """Completed runs as sorted (d, seed, accuracy), and the study's stored estimate."""
    study = optuna.load_study(study_name=name, storage=storage)
    runs = sorted(
        (t.params["d_model"], t.user_attrs["seed"], t.value)
        for t in study.get_trials(deepcopy=False)
        if t.state == TrialState.COMPLETE
    )
    return runs, json.loads(study.user_attrs["estimate"])


def assert_same_estimate(got: dict, want: dict, path: str = "estimate") -> None:
    """Equal up to the last rounded digit: the runs are the same, only their order differs."""
    if isinstance(want, dict):
        assert isinstance(got, dict) and set(got) == set(want), path
        for key in want:
            assert_same_estimate(got[key], want[key], f"{path}.{key}")
    elif isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want), path
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            assert_same_estimate(g, w, f"{path}[{i}]")
    elif isinstance(want, float):
        assert math.isclose(got, want, rel_tol=2e-3, abs_tol=1e-9), (path, got, want)
    else:
        assert got == want, (path, got, want)


def cache_with_data(root: Path, shared: Path) -> Path:
    """A fresh cache directory whose generated data is the shared one (generated once)."""
    cache = root / "cache"
    cache.mkdir(parents=True, exist_ok=True)
    if not (cache / "data").exists():
        (cache / "data").symlink_to(shared / "data", target_is_directory=True)
    return cache


def popen_threshold(args, cwd: Path, log: Path, **env_extra) -> subprocess.Popen:
    """``threshold ARGS`` in its own session (so the test can kill its whole process group).

    Output goes to a file, not a pipe: orphaned workers may outlive the test's reading end.
    """
    env = dict(os.environ, THRESHOLD_CACHE=str(cwd / "cache"), **env_extra)
    with open(log, "w") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "threshold", *args], env=env, cwd=cwd, stdout=out,
            stderr=subprocess.STDOUT, text=True, start_new_session=True,
        )  # fmt: skip


def pid_alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie nobody reaps counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False
