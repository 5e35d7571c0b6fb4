"""A plain Ψ-method, written from Kontsevich & Tyler (1999), as a benchmark row beside the sampler.

Kontsevich and Tyler keep a posterior over a psychometric function's threshold and slope on a
grid and present next the stimulus whose outcome is expected to leave the posterior with the
least entropy. Here the stimulus is the model size (x = ln total parameters), the function is a
logistic learning curve in x with a ceiling, and the quantity whose entropy is minimised is the
80% point itself (its marginal on the grid), not the whole parameter vector:

- **Hypotheses**: the 80% point x80 (``n_x80`` points over the sizes' range and ``margin`` nats
  beyond each end), the slope per nat (``slopes``) and the asymptote A, the learned runs' mean
  accuracy (``asymptotes``); a uniform prior over the grid. The curve's midpoint follows from
  them: the share of learning seeds p(x) = logistic(slope (x - mid)) reaches at x80 the share
  the level asks, (level_target(A) - chance) / (A - chance).
- **Seeds learn or fail**: a run ends learned, N(A, ``noise_sd``), with probability p(x) and at
  chance, N(chance, ``noise_sd``), otherwise; near the transition a share ``partial_rate`` x
  4 p (1 - p) of runs ends anywhere between (uniform on [chance, A]); and a ``lapse`` share of
  runs anywhere in [0, 1] whatever the size (the method's lapse rate, which keeps one odd run
  from being decisive). Accuracies in [chance, 1] are read as they are, no threshold.
- **Next size**: of the candidate sizes, the one whose outcome (read to ``bins`` bins of
  accuracy) is expected to leave the least entropy in the posterior of x80. It ignores what a
  run costs, as the paper's method does; ties go to the smaller size.

No code of the paper's or of any Ψ implementation was used: this is the idea, in this project's
terms. It shares nothing with ``search.posterior`` (its own grid, likelihood and look-ahead), so
a row of it says what the classical method reads from the same runs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.special import expit, logit, ndtr

from threshold.errors import ConfigError
from threshold.search.posterior import level_target

__all__ = ["PsiMethod", "PsiSettings", "PsiSummary"]


@dataclass(frozen=True)
class PsiSettings:
    """The Ψ-method's grid, likelihood and look-ahead (each default with its reason)."""

    n_x80: int = 100  # 80% points over the range: steps of ~0.07 nats at d 2..512 and margins
    # slopes per nat, log-spaced 0.3..12: 10-90% of learning over a factor 1.4 to 2e6 in params
    slopes: tuple[float, ...] = tuple(float(v) for v in np.geomspace(0.3, 12.0, 10))
    # learned runs' mean accuracy: from a ceiling well short of 1 (ADD under short budgets) to 1
    asymptotes: tuple[float, ...] = tuple(float(v) for v in np.linspace(0.45, 1.0, 12))
    noise_sd: float = 0.05  # a learned or failed run's spread around A or chance
    partial_rate: float = 0.3  # peak share of runs ending between the modes, at p = 0.5
    lapse: float = 0.02  # share of runs anywhere in [0, 1]: the paper's lapse rate
    bins: int = 16  # accuracy bins an outcome is read to in the look-ahead
    margin: float = 1.5  # nats the x80 grid reaches beyond the sizes' range at each end
    n_candidates: int = 24  # log-spaced candidate sizes over the range (plus none else)

    def __post_init__(self) -> None:
        if self.n_x80 < 10 or self.bins < 2 or self.n_candidates < 2:
            raise ConfigError("n_x80 must be 10 or more, bins and n_candidates 2 or more")
        if not (0 <= self.lapse < 1 and 0 <= self.partial_rate <= 1 and self.noise_sd > 0):
            raise ConfigError("lapse must lie in [0, 1), partial_rate in [0, 1], noise_sd above 0")
        if min(self.slopes) <= 0 or not 0 < min(self.asymptotes) <= max(self.asymptotes) <= 1:
            raise ConfigError("slopes must be above 0 and asymptotes in (0, 1]")


@dataclass(frozen=True)
class PsiSummary:
    """What the Ψ posterior says of x80 (x units) and the asymptote."""

    x80_median: float
    x80_lo: float  # 5% quantile
    x80_hi: float  # 95% quantile
    asymptote_mean: float
    mass_below: float  # P(x80 < the sizes' smallest x)
    mass_above: float  # P(x80 > the largest)

    @property
    def ratio(self) -> float:
        """hi / lo of the 90% interval in parameters."""
        return float(np.exp(self.x80_hi - self.x80_lo))


class PsiMethod:
    """A Ψ posterior over (x80, slope, asymptote) for runs at sizes x in [x_lo, x_hi].

    ``update`` adds a run, ``summary`` reads x80, ``pick`` chooses the next x of some candidates.
    Shapes: H = X * S * A hypotheses (x80 slowest, asymptote fastest), B outcome bins, J
    candidates.
    """

    def __init__(
        self,
        x_lo: float,
        x_hi: float,
        chance: float,
        level: float = 0.8,
        chance_corrected: bool = False,
        settings: PsiSettings | None = None,
    ) -> None:
        self.settings = s = settings or PsiSettings()
        self.x_lo, self.x_hi, self.chance = float(x_lo), float(x_hi), float(chance)
        self.x80_grid = np.linspace(x_lo - s.margin, x_hi + s.margin, s.n_x80)  # (X,)
        x80, slope, asym = np.meshgrid(
            self.x80_grid, np.array(s.slopes), np.array(s.asymptotes), indexing="ij"
        )  # each (X, S, A)
        share = (level_target(asym, chance, level, chance_corrected) - chance) / (asym - chance)
        valid = (asym > chance + 0.05) & (share > 0.01) & (share < 0.99)  # (X, S, A)
        if not valid.any():
            raise ConfigError(
                f"no asymptote in {s.asymptotes[0]:.2f}..{s.asymptotes[-1]:.2f} puts level"
                f" {level} above chance {chance}: use chance_corrected or other asymptotes"
            )
        share = np.clip(share, 0.01, 0.99)
        self.slope = slope.ravel()  # (H,)
        self.asym = asym.ravel()  # (H,)
        self.mid = (x80 - logit(share) / slope).ravel()  # (H,)
        self.log_w = np.where(valid.ravel(), 0.0, -np.inf)  # (H,) uniform prior
        self.n_x = s.n_x80
        edges = np.linspace(0.0, 1.0, s.bins + 1)
        self.edges = edges  # (B + 1,)

    # --- the seed model --------------------------------------------------------------------

    def _parts(self, x: float) -> tuple[np.ndarray, np.ndarray]:
        """(p, r) at x: the learning share and the share of runs ending in between, each (H,)."""
        p = expit(self.slope * (x - self.mid))  # (H,)
        return p, self.settings.partial_rate * 4.0 * p * (1.0 - p)

    def log_likelihood(self, x: float, y: float) -> np.ndarray:
        """ln f(y | hypothesis, x) of one run: (H,)."""
        s, c = self.settings, self.chance
        p, r = self._parts(x)
        norm = 1.0 / (s.noise_sd * np.sqrt(2.0 * np.pi))
        learned = norm * np.exp(-0.5 * ((y - self.asym) / s.noise_sd) ** 2)  # (H,)
        failed = norm * np.exp(-0.5 * ((y - c) / s.noise_sd) ** 2)  # scalar
        between = np.where((y >= c) & (y <= self.asym), 1.0 / (self.asym - c), 0.0)  # (H,)
        f = (1.0 - s.lapse) * ((1.0 - r) * (p * learned + (1.0 - p) * failed) + r * between)
        return np.log(f + s.lapse)  # the lapse's density on [0, 1] is 1

    def _bin_probs(self, x: float) -> np.ndarray:
        """P(outcome in bin b | hypothesis, x): (B, H). The asymptote's terms are computed per
        asymptote (A,) and broadcast, the share's per (x80, slope) pair and asymptote."""
        s, c, e = self.settings, self.chance, self.edges
        n_a = len(s.asymptotes)
        p, r = (v.reshape(-1, n_a) for v in self._parts(x))  # (X * S, A)
        a = np.asarray(s.asymptotes)  # (A,)
        cdf_a = ndtr((e[:, None] - a[None, :]) / s.noise_sd)  # (B + 1, A)
        cdf_c = ndtr((e - c) / s.noise_sd)  # (B + 1,)
        cdf_a[0], cdf_a[-1], cdf_c[0], cdf_c[-1] = 0.0, 1.0, 0.0, 1.0  # clipped to [0, 1]
        cdf_u = np.clip((e[:, None] - c) / np.maximum(a - c, 1e-9)[None, :], 0.0, 1.0)
        mix = (1.0 - r[None]) * (
            p[None] * cdf_a[:, None, :] + (1.0 - p[None]) * cdf_c[:, None, None]
        ) + r[None] * cdf_u[:, None, :]  # (B + 1, X * S, A)
        probs = (1.0 - s.lapse) * np.diff(mix, axis=0) + s.lapse / s.bins  # (B, X * S, A)
        return probs.reshape(s.bins, -1)

    # --- the posterior ---------------------------------------------------------------------

    def update(self, x: float, y: float) -> None:
        """The posterior after one more run at x scoring y."""
        self.log_w = self.log_w + self.log_likelihood(float(x), float(y))

    def weights(self) -> np.ndarray:
        """Normalised posterior weights: (H,)."""
        w = np.exp(self.log_w - np.max(self.log_w))
        return w / w.sum()

    def summary(self) -> PsiSummary:
        """Median and 90% interval of x80 (the marginal's quantiles, linear within a cell), the
        asymptote's mean, and the mass beyond the sizes' range."""
        w = self.weights()
        marginal = w.reshape(self.n_x, -1).sum(axis=1)  # (X,)
        step = self.x80_grid[1] - self.x80_grid[0]
        cum = np.concatenate([[0.0], np.cumsum(marginal)])  # (X + 1,) at the cells' edges
        cell_edges = np.concatenate([self.x80_grid - step / 2, [self.x80_grid[-1] + step / 2]])
        q = np.interp([0.5, 0.05, 0.95], cum, cell_edges)
        return PsiSummary(
            float(q[0]),
            float(q[1]),
            float(q[2]),
            float(w @ self.asym),
            float(marginal[self.x80_grid < self.x_lo].sum()),
            float(marginal[self.x80_grid > self.x_hi].sum()),
        )

    def expected_entropies(self, xs: np.ndarray) -> np.ndarray:
        """Expected entropy (nats) of the x80 marginal after one more run at each x: (J,)."""
        w = self.weights()
        out = np.empty(len(xs))
        for j, x in enumerate(np.asarray(xs, dtype=float)):
            joint = self._bin_probs(float(x)) * w[None, :]  # (B, H)
            m = joint.reshape(joint.shape[0], self.n_x, -1).sum(axis=2)  # (B, X)
            pb = m.sum(axis=1)  # (B,)
            post = m / np.maximum(pb[:, None], 1e-300)
            h = -np.sum(post * np.log(np.maximum(post, 1e-300)), axis=1)  # (B,)
            out[j] = float(pb @ h)
        return out

    def pick(self, xs: np.ndarray) -> int:
        """Index of the candidate (xs (J,), increasing) with the least expected entropy; the
        first (smallest) of ties."""
        return int(np.argmin(np.round(self.expected_entropies(xs), 12)))
