"""The reading's grid made finer where the posterior's mass lies (``refined``).

The grid's steps (locations 0.05 nats apart, slopes a factor 1.22 apart in the reading, ceilings
0.05 apart) are finer than a dozen runs can tell apart, but not finer than four dozen runs on a
graded curve can: there the posterior gathers on a few cells, and a curve a step off in slope
or ceiling, drawn through the same runs, crosses the level a few hundredths of a nat away.
``refined`` lays a grid ``refine_split`` times finer on each of those three axes over the
(location, slope) pairs within a coarse step of those that hold all but ``_TAIL`` of the mass,
with their concentrations and the ceilings out to their neighbours, and reads the runs again on
it from nothing, pruning as ``add_size`` does: the same posterior, integrated more finely where
it matters. Where that grid would hold more than ``_MAX_HYPOTHESES`` (a posterior still wide,
whose reading the grid's steps cannot move), the coarse posterior is the reading.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from threshold.search.posterior.grid import (
    Grid,
    ceilings_of,
    location_axis,
    make_grid,
    spread_out,
)
from threshold.search.posterior.hypothesis import level_fraction, split_gaps, z_of
from threshold.search.posterior.likelihood import add_size, normalize, pool_offset_sds

__all__ = ["refined"]

_TAIL = 1e-4  # posterior mass the finer grid may leave out
# Hypotheses near the mass above which the coarse posterior is kept: about 0.4 s of reading
# with 48 runs on this machine's CPU.
_MAX_HYPOTHESES = 60000


def _around(values: np.ndarray, held: np.ndarray) -> tuple[int, int]:
    """Indices of the smallest and largest of ``held`` in ``values`` (sorted), each widened by
    one neighbour: the box's ends on that axis."""
    lo, hi = np.searchsorted(values, [held.min(), held.max()])
    return max(int(lo) - 1, 0), min(int(hi) + 1, values.size - 1)


def refined(
    grid: Grid,
    log_w: np.ndarray,
    x: np.ndarray,
    y: np.ndarray,
    level: float,
    chance_corrected: bool,
) -> tuple[Grid, np.ndarray]:
    """The posterior of runs (x, y) (N,) read on a grid ``refine_split`` times finer than
    ``grid`` about the cells that hold its mass (log weights log_w (H,), log prior included):
    the finer grid, restricted to the hypotheses pruning kept, and their log weights (H',); or
    ``grid`` and ``log_w`` as they are where the split is 1, there are no runs, or the finer
    grid would be too large (module docstring)."""
    cfg = grid.settings
    split = cfg.refine_split
    if split == 1 or np.size(x) == 0:
        return grid, log_w
    w = normalize(log_w)
    order = np.argsort(w)[::-1]
    held = order[: int(np.searchsorted(np.cumsum(w[order]), 1.0 - _TAIL)) + 1]  # (H',)
    slopes = np.unique(cfg.slopes)
    s_lo, s_hi = _around(slopes, grid.slope[held])
    asymptotes = np.unique(cfg.asymptotes)
    a_lo, a_hi = _around(asymptotes, grid.asymptotes[grid.asym_index[held]])
    kappas = np.unique(grid.kappa_index[held])  # (K',)
    fine_slopes = split_gaps(slopes[s_lo : s_hi + 1], split, log=True)
    fine = replace(
        cfg,
        slopes=tuple(fine_slopes.tolist()),
        slope_weights=cfg.slope_weights_at(fine_slopes),  # as ``reading`` reads the prior
        asymptotes=tuple(split_gaps(asymptotes[a_lo : a_hi + 1], split, log=False).tolist()),
        concentrations=tuple(grid.kappas[kappas].tolist()),
        partial_shares=tuple(grid.partial_shares[kappas].tolist()),
        m_step=cfg.m_step / split,
        margin=0.0,
    )
    # The location axis: where p reaches the level's share of the largest asymptote
    # (``make_grid``), along which x80 moves little with the slope. It spans the held cells'
    # locations on it and two coarse steps beyond.
    f0 = float(level_fraction(max(fine.asymptotes), grid.chance, level, chance_corrected))
    z0 = float(z_of(f0, cfg.link))  # a curve's location is its midpoint + z0 / slope
    location = grid.mid[held] + z0 / grid.slope[held]  # (H',)
    lo, hi = location.min() - 2 * cfg.m_step, location.max() + 2 * cfg.m_step
    locations = location_axis(fine, lo, hi)  # (M,)
    pairs = _near(locations, fine_slopes, grid, held, z0)  # (C',) the box's pairs near the mass
    n_ceilings = len(ceilings_of(fine, np.asarray(fine.asymptotes), grid.chance))  # as make_grid
    if pairs.size * len(fine.concentrations) * n_ceilings > _MAX_HYPOTHESES:
        return grid, log_w
    box = make_grid(fine, grid.chance, level, chance_corrected, lo, hi, pairs)
    rows = np.arange(box.mid.size)  # (H',)
    sums = np.zeros((len(fine.size_logit_sds), rows.size))  # (G, H')
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    sizes, counts = np.unique(x, return_counts=True)
    for xu in sizes[np.argsort(-counts, kind="stable")]:  # the most runs first: pruned soonest
        rows, sums, _ = add_size(box, float(xu), y[x == xu], rows, sums)
    log_w_box = box.log_prior[rows] + pool_offset_sds(fine, sums)  # (H',)
    return spread_out(box, rows, log_w_box, -np.inf)


def _near(
    locations: np.ndarray, slopes: np.ndarray, grid: Grid, held: np.ndarray, z0: float
) -> np.ndarray:
    """The finer grid's (location, slope) pairs (locations (M,) x slopes (S,), slope fastest,
    as ``make_grid`` lays them out) within a coarse step, on both axes, of a pair of ``grid``
    that holds mass (hypotheses ``held``): (C',) indices, increasing. A curve's location is its
    midpoint + z0 / slope; slopes are compared in ln."""
    cfg = grid.settings
    block = grid.kappas.size * grid.asymptotes.size
    mid_c, slope_c = (v[np.unique(held // block)] for v in grid.pairs())  # (P,) the held pairs
    loc_c = mid_c + z0 / slope_c  # (P,)
    ln_step = float(np.diff(np.log(np.unique(cfg.slopes))).max(initial=0.0))
    near = np.zeros((locations.size, slopes.size), dtype=bool)  # (M, S)
    for j, s in enumerate(slopes):  # the held pairs of nearby slopes, their locations sorted
        at = np.sort(loc_c[np.abs(np.log(slope_c) - np.log(s)) <= ln_step + 1e-9])
        at = np.concatenate([[-np.inf], at, [np.inf]])
        i = np.searchsorted(at, locations)  # (M,): at[i - 1] < location <= at[i]
        near[:, j] = np.minimum(locations - at[i - 1], at[i] - locations) <= cfg.m_step
    return np.flatnonzero(near.ravel())
