"""The benchmark's shape-unknown bounds: readers that know a family's curve and seed model.

``FitOracle`` estimates a family's place, slope and ceiling by maximum likelihood of the family's
own seed model (``families.log_likelihood``) and reads the fitted curve's 80% point. Its runs go
where a locally c-optimal design for x80 puts them: at the truth's parameters (``runs``: the
bound ``oracle_fit`` of ``bench search``), or at the parameters fitted so far, batch by batch from
the sampler's bracket (``adaptive``: ``oracle_fit_adaptive``): one design that knows the form but
none of the truth's parameters (a greedy sequential one; a better one may exist). ``pick`` reads
any runs (our sampler's: ``oracle_fit_pick``) without being told the form: it fits each family
of ``FIT_FAMILIES`` and reads the likeliest, a reader that knows the forms there are but not which.
"""

from __future__ import annotations

import numpy as np
from scipy.optimize import minimize

from threshold.search.bench.families import (
    CHANCE,
    FAMILIES,
    FamilyTruth,
    ceiling_of,
    curve_x80,
    fit_bounds,
    log_likelihood,
)
from threshold.search.policy import bracket
from threshold.search.settings import SearchSettings

__all__ = ["FIT_FAMILIES", "FitOracle", "runs_at"]


# The forms ``FitOracle.pick`` chooses from: every family but censored, whose runs look like a
# bimodal family's moved right (no reader that trusts its runs can tell them apart).
FIT_FAMILIES = ("bimodal", "graded", "shallow", "partial", "plateau")


def runs_at(settings: SearchSettings, truth, rng: np.random.Generator, ds) -> list:
    """One run of the truth at each size of a fixed design, in order: (d, accuracy) pairs."""
    return [(d, truth.sample(rng, float(settings.x_of(d)))) for d in ds]


class FitOracle:
    """A reader that knows the family's curve and seed model but must learn their parameters:
    it places its runs with the true parameters (a locally c-optimal design for x80, with the
    slope and ceiling as nuisance parameters: ``design``), then estimates place, slope and
    ceiling from the runs by maximum likelihood of the family's own seed model
    (``families.log_likelihood``) and reads the fitted curve's 80% point (``fit``, ``x80``)."""

    CANDIDATES = 25  # sizes within 3 / slope nats of x80 the design may use
    DRAWS = 200  # runs drawn at each to estimate one run's Fisher information there
    STEP = 1e-3  # central differences: place (nats), ln slope, ceiling

    @staticmethod
    def theta(truth) -> np.ndarray:
        """The truth's parameters: (mid, ln slope, ceiling)."""
        return np.array([truth.mid, np.log(truth.slope), ceiling_of(truth)])

    @staticmethod
    def x80(settings: SearchSettings, family: str, theta) -> float:
        mid, ln_slope, ceiling = theta
        level, corrected = settings.level, settings.chance_corrected
        return curve_x80(family, mid, float(np.exp(ln_slope)), ceiling, level, corrected)

    @classmethod
    def information(
        cls, settings: SearchSettings, truth, theta, rng: np.random.Generator, ds
    ) -> tuple[np.ndarray, np.ndarray]:
        """One run's Fisher information of (mid, ln slope, ceiling) at each size ds (G,), from
        ``DRAWS`` runs of ``truth``'s sampler and central differences of the family's log
        likelihood at ``theta``: (G, 3, 3); and x80's gradient in the parameters there: (3,)."""
        family, theta = truth.family, np.asarray(theta, dtype=float)
        x = np.repeat(settings.x_of(np.array(ds)), cls.DRAWS)  # (G * DRAWS,)
        y = np.array([truth.sample(rng, xi) for xi in x])
        scores, grad = [], []
        for k in range(3):
            step = np.zeros(3)
            step[k] = cls.STEP
            up, down = theta + step, theta - step
            lik = [log_likelihood(family, x - t[0], y, np.exp(t[1]), t[2]) for t in (up, down)]
            scores.append((lik[0] - lik[1]) / (2 * cls.STEP))
            grad.append((cls.x80(settings, family, up) - cls.x80(settings, family, down)) / 2)
        s = np.array(scores).reshape(3, len(ds), cls.DRAWS)  # (3, G, DRAWS)
        return np.einsum("agk,bgk->gab", s, s) / cls.DRAWS, np.array(grad) / cls.STEP

    @classmethod
    def candidates(cls, settings: SearchSettings, x80: float, slope: float) -> list[int]:
        """The sizes a design may use: within 3 / slope nats of x80, on the size table."""
        xs = x80 + np.linspace(-3.0, 3.0, cls.CANDIDATES) / slope
        return sorted({settings.nearest(float(settings.d_of(x))) for x in xs})

    @classmethod
    def design(
        cls, settings: SearchSettings, truth, rng: np.random.Generator, n: int
    ) -> tuple[list[int], float, np.ndarray]:
        """n runs' sizes (ascending), the asymptotic sd of the x80 estimate they give, and the
        asymptotic covariance of the parameters' estimate (3, 3).

        The design minimises the asymptotic variance of the fitted x80, grad' M(w)^-1 grad, over
        weights w on the candidate sizes (M(w) = sum w_i I_i, I_i one run's Fisher information
        at size i, ``information`` at the truth's parameters; grad, x80's gradient in them), by
        the multiplicative algorithm (w_i <- w_i v'I_i v, v = M^-1 grad), which ends on two or
        three sizes; its weights are then rounded to n runs (largest remainders)."""
        ds = cls.candidates(settings, truth.x80, truth.slope)
        info, g = cls.information(settings, truth, cls.theta(truth), rng, ds)
        ridge = 1e-9 * np.trace(info.mean(axis=0)) * np.eye(3)
        w = np.full(len(ds), 1.0 / len(ds))
        for _ in range(500):
            v = np.linalg.solve(np.einsum("g,gab->ab", w, info) + ridge, g)
            w = w * np.einsum("a,gab,b->g", v, info, v)
            w /= w.sum()
        cov = np.linalg.inv(np.einsum("g,gab->ab", w, info) + ridge) / n
        sd = float(np.sqrt(g @ cov @ g))
        w = np.where(w >= 0.5 / n, w, 0.0)
        counts = np.floor(w / w.sum() * n).astype(int)
        remainders = w / w.sum() * n - counts
        counts[np.argsort(-remainders)[: n - counts.sum()]] += 1
        return [d for d, c in zip(ds, counts, strict=True) for _ in range(c)], sd, cov

    @classmethod
    def fit(
        cls, settings: SearchSettings, family: str, runs, start, cov, wide: bool = False
    ) -> np.ndarray:
        """The parameters (mid, ln slope, ceiling) that maximise the runs' likelihood within the
        ranges the family draws its truths from (``families.fit_bounds``; the place within 20
        nats of the runs' sizes). Nelder-Mead in coordinates whitened by the design's asymptotic
        covariance ``cov`` (the ceiling is pinned far better than the place), from ``start``
        and from the slope's two bounds; the best of the three. ``wide``: the slope free over
        every family's range and the posterior's slopes instead of the family's."""
        x = settings.x_of(np.array([d for d, _ in runs]))
        y = np.array([v for _, v in runs])
        slopes, ceilings = fit_bounds(family)
        if wide:
            slopes = cls.any_slope(settings)
        lo = np.array([x.min() - 20.0, np.log(slopes[0]), ceilings[0]])
        hi = np.array([x.max() + 20.0, np.log(slopes[1]), ceilings[1]])
        start = np.clip(start, lo, hi)
        root = np.linalg.cholesky(cov + 1e-12 * np.eye(3))

        def nll(u):  # outside the ranges: the likelihood at the nearest edge, and a penalty
            t = start + root @ u
            c = np.clip(t, lo, hi)
            ll = log_likelihood(family, x - c[0], y, np.exp(c[1]), c[2]).sum()
            return -float(ll) + 1e4 * float(np.sum((t - c) ** 2))

        best = None
        for ln_slope in (start[1], lo[1], hi[1]):
            u0 = np.linalg.solve(root, np.array([start[0], ln_slope, start[2]]) - start)
            fitted = minimize(nll, u0, method="Nelder-Mead", options={"xatol": 1e-3, "fatol": 1e-6})
            if best is None or fitted.fun < best.fun:
                best = fitted
        return np.clip(start + root @ best.x, lo, hi)

    @classmethod
    def runs(cls, settings: SearchSettings, truth, rng: np.random.Generator, n: int):
        """n runs at the design's sizes: ((d, accuracy) pairs, the design's x80 sd, its
        parameters' covariance)."""
        ds, sd, cov = cls.design(settings, truth, rng, n)
        return runs_at(settings, truth, rng, ds), sd, cov

    BATCH = 4  # runs placed per refit by ``adaptive``

    @classmethod
    def adaptive(
        cls,
        settings: SearchSettings,
        truth,
        rngs: tuple,
        checkpoints: tuple[int, ...],
        cost_power: float = 0.0,
    ) -> tuple[dict[int, dict], dict[int, list]]:
        """The fit that places as it learns: the sampler's bracket, then batches of ``BATCH``
        runs (fewer where a checkpoint comes sooner), placed for the parameters fitted so far.
        Each run of a batch goes, greedily, to the candidate size (``candidates`` about the
        fitted x80) where it most lowers the fitted x80's asymptotic variance g' M^-1 g, over
        the run's cost to the ``cost_power`` (0: per run; 1: per compute, as our sampler's
        look-ahead weighs it by default), M the information of the runs so far and of those
        placed before it in the batch, all at the fitted parameters (``information``, from runs
        drawn by a truth with those parameters: ``truth_at``). The first fit starts from the
        middle of the family's ranges at the bracket's middle size, and each later one from the
        last. Scores (``scored``'s) and the runs so far, at each checkpoint, by run count.
        ``rngs``: the truth's runs' stream, the design's.

        Bimodal and censored curves' fitted learned mean is fitted but not designed for: the
        design draws their runs with the family's own learned mean (``ceiling_of``)."""
        runs_rng, design_rng = rngs
        family = truth.family
        runs = runs_at(settings, truth, runs_rng, bracket(settings))
        theta, scale = cls.first_guess(family, float(settings.x_of(runs[-1][0])))
        weak = 0.01 * np.linalg.inv(scale)  # information of a prior 10x as wide: keeps M regular
        scores, placed = {}, {}
        while True:
            theta = cls.fit(settings, family, runs, theta, scale)
            if len(runs) in checkpoints:
                scores[len(runs)] = cls._score(settings, truth, runs, theta)
                placed[len(runs)] = list(runs)
            if len(runs) >= max(checkpoints):
                return scores, placed
            batch = min(cls.BATCH, min(k for k in checkpoints if k > len(runs)) - len(runs))
            guess = cls.truth_at(settings, family, theta)
            ds = cls.candidates(settings, guess.x80, guess.slope)
            tried = sorted({d for d, _ in runs})
            info, g = cls.information(settings, guess, theta, design_rng, [*ds, *tried])
            at = {d: info[len(ds) + i] for i, d in enumerate(tried)}
            m = sum(at[d] for d, _ in runs) + weak
            chosen, cost = [], settings.cost(np.array(ds)) ** cost_power
            for _ in range(batch):
                now = g @ np.linalg.solve(m, g)
                gain = [now - g @ np.linalg.solve(m + info[i], g) for i in range(len(ds))]
                best = int(np.argmax(np.array(gain) / cost))
                chosen.append(ds[best])
                m = m + info[best]
            runs += runs_at(settings, truth, runs_rng, chosen)
            scale = np.linalg.inv(m)  # the estimate's covariance: the fit's whitening

    @staticmethod
    def first_guess(family: str, mid: float) -> tuple[np.ndarray, np.ndarray]:
        """Where a fit starts before any design: (mid, ln slope, ceiling) at ``mid`` and the
        middle of the family's ranges, and the whitening ``fit`` uses then (3, 3)."""
        slopes, ceilings = fit_bounds(family)
        start = np.array([mid, np.mean(np.log(slopes)), np.mean(ceilings)])
        return start, np.diag([1.0, 0.25, ((ceilings[1] - ceilings[0]) / 4) ** 2])

    @classmethod
    def pick(cls, settings: SearchSettings, truth, runs) -> dict:
        """The runs read by the likeliest of ``FIT_FAMILIES``' fits (each of three parameters, so
        the likeliest is also the best by AIC), each fitted from the middle of its family's ranges
        at the runs' 30th and 60th size percentiles (``fit``): the score (``scored``'s) and
        ``picked_true`` (whether it picked the truth's family)."""
        x = settings.x_of(np.array([d for d, _ in runs]))
        y = np.array([v for _, v in runs])
        best = None
        for family in FIT_FAMILIES:
            for mid in np.percentile(x, [30, 60]):
                theta = cls.fit(settings, family, runs, *cls.first_guess(family, float(mid)))
                ll = float(
                    log_likelihood(family, x - theta[0], y, np.exp(theta[1]), theta[2]).sum()
                )
                if best is None or ll > best[0]:
                    best = (ll, family, theta)
        _, family, theta = best
        return cls._score(settings, truth, runs, theta, family) | {
            "picked_true": family == truth.family
        }

    @staticmethod
    def truth_at(settings: SearchSettings, family: str, theta) -> FamilyTruth:
        """A truth of the family with these parameters (mid, ln slope, ceiling), to draw a
        design's runs from."""
        mid, ln_slope, ceiling = (float(v) for v in theta)
        slope = float(np.exp(ln_slope))
        x80 = curve_x80(family, mid, slope, ceiling, settings.level, settings.chance_corrected)
        extra = () if family in ("bimodal", "censored") else (ceiling,)
        return FamilyTruth(family, mid, slope, 1.0, CHANCE, x80, extra)

    @classmethod
    def _score(
        cls, settings: SearchSettings, truth, runs, theta, family: str | None = None
    ) -> dict:
        """The fit's x80 error with parameters ``theta`` of ``family`` (default: the truth's)."""
        ds = np.array([d for d, _ in runs])
        return {
            "runs": len(runs),
            "compute": float(settings.cost(ds).sum()),
            "covered": None,
            "error": float(cls.x80(settings, family or truth.family, theta) - truth.x80),
        }

    @staticmethod
    def any_slope(settings: SearchSettings) -> tuple[float, float]:
        """The slopes (per nat) a reader that serves every family must allow: every family's
        range and the posterior's grid."""
        ranges = [fit_bounds(family)[0] for family in FAMILIES]
        grid = settings.posterior.slopes
        return min(min(lo for lo, _ in ranges), *grid), max(max(hi for _, hi in ranges), *grid)

    @classmethod
    def scored(
        cls, settings: SearchSettings, truth, runs, sd: float, cov, wide: bool = False
    ) -> dict:
        """The runs read by the fit from the truth's parameters (``covered`` None: it gives no
        interval); ``wide``: see ``fit``."""
        theta = cls.fit(settings, truth.family, runs, cls.theta(truth), cov, wide)
        return cls._score(settings, truth, runs, theta) | {"sd_asymptotic": sd}
