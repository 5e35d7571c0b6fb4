"""The grid of hypotheses of one search range, their prior, and the grid cut to those left.

A hypothesis is a (midpoint, slope) pair, a concentration and a ceiling (an asymptote, with or
without a plateau: :mod:`~threshold.search.posterior.hypothesis`), laid out pair by pair with the
ceiling fastest, so a pair's hypotheses are consecutive and what depends on the pair alone is
worked out once per pair (``Grid.pairs``, ``share_probs``, ``passed_share``). The prior is even
over locations, concentrations and asymptotes, ``slope_weights`` over slopes, and gives each
asymptote's plateaus ``plateau_prior`` together (``make_grid``). ``restricted`` and
``spread_out`` keep that layout on the hypotheses the runs leave, so the maths of the package
runs on either unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
from scipy.special import ndtr

from threshold.errors import ConfigError
from threshold.search.posterior.hypothesis import (
    Z_MAX,
    Z_STEP,
    PosteriorSettings,
    beta_share_table,
    bins_of,
    level_crossing,
    level_fraction,
    level_target,
    node_cdfs,
    past_plateau,
    share_at,
    z_of,
)

__all__ = [
    "Grid",
    "ceilings_of",
    "dot",
    "location_axis",
    "make_grid",
    "restricted",
    "spread_out",
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
    share_table: np.ndarray  # (K, Z, L) P(learned-share node | z, kappa), p = F(z)
    partial_shares: np.ndarray  # (K,) each concentration's share of partly learned runs
    node_bins: np.ndarray  # (L, A, B) P(accuracy bin | share node, asymptote), outliers apart
    plateau_bins: np.ndarray  # (A, B) P(accuracy bin | learned, on the ceiling's plateau)
    outlier_bins: np.ndarray  # (A, B) P(accuracy bin | outlier, asymptote)
    chance: float
    settings: PosteriorSettings

    def pairs(self) -> tuple[np.ndarray, np.ndarray]:
        """Midpoint and slope of each (midpoint, slope) pair: (C,) each."""
        step = self.kappas.size * self.asymptotes.size
        return self.mid[::step], self.slope[::step]

    def learn_prob(self, x) -> np.ndarray:
        """p(x) at sizes x (J,) for each (midpoint, slope) pair: (C, J)."""
        mid, slope = self.pairs()
        z = slope[:, None] * (np.asarray(x, dtype=float)[None, :] - mid[:, None])  # (C, J)
        return share_at(z, self.settings.link)

    def share_probs(self, x) -> np.ndarray:
        """P(share node | hypothesis) at sizes x (J,): (Q, J, L), Q = C * K, kappa fastest."""
        mid, slope = self.pairs()
        z = slope[:, None] * (np.asarray(x, dtype=float)[None, :] - mid[:, None])  # (C, J)
        idx = np.rint((np.clip(z, -Z_MAX, Z_MAX) + Z_MAX) / Z_STEP).astype(int)  # (C, J)
        probs = self.share_table[:, idx, :]  # (K, C, J, L)
        return probs.transpose(1, 0, 2, 3).reshape(-1, idx.shape[1], probs.shape[-1])  # (Q, J, L)

    def passed_share(self, x) -> np.ndarray:
        """r at sizes x (J,) for each (midpoint, slope) pair and ceiling: (C, A, J)."""
        mid, slope = self.pairs()
        x = np.atleast_1d(np.asarray(x, dtype=float))
        return past_plateau(
            mid[:, None, None],
            slope[:, None, None],
            self.lengths[None, :, None],
            x[None, None, :],
            self.settings.link,
        )


def ceilings_of(settings: PosteriorSettings, asymptotes: np.ndarray, chance: float) -> np.ndarray:
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


def location_axis(settings: PosteriorSettings, x_lo: float, x_hi: float) -> np.ndarray:
    """The grid's locations: ``m_step`` apart from x_lo - margin to x_hi + margin: (M,)."""
    lo, hi = x_lo - settings.margin, x_hi + settings.margin
    return np.linspace(lo, hi, int(np.ceil((hi - lo) / settings.m_step)) + 1)


def make_grid(
    settings: PosteriorSettings,
    chance: float,
    level: float,
    chance_corrected: bool,
    x_lo: float,
    x_hi: float,
    pairs: np.ndarray | None = None,
) -> Grid:
    """Hypotheses with midpoints from x_lo - margin to x_hi + margin (x = ln parameters); with
    ``pairs`` (C', increasing indices into the (location, slope) pairs, slope fastest), those
    pairs' only, laid out as ``restricted`` lays them (built without the others)."""
    all_asym = np.sort(np.asarray(settings.asymptotes))  # (A_all,)
    frac = level_fraction(all_asym, chance, level, chance_corrected)  # (A_all,)
    keep = (all_asym > chance) & (frac > 0.01) & (frac < 0.99)
    if not keep.any():
        raise ConfigError(
            f"no asymptote in {settings.asymptotes} puts level {level} between chance {chance}"
            " and the asymptote: lower the chance, raise the level or widen the asymptotes"
        )
    asym, gaps, lengths = ceilings_of(settings, all_asym[keep], float(chance)).T  # (A,) each
    frac = frac[keep][-1]  # that of the largest asymptote
    # The location axis is where p reaches the level's share f0 (that of the largest asymptote),
    # not the midpoint: x80 then moves little with the slope, and a slope that falls between
    # two grid values cannot drag x80 away from where the runs put it.
    anchors = location_axis(settings, x_lo, x_hi)  # (M,)
    f0 = float(frac)
    slopes = np.asarray(settings.slopes)  # (S,)
    kappas = np.asarray(settings.concentrations)  # (K,)
    if pairs is None:
        pairs = np.arange(anchors.size * slopes.size)
    pair_anchor, pair_slope = np.divmod(np.asarray(pairs, dtype=int), slopes.size)  # (C,) each
    shape = (pair_anchor.size, kappas.size, asym.size)
    c, k, a = (v.ravel() for v in np.indices(shape))  # (H,) each: pair, kappa, ceiling
    anchor, slope_index, kappa_index, asym_index = anchors[pair_anchor[c]], pair_slope[c], k, a
    slope = slopes[slope_index]  # (H,)
    mid = anchor - float(z_of(f0, settings.link)) / slope  # (H,)
    # x80 of each (pair, ceiling), broadcast over the concentrations
    mid_ca = mid.reshape(shape)[:, 0, :]  # (C, A)
    target = level_target(asym, chance, level, chance_corrected)  # (A,)
    x80_ca = level_crossing(
        mid_ca, slopes[pair_slope, None], asym, gaps, lengths, float(chance), target, settings.link
    )  # (C, A)
    x80 = np.broadcast_to(x80_ca[:, None, :], shape).ravel()  # (H,)
    ceiling = _ceiling_log_prior(settings, asym, gaps)  # (A,)
    weights = np.asarray(settings.slope_weights or np.ones(slopes.size))  # (S,)
    slope_prior = np.log(weights / weights.sum())  # (S,)
    log_prior = (
        ceiling[asym_index] + slope_prior[slope_index] - np.log(anchors.size * kappas.size)
    )  # (H,)
    inner = np.linspace(0.0, 1.0, settings.n_bins + 1)[1:-1]  # (B - 1,)
    node_bins = bins_of(node_cdfs(inner, asym, float(chance), settings))  # (L, A, B)
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
        share_table=beta_share_table(
            settings.concentrations,
            settings.partial_shares,
            settings.partial_kappa,
            settings.n_nodes,
            settings.link,
        ),
        partial_shares=np.asarray(settings.partial_shares),
        node_bins=node_bins,
        plateau_bins=bins_of(stalled),
        outlier_bins=bins_of(out_cdf),
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


def dot(a: np.ndarray, b: np.ndarray) -> float:
    """Plain dot product without BLAS: threaded BLAS stalls on a busy 2-core machine."""
    return float(np.einsum("h,h->", a, b))
