"""The look-ahead: what one more run at a size is expected to do to the posterior.

``expected_variances`` is the expected posterior variance of x80 (and of any other values of the
hypotheses) after one more run at each candidate size, summed over that run's predicted outcomes
in accuracy bins (``n_bins``); ``fantasy_update`` counts a pending run at its expected
log-likelihood; ``seed_variance`` says how far seeds at a size are expected to disagree, and so
how many repeats there can pay. The policy (:mod:`threshold.search.policy`) decides with them.
"""

from __future__ import annotations

import numpy as np

from threshold.search.posterior.grid import Grid, dot
from threshold.search.posterior.likelihood import normalize

__all__ = [
    "expected_variance",
    "expected_variances",
    "fantasy_update",
    "outcome_bins",
    "seed_variance",
]


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


def outcome_bins(grid: Grid, x: float) -> np.ndarray:
    """P(accuracy bin | hypothesis) of one run at x: (Q, A, B)."""
    eps = grid.settings.outlier_weight
    shares = grid.share_probs([x])[:, 0, :]  # (Q, L)
    n_l, n_a, n_b = grid.node_bins.shape
    bins = (shares[:, :-1] @ grid.node_bins[:-1].reshape(n_l - 1, -1)).reshape(-1, n_a, n_b)
    passed = grid.passed_share([x])[..., 0]  # (C, A)
    bins += _learned_split(shares[:, -1], passed, grid.node_bins[-1], grid.plateau_bins)
    return (1.0 - eps) * bins + eps * grid.outlier_bins[None]  # (Q, A, B)


def fantasy_update(grid: Grid, log_w: np.ndarray, x: float) -> np.ndarray:
    """Log weights after a pending run at x, observed at its expected log-likelihood.

    A pending run's outcome is unknown; multiplying each hypothesis by exp(E[log p(y | h)]), the
    expectation over the current predictive distribution of y, shrinks the posterior about as much
    as a typical outcome would without betting on one mode of a bimodal prediction.
    """
    bins = outcome_bins(grid, x)  # (Q, A, B)
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
    nodes, so the hypotheses are summed first, node by node: (Q x JL) @ (Q x MA), the M = 1 + 2V
    moments side by side. The learned node splits between the asymptote and the plateau by r,
    which depends on the (midpoint, slope) pair: that part is summed pair by pair,
    (C, J, K) @ (C, K, MA).
    """
    eps = grid.settings.outlier_weight
    n_a = grid.asymptotes.size
    x = np.atleast_1d(np.asarray(x, dtype=float))  # (J,)
    shares = grid.share_probs(x)  # (Q, J, L)
    n_q, n_j, n_l = shares.shape
    wq = w.reshape(n_q, n_a)  # (Q, A)
    weighted = [wq]  # the moments' weights, each (Q, A): w, then w z and w z^2 per value
    for v in values:
        z = (v - dot(w, v)).reshape(n_q, n_a)  # (Q, A) centred, for accuracy
        wz = wq * z
        weighted += [wz, wz * z]
    n_m = len(weighted)
    stacked = np.stack(weighted, axis=1).reshape(n_q, n_m * n_a)  # (Q, M * A)
    g = (shares.reshape(n_q, -1).T @ stacked).reshape(n_j, n_l, n_m, n_a)  # (J, L, M, A)
    s = np.tensordot(g[:, :-1], grid.node_bins[:-1], axes=([1, 3], [0, 1]))  # (J, M, B)
    passed = grid.passed_share(x).transpose(0, 2, 1)  # (C, J, A)
    n_c = passed.shape[0]
    learned = shares[:, :, -1].reshape(n_c, -1, n_j).transpose(0, 2, 1)  # (C, J, K)
    per_pair = np.matmul(learned, stacked.reshape(n_c, -1, n_m * n_a))  # (C, J, M * A)
    per_pair = per_pair.reshape(n_c, n_j, n_m, n_a)  # (C, J, M, A)
    above = np.einsum("cjma,cja->jma", per_pair, passed)  # (J, M, A)
    s += above @ grid.node_bins[-1] + (g[:, -1] - above) @ grid.plateau_bins  # (J, M, B)
    outlier = stacked.sum(axis=0).reshape(n_m, n_a) @ grid.outlier_bins  # (M, B)
    s = (1.0 - eps) * s + eps * outlier[None]  # (J, M, B)
    s0 = np.maximum(s[:, 0], 1e-300)  # (J, B)
    s1, s2 = s[:, 1::2], s[:, 2::2]  # (J, V, B) each
    return (s2 - s1**2 / s0[:, None]).sum(axis=2).T  # (V, J)


def seed_variance(grid: Grid, w: np.ndarray, x) -> np.ndarray:
    """Posterior mean of the seed variance of accuracy at sizes x (J,): (J,).

    Within one hypothesis the score varies by ``(m - c)^2 p (1 - p) / (kappa + 1)`` (the beta
    share; m = A - gap (1 - r) is where learned runs sit on average), by ``p r (1 - r) gap^2``
    (learned runs split between plateau and asymptote) and by the partial runs' noise; the mean
    over the posterior says how far seeds at x disagree, and so how many repeats there can pay.
    """
    n_k, n_a = grid.kappas.size, grid.asymptotes.size
    x = np.atleast_1d(np.asarray(x, dtype=float))  # (J,)
    p = grid.learn_prob(x)  # (C, J)
    passed = grid.passed_share(x)  # (C, A, J)
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
