"""Search efficiency: the compute a study used against a dense grid's.

It compares the compute a study used (its runs' steps and training seconds) with a dense grid,
the papers' method: ``GRID_SIZES`` log-spaced sizes over the d range the study explored,
``GRID_SEEDS`` seeds each, every run trained for the full step budget. A grid run's seconds come
from a per-step cost ``a + b d^2`` fitted to the study's own runs (training seconds over steps,
which includes their evaluations), or, with runs at fewer than 2 sizes, from the sampler's
bench-measured cost model.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from scipy.optimize import nnls

from threshold.search.settings import COST_A, COST_B, STEP_S
from threshold.search.spec import StudySettings

__all__ = ["GRID_SEEDS", "GRID_SIZES", "dense_grid", "efficiency", "step_cost"]

GRID_SIZES = 16  # the dense grid of `threshold bench search`: 16 log-spaced sizes...
GRID_SEEDS = 3  # ...times 3 seeds, each at the full step budget
# The search's cost model (threshold.search.settings) in seconds per training step.
BENCH_STEP_S = (STEP_S * COST_A, STEP_S * COST_B)


def step_cost(ds, seconds, steps) -> tuple[float, float] | None:
    """(a, b) of seconds per step = a + b d^2, fitted to runs by least squares on relative
    error with a, b >= 0; None with runs at fewer than 2 sizes."""
    ds, seconds, steps = (np.asarray(v, dtype=float) for v in (ds, seconds, steps))
    ok = (steps > 0) & (seconds > 0)
    ds, per_step = ds[ok], seconds[ok] / steps[ok]  # (N,) each
    if np.unique(ds).size < 2:
        return None
    design = np.stack([np.ones_like(ds), ds**2], axis=1) / per_step[:, None]  # (N, 2)
    (a, b), _ = nnls(design, np.ones_like(ds))
    return float(a), float(b)


def dense_grid(d_range: Sequence[int], max_steps: int, cost: tuple[float, float]) -> dict:
    """The dense grid over d_range: its sizes, runs, steps and predicted training seconds."""
    lo, hi = d_range
    sizes = sorted({round(float(v)) for v in np.geomspace(lo, hi, GRID_SIZES)})
    a, b = cost
    per_run = [max_steps * (a + b * d * d) for d in sizes]
    return {
        "sizes": sizes,
        "seeds": GRID_SEEDS,
        "runs": len(sizes) * GRID_SEEDS,
        "steps_per_run": max_steps,
        "steps": len(sizes) * GRID_SEEDS * max_steps,
        "train_s": GRID_SEEDS * float(sum(per_run)),
    }


def efficiency(runs: list[dict], settings: StudySettings, d_range, n_failed: int) -> dict:
    timed = [r for r in runs if r["train_s"] is not None and r["steps"]]
    used_s = float(sum(r["train_s"] for r in timed))
    used_steps = int(sum(r["steps"] for r in timed))
    with_cpu = [r["cpu_s"] for r in runs if r.get("cpu_s") is not None]
    fitted = step_cost(
        [r["d"] for r in timed], [r["train_s"] for r in timed], [r["steps"] for r in timed]
    )
    if fitted is not None:
        cost, source = fitted, "fitted to this study's runs"
    else:
        cost, source = BENCH_STEP_S, "the sampler's bench-measured cost model"
    grid = dense_grid(d_range, settings.train.max_steps, cost)
    return {
        "runs": len(runs),
        "failed": n_failed,
        "steps": used_steps,
        "train_s": round(used_s, 1),
        "cpu_s": round(float(sum(with_cpu)), 1),  # of the runs that recorded it (runs_with_cpu)
        "runs_with_cpu": len(with_cpu),
        "d_range": [int(d_range[0]), int(d_range[1])],
        "grid": grid,
        "cost_model": {"a_s": cost[0], "b_s": cost[1], "source": source},
        "share_runs": len(runs) / grid["runs"],
        "share_steps": used_steps / grid["steps"] if grid["steps"] else None,
        "share_s": used_s / grid["train_s"] if grid["train_s"] else None,
        "pretraining_excluded": bool(settings.pretrain),
    }
