"""Benchmark of transition-search methods on simulated studies with a known truth.

Each study draws a truth (``simulate.draw_truth``) and runs every method on it with its own
random stream: ``policy`` (``decide`` in a loop, one worker), ``policy_2w`` (two parallel workers
that see each other's pending runs), ``grid`` (the papers' method: 16 log-spaced sizes x 3 seeds,
logistic fit, bootstrap interval; ``grid_posterior`` reads the same runs with the grid posterior)
and ``optuna_tpe`` / ``optuna_qmc`` (plain Optuna samplers
over the grid's size range with as many runs as the policy used on that study, then the same fit
and interval). Per method it reports runs, compute in the cost model's units, coverage (share of
studies whose 90% interval holds the true x80; a failed fit counts as a miss) and the interval
width as a hi/lo ratio in parameters.
"""

from __future__ import annotations

import logging
import time

import numpy as np

from threshold.errors import ConfigError
from threshold.search.settings import SearchSettings
from threshold.search.simulate import (
    ResponseModel,
    draw_truth,
    listops_table,
    run_fixed_design,
    run_optuna,
    run_policy,
)

__all__ = ["METHODS", "bench_search"]

logger = logging.getLogger(__name__)

METHODS = ("policy", "policy_2w", "grid", "optuna_tpe", "optuna_qmc")
# QMC is left out by default: no better than TPE here and three times slower to fit.
DEFAULT_METHODS = ("policy", "policy_2w", "grid", "optuna_tpe")


def _aggregate(rows: list[dict], truths: np.ndarray) -> dict:
    """Summary numbers of one method over the studies. truths: (n_studies,) true x80."""
    runs = np.array([r["runs"] for r in rows])
    compute = np.array([r["compute"] for r in rows])
    lo = np.array([r["lo"] for r in rows])  # (n_studies,), NaN when the fit failed
    hi = np.array([r["hi"] for r in rows])
    est = np.array([r["est"] for r in rows])
    ok = np.isfinite(lo) & np.isfinite(hi)
    width = np.where(ok, np.exp(hi - lo), np.inf)
    err = np.where(np.isfinite(est), np.exp(np.abs(est - truths)), np.inf)
    return {
        "median_runs": float(np.median(runs)),
        "median_compute": float(np.median(compute)),
        "mean_compute": float(np.mean(compute)),
        "coverage": float(np.mean(ok & (lo <= truths) & (truths <= hi))),
        "median_width_ratio": float(np.median(width)),
        "median_error_ratio": float(np.median(err)),  # exp|ln estimate - ln truth|, parameters
        "failed": int(np.sum(~ok)),
    }


def bench_search(
    n_studies: int = 200,
    seed: int = 0,
    methods: tuple[str, ...] = DEFAULT_METHODS,
    settings: SearchSettings | None = None,
    model: ResponseModel | None = None,
    grid_range: tuple[int, int] = (8, 256),
    grid_sizes: int = 16,
    grid_seeds: int = 3,
    n_boot: int = 100,  # bootstrap refits per baseline interval: 5% tails from 5 refits each
) -> dict:
    """Run the methods on n_studies simulated studies; return per-method summaries.

    ``settings`` defaults to the search defaults on the ListOps mod 10 size table (d 4..512,
    chance at the simulated unlearned level); ``model`` to the default response model. The
    result holds per-method numbers under ``methods`` and each method's mean (median) compute
    as a share of the grid's under ``compute_vs_grid`` (``median_compute_vs_grid``).
    """
    unknown = set(methods) - set(METHODS)
    if unknown:
        raise ConfigError(f"unknown methods {sorted(unknown)}: choose from {METHODS}")
    model = model or ResponseModel()
    settings = settings or SearchSettings(listops_table(), chance=model.unlearned_mean)
    if (settings.level, settings.chance_corrected) != (model.level, model.chance_corrected):
        raise ConfigError(
            f"the search reads x80 at level {settings.level} (chance_corrected "
            f"{settings.chance_corrected}) but the simulated truth at {model.level} "
            f"({model.chance_corrected}): give both the same level definition"
        )
    sizes = sorted({settings.nearest(v) for v in np.geomspace(*grid_range, grid_sizes)})
    rows: dict[str, list[dict]] = {m: [] for m in methods}
    truths, seconds = [], dict.fromkeys(methods, 0.0)
    for study in range(n_studies):
        streams = np.random.SeedSequence([seed, study]).spawn(len(METHODS) + 1)
        rngs = {m: np.random.default_rng(s) for m, s in zip(METHODS, streams[1:], strict=True)}
        truth = draw_truth(np.random.default_rng(streams[0]), model)
        truths.append(truth.x80)
        policy_runs = None
        for method in methods:
            start = time.perf_counter()
            rng = rngs[method]
            if method in ("policy", "policy_2w"):
                row = run_policy(settings, model, truth, rng, 1 if method == "policy" else 2)
                policy_runs = policy_runs or row["runs"]
            elif method == "grid":
                row = run_fixed_design(settings, model, truth, rng, sizes, grid_seeds, n_boot)
            else:
                if policy_runs is None:  # the Optuna baselines get the policy's number of runs
                    policy_runs = run_policy(settings, model, truth, rngs["policy"])["runs"]
                row = run_optuna(
                    settings, model, truth, rng, policy_runs, grid_range, method[7:], n_boot
                )
            seconds[method] += time.perf_counter() - start
            if method == "grid":
                rows.setdefault("grid_posterior", []).append(row.pop("posterior"))
            rows[method].append(row)
        logger.debug("study %d done", study)
    truth_x = np.array(truths)
    out = {
        m: _aggregate(rows[m], truth_x) | {"seconds": round(seconds.get(m, 0.0), 1)} for m in rows
    }
    grid = out.get("grid")
    return {
        "n_studies": n_studies,
        "seed": seed,
        "grid_sizes": [int(d) for d in sizes],
        "methods": out,
        # each method's mean (median) compute over the grid's, when the grid was run
        "compute_vs_grid": {
            m: v["mean_compute"] / grid["mean_compute"] for m, v in out.items() if grid
        },
        "median_compute_vs_grid": {
            m: v["median_compute"] / grid["median_compute"] for m, v in out.items() if grid
        },
    }
