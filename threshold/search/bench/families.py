"""Truth families for the search benchmark: ways runs end that the posterior was not written for.

The posterior (``search.posterior``) assumes a logistic mean curve in ln(parameters), a beta-
distributed learned share and normal noise. A benchmark whose simulator makes the same
assumptions can only confirm them, so each family here breaks at least one:

- ``bimodal``: the original simulator (``simulate.ResponseModel``): seeds learn or not, a few end
  partially learned; logistic curve.
- ``graded``: no bimodality at all; every seed ends near a *probit* mean curve, with normal noise
  that is widest mid-curve (runs cut by the step budget).
- ``shallow``: learn-or-not seeds on a *complementary log-log* curve (asymmetric) with slopes of
  0.5-1.2 per nat: 10-90% of learning over a factor 40-2,000 in parameters.
- ``partial``: each seed has its own logistic curve, shifted by a seed-level normal offset, so
  seeds near the transition end anywhere between chance and the asymptote (logit-normal shares).
- ``plateau``: learned runs first plateau at 0.85 and reach the true asymptote 0.98 only at a
  second, larger transition (0.7-2 nats above the first): runs just above the transition sit on
  the plateau (ADD mod 10, MUL in S_3). Its transitions lie at d 10-100, so that the asymptote
  shows below d = 256 (where no run shows it, no method can know it).
- ``censored``: as ``bimodal``, but learners near the transition run out of steps and are
  reported at chance: the observed curve lies to the right of the true one. No posterior that
  trusts its runs can find the truth here; it measures how much a step budget misleads.

The truth is always the size where the *mean* accuracy curve, E[accuracy | x], reaches the level
(``level * A`` or ``c + level * (A - c)`` with A and c its limits at large and small size),
computed numerically from the family's own model. Sizes follow ``simulate.listops_params``.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from scipy.optimize import brentq
from scipy.special import betainc, expit, ndtr

from threshold.errors import ConfigError
from threshold.search.bench.simulate import (
    ResponseModel,
    listops_params,
    make_truth,
    sample_accuracy,
)
from threshold.search.posterior import level_target

__all__ = [
    "CEILINGS",
    "FAMILIES",
    "FamilyTruth",
    "ceiling_of",
    "curve_x80",
    "draw_family_truth",
    "fit_bounds",
    "log_likelihood",
]

CHANCE = 0.15  # unlearned runs of ListOps mod 10 (majority rate); the search is told this
D80_RANGE = (10.0, 200.0)  # true transitions, log-uniform in d
_GH_X, _GH_W = np.polynomial.hermite_e.hermegauss(40)  # E[f(Z)], Z ~ N(0, 1)
_GH_W = _GH_W / _GH_W.sum()


def _clipped_mean(mean, sd):
    """E[clip(Z, 0, 1)] for Z ~ N(mean, sd), elementwise."""
    mean, sd = np.asarray(mean, dtype=float), np.asarray(sd, dtype=float)
    a, b = (0.0 - mean) / sd, (1.0 - mean) / sd
    pdf = lambda t: np.exp(-0.5 * t * t) / np.sqrt(2 * np.pi)  # noqa: E731
    inner = mean * (ndtr(b) - ndtr(a)) + sd * (pdf(a) - pdf(b))
    return inner + (1.0 - ndtr(b))


@dataclass(frozen=True)
class FamilyTruth:
    """One simulated task of a family: its parameters, limits and true 80% point (x units)."""

    family: str
    mid: float  # location of the family's curve in x = ln(parameters)
    slope: float  # per nat
    asymptote: float  # E[accuracy] at large size
    chance: float  # E[accuracy] at small size
    x80: float
    extra: tuple[float, ...] = ()  # family-specific draws (plateau gap, asymptote of learners)

    def mean(self, x) -> np.ndarray:
        """E[accuracy] at x."""
        return _MEAN[self.family](self, np.asarray(x, dtype=float) - self.mid)

    def sample(self, rng: np.random.Generator, x: float) -> float:
        """One run's final accuracy at x."""
        y = float(_SAMPLE[self.family](self, rng, float(x) - self.mid))
        return min(max(y, 0.0), 1.0)  # np.clip's value, without its cost on a single float


# --- means, with z = x - mid -------------------------------------------------------------------


def _graded_sd(q):
    return 0.02 + 0.06 * 4 * q * (1 - q)


def _mean_graded(t: FamilyTruth, z):
    a = t.extra[0]
    q = ndtr(t.slope * z)
    return _clipped_mean(CHANCE + (a - CHANCE) * q, _graded_sd(q))


def _cloglog(z):
    return -np.expm1(-np.exp(np.clip(z, -50, 50)))


def _mean_bimodal_like(p, a_learned, sd_learned=0.02, chance_sd=0.04):
    learned = _clipped_mean(a_learned, sd_learned)
    unlearned = _clipped_mean(CHANCE, chance_sd)
    return unlearned + (learned - unlearned) * p


def _mean_shallow(t: FamilyTruth, z):
    return _mean_bimodal_like(_cloglog(t.slope * z), t.extra[0])


PARTIAL_OFFSET_SD = 0.6  # nats: sd of a seed's own midpoint around the task's


def _mean_partial(t: FamilyTruth, z):
    a, shape = t.extra[0], np.shape(z)
    z = np.atleast_1d(z)  # (J,)
    u = expit(t.slope * (z[:, None] - PARTIAL_OFFSET_SD * _GH_X[None, :])) @ _GH_W  # (J,) E[share]
    return (CHANCE + (a - CHANCE) * u).reshape(shape)


PLATEAU = 0.85
PLATEAU_TOP = 0.98


def _plateau_parts(t: FamilyTruth, z):
    p = expit(t.slope * z)  # learns at all
    r = expit(3.0 * (z - t.extra[0]))  # a learner passes the plateau
    return p, r


def _mean_plateau(t: FamilyTruth, z):
    p, r = _plateau_parts(t, z)
    unlearned = _clipped_mean(CHANCE, 0.04)
    learned = (1 - r) * PLATEAU + r * _clipped_mean(PLATEAU_TOP, 0.01)
    return unlearned + (learned - unlearned) * p


_BIMODAL = ResponseModel()


def _mean_bimodal(t: FamilyTruth, z):
    return t.chance + (t.asymptote - t.chance) * expit(t.slope * z)


_MEAN = {
    "bimodal": _mean_bimodal,
    "censored": _mean_bimodal,  # the truth is the uncensored curve
    "graded": _mean_graded,
    "shallow": _mean_shallow,
    "partial": _mean_partial,
    "plateau": _mean_plateau,
}

# --- samplers ----------------------------------------------------------------------------------


def _sample_bimodal(t: FamilyTruth, rng, z):
    truth = make_truth_at(t)
    return sample_accuracy(rng, _BIMODAL, truth, z + truth.mid)


@lru_cache(maxsize=64)  # one per study: the oracle samples a truth 42,000 times
def make_truth_at(t: FamilyTruth):
    """The ``simulate.Truth`` of a bimodal family member, midpoint at 0 (samplers use z)."""
    truth = make_truth(_BIMODAL, 20.0, t.slope)
    return type(truth)(0.0, t.slope, truth.asymptote, truth.chance, truth.x80 - truth.mid)


def _sample_censored(t: FamilyTruth, rng, z):
    y = _sample_bimodal(t, rng, z)
    # Learners near the transition learn late; those past the step budget read as failures.
    if y > 0.5 and rng.random() < expit(-4.0 * (z - 0.3)):
        return float(np.clip(rng.normal(CHANCE, 0.04), 0.0, 1.0))
    return y


def _sample_graded(t: FamilyTruth, rng, z):
    q = float(ndtr(t.slope * z))
    return rng.normal(CHANCE + (t.extra[0] - CHANCE) * q, _graded_sd(q))


def _sample_shallow(t: FamilyTruth, rng, z):
    if rng.random() < float(_cloglog(t.slope * z)):
        return rng.normal(t.extra[0], 0.02)
    return rng.normal(CHANCE, 0.04)


def _sample_partial(t: FamilyTruth, rng, z):
    share = float(expit(t.slope * (z - PARTIAL_OFFSET_SD * rng.normal())))
    return CHANCE + (t.extra[0] - CHANCE) * share + rng.normal(0.0, 0.02)


def _sample_plateau(t: FamilyTruth, rng, z):
    p, r = _plateau_parts(t, z)
    if rng.random() >= p:
        return rng.normal(CHANCE, 0.04)
    if rng.random() < r:
        return rng.normal(PLATEAU_TOP, 0.01)
    return rng.normal(PLATEAU, 0.02)


_SAMPLE = {
    "bimodal": _sample_bimodal,
    "censored": _sample_censored,
    "graded": _sample_graded,
    "shallow": _sample_shallow,
    "partial": _sample_partial,
    "plateau": _sample_plateau,
}

FAMILIES = ("bimodal", "graded", "shallow", "partial", "plateau", "censored")

# slope ranges per nat, log-uniform: each family's own kind of curve
_SLOPES = {
    "bimodal": (1.5, 6.0),
    "censored": (1.5, 6.0),
    "graded": (0.8, 3.0),  # probit slope: 10-90% over a factor 2.3-25 in parameters
    "shallow": (0.5, 1.2),
    "partial": (2.0, 6.0),  # each seed's own curve; the seed offsets make the mean shallower
    "plateau": (1.5, 6.0),
}


CEILINGS = {
    "bimodal": (0.9, 1.0),  # the family draws none (its learned mean is 0.975): the fit's range
    "censored": (0.9, 1.0),
    "graded": (0.9, 0.99),  # where learners end
    "shallow": (0.9, 0.99),
    "partial": (0.9, 0.99),
    "plateau": (0.7, 2.0),  # nats from learning to passing the plateau
}


def draw_family_truth(
    rng: np.random.Generator,
    family: str,
    level: float = 0.8,
    chance_corrected: bool = False,
    d80_range: tuple[float, float] = D80_RANGE,
) -> FamilyTruth:
    """A task of ``family`` whose true 80% point is log-uniform in d over ``d80_range``."""
    if family not in FAMILIES:
        raise ConfigError(f"family {family!r} is not known: choose from {', '.join(FAMILIES)}")
    if family == "plateau":  # its true asymptote shows up to 2.7x in d above the transition:
        d80_range = (d80_range[0], min(d80_range[1], 100.0))  # keep that below the grid's 256
    d80 = float(np.exp(rng.uniform(*np.log(d80_range))))
    slope = float(np.exp(rng.uniform(*np.log(_SLOPES[family]))))
    extra: tuple[float, ...] = ()
    if family in ("graded", "shallow", "partial", "plateau"):
        extra = (float(rng.uniform(*CEILINGS[family])),)
    base = make_truth_at(FamilyTruth(family, 0.0, slope, 1.0, CHANCE, 0.0))
    z80, hi, lo = _located(
        family, slope, base.asymptote, base.chance, extra, level, chance_corrected
    )
    x80 = float(np.log(listops_params(d80)))
    return FamilyTruth(family, x80 - z80, slope, hi, lo, x80, extra)


def _located(family, slope, asymptote, chance, extra, level, chance_corrected):
    """(z80, hi, lo) of a family's curve with its midpoint at 0: where its mean reaches the level,
    and its limits at large and small size."""
    probe = FamilyTruth(family, 0.0, slope, asymptote, chance, 0.0, extra)
    hi, lo = float(probe.mean(60.0 / slope)), float(probe.mean(-60.0 / slope))
    target = float(level_target(hi, lo, level, chance_corrected))
    span = 60.0 / slope
    z80 = brentq(lambda z: float(probe.mean(z)) - target, -span, span, xtol=1e-6)
    return z80, hi, lo


# --- the seed models as likelihoods (the benchmark's shape-unknown oracle fits them) ------------
#
# A family's curve has three free parameters: its place (mid), its slope, and a "ceiling" of the
# family's own kind: the learned runs' mean (bimodal, censored), where learners end (graded,
# shallow, partial) or the nats from learning to passing the plateau (plateau). The rest of each
# seed model (noise sds, chance, partial share, censoring) is the family's constant.


def fit_bounds(family: str) -> tuple[tuple[float, float], tuple[float, float]]:
    """The ranges the family draws its truths' slope (per nat) and ceiling from."""
    return _SLOPES[family], CEILINGS[family]


def ceiling_of(truth: FamilyTruth) -> float:
    """The truth's ceiling parameter (see ``CEILING_BOUNDS``)."""
    return truth.extra[0] if truth.extra else _BIMODAL.learned_mean


def curve_x80(
    family: str, mid: float, slope: float, ceiling: float, level: float, chance_corrected: bool
) -> float:
    """The 80% point (x units) of the family's curve with these parameters: where its mean
    reaches the level, as ``draw_family_truth`` places the truth (the same function of them)."""
    if family in ("bimodal", "censored"):
        base = make_truth(ResponseModel(learned_mean=ceiling), 20.0, slope)
        z80, _, _ = _located(
            family, slope, base.asymptote, base.chance, (), level, chance_corrected
        )
    else:
        z80, _, _ = _located(family, slope, 1.0, CHANCE, (ceiling,), level, chance_corrected)
    return mid + z80


def _clipped_normal(y, mean, sd):
    """Likelihood of y under N(mean, sd) clipped to [0, 1]: the density inside, the clipped mass
    at 0 and 1 (the measure every component shares: densities plus atoms at the ends)."""
    u = (y - mean) / sd
    dens = np.exp(-0.5 * u * u) / (sd * np.sqrt(2 * np.pi))
    return np.where(y >= 1.0, ndtr(-(1.0 - mean) / sd), np.where(y <= 0.0, ndtr(-mean / sd), dens))


BIN = 0.005  # the resolution the bimodal likelihood reads partial runs' scores to


def _lik_bimodal(z, y, slope, ceiling, censored=False):
    model = ResponseModel(learned_mean=ceiling)
    asym, c = make_truth(model, 20.0, slope).asymptote, model.unlearned_mean
    p = expit(slope * z)
    r = model.partial_rate * 4 * p * (1 - p)
    alpha, beta = np.maximum(2 * p, 1e-3), np.maximum(2 * (1 - p), 1e-3)
    # The partial runs' beta density is unbounded at its ends, and its upper end moves with the
    # ceiling: read as a density, a learned run just under it would pull the fit there. Read
    # to a bin of 0.005 instead (what a score on some thousand examples tells), it is bounded
    # and continuous in the ceiling.
    s_lo, s_hi = ((y + h - c) / (asym - c) for h in (-BIN / 2, BIN / 2))
    partial = (
        betainc(alpha, beta, np.clip(s_hi, 0, 1)) - betainc(alpha, beta, np.clip(s_lo, 0, 1))
    ) / BIN
    learned = _clipped_normal(y, model.learned_mean, model.learned_sd)
    unlearned = _clipped_normal(y, c, model.unlearned_sd)
    lik = r * partial + (1 - r) * (p * learned + (1 - p) * unlearned)
    if not censored:
        return lik
    # Learners (score above 0.5) near the transition read as failures (``_sample_censored``).
    kappa = expit(-4.0 * (z - 0.3))
    above = r * (1 - betainc(alpha, beta, (0.5 - c) / (asym - c))) + (1 - r) * p * ndtr(
        (model.learned_mean - 0.5) / model.learned_sd
    )
    return lik * np.where(y > 0.5, 1 - kappa, 1.0) + kappa * above * unlearned


def _lik_graded(z, y, slope, ceiling):
    q = ndtr(slope * z)
    return _clipped_normal(y, CHANCE + (ceiling - CHANCE) * q, _graded_sd(q))


def _lik_shallow(z, y, slope, ceiling):
    p = _cloglog(slope * z)
    return p * _clipped_normal(y, ceiling, 0.02) + (1 - p) * _clipped_normal(y, CHANCE, 0.04)


_W = np.linspace(-10.0, 10.0, 321)  # the logit of a partial seed's share, nodes 0.0625 apart:
# the narrowest peak (noise 0.02 over the share's steepest rise, 0.84 / 4 per unit) has an sd
# of 0.095, and the trapezoid rule on a normal with nodes 0.7 sd apart errs by about e^-40;
# beyond +-10 the share is 0 or 1 to 5e-5


def _lik_partial(z, y, slope, ceiling):
    mu, sd = slope * z[:, None], PARTIAL_OFFSET_SD * slope  # the logit share ~ N(mu, sd)
    step = _W[1] - _W[0]
    weight = np.exp(-0.5 * ((_W[None, :] - mu) / sd) ** 2) * step / (sd * np.sqrt(2 * np.pi))
    mean = CHANCE + (ceiling - CHANCE) * expit(_W)  # (W,)
    inner = (weight * _clipped_normal(y[:, None], mean[None, :], 0.02)).sum(axis=1)
    low, high = ndtr((_W[0] - mu[:, 0]) / sd), ndtr((mu[:, 0] - _W[-1]) / sd)
    return inner + low * _clipped_normal(y, CHANCE, 0.02) + high * _clipped_normal(y, ceiling, 0.02)


def _lik_plateau(z, y, slope, ceiling):
    p = expit(slope * z)
    r = expit(3.0 * (z - ceiling))
    learned = r * _clipped_normal(y, PLATEAU_TOP, 0.01) + (1 - r) * _clipped_normal(
        y, PLATEAU, 0.02
    )
    return (1 - p) * _clipped_normal(y, CHANCE, 0.04) + p * learned


_LIK = {
    "bimodal": _lik_bimodal,
    "censored": lambda z, y, slope, ceiling: _lik_bimodal(z, y, slope, ceiling, censored=True),
    "graded": _lik_graded,
    "shallow": _lik_shallow,
    "partial": _lik_partial,
    "plateau": _lik_plateau,
}


def log_likelihood(family: str, z, y, slope: float, ceiling: float) -> np.ndarray:
    """ln of each run's likelihood under the family's own seed model: z = x - mid, y its score
    (both (N,)); floored at 1e-300 so that a run the parameters cannot make counts as very
    unlikely, not as impossible."""
    z, y = np.asarray(z, dtype=float), np.asarray(y, dtype=float)
    return np.log(np.maximum(_LIK[family](z, y, slope, ceiling), 1e-300))
