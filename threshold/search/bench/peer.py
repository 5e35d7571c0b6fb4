"""A second opinion that no method here uses: psignifit 4's reading of the same runs.

psignifit (Schuett, Harmeling, Macke and Wichmann 2016) is psychophysics' Bayesian fit of a
psychometric function: here a logistic in x = ln(parameters), its guess rate fixed at the chance
rate, its lapse (1 - asymptote) free, a beta-binomial over each run's test questions (its
overdispersion ``eta`` absorbs the seed-to-seed spread), on psignifit's own grid posterior. The
80% point is read off posterior samples, at ``level x (1 - lapse)`` (the paper's wording) or
``chance + level x (1 - lapse - chance)`` (``chance_corrected``), as ours is.

It is an optional extra (``pip install -e '.[bench]'``), never a dependency of ``find``: the
replay reads it beside the dense grids' reference where it is installed (:func:`available`).
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import warnings

import numpy as np

from threshold.search.settings import SearchSettings

__all__ = ["available", "psignifit_reading"]

log = logging.getLogger(__name__)

SAMPLES = 4000  # posterior samples the 80% point's median and 90% interval are read from


def available() -> bool:
    """Whether psignifit is installed (the ``bench`` extra)."""
    return importlib.util.find_spec("psignifit") is not None


def psignifit_reading(
    settings: SearchSettings, runs: list[tuple[int, float]], trials: int, seed: int = 0
) -> dict:
    """psignifit's reading of ``runs`` ((d, accuracy) pairs, each accuracy read on ``trials``
    test questions): the 80% point's posterior median and 90% interval in x (ln params)."""
    # the optional extra, loaded where it is used: a replay without it reads no peer
    psignifit = importlib.import_module("psignifit")
    params = dict(settings.params_of_d)
    x = np.log([params[d] for d, _ in runs])
    acc = np.array([y for _, y in runs])
    data = np.c_[x, np.round(acc * trials), np.full(len(runs), trials)]
    with warnings.catch_warnings():  # "gamma unusually high": a majority rate, not a human's
        warnings.simplefilter("ignore", UserWarning)
        result = psignifit.psignifit(
            data,
            sigmoid="logistic",
            experiment_type="yes/no",
            fixed_parameters={"gamma": settings.chance},
            pool_max_blocks=len(runs) + 1,  # every run its own block: no pooling
            verbose=False,
            debug=True,  # keeps the posterior, to sample
        )
    draws = result.posterior_samples(SAMPLES, random_state=np.random.default_rng(seed))
    lapse, chance = draws["lambda"], settings.chance
    ceiling = 1.0 - lapse
    target = chance + settings.level * (ceiling - chance) if settings.chance_corrected else None
    target = settings.level * ceiling if target is None else target
    ok = target > chance  # an asymptote at chance has no 80% point
    sigmoid = result.configuration.make_sigmoid()
    x80 = sigmoid.inverse(
        target[ok], draws["threshold"][ok], draws["width"][ok], draws["gamma"][ok], lapse[ok]
    )
    lo, mid, hi = np.percentile(x80, [5, 50, 95])
    return {"x": float(mid), "lo": float(lo), "hi": float(hi), "runs": len(runs)}
