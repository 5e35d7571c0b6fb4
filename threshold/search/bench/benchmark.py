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

import dataclasses
import logging
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context

import numpy as np
from scipy.optimize import brentq
from threadpoolctl import threadpool_limits

from threshold.allocator import keep_freed_memory
from threshold.errors import ConfigError
from threshold.search.bench.bench_table import family_row, oracle_column, vs_oracle
from threshold.search.bench.families import CHANCE, FAMILIES, draw_family_truth
from threshold.search.bench.fit_oracle import FitOracle, runs_at
from threshold.search.bench.peer import psignifit_reading
from threshold.search.bench.psi import PsiMethod
from threshold.search.bench.simulate import (
    ResponseModel,
    draw_truth,
    listops_table,
    run_fixed_design,
    run_optuna,
    run_policy,
    run_policy_batched,
)
from threshold.search.policy import bracket, decide, posterior_summary
from threshold.search.settings import SearchSettings

__all__ = [
    "DEFAULT_ROWS",
    "METHODS",
    "ROWS",
    "bench_families",
    "bench_search",
    "psi_scored",
    "psi_trajectory",
    "trajectory",
]

logger = logging.getLogger(__name__)

BATCHED = {
    "policy_b4": 4,
    "policy_b8": 8,
    "policy_b16": 16,
}  # find --trials-at-once K
METHODS = ("policy", "policy_2w", "grid", "optuna_tpe", "optuna_qmc", *BATCHED)
# QMC is left out by default: no better than TPE here and three times slower to fit.
DEFAULT_METHODS = ("policy", "policy_2w", "grid", "optuna_tpe")
# The families table's rows, each computed only when asked for: the sampler's trajectory (its
# checkpoints and own stop), the grid, the spread design, the shape-known oracle (48 runs and
# to the precision) and the shape-unknown one (``oracle_fit``); on request (not by default), the
# shape-unknown oracle's runs read by our posterior (``oracle_fit_read``): its placement without
# its model; and the same runs fitted with the slope free over every family's range and our
# posterior's grid (``oracle_fit_wide``): what the fit reads without knowing the family's slopes;
# and the fit placing its own runs as it learns, read at each checkpoint (``oracle_fit_adaptive``):
# what one design that knows the form but none of the truth's parameters reaches; the same fit
# placing per compute as our sampler does (``oracle_fit_adaptive_cost``), with its runs also read
# by our posterior (its placement without its model); and our sampler's runs at each checkpoint
# read by the fit that picks the likeliest form (``oracle_fit_pick``: our placement without our
# model), and with ``oracle_fit_adaptive_cost`` that fit's runs as well. Beside any of them, with
# ``read_settings``, our sampler's runs at each checkpoint read by a posterior of other settings
# (``sampler_read_*``): a setting's effect on the reading alone, on the very runs the sampler row
# reads (a setting in ``settings`` changes where the runs go as well). ``psi``: the plain
# Ψ-method (``psi.PsiMethod``, Kontsevich & Tyler 1999) at each checkpoint and its own stop;
# ``psi_read``: its runs read by our posterior (its placement without its model).
# ``peer``: the sampler's runs at each checkpoint read by psignifit (``peer.psignifit_reading``,
# the optional bench extra): its coverage and width against ours on the very same runs.
# Each has its own random stream, so a row's numbers do not depend on which others are computed.
ROWS = (
    "sampler",
    "grid",
    "spread",
    "oracle",
    "oracle_fit",
    "oracle_fit_read",
    "oracle_fit_wide",
    "oracle_fit_adaptive",
    "oracle_fit_adaptive_cost",
    "oracle_fit_pick",
    "psi",
    "psi_read",
    "peer",
)
DEFAULT_ROWS = ("sampler", "grid", "spread", "oracle", "oracle_fit")


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
    rounds = np.array([r.get("rounds", r["runs"]) for r in rows])  # one worker: a run a round
    return {
        "median_runs": float(np.median(runs)),
        "median_rounds": float(np.median(rounds)),
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

    ``settings`` defaults to the search defaults on the ListOps mod 10 size table (d 2..512,
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
            elif method in BATCHED:
                row = run_policy_batched(settings, model, truth, rng, BATCHED[method])
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


def trajectory(
    settings: SearchSettings, off: SearchSettings, draw: Callable, checkpoints
) -> tuple[list, dict, list]:
    """``decide`` in a loop with one worker, one trajectory read twice: to the tool's own stop
    (``settings``), and with the stop off (``off``: the same settings but for the precision and
    budget) to the largest checkpoint or a stop that ``off`` keeps (the range's edge). Both
    choose the same run wherever neither stops, so whichever ends first, the other goes on
    from its runs. ``draw(d)`` answers a decision with a run, (d run, accuracy), or None where
    none is left (a replay's grid used up: both trajectories end there). Returns the runs at the
    own stop and at each checkpoint (a checkpoint the stop-off trajectory did not reach: its
    last runs), by run count, and all runs, in order."""
    completed: list[tuple[int, float]] = []
    own, at = None, {}
    while True:
        n = len(completed)
        if n in checkpoints:  # read before the decision: it goes on from this state
            at[n] = list(completed)
        if own is None:
            decision = decide(settings, completed, [])
            if decision.stop:
                own = list(completed)
        if own is not None:
            if n >= max(checkpoints):
                break
            decision = decide(off, completed, [])
        if decision.stop:
            break
        run = draw(decision.d)
        if run is None:
            break
        completed.append(run)
    if own is None:  # no run left before the own stop: it reads them all
        own = list(completed)
    missing = [k for k in checkpoints if k not in at]
    if missing:  # the stop-off trajectory ended early: each such checkpoint reads all its runs
        at |= dict.fromkeys(missing, completed[: max(checkpoints)])
    return own, at, completed


def psi_trajectory(
    settings: SearchSettings,
    psi: PsiMethod,
    candidates: Callable,
    draw: Callable,
    checkpoints,
) -> tuple[tuple, dict, list]:
    """The Ψ-method (``psi.PsiMethod``) in a loop, one trajectory read at each checkpoint and at
    its own stop: the sampler's stop rules on its own posterior (the 90% interval within
    ``settings.precision``, the budget, or ``give_up_mass`` of x80 beyond the range's end).
    ``candidates()`` gives the sizes it may run next (d, increasing; none: it ends), ``draw(d)``
    the run, (d, accuracy), or None. Returns (runs, summary) at the own stop and at each
    checkpoint (one not reached: the last), and all runs in order."""
    completed: list[tuple[int, float]] = []
    own, at = None, {}
    while True:
        n = len(completed)
        s = psi.summary()
        if n in checkpoints:
            at[n] = (list(completed), s)
        if own is None and (
            n >= settings.budget
            or (n >= 3 and s.ratio <= settings.precision)
            or max(s.mass_above, s.mass_below) >= settings.give_up_mass
        ):
            own = (list(completed), s)
        if own is not None and n >= max(checkpoints):
            break
        ds = np.asarray(candidates(), dtype=int)
        run = draw(int(ds[psi.pick(settings.x_of(ds))])) if ds.size else None
        if run is None:
            break
        psi.update(float(settings.x_of(run[0])), run[1])
        completed.append(run)
    last = (completed[: max(checkpoints)], psi.summary())
    own = own or (list(completed), psi.summary())
    at |= {k: last for k in checkpoints if k not in at}
    return own, at, completed


def _scored(settings: SearchSettings, runs, truth_x80: float) -> dict:
    s, _ = posterior_summary(settings, runs)
    return {
        "runs": len(runs),
        "compute": float(settings.cost(np.array([d for d, _ in runs])).sum()),
        "covered": bool(s.x80_lo <= truth_x80 <= s.x80_hi),
        "error": float(s.x80_median - truth_x80),  # ln(estimate / truth), parameters
        "width": float(s.x80_hi - s.x80_lo),  # of the 90% interval, in ln(parameters)
    }


PEER_TRIALS = 2000  # test questions a simulated run's accuracy stands for (psignifit's counts)


def _peer_scored(settings: SearchSettings, runs, truth_x80: float) -> dict:
    """psignifit's reading of ``runs``, scored as ``_scored`` scores ours."""
    r = psignifit_reading(settings, list(runs), PEER_TRIALS)
    return {
        "runs": len(runs),
        "compute": float(settings.cost(np.array([d for d, _ in runs])).sum()),
        "covered": bool(r["lo"] <= truth_x80 <= r["hi"]),
        "error": float(r["x"] - truth_x80),
        "width": float(r["hi"] - r["lo"]),
    }


@dataclasses.dataclass(frozen=True)
class _Oracle:
    """A reader that knows the truth's curve but for its place: the most informative size x
    (where one run's score tells the curve's shift best: slope of the mean curve over the score's
    sd, largest) and the sd, in nats, of the shift that one run there tells."""

    x: float
    sd_one: float

    @classmethod
    def of(cls, truth, rng: np.random.Generator, draws: int = 2000) -> _Oracle:
        # Sizes from 2.5 / slope below x80 to as far above: the seed sd comes from draws, and in
        # the tails, where few seeds learn (or fail), it is too noisy to be trusted.
        xs = truth.x80 + np.linspace(-2.5, 2.5, 21) / truth.slope  # (G,)
        h = 1e-3
        slope = (truth.mean(xs + h) - truth.mean(xs - h)) / (2 * h)  # (G,)
        sd = np.array([np.std([truth.sample(rng, x) for _ in range(draws)]) for x in xs])
        sd_one = sd / np.maximum(slope, 1e-12)  # (G,)
        best = int(np.argmin(sd_one))
        return cls(float(xs[best]), float(sd_one[best]))

    def runs_to(self, precision: float) -> int:
        """Runs it needs for a 90% interval of x80 (a normal one) as narrow as ``precision``."""
        return max(1, int(np.ceil((self.sd_one * 2 * 1.645 / np.log(precision)) ** 2)))

    def scored(self, settings: SearchSettings, truth, rng: np.random.Generator, n: int) -> dict:
        """n runs at its size, the curve shifted until its mean there is theirs: the shift is
        the error of x80 (``covered`` None: it gives no interval)."""
        mean_y = np.mean([truth.sample(rng, self.x) for _ in range(n)])
        lo, hi = self.x - 60.0 / truth.slope, self.x + 60.0 / truth.slope
        y_lo, y_hi = float(truth.mean(lo)), float(truth.mean(hi))
        target = float(np.clip(mean_y, y_lo + 1e-9, y_hi - 1e-9))
        x_hat = brentq(lambda x: float(truth.mean(x)) - target, lo, hi, xtol=1e-6)
        d = settings.nearest(float(settings.d_of(self.x)))
        return {
            "runs": n,
            "compute": float(settings.cost(np.full(n, d)).sum()),
            "covered": None,
            "error": float(self.x - x_hat),
        }


def psi_candidates(settings: SearchSettings, n: int) -> list[int]:
    """The Ψ-method's sizes on a simulated study: ``n`` log-spaced over the whole size table."""
    return sorted({settings.nearest(v) for v in np.geomspace(settings.d_min, settings.d_max, n)})


def psi_scored(
    settings: SearchSettings, draw: Callable, checkpoints, truth_x80: float
) -> tuple[dict, dict, dict]:
    """The Ψ-method's scores on a simulated study (``psi_trajectory`` over the whole size
    table, ``psi_candidates``): at its own stop, and at each checkpoint by run count; and its
    runs there (by run count, and ``"stop"``)."""
    x_range = settings.x_of(np.array([settings.d_min, settings.d_max]))
    psi = PsiMethod(*x_range, settings.chance, settings.level, settings.chance_corrected)
    sizes = psi_candidates(settings, psi.settings.n_candidates)
    own, at, _ = psi_trajectory(settings, psi, lambda: sizes, draw, checkpoints)

    def score(runs, s) -> dict:
        return {
            "runs": len(runs),
            "compute": float(settings.cost(np.array([d for d, _ in runs])).sum()),
            "covered": bool(s.x80_lo <= truth_x80 <= s.x80_hi),
            "error": float(s.x80_median - truth_x80),
        }

    runs = {k: v[0] for k, v in at.items()} | {"stop": own[0]}
    return score(*own), {k: score(*v) for k, v in at.items()}, runs


def _spread_runs(settings: SearchSettings, truth, rng, n: int, sizes: int = 9) -> list:
    """A design that knows the truth's place and slope: the bracket, then n - 3 runs taken in
    turn from ``sizes`` sizes evenly spaced within 1 / slope nats of x80 (on a logistic curve
    with the 80% point at 0.8 A, learned shares from about 0.55 to 0.9); read by our posterior
    like the sampler's runs."""
    xs = truth.x80 + np.linspace(-1.0, 1.0, sizes) / truth.slope  # (sizes,)
    spread = [settings.nearest(float(settings.d_of(x))) for x in xs]
    return runs_at(
        settings, truth, rng, [*bracket(settings), *(spread[i % sizes] for i in range(n - 3))]
    )


def _worker_start() -> None:
    """A benchmark process's set-up: freed memory kept (``keep_freed_memory``) and one BLAS
    thread. The processes are as many as the cores asked for, so more threads only spin against
    each other: unlimited, the same studies took about twice the CPU on this 2-core machine."""
    keep_freed_memory()
    threadpool_limits(1)


def bench_families(
    n_studies: int = 100,
    seed: int = 0,
    families: tuple[str, ...] = FAMILIES,
    checkpoints: tuple[int, ...] = (12, 24, 48),
    settings: SearchSettings | None = None,
    grid_range: tuple[int, int] = (8, 256),
    grid_sizes: int = 16,
    grid_seeds: int = 3,
    jobs: int = 1,
    rows: tuple[str, ...] = DEFAULT_ROWS,
    read_settings: SearchSettings | None = None,
) -> dict:
    """The sampler on each truth family: one trajectory per study, scored after each number of
    runs in ``checkpoints`` with its stop switched off, and at its own stop (``_trajectory``).

    Per family and column: median runs, mean compute over the dense grid's (``grid_sizes`` sizes
    x ``grid_seeds`` seeds), coverage of the 90% interval, median |ln(estimate / truth)| in
    parameters, the share of studies within 20% of the truth, and the median signed error (the
    bias). Beside them: the grid's runs read by our posterior (``grid``); as many runs as the
    largest checkpoint placed by a design that knows the truth's place and slope and spreads
    them around x80 (``spread``, ``_spread_runs``), read by our posterior: where the sampler
    matches it, its placement is not what limits the estimate; and an oracle that knows the
    curve but for its place and runs every run at the most informative size (``_Oracle``):
    with the largest checkpoint's number of runs (``oracle``), with each smaller checkpoint's
    (``oracle_K``), and with the runs it needs to reach the stop's precision (``oracle_stop``).
    No design and no posterior that must also learn the curve's shape can do better: where the
    oracle misses a target, the family's runs hold too little information for it. With the
    oracle computed, every other column with as many runs as one of its columns (the own stop:
    ``oracle_stop``) states its error and mean compute as ratios to that column's on the same
    studies (``x_oracle``: the error's ratio with a 90% interval from resampling the studies,
    ``bench_table.vs_oracle``); coverage comes with a 90% interval (``coverage_90``). With the
    ``psi`` row, the sampler's columns are stated against the Ψ-method's the same way
    (``x_psi``).

    A second bound, ``oracle_fit`` (``FitOracle``), knows the family's functional form and
    seed model, uses the true parameters only to place its runs (a locally c-optimal design for
    x80) and estimates place, slope and ceiling from them by maximum likelihood: the error a
    design that must learn the curve's shape reaches with the true model.

    ``rows`` names the rows to compute (``DEFAULT_ROWS``, or any of ``ROWS``; each with its
    own random stream, so the same studies give the same numbers whichever are chosen).
    ``read_settings`` (the same size table as ``settings``) adds ``sampler_read_K``: the
    sampler's first K runs, placed under ``settings``, read under these instead.
    ``jobs`` processes share the studies (each study is a function of its seeds alone, so the
    result is the same for any ``jobs``); ``seconds`` is a family's CPU seconds, its studies'
    together.
    """
    unknown = set(families) - set(FAMILIES)
    if unknown:
        raise ConfigError(f"unknown families {sorted(unknown)}: choose from {FAMILIES}")
    if not checkpoints or min(checkpoints) < 3:
        raise ConfigError(f"checkpoints {checkpoints}: give run counts of 3 or more")
    unknown_rows = set(rows) - set(ROWS)
    if unknown_rows or not rows:
        raise ConfigError(f"rows {sorted(unknown_rows) or '(none)'}: choose from {', '.join(ROWS)}")
    if jobs < 1:
        raise ConfigError(f"jobs {jobs} is not allowed: use 1 or more")
    settings = settings or SearchSettings(listops_table(), chance=CHANCE)
    if read_settings is not None and read_settings.params_of_d != settings.params_of_d:
        raise ConfigError("read_settings must have the size table of settings: the runs' sizes")
    sizes = sorted({settings.nearest(v) for v in np.geomspace(*grid_range, grid_sizes)})
    grid_compute = float(settings.cost(np.array(sizes)).sum()) * grid_seeds
    tasks = [  # study by study, each family's in turn: a run cut short has some of each
        (
            settings,
            family,
            seed,
            study,
            tuple(checkpoints),
            tuple(sizes),
            grid_seeds,
            tuple(rows),
            read_settings,
        )
        for study in range(n_studies)
        for family in families
    ]
    if jobs == 1:
        with threadpool_limits(1):
            studies = [_study(*task) for task in tasks]
    else:
        with ProcessPoolExecutor(
            jobs, mp_context=get_context("spawn"), initializer=_worker_start
        ) as pool:
            studies = list(pool.map(_study, *zip(*tasks, strict=True)))
    out: dict = {}
    for family in families:
        mine = [row for task, row in zip(tasks, studies, strict=True) if task[1] == family]
        columns = [k for k in mine[0] if k != "seconds"]
        out[family] = {k: family_row([row[k] for row in mine], grid_compute) for k in columns}
        # the ratios' resampling, drawn column by column: a column's interval (not its ratio)
        # depends on which rows were asked for
        rng = np.random.default_rng([seed, FAMILIES.index(family)])
        for k in columns:
            reference = oracle_column(k, out[family][k]["median_runs"], tuple(checkpoints))
            if reference in out[family]:
                out[family][k]["x_oracle"] = vs_oracle(mine, k, reference, rng)
        # the sampler's columns against the Ψ-method's with as many runs (or at its own stop),
        # on the same studies: a stream of its own, so the oracle's intervals stay as they were
        rng = np.random.default_rng([seed, FAMILIES.index(family), 1])
        for k in (*map(str, checkpoints), "stop"):
            for them, key in (("psi", "x_psi"), ("psi_read", "x_psi_read")):
                if k in out[family] and f"{them}_{k}" in out[family]:
                    out[family][k][key] = vs_oracle(mine, k, f"{them}_{k}", rng)
        out[family]["seconds"] = round(sum(row["seconds"] for row in mine), 1)
        logger.info("family %s: %.0f CPU seconds", family, out[family]["seconds"])
    return {
        "n_studies": n_studies,
        "seed": seed,
        "checkpoints": list(checkpoints),
        "grid_sizes": [int(d) for d in sizes],
        "grid_seeds": grid_seeds,
        "families": out,
    }


def _study(
    settings: SearchSettings,
    family: str,
    seed: int,
    study: int,
    checkpoints: tuple[int, ...],
    sizes: tuple[int, ...],
    grid_seeds: int,
    rows: tuple[str, ...] = DEFAULT_ROWS,
    read_settings: SearchSettings | None = None,
) -> dict:
    """One study of ``bench_families``: each column's score (``_scored``, the oracles' own),
    by column name, and the CPU ``seconds`` it took."""
    start = time.process_time()
    off = dataclasses.replace(settings, precision=1.0 + 1e-9, budget=max(checkpoints))
    # spawn's children depend on their index alone: a row added at the end leaves the others'
    streams = np.random.SeedSequence([seed, FAMILIES.index(family), study]).spawn(14)
    rngs = [np.random.default_rng(s) for s in streams]  # rngs[2]: the own stop's, before
    truth = draw_family_truth(rngs[0], family, settings.level, settings.chance_corrected)
    row, n = {}, max(checkpoints)
    if {"sampler", "oracle_fit_pick", "peer"} & set(rows) or read_settings is not None:
        rng = rngs[1]
        own, at, ours = trajectory(
            settings, off, lambda d: (d, truth.sample(rng, float(settings.x_of(d)))), checkpoints
        )
        if "sampler" in rows:
            row |= {str(k): _scored(settings, at[k], truth.x80) for k in checkpoints}
            row["stop"] = _scored(settings, own, truth.x80)
        if read_settings is not None:  # the checkpoint's runs, as the sampler row reads them
            row |= {
                f"sampler_read_{k}": _scored(read_settings, ours[:k], truth.x80)
                for k in checkpoints
            }
        if "oracle_fit_pick" in rows:
            row |= {
                f"oracle_fit_pick_{k}": FitOracle.pick(settings, truth, ours[:k])
                for k in checkpoints
            }
        if "peer" in rows:
            row |= {f"peer_{k}": _peer_scored(settings, ours[:k], truth.x80) for k in checkpoints}
    if "grid" in rows:
        grid_runs = runs_at(settings, truth, rngs[3], [d for d in sizes for _ in range(grid_seeds)])
        # Both read largest first, a size's runs together, as a study's bracket comes: the same
        # posterior (to the pruning's e^-30), cheaper to sum, since the largest runs rule out
        # most ceilings and a size's runs are summed once (the spread design runs its sizes in
        # turn).
        row["grid"] = _scored(settings, grid_runs[::-1], truth.x80)
    if "spread" in rows:
        spread = _spread_runs(settings, truth, rngs[6], n)
        row["spread"] = _scored(settings, sorted(spread, reverse=True), truth.x80)
    if "oracle" in rows:
        oracle = _Oracle.of(truth, rngs[4])
        row["oracle"] = oracle.scored(settings, truth, rngs[4], n)
        row["oracle_stop"] = oracle.scored(
            settings, truth, rngs[5], oracle.runs_to(settings.precision)
        )
        # the same oracle with each smaller checkpoint's runs: what the sampler's reads there
        # are measured against
        row |= {
            f"oracle_{k}": oracle.scored(settings, truth, rngs[12], k) for k in checkpoints if k < n
        }
    if {"oracle_fit", "oracle_fit_read", "oracle_fit_wide"} & set(rows):
        runs, sd, cov = FitOracle.runs(settings, truth, rngs[7], n)
        if "oracle_fit" in rows:
            row["oracle_fit"] = FitOracle.scored(settings, truth, runs, sd, cov)
        if "oracle_fit_wide" in rows:
            row["oracle_fit_wide"] = FitOracle.scored(settings, truth, runs, sd, cov, wide=True)
        if "oracle_fit_read" in rows:
            row["oracle_fit_read"] = _scored(settings, sorted(runs, reverse=True), truth.x80)
    if "oracle_fit_adaptive" in rows:
        adaptive, _ = FitOracle.adaptive(settings, truth, (rngs[8], rngs[9]), checkpoints)
        row |= {f"oracle_fit_adaptive_{k}": score for k, score in adaptive.items()}
    if "oracle_fit_adaptive_cost" in rows:
        power = settings.cost_power
        adaptive, placed = FitOracle.adaptive(
            settings, truth, (rngs[10], rngs[11]), checkpoints, power
        )
        row |= {f"oracle_fit_adaptive_cost_{k}": score for k, score in adaptive.items()}
        row |= {
            f"oracle_fit_adaptive_cost_read_{k}": _scored(
                settings, sorted(runs, reverse=True), truth.x80
            )
            for k, runs in placed.items()
        }
        if "oracle_fit_pick" in rows:
            row |= {
                f"oracle_fit_adaptive_cost_pick_{k}": FitOracle.pick(settings, truth, runs)
                for k, runs in placed.items()
            }
    if {"psi", "psi_read"} & set(rows):
        rng = rngs[13]
        own, at, placed = psi_scored(
            settings,
            lambda d: (d, truth.sample(rng, float(settings.x_of(d)))),
            checkpoints,
            truth.x80,
        )
        if "psi" in rows:
            row |= {f"psi_{k}": score for k, score in at.items()} | {"psi_stop": own}
        if "psi_read" in rows:  # its placement without its model
            row |= {
                f"psi_read_{k}": _scored(settings, runs, truth.x80) for k, runs in placed.items()
            }
    seconds = time.process_time() - start
    logger.info(
        "%s study %d: %s runs to the own stop, %.1f CPU s",
        family,
        study,
        row["stop"]["runs"] if "stop" in row else "-",
        seconds,
    )
    return row | {"seconds": seconds}
