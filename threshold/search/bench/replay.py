"""Replays of recorded grids of real runs: the search judged on real training runs.

A recorded grid is a study's runs at a few sizes, several seeds each (a science record of
``threshold bench gpu``, a report's ``results.json`` or a dense grid's record, loaded by
:mod:`~threshold.search.bench.recorded`). The full
grid's reading (``posterior_summary`` of every run, and whether the runs locate it,
``bounds.locate``) is the *reference*. Each method then runs its own study on the grid: the
grid's sizes are the only sizes it may pick, each pick answered by the next recorded run at that
size (seeds in recorded order); a size whose seeds are used is exhausted, and a pick of it is
answered at the nearest size in ln(parameters) with runs left (``redirected``, counted). On a
dense grid each method but ``random`` is replayed ``orders`` times, the o-th with each size's
seeds turned by o (order 0 the recorded one, each seed first at its size once in five orders):
one recorded grid is then as many replays as it has seed orders, each the study a user could
have run, so coverage counts replays, not only grids:

- ``sampler``: ``decide`` in a loop (``benchmark.trajectory``), the tool's own stop and the stop
  switched off, on the study's size table cut to the grid's sizes (so the bracket is the grid's
  largest, smallest and middle size and the range never widens past them);
- ``psi``: the plain Ψ-method (``psi.PsiMethod``) over the sizes with runs left, the same stop
  rules on its own posterior (``benchmark.psi_trajectory``);
- ``bisection``: the largest size first (the asymptote), then noisy bisection over the sizes in
  order (a run at the level, ``level_target`` of the largest run's accuracy or of halfway from
  chance to 1 if that is higher, moves the upper end down, one under it the lower end up), its
  stop when the ends are neighbours, then the two ends' remaining seeds in turn; read by our
  posterior;
- ``random``: the grid's runs in a random order (``orders`` of them), its stop the sampler's rule
  (the 90% interval within the precision, or the mass beyond an end) read after each run; read
  by our posterior;
- ``oracle`` (dense grids only): a placement told the answer, runs where one who knew it would
  put them: the largest size first (the ceiling), then the sizes nearest the reference's median
  and its 90% interval's ends in turn, each answered by its next seed (an exhausted size by the
  nearest with runs left); the sampler's stop rule read after each run; read by our posterior.
  Not a bound: runs this close together say little of the slope, which our reading needs;
- ``oracle_spread`` (dense grids only): the same, its aims spread by the grid's own curve: the
  sizes nearest the reference's median, halfway up the rise (the seeds' mean accuracy halfway
  from chance to the largest sizes') and as far above the median;
- ``grid48`` (dense grids only): the 48 runs of the grid a user would run instead
  (:data:`USER_GRID`).

Each is scored at its own stop and at fixed run counts: against a located reference, whether
its 90% interval holds the reference's median (coverage) and |ln(its median / the reference's)|
in parameters; against a reference that is only a bound, whether its own runs give a bound on
the same side (``bound_ok``), and never a located point; and its runs against the grid's. At its
own stop on a dense grid a method's error is also read against the grid *without* its runs
(``heldout_error``): the whole grid's reading shares a method's runs (a third of them for
``grid48``), which flatters the methods that share most.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import numpy as np

from threshold.errors import ConfigError
from threshold.search.bench.benchmark import psi_trajectory, trajectory
from threshold.search.bench.peer import available as peer_available
from threshold.search.bench.peer import psignifit_reading
from threshold.search.bench.psi import PsiMethod
from threshold.search.bench.recorded import MIN_SIZES, RecordedGrid, load_grids
from threshold.search.bounds import POINT, locate
from threshold.search.policy import posterior_of, posterior_summary, settled, summary_of
from threshold.search.posterior import level_target, normalize
from threshold.search.settings import SearchSettings

__all__ = [
    "METHODS",
    "bench_replay",
    "calibration_summary",
    "reading",
    "replay_grid",
    "sampler_path",
    "stops",
    "user_grid",
]

logger = logging.getLogger(__name__)

METHODS = ("sampler", "psi", "bisection", "random", "oracle", "oracle_spread", "grid48")
# The grid a user would run instead of a search: 16 sizes spaced evenly in ln(params) over the
# dense grid's range, 3 seeds each (48 runs), read by our posterior; only on dense grids.
USER_GRID = (16, 3)
PEER_COUNTS = (12, 24)  # where the sampler's runs are also read by psignifit (calibration)
COUNTS = (6, 9, 12)  # fixed run counts each method is also read at (where the grid has as many)

# --- a grid's runs, answered on demand ---------------------------------------------------------


class _Pool:
    """The grid's runs left, by size, each size's in recorded order. ``draw(d)`` answers a pick
    with the next run at d, or where d is exhausted at the nearest size in x with runs left."""

    def __init__(self, grid: RecordedGrid, turn: int = 0) -> None:
        self.settings = grid.settings
        self.left: dict[int, list[float]] = defaultdict(list)
        for d, y in grid.runs:
            self.left[d].append(y)
        for d, ys in self.left.items():  # the seed order turned by ``turn``
            k = turn % len(ys)
            self.left[d] = ys[k:] + ys[:k]
        self.redirected = 0

    def available(self) -> list[int]:
        return sorted(d for d, ys in self.left.items() if ys)

    def draw(self, d: int) -> tuple[int, float] | None:
        sizes = self.available()
        if not sizes:
            return None
        if d not in sizes:
            xs = self.settings.x_of(np.array(sizes))
            d = sizes[int(np.argmin(np.abs(xs - self.settings.x_of(d))))]
            self.redirected += 1
        return d, self.left[d].pop(0)


# --- readings and scores -----------------------------------------------------------------------


def _verdict(settings: SearchSettings, runs, x80: float, asymptote: float) -> dict:
    """``bounds.locate`` of runs against a reading at x80 (ln params) with this asymptote."""
    params = dict(settings.params_of_d)
    estimate = {
        "params_p80": float(np.exp(x80)),
        "asymptote": asymptote,
        "chance": settings.chance,
        "level": settings.level,
        "chance_corrected": settings.chance_corrected,
    }
    return locate([(d, params[d], y) for d, y in runs], estimate)


def reading(settings: SearchSettings, runs) -> dict:
    """Our posterior's reading of runs: median and 90% interval of x80 (ln params), and whether
    the runs locate it (``kind``, ``bound``: the bound's params where not)."""
    s, _ = posterior_summary(settings, runs)
    verdict = _verdict(settings, runs, s.x80_median, s.asymptote_mean)
    return {"x": s.x80_median, "lo": s.x80_lo, "hi": s.x80_hi, "kind": verdict["kind"],
            "bound": verdict["params"], "runs": len(runs)}  # fmt: skip


def _psi_reading(settings: SearchSettings, runs, s) -> dict:
    verdict = _verdict(settings, runs, s.x80_median, s.asymptote_mean)
    return {"x": s.x80_median, "lo": s.x80_lo, "hi": s.x80_hi, "kind": verdict["kind"],
            "bound": verdict["params"], "runs": len(runs)}  # fmt: skip


def _score(read: dict, reference: dict, n_grid: int) -> dict:
    """A reading against the reference: runs (and their share of the grid's), and where the
    reference is located its coverage and error; where it is a bound, whether the reading's
    runs bound it on the same side."""
    out = {"runs": read["runs"], "share": read["runs"] / n_grid, "kind": read["kind"]}
    if reference["kind"] == POINT:
        return out | {
            "covered": bool(read["lo"] <= reference["x"] <= read["hi"]),
            "error": float(read["x"] - reference["x"]),
            "x": float(read["x"]),  # the reading itself (ln params), for the figure
            "lo": float(read["lo"]),
            "hi": float(read["hi"]),
        }
    return out | {"bound_ok": read["kind"] == reference["kind"], "located": read["kind"] == POINT}


def stops(settings: SearchSettings, runs) -> bool:
    """The sampler's stop rule on runs (``decide``'s, the range being the grid's sizes)."""
    if len(runs) >= settings.budget:
        return True
    grid, log_w, d_range = posterior_of(settings, runs)
    s = summary_of(settings, grid, normalize(log_w), d_range)
    return (
        (s.ratio <= settings.precision and settled(settings, runs))
        or s.mass_above >= settings.give_up_mass
        or s.mass_below >= settings.give_up_mass
    )


# --- the methods -------------------------------------------------------------------------------


def _sampler(grid: RecordedGrid, counts: tuple[int, ...], turn: int = 0) -> tuple:
    settings = grid.settings
    off = replace(settings, precision=1.0 + 1e-9, budget=max(counts))
    pool = _Pool(grid, turn)
    own, at, _ = trajectory(settings, off, pool.draw, counts)
    return own, at, pool.redirected


def sampler_path(grid: RecordedGrid, turn: int, n_max: int) -> list[tuple[int, float]]:
    """The sampler's runs on ``grid`` in seed order ``turn`` with its stop off, to ``n_max``
    runs (fewer where the grid or the range ends first): where any stop rule would cut it."""
    return _sampler(grid, (n_max,), turn)[1][n_max]


def _psi(grid: RecordedGrid, counts: tuple[int, ...], turn: int = 0) -> tuple:
    settings = grid.settings
    x_lo, x_hi = settings.x_of(np.array([settings.d_min, settings.d_max]))
    psi = PsiMethod(x_lo, x_hi, settings.chance, settings.level, settings.chance_corrected)
    pool = _Pool(grid, turn)
    return psi_trajectory(settings, psi, pool.available, pool.draw, counts)[:2]


def _bisection(grid: RecordedGrid, turn: int = 0) -> tuple[list, int]:
    """The runs in bisection's order (all of the grid's, the ends' seeds after its stop) and
    the run count at its stop."""
    settings, pool = grid.settings, _Pool(grid, turn)
    sizes = grid.sizes
    runs = [pool.draw(sizes[-1])]
    ceiling = max(runs[0][1], 0.5 * (1.0 + settings.chance))  # a failed largest run: no ceiling
    target = float(
        level_target(ceiling, settings.chance, settings.level, settings.chance_corrected)
    )
    lo, hi = 0, len(sizes) - 1
    while hi - lo > 1:
        mid = (lo + hi) // 2
        left = [i for i in range(lo + 1, hi) if pool.left[sizes[i]]]
        if not left:
            break
        i = min(left, key=lambda i: (abs(i - mid), i))
        d, y = pool.draw(sizes[i])
        runs.append((d, y))
        if y >= target:
            hi = i
        else:
            lo = i
    stop = len(runs)
    turn = 0
    while (run := pool.draw(sizes[(lo, hi)[turn % 2]])) is not None:
        runs.append(run)
        turn += 1
    return runs, stop


def user_grid(grid: RecordedGrid, turn: int = 0) -> list | None:
    """The runs of :data:`USER_GRID` on a dense grid (None on any other): the sizes nearest to
    evenly spaced points in ln(params), each taken once, their first seeds (in ``turn``'s
    order)."""
    n_sizes, seeds = USER_GRID
    if not grid.dense or len(grid.sizes) < n_sizes:
        return None
    sizes = np.array(grid.sizes)
    xs = grid.settings.x_of(sizes)
    free = list(range(len(sizes)))
    chosen = []
    for target in np.linspace(xs[0], xs[-1], n_sizes):
        i = min(free, key=lambda i: abs(xs[i] - target))
        free.remove(i)
        chosen.append(int(sizes[i]))
    pool = _Pool(grid, turn)
    runs = [pool.draw(d) for d in sorted(chosen) for _ in range(seeds)]
    return [r for r in runs if r is not None]


def _oracle(
    grid: RecordedGrid, reference: dict, turn: int = 0, spread: bool = False
) -> tuple[list, int]:
    """The runs of a placement told the reference (all of the grid's, in its order) and the run
    count at the sampler's stop rule: the largest size, then the sizes nearest the reference's
    median, lower and upper 90% ends in turn; ``spread``: nearest the median, the halfway point
    of the grid's rise (:func:`_halfway`) and as far above the median."""
    settings, pool = grid.settings, _Pool(grid, turn)
    sizes = np.array(grid.sizes)
    xs = settings.x_of(sizes)
    x = reference["x"]
    step = x - _halfway(grid) if spread else None
    targets = (x, x - step, x + step) if spread else (x, reference["lo"], reference["hi"])
    aims = [int(sizes[np.argmin(np.abs(xs - t))]) for t in targets]
    runs = [pool.draw(grid.sizes[-1])]
    while (run := pool.draw(aims[(len(runs) - 1) % 3])) is not None:
        runs.append(run)
    stop = next((n for n in range(3, len(runs) + 1) if stops(settings, runs[:n])), len(runs))
    return runs, stop


def _halfway(grid: RecordedGrid) -> float:
    """Where (ln params) the seeds' mean accuracy, made non-decreasing in size, first reaches
    halfway from chance to that of the largest sizes (their last quarter)."""
    settings, sizes = grid.settings, grid.sizes
    means = np.maximum.accumulate([np.mean([y for d, y in grid.runs if d == u]) for u in sizes])
    top = means[-max(1, len(sizes) // 4) :].mean()
    half = settings.chance + 0.5 * (top - settings.chance)
    i = int(np.argmax(means >= half))
    xs = settings.x_of(np.array(sizes))
    if i == 0:
        return float(xs[0])
    lo, hi = means[i - 1], means[i]
    return float(xs[i - 1] + (xs[i] - xs[i - 1]) * (half - lo) / max(hi - lo, 1e-12))


def _heldout(grid: RecordedGrid, runs, score: dict) -> dict:
    """A score at a dense grid's located reference with ``heldout_error`` added: its reading's
    error against the grid read without ``runs``."""
    if not grid.dense or "error" not in score:
        return score
    rest = list(grid.runs)
    for run in runs:
        rest.remove(run)
    x = reading(grid.settings, sorted(rest, reverse=True))["x"]
    return score | {"heldout_error": float(score["x"] - x)}


def _random_order(grid: RecordedGrid, rng: np.random.Generator) -> tuple[list, int]:
    runs = [grid.runs[i] for i in rng.permutation(len(grid.runs))]
    stop = next((n for n in range(3, len(runs) + 1) if stops(grid.settings, runs[:n])), len(runs))
    return runs, stop


def replay_grid(
    grid: RecordedGrid,
    methods: tuple[str, ...] = METHODS,
    counts: tuple[int, ...] = COUNTS,
    orders: int = 5,
    seed: int = 0,
    peer: bool = False,
) -> dict:
    """One grid's reference and each method's scores (``_score``) at its own stop (``stop``)
    and at each run count in ``counts`` it has as many runs for (by count): a list a method,
    one entry a seed order (``orders`` on a dense grid, else one); ``random`` one per random
    order; ``grid48`` (dense grids only) its 48 runs. ``peer`` (dense grids, psignifit
    installed): psignifit's reading of the whole grid, and of the sampler's runs at
    :data:`PEER_COUNTS` beside ours of the same runs (``calibration``: each count's list, one
    entry a seed order)."""
    n = len(grid.runs)
    settings = grid.settings
    reference = reading(settings, sorted(grid.runs, reverse=True))
    mine = tuple(k for k in counts if k < n) or (n,)  # a count of all runs reads the reference
    turns = range(orders if grid.dense else 1)
    out: dict = {
        "name": grid.name,
        "source": grid.source,
        "sizes": grid.sizes,
        "runs": n,
        "reference": reference | {"d": float(settings.d_of(reference["x"]))},
        "methods": {},
    }

    def scored(runs) -> dict:
        return _score(reading(settings, runs), reference, n)

    def columns(own, at: dict, score=scored, runs_of=lambda r: r) -> dict:
        stop = _heldout(grid, runs_of(own), score(own))
        return {"stop": stop} | {str(k): score(at[k]) for k in mine if k in counts}

    if "sampler" in methods:
        out["methods"]["sampler"] = []
        calibrations = []
        for turn in turns:
            own, at, redirected = _sampler(grid, mine, turn)
            out["methods"]["sampler"].append(columns(own, at) | {"redirected": redirected})
            if peer and grid.dense:
                calibrations.append(_calibration(grid, reference, at))
        if calibrations:
            out["calibration"] = {
                k: [c[k] for c in calibrations if k in c] for k in map(str, PEER_COUNTS)
            }
    if "psi" in methods:

        def psi_scored(r) -> dict:
            return _score(_psi_reading(settings, *r), reference, n)

        out["methods"]["psi"] = []
        for turn in turns:
            own, at = _psi(grid, mine, turn)
            out["methods"]["psi"].append(columns(own, at, psi_scored, lambda r: r[0]))
    if "bisection" in methods:
        out["methods"]["bisection"] = []
        for turn in turns:
            runs, stop = _bisection(grid, turn)
            out["methods"]["bisection"].append(
                columns(runs[:stop], {k: runs[:k] for k in mine if k in counts})
            )
    if "random" in methods:
        rng = np.random.default_rng([seed, sum(map(ord, grid.name))])
        out["methods"]["random"] = []
        for _ in range(orders):
            runs, stop = _random_order(grid, rng)
            out["methods"]["random"].append(
                columns(runs[:stop], {k: runs[:k] for k in mine if k in counts})
            )
    for name, spread in (("oracle", False), ("oracle_spread", True)):
        if name in methods and grid.dense and reference["kind"] == POINT:
            out["methods"][name] = []
            for turn in turns:
                runs, stop = _oracle(grid, reference, turn, spread)
                out["methods"][name].append(
                    columns(runs[:stop], {k: runs[:k] for k in mine if k in counts})
                )
    if "grid48" in methods and grid.dense:
        out["methods"]["grid48"] = [
            {"stop": _heldout(grid, runs, scored(runs))}
            for turn in turns
            if (runs := user_grid(grid, turn))
        ]
    if peer and grid.dense:
        ref = psignifit_reading(settings, list(grid.runs), grid.trials)
        out["peer_reference"] = ref | {"d": float(settings.d_of(ref["x"]))}
    logger.info("replayed %s: %d runs at %d sizes", grid.name, n, len(grid.sizes))
    return out


def _calibration(grid: RecordedGrid, reference: dict, at: dict) -> dict:
    """Ours and psignifit's readings of the sampler's runs at each of :data:`PEER_COUNTS` the
    replay reached: each interval's width (ln) and whether it holds the dense reference."""
    out = {}
    for k in PEER_COUNTS:
        runs = at.get(k)
        if runs is None or len(runs) < k:
            continue
        ours = reading(grid.settings, runs)
        theirs = psignifit_reading(grid.settings, runs, grid.trials)
        out[str(k)] = {
            name: {
                "width": r["hi"] - r["lo"],
                "covered": bool(r["lo"] <= reference["x"] <= r["hi"]),
                "error": r["x"] - reference["x"],
            }
            for name, r in (("ours", ours), ("psignifit", theirs))
        }
    return out


def calibration_summary(grids: list[dict]) -> dict:
    """Over the located dense grids with a calibration, each of its seed orders a replay: at
    each count, each reader's coverage of the dense reference and median width, the median
    ratio of our width to psignifit's on the same runs, and each reader's ``*_scale``: the 90th
    percentile of |error| over half its interval's width, the factor its intervals could be
    scaled by and still have held 90% of the replays (below 1: wider than the errors ask; the
    half-width taken as symmetric)."""
    out = {}
    for k in map(str, PEER_COUNTS):
        located = [
            g["calibration"][k]
            for g in grids
            if g.get("calibration", {}).get(k) and g["reference"]["kind"] == POINT
        ]
        rows = [r for replays in located for r in replays]
        if not rows:
            continue
        out[k] = {"grids": len(located), "replays": len(rows)} | {
            f"{name}_{what}": float(f([r[name][key] for r in rows]))
            for name in ("ours", "psignifit")
            for what, key, f in (("coverage", "covered", np.mean), ("width", "width", np.median))
        }
        out[k]["width_ratio"] = float(
            np.median([r["ours"]["width"] / r["psignifit"]["width"] for r in rows])
        )
        for name in ("ours", "psignifit"):
            ratios = [abs(r[name]["error"]) / (r[name]["width"] / 2) for r in rows]
            out[k][f"{name}_scale"] = float(np.quantile(ratios, 0.9))
    return out


def _summary(grids: list[dict], method: str, column: str, precision: float = 2.5) -> dict | None:
    """A method's column over the grids' replays: against located references, coverage, median
    |ln error| and median share of the grid's runs; against bounds, the share read on the right
    side and the share read as located. ``precise_*``: the same over the located grids whose
    full reading is within ``precision`` (where a grid holds too few runs for it, the own stop
    comes only when they are used up, and reads the reference itself)."""
    point, bound, precise = [], [], []
    n_point = n_bound = 0  # grids (each of ``point`` and ``bound`` is a replay: a seed order)
    for g in grids:
        ref = g["reference"]
        trials = [t[column] for t in g["methods"].get(method, []) if column in t]
        if ref["kind"] == POINT:
            point += trials
            n_point += bool(trials)
            if np.exp(ref["hi"] - ref["lo"]) <= precision:
                precise += trials
        else:
            bound += trials
            n_bound += bool(trials)
    if not point and not bound:
        return None
    out: dict = {
        "grids_located": n_point,
        "grids_bound": n_bound,
        "replays_located": len(point),
        "replays_bound": len(bound),
    }
    if point:
        out |= {
            "coverage": float(np.mean([s["covered"] for s in point])),
            "median_abs_log_error": float(np.median(np.abs([s["error"] for s in point]))),
            "median_runs": float(np.median([s["runs"] for s in point])),
            "median_share": float(np.median([s["share"] for s in point])),
            "max_share": float(np.max([s["share"] for s in point])),
            "within_60": float(np.mean([s["share"] <= 0.6 for s in point])),  # issue 61's mark
            "read_located": float(np.mean([s["kind"] == POINT for s in point])),
        }
        if heldout := [abs(s["heldout_error"]) for s in point if "heldout_error" in s]:
            out["median_abs_heldout_error"] = float(np.median(heldout))
    if precise:
        out |= {
            "precise_grids": len(precise),
            "precise_coverage": float(np.mean([s["covered"] for s in precise])),
            "precise_median_share": float(np.median([s["share"] for s in precise])),
            "precise_within_60": float(np.mean([s["share"] <= 0.6 for s in precise])),
        }
    if bound:
        out |= {
            "bound_ok": float(np.mean([s["bound_ok"] for s in bound])),
            "bound_read_located": float(np.mean([s["located"] for s in bound])),
            "bound_median_share": float(np.median([s["share"] for s in bound])),
        }
    return out


def bench_replay(
    paths: list[Path],
    methods: tuple[str, ...] = METHODS,
    counts: tuple[int, ...] = COUNTS,
    precision: float = 2.5,
    orders: int = 5,
    seed: int = 0,
    peer: bool = False,
    on_grid: Callable[[int, int, RecordedGrid], None] | None = None,
) -> dict:
    """Every grid of ``MIN_SIZES`` sizes or more in ``paths`` replayed (``replay_grid``), and
    each method's columns summarised over them (``_summary``: ``stop`` and each count); with
    ``peer``, psignifit beside the dense grids (:func:`calibration_summary`). ``on_grid(i, n,
    grid)`` is told as the i-th of the n grids begins (minutes each, on a dense grid)."""
    unknown = set(methods) - set(METHODS)
    if unknown or not methods:
        raise ConfigError(
            f"methods {sorted(unknown) or '(none)'}: choose from {', '.join(METHODS)}"
        )
    if not counts or min(counts) < 3:
        raise ConfigError(f"run counts {counts}: give counts of 3 or more")
    grids = load_grids(paths, precision)
    if not grids:
        raise ConfigError(
            f"no grid of {MIN_SIZES} sizes or more in {', '.join(map(str, paths))}: give bench"
            " gpu science records or reports' results.json"
        )
    if peer and not peer_available():
        raise ConfigError("the peer reading needs psignifit: pip install -e '.[bench]'")
    replays = []
    for i, grid in enumerate(grids):
        if on_grid is not None:
            on_grid(i, len(grids), grid)
        replays.append(replay_grid(grid, methods, counts, orders, seed, peer))
    columns = ("stop", *(str(k) for k in counts))
    return {
        "precision": precision,
        "counts": list(counts),
        "orders": orders,
        "grids": replays,
        "summary": {  # a method with nothing to read (grid48 without a dense grid) left out
            m: cols
            for m in methods
            if (cols := {c: s for c in columns if (s := _summary(replays, m, c, precision))})
        },
        "calibration": calibration_summary(replays) if peer else {},
    }
