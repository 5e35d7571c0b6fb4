"""A trial's result does not depend on how many trials its worker trained at once (issue 31).

Each trial that a worker trained four at a time is trained again alone, from what the trial
recorded (its size and seed): on the CPU the value, every accuracy and the step count agree
exactly, under the fast recipe (greedy value) and the paper recipe (sampled value: the decoding
that once took the first member's seed for the whole batch).
"""

from __future__ import annotations

import json
from dataclasses import replace

import optuna
import pytest
from optuna.trial import TrialState

from threshold.config import Execution
from threshold.search import record
from threshold.search.spec import StudySettings
from threshold.search.study import create_or_load_study, open_storage
from threshold.search.worker import run_worker
from threshold.tasks import load_task_data
from threshold.train import Run, train_runs


@pytest.mark.parametrize("recipe", ["fast", "paper"])
def test_a_trial_trained_four_at_a_time_is_the_trial_trained_alone(tmp_path, recipe, monkeypatch):
    monkeypatch.setenv("THRESHOLD_ARTIFACTS", str(tmp_path / "art"))
    extra = {"window": 32, "batch_size": 16} if recipe == "paper" else {}
    settings = StudySettings.from_options(
        "max", mod=5, n_train=1000, n_test=100, steps=80, d_lo=4, d_hi=16, budget=4,
        precision=1.001, recipe=recipe, **extra,
    )  # fmt: skip
    url = f"sqlite:///{tmp_path}/s.db"
    name = create_or_load_study(settings, open_storage(url), "four").study_name
    assert run_worker(name, Execution(url, 1, 4, "cpu", 5, tmp_path)) == 4

    data = load_task_data(settings.task, tmp_path)
    trials = optuna.load_study(study_name=name, storage=url).get_trials()
    done = [t for t in trials if t.state == TrialState.COMPLETE]
    assert len(done) == 4
    for t in done:
        cfg = replace(settings.train, seed=t.user_attrs["seed"])
        alone = train_runs([Run(settings.model_config(t.params["d_model"]), data, cfg)], "cpu")[0]
        metrics = alone.metrics()
        scored = metrics["sampled_accuracy" if recipe == "paper" else "accuracy"]["max"]
        assert t.value == scored, (t.number, t.value, scored)
        for key, field in (
            (record.ACCURACY, "accuracy"),
            (record.SAMPLED_ACCURACY, "sampled_accuracy"),
        ):
            assert json.loads(t.user_attrs[key]) == metrics[field], (t.number, field)
        assert t.user_attrs[record.STEPS] == alone.steps
