"""One hypothesis of the posterior: its curve, what a run scores under it, and the settings.

A hypothesis is a curve ``p(x) = sigmoid(slope * (x - mid))`` of the model size x = ln(total
parameters), an asymptote A, and a concentration kappa. The expected accuracy is
``c + (A - c) p(x)`` (less where learned runs stall on a plateau: below).

Run outcomes (the likelihood). A run at x ends with a *learned share* u in [0, 1] and scores about
``c + (A - c) u``. The share is drawn from a beta distribution with mean p(x) and concentration
kappa, the overdispersion idea of psignifit (Schuett et al. 2016) carried to a continuous score:
kappa well below 1 puts the share at 0 or 1 (seeds learn or not: bimodal), kappa near 1 spreads it
evenly (partially learned runs), large kappa keeps every seed near the mean curve (graded runs, as
when the step budget cuts training short). The study's kappa is one more axis of the grid, so the
runs decide which kind of study it is, and one model holds for all of them. Whatever kappa, the
mean accuracy is ``c + (A - c) p(x)``: the 80% point is a property of the mean curve.

Observation noise around ``c + (A - c) u``: fully learned runs scatter by ``sd_learned`` below A
(scores above 1 read as 1: the normal is censored, not truncated); partial runs by
``sd_partial``; unlearned runs lie anywhere at or
below chance (greedy decoding of a chain of thought can score below the majority rate) with a
half-normal tail of ``sd_unlearned`` above it. A small ``outlier_weight`` share is uniform on
[0, A]: a run may fail or diverge, but no run lands far *above* its hypothesis' asymptote, so the
largest runs bound A from below and a run well above the transition is never an outlier.

Plateaus. Learned runs can stall below the asymptote the best learners reach, and pass it only at
a larger size (ADD mod 10: 0.82-0.92 just above the transition, 0.987 at d = 64). A hypothesis's
*ceiling* is its asymptote A, or A with a plateau: learned runs sit at ``A - gap`` until a second
transition ``length`` nats above the midpoint, of the same slope, lifts them to A, so the mean
curve is ``c + (A - gap (1 - r(x)) - c) p(x)``, r the second transition's share (partial runs
still scale to A: the plateau is a property of learned runs, and a cheap one, since r is the
only term that depends on both the curve and the ceiling). The level is still defined by A.
Without plateaus, many runs on one outvote the few above it: A is set at the plateau, and the
80% point too low.

The derived quantities are x80, where the mean curve reaches the level (``level * A``, the paper's
wording, or ``c + level * (A - c)`` when chance-corrected), and the midpoint ``mid``.

The outcome model is tabulated here, the same for every grid: the beta share's probabilities per
tabulated logit (``beta_share_table``), and each share node's score distribution (``node_cdfs``),
read in the look-ahead's accuracy bins (``bins_of``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache

import numpy as np
from scipy.special import betainc, expit, log_ndtr, logit, logsumexp, ndtr, ndtri

from threshold.errors import ConfigError

# The package hands on PosteriorSettings and the level; the curve and the outcome model's tables
# are for the modules after this one (grid, likelihood, refine, summaries).
__all__ = [
    "LINKS",
    "SQRT_2PI",
    "Z_GRID",
    "Z_MAX",
    "Z_STEP",
    "PosteriorSettings",
    "beta_share_table",
    "bins_of",
    "level_crossing",
    "level_fraction",
    "level_target",
    "mean_curve",
    "mean_keeping_z",
    "node_cdfs",
    "node_centres",
    "node_sds",
    "offset_quadrature",
    "past_plateau",
    "share_at",
    "split_gaps",
    "z_of",
]

SQRT_2PI = float(np.sqrt(2.0 * np.pi))
Z_MAX = 14.0  # logits beyond this are p = 0 or 1 for every kappa on the grid
Z_STEP = 0.05  # table step in the link's z: 1.25% in p at a logistic midpoint, 2% at a probit one
Z_GRID = np.arange(-Z_MAX, Z_MAX + 0.5 * Z_STEP, Z_STEP)  # the share table's z
Z_GRID.setflags(write=False)
# The curve's form p = F(z), z = slope (x - mid): logistic (symmetric), probit (symmetric, tails
# that fall faster) or complementary log-log (asymmetric: slow to start, quick to finish).
LINKS = ("logistic", "probit", "cloglog")


@dataclass(frozen=True)
class PosteriorSettings:
    # Slopes per nat of parameters, log-spaced because only ratios matter. 0.7 spreads 10%..90%
    # of learning over a factor 500 in parameters (a shallow, graded curve); 12 over a factor 1.4.
    slopes: tuple[float, ...] = (0.7, 1.0, 1.5, 2.3, 3.5, 5.2, 7.9, 12.0)
    # The curve's form F (``LINKS``): the learned share is p = F(slope (x - mid)).
    link: str = "logistic"
    # Prior weight of each slope (() for even). Runs near the 80% point tell the slope poorly,
    # so this prior sets how wide an interval they leave.
    slope_weights: tuple[float, ...] = ()
    # Asymptotes: learned runs of a hard op can plateau well below 1 (MUL in S_3 at 0.6-0.9).
    # 0.05 apart with sd_learned 0.03: the step is no coarser than the seed spread of learned runs.
    asymptotes: tuple[float, ...] = tuple(round(0.4 + 0.05 * i, 2) for i in range(13))
    # Plateaus (module docstring): each asymptote also comes with every gap x length here. A gap
    # of 0.05 is too close to the seed spread of learned runs to tell; () turns plateaus off.
    plateau_gaps: tuple[float, ...] = (0.1, 0.15)
    plateau_lengths: tuple[float, ...] = (1.5,)  # nats: a factor 4.5 in parameters
    # Prior mass of all plateaus of an asymptote together (the rest: none). Plateaus can mimic a
    # curve that saturates slowly, so with few runs an even prior over the ceilings (two thirds
    # on plateaus) read graded and partly learned runs as stalled and set x80 too high.
    plateau_prior: float = 0.25
    # Beta concentrations of the learned share: 0.02 bimodal (learn or not: 97% of runs at the
    # ends), 1 flat (partial runs), 5 and 25 graded (seeds near the mean curve, sd of the share
    # 0.2 and 0.1 at p = 0.5). A bimodal 0.2 read the runs as steeper than they were.
    concentrations: tuple[float, ...] = (0.02, 0.02, 1.0, 5.0, 25.0)
    # Per concentration, the share of runs that end partially learned instead, their share drawn
    # from a beta of mean p and concentration partial_kappa: bimodal seeds with a few runs caught
    # mid-way, whose accuracy still says how far along the curve their size is. Without it such
    # runs read as "near the midpoint" wherever they are, and pull the 80% point down.
    partial_shares: tuple[float, ...] = (0.0, 0.15, 0.0, 0.0, 0.0)
    partial_kappa: float = 3.0
    m_step: float = 0.05  # nats between midpoints: 5% in parameters, far below any precision asked
    margin: float = 1.5  # nats of midpoints beyond the size range: room for edge mass to show
    sd_learned: float = 0.03  # seed sd of fully learned runs (0.02) widened by half the A step
    sd_partial: float = 0.04  # scatter of partly learned runs around c + (A - c) u
    sd_unlearned: float = 0.06  # tail above chance of unlearned runs (0.1..0.25 for mod 10)
    outlier_weight: float = 0.02  # uniform on [0, A]: one diverged run must not veto a curve
    # Sd of each size's logit offset from the smooth curve, shared by its runs: no logistic is
    # the true curve (0.3 is about 0.05 in p, 0.04 in accuracy, mid-curve), so seeds at one size
    # cannot pin the curve there more finely. 0 treats every run as independent. The study's sd
    # is one of these, with prior weights size_logit_weights (() for equal), and its runs weigh
    # them: where sizes stray from every smooth curve (plateaus, seed-level offsets) the larger
    # sds win and the interval widens, so coverage no longer falls as runs pile up (0.3 alone:
    # 0.80-0.85 at 48 runs on partial and plateau studies; these three: 0.93-0.95).
    size_logit_sds: tuple[float, ...] = (0.3, 0.6, 1.2)
    size_logit_weights: tuple[float, ...] = ()
    size_nodes: int = 5  # Gauss-Hermite nodes for that offset
    # Whether the offset keeps each size's mean share on the smooth curve. A plain offset does
    # not: averaged over the offset, F(z + offset) is flatter than F(z), so runs spread over
    # many sizes read the smooth curve steeper than their own, and x80 (above the midpoint)
    # lower. With this on, a size at z is offset from h(z), the point whose offset average is
    # F(z) (``mean_keeping_z``): the smooth curve is the mean one. (Many runs at one size then
    # pin the offset's mode, F(h(z)), at their mean instead, and the curve below it.)
    offset_keeps_mean: bool = True
    n_nodes: int = 21  # learned-share nodes u = 0, 0.05, ..., 1
    n_bins: int = 20  # accuracy bins of a predicted outcome in the look-ahead (0.05 wide)
    # Pruning: as runs are added (in the order they came, consecutive runs at one size
    # together: ``policy._size_sums``), a hypothesis is dropped for good when it lies this
    # many nats below the likeliest, log prior included. e^-30 per hypothesis, under 1e-7 of
    # the mass for the whole grid: nothing a summary or a decision can see, while one run
    # moves a hypothesis by at most about 6.5 nats against another (the outlier share bounds
    # its likelihood ratio), so a dropped one would need five runs in a row against the
    # likeliest to matter again. Most go after a dozen runs, and the later runs and the
    # look-ahead cost a fraction of the full grid's.
    prune_nats: float = 30.0
    # The reading (the estimate, the stop and the report; ``reading``) splits each gap between
    # neighbouring slopes into this many, log-spaced; the look-ahead keeps the slopes above, 1
    # reads with them too. Runs mostly lie below the 80% point, so x80 is read off the curve
    # drawn through them, and a slope a grid step off moves it: on the same runs, 15 slopes
    # instead of 8 read graded studies at 0.030 and 0.043 instead of 0.055 and 0.069 (two
    # draws of three; the third 0.050 and 0.049; the other families as before), for about
    # 1.3x the CPU of a decision, while choosing sizes on them bought nothing
    # (docs/search-benchmark-passes.md, twelfth and thirteenth passes). The look-ahead reads this
    # posterior's hypotheses on the slopes above.
    read_slope_split: int = 2
    # The reading's finer grid where the posterior's mass lies (``refine.refined``): locations,
    # slopes and ceilings each split this many times over the cells that hold the mass, the runs
    # read again on them. 1 reads on the grid above alone.
    refine_split: int = 2

    def __post_init__(self) -> None:
        for name in ("slopes", "asymptotes", "concentrations"):
            values = tuple(float(v) for v in getattr(self, name))
            object.__setattr__(self, name, values)
            if not values or min(values) <= 0:
                raise ConfigError(f"{name} {values} is not allowed: give positive values")
        shares = tuple(float(v) for v in self.partial_shares)
        object.__setattr__(self, "partial_shares", shares)
        if len(shares) != len(self.concentrations) or not all(0 <= v < 1 for v in shares):
            raise ConfigError(
                f"partial_shares {shares} must give one value in [0, 1) per concentration"
            )
        if not self.partial_kappa > 0:
            raise ConfigError(f"partial_kappa {self.partial_kappa} is not allowed: use above 0")
        if not 0 < self.plateau_prior < 1:
            raise ConfigError(f"plateau_prior {self.plateau_prior} is not allowed: use (0, 1)")
        for name in ("plateau_gaps", "plateau_lengths"):
            values = tuple(float(v) for v in getattr(self, name))
            object.__setattr__(self, name, values)
            if not all(v > 0 for v in values):
                raise ConfigError(f"{name} {values} is not allowed: give positive values")
        if max(self.asymptotes) > 1:
            raise ConfigError(f"asymptotes {self.asymptotes} exceed 1: accuracies lie in [0, 1]")
        for name in ("m_step", "sd_learned", "sd_partial", "sd_unlearned"):
            if not getattr(self, name) > 0:
                raise ConfigError(f"{name} {getattr(self, name)} is not allowed: use a value > 0")
        if self.margin < 0:
            raise ConfigError(f"margin {self.margin} is not allowed: use 0 or more")
        if not 0 <= self.outlier_weight < 1:
            raise ConfigError(
                f"outlier_weight {self.outlier_weight} is not allowed: use a value in [0, 1)"
            )
        sds = tuple(float(v) for v in self.size_logit_sds)
        object.__setattr__(self, "size_logit_sds", sds)
        if not sds or min(sds) < 0 or self.size_nodes < 1:
            raise ConfigError("size_logit_sds must be values of 0 or more, size_nodes 1 or more")
        weights = tuple(float(v) for v in self.size_logit_weights)
        object.__setattr__(self, "size_logit_weights", weights)
        if weights and (len(weights) != len(sds) or min(weights) <= 0):
            raise ConfigError(
                f"size_logit_weights {weights} must be empty or one positive weight per sd"
            )
        weights = tuple(float(v) for v in self.slope_weights)
        object.__setattr__(self, "slope_weights", weights)
        if weights and (len(weights) != len(self.slopes) or min(weights) <= 0):
            raise ConfigError(
                f"slope_weights {weights} must be empty or one positive weight per slope"
            )
        if self.link not in LINKS:
            raise ConfigError(f"link {self.link!r} is not allowed: use one of {', '.join(LINKS)}")
        if not self.prune_nats > 0:
            raise ConfigError(f"prune_nats {self.prune_nats} is not allowed: use a value > 0")
        if self.n_nodes < 3 or self.n_bins < 2:
            raise ConfigError(
                f"n_nodes {self.n_nodes} and n_bins {self.n_bins}: use at least 3 and 2"
            )
        if self.refine_split < 1:
            raise ConfigError(f"refine_split {self.refine_split} is not allowed: use 1 or more")
        if self.read_slope_split < 1:
            raise ConfigError(
                f"read_slope_split {self.read_slope_split} is not allowed: use 1 or more"
            )

    def reading(self) -> PosteriorSettings:
        """The settings the runs are read with: each gap between neighbouring slopes (sorted)
        split into ``read_slope_split`` log-spaced ones (a slope given twice counts once; the
        given ones kept exactly), the slope prior interpolated in ln slope between its values;
        the rest as here."""
        if self.read_slope_split == 1:
            return self
        fine = split_gaps(np.unique(self.slopes), self.read_slope_split, log=True)
        weights = self.slope_weights_at(fine)
        slopes = tuple(fine.tolist())  # the given slopes exactly: the look-ahead's are among them
        return replace(self, slopes=slopes, slope_weights=weights, read_slope_split=1)

    def slope_weights_at(self, slopes) -> tuple[float, ...]:
        """The slope prior's weights at ``slopes``, interpolated in ln slope between the given
        ones (a slope given twice counts once); () where the prior is even."""
        if not self.slope_weights:
            return ()
        given, first = np.unique(self.slopes, return_index=True)  # (S,) increasing
        log_w = np.log(np.asarray(self.slope_weights)[first])
        return tuple(np.exp(np.interp(np.log(slopes), np.log(given), log_w)).tolist())


def split_gaps(values: np.ndarray, split: int, log: bool) -> np.ndarray:
    """Sorted, distinct values (V,) with each gap between neighbours cut into ``split`` even
    steps, in ln where ``log``: (split (V - 1) + 1,), the given values kept exactly."""
    v = np.log(values) if log else values
    steps = np.linspace(0.0, 1.0, split + 1)[1:-1]  # (split - 1,)
    between = v[:-1, None] + np.diff(v)[:, None] * steps  # (V - 1, split - 1)
    between = np.exp(between) if log else between
    return np.append(np.concatenate([values[:-1, None], between], axis=1).ravel(), values[-1])


def level_fraction(asymptote, chance: float, level: float, chance_corrected: bool) -> np.ndarray:
    """Share p of the way from chance to the asymptote at which the curve reaches the level."""
    asymptote = np.asarray(asymptote, dtype=float)
    if chance_corrected:
        return np.full_like(asymptote, level)
    lift = asymptote - chance
    safe = np.where(lift > 0, lift, 1.0)  # no level is reached when A <= chance: NaN, no warning
    target = level_target(asymptote, chance, level, chance_corrected)
    return np.where(lift > 0, (target - chance) / safe, np.nan)


def level_target(asymptote, chance: float, level: float, chance_corrected: bool) -> np.ndarray:
    """The accuracy at which a curve of this asymptote is at the level."""
    asymptote = np.asarray(asymptote, dtype=float)
    return chance + level * (asymptote - chance) if chance_corrected else level * asymptote


def share_at(z, link: str):
    """p = F(z) of the link (``LINKS``), arrays broadcast."""
    if link == "probit":
        return ndtr(z)
    if link == "cloglog":
        return -np.expm1(-np.exp(np.clip(z, -50.0, 50.0)))
    return expit(z)


def z_of(p, link: str):
    """z = F^-1(p) of the link (``LINKS``), arrays broadcast."""
    if link == "probit":
        return ndtri(p)
    if link == "cloglog":
        return np.log(-np.log1p(-np.asarray(p, dtype=float)))
    return logit(p)


def _log_shares_at(z, link: str) -> tuple[np.ndarray, np.ndarray]:
    """log F(z) and log (1 - F(z)) of the link, without underflow (arrays broadcast)."""
    z = np.asarray(z, dtype=float)
    if link == "probit":
        return log_ndtr(z), log_ndtr(-z)
    if link == "cloglog":
        e = np.exp(np.clip(z, -50.0, 50.0))
        return np.log(-np.expm1(-e)), -e
    return -np.logaddexp(0.0, -z), -np.logaddexp(0.0, z)


@lru_cache(maxsize=4)
def offset_quadrature(size_nodes: int) -> tuple[np.ndarray, np.ndarray]:
    """The size offset's Gauss-Hermite nodes for N(0, 1) and their weights, summing to 1: the
    likelihood integrates the offset over them, and the mean-keeping map averages over them."""
    nodes, weights = np.polynomial.hermite_e.hermegauss(size_nodes)
    weights = weights / weights.sum()
    nodes.setflags(write=False)
    weights.setflags(write=False)
    return nodes, weights


@lru_cache(maxsize=16)
def mean_keeping_z(sd: float, size_nodes: int, link: str) -> np.ndarray:
    """h(z) at the share table's z (Z,): the point whose offset average, over the likelihood's
    own ``size_nodes`` Gauss-Hermite nodes of N(0, sd^2), is F(z). Found on the logit of that
    average (increasing in h) by interpolation over h. Cached: the same for every grid."""
    z = Z_GRID  # (Z,)
    nodes, w = offset_quadrature(size_nodes)
    # h(z) grows like z sqrt(1 + sd^2) at most (the probit's exact map; the logistic's is
    # flatter, the cloglog's shifts by sd^2 / 2 at the low end): the range covers every z
    reach = (Z_MAX + 4.0) * float(np.sqrt(1.0 + sd**2))
    h = np.arange(-reach, reach + 0.25 * Z_STEP, 0.25 * Z_STEP)  # (T,)
    log_f, log_s = _log_shares_at(h[:, None] + sd * nodes[None, :], link)  # (T, N) each
    averaged = logsumexp(log_f, b=w, axis=1) - logsumexp(log_s, b=w, axis=1)  # (T,)
    target = np.subtract(*_log_shares_at(z, link))  # (Z,) logit F(z)
    out = np.interp(target, averaged, h)
    out.setflags(write=False)
    return out


def past_plateau(mid, slope, length, x, link: str):
    """r: the share of learners past the plateau, a second curve of the link ``length`` nats
    above the midpoint with the curve's slope (arrays broadcast)."""
    return share_at(slope * (x - mid - length), link)


def mean_curve(mid, slope, asym, gap, length, chance: float, x, link: str):
    """Expected accuracy ``c + (A - gap (1 - r) - c) p`` (arrays broadcast)."""
    p = share_at(slope * (x - mid), link)
    top = asym - gap * (1.0 - past_plateau(mid, slope, length, x, link))
    return chance + (top - chance) * p


def level_crossing(mid, slope, asym, gap, length, chance: float, target, link: str):
    """Where the mean curve reaches ``target`` (arrays broadcast; target below asym). Without a
    plateau in closed form; with one by bisection, between where the curve without it reaches
    the target (the earliest) and where the plateau's end has surely lifted it there."""
    args = np.broadcast_arrays(mid, slope, asym, gap, length, target)
    mid, slope, asym, gap, length, target = (np.asarray(a, dtype=float) for a in args)
    lo = mid + z_of((target - chance) / (asym - chance), link) / slope
    hi = np.maximum(lo, mid + length + 20.0 / slope)
    plateau = gap > 0
    for _ in range(40):  # 2^-40 of the bracket: far below the grid's 0.05 nats
        x = 0.5 * (lo + hi)
        below = mean_curve(mid, slope, asym, gap, length, chance, x, link) < target
        lo, hi = np.where(below & plateau, x, lo), np.where(below | ~plateau, hi, x)
    return np.where(plateau, 0.5 * (lo + hi), lo)


@lru_cache(maxsize=4)
def beta_share_table(
    kappa_values: tuple[float, ...],
    partial_shares: tuple[float, ...],
    partial_kappa: float,
    n_nodes: int,
    link: str,
) -> np.ndarray:
    """P(share node | z, share model) for beta shares with mean p = F(z): (K, Z, L).

    Model k is ``(1 - w_k) Beta(kappa_k) + w_k Beta(partial_kappa)``, each of mean p. Node l
    stands for u in [(l - 0.5) / (L - 1), (l + 0.5) / (L - 1)], the end nodes for half bins; the
    probability is the beta mass of that bin. Cached: the same for every grid.
    """
    main = _beta_nodes(np.asarray(kappa_values), n_nodes, link)  # (K, Z, L)
    partial = _beta_nodes(np.array([partial_kappa]), n_nodes, link)  # (1, Z, L)
    w = np.asarray(partial_shares)[:, None, None]  # (K, 1, 1)
    probs = (1.0 - w) * main + w * partial
    probs.setflags(write=False)
    return probs


def _beta_nodes(kappas: np.ndarray, n_nodes: int, link: str) -> np.ndarray:
    """Beta masses of the share bins for each kappa (K,) and tabulated z: (K, Z, L)."""
    p = share_at(Z_GRID, link)  # (Z,)
    edges = np.concatenate([[0.0], (np.arange(1, n_nodes) - 0.5) / (n_nodes - 1), [1.0]])
    a = np.maximum(kappas[:, None] * p[None, :], 1e-12)[..., None]  # (K, Z, 1)
    b = np.maximum(kappas[:, None] * (1.0 - p[None, :]), 1e-12)[..., None]
    cdf = betainc(a, b, edges[None, None, :])  # (K, Z, L + 1)
    cdf[..., 0], cdf[..., -1] = 0.0, 1.0
    probs = np.clip(np.diff(cdf, axis=2), 0.0, None)  # (K, Z, L)
    return probs / probs.sum(axis=2, keepdims=True)


def node_centres(asym: np.ndarray, chance: float, n_nodes: int) -> np.ndarray:
    """Mean accuracy c + (A - c) u of each share node: (L, A)."""
    u = np.linspace(0.0, 1.0, n_nodes)  # (L,)
    return chance + u[:, None] * (asym[None, :] - chance)


def node_sds(asym: np.ndarray, chance: float, cfg: PosteriorSettings) -> np.ndarray:
    """Noise sd of each interior node, widened by the node's own width: (A,)."""
    width = (asym - chance) / (cfg.n_nodes - 1)  # (A,)
    return np.sqrt(cfg.sd_partial**2 + width**2 / 12.0)


def _unlearned_cdf(t: np.ndarray, chance: float, sd: float) -> np.ndarray:
    """CDF of the unlearned score: flat on [0, c], a half-normal tail above c."""
    t = np.asarray(t, dtype=float)
    tail = sd * SQRT_2PI * (ndtr((t - chance) / sd) - 0.5)
    norm = chance + sd * SQRT_2PI * 0.5
    return np.where(t <= chance, np.clip(t, 0.0, None), chance + tail) / norm


def node_cdfs(t: np.ndarray, grid_asym: np.ndarray, chance: float, cfg) -> np.ndarray:
    """CDF of each node's score at thresholds t (T,): (L, A, T); mass above 1 stays above."""
    centres = node_centres(grid_asym, chance, cfg.n_nodes)  # (L, A)
    sds = np.broadcast_to(node_sds(grid_asym, chance, cfg), centres.shape).copy()  # (L, A)
    sds[-1] = cfg.sd_learned
    out = ndtr((t[None, None, :] - centres[..., None]) / sds[..., None])  # (L, A, T)
    out[0] = _unlearned_cdf(t, chance, cfg.sd_unlearned)[None, :]
    return out


def bins_of(cdf_inner: np.ndarray) -> np.ndarray:
    """Bin probabilities from the CDF at the inner bin edges (..., B - 1): tails in end bins."""
    zeros = np.zeros((*cdf_inner.shape[:-1], 1))
    return np.diff(np.concatenate([zeros, cdf_inner, zeros + 1.0], axis=-1), axis=-1)
