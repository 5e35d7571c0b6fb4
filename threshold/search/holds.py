"""Where the kill and signal tests strike a worker: tests only.

``THRESHOLD_TEST_HOLD`` naming a file makes a worker stop mid-run at a known point (:func:`hold`),
however short its runs are; ``THRESHOLD_TEST_HOLD_AT`` says where, ``THRESHOLD_TEST_HOLD_AFTER``
after how many completed trials. Unset (every real run), nothing here does anything.
"""

from __future__ import annotations

import os
import time
from dataclasses import replace
from pathlib import Path

import optuna
from optuna.trial import TrialState

from threshold.files import atomic_write
from threshold.interrupt import raise_if_interrupted
from threshold.tasks import TaskData

__all__ = ["HOLD_AFTER_ENV", "HOLD_AT_ENV", "HOLD_ENV", "held_at_evaluation", "hold"]

HOLD_ENV = "THRESHOLD_TEST_HOLD"  # tests only: see hold
HOLD_AT_ENV = "THRESHOLD_TEST_HOLD_AT"  # "deciding", "training" (default), "evaluating", "writing"
HOLD_AFTER_ENV = "THRESHOLD_TEST_HOLD_AFTER"  # completed trials before the hold (default 1)


def held_at_evaluation(data: TaskData, study: optuna.Study, runs: int) -> TaskData:
    """``data``, or with ``THRESHOLD_TEST_HOLD_AT=evaluating`` a copy whose test sets hold the
    worker (:func:`hold`) when the engine begins a run's test evaluation (its only reading of
    ``test.items()``): trained, not yet measured. Tests only; otherwise ``data`` itself."""
    if not os.environ.get(HOLD_ENV) or os.environ.get(HOLD_AT_ENV) != "evaluating":
        return data
    return replace(data, test=_HeldTestSets(data.test, study, runs, Path(os.environ[HOLD_ENV])))


class _HeldTestSets(dict):
    """Test sets whose ``items()`` holds first (:func:`hold`; see :func:`held_at_evaluation`)."""

    def __init__(self, sets: dict, study: optuna.Study, runs: int, path: Path) -> None:
        super().__init__(sets)
        self.hold = (study, runs, path)

    def items(self):
        hold(*self.hold)
        return super().items()


def hold(study: optuna.Study, runs: int, path: Path) -> None:
    """Where the kill and signal tests strike (``THRESHOLD_TEST_HOLD=path``): once each of the
    batch's ``runs`` has reported progress and none has ended (``THRESHOLD_TEST_HOLD_AT``
    ``training``, the default), once a run has trained as its test evaluation begins
    (``evaluating``), or once it is measured and before its result is written
    (``writing``), and the study has a completed trial or the batch trains several runs, write
    this process's id to ``path`` and wait, the runs unfinished and their trials running
    (heartbeats beating), until a signal ends it. ``THRESHOLD_TEST_HOLD_AFTER=N``: once the
    study has N completed trials (default 1)."""
    after = int(os.environ.get(HOLD_AFTER_ENV, "1"))
    done = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    if runs == 1 and len(done) < after:
        return
    with atomic_write(path, text=True) as f:  # whole when it appears
        f.write(f"{os.getpid()}\n")
    while True:
        raise_if_interrupted()
        time.sleep(0.05)
