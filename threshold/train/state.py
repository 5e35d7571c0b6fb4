"""A run's training state on disk, so an interrupted run goes on where it was instead of anew.

The engine writes the state of each run that names a file (:attr:`threshold.train.Run.state`)
every ``save_every_s`` seconds of training (a minute by default), and removes it once the run
has been handed on. A run that starts and finds its file continues from it: its weights, its
AdamW moments and step count, its smoothed loss, its step, tokens and timings, its history and
budget checkpoints. Its batches are drawn again up to that step from its own seed, so a resumed
run is the uninterrupted run, bit for bit on the CPU. A file written for another model, recipe
or data is set aside with a warning and the run starts from step 0. Writes go to a temporary
file renamed into place.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

import torch

from threshold.files import atomic_write

__all__ = ["RunState", "load_state", "save_state"]

log = logging.getLogger(__name__)

FORMAT = 1


@dataclass
class RunState:
    """One run's state after ``step`` steps; the tensors are laid out like a one-member
    :class:`~threshold.train.ensemble.Ensemble` of the run's own width."""

    key: dict  # what the state belongs to: model, training and data settings
    weights: dict[str, torch.Tensor]
    exp_avg: dict[str, torch.Tensor]
    exp_avg_sq: dict[str, torch.Tensor]
    optimizer_steps: float
    smooth_loss: float
    step: int
    tokens: int
    train_s: float
    wall_s: float
    history: list[dict]
    budget: list[dict]
    val_accuracy: dict[str, float]
    cpu_s: float | None = None  # none in states saved before it was kept: the CPU is unknown


def save_state(path: Path, state: RunState) -> None:
    """Write ``state`` to ``path`` atomically (a crash mid-write leaves the previous one)."""
    with atomic_write(path) as f:
        torch.save({"format": FORMAT, **vars(state)}, f)


def load_state(path: Path, key: dict) -> RunState | None:
    """The state saved at ``path`` for ``key``; None when there is none, or it is unreadable or
    for other settings (then it is renamed ``*.stale`` beside, kept for a look, and logged)."""
    if not path.exists():
        return None
    try:
        saved = torch.load(path, map_location="cpu", weights_only=True)
        if saved.pop("format") != FORMAT:
            raise ValueError("another format")
        state = RunState(**saved)
    except Exception as e:  # a torn or foreign file: the run starts anew, the file is kept
        return _set_aside(path, f"unreadable ({type(e).__name__}: {e})")
    if state.key != key:
        return _set_aside(path, "written for other settings")
    return state


def _set_aside(path: Path, why: str) -> None:
    stale = path.with_name(path.name + ".stale")
    os.replace(path, stale)
    log.warning(
        "training state %s is %s: the run starts from step 0 (kept as %s)", path, why, stale
    )
    return None
