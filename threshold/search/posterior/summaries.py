"""What the posterior says: medians, 90% intervals and edge masses of x80, the midpoint and the
asymptote (``summarize``), quantiles of a weighted sample (``weighted_quantiles``), a credible
band of the mean curve (``curve_quantiles``), and the distribution of the difference of two
independent posteriors (``difference_distribution``: the log of the ratio of two 80% points).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from threshold.errors import ConfigError
from threshold.search.posterior.grid import Grid, dot
from threshold.search.posterior.hypothesis import mean_curve

__all__ = [
    "PosteriorSummary",
    "curve_quantiles",
    "difference_distribution",
    "summarize",
    "weighted_quantiles",
]


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
    mean = dot(w, grid.x80)
    mid_mean = dot(w, grid.mid)
    return PosteriorSummary(
        x80_median=float(x80_q[0]),
        x80_lo=float(x80_q[1]),
        x80_hi=float(x80_q[2]),
        x80_sd=float(np.sqrt(max(dot(w, (grid.x80 - mean) ** 2), 0.0))),
        mid_median=float(mid_q[0]),
        mid_lo=float(mid_q[1]),
        mid_hi=float(mid_q[2]),
        mid_sd=float(np.sqrt(max(dot(w, (grid.mid - mid_mean) ** 2), 0.0))),
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
    """Posterior quantiles of the expected accuracy (``mean_curve``) at sizes x: (Q, J).

    A credible band of the mean curve: at each size, the quantiles over hypotheses weighted by
    the posterior w (H,), the concentration summed out. x: (J,) in ln parameters.
    """
    x = np.atleast_1d(np.asarray(x, dtype=float))  # (J,)
    n_a = grid.asymptotes.size
    mid, slope = grid.pairs()  # (C,) each
    acc = mean_curve(
        mid[:, None, None],
        slope[:, None, None],
        grid.asymptotes[None, :, None],
        grid.gaps[None, :, None],
        grid.lengths[None, :, None],
        grid.chance,
        x[None, None, :],
        grid.settings.link,
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
