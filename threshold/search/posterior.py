"""Grid posterior over the learning-transition curve, and the look-ahead maths of the search.

The technique is the psi method of psychophysics (Kontsevich and Tyler 1999; QUEST+): keep a
posterior over the parameters of the psychometric curve on a grid, and measure next where one more
observation is expected to shrink the uncertainty of the quantity of interest the most. Here the
stimulus is the model size, x = ln(total parameters), and a hypothesis is a curve
``p(x) = sigmoid(slope * (x - mid))``, the probability that a run of that size learns, together
with the asymptote A that learned runs reach. The expected accuracy is ``c + (A - c) p(x)``.

Seeds near the transition are bimodal, so a run's accuracy is not modelled as the curve plus noise
but as a mixture: learned, ``N(A, sd_learned)``, with probability p; not learned, ``N(c,
sd_unlearned)``, with probability 1 - p; plus a uniform share for partially learned runs, largest
at the midpoint (shape ``4p(1-p)``), and a small uniform share everywhere for outliers. The
derived quantities are x80, where the curve reaches the level (``level * A``, the paper's wording,
or ``c + level * (A - c)`` when chance-corrected), and the midpoint ``mid``.

Dimension names in shape comments: H hypotheses (midpoint x slope x asymptote, asymptote fastest),
M midpoints, S slopes, A asymptotes, C = M * S (midpoint, slope) pairs, N runs, J candidate
sizes, K accuracy bins.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
from scipy.special import expit, logit, ndtr

from threshold.errors import ConfigError

__all__ = [
    "Grid",
    "PosteriorSettings",
    "PosteriorSummary",
    "curve_quantiles",
    "difference_distribution",
    "expected_variance",
    "fantasy_update",
    "level_fraction",
    "log_likelihood",
    "make_grid",
    "normalize",
    "summarize",
    "weighted_quantiles",
]

_SQRT_2PI = float(np.sqrt(2.0 * np.pi))


@dataclass(frozen=True)
class PosteriorSettings:
    # Slopes per nat of parameters, log-spaced because only ratios matter. 1 spreads 10%..90% of
    # learning over a factor 80 in parameters (9 in d); 12 over a factor 1.4 (1.2 in d). ADD mod
    # 10 (near chance at d = 32, 50% at d = 64) suggests about 2.3.
    slopes: tuple[float, ...] = (1.0, 1.5, 2.3, 3.5, 5.2, 7.9, 12.0)
    # Asymptotes: learned runs of a hard op can plateau below 1; 0.05 apart, no finer than the
    # seed spread of learned runs (sd about 0.02) needs.
    asymptotes: tuple[float, ...] = (0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95, 1.0)
    m_step: float = 0.05  # nats between midpoints: 5% in parameters, far below any precision asked
    margin: float = 1.5  # nats of midpoints beyond the size range: room for edge mass to show
    sd_learned: float = 0.03  # seed sd of learned runs (0.02) widened by half the asymptote step
    sd_unlearned: float = 0.06  # unlearned runs scatter around chance (0.1..0.25 for mod 10)
    # Uniform share at the midpoint, falling as 4p(1-p): runs that end partially learned (10-15%
    # near the transition) say "near the transition" without vetoing either mode.
    partial_weight: float = 0.15
    outlier_weight: float = 0.02  # uniform share anywhere: one diverged run must not veto a curve
    n_bins: int = 20  # accuracy bins of a predicted outcome in the look-ahead (0.05 wide)

    def __post_init__(self) -> None:
        for name in ("slopes", "asymptotes"):
            values = tuple(float(v) for v in getattr(self, name))
            object.__setattr__(self, name, values)
            if not values or min(values) <= 0:
                raise ConfigError(f"{name} {values} is not allowed: give positive values")
        if max(self.asymptotes) > 1:
            raise ConfigError(f"asymptotes {self.asymptotes} exceed 1: accuracies lie in [0, 1]")
        for name in ("m_step", "sd_learned", "sd_unlearned"):
            if not getattr(self, name) > 0:
                raise ConfigError(f"{name} {getattr(self, name)} is not allowed: use a value > 0")
        if self.margin < 0:
            raise ConfigError(f"margin {self.margin} is not allowed: use 0 or more")
        if not (self.outlier_weight >= 0 and self.partial_weight >= 0):
            raise ConfigError("partial_weight and outlier_weight must be 0 or more")
        if self.partial_weight + self.outlier_weight >= 1:
            raise ConfigError(
                f"partial_weight + outlier_weight = {self.partial_weight + self.outlier_weight}"
                " leaves nothing for learned and unlearned runs: keep the sum below 1"
            )
        if self.n_bins < 2:
            raise ConfigError(f"n_bins {self.n_bins} is not allowed: use 2 or more")


@dataclass(frozen=True, eq=False)
class Grid:
    """The hypotheses of one search range and the per-hypothesis constants the maths needs."""

    mids: np.ndarray  # (M,) midpoints, x units
    slopes: np.ndarray  # (S,)
    asymptotes: np.ndarray  # (A,) those whose level lies strictly between chance and A
    mid: np.ndarray  # (H,) midpoint of each hypothesis
    slope: np.ndarray  # (H,)
    asym_index: np.ndarray  # (H,) index into asymptotes
    x80: np.ndarray  # (H,) where the curve reaches the level
    x80_order: np.ndarray  # (H,) argsort of x80
    learned_bins: np.ndarray  # (A, K) P(accuracy bin | learned, asymptote)
    unlearned_bins: np.ndarray  # (K,) P(accuracy bin | not learned)
    uniform_bins: np.ndarray  # (K,) P(accuracy bin | partial or outlier)
    chance: float
    settings: PosteriorSettings


def level_fraction(asymptote, chance: float, level: float, chance_corrected: bool) -> np.ndarray:
    """Share p of the way from chance to the asymptote at which the curve reaches the level."""
    asymptote = np.asarray(asymptote, dtype=float)
    if chance_corrected:
        return np.full_like(asymptote, level)
    lift = asymptote - chance
    safe = np.where(lift > 0, lift, 1.0)  # no level is reached when A <= chance: NaN, no warning
    return np.where(lift > 0, (level * asymptote - chance) / safe, np.nan)


def _bin_probs(center: np.ndarray, sd: float, n_bins: int) -> np.ndarray:
    """P(accuracy in each of n_bins equal bins of [0, 1]) for N(center, sd), tails in end bins."""
    inner = np.linspace(0.0, 1.0, n_bins + 1)[1:-1]  # (K-1,)
    cdf = ndtr((inner[None, :] - np.atleast_1d(center)[:, None]) / sd)  # (A, K-1), A centres
    ones = np.ones((cdf.shape[0], 1))
    return np.diff(np.hstack([0.0 * ones, cdf, ones]), axis=1)  # (A, K)


def make_grid(
    settings: PosteriorSettings,
    chance: float,
    level: float,
    chance_corrected: bool,
    x_lo: float,
    x_hi: float,
) -> Grid:
    """Hypotheses with midpoints from x_lo - margin to x_hi + margin (x = ln parameters)."""
    all_asym = np.asarray(settings.asymptotes)  # (A_all,)
    frac = level_fraction(all_asym, chance, level, chance_corrected)  # (A_all,)
    keep = (all_asym > chance) & (frac > 0.01) & (frac < 0.99)
    if not keep.any():
        raise ConfigError(
            f"no asymptote in {settings.asymptotes} puts level {level} between chance {chance}"
            " and the asymptote: lower the chance, raise the level or widen the asymptotes"
        )
    asym, frac = all_asym[keep], frac[keep]  # (A,)
    lo, hi = x_lo - settings.margin, x_hi + settings.margin
    mids = np.linspace(lo, hi, int(np.ceil((hi - lo) / settings.m_step)) + 1)  # (M,)
    slopes = np.asarray(settings.slopes)  # (S,)
    m, s, a = np.meshgrid(mids, slopes, np.arange(asym.size), indexing="ij")  # (M, S, A) each
    mid, slope, asym_index = m.ravel(), s.ravel(), a.ravel()  # (H,) each
    k = settings.n_bins
    x80 = mid + logit(frac)[asym_index] / slope  # (H,)
    return Grid(
        mids=mids,
        slopes=slopes,
        asymptotes=asym,
        mid=mid,
        slope=slope,
        asym_index=asym_index,
        x80=x80,
        x80_order=np.argsort(x80, kind="stable"),
        learned_bins=_bin_probs(asym, settings.sd_learned, k),
        unlearned_bins=_bin_probs(np.array([chance]), settings.sd_unlearned, k)[0],
        uniform_bins=np.full(k, 1.0 / k),
        chance=float(chance),
        settings=settings,
    )


def _learn_prob(grid: Grid, x: np.ndarray) -> np.ndarray:
    """p(learn) at sizes x for each (midpoint, slope) pair: (C, J), C = M * S.

    p does not depend on the asymptote, so it is computed once per (midpoint, slope) and
    broadcast over A: H = C * A with the asymptote fastest.
    """
    n_a = grid.asymptotes.size
    mid, slope = grid.mid[::n_a], grid.slope[::n_a]  # (C,) each
    return expit(slope[:, None] * (np.asarray(x, dtype=float)[None, :] - mid[:, None]))


def _mixture_weights(grid: Grid, p: np.ndarray):
    """Weights of (uniform, learned, unlearned) given p(learn); each shaped like p."""
    cfg = grid.settings
    partial = cfg.partial_weight * 4.0 * p * (1.0 - p)
    rest = 1.0 - cfg.outlier_weight - partial
    return cfg.outlier_weight + partial, rest * p, rest * (1.0 - p)


def _dot(a: np.ndarray, b: np.ndarray) -> float:
    """Plain dot product without BLAS: threaded BLAS stalls on a busy 2-core machine."""
    return float(np.einsum("h,h->", a, b))


def log_likelihood(grid: Grid, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Sum over runs of log p(accuracy | hypothesis): shape (H,). x, y: (N,)."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if x.size == 0:
        return np.zeros(grid.mid.size)  # (H,)
    cfg = grid.settings
    xu, inverse = np.unique(x, return_inverse=True)  # (U,), (N,): runs share sizes
    uni, lrn, unl = (v[:, inverse] for v in _mixture_weights(grid, _learn_prob(grid, xu)))
    # uni, lrn, unl: (C, N)
    z_l = (y[None, :] - grid.asymptotes[:, None]) / cfg.sd_learned  # (A, N)
    dens_l = np.exp(-0.5 * z_l**2) / (cfg.sd_learned * _SQRT_2PI)  # (A, N)
    z_u = (y - grid.chance) / cfg.sd_unlearned  # (N,)
    dens_u = np.exp(-0.5 * z_u**2) / (cfg.sd_unlearned * _SQRT_2PI)  # (N,)
    dens = (uni + unl * dens_u)[:, None, :] + lrn[:, None, :] * dens_l[None]  # (C, A, N)
    return np.log(dens).sum(axis=2).ravel()  # (H,)


def normalize(log_w: np.ndarray) -> np.ndarray:
    """Posterior weights (H,) from unnormalised log weights (uniform prior on the grid)."""
    shifted = log_w - log_w.max()
    # Weights below e^-300 are set to 0: subnormal floats would slow every later product 30x.
    w = np.where(shifted > -300.0, np.exp(np.maximum(shifted, -300.0)), 0.0)
    return w / w.sum()


def fantasy_update(grid: Grid, log_w: np.ndarray, x: float) -> np.ndarray:
    """Log weights after a pending run at x, observed at its expected log-likelihood.

    A pending run's outcome is unknown; multiplying each hypothesis by exp(E[log p(y | h)]), the
    expectation over the current predictive distribution of y, shrinks the posterior about as much
    as a typical outcome would without betting on one mode of a bimodal prediction.
    """
    n_a = grid.asymptotes.size
    uni, lrn, unl = (v[:, 0] for v in _mixture_weights(grid, _learn_prob(grid, [x])))  # (C,)
    bins = (uni[:, None] * grid.uniform_bins + unl[:, None] * grid.unlearned_bins)[
        :, None, :
    ] + lrn[:, None, None] * grid.learned_bins[None]  # (C, A, K)
    w = normalize(log_w).reshape(-1, n_a)  # (C, A)
    predictive = np.einsum("ca,cak->k", w, bins)  # (K,)
    return log_w + np.einsum("cak,k->ca", np.log(bins), predictive).ravel()


def expected_variance(
    grid: Grid, w: np.ndarray, x: np.ndarray, values: np.ndarray | None = None
) -> np.ndarray:
    """Expected posterior variance of ``values`` (H,) (default x80) after one more run at each
    size: (J,). x: (J,)."""
    n_a = grid.asymptotes.size
    values = grid.x80 if values is None else values
    uni, lrn, unl = _mixture_weights(grid, _learn_prob(grid, x))  # (C, J) each
    z = (values - _dot(w, values)).reshape(-1, n_a)  # (C, A) centred, for accuracy
    wc = w.reshape(-1, n_a)  # (C, A)
    sums = []
    for v in (wc, wc * z, wc * z * z):  # moments 0, 1, 2 of x80 jointly with each outcome bin
        vc = v.sum(axis=1)  # (C,)
        sums.append(
            np.einsum("c,cj->j", vc, uni)[:, None] * grid.uniform_bins[None, :]
            + np.einsum("ca,cj,ak->jk", v, lrn, grid.learned_bins, optimize=True)
            + np.einsum("c,cj->j", vc, unl)[:, None] * grid.unlearned_bins[None, :]
        )  # (J, K)
    s0, s1, s2 = sums
    return (s2 - s1**2 / np.maximum(s0, 1e-300)).sum(axis=1)  # (J,)


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
    mid_w = w.reshape(grid.mids.size, -1).sum(axis=1)  # (M,): mid is the slowest axis
    mid_q = _quantiles(grid.mids, mid_w, q, np.arange(grid.mids.size))
    mean = _dot(w, grid.x80)
    mid_mean = _dot(mid_w, grid.mids)
    return PosteriorSummary(
        x80_median=float(x80_q[0]),
        x80_lo=float(x80_q[1]),
        x80_hi=float(x80_q[2]),
        x80_sd=float(np.sqrt(max(_dot(w, (grid.x80 - mean) ** 2), 0.0))),
        mid_median=float(mid_q[0]),
        mid_lo=float(mid_q[1]),
        mid_hi=float(mid_q[2]),
        mid_sd=float(np.sqrt(max(_dot(mid_w, (grid.mids - mid_mean) ** 2), 0.0))),
        asymptote_mean=_dot(w, grid.asymptotes[grid.asym_index]),
        mass_below=float(w[grid.x80 < x_lo].sum()),
        mass_above=float(w[grid.x80 > x_hi].sum()),
    )


def weighted_quantiles(values, weights, qs) -> np.ndarray:
    """Quantiles qs of a discrete distribution (values with weights), read off its
    mid-cumulative weights as ``summarize`` does."""
    values, weights = np.asarray(values, dtype=float), np.asarray(weights, dtype=float)
    return _quantiles(values, weights, qs, np.argsort(values, kind="stable"))


def curve_quantiles(grid: Grid, w: np.ndarray, x, qs=(0.05, 0.5, 0.95)) -> np.ndarray:
    """Posterior quantiles of the expected accuracy ``c + (A - c) p(x)`` at sizes x: (Q, J).

    A credible band of the mean curve: at each size, the quantiles over hypotheses weighted by
    the posterior w (H,). x: (J,) in ln parameters.
    """
    x = np.atleast_1d(np.asarray(x, dtype=float))  # (J,)
    p = _learn_prob(grid, x)  # (C, J)
    lift = grid.asymptotes - grid.chance  # (A,)
    acc = (grid.chance + lift[None, :, None] * p[:, None, :]).reshape(-1, x.size)  # (H, J)
    keep = w > 0  # hypotheses the runs ruled out cost time and change nothing
    acc, wk = acc[keep], w[keep]  # (H', J), (H',)
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
