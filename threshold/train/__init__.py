"""The training engine and everything around it: one engine trains every run of the tool.

- :mod:`~threshold.train.engine`: :func:`train_runs` (a single run is a list of one).
- :mod:`~threshold.train.run`: :class:`Run`, :class:`Progress`, :class:`TrainResult`.
- :mod:`~threshold.train.pack`: how runs are stacked, resumed and saved.
- :mod:`~threshold.train.checks`: the stopping rules and the budget checkpoints.
- :mod:`~threshold.train.ensemble`: members stacked and padded into one model, the forward pass.
- :mod:`~threshold.train.optimizer`: AdamW per member over the stack, the learning-rate schedule.
- :mod:`~threshold.train.evaluate`: teacher-forced answers, greedy and sampled decoding.
- :mod:`~threshold.train.batches`: which sequences (or stream windows) make each step's batch.
- :mod:`~threshold.train.memory`: how many members fit in a pack.
- :mod:`~threshold.train.checkpoint`, :mod:`~threshold.train.pretrain`,
  :mod:`~threshold.train.device`, :mod:`~threshold.train.bench`: files, transfer's source
  models, where to train, and throughput benchmarks.

Knows no Optuna and no task by name.
"""

from threshold.config import TrainConfig, model_config_for
from threshold.train.batches import make_batches, train_batches
from threshold.train.checks import is_stuck
from threshold.train.engine import init_model, train, train_runs
from threshold.train.evaluate import (
    chance_rate,
    evaluate_decode,
    evaluate_greedy,
    evaluate_teacher_forced,
    majority_rate,
)
from threshold.train.optimizer import lr_factor
from threshold.train.run import STOP_REASONS, Progress, Run, TrainResult

__all__ = [
    "STOP_REASONS",
    "Progress",
    "Run",
    "TrainConfig",
    "TrainResult",
    "chance_rate",
    "evaluate_decode",
    "evaluate_greedy",
    "evaluate_teacher_forced",
    "init_model",
    "is_stuck",
    "lr_factor",
    "majority_rate",
    "make_batches",
    "model_config_for",
    "train",
    "train_batches",
    "train_runs",
]
