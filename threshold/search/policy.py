"""The search policy: which size to train next, and when to stop.

``decide`` is a pure function of the settings and the trials (completed runs with their accuracy,
pending runs with only their size), so every worker rebuilds the same state from storage and the
same inputs give the same decision. Phases, in order:

1. *Bracket*: the first three sizes are fixed (d_hi, to pin the asymptote; d_lo; the middle in
   ln parameters), the same for every worker.
2. *Stop* when the 90% interval of x80 spans at most ``precision`` in parameters, when the budget
   (completed + pending) is used, or when the range has reached d_min or d_max and the posterior
   says the transition lies beyond it.
3. *Widen* where the posterior of x80 piles beyond an edge of the current range (the initial
   range stretched to every size already tried, so it is derived from the trials alone): that
   edge moves out by ``widen_factor`` in d for this decision. A run beyond the old edge then
   joins the range, and the next decision may widen again.
4. *Look ahead* (psi method): for log-spaced candidate sizes across the (widened) range, plus the
   sizes already run (so repeats with new seeds happen when they pay most), the expected drop in
   the posterior variance of x80 (plus ``mid_weight`` times that of the midpoint) from one more
   run, divided by the run's expected cost (raised to ``cost_power``); the best wins, ties to the
   smaller size. Widening only offers sizes: a far edge is run when it pays. The gain at a size
   already run is discounted by what the seed spread there justifies (``repeat_discount``):
   repeats of bimodal seeds pay, repeats of graded runs that agree soon do not, and the runs
   spread instead.

Pending runs enter the posterior at their expected log-likelihood (``fantasy_update``), so
parallel workers with different pending lists spread out unless one size is genuinely best.
The stop rule and the reported estimate use completed runs only, read on the reading's finer
slope grid (``PosteriorSettings.reading``); the look-ahead chooses on the hypotheses of that
posterior whose slopes are the coarser grid's (``_look_ahead``): one chain of sums for both.
The estimate a study reports (``read_posterior``) reads the same posterior once more on a grid
finer still where its mass lies (``posterior.refined``); decisions do not, so they cost no more.
"""

from __future__ import annotations

import logging
from collections import Counter, OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from typing import NamedTuple

import numpy as np

from threshold.errors import ConfigError
from threshold.search.posterior import (
    Grid,
    PosteriorSummary,
    add_size,
    expected_variances,
    fantasy_update,
    make_grid,
    normalize,
    offset_sd_posterior,
    pool_offset_sds,
    refined,
    restricted,
    seed_variance,
    size_log_likelihood,
    spread_out,
    summarize,
)
from threshold.search.settings import SearchSettings, stop_reason

__all__ = [
    "Decision",
    "SearchSettings",  # defined in settings.py; re-exported for the sampler's import
    "bracket",
    "decide",
    "offset_sd_weights",
    "posterior_of",
    "posterior_summary",
    "read_posterior",
    "repeat_discount",
    "rounded",
    "search_range",
    "summary_of",
]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Decision:
    stop: bool
    # Stopping: precision | budget | above_range | below_range. A run: bracket | widen | psi.
    reason: str
    d: int | None = None  # size of the next run (None when stopping)
    replicate: int | None = None  # runs already at d (completed + pending): the caller's seed index
    info: dict = field(default_factory=dict)  # small numbers explaining the choice
    # current estimate from completed runs, on the decision's grid (not ``read_posterior``'s)
    estimate: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)


def rounded(value: float) -> float:
    """A plain float rounded to 4 significant digits: small JSON."""
    return float(f"{float(value):.4g}")


def _runs(settings: SearchSettings, completed) -> tuple[np.ndarray, np.ndarray]:
    """Validated (d, accuracy) arrays, each (N,)."""
    pairs = [(int(d), float(y)) for d, y in completed]
    ds = np.array([d for d, _ in pairs], dtype=int)
    ys = np.array([y for _, y in pairs], dtype=float)
    if ys.size and not np.all((ys >= 0) & (ys <= 1)):
        raise ConfigError(
            f"accuracies must lie in [0, 1], got {ys[~((ys >= 0) & (ys <= 1))][:3].tolist()}:"
            " leave failed runs out of the completed list"
        )
    settings.x_of(ds)  # raises on a size outside the table
    return ds, ys


def bracket(settings: SearchSettings) -> tuple[int, int, int]:
    """The fixed first sizes: d_hi (pins the asymptote), d_lo, then the middle in ln params."""
    x_mid = 0.5 * (settings.x_of(settings.d_lo) + settings.x_of(settings.d_hi))
    return settings.d_hi, settings.d_lo, settings.nearest(float(settings.d_of(x_mid)))


def search_range(settings: SearchSettings, sizes: Iterable[int]) -> tuple[int, int]:
    """The initial range stretched to cover every size already tried."""
    sizes = list(sizes)
    return min([settings.d_lo, *sizes]), max([settings.d_hi, *sizes])


@lru_cache(maxsize=4)  # 29 MB each at the default range: a search and its widenings
def _grid(posterior, chance: float, level: float, corrected: bool, x_lo: float, x_hi: float):
    """``make_grid``, cached: a search rebuilds the same grid at every decision."""
    return make_grid(posterior, chance, level, corrected, x_lo, x_hi)


class _State(NamedTuple):
    """The posterior after a study's runs so far, in their order: the hypotheses left (H',
    increasing), their per-sd sums of log likelihood over the runs (G, H'), and per size run,
    its own terms (``size_log_likelihood``) on the hypotheses left when it was last summed
    (a superset of rows): size -> (rows (H'',), terms (G, H'')). ``before``: the state before
    the last runs' group (consecutive runs at one size), which one more run there joins."""

    rows: np.ndarray
    sums: np.ndarray
    terms: dict
    before: _State | None = None

    @property
    def nbytes(self) -> int:
        """Bytes of its arrays and its ``before``'s, each array it shares with that once."""
        arrays = {}
        for state in (self, self.before) if self.before is not None else (self,):
            for a in (state.rows, state.sums, *(a for pair in state.terms.values() for a in pair)):
                arrays[id(a)] = a.nbytes
        return sum(arrays.values())


class _States:
    """The ``_State`` of recent searches by (grid key, runs in order), least recently used out
    first, bounded by the bytes of their arrays. A study's next decision sees the same runs
    plus one, and goes on from the state of the runs before it (``_added``)."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.items: OrderedDict = OrderedDict()
        self.nbytes = 0

    def get(self, key: tuple):
        value = self.items.get(key)
        if value is not None:
            self.items.move_to_end(key)
        return value

    def put(self, key: tuple, value: _State) -> None:
        if key in self.items or value.nbytes > self.max_bytes:
            return
        self.items[key] = value
        self.nbytes += value.nbytes
        while self.nbytes > self.max_bytes:
            _, old = self.items.popitem(last=False)
            self.nbytes -= old.nbytes

    def pop(self, key: tuple) -> None:
        old = self.items.pop(key, None)
        if old is not None:
            self.nbytes -= old.nbytes

    def clear(self) -> None:
        self.items.clear()
        self.nbytes = 0


_KEEP_FROM = 3  # runs at a size from which its terms are kept in the state
# 96 MiB (counting arrays states share once per state): a study's latest state, and that of
# its widened range, are what the next decisions go on from.
_STATES = _States(96 * 2**20)
# Log weight of a hypothesis pruning dropped, where a pair's others are kept: finite, so
# sums and shifts stay free of inf - inf, and far below any weight exp() can tell from 0.
_DROPPED = -1e300


def _added(grid: Grid, state: _State, runs: tuple, start: int) -> _State:
    """The state with the group ``runs[start:]`` (of (x, accuracy) pairs, in order; runs at
    one size) added to ``state``, that of ``runs[:start]``: the size's terms, summed again
    over every run there, replace the ones summed before, and ``add_size`` drops the
    hypotheses the posterior now puts far below the likeliest. A size's terms are kept where
    it has ``_KEEP_FROM`` runs or more (those of fewer cost less to sum again than to keep),
    each on its own hypotheses until those are more than twice the ones left."""
    x = runs[-1][0]
    y = np.array([acc for u, acc in runs if u == x])  # (R,) every run at x
    n_new = len(runs) - start  # the group's runs
    sums = state.sums
    if x in state.terms:
        old_rows, old = state.terms[x]
        sums = sums - old[:, np.searchsorted(old_rows, state.rows)]
    elif y.size > n_new:  # runs at x before this group, their terms not kept: sum them again
        sums = sums - size_log_likelihood(grid, x, y[:-n_new], state.rows)
    rows, sums, own = add_size(grid, x, y, state.rows, sums)  # (H',), (G, H'), (G, H')
    terms = {x: (rows, own)} if y.size >= _KEEP_FROM else {}
    for u, (u_rows, u_terms) in state.terms.items():
        if u == x:
            continue
        if u_rows.size > 2 * rows.size:  # rows are a subset of u_rows
            u_rows, u_terms = rows, u_terms[:, np.searchsorted(u_rows, rows)]
        terms[u] = (u_rows, u_terms)
    return _State(rows, sums, terms, state._replace(before=None))


def _groups(runs: tuple) -> list[int]:
    """Where each group of consecutive runs at one size ends: indices into runs, increasing."""
    return [i + 1 for i in range(len(runs)) if i + 1 == len(runs) or runs[i + 1][0] != runs[i][0]]


def _size_sums(settings: SearchSettings, completed, cover: Sequence[int] = ()):
    """The reading's grid (``PosteriorSettings.reading``) restricted to the (midpoint, slope)
    pairs pruning keeps, the completed runs' per-sd sums of log likelihood over sizes on it
    (G, H') (``_DROPPED`` for a dropped hypothesis of a kept pair), and the range (d_lo, d_hi)
    the runs span together with the initial range and the sizes in ``cover``.

    Runs are added in the order they came, consecutive runs at one size together (``_added``),
    and after each group the hypotheses the posterior so far puts far below the likeliest are
    dropped: a decision goes on from the state of the runs before its last, and sums again
    only the last run's size, on the hypotheses left. The state of a list of runs is what this
    loop computes from nothing, so no result depends on what ``_STATES`` held.
    """
    ds, ys = _runs(settings, completed)
    d_lo, d_hi = search_range(settings, [*ds.tolist(), *cover])
    key = (
        settings.posterior.reading(),
        float(settings.chance),
        float(settings.level),
        bool(settings.chance_corrected),
        float(settings.x_of(d_lo)),
        float(settings.x_of(d_hi)),
    )
    grid = _grid(*key)
    runs = tuple(zip(settings.x_of(ds).tolist(), ys.tolist(), strict=True))
    ends = _groups(runs)
    start, state = 0, None
    for start in range(len(runs), 0, -1):  # the longest prefix already summed
        state = _STATES.get((key, runs[:start]))
        if state is not None:
            if start < len(runs):  # superseded: the next decision goes on from these runs
                _STATES.pop((key, runs[:start]))
            break
    if state is not None and start not in ends:  # its last group goes on: sum it again
        start = max([0, *(e for e in ends if e < start)])
        state = state.before
    if state is None or start == 0:
        start = 0
        n_g = len(grid.settings.size_logit_sds)
        state = _State(np.arange(grid.mid.size), np.zeros((n_g, grid.mid.size)), {})
    for end in (e for e in ends if e > start):
        state, start = _added(grid, state, runs[:end], start), end
    if runs:
        _STATES.put((key, runs), state)
    sub, sums = spread_out(grid, state.rows, state.sums, _DROPPED)
    return sub, sums, (d_lo, d_hi)


def posterior_of(
    settings: SearchSettings, completed, cover: Sequence[int] = ()
) -> tuple[Grid, np.ndarray, tuple[int, int]]:
    """Grid and unnormalised log posterior weights (H,) from completed runs (``grid.log_prior``
    plus their log likelihood), and the range (d_lo, d_hi) they span together with the initial
    range and the sizes in ``cover`` (pending runs, new edges). The grid is the reading's
    (``PosteriorSettings.reading``) and holds only the (midpoint, slope) pairs that pruning
    kept (``_size_sums``): every later step (summaries, pending runs, the look-ahead) works on
    those alone."""
    grid, sums, d_range = _size_sums(settings, completed, cover)
    return grid, grid.log_prior + pool_offset_sds(grid.settings, sums), d_range


def _look_ahead(settings: SearchSettings, grid: Grid, log_w: np.ndarray) -> tuple:
    """The look-ahead's posterior, (grid, log_w): the reading's hypotheses whose slope is one
    of the posterior's own ``slopes`` (``reading`` keeps them exactly and adds the ones between),
    so one chain of sums serves both. Where pruning left none of those (an in-between slope
    fits the runs far better than its neighbours), every hypothesis left."""
    block = grid.kappas.size * grid.asymptotes.size  # hypotheses per (midpoint, slope) pair
    on_slopes = np.isin(grid.slope[::block], settings.posterior.slopes)  # (C,) per pair
    if not on_slopes.any() or on_slopes.all():
        return grid, log_w
    # ``restricted`` keeps every hypothesis of a kept pair, in order: the weights go with them
    return restricted(grid, np.flatnonzero(on_slopes)), log_w[np.repeat(on_slopes, block)]


def offset_sd_weights(settings: SearchSettings, completed) -> np.ndarray:
    """Posterior probability of each of the posterior's ``size_logit_sds`` from the completed
    runs: (G,). Weight on the largest says the sizes stray from every smooth curve."""
    grid, sums, _ = _size_sums(settings, completed)
    return offset_sd_posterior(grid.settings, grid.log_prior + sums)


def summary_of(settings: SearchSettings, grid: Grid, w: np.ndarray, d_range) -> PosteriorSummary:
    """The summary of x80 (``summarize``) of a posterior, normalised weights w (H,), read on the
    range (d_lo, d_hi)."""
    x_lo, x_hi = settings.x_of(np.array(d_range))
    return summarize(grid, w, float(x_lo), float(x_hi))


def read_posterior(settings: SearchSettings, completed) -> tuple[Grid, np.ndarray, tuple[int, int]]:
    """The reading of completed runs: ``posterior_of`` integrated on a finer grid where its
    mass lies (``refined``): grid, unnormalised log posterior weights (H,) and range. What the
    study reports; its decisions, its stop among them, read ``posterior_of`` itself."""
    grid, log_w, d_range = posterior_of(settings, completed)
    ds, ys = _runs(settings, completed)
    x = settings.x_of(ds)
    grid, log_w = refined(grid, log_w, x, ys, settings.level, settings.chance_corrected)
    return grid, log_w, d_range


def settled(settings: SearchSettings, completed) -> bool:
    """Whether the reading has settled (:attr:`SearchSettings.settle_runs`; always, with it 0):
    the median 80% point (ln params) of the completed runs and read without the last 1, 2, ...,
    ``settle_runs`` of them spans at most ``settle_nats``; each read alike, from finished runs
    alone (none in flight widens one's range). Runs in the order they ended."""
    k = settings.settle_runs
    if k == 0:
        return True
    if len(completed) <= k:
        return False
    xs = [
        posterior_summary(settings, completed[: len(completed) - j])[0].x80_median
        for j in range(k + 1)
    ]
    return max(xs) - min(xs) <= settings.settle_nats


def posterior_summary(settings: SearchSettings, completed) -> tuple[PosteriorSummary, tuple]:
    """Posterior summary of x80 from completed runs (``read_posterior``), and the range
    (d_lo, d_hi) it was read on."""
    grid, log_w, d_range = read_posterior(settings, completed)
    return summary_of(settings, grid, normalize(log_w), d_range), d_range


def _estimate(settings: SearchSettings, s: PosteriorSummary, n_runs: int) -> dict:
    """The current estimate in parameters and d (small, JSON-able)."""
    d80, d_lo, d_hi = settings.d_of([s.x80_median, s.x80_lo, s.x80_hi])
    return {
        "n_runs": n_runs,
        "params_p80": rounded(np.exp(s.x80_median)),
        "interval_params": [rounded(np.exp(s.x80_lo)), rounded(np.exp(s.x80_hi))],
        "d_p80": rounded(d80),
        "interval_d": [rounded(d_lo), rounded(d_hi)],
        "midpoint_params": rounded(np.exp(s.mid_median)),
        "asymptote": rounded(s.asymptote_mean),
        "ratio": rounded(s.ratio),
        "mass_below": rounded(s.mass_below),
        "mass_above": rounded(s.mass_above),
    }


def _candidates(settings: SearchSettings, d_range, used: Iterable[int]) -> np.ndarray:
    """Log-spaced allowed sizes across the range, plus sizes already run inside it: (J,)."""
    lo, hi = d_range
    spaced = {settings.nearest(v) for v in np.geomspace(lo, hi, settings.n_candidates)}
    return np.array(sorted(spaced | {d for d in used if lo <= d <= hi}))


def _widen(settings: SearchSettings, s: PosteriorSummary, d_range) -> tuple[int, int]:
    """The range with each edge moved out by widen_factor where x80 piles beyond it."""
    lo, hi = d_range
    if s.mass_below > settings.widen_mass and lo > settings.d_min:
        lo = settings.nearest(max(lo / settings.widen_factor, settings.d_min))
    if s.mass_above > settings.widen_mass and hi < settings.d_max:
        hi = settings.nearest(min(hi * settings.widen_factor, settings.d_max))
    return lo, hi


def repeat_discount(
    settings: SearchSettings, grid: Grid, w: np.ndarray, xc: np.ndarray, x_used: np.ndarray
) -> np.ndarray:
    """Share of the look-ahead gain that one more run at each candidate xc (J,) keeps: (J,).

    Runs at one size share its departure from the curve (sd ``size_sd``), so n runs there hold
    the information of n / (1 + n r) independent ones, r = size_sd^2 / seed variance at that
    size; the next run adds 1 / ((1 + n r)(1 + (n + 1) r)), scaled to 1 at n = 0. n counts the
    runs (completed and pending, x_used) within ``repeat_nats`` of the candidate, smoothly.
    """
    if settings.size_sd == 0 or x_used.size == 0:
        return np.ones(xc.size)
    r = settings.size_sd**2 / seed_variance(grid, w, xc)  # (J,)
    near = np.exp(-0.5 * ((xc[:, None] - x_used[None, :]) / settings.repeat_nats) ** 2)
    n = near.sum(axis=1)  # (J,)
    return (1.0 + r) / ((1.0 + n * r) * (1.0 + (n + 1.0) * r))


def decide(settings: SearchSettings, completed, pending: Sequence[int]) -> Decision:
    """The next run (size and replicate index) or a stop, from the trials alone.

    completed: (d, accuracy) pairs of finished runs; pending: sizes of running or waiting runs.
    """
    pending = [int(d) for d in pending]
    settings.x_of(np.array(pending, dtype=int))  # raises on a size outside the table
    read, read_log_w, d_range = posterior_of(settings, completed, pending)
    ds = [int(d) for d, _ in completed]
    counts = Counter(ds) + Counter(pending)
    n_used = len(ds) + len(pending)
    observed = summary_of(settings, read, normalize(read_log_w), d_range)
    estimate = _estimate(settings, observed, len(ds)) if ds else {}

    def stop(reason: str) -> Decision:
        logger.debug("stop (%s) after %d runs: %s", reason, n_used, estimate)
        return Decision(True, reason, info={"phase": "stop", "n_used": n_used}, estimate=estimate)

    def run(d: int, reason: str, **info) -> Decision:
        info = {"phase": reason} | {
            k: rounded(v) if isinstance(v, float) else v for k, v in info.items()
        }
        logger.debug("run d=%d (%s): %s", d, reason, info)
        return Decision(False, reason, int(d), counts[d], info, estimate)

    if n_used >= settings.budget:
        return stop("budget")
    for slot, d in enumerate(bracket(settings)):
        if counts[d] == 0:
            return run(d, "bracket", slot=slot)
    limits, beyond = (settings.d_min, settings.d_max), (observed.mass_below, observed.mass_above)
    reason = stop_reason(
        settings, observed.ratio if ds else None, d_range, limits, beyond, settings.give_up_mass
    )
    if reason == "precision" and not settled(settings, completed):
        reason = None  # narrow, not yet settled: one more run
    if reason is not None:
        return stop(reason)

    def fantasised(grid: Grid, log_w: np.ndarray) -> np.ndarray:
        for d in sorted(pending):  # sorted: the same fantasy whatever the order pending came in
            log_w = fantasy_update(grid, log_w, float(settings.x_of(d)))
        return normalize(log_w)  # (H,)

    grid, log_w = _look_ahead(settings, read, read_log_w)
    w = fantasised(grid, log_w)
    now = summary_of(settings, grid, w, d_range)  # what the look-ahead's gains start from
    wide = _widen(settings, now, d_range)
    if wide != d_range:  # rebuild so the grid's margin lies beyond the new edges
        grid, log_w = _look_ahead(
            settings, *posterior_of(settings, completed, [*pending, *wide])[:2]
        )
        w = fantasised(grid, log_w)
        now = summary_of(settings, grid, w, wide)

    cands = _candidates(settings, wide, counts)  # (J,)
    xc = settings.x_of(cands)  # (J,)
    targets = [grid.x80, grid.mid] if settings.mid_weight > 0 else [grid.x80]
    after = expected_variances(grid, w, xc, targets)  # (V, J)
    gain = now.x80_sd**2 - after[0]  # (J,)
    if settings.mid_weight > 0:
        gain = gain + settings.mid_weight * (now.mid_sd**2 - after[1])
    x_used = settings.x_of(np.array([*ds, *pending], dtype=int))  # (N + P,)
    gain = gain * repeat_discount(settings, grid, w, xc, x_used)
    cost = settings.cost(cands)  # (J,)
    score = gain / cost**settings.cost_power  # (J,)
    best = int(np.argmax(score))  # first maximum: the smaller size on a tie
    d = int(cands[best])
    return run(
        d,
        "psi" if d_range[0] <= d <= d_range[1] else "widen",
        gain=float(gain[best]),
        cost=float(cost[best]),
        score=float(score[best]),
        sd_x80=now.x80_sd,
        range_d=list(wide),
        n_candidates=int(cands.size),
    )
