"""Pretraining for transfer: train on a source mixture, then continue on the target.

The source task (:func:`threshold.config.pretrain_task`) is the target's task with other ops, so
both share the vocabulary and their held-out groups. Pretrained models are cached on disk
(``<cache>/pretrained/<key>.ckpt``, the key hashing the source task, model and training
settings), so a transfer run, a search with ``--pretrain`` and a retried trial train each source
model once; the ones not cached yet train together, as one call of the engine. The continuation
uses a fresh optimizer (docs/science.md, "Analyses").
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from threshold.config import ModelConfig, TrainConfig
from threshold.errors import CheckpointError
from threshold.model import RecurrentTransformer
from threshold.tasks import TaskConfig, default_cache_dir, load_task_data
from threshold.train.checkpoint import load_checkpoint, save_checkpoint
from threshold.train.engine import train_runs
from threshold.train.run import Progress, Run

__all__ = ["Pretrained", "pretrained", "pretrained_many"]

log = logging.getLogger(__name__)

# Settings that change how fast a run goes, not what it learns: left out of the cache key.
_SPEED_ONLY = ("threads", "time_limit_s", "eval_batch_size")


def _key(source: TaskConfig, model_cfg: ModelConfig, cfg: TrainConfig) -> str:
    train = {k: v for k, v in cfg.to_dict().items() if k not in _SPEED_ONLY}
    blob = json.dumps([source.to_dict(), model_cfg.to_dict(), train], sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


@dataclass
class Pretrained:
    """A pretrained source model, its test metrics and where its checkpoint lies."""

    model: RecurrentTransformer
    metrics: dict  # the source run's test accuracies, steps, stop reason
    path: Path  # the cached checkpoint
    reused: bool  # True: read from the cache, not trained now


def pretrained(
    source: TaskConfig,
    model_cfg: ModelConfig,
    cfg: TrainConfig,
    cache_dir: Path | None = None,
    on_progress: Callable[[Progress], None] | None = None,
    device="cpu",
) -> Pretrained:
    """The model trained on ``source`` with ``cfg``: from the cache, else trained and cached."""
    report = None if on_progress is None else (lambda _, p: on_progress(p))
    return pretrained_many(source, [(model_cfg, cfg)], cache_dir, report, device)[0]


def pretrained_many(
    source: TaskConfig,
    configs: list[tuple[ModelConfig, TrainConfig]],
    cache_dir: Path | None = None,
    on_progress: Callable[[int, Progress], None] | None = None,
    device="cpu",
) -> list[Pretrained]:
    """:func:`pretrained` of each (model config, training config): the cached ones read, the
    others trained together and cached; in the order of ``configs``."""
    cache_dir = default_cache_dir() if cache_dir is None else Path(cache_dir)
    paths = [cache_dir / "pretrained" / f"{_key(source, m, c)}.ckpt" for m, c in configs]
    out: list[Pretrained | None] = [None] * len(configs)
    for i, path in enumerate(paths):
        if path.exists():
            try:
                ckpt = load_checkpoint(path)
                out[i] = Pretrained(ckpt.build_model().train(), ckpt.metrics, path, reused=True)
            except CheckpointError as e:
                log.warning("retraining %s: %s", path, e)
    missing = [i for i, p in enumerate(out) if p is None]
    if missing:
        data = load_task_data(source, cache_dir)
        runs = [Run(configs[i][0], data, configs[i][1]) for i in missing]
        report = None if on_progress is None else (lambda k, p: on_progress(missing[k], p))
        for i, result in zip(missing, train_runs(runs, device, report), strict=True):
            metrics = result.metrics()
            save_checkpoint(paths[i], result.model, source, configs[i][1].to_dict(), metrics)
            out[i] = Pretrained(result.model, metrics, paths[i], reused=False)
    return out  # type: ignore[return-value]
