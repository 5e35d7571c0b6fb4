"""Throughput benchmarks of training and decoding, so speed work has a baseline."""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np
import torch

from threshold.config import TrainConfig, model_config_for, param_count
from threshold.tasks import TaskData
from threshold.train.engine import init_model, start_pack, step_pack
from threshold.train.evaluate import evaluate_greedy
from threshold.train.layout import CHUNK
from threshold.train.memory import pack_bytes
from threshold.train.run import Run

__all__ = [
    "bench_batched",
    "bench_decode",
    "bench_train_steps",
    "run_all",
    "run_batched",
    "timed_steps",
    "warm_up",
]


def bench_train_steps(
    data: TaskData,
    d_model: int,
    steps: int,
    batch_order: str = "binned",
    warmup: int = 10,
    device: torch.device | str = "cpu",
) -> dict:
    """Training throughput of one run (a pack of one) at ``d_model``: steps/s, useful tokens/s
    and positions computed/s (what the flat layout computes, its rounding included)."""
    cfg = TrainConfig(batch_order=batch_order)
    torch.set_num_threads(cfg.threads)
    device = torch.device(device)
    model_cfg = model_config_for(data.config, d_model)
    pack = start_pack([(0, Run(model_cfg, data, cfg))], device)
    elapsed, tokens, share = timed_steps(pack, steps, warmup, device)
    return {
        "d_model": d_model,
        "params_total": param_count(model_cfg)["total"],
        "batch_order": batch_order,
        "steps": steps,
        "steps_per_s": steps / elapsed,
        "tokens_per_s": tokens / elapsed,
        "padded_tokens_per_s": tokens / share / elapsed,
        "padding_share": 1 - share,
    }


def bench_batched(
    data: TaskData, d_models: list[int], members: int, steps: int, device, warmup: int = 5
) -> dict:
    """Batched training of ``members`` models whose sizes cycle through ``d_models``.

    Model-steps/s (members x steps / s), useful tokens/s, and memory (the planner's estimate, and
    on CUDA the measured peak). ``grouped_s`` is the time per step of the same members trained as
    one pack per size (no padding, one pass per size) where the sizes differ.
    """
    torch.set_num_threads(1)
    device = torch.device(device)
    sizes = [d_models[i % len(d_models)] for i in range(members)]
    runs = [
        Run(model_config_for(data.config, d), data, TrainConfig(seed=i))
        for i, d in enumerate(sizes)
    ]

    def seconds_per_step(group: list[int]) -> tuple[float, int]:
        pack = start_pack([(i, runs[i]) for i in group], device)
        elapsed, tokens, _ = timed_steps(pack, steps, warmup, device)
        return elapsed / steps, tokens

    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    per_step, tokens = seconds_per_step(list(range(members)))
    row = {
        "d_models": sorted(set(sizes)),
        "members": members,
        "device": str(device),
        "step_s": per_step,
        "model_steps_per_s": members / per_step,
        "tokens_per_s": tokens / (per_step * steps),
        "memory_estimate": pack_bytes([(r.model_cfg, r.cfg) for r in runs]),
    }
    if device.type == "cuda":
        row["peak_memory"] = torch.cuda.max_memory_allocated(device)
    if len(set(sizes)) > 1:
        groups = [[i for i, d in enumerate(sizes) if d == size] for size in sorted(set(sizes))]
        row["grouped_step_s"] = sum(seconds_per_step(g)[0] for g in groups)
    return row


def sync(device) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def warm_up(pack, warmup: int, steps: int) -> None:
    """``warmup`` untimed steps of ``pack``, then every CUDA graph that its next ``steps`` steps
    will replay captured (:meth:`threshold.train.graphs.StepGraphs.capture`, which trains
    nothing), so that no capture falls inside a timed window: a graphed step meets a dozen shapes
    in 30 steps, and a capture costs many replays. The steps to come are the batches its feed has
    drawn (:data:`~threshold.train.layout.CHUNK` at a time); where fewer than ``steps`` are left,
    the warm-up steps on into a new chunk. Past a chunk's length, what is not drawn yet is not
    captured ahead."""
    for _ in range(warmup):
        step_pack(pack)
    if pack.graphs is None:
        return
    if len(pack.feed.chunk) < min(steps, CHUNK - 1):
        while pack.feed.chunk:
            step_pack(pack)
        step_pack(pack)  # draws the next chunk
    for batch in pack.feed.chunk[:steps]:
        pack.graphs.capture(batch.spans, batch.n, batch.t, batch.dense)


def timed_steps(pack, steps: int, warmup: int, device: torch.device) -> tuple[float, int, float]:
    """Seconds for ``steps`` training steps of ``pack`` after ``warmup`` untimed ones and the
    capture of the graphs those steps replay (:func:`warm_up`; on a GPU synchronised at both
    ends), the useful tokens those steps trained, and the useful share of the positions they
    computed (:attr:`threshold.train.layout.Batch.useful` of ``M x N``)."""
    warm_up(pack, warmup, steps)
    before = sum(m.tokens for m in pack.members)
    useful = computed = 0
    sync(device)
    t0 = time.perf_counter()
    for _ in range(steps):
        step_pack(pack)
        useful += pack.last.useful
        computed += len(pack.members) * pack.last.n
    sync(device)
    tokens = sum(m.tokens for m in pack.members) - before
    return time.perf_counter() - t0, tokens, useful / max(computed, 1)


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


def run_batched(
    data: TaskData,
    d_models: list[int],
    members: list[int],
    steps: int,
    device,
    on_item: Callable[[str], None] | None = None,
    repeats: int = 3,
) -> dict:
    """The batched engine at each d x member count (and a mixed pack of every d) against one
    model alone (one process, one thread on CPU), timed side by side: each batched timing sits
    between two timings of the one model at its sizes, ``repeats`` times, and ``speedup`` is the
    median of those ratios, so a machine whose load changes during the run still compares like
    with like."""
    out: dict = {"single": [], "batched": []}
    alone: dict[int, list[float]] = {d: [] for d in d_models}

    def single_step_s(sizes: list[int]) -> float:
        """Seconds per model-step of one model alone, averaged over ``sizes``."""
        rates = [bench_train_steps(data, d, steps, device=device)["steps_per_s"] for d in sizes]
        for d, rate in zip(sizes, rates, strict=True):
            alone[d].append(rate)
        return sum(1 / r for r in rates) / len(rates)

    plan = [([d], m) for d in d_models for m in members]
    if len(d_models) > 1:
        plan += [(d_models, m) for m in members if m >= len(d_models)]
    for sizes, m in plan:
        if on_item:
            on_item(f"d={','.join(map(str, sizes))} x {m}")
        rows, ratios = [], []
        before = single_step_s(sizes)
        for _ in range(repeats):
            row = bench_batched(data, sizes, m, steps, device)
            after = single_step_s(sizes)
            ratios.append(row["model_steps_per_s"] * (before + after) / 2)
            rows.append(row)
            before = after
        row = sorted(rows, key=lambda r: r["model_steps_per_s"])[len(rows) // 2]
        out["batched"].append(row | {"speedup": float(np.median(ratios)), "ratios": ratios})
    for d in d_models:
        rate = float(np.median(alone[d]))
        out["single"].append({"d_model": d, "steps_per_s": rate, "timings": len(alone[d])})
    return out


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
