"""Real workers on real storage: processes share a study; a killed worker loses nothing."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time

import optuna
import pytest
from optuna.trial import TrialState
from reliability.support import hold_env, wait_for_hold

from threshold import ThresholdError
from threshold.config import Execution
from threshold.search import find
from threshold.search.artifacts import trial_checkpoint
from threshold.search.notes import NoteRender
from threshold.search.spec import StudySettings
from threshold.search.study import SearchConfig, create_or_load_study, open_storage
from threshold.search.worker import run_worker
from threshold.tasks import TaskConfig
from threshold.train import TrainConfig

# Depth 1: 9-token sequences (depth 2: up to 60), whose decoding is most of a tiny run's CPU.
TASK = TaskConfig(ops=("max",), n=5, depth=1, n_train=2000, n_test=100, n_val=50)


def make_study(url: str, name: str, steps: int, budget: int) -> StudySettings:
    from threshold.search.study import create_or_load_study

    # A precision no run count can reach: the budget ends the study.
    search = SearchConfig(d_lo=4, d_hi=16, budget=budget, precision=1.001)
    settings = StudySettings(TASK, TrainConfig(max_steps=steps, eval_every=50), search)
    create_or_load_study(settings, open_storage(url, heartbeat_s=1), name)
    return settings


def start_worker(url: str, name: str, cache, env_extra=None, batch=1) -> subprocess.Popen:
    env = dict(os.environ, THRESHOLD_CACHE=str(cache), THRESHOLD_ARTIFACTS=str(cache / "art"))
    env.update(env_extra or {})
    return subprocess.Popen(
        [sys.executable, "-m", "threshold", "worker", "--study", name, "--storage", url,
         "--heartbeat", "1", "--trials-at-once", str(batch), "--device", "cpu"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip


def trials_of(url: str, name: str):
    return optuna.load_study(study_name=name, storage=url).get_trials()


def check_recorded_once(trials, budget: int) -> list:
    done = [t for t in trials if t.state == TrialState.COMPLETE]
    assert len(done) == budget
    keys = [(t.params["d_model"], t.user_attrs["replicate"]) for t in done]
    assert len(set(keys)) == len(keys), keys
    seeds = [t.user_attrs["seed"] for t in done]
    assert len(set(seeds)) == len(seeds)
    for t in done:
        assert 0.0 <= t.value <= 1.0
        assert t.user_attrs["checkpoint_artifact"]
        assert json.loads(t.user_attrs["decision"])
    return done


@pytest.mark.slow  # 3 processes on 2 cores; the default suite has 2 (reliability/test_concurrency)
def test_three_workers_share_a_postgres_study(postgres_url, tmp_path):
    name, budget = "pg-three", 6
    make_study(postgres_url, name, steps=40, budget=budget)
    procs = [start_worker(postgres_url, name, tmp_path) for _ in range(3)]
    outs = [p.communicate(timeout=300)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], outs
    trials = trials_of(postgres_url, name)
    done = check_recorded_once(trials, budget)
    # Two workers may start a trial at the same moment when one slot is left: the later one is
    # cancelled before training (FAIL, marked), never run twice.
    for t in trials:
        if t.state != TrialState.COMPLETE:
            assert t.state == TrialState.FAIL and "threshold:cancel" in t.system_attrs
            assert "seed" not in t.user_attrs and t.user_attrs["cancelled"].startswith("study done")
    # More than one process did the work.
    assert len({t.user_attrs["worker"] for t in done}) >= 2
    study = optuna.load_study(study_name=name, storage=postgres_url)
    assert json.loads(study.user_attrs["estimate"])["n_runs"] == budget


@pytest.mark.slow  # its fast form: reliability/test_faults.py (SIGKILL mid-trial, checkpoints)
def test_killed_worker_loses_no_completed_trial(tmp_path, monkeypatch):
    url, name, budget = f"sqlite:///{tmp_path}/s.db", "kill", 5
    make_study(url, name, steps=600, budget=budget)
    procs = [start_worker(url, name, tmp_path) for _ in range(2)]
    deadline = time.monotonic() + 240
    victim = None
    while victim is None and time.monotonic() < deadline:
        for t in trials_of(url, name):
            # Kill a worker once its trial has trained for a while (it has reported progress).
            if t.state == TrialState.RUNNING and t.intermediate_values and "worker" in t.user_attrs:
                victim = t
                break
        time.sleep(0.2)
    assert victim is not None, "no trial reached mid-training"
    pid = int(victim.user_attrs["worker"].rsplit(":", 1)[1])
    os.kill(pid, signal.SIGKILL)
    survivor = next(p for p in procs if p.pid != pid)
    out = survivor.communicate(timeout=400)[0]
    assert survivor.returncode == 0, out
    trials = trials_of(url, name)
    killed = next(t for t in trials if t.number == victim.number)
    assert killed.state == TrialState.FAIL
    retry = [t for t in trials if t.system_attrs.get("failed_trial") == victim.number]
    assert len(retry) == 1 and retry[0].state == TrialState.COMPLETE
    assert retry[0].params == killed.params
    assert retry[0].user_attrs["seed"] == victim.user_attrs["seed"]
    done = check_recorded_once(trials, budget)
    monkeypatch.setenv("THRESHOLD_ARTIFACTS", str(tmp_path / "art"))
    study = optuna.load_study(study_name=name, storage=url)
    for t in done:
        ckpt = trial_checkpoint(study, t.number, url)
        assert ckpt.model_config.d_model == t.params["d_model"]
        assert ckpt.train_config["seed"] == t.user_attrs["seed"]
    with pytest.raises(ThresholdError, match=f"trial {victim.number} .* has no checkpoint"):
        trial_checkpoint(study, victim.number, url)
    with pytest.raises(ThresholdError, match="trial 99 is not in study"):
        trial_checkpoint(study, 99, url)


def test_a_batch_worker_trains_its_trials_together(tmp_path):
    url, name, budget = f"sqlite:///{tmp_path}/s.db", "batch", 6
    make_study(url, name, steps=40, budget=budget)
    proc = start_worker(url, name, tmp_path, batch=4)
    out = proc.communicate(timeout=300)[0]
    assert proc.returncode == 0, out
    trials = trials_of(url, name)
    done = check_recorded_once(trials, budget)
    assert len({t.user_attrs["worker"] for t in done}) == 1
    # The first four were asked together: all began before the first of them ended.
    first = sorted(done, key=lambda t: t.number)[:4]
    assert max(t.datetime_start for t in first) < min(t.datetime_complete for t in first)
    assert all(t.user_attrs["steps"] == 40 and t.intermediate_values for t in done)
    # Its output (a pipe, not a terminal) says each run as it ends, one line each.
    ended = [line for line in out.splitlines() if ": d = " in line and " accuracy " in line]
    assert sorted(int(line.split("trial ")[1].split(":")[0]) for line in ended) == sorted(
        t.number for t in done
    ), out


def test_a_killed_batch_worker_has_its_unfinished_trials_retried(tmp_path):
    url, name, budget = f"sqlite:///{tmp_path}/s.db", "batch-kill", 4
    make_study(url, name, steps=100, budget=budget)
    # held once its batch of three has reported progress (at step 50)
    victim = start_worker(url, name, tmp_path, hold_env(tmp_path / "held"), batch=3)
    wait_for_hold(tmp_path / "held", victim)
    running = [t for t in trials_of(url, name) if t.state == TrialState.RUNNING]
    assert len(running) == 3 and all(t.intermediate_values for t in running), running
    victim.kill()
    victim.wait()
    survivor = start_worker(url, name, tmp_path, batch=2)
    out = survivor.communicate(timeout=400)[0]
    assert survivor.returncode == 0, out
    trials = trials_of(url, name)
    for t in running:
        killed = next(x for x in trials if x.number == t.number)
        assert killed.state == TrialState.FAIL
        (retry,) = [x for x in trials if x.system_attrs.get("failed_trial") == t.number]
        assert retry.state == TrialState.COMPLETE
        assert retry.params == t.params and retry.user_attrs["seed"] == t.user_attrs["seed"]
    check_recorded_once(trials, budget)


def test_find_refuses_negative_workers(tmp_path, cli):
    result = cli(["find", "--workers", "-1", "--storage", f"sqlite:///{tmp_path}/s.db"])
    assert result.exit_code == 2
    assert result.stderr.strip() == "error: --workers -1 is not allowed: use 1 or more"
    assert not (tmp_path / "s.db").exists()


def test_find_with_no_workers_creates_the_study_and_trains_nothing(tmp_path, cli):
    """`find --workers 0`: the study for workers started elsewhere (docs/cluster.md)."""
    url = f"sqlite:///{tmp_path}/s.db"
    args = ["find", "--tasks", "max", "--mod", "5", "--d-lo", "4", "--d-hi", "16", "--budget",
            "4", "--storage", url, "--study", "later", "--workers", "0", "--json"]  # fmt: skip
    result = cli(args)
    assert result.exit_code == 0, (result.stderr, result.exception)
    report = json.loads(result.stdout)
    assert report["study"] == "later" and report["n_trials"] == 0
    assert report["transition"] is None
    assert trials_of(url, "later") == []
    assert not (tmp_path / "cache").exists()  # no data made, nothing trained
    again = cli(args)  # the same settings again: found, not made twice
    assert again.exit_code == 0 and json.loads(again.stdout)["study"] == "later"
    other = cli([*args[:-3], "--d-hi", "20", "--workers", "0"])  # a new budget alone is taken
    assert other.exit_code == 2 and "later" in other.stderr


def test_auto_without_an_nvidia_driver_is_the_cpu_asked_of_no_child(monkeypatch, tmp_path):
    """`--device auto` where no NVIDIA driver is loaded: each worker takes the CPU itself, and no
    child process imports torch to say so (3-4 s of CPU at every start of workers)."""
    monkeypatch.setattr(find, "NVIDIA_GPUS", tmp_path / "no-driver")
    monkeypatch.setattr(find, "probe_device", lambda name: pytest.fail(f"probed {name}"))
    assert find.worker_devices(Execution(workers=2, device="auto")) == ["auto", "auto"]
    with pytest.raises(ThresholdError, match="more than this machine runs at once"):
        find.worker_devices(Execution(workers=(os.cpu_count() or 1) + 1, device="auto"))


def test_a_trial_told_by_another_worker_meanwhile_leaves_this_worker_running(
    tmp_path, monkeypatch, caplog
):
    """Another worker tells a running trial of this one (fails it as stale, its beats unheard):
    this worker trains on, writes nothing more of that run, and tells its other runs."""
    url = f"sqlite:///{tmp_path}/s.db"
    monkeypatch.setenv("THRESHOLD_ARTIFACTS", str(tmp_path / "art"))
    settings = StudySettings.from_options(
        "max", mod=5, depth=1, n_train=1000, n_test=100, steps=60, d_lo=4, d_hi=16, budget=3
    )
    name = create_or_load_study(settings, open_storage(url)).study_name
    other = optuna.load_study(study_name=name, storage=url)  # the other worker's view

    def markdown(*args, **kwargs) -> str:  # the note, rewritten as the first run ends
        for t in other.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
            other._storage.set_trial_state_values(t._trial_id, TrialState.FAIL)
        return ""

    render = NoteRender(markdown, None, lambda *args: "")
    with caplog.at_level(logging.WARNING, logger="threshold.search.batch"):
        ran = run_worker(name, Execution(url, 1, 2, "cpu", 5, tmp_path), 2, notes=render)
    assert ran == 2
    states = sorted(t.state.name for t in other.get_trials(deepcopy=False))
    assert states == ["COMPLETE", "FAIL"]  # the first told here, the second by the other
    assert any("told by another worker meanwhile" in r.getMessage() for r in caplog.records)
