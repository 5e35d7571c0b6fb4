"""Least-squares logistic fit of accuracy against size, and the study's transition estimate.

The papers' method fits a four-parameter logistic, ``lower + (upper - lower) * sigmoid(slope *
(x - midpoint))`` with x = ln(total parameters), to accuracies from many sizes and seeds, and reads
the transition off the fitted curve: x80, where it reaches ``level * upper`` (the paper's wording)
or ``chance + level * (upper - chance)`` (chance-corrected). A pairs bootstrap (resample runs with
replacement, refit) gives its interval. ``transition_estimate`` puts this fit beside the grid
posterior of ``search.posterior``, whose median and 90% credible interval are the headline numbers:
the posterior models bimodal seeds, the least-squares fit only the mean curve.

``reduction_factor`` compares two studies: the factor by which one study's 80% point lies below a
baseline's, baseline x80 / study x80 in parameters. The studies are independent, so the posterior
of ln(factor) = ln x80_baseline - ln x80_study is the convolution of the baseline's posterior of
ln x80 with the mirror image of the study's; its median and 90% interval are read off that
distribution (computed on a 0.01-nat lattice, a 1% step in the factor).
"""

from __future__ import annotations

import logging
import warnings
from dataclasses import asdict, dataclass

import numpy as np
from scipy.optimize import OptimizeWarning, curve_fit
from scipy.special import expit, logit

from threshold.errors import ConfigError
from threshold.search.policy import offset_sd_weights, read_posterior, rounded, summary_of
from threshold.search.posterior import (
    Grid,
    difference_distribution,
    level_target,
    normalize,
    weighted_quantiles,
)
from threshold.search.settings import SearchSettings

__all__ = [
    "PLATEAU_GAP",
    "STRAY_MASS",
    "LogisticFit",
    "bootstrap_interval",
    "fit_logistic",
    "logistic",
    "reduction_factor",
    "stray_mass",
    "strays",
    "transition_estimate",
    "transition_posterior",
    "transition_reading",
]

logger = logging.getLogger(__name__)

MIN_POINTS = 5  # four parameters need at least one more run to have any residual
NEAR_FACTOR = 1.5  # seed_spread looks at runs within this factor in d of d_p80
# A fitted asymptote this far below the study's best run suggests that the runs crowd on a plateau
# which the posterior took for the asymptote. Runs of one size scatter with an sd of 0.02-0.05, and
# the fitted asymptotes of the CPU suite's sound studies sit 0.03-0.18 below their best runs.
PLATEAU_GAP = 0.2
# Posterior mass on the largest size offset sd from which a study's sizes are said to stray from
# every smooth curve (the even prior puts a third there; 0.81 on ADD in the CPU suite's ADD+PROD
# mod 7, whose d = 8 run at 0.45 sits above its six runs at d = 15-21, 0.26-0.38; 0.09-0.37 on
# its other 13 studies).
STRAY_MASS = 0.6


@dataclass(frozen=True)
class LogisticFit:
    lower: float
    upper: float
    midpoint: float  # x units (ln parameters)
    slope: float  # per nat of parameters
    x80: float  # where the fitted curve reaches the level

    def to_dict(self) -> dict:
        return asdict(self)


def logistic(x, lower, upper, midpoint, slope):
    """The four-parameter logistic in x."""
    return lower + (upper - lower) * expit(slope * (np.asarray(x) - midpoint))


def _logistic_jac(x, lower, upper, midpoint, slope):
    """Derivatives of ``logistic`` by (lower, upper, midpoint, slope): (N, 4)."""
    sig = expit(slope * (x - midpoint))  # (N,)
    dsig = (upper - lower) * sig * (1.0 - sig)  # (N,)
    return np.stack([1.0 - sig, sig, -slope * dsig, (x - midpoint) * dsig], axis=1)


def _start_midpoint(x: np.ndarray, y: np.ndarray) -> float:
    """First size whose mean accuracy is past halfway between the lowest and highest means."""
    xu, inverse = np.unique(x, return_inverse=True)
    means = np.bincount(inverse, weights=y) / np.bincount(inverse)  # (U,)
    past = np.nonzero(means >= 0.5 * (means.min() + means.max()))[0]
    return float(xu[past[0]]) if past.size else float(np.median(xu))


def fit_logistic(
    x,
    y,
    chance: float,
    level: float = 0.8,
    chance_corrected: bool = False,
    *,
    start: LogisticFit | None = None,
) -> LogisticFit | None:
    """Fit the four-parameter logistic to accuracies y at x = ln(parameters).

    Returns None when there are fewer than 5 runs or 3 sizes, when the fit fails, or when the
    fitted curve never reaches the level (no x80). Without ``start`` two starting curves are tried
    (shallow and sharp) and the better fit kept; with it (a bootstrap refit) only that one.
    """
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if x.shape != y.shape or x.ndim != 1:
        raise ConfigError(f"x and y must be 1-d and the same length, got {x.shape} and {y.shape}")
    if x.size < MIN_POINTS or np.unique(x).size < 3:
        logger.debug("fit_logistic: %d runs at %d sizes is too few", x.size, np.unique(x).size)
        return None
    span = float(x.max() - x.min())
    bounds = (
        [0.0, chance, x.min() - span, 0.1],  # lower, upper, midpoint, slope
        [0.5 * (1.0 + chance), 1.0, x.max() + span, 50.0],
    )
    if start is None:
        lower0 = float(np.clip(chance, bounds[0][0], bounds[1][0]))
        upper0 = float(np.clip(y.max(), chance + 1e-3, 1.0))
        starts = [[lower0, upper0, _start_midpoint(x, y), s0] for s0 in (1.0, 4.0)]
    else:
        p0 = [start.lower, start.upper, start.midpoint, start.slope]
        starts = [np.clip(p0, np.add(bounds[0], 1e-9), np.subtract(bounds[1], 1e-9))]
    best = None
    for p0 in starts:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", OptimizeWarning)
                popt, _ = curve_fit(
                    logistic,
                    x,
                    y,
                    p0=p0,
                    bounds=bounds,
                    jac=_logistic_jac,
                    ftol=1e-6,  # x80 to 1e-3 nats is plenty; the default 1e-8 doubles the time
                    xtol=1e-6,
                    maxfev=2000,
                )
        except (RuntimeError, ValueError) as err:
            logger.debug("fit_logistic: curve_fit failed from %s: %s", p0, err)
            continue
        sse = float(np.sum((logistic(x, *popt) - y) ** 2))
        if best is None or sse < best[0]:
            best = (sse, popt)
    if best is None:
        return None
    lower, upper, midpoint, slope = (float(v) for v in best[1])
    target = float(level_target(upper, chance, level, chance_corrected))
    frac = (target - lower) / (upper - lower) if upper > lower else np.nan
    if not 0 < frac < 1:
        logger.debug(
            "fit_logistic: curve from %.3f to %.3f never reaches %.3f", lower, upper, target
        )
        return None
    return LogisticFit(lower, upper, midpoint, slope, midpoint + float(logit(frac)) / slope)


def bootstrap_interval(
    x,
    y,
    chance: float,
    rng: np.random.Generator,
    n_boot: int = 200,
    level: float = 0.8,
    chance_corrected: bool = False,
) -> tuple[float, float] | None:
    """90% pairs-bootstrap interval of x80: resample runs with replacement and refit, each
    refit starting from the fit to all runs.

    None when the full fit fails or under half of the refits give an x80.
    """
    if n_boot < 1:
        raise ConfigError(f"n_boot {n_boot} is not allowed: use 1 or more (200 is typical)")
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    full = fit_logistic(x, y, chance, level, chance_corrected)
    if full is None:
        return None
    x80s = []
    for _ in range(n_boot):
        pick = rng.integers(0, x.size, x.size)  # (N,) runs drawn with replacement
        fit = fit_logistic(x[pick], y[pick], chance, level, chance_corrected, start=full)
        if fit is not None:
            x80s.append(fit.x80)
    if len(x80s) < n_boot / 2:
        return None
    lo, hi = np.quantile(x80s, [0.05, 0.95])
    return float(lo), float(hi)


def transition_estimate(settings: SearchSettings, completed) -> dict:
    """The study's estimate as a small JSON-able dict (plain floats, well under 2000 characters).

    Headline numbers are the grid posterior's median and 90% credible interval of x80, in
    parameters and in d; ``fit`` holds the least-squares logistic for comparison (None when it
    fails); ``seed_spread`` describes the runs near the transition and the precision they allow.
    """
    return transition_reading(settings, completed)[0]


def transition_posterior(settings: SearchSettings, completed) -> tuple[Grid, np.ndarray]:
    """The grid and posterior weights (H,) behind ``transition_estimate``, for the same runs."""
    grid, log_w, _ = read_posterior(settings, completed)
    return grid, normalize(log_w)


def transition_reading(settings: SearchSettings, completed) -> tuple[dict, tuple[Grid, np.ndarray]]:
    """``transition_estimate`` and ``transition_posterior`` of the same runs from one reading of
    them (``read_posterior``), for callers that need both."""
    grid, log_w, d_range = read_posterior(settings, completed)
    w = normalize(log_w)
    s = summary_of(settings, grid, w, d_range)
    ds = np.array([int(d) for d, _ in completed], dtype=int)  # (N,)
    ys = np.array([float(v) for _, v in completed])  # (N,)
    x = settings.x_of(ds)  # (N,)
    quantiles_x = [s.x80_median, s.x80_lo, s.x80_hi, s.mid_median]
    d80, d_lo, d_hi, d_mid = (float(v) for v in settings.d_of(quantiles_x))
    fit = fit_logistic(x, ys, settings.chance, settings.level, settings.chance_corrected)
    near = (ds >= d80 / NEAR_FACTOR) & (ds <= d80 * NEAR_FACTOR)  # (N,)
    learned = ys > 0.5 * (settings.chance + s.asymptote_mean)  # (N,)
    ratio = s.ratio
    runs_needed = ds.size * (np.log(ratio) / np.log(settings.precision)) ** 2 if ds.size else 0
    estimate = {
        "method": "grid posterior median, 90% credible interval",
        "level": rounded(settings.level),
        "chance_corrected": bool(settings.chance_corrected),
        "chance": rounded(settings.chance),
        "n_runs": int(ds.size),
        "params_p80": rounded(np.exp(s.x80_median)),
        "d_p80": rounded(d80),
        "interval_params": [rounded(np.exp(s.x80_lo)), rounded(np.exp(s.x80_hi))],
        "interval_d": [rounded(d_lo), rounded(d_hi)],
        "interval_ratio": rounded(ratio),
        "midpoint_params": rounded(np.exp(s.mid_median)),
        "midpoint_interval_params": [rounded(np.exp(s.mid_lo)), rounded(np.exp(s.mid_hi))],
        "midpoint_d": rounded(d_mid),
        "asymptote": rounded(s.asymptote_mean),
        "asymptote_interval": [rounded(s.asymptote_lo), rounded(s.asymptote_hi)],
        "bimodal_share": rounded(s.bimodal_share),  # P(seeds learn or not, not graded)
        # P(the size offset's sd is each value): how far the sizes stray from a smooth curve
        "offset_sd_posterior": [
            [rounded(sd), rounded(p)]
            for sd, p in zip(
                settings.posterior.size_logit_sds,
                offset_sd_weights(settings, completed),
                strict=True,
            )
        ],
        "mass_beyond_range": [rounded(s.mass_below), rounded(s.mass_above)],
        "range_d": [int(d_range[0]), int(d_range[1])],
        "fit": None
        if fit is None
        else {
            "params_p80": rounded(np.exp(fit.x80)),
            "d_p80": rounded(settings.d_of(fit.x80)),
            "midpoint_params": rounded(np.exp(fit.midpoint)),
            "lower": rounded(fit.lower),
            "upper": rounded(fit.upper),
            "slope": rounded(fit.slope),
        },
        "seed_spread": {
            "n_near": int(near.sum()),  # runs within a factor 1.5 in d of d_p80
            "acc_sd": rounded(ys[near].std()) if near.sum() > 1 else None,
            "learned_share": rounded(learned[near].mean()) if near.any() else None,
            "interval_ratio": rounded(ratio),  # the precision these runs allow
            "runs_for_precision": rounded(max(runs_needed, ds.size)),  # ~1/sqrt(runs) scaling
        },
    }
    return estimate, (grid, w)


def stray_mass(estimate: dict) -> float | None:
    """The estimate's posterior mass on its largest size offset sd (None where the estimate has
    no such posterior, or only one sd): from ``STRAY_MASS`` up, the sizes stray from any smooth
    curve, so the curve between them, and the 80% point, are less certain than the runs' number
    suggests."""
    pairs = estimate.get("offset_sd_posterior") or []
    if len(pairs) < 2:
        return None
    return float(max(pairs, key=lambda pair: pair[0])[1])


def strays(estimate: dict) -> bool:
    """Whether the estimate's sizes stray from every smooth curve: ``stray_mass`` at least
    ``STRAY_MASS``."""
    mass = stray_mass(estimate)
    return mass is not None and mass >= STRAY_MASS


def reduction_factor(
    baseline: tuple[Grid, np.ndarray], study: tuple[Grid, np.ndarray], mass: float = 0.9
) -> dict:
    """How many times smaller the study's 80% point is than the baseline's, with an interval.

    baseline, study: (grid, weights) posteriors from ``transition_posterior``. Returns plain
    floats: ``factor``, the ratio of the two posterior medians in parameters (the ratio of the
    headline numbers); ``median`` and ``interval`` (central ``mass``), read off the posterior of
    the ratio itself; ``p_above_1``, the posterior probability that the study's transition is the
    smaller one; ``log_sd``, the sd of ln(factor).
    """
    if not 0 < mass < 1:
        raise ConfigError(f"mass {mass} is not allowed: use a value in (0, 1)")
    (grid_b, w_b), (grid_s, w_s) = baseline, study
    med_b = weighted_quantiles(grid_b.x80, w_b, [0.5])[0]
    med_s = weighted_quantiles(grid_s.x80, w_s, [0.5])[0]
    values, probs = difference_distribution(grid_b.x80, w_b, grid_s.x80, w_s)  # (K,) each
    tail = (1.0 - mass) / 2
    lo, median, hi = weighted_quantiles(values, probs, [tail, 0.5, 1.0 - tail])
    mean = float(values @ probs)
    return {
        "factor": float(np.exp(med_b - med_s)),
        "median": float(np.exp(median)),
        "interval": [float(np.exp(lo)), float(np.exp(hi))],
        "mass": float(mass),
        "p_above_1": float(probs[values > 0].sum() + 0.5 * probs[values == 0].sum()),
        "log_sd": float(np.sqrt(max(((values - mean) ** 2) @ probs, 0.0))),
    }
