"""Replays of recorded grids of real runs: the search judged on real training runs.

A recorded grid is a study's runs at a few sizes, several seeds each: a science record of
``threshold bench gpu`` (two studies, at each budget checkpoint where the record keeps the runs'
accuracy there, else at the end) or a report's ``results.json`` (each study's runs). The full
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

import json
import logging
from collections import defaultdict
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from threshold.config import make_recipe, model_config_for, param_count
from threshold.errors import ConfigError
from threshold.search.bench.benchmark import psi_trajectory, trajectory
from threshold.search.bench.peer import available as peer_available
from threshold.search.bench.peer import psignifit_reading
from threshold.search.bench.psi import PsiMethod
from threshold.search.bounds import POINT, locate
from threshold.search.grid import RECORD_KIND
from threshold.search.policy import posterior_of, posterior_summary, settled, summary_of
from threshold.search.posterior import level_target, normalize
from threshold.search.settings import SearchSettings
from threshold.tasks import TaskConfig, load_task_data

__all__ = [
    "METHODS",
    "RecordedGrid",
    "bench_replay",
    "calibration_summary",
    "load_grids",
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
MIN_SIZES = 3  # a grid of fewer sizes has no middle for the bracket


@dataclass(frozen=True)
class RecordedGrid:
    """One recorded grid: its runs (d, accuracy) in recorded order and the study's settings,
    the size table cut to the grid's sizes."""

    name: str
    source: str
    settings: SearchSettings
    runs: tuple[tuple[int, float], ...]
    trials: int = 2000  # test questions a run's accuracy is read on (psignifit's counts)
    dense: bool = False  # a dense grid (``threshold grid``): every size of its range, 5+ seeds

    @property
    def sizes(self) -> list[int]:
        return sorted({d for d, _ in self.runs})


# --- loading -----------------------------------------------------------------------------------


def load_grids(paths: list[Path], precision: float = 2.5) -> list[RecordedGrid]:
    """Every grid of ``MIN_SIZES`` sizes or more in ``paths`` (files, or folders of ``*.json``
    but their ``*-analysis.json``): science records of ``bench gpu`` and reports'
    ``results.json``. A study found in several reports (a suite's and its part's) is kept once,
    with its most runs. ``precision``: the stop's, as ``find``'s."""
    files: list[Path] = []
    for path in map(Path, paths):
        if path.is_dir():
            files += sorted(
                p for p in path.rglob("*.json") if not p.name.endswith("-analysis.json")
            )
        elif path.is_file():
            files.append(path)
        else:
            raise ConfigError(f"replay {path}: no such file or folder; give records or reports")
    grids: dict[str, RecordedGrid] = {}
    for file in files:
        try:
            record = json.loads(file.read_text())
        except (OSError, ValueError) as err:
            raise ConfigError(f"replay {file}: not a JSON record ({err})") from None
        if not isinstance(record, dict):
            continue
        if record.get("kind") == RECORD_KIND:
            found = _dense_grids(record, file)
        elif isinstance(record.get("science"), dict) and "runs" in record["science"]:
            found = [] if record.get("tiny") else _science_grids(record["science"], file)
        elif isinstance(record.get("studies"), list):
            found = _report_grids(record, file)
        else:
            logger.info("replay: %s holds no science record or report: skipped", file)
            continue
        for grid in found:
            kept = grids.get(grid.name)
            if len(grid.sizes) >= MIN_SIZES and (kept is None or len(grid.runs) > len(kept.runs)):
                grids[grid.name] = grid
    return [replace(g, settings=replace(g.settings, precision=precision)) for g in grids.values()]


def _table_settings(table: dict[int, int], chance: float, level: float = 0.8) -> SearchSettings:
    """Search settings on the size table {d: params} of a grid's sizes."""
    ds = sorted(table)
    return SearchSettings(
        tuple((d, table[d]) for d in ds), d_lo=ds[0], d_hi=ds[-1], chance=chance, level=level
    )


_SCIENCE_TASKS = {  # bench gpu's science pair (search/gpu.py science_pair)
    "add": (("add",), None),
    "max+med+add": (("max", "med", "add"), "add"),
}


def _science_grids(sci: dict, file: Path) -> list[RecordedGrid]:
    """A science record's grids: per study, one at each budget checkpoint where its runs keep
    their accuracy there (``budget`` of each run), else one of their final accuracies."""
    made = make_recipe(sci["recipe"])
    decoding = sci.get("decoding", made.train.decoding)
    key = "sampled_accuracy" if decoding == "sampled" else "accuracy"
    out = []
    for study, (ops, measure) in _SCIENCE_TASKS.items():
        runs = [r for r in sci["runs"] if r["study"] == study]
        if not runs:
            continue
        task = TaskConfig(ops=ops, n=sci["mod"], measure=measure)
        answers = load_task_data(task).test[task.measured_op].answers
        shares = np.bincount(answers) / answers.size
        chance = float((shares**2).sum() if decoding == "sampled" else shares.max())
        table = {
            d: param_count(model_config_for(task, d, made.train, **made.model_kwargs))["total"]
            for d in sorted({r["d"] for r in runs})
        }
        if len(table) < MIN_SIZES:
            continue
        settings = _table_settings(table, chance)
        order = sorted(runs, key=lambda r: (r["d"], r["seed"]))  # the seeds in recorded order
        if all(r.get("budget") for r in runs):  # every run's accuracy at every checkpoint
            steps = sorted({b["step"] for b in runs[0]["budget"]})
            for step in steps:
                at = [
                    (r["d"], next(b[key] for b in r["budget"] if b["step"] == step)) for r in order
                ]
                out.append(
                    RecordedGrid(f"{file.stem} {study} @{step}", str(file), settings, tuple(at))
                )
        else:
            at = tuple((r["d"], float(r[key])) for r in order)
            out.append(RecordedGrid(f"{file.stem} {study} @end", str(file), settings, at))
    return out


def _dense_grids(record: dict, file: Path) -> list[RecordedGrid]:
    """A dense grid's record (:func:`threshold.search.grid.export_record`): one grid at each of
    its budget checkpoints, the runs by size and then replicate (the seeds in the order a live
    study draws them), the accuracy its study's decoding scores. A grid still training (fewer
    runs than cells) is left out: its reference would read the runs trained so far."""
    if record.get("n_cells") and len(record["runs"]) < record["n_cells"]:
        logger.info("replay: %s has %d of %d runs: left out until whole", file,
                    len(record["runs"]), record["n_cells"])  # fmt: skip
        return []
    key = "sampled_accuracy" if record["decoding"] == "sampled" else "accuracy"
    table = {int(d): int(p) for d, p in record["params"].items()}
    table = {d: p for d, p in table.items() if any(r["d"] == d for r in record["runs"])}
    if len(table) < MIN_SIZES or record["chance"] is None:
        return []
    settings = replace(
        _table_settings(table, float(record["chance"]), float(record["level"])),
        chance_corrected=bool(record["chance_corrected"]),
    )
    trials = int(json.loads(record["settings"]["task"])["n_test"])
    runs = sorted(record["runs"], key=lambda r: (r["d"], r["replicate"]))
    out = []
    for step in record["checkpoint_steps"]:
        at = tuple(
            (r["d"], float(next(b[key] for b in r["budget"] if b["step"] == step))) for r in runs
        )
        name = f"{record['study']} @{step}"
        out.append(RecordedGrid(name, str(file), settings, at, trials, dense=True))
    return out


def _report_grids(record: dict, file: Path) -> list[RecordedGrid]:
    """A report's studies, each its runs in trial order (the sizes' params as recorded)."""
    out = []
    for study in record["studies"]:
        row = study.get("row") or {}
        runs = sorted(study.get("runs") or [], key=lambda r: r.get("trial", 0))
        chance = study.get("chance")
        if chance is None or not runs:
            continue
        table = {int(r["d"]): int(r["params"]) for r in runs}
        if len(table) < MIN_SIZES:
            continue
        settings = _table_settings(table, float(chance), float(study.get("level") or 0.8))
        at = tuple((int(r["d"]), float(r["accuracy"])) for r in runs)
        out.append(RecordedGrid(row.get("name") or study.get("name"), str(file), settings, at))
    return out


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
) -> dict:
    """Every grid of ``MIN_SIZES`` sizes or more in ``paths`` replayed (``replay_grid``), and
    each method's columns summarised over them (``_summary``: ``stop`` and each count); with
    ``peer``, psignifit beside the dense grids (:func:`calibration_summary`)."""
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
    replays = [replay_grid(g, methods, counts, orders, seed, peer) for g in grids]
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
