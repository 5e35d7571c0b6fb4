"""Pretraining for transfer: train on a source mixture, then continue on the target.

The source task is the target's task with other ops (same testbed, modulus, grammar and split
seeds), so both share the vocabulary and their held-out groups. Pretrained models are cached on
disk (``<cache>/pretrained/<key>.ckpt``, the key hashing the source task, model and training
settings), so a transfer run, a search with ``--pretrain`` and a retried trial train each source
model once. The continuation uses a fresh optimizer (domain.md).
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from threshold.checkpoint import load_checkpoint, save_checkpoint
from threshold.errors import CheckpointError, ConfigError
from threshold.model import ModelConfig, RecurrentTransformer
from threshold.tasks import TaskConfig, default_cache_dir, load_task_data
from threshold.train import Progress, TrainConfig, train

__all__ = ["Pretrained", "pretrain_task", "pretrained", "transfer_model_config"]

log = logging.getLogger(__name__)

# Settings that change how fast a run goes, not what it learns: left out of the cache key.
_SPEED_ONLY = ("threads", "time_limit_s", "eval_batch_size")


def pretrain_task(target: TaskConfig, ops: tuple[str, ...]) -> TaskConfig:
    """The source task: ``target`` with the ops ``ops`` (measured on its hardest op)."""
    if not ops:
        raise ConfigError("the pretraining mixture is empty: name at least one op, e.g. max,med")
    return replace(target, ops=tuple(ops), measure=None, weights=None, match_exposure=False)


def transfer_model_config(
    source: TaskConfig, target: TaskConfig, d_model: int, **kwargs
) -> ModelConfig:
    """One model config that fits both tasks (``kwargs``: the recipe's model-side values);
    refuses tasks with different vocabularies."""
    if source.vocab.tokens != target.vocab.tokens:
        raise ConfigError(
            f"transfer from {source.testbed} {source.n} to {target.testbed} {target.n} is not "
            "possible: their vocabularies differ; use the same testbed and modulus"
        )
    n_ctx = max(source.max_len, target.max_len)
    return ModelConfig(vocab_size=len(target.vocab), n_ctx=n_ctx, d_model=d_model, **kwargs)


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
    cache_dir = default_cache_dir() if cache_dir is None else Path(cache_dir)
    path = cache_dir / "pretrained" / f"{_key(source, model_cfg, cfg)}.ckpt"
    if path.exists():
        try:
            ckpt = load_checkpoint(path)
            return Pretrained(ckpt.build_model().train(), ckpt.metrics, path, reused=True)
        except CheckpointError as e:
            log.warning("retraining %s: %s", path, e)
    data = load_task_data(source, cache_dir)
    result = train(model_cfg, data, cfg, on_progress=on_progress, device=device)
    metrics = {
        "accuracy": result.accuracy,
        "strict_accuracy": result.strict_accuracy,
        "steps": result.steps,
        "stop_reason": result.stop_reason,
        "train_s": round(result.wall_s, 2),
    }
    save_checkpoint(path, result.model, source, cfg.to_dict(), metrics)
    return Pretrained(result.model, metrics, path, reused=False)
