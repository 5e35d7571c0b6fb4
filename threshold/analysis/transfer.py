"""Transfer: does pretraining on easy ops let a model learn a hard op at a smaller size?

For each seed, one model of size d is trained on the source mixture (e.g. MAX+MED) and then on
the target (e.g. ADD) with a fresh optimizer; a second model of the same size and seed is trained
on the target from scratch with the same step budget. The comparison is the target's greedy test
accuracy of the two, seed by seed (paired: same initialisation seed and batch order on the
target). Pretrained source models come from the on-disk cache of :mod:`threshold.train.pretrain`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np

from threshold.config import TrainConfig, pretrain_task, transfer_model_config
from threshold.tasks import TaskConfig, load_task_data
from threshold.train import Progress, Run, TrainResult, train_runs
from threshold.train.pretrain import pretrained_many

__all__ = ["TransferRun", "summarize", "transfer_experiment"]


@dataclass(frozen=True)
class TransferRun:
    seed: int
    source_accuracy: dict[str, float]  # the pretrained model on the source ops' test sets
    source_reused: bool  # the pretrained model came from the cache
    transfer_accuracy: dict[str, float]  # after continuing on the target
    scratch_accuracy: dict[str, float]  # trained on the target from scratch
    transfer_steps: int
    scratch_steps: int
    transfer_curve: list[tuple[int, float]]  # (step, teacher-forced val accuracy of the measure)
    scratch_curve: list[tuple[int, float]]


def _curve(result: TrainResult, measure: str) -> list[tuple[int, float]]:
    return [(h["step"], round(h["val_tf"][measure], 4)) for h in result.history]


def transfer_experiment(
    source_ops: tuple[str, ...],
    target: TaskConfig,
    d_model: int,
    seeds: list[int],
    cfg: TrainConfig,
    pretrain_cfg: TrainConfig | None = None,
    cache_dir: Path | None = None,
    on_event: Callable[[str, int, Progress | None], None] | None = None,
    device="cpu",
) -> list[TransferRun]:
    """Pretrain-then-train and from-scratch runs at ``d_model`` for each seed: the pretraining
    of every seed as one call of the engine, then the transfer and scratch runs of every seed
    as another.

    ``on_event(phase, seed, progress)`` is called with phase "pretrain", "transfer" or "scratch"
    as each run progresses (``progress`` None when a phase starts).
    """
    source = pretrain_task(target, source_ops)
    model_cfg = transfer_model_config(source, target, d_model)
    pretrain_cfg = cfg if pretrain_cfg is None else pretrain_cfg
    data = load_task_data(target, cache_dir)
    measure = target.measured_op

    def notify(phases: list[tuple[str, int]]):
        if on_event is None:
            return None
        for phase, seed in phases:
            on_event(phase, seed, None)
        return lambda i, progress: on_event(*phases[i], progress)

    sources = pretrained_many(
        source,
        [(model_cfg, replace(pretrain_cfg, seed=seed)) for seed in seeds],
        cache_dir,
        notify([("pretrain", seed) for seed in seeds]),
        device,
    )
    runs, phases = [], []
    for seed, pre in zip(seeds, sources, strict=True):
        run_cfg = replace(cfg, seed=seed)
        runs += [Run(model_cfg, data, run_cfg, pre.model), Run(model_cfg, data, run_cfg)]
        phases += [("transfer", seed), ("scratch", seed)]
    results = train_runs(runs, device, notify(phases))
    out = []
    for k, (seed, pre) in enumerate(zip(seeds, sources, strict=True)):
        moved, scratch = results[2 * k], results[2 * k + 1]
        out.append(
            TransferRun(
                seed=seed,
                source_accuracy=pre.metrics["accuracy"],
                source_reused=pre.reused,
                transfer_accuracy=moved.accuracy,
                scratch_accuracy=scratch.accuracy,
                transfer_steps=moved.steps,
                scratch_steps=scratch.steps,
                transfer_curve=_curve(moved, measure),
                scratch_curve=_curve(scratch, measure),
            )
        )
    return out


def summarize(runs: list[TransferRun], measure: str) -> dict:
    """Per-seed target accuracies with and without pretraining, their means and paired gain."""
    moved = np.array([r.transfer_accuracy[measure] for r in runs])
    scratch = np.array([r.scratch_accuracy[measure] for r in runs])
    gain = moved - scratch
    return {
        "measure": measure,
        "seeds": [r.seed for r in runs],
        "transfer": moved.round(4).tolist(),
        "scratch": scratch.round(4).tolist(),
        "transfer_mean": round(float(moved.mean()), 4),
        "scratch_mean": round(float(scratch.mean()), 4),
        "gain_mean": round(float(gain.mean()), 4),
        "gain_min": round(float(gain.min()), 4),
        "seeds_better": int((gain > 0).sum()),
        "runs": [asdict(r) for r in runs],
    }
