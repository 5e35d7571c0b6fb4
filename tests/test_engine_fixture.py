"""Studies and checkpoints written before the one training engine still load, report and score as
they did (tests/fixtures/before-engine, written by 7ec59fd: see its README)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import optuna
import pytest
from optuna.trial import TrialState

from threshold.search import record
from threshold.search.artifacts import trial_checkpoint
from threshold.search.record import study_rows
from threshold.search.study import open_storage
from threshold.tasks import load_task_data
from threshold.train.checkpoint import load_checkpoint
from threshold.train.evaluate import evaluate_greedy

FIXTURE = Path(__file__).parent / "fixtures" / "before-engine"


@pytest.fixture
def before(tmp_path, monkeypatch) -> str:
    """A copy of the old study (its checkpoints beside it); the URL of its storage."""
    monkeypatch.delenv("THRESHOLD_ARTIFACTS", raising=False)
    shutil.copy(FIXTURE / "study.db", tmp_path / "study.db")
    shutil.copytree(FIXTURE / "artifacts", tmp_path / "artifacts")
    return f"sqlite:///{tmp_path}/study.db"


def _greedy(checkpoint, cache: Path) -> float:
    data = load_task_data(checkpoint.task_config, cache)
    seqs = data.test["max"]
    answer_ok, _ = evaluate_greedy(
        checkpoint.build_model(), seqs, checkpoint.task_config.vocab.eos_id
    )
    return round(float(np.mean(answer_ok)), 4)


def test_an_old_study_reports_its_stored_estimate(before):
    (row,) = study_rows(open_storage(before, create=False))
    (old,) = json.loads((FIXTURE / "status-before.json").read_text())
    assert row["study"] == old["study"] == "before"
    assert row["n_complete"] == old["n_complete"] == 3
    assert row["estimate"] == old["estimate"]


def test_old_checkpoints_load_and_score_as_they_did(before, tmp_path):
    study = optuna.load_study(study_name="before", storage=before)
    done = [t for t in study.get_trials() if t.state == TrialState.COMPLETE]
    assert len(done) == 3
    scores = []
    for t in done:
        checkpoint = trial_checkpoint(study, t.number, before)
        stored = json.loads(t.user_attrs[record.ACCURACY])["max"]
        assert _greedy(checkpoint, tmp_path) == stored, t.number
        scores.append(stored)
    assert max(scores) > 0.5  # the old runs learned something: the comparison can fail
    old = load_checkpoint(FIXTURE / "model.ckpt")
    assert _greedy(old, tmp_path) == old.metrics["accuracy"]["max"] == 0.62
