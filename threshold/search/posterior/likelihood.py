"""The likelihood of the runs: log p(accuracies | hypothesis), built size by size.

The runs at one size share that size's logit offset from the smooth curve, so they make one term
together (``size_log_likelihood``), one row per offset sd; the study's sd is pooled over its sizes
(``pool_offset_sds``, ``offset_sd_posterior``). ``add_size`` adds one size's runs to the sums of
the hypotheses left and drops those that pruning rules out (``prune_nats``), where many are left
with cheap bounds first (``size_log_likelihood_bounds``); ``size_sums`` and ``log_likelihood``
sum every size at once. The score densities are those of the outcome model
(:mod:`~threshold.search.posterior.hypothesis`).
"""

from __future__ import annotations

import numpy as np

from threshold.search.posterior.grid import Grid
from threshold.search.posterior.hypothesis import (
    SQRT_2PI,
    Z_GRID,
    Z_MAX,
    Z_STEP,
    PosteriorSettings,
    mean_keeping_z,
    node_centres,
    node_sds,
    offset_quadrature,
)

__all__ = [
    "add_size",
    "log_likelihood",
    "normalize",
    "offset_sd_posterior",
    "pool_offset_sds",
    "size_log_likelihood",
    "size_log_likelihood_bounds",
    "size_sums",
]


def _run_densities(grid: Grid, y: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Density of each score y (N,) under each share node and ceiling, (N, L, A) (a learned run
    at the asymptote), of a learned run on the ceiling's plateau, (N, A), and under the outlier
    share, (N, A)."""
    cfg, c = grid.settings, grid.chance
    asym = grid.asymptotes  # (A,)
    centres = node_centres(asym, c, cfg.n_nodes)  # (L, A)
    sds = np.broadcast_to(node_sds(asym, c, cfg), centres.shape).copy()  # (L, A)
    sds[-1] = cfg.sd_learned
    z = (y[:, None, None] - centres[None]) / sds[None]  # (N, L, A)
    dens = np.exp(-0.5 * z**2) / (sds[None] * SQRT_2PI)  # (N, L, A)
    sd_u = cfg.sd_unlearned
    flat = 1.0 / (c + sd_u * SQRT_2PI * 0.5)
    above = np.exp(-0.5 * (np.clip(y - c, 0.0, None) / sd_u) ** 2)  # (N,)
    dens[:, 0, :] = (flat * above)[:, None]
    z_stalled = (y[:, None] - (asym - grid.gaps)[None, :]) / cfg.sd_learned  # (N, A)
    stalled = np.exp(-0.5 * z_stalled**2) / (cfg.sd_learned * SQRT_2PI)  # (N, A)
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
    """The size offset's quadrature nodes: each distinct (sd of h, offset, log weight) once,
    and for each of ``size_logit_sds`` the indices of its nodes. The first is the sd whose
    ``mean_keeping_z`` the node's offset starts from, 0 for z itself (``offset_keeps_mean``
    off): then every sd's middle node is the same, offset 0 from z."""
    gh_nodes, gh_weights = offset_quadrature(cfg.size_nodes)
    gh_log_w = np.log(gh_weights)
    slots: dict[tuple[float, float, float], int] = {}
    per_sd = []
    for sd in cfg.size_logit_sds:
        nodes, log_wq = (gh_nodes, gh_log_w) if sd > 0 else (np.zeros(1), np.zeros(1))
        base = float(sd) if cfg.offset_keeps_mean else 0.0
        pairs = zip(nodes, log_wq, strict=True)
        per_sd.append(
            [slots.setdefault((base, float(sd * n), float(w)), len(slots)) for n, w in pairs]
        )
    return list(slots), per_sd


def _table_entries(grid: Grid, x: float, rows: np.ndarray, slots: list) -> list:
    """Per offset node, the entry (kappa, tabulated z, ceiling) of the (K, Z, A) tables each
    hypothesis ``rows`` (H') reads at size x once the offset moves its z, rounded as
    ``Grid.share_probs`` rounds it: (H',) flat indices. The z is that of the hypothesis's
    (midpoint, slope) pair, so it is rounded once per run of consecutive hypotheses of one
    pair (a pair's hypotheses are consecutive on the grid) and read off by each of them."""
    n_z, n_a = grid.share_table.shape[1], grid.asymptotes.size
    block = grid.kappas.size * n_a  # hypotheses per (midpoint, slope) pair
    pair = rows // block  # (H',)
    new = np.empty(pair.size, dtype=bool)
    new[:1] = True
    np.not_equal(pair[1:], pair[:-1], out=new[1:])
    pair_at = np.cumsum(new) - 1  # (H',) index into the pairs' runs
    mid, slope = grid.pairs()  # (C,) each
    pairs = pair[new]  # (C',)
    z = slope[pairs] * (x - mid[pairs])  # (C',) z of each pair at x: p = F(z) of the link
    base = grid.kappa_index[rows] * (n_z * n_a) + grid.asym_index[rows]  # (H',)
    cfg, starts, out = grid.settings, {0.0: z}, []
    for sd, offset, _ in slots:
        if sd not in starts:
            table = mean_keeping_z(sd, cfg.size_nodes, cfg.link)
            starts[sd] = np.interp(z, Z_GRID, table)
        h = starts[sd] + offset
        node = np.rint((np.clip(h, -Z_MAX, Z_MAX) + Z_MAX) / Z_STEP).astype(int)
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
    passed = grid.passed_share([x])[..., 0][rows // block, a]  # (H',) r of each hypothesis
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
    log_wq = np.array([w for *_, w in slots])  # (nodes,)
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
            total += np.array([w for *_, w in slots])[:, None]
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
