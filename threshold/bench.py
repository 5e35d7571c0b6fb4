"""Throughput benchmarks of training and decoding, so speed work has a baseline."""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np
import torch

from threshold.model import param_count
from threshold.tasks import TaskData
from threshold.train import (
    TrainConfig,
    batch_tensors,
    evaluate_greedy,
    init_model,
    make_optimizer,
    model_config_for,
    train_batches,
    train_step,
)

__all__ = ["bench_decode", "bench_train_steps"]


def bench_train_steps(
    data: TaskData, d_model: int, steps: int, batch_order: str = "binned", warmup: int = 10
) -> dict:
    """Training throughput at ``d_model``: steps/s, and non-padding and padded tokens/s."""
    cfg = TrainConfig(batch_order=batch_order)
    torch.set_num_threads(cfg.threads)
    model_cfg = model_config_for(data.config, d_model)
    model = init_model(model_cfg, seed=0)
    opt = make_optimizer(model, cfg)
    batches = train_batches(data.train, cfg)
    useful = padded = 0
    elapsed = 0.0
    for i in range(warmup + steps):
        t0 = time.perf_counter()
        index = next(batches)
        x, y = batch_tensors(data.train, index, data.vocab.pad_id, True)
        train_step(model, opt, x, y, cfg.grad_clip)
        if i >= warmup:
            elapsed += time.perf_counter() - t0
            useful += int(data.train.lengths[index].sum())
            padded += len(index) * int(data.train.lengths[index].max())
    return {
        "d_model": d_model,
        "params_total": param_count(model_cfg)["total"],
        "batch_order": batch_order,
        "steps": steps,
        "steps_per_s": steps / elapsed,
        "tokens_per_s": useful / elapsed,
        "padded_tokens_per_s": padded / elapsed,
        "padding_share": 1 - useful / padded,
    }


def bench_decode(data: TaskData, d_model: int, n_sequences: int) -> dict:
    """Greedy decoding throughput of an untrained model that is made to decode full traces.

    An untrained model rarely writes the end token, so every sequence runs to the context cap:
    this is the worst case a search meets on its smallest models.
    """
    model = init_model(model_config_for(data.config, d_model), seed=0)
    op = data.config.measured_op
    seqs = data.test[op].subset(np.arange(min(n_sequences, len(data.test[op]))))
    t0 = time.perf_counter()
    evaluate_greedy(model, seqs, data.vocab.eos_id)
    elapsed = time.perf_counter() - t0
    return {
        "d_model": d_model,
        "sequences": len(seqs),
        "sequences_per_s": len(seqs) / elapsed,
        "wall_s": elapsed,
    }


def run_all(
    data: TaskData, d_models: list[int], steps: int, on_item: Callable[[str], None] | None = None
) -> dict:
    """Training steps at every d, bucketed and random batches at each, and decoding throughput."""
    out: dict = {"train": [], "decode": []}
    for d in d_models:
        for order in ("binned", "random"):
            if on_item:
                on_item(f"train d={d} {order}")
            out["train"].append(bench_train_steps(data, d, steps, order))
        if on_item:
            on_item(f"decode d={d}")
        out["decode"].append(bench_decode(data, d, 512))
    return out
