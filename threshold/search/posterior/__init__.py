"""Grid posterior over the learning-transition curve, and the look-ahead maths of the search.

The technique is the psi method of psychophysics (Kontsevich and Tyler 1999; QUEST+): keep a
posterior over the parameters of the psychometric curve on a grid, and measure next where one more
observation is expected to shrink the uncertainty of the quantity of interest the most. Here the
stimulus is the model size, x = ln(total parameters). What one hypothesis is, what a run scores
under it and the settings: :mod:`~threshold.search.posterior.hypothesis`.

Dimension names in shape comments: H hypotheses (midpoint x slope x kappa x asymptote, asymptote
fastest), M midpoints, S slopes, K concentrations, A asymptotes, C = M * S (midpoint, slope)
pairs, Q = C * K, N runs, U distinct run sizes, J candidate sizes, L learned-share nodes, B
accuracy bins, Z tabulated logits.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace

import numpy as np
from scipy.special import expit, logit, ndtr

from threshold.errors import ConfigError
from threshold.search.posterior.hypothesis import (
    _SQRT_2PI,
    _Z_MAX,
    _Z_STEP,
    PosteriorSettings,
    _bins_of,
    _level_crossing,
    _mean_curve,
    _node_cdfs,
    _node_centres,
    _node_sds,
    _passed,
    _share_table,
    level_fraction,
    level_target,
)

__all__ = [
    "Grid",
    "PosteriorSettings",
    "PosteriorSummary",
    "add_size",
    "curve_quantiles",
    "difference_distribution",
    "expected_variance",
    "expected_variances",
    "fantasy_update",
    "level_fraction",
    "level_target",
    "log_likelihood",
    "make_grid",
    "normalize",
    "offset_sd_posterior",
    "pool_offset_sds",
    "restricted",
    "seed_variance",
    "size_log_likelihood",
    "size_log_likelihood_bounds",
    "size_sums",
    "spread_out",
    "summarize",
    "weighted_quantiles",
]


@dataclass(frozen=True, eq=False)
class Grid:
    """The hypotheses of one search range and the per-hypothesis constants the maths needs."""

    mids: np.ndarray  # (M,) location axis, x units: where p reaches the largest A's level share
    slopes: np.ndarray  # (S,)
    kappas: np.ndarray  # (K,) beta concentrations of the learned share
    asymptotes: np.ndarray  # (A,) each ceiling's asymptote, non-decreasing (several per value)
    gaps: np.ndarray  # (A,) its plateau's depth below the asymptote (0: no plateau)
    lengths: np.ndarray  # (A,) nats from the midpoint to the plateau's end (0: no plateau)
    mid: np.ndarray  # (H,) midpoint of each hypothesis
    slope: np.ndarray  # (H,)
    kappa_index: np.ndarray  # (H,) index into kappas
    asym_index: np.ndarray  # (H,) index into asymptotes
    x80: np.ndarray  # (H,) where the mean curve reaches the level
    log_prior: np.ndarray  # (H,) normalised; uniform but for the plateaus' share of each ceiling
    x80_order: np.ndarray  # (H,) argsort of x80
    mid_order: np.ndarray  # (H,) argsort of mid
    share_table: np.ndarray  # (K, Z, L) P(learned-share node | logit p, kappa)
    partial_shares: np.ndarray  # (K,) each concentration's share of partly learned runs
    node_bins: np.ndarray  # (L, A, B) P(accuracy bin | share node, asymptote), outliers apart
    plateau_bins: np.ndarray  # (A, B) P(accuracy bin | learned, on the ceiling's plateau)
    outlier_bins: np.ndarray  # (A, B) P(accuracy bin | outlier, asymptote)
    chance: float
    settings: PosteriorSettings


def _ceilings(settings: PosteriorSettings, asymptotes: np.ndarray, chance: float) -> np.ndarray:
    """(asymptote, gap, length) of every ceiling: each asymptote (increasing) without a plateau,
    then with each plateau that lies above chance: (A, 3)."""
    rows = []
    for top in asymptotes:
        rows.append((top, 0.0, 0.0))
        rows += [
            (top, gap, length)
            for gap in settings.plateau_gaps
            for length in settings.plateau_lengths
            if top - gap > chance
        ]
    return np.array(rows)


def _ceiling_log_prior(settings: PosteriorSettings, asym: np.ndarray, gaps: np.ndarray):
    """Log prior of each ceiling (A,): asymptotes alike; within one, ``plateau_prior`` shared by
    its plateaus (all of it to no plateau where none lies above chance)."""
    prior = np.empty(asym.size)
    for top in np.unique(asym):
        rows = asym == top
        plateaus = rows & (gaps > 0)
        n = int(plateaus.sum())
        prior[rows & (gaps == 0)] = 1.0 - settings.plateau_prior if n else 1.0
        prior[plateaus] = settings.plateau_prior / max(n, 1)
    return np.log(prior / prior.sum())


def make_grid(
    settings: PosteriorSettings,
    chance: float,
    level: float,
    chance_corrected: bool,
    x_lo: float,
    x_hi: float,
) -> Grid:
    """Hypotheses with midpoints from x_lo - margin to x_hi + margin (x = ln parameters)."""
    all_asym = np.sort(np.asarray(settings.asymptotes))  # (A_all,)
    frac = level_fraction(all_asym, chance, level, chance_corrected)  # (A_all,)
    keep = (all_asym > chance) & (frac > 0.01) & (frac < 0.99)
    if not keep.any():
        raise ConfigError(
            f"no asymptote in {settings.asymptotes} puts level {level} between chance {chance}"
            " and the asymptote: lower the chance, raise the level or widen the asymptotes"
        )
    asym, gaps, lengths = _ceilings(settings, all_asym[keep], float(chance)).T  # (A,) each
    frac = frac[keep][-1]  # that of the largest asymptote
    lo, hi = x_lo - settings.margin, x_hi + settings.margin
    # The location axis is where p reaches the level's share f0 (that of the largest asymptote),
    # not the midpoint: x80 then moves little with the slope, and a slope that falls between
    # two grid values cannot drag x80 away from where the runs put it.
    anchors = np.linspace(lo, hi, int(np.ceil((hi - lo) / settings.m_step)) + 1)  # (M,)
    f0 = float(frac)
    slopes = np.asarray(settings.slopes)  # (S,)
    kappas = np.asarray(settings.concentrations)  # (K,)
    m, s, k, a = np.meshgrid(
        anchors, np.arange(slopes.size), np.arange(kappas.size), np.arange(asym.size), indexing="ij"
    )  # (M, S, K, A) each
    anchor, slope_index, kappa_index, asym_index = m.ravel(), s.ravel(), k.ravel(), a.ravel()
    slope = slopes[slope_index]  # (H,)
    mid = anchor - float(logit(f0)) / slope  # (H,)
    # x80 of each (midpoint, slope, ceiling), broadcast over the concentrations
    mid_msa = mid.reshape(m.shape)[:, :, 0, :]  # (M, S, A)
    target = level_target(asym, chance, level, chance_corrected)  # (A,)
    x80_msa = _level_crossing(
        mid_msa, slopes[None, :, None], asym, gaps, lengths, float(chance), target
    )  # (M, S, A)
    x80 = np.broadcast_to(x80_msa[:, :, None, :], m.shape).ravel()  # (H,)
    ceiling = _ceiling_log_prior(settings, asym, gaps)  # (A,)
    weights = np.asarray(settings.slope_weights or np.ones(slopes.size))  # (S,)
    slope_prior = np.log(weights / weights.sum())  # (S,)
    log_prior = (
        ceiling[asym_index] + slope_prior[slope_index] - np.log(anchors.size * kappas.size)
    )  # (H,)
    inner = np.linspace(0.0, 1.0, settings.n_bins + 1)[1:-1]  # (B - 1,)
    node_bins = _bins_of(_node_cdfs(inner, asym, float(chance), settings))  # (L, A, B)
    stalled = ndtr((inner[None, :] - (asym - gaps)[:, None]) / settings.sd_learned)  # (A, B - 1)
    out_cdf = np.clip(inner[None, :] / asym[:, None], 0.0, 1.0)  # (A, B - 1): uniform on [0, A]
    return Grid(
        mids=anchors,
        slopes=slopes,
        kappas=kappas,
        asymptotes=asym,
        gaps=gaps,
        lengths=lengths,
        mid=mid,
        slope=slope,
        kappa_index=kappa_index,
        asym_index=asym_index,
        x80=x80,
        log_prior=log_prior,
        x80_order=np.argsort(x80, kind="stable"),
        mid_order=np.argsort(mid, kind="stable"),
        share_table=_share_table(
            settings.concentrations,
            settings.partial_shares,
            settings.partial_kappa,
            settings.n_nodes,
        ),
        partial_shares=np.asarray(settings.partial_shares),
        node_bins=node_bins,
        plateau_bins=_bins_of(stalled),
        outlier_bins=_bins_of(out_cdf),
        chance=float(chance),
        settings=settings,
    )


def restricted(grid: Grid, pairs: np.ndarray, kappas=None, ceilings=None) -> Grid:
    """The grid with only the (midpoint, slope) pairs ``pairs`` (indices into its pairs, C',
    increasing), and of each only the concentrations ``kappas`` (K', increasing; default all)
    and the ceilings ``ceilings`` (A', increasing; default all): every such hypothesis, in the
    same layout, so all the maths here runs on it unchanged and gives, hypothesis by
    hypothesis, what it gives on the whole grid."""
    n_k, n_a = grid.kappas.size, grid.asymptotes.size
    block = n_k * n_a  # hypotheses per pair
    pairs = np.asarray(pairs, dtype=int)
    ks = np.arange(n_k) if kappas is None else np.asarray(kappas, dtype=int)  # (K',)
    cs = np.arange(n_a) if ceilings is None else np.asarray(ceilings, dtype=int)  # (A',)
    if pairs.size * ks.size * cs.size == grid.mid.size:
        return grid
    rows = (pairs[:, None, None] * block + ks[None, :, None] * n_a + cs[None, None, :]).ravel()
    position = np.full(grid.mid.size, -1)  # (H,) each kept hypothesis's index in the new grid
    position[rows] = np.arange(rows.size)
    x80, mid = grid.x80[rows], grid.mid[rows]
    shape = (pairs.size, ks.size, cs.size)

    def kept(order: np.ndarray, values: np.ndarray) -> np.ndarray:
        """The stable argsort of the kept values: sorted afresh where few are kept, else read
        off the whole grid's (rows increase, so both break ties alike)."""
        if rows.size * 8 < grid.mid.size:
            return np.argsort(values, kind="stable")
        new = position[order]
        return new[new >= 0]

    return replace(
        grid,
        kappas=grid.kappas[ks],
        asymptotes=grid.asymptotes[cs],
        gaps=grid.gaps[cs],
        lengths=grid.lengths[cs],
        mid=mid,
        slope=grid.slope[rows],
        kappa_index=np.broadcast_to(np.arange(ks.size)[None, :, None], shape).ravel(),
        asym_index=np.broadcast_to(np.arange(cs.size)[None, None, :], shape).ravel(),
        x80=x80,
        log_prior=grid.log_prior[rows],
        x80_order=kept(grid.x80_order, x80),
        mid_order=kept(grid.mid_order, mid),
        share_table=grid.share_table[ks],
        partial_shares=grid.partial_shares[ks],
        node_bins=grid.node_bins[:, cs],
        plateau_bins=grid.plateau_bins[cs],
        outlier_bins=grid.outlier_bins[cs],
    )


def _present(index: np.ndarray, n: int) -> np.ndarray:
    """The values in 0..n - 1 that ``index`` holds, increasing (``np.unique`` without a sort)."""
    return np.flatnonzero(np.bincount(index, minlength=n))


def spread_out(grid: Grid, rows: np.ndarray, values: np.ndarray, fill: float) -> tuple:
    """The grid restricted to the (midpoint, slope) pairs, concentrations and ceilings of the
    hypotheses ``rows`` (H', increasing), and values (..., H') of those hypotheses laid out on
    it, ``fill`` for its other hypotheses."""
    n_a = grid.asymptotes.size
    block = grid.kappas.size * n_a
    pairs = _present(rows // block, grid.mid.size // block)  # (C',)
    ks = _present(grid.kappa_index[rows], grid.kappas.size)  # (K',)
    cs = _present(grid.asym_index[rows], n_a)  # (A',)
    sub = restricted(grid, pairs, ks, cs)
    at_pair = np.searchsorted(pairs, rows // block)  # (H',) places in sub
    at_kappa = np.searchsorted(ks, grid.kappa_index[rows])
    at = (at_pair * ks.size + at_kappa) * cs.size + np.searchsorted(cs, grid.asym_index[rows])
    out = np.full((*values.shape[:-1], sub.mid.size), fill)
    out[..., at] = values
    return sub, out


def _pairs(grid: Grid) -> tuple[np.ndarray, np.ndarray]:
    """Midpoint and slope of each (midpoint, slope) pair: (C,) each."""
    step = grid.kappas.size * grid.asymptotes.size
    return grid.mid[::step], grid.slope[::step]


def _learn_prob(grid: Grid, x: np.ndarray) -> np.ndarray:
    """p(x) for each (midpoint, slope) pair: (C, J)."""
    mid, slope = _pairs(grid)
    return expit(slope[:, None] * (np.asarray(x, dtype=float)[None, :] - mid[:, None]))


def _share_probs(grid: Grid, x, offset: float = 0.0) -> np.ndarray:
    """P(share node | hypothesis) at sizes x (J,), logit p shifted by ``offset``: (Q, J, L),
    Q = C * K, kappa fastest."""
    mid, slope = _pairs(grid)
    z = slope[:, None] * (np.asarray(x, dtype=float)[None, :] - mid[:, None]) + offset  # (C, J)
    idx = np.rint((np.clip(z, -_Z_MAX, _Z_MAX) + _Z_MAX) / _Z_STEP).astype(int)  # (C, J)
    probs = grid.share_table[:, idx, :]  # (K, C, J, L)
    return probs.transpose(1, 0, 2, 3).reshape(-1, idx.shape[1], probs.shape[-1])  # (Q, J, L)


def _passed_share(grid: Grid, x) -> np.ndarray:
    """r at sizes x (J,) for each (midpoint, slope) pair and ceiling: (C, A, J)."""
    mid, slope = _pairs(grid)
    x = np.atleast_1d(np.asarray(x, dtype=float))
    return _passed(
        mid[:, None, None], slope[:, None, None], grid.lengths[None, :, None], x[None, None, :]
    )


def _learned_split(shares_learned: np.ndarray, passed: np.ndarray, top, stalled) -> np.ndarray:
    """Learned runs' term ``P(learned) (r top + (1 - r) stalled)`` of each hypothesis: (Q, A, ...).

    shares_learned: (Q,) P(learned node), Q = C * K; passed: (C, A) r; top, stalled: (A, ...)
    what a learned run contributes above and on the plateau (a density or bin probabilities).
    """
    n_c, n_a = passed.shape
    extra = (1,) * (np.ndim(top) - 1)
    split = stalled[None] + (top - stalled)[None] * passed.reshape(n_c, n_a, *extra)  # (C, A, ..)
    per_q = shares_learned.reshape(n_c, -1)  # (C, K)
    out = per_q.reshape(*per_q.shape, 1, *extra) * split[:, None]  # (C, K, A, ...)
    return out.reshape(n_c * per_q.shape[1], n_a, *np.shape(top)[1:])


def _run_densities(grid: Grid, y: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Density of each score y (N,) under each share node and ceiling, (N, L, A) (a learned run
    at the asymptote), of a learned run on the ceiling's plateau, (N, A), and under the outlier
    share, (N, A)."""
    cfg, c = grid.settings, grid.chance
    asym = grid.asymptotes  # (A,)
    centres = _node_centres(asym, c, cfg.n_nodes)  # (L, A)
    sds = np.broadcast_to(_node_sds(asym, c, cfg), centres.shape).copy()  # (L, A)
    sds[-1] = cfg.sd_learned
    z = (y[:, None, None] - centres[None]) / sds[None]  # (N, L, A)
    dens = np.exp(-0.5 * z**2) / (sds[None] * _SQRT_2PI)  # (N, L, A)
    sd_u = cfg.sd_unlearned
    flat = 1.0 / (c + sd_u * _SQRT_2PI * 0.5)
    above = np.exp(-0.5 * (np.clip(y - c, 0.0, None) / sd_u) ** 2)  # (N,)
    dens[:, 0, :] = (flat * above)[:, None]
    z_stalled = (y[:, None] - (asym - grid.gaps)[None, :]) / cfg.sd_learned  # (N, A)
    stalled = np.exp(-0.5 * z_stalled**2) / (cfg.sd_learned * _SQRT_2PI)  # (N, A)
    outlier = np.where(y[:, None] <= asym[None, :], 1.0 / asym[None, :], 0.0)  # (N, A)
    return dens, stalled, outlier


def _log_sum_exp(terms: np.ndarray) -> np.ndarray:
    """log of the sum of exp over the first axis, shifted by its max (finite terms): (...)."""
    top = terms.max(axis=0)
    return top + np.log(np.exp(terms - top).sum(axis=0))


def _below_top(grid: Grid, dens: np.ndarray) -> np.ndarray:
    """P(score | share below the top node) of each run (densities dens, (R, L, A)) for each
    row of the share table: (R, K, Z, A)."""
    n_k, n_z, n_l = grid.share_table.shape
    table = grid.share_table[:, :, :-1].reshape(n_k * n_z, n_l - 1)  # (K * Z, L - 1)
    return np.matmul(table, dens[:, :-1]).reshape(dens.shape[0], n_k, n_z, -1)


def _offset_nodes(cfg: PosteriorSettings) -> tuple[list, list]:
    """The size offset's quadrature nodes: each distinct (offset, log weight) once (every sd's
    middle node is offset 0), and for each of ``size_logit_sds`` the indices of its nodes."""
    gh_nodes, gh_weights = np.polynomial.hermite_e.hermegauss(cfg.size_nodes)
    gh_log_w = np.log(gh_weights / gh_weights.sum())
    slots: dict[tuple[float, float], int] = {}
    per_sd = []
    for sd in cfg.size_logit_sds:
        nodes, log_wq = (gh_nodes, gh_log_w) if sd > 0 else (np.zeros(1), np.zeros(1))
        pairs = zip(nodes, log_wq, strict=True)
        per_sd.append([slots.setdefault((float(sd * n), float(w)), len(slots)) for n, w in pairs])
    return list(slots), per_sd


def _table_entries(grid: Grid, x: float, rows: np.ndarray, slots: list) -> list:
    """Per offset node, the entry (kappa, tabulated logit, ceiling) of the (K, Z, A) tables
    each hypothesis ``rows`` (H') reads at size x once the offset moves its logit, rounded as
    ``_share_probs`` rounds it: (H',) flat indices. The logit is that of the hypothesis's
    (midpoint, slope) pair, so it is rounded once per run of consecutive hypotheses of one
    pair (a pair's hypotheses are consecutive on the grid) and read off by each of them."""
    n_z, n_a = grid.share_table.shape[1], grid.asymptotes.size
    block = grid.kappas.size * n_a  # hypotheses per (midpoint, slope) pair
    pair = rows // block  # (H',)
    new = np.empty(pair.size, dtype=bool)
    new[:1] = True
    np.not_equal(pair[1:], pair[:-1], out=new[1:])
    pair_at = np.cumsum(new) - 1  # (H',) index into the pairs' runs
    mid, slope = _pairs(grid)  # (C,) each
    pairs = pair[new]  # (C',)
    z = slope[pairs] * (x - mid[pairs])  # (C',) logit p of each pair at x
    base = grid.kappa_index[rows] * (n_z * n_a) + grid.asym_index[rows]  # (H',)
    out = []
    for offset, _ in slots:
        node = np.rint((np.clip(z + offset, -_Z_MAX, _Z_MAX) + _Z_MAX) / _Z_STEP).astype(int)
        out.append(base + (node * n_a)[pair_at])
    return out


def size_log_likelihood(grid: Grid, x: float, y, rows=None) -> np.ndarray:
    """log p(accuracies y of every run at one size x | hypothesis, offset sd): (G, H), one row
    per value of ``size_logit_sds``; with ``rows`` (H',) (indices of hypotheses), for those
    only: (G, H'), each the same number as on the whole grid.

    Runs at one size share that size's departure from the smooth curve: a logit offset
    ``N(0, sd^2)`` on p(x), integrated out by Gauss-Hermite quadrature. Many seeds at one size
    then pin p there only up to that offset, so the posterior does not grow more certain of a
    curve shape than the sizes it has seen allow. The sd is not integrated out here: one study
    shares it across its sizes (``pool_offset_sds``). The runs are summed in sorted order: the
    result does not depend on the order they came in.

    A hypothesis's share probabilities are a row of the tabulated ``share_table`` (its kappa,
    the logit p the offset moves it to), so each run's density given the share is worked out
    once per table row and ceiling, and each hypothesis reads its own off the table: what the
    offset nodes and the hypotheses share is computed once.
    """
    y = np.sort(np.atleast_1d(np.asarray(y, dtype=float)))  # (R,)
    cfg = grid.settings
    eps = cfg.outlier_weight
    block = grid.kappas.size * grid.asymptotes.size  # hypotheses per (midpoint, slope) pair
    rows = np.arange(grid.mid.size) if rows is None else np.asarray(rows, dtype=int)  # (H',)
    a = grid.asym_index[rows]  # (H',)
    n_a = grid.asymptotes.size
    dens, stalled, outlier = _run_densities(grid, y)  # (R, L, A), (R, A), (R, A)
    # P(score | share below the top node): (R, K * Z * A), each (kappa, logit) row of the table
    below = _below_top(grid, dens).reshape(y.size, -1)
    learned_table = np.repeat(grid.share_table[:, :, -1].ravel(), n_a)  # (K * Z * A,)
    passed = _passed_share(grid, [x])[..., 0][rows // block, a]  # (H',) r of each hypothesis
    slots, per_sd = _offset_nodes(cfg)
    at_below = _table_entries(grid, x, rows, slots)  # per node (H',) into ``below``'s rows
    top_share = [learned_table.take(i) for i in at_below]  # per node (H',) P(top node)
    # Each node's likelihood is a product over the runs, each factor floored at 1e-75 so that
    # four cannot underflow (a run that unlikely under a hypothesis, 172 nats below its peak,
    # leaves it dropped whatever the floor). Up to four runs, the nodes are summed, weighted,
    # as they are; more are multiplied in fours, each four's log added (a quarter of the logs),
    # and the nodes' log-sum-exp taken.
    product = np.ones((len(slots), rows.size))  # (nodes, H')
    logs = np.zeros((len(slots), rows.size)) if y.size > 4 else None  # (nodes, H')
    mix = np.empty(rows.size)  # (H',)
    for r in range(y.size):  # run by run
        st = stalled[r, a]  # (H',)
        learned = st + (dens[r, -1, a] - st) * passed  # (H',) learned: r top + (1 - r) stalled
        out = eps * outlier[r, a]  # (H',)
        for n in range(len(slots)):
            np.multiply(top_share[n], learned, out=mix)
            mix += below[r].take(at_below[n])
            mix *= 1.0 - eps
            mix += out
            product[n] *= np.maximum(mix, 1e-75, out=mix)
        if logs is not None and (r % 4 == 3 or r == y.size - 1):
            logs += np.log(product)
            product.fill(1.0)
    log_wq = np.array([w for _, w in slots])  # (nodes,)
    if logs is None:
        sums = [np.einsum("n,nh->h", np.exp(log_wq[s]), product[s]) for s in per_sd]
        return np.log(np.stack(sums))  # (G, H')
    return np.stack([_log_sum_exp(logs[s] + log_wq[s, None]) for s in per_sd])  # (G, H')


def size_log_likelihood_bounds(grid: Grid, x: float, y, rows) -> tuple[np.ndarray, np.ndarray]:
    """Bounds (G, H') each on ``size_log_likelihood(grid, x, y, rows)``, cheap for many runs.

    A learned run's density ``r top + (1 - r) stalled`` lies between the smaller and the larger
    of the two, whatever r; with either in place of it a run's likelihood depends on the
    hypothesis only through its kappa, tabulated logit and ceiling, so each run is worked out
    once per table entry (K * Z * A) and every hypothesis and offset node reads its sum off the
    table. The offset nodes' weights sum to 1, so the likeliest node's weighted term bounds
    their log-sum-exp from below and its unweighted term from above: no exp is needed.
    """
    y = np.sort(np.atleast_1d(np.asarray(y, dtype=float)))  # (R,)
    cfg = grid.settings
    eps = cfg.outlier_weight
    rows = np.asarray(rows, dtype=int)  # (H',)
    n_k, n_z = grid.share_table.shape[:2]
    n_a = grid.asymptotes.size
    dens, stalled, outlier = _run_densities(grid, y)  # (R, L, A), (R, A), (R, A)
    below = _below_top(grid, dens)  # (R, K, Z, A)
    top_share = grid.share_table[None, :, :, -1, None]  # (1, K, Z, 1)
    slots, per_sd = _offset_nodes(cfg)
    at = _table_entries(grid, x, rows, slots)  # per node (H',)
    out = []
    for learned in (np.minimum(stalled, dens[:, -1]), np.maximum(stalled, dens[:, -1])):
        mix = (1.0 - eps) * (below + top_share * learned[:, None, None, :])  # (R, K, Z, A)
        mix += eps * outlier[:, None, None, :]
        table = np.log(np.maximum(mix, 1e-75)).sum(axis=0).reshape(n_k * n_z * n_a)
        total = np.empty((len(at), rows.size))  # (nodes, H')
        for n, i in enumerate(at):
            table.take(i, out=total[n])
        if not out:  # the lower bound: the likeliest node's term, its weight included
            total += np.array([w for _, w in slots])[:, None]
        out.append(np.stack([total[s].max(axis=0) for s in per_sd]))  # (G, H')
    return out[0], out[1]


# Hypotheses: below it, the bounds cost more than they save. Their table costs about as much
# as the exact terms of 8k hypotheses (both scale with the runs), and they drop at most about
# two thirds of the hypotheses at a size. Nor are they worked out for a single run: its exact
# terms cost little more than its bounds (0.11 s against 0.09 s on the 246k hypotheses of the
# default range), and one run's bounds, loose by the plateau's share, seldom drop that many.
_BOUND_FROM = 30_000


def add_size(
    grid: Grid, x: float, y, rows: np.ndarray, sums: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The hypotheses ``rows`` (H', increasing) with per-sd sums of log likelihood ``sums``
    (G, H') over some sizes: the runs y at one more size x added, and the hypotheses that
    pruning drops (``prune_nats`` below the likeliest, log prior included) dropped: (H'',),
    (G, H''); and the size's own terms ``size_log_likelihood`` on those: (G, H'').

    ``size_log_likelihood_bounds`` first drops those whose upper bound lies below the best
    lower bound by more than ``prune_nats`` (their exact sum would too), and the exact terms
    are worked out for the rest only: the same hypotheses and sums, at a fraction of the cost.
    """
    cfg = grid.settings
    if rows.size > _BOUND_FROM and np.size(y) > 1:  # where the bounds pay
        # the pooled sum over sds lies between the likeliest sd's, weighted, and unweighted
        prior = grid.log_prior[rows]  # (H',)
        lo, hi = size_log_likelihood_bounds(grid, x, y, rows)  # (G, H') each
        sd_prior = _offset_sd_log_prior(cfg)[:, None]  # (G, 1)
        floor = (prior + (sums + lo + sd_prior).max(axis=0)).max() - cfg.prune_nats - 1e-6
        maybe = prior + (sums + hi).max(axis=0) >= floor  # (H',)
        rows, sums = rows[maybe], sums[:, maybe]
    terms = size_log_likelihood(grid, x, y, rows)  # (G, H'')
    sums = sums + terms
    log_w = grid.log_prior[rows] + pool_offset_sds(cfg, sums)
    keep = log_w >= log_w.max() - cfg.prune_nats
    return rows[keep], sums[:, keep], terms[:, keep]


def _offset_sd_log_prior(settings: PosteriorSettings) -> np.ndarray:
    """Log prior of each of ``size_logit_sds``: ``size_logit_weights`` normalised, or even: (G,)."""
    weights = np.asarray(settings.size_logit_weights or np.ones(len(settings.size_logit_sds)))
    return np.log(weights / weights.sum())


def pool_offset_sds(settings: PosteriorSettings, terms: np.ndarray) -> np.ndarray:
    """log p(runs | hypothesis) from per-sd sums over sizes (G, H): the study's offset sd, one
    of ``size_logit_sds`` with prior ``size_logit_weights``, integrated out: (H,)."""
    if terms.shape[0] == 1:
        return terms[0]
    return _log_sum_exp(terms + _offset_sd_log_prior(settings)[:, None])


def offset_sd_posterior(settings: PosteriorSettings, log_w: np.ndarray) -> np.ndarray:
    """P(the study's offset sd is each of ``size_logit_sds`` | runs): (G,), from the per-sd
    log posterior weights (G, H) (log prior + per-sd sums over sizes), hypotheses summed out."""
    log_g = np.logaddexp.reduce(log_w, axis=1) + _offset_sd_log_prior(settings)  # (G,)
    return np.exp(log_g - np.logaddexp.reduce(log_g))


def size_sums(grid: Grid, x: np.ndarray, y: np.ndarray, term=None) -> np.ndarray:
    """``size_log_likelihood`` summed over sizes in increasing order, one row per offset sd:
    (G, H). x, y: (N,). ``term(grid, x, y)`` replaces ``size_log_likelihood`` (a cached copy of
    it, say)."""
    term = term or size_log_likelihood
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    total = np.zeros((len(grid.settings.size_logit_sds), grid.mid.size))  # (G, H)
    for xu in np.unique(x):
        total += term(grid, float(xu), y[x == xu])
    return total


def log_likelihood(grid: Grid, x: np.ndarray, y: np.ndarray, term=None) -> np.ndarray:
    """log p(all accuracies | hypothesis): ``size_sums`` with the offset sd pooled: (H,)."""
    return pool_offset_sds(grid.settings, size_sums(grid, x, y, term))


def normalize(log_w: np.ndarray) -> np.ndarray:
    """Posterior weights (H,) from unnormalised log weights (log prior + log likelihood)."""
    shifted = log_w - log_w.max()
    # Weights below e^-300 are set to 0: subnormal floats would slow every later product 30x.
    w = np.where(shifted > -300.0, np.exp(np.maximum(shifted, -300.0)), 0.0)
    return w / w.sum()


def _outcome_bins(grid: Grid, x: float) -> np.ndarray:
    """P(accuracy bin | hypothesis) of one run at x: (Q, A, B)."""
    eps = grid.settings.outlier_weight
    shares = _share_probs(grid, [x])[:, 0, :]  # (Q, L)
    n_l, n_a, n_b = grid.node_bins.shape
    bins = (shares[:, :-1] @ grid.node_bins[:-1].reshape(n_l - 1, -1)).reshape(-1, n_a, n_b)
    passed = _passed_share(grid, [x])[..., 0]  # (C, A)
    bins += _learned_split(shares[:, -1], passed, grid.node_bins[-1], grid.plateau_bins)
    return (1.0 - eps) * bins + eps * grid.outlier_bins[None]  # (Q, A, B)


def fantasy_update(grid: Grid, log_w: np.ndarray, x: float) -> np.ndarray:
    """Log weights after a pending run at x, observed at its expected log-likelihood.

    A pending run's outcome is unknown; multiplying each hypothesis by exp(E[log p(y | h)]), the
    expectation over the current predictive distribution of y, shrinks the posterior about as much
    as a typical outcome would without betting on one mode of a bimodal prediction.
    """
    bins = _outcome_bins(grid, x)  # (Q, A, B)
    w = normalize(log_w).reshape(bins.shape[:2])  # (Q, A)
    predictive = np.einsum("qa,qab->b", w, bins)  # (B,)
    return log_w + (np.log(np.maximum(bins, 1e-300)) @ predictive).ravel()


def expected_variance(
    grid: Grid, w: np.ndarray, x: np.ndarray, values: np.ndarray | None = None
) -> np.ndarray:
    """Expected posterior variance of ``values`` (H,) (default x80) after one more run at each
    size: (J,). x: (J,)."""
    return expected_variances(grid, w, x, [grid.x80 if values is None else values])[0]


def expected_variances(grid: Grid, w: np.ndarray, x: np.ndarray, values: list) -> np.ndarray:
    """``expected_variance`` of each array in ``values`` (V arrays of shape (H,)): (V, J).

    For outcome bin b, the moments s_m[b] = sum_h w_h z_h^m P(b | h) (z centred values) give the
    posterior variance s2/s0 - (s1/s0)^2, weighted by P(b) = s0; P(b | h) is a sum over share
    nodes, so the hypotheses are summed first, node by node: (Q x JL) @ (Q x A). The learned
    node splits between the asymptote and the plateau by r, which depends on the (midpoint,
    slope) pair: that part is summed pair by pair, (C, J, K) @ (C, K, A).
    """
    eps = grid.settings.outlier_weight
    n_a = grid.asymptotes.size
    x = np.atleast_1d(np.asarray(x, dtype=float))  # (J,)
    shares = _share_probs(grid, x)  # (Q, J, L)
    n_q, n_j, n_l = shares.shape
    flat = shares.reshape(n_q, -1)  # (Q, J * L)
    wq = w.reshape(n_q, n_a)  # (Q, A)
    passed = _passed_share(grid, x).transpose(0, 2, 1)  # (C, J, A)
    n_c = passed.shape[0]
    learned = shares[:, :, -1].reshape(n_c, -1, n_j).transpose(0, 2, 1)  # (C, J, K)

    def moment(v: np.ndarray) -> np.ndarray:  # (Q, A) -> (J, B)
        g = (flat.T @ v).reshape(n_j, n_l, n_a)  # (J, L, A)
        s = np.einsum("jla,lab->jb", g[:, :-1], grid.node_bins[:-1])  # (J, B)
        per_pair = np.matmul(learned, v.reshape(n_c, -1, n_a))  # (C, J, A)
        above = np.einsum("cja,cja->ja", per_pair, passed)  # (J, A)
        s += above @ grid.node_bins[-1] + (g[:, -1] - above) @ grid.plateau_bins
        return (1.0 - eps) * s + eps * (v.sum(axis=0) @ grid.outlier_bins)[None, :]

    s0 = np.maximum(moment(wq), 1e-300)  # (J, B)
    out = []
    for v in values:
        z = (v - _dot(w, v)).reshape(n_q, n_a)  # (Q, A) centred, for accuracy
        wz = wq * z
        s1, s2 = moment(wz), moment(wz * z)
        out.append((s2 - s1**2 / s0).sum(axis=1))  # (J,)
    return np.array(out)  # (V, J)


def seed_variance(grid: Grid, w: np.ndarray, x) -> np.ndarray:
    """Posterior mean of the seed variance of accuracy at sizes x (J,): (J,).

    Within one hypothesis the score varies by ``(m - c)^2 p (1 - p) / (kappa + 1)`` (the beta
    share; m = A - gap (1 - r) is where learned runs sit on average), by ``p r (1 - r) gap^2``
    (learned runs split between plateau and asymptote) and by the partial runs' noise; the mean
    over the posterior says how far seeds at x disagree, and so how many repeats there can pay.
    """
    n_k, n_a = grid.kappas.size, grid.asymptotes.size
    x = np.atleast_1d(np.asarray(x, dtype=float))  # (J,)
    p = _learn_prob(grid, x)  # (C, J)
    passed = _passed_share(grid, x)  # (C, A, J)
    gap = grid.gaps[None, :, None]  # (1, A, 1)
    lift2 = (grid.asymptotes[None, :, None] - gap * (1.0 - passed) - grid.chance) ** 2
    wc = w.reshape(-1, n_k, n_a)  # (C, K, A)
    cfg = grid.settings
    shares = grid.partial_shares  # (K,)
    factor = (1.0 - shares) / (grid.kappas + 1.0) + shares / (cfg.partial_kappa + 1.0)  # (K,)
    w_share = np.einsum("cka,k->ca", wc, factor)  # (C, A)
    spread = np.einsum("ca,caj,cj->j", w_share, lift2, p * (1.0 - p))  # (J,)
    split = np.einsum("ca,caj,cj->j", wc.sum(axis=1), passed * (1.0 - passed) * gap**2, p)
    return spread + split + grid.settings.sd_partial**2  # (J,)


def _dot(a: np.ndarray, b: np.ndarray) -> float:
    """Plain dot product without BLAS: threaded BLAS stalls on a busy 2-core machine."""
    return float(np.einsum("h,h->", a, b))


def _quantiles(values: np.ndarray, weights: np.ndarray, qs, order: np.ndarray) -> np.ndarray:
    """Weighted quantiles, interpolated between the mid-cumulative weights of sorted values;
    order sorts values."""
    v, wt = values[order], weights[order]
    cdf = np.cumsum(wt) - 0.5 * wt
    return np.interp(qs, cdf / wt.sum(), v)


@dataclass(frozen=True)
class PosteriorSummary:
    """Posterior of x80 and the midpoint (x units, ln parameters) and of the asymptote."""

    x80_median: float
    x80_lo: float  # 5% quantile: the 90% credible interval is [x80_lo, x80_hi]
    x80_hi: float
    x80_sd: float
    mid_median: float
    mid_lo: float
    mid_hi: float
    mid_sd: float
    asymptote_mean: float
    mass_below: float  # P(x80 < x_lo): evidence that the transition lies below the range
    mass_above: float  # P(x80 > x_hi)
    asymptote_lo: float = float("nan")  # 90% credible interval of the asymptote
    asymptote_hi: float = float("nan")
    bimodal_share: float = float("nan")  # P(kappa < 1): seeds learn or not, rather than graded

    @property
    def ratio(self) -> float:
        """hi/lo of the 90% interval of x80 in parameters."""
        return float(np.exp(self.x80_hi - self.x80_lo))

    def to_dict(self) -> dict:
        return asdict(self)


def summarize(grid: Grid, w: np.ndarray, x_lo: float, x_hi: float) -> PosteriorSummary:
    """Medians, 90% intervals and edge masses of the posterior w (H,) on grid."""
    q = (0.5, 0.05, 0.95)
    x80_q = _quantiles(grid.x80, w, q, grid.x80_order)
    mid_q = _quantiles(grid.mid, w, q, grid.mid_order)
    asym_w = w.reshape(-1, grid.asymptotes.size).sum(axis=0)  # (A,)
    asym_cdf = np.cumsum(asym_w)
    kappa_w = w.reshape(-1, grid.kappas.size, grid.asymptotes.size).sum(axis=(0, 2))  # (K,)
    mean = _dot(w, grid.x80)
    mid_mean = _dot(w, grid.mid)
    return PosteriorSummary(
        x80_median=float(x80_q[0]),
        x80_lo=float(x80_q[1]),
        x80_hi=float(x80_q[2]),
        x80_sd=float(np.sqrt(max(_dot(w, (grid.x80 - mean) ** 2), 0.0))),
        mid_median=float(mid_q[0]),
        mid_lo=float(mid_q[1]),
        mid_hi=float(mid_q[2]),
        mid_sd=float(np.sqrt(max(_dot(w, (grid.mid - mid_mean) ** 2), 0.0))),
        asymptote_mean=float(asym_w @ grid.asymptotes),
        mass_below=float(w[grid.x80 < x_lo].sum()),
        mass_above=float(w[grid.x80 > x_hi].sum()),
        asymptote_lo=float(grid.asymptotes[np.searchsorted(asym_cdf, 0.05)]),
        asymptote_hi=float(grid.asymptotes[min(np.searchsorted(asym_cdf, 0.95), asym_w.size - 1)]),
        bimodal_share=float(kappa_w[grid.kappas < 1].sum()),
    )


def weighted_quantiles(values, weights, qs) -> np.ndarray:
    """Quantiles qs of a discrete distribution (values with weights), read off its
    mid-cumulative weights as ``summarize`` does."""
    values, weights = np.asarray(values, dtype=float), np.asarray(weights, dtype=float)
    return _quantiles(values, weights, qs, np.argsort(values, kind="stable"))


def curve_quantiles(grid: Grid, w: np.ndarray, x, qs=(0.05, 0.5, 0.95)) -> np.ndarray:
    """Posterior quantiles of the expected accuracy (``_mean_curve``) at sizes x: (Q, J).

    A credible band of the mean curve: at each size, the quantiles over hypotheses weighted by
    the posterior w (H,), the concentration summed out. x: (J,) in ln parameters.
    """
    x = np.atleast_1d(np.asarray(x, dtype=float))  # (J,)
    n_a = grid.asymptotes.size
    mid, slope = _pairs(grid)  # (C,) each
    acc = _mean_curve(
        mid[:, None, None],
        slope[:, None, None],
        grid.asymptotes[None, :, None],
        grid.gaps[None, :, None],
        grid.lengths[None, :, None],
        grid.chance,
        x[None, None, :],
    ).reshape(-1, x.size)  # (C*A, J)
    wca = w.reshape(mid.size, grid.kappas.size, n_a).sum(axis=1).ravel()  # (C*A,)
    keep = wca > 0  # hypotheses the runs ruled out cost time and change nothing
    acc, wk = acc[keep], wca[keep]  # (H', J), (H',)
    order = np.argsort(acc, axis=0, kind="stable")  # (H', J)
    out = np.empty((len(qs), x.size))  # (Q, J)
    for j in range(x.size):
        out[:, j] = _quantiles(acc[:, j], wk, qs, order[:, j])
    return out


def _on_lattice(values: np.ndarray, weights: np.ndarray, step: float, origin: float):
    """Weights moved onto the lattice origin + k step, each split between its two neighbours in
    proportion to nearness (so the mean is kept exactly): (K,) masses."""
    t = (values - origin) / step  # (N,)
    k = np.floor(t).astype(int)  # (N,)
    frac = t - k  # (N,)
    size = int(k.max()) + 2
    return np.bincount(k, weights * (1.0 - frac), size) + np.bincount(k + 1, weights * frac, size)


def difference_distribution(
    a, wa, b, wb, step: float = 0.01, max_bins: int = 20_000
) -> tuple[np.ndarray, np.ndarray]:
    """Distribution of A - B for independent A ~ (values a, weights wa) and B ~ (b, wb).

    Both are put on a common lattice of spacing ``step`` (widened if either would need more than
    ``max_bins`` points) and convolved: P(A - B = v) = sum_u P(A = u) P(B = u - v). Returns the
    lattice values (K,) and probabilities (K,). With A and B two posteriors of ln x80, A - B is
    the posterior of the log of their ratio.
    """
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    wa, wb = np.asarray(wa, dtype=float), np.asarray(wb, dtype=float)
    if a.shape != wa.shape or b.shape != wb.shape or a.size == 0 or b.size == 0:
        raise ConfigError("values and weights must be non-empty and of the same length")
    if min(wa.min(), wb.min()) < 0 or not (wa.sum() > 0 and wb.sum() > 0):
        raise ConfigError("weights must be 0 or more, with a positive sum")
    if not step > 0:
        raise ConfigError(f"step {step} is not allowed: use a value > 0")
    span = max(np.ptp(a), np.ptp(b))
    step = max(step, span / max_bins)
    pa = _on_lattice(a, wa / wa.sum(), step, float(a.min()))  # (Ka,)
    pb = _on_lattice(b, wb / wb.sum(), step, float(b.min()))  # (Kb,)
    probs = np.convolve(pa, pb[::-1])  # (Ka + Kb - 1,)
    start = float(a.min()) - (float(b.min()) + (pb.size - 1) * step)
    return start + step * np.arange(probs.size), probs
