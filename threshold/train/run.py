"""What one training run is: what goes in (:class:`Run`), what a callback sees while it trains
(:class:`Progress`) and what comes out (:class:`TrainResult`).

A :class:`Run` is what one training run needs (model config, data, :class:`TrainConfig`, and
optionally a model to continue, the transfer step); :func:`threshold.train.engine.train_runs`
trains a list of them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from threshold.config import ModelConfig, TrainConfig
from threshold.model import RecurrentTransformer
from threshold.tasks import TaskData

__all__ = ["STOP_REASONS", "Progress", "Run", "TrainResult"]

STOP_REASONS = ("learned", "stuck", "diverged", "max_steps", "time_limit")


@dataclass(frozen=True)
class Progress:
    """What a callback sees every few steps, and once as a run continues from a saved state."""

    step: int
    max_steps: int
    loss: float  # training loss, smoothed
    tokens_per_s: float  # non-padding tokens per second of training
    val_accuracy: dict[str, float]  # latest teacher-forced val answer accuracy per op
    resumed: bool = False  # the run has just continued from its saved state, at ``step``


@dataclass
class TrainResult:
    model: RecurrentTransformer
    steps: int
    stop_reason: str  # one of STOP_REASONS
    wall_s: float
    train_s: float  # seconds in the training steps it took part in, without evaluation
    # Its share of the process's CPU seconds (a pack's CPU split evenly among its members),
    # evaluation included; None when it continued from a state saved without it.
    cpu_s: float | None
    tokens: int  # non-padding tokens trained on
    accuracy: dict[str, float]  # greedy final-answer accuracy on each op's test set
    strict_accuracy: dict[str, float]  # the whole chain of thought right
    teacher_forced: dict[str, float]  # teacher-forced answer accuracy on test
    history: list[dict] = field(default_factory=list)
    sampled_accuracy: dict[str, float] = field(default_factory=dict)  # temperature 1, on test
    # The measured op's test accuracy at the config's checkpoint steps: {"step", "tokens",
    # "accuracy", "sampled_accuracy", "reached"}; a run that stopped earlier (learned or stuck)
    # carries its final accuracy to the later checkpoints, "reached" false.
    budget: list[dict] = field(default_factory=list)

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.train_s if self.train_s > 0 else 0.0

    def metrics(self) -> dict:
        """What a run measured, as every caller stores or prints it (JSON-ready)."""
        return {
            "accuracy": self.accuracy,
            "strict_accuracy": self.strict_accuracy,
            "sampled_accuracy": self.sampled_accuracy,
            "teacher_forced_accuracy": self.teacher_forced,
            "budget": self.budget,
            "steps": self.steps,
            "stop_reason": self.stop_reason,
            "wall_s": round(self.wall_s, 2),
            "cpu_s": None if self.cpu_s is None else round(self.cpu_s, 2),
            "tokens_per_s": round(self.tokens_per_s),
        }


@dataclass(frozen=True)
class Run:
    """One training run: a fresh model from ``cfg.seed``, or ``init`` continued (transfer).

    ``state``: where the run keeps its training state while it trains (none: nowhere); a run
    that finds one there continues from it, and the file is removed once the run is handed on.
    """

    model_cfg: ModelConfig
    data: TaskData
    cfg: TrainConfig
    init: RecurrentTransformer | None = None
    state: Path | None = None

    def state_key(self) -> dict:
        """What a saved state must have been written for to be continued by this run."""
        return {
            "model": self.model_cfg.to_dict(),
            "train": self.cfg.to_dict(),
            "data": self.data.config.to_dict(),
        }
