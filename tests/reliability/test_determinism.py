"""Determinism: the same settings and seed give identical metrics and weights, in separate processes
with their own data caches and string-hash seeds; another seed gives other runs.

Studies: every fault test (test_faults.py) ends with exactly the runs (d, seed, accuracy) of the
uninterrupted reference study, run in another process; here a study with another base seed does not.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace

import optuna
import torch
from optuna.trial import TrialState
from support import SETTINGS, outcome, reader

from threshold.config import Execution
from threshold.search.spec import StudySettings
from threshold.search.study import create_or_load_study, open_storage
from threshold.search.worker import run_worker
from threshold.train.checkpoint import load_checkpoint

# Depth 1 (9-token sequences): the runs are compared, and decoding depth 2 is most of their CPU.
TRAIN = ["train", "--tasks", "max,add", "--mod", "5", "--depth", "1", "--n-train", "2000",
         "--n-test", "100", "--d-model", "16", "--steps", "150", "--eval-every", "50",
         "--json"]  # fmt: skip
METRICS = ("accuracy", "strict_accuracy", "teacher_forced_accuracy", "steps", "stop_reason")


def test_same_seed_same_run_in_separate_processes_other_seed_differs(tmp_path):
    runs = {"a": ("0", "1"), "b": ("0", "2"), "c": ("1", "3")}  # name: (seed, PYTHONHASHSEED)
    reports, weights = {}, {}
    for names in (["a", "b"], ["c"]):  # no more processes at once than the 2 cores
        procs = {}
        for name in names:
            seed, hash_seed = runs[name]
            env = dict(os.environ, THRESHOLD_CACHE=str(tmp_path / f"cache-{name}"),
                       PYTHONHASHSEED=hash_seed)  # fmt: skip
            args = [*TRAIN, "--seed", seed, "--out", str(tmp_path / f"{name}.ckpt")]
            procs[name] = subprocess.Popen(
                [sys.executable, "-m", "threshold", *args], env=env, text=True,
                stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            )  # fmt: skip
        for name, proc in procs.items():
            out, err = proc.communicate(timeout=300)
            assert proc.returncode == 0, err
            reports[name] = {k: json.loads(out)[k] for k in METRICS}
            weights[name] = load_checkpoint(tmp_path / f"{name}.ckpt").state_dict
    assert reports["a"] == reports["b"]
    assert all(torch.equal(v, weights["b"][k]) for k, v in weights["a"].items())
    assert reports["a"] != reports["c"]
    assert not all(torch.equal(v, weights["c"][k]) for k, v in weights["a"].items())
    # The runs learned something, so equal metrics are not two models that learned nothing.
    assert max(reports["a"]["accuracy"].values()) > 0.1


def test_other_base_seed_gives_other_runs(tmp_path, shared_cache, reference):
    """The bracket of the reference study (d = 16, 4, 8) with base seed 1 instead of 0."""
    search = replace(SETTINGS.search, base_seed=1, budget=3)
    settings = StudySettings(SETTINGS.task, SETTINGS.train, search)
    url = f"sqlite:///{tmp_path}/s.db"
    name = create_or_load_study(settings, open_storage(url, heartbeat_s=1)).study_name
    run_worker(name, Execution(url, heartbeat_s=1, cache_dir=shared_cache))
    runs, _ = outcome(reader(url), name)
    first = optuna.load_study(study_name=reference.name, storage=reader(reference.url))
    bracket = sorted(
        (t.params["d_model"], t.user_attrs["seed"], t.value)
        for t in first.get_trials(deepcopy=False)[:3]
        if t.state == TrialState.COMPLETE
    )
    assert [d for d, _, _ in runs] == [d for d, _, _ in bracket] == [4, 8, 16]
    assert all(a[1] != b[1] for a, b in zip(runs, bracket, strict=True))  # other seeds
    assert [v for *_, v in runs] != [v for *_, v in bracket]  # and other accuracies
