"""Simulated transition studies with a known truth, and the search methods run against them.

A simulated task has a learning curve ``p(x) = sigmoid(slope * (x - mid))`` in x = ln(total
parameters): a run at x learns with probability p. Per-seed outcomes are bimodal: a learned run
scores ``N(learned_mean, learned_sd)`` (clipped to 1), an unlearned one ``N(unlearned_mean,
unlearned_sd)``; with probability ``partial_rate * 4p(1-p)`` (largest at the midpoint) the run ends
partially learned instead, at ``c + (A - c) * Beta(2p, 2(1-p))``: anywhere between, with mean
``c + (A - c) p``, so partial runs leave the mean curve, and hence the true x80, unchanged.

Calibrating from real runs: take the completed runs of a few real studies. ``learned_mean`` and
``learned_sd`` are the mean and sd of accuracies of runs well above the transition (every seed
learned); ``unlearned_mean`` and ``unlearned_sd`` those of runs well below it (the former is also
the chance to give the search); ``partial_rate`` is the share of runs within a factor 1.5 in d of
the transition whose accuracy lies between the two modes (more than 3 sd from each), divided by
the average of 4p(1-p) there (about 0.7). The slope range should cover the fitted slopes of real
curves, and ``d80_range`` the transitions the tool is asked about. The search's own likelihood
(``PosteriorSettings``: sd_learned, sd_unlearned, sd_partial) should then be set a little wider
than these numbers, so that an unexpected run is not taken as decisive. This simulator is the
``bimodal`` family of ``families.py``; the other families break the posterior's assumptions.
"""

from __future__ import annotations

import contextlib
import logging
import warnings
from dataclasses import dataclass

import numpy as np
import optuna
from scipy.special import expit, logit, ndtr

from threshold.search.fit import bootstrap_interval, fit_logistic
from threshold.search.policy import decide, posterior_summary
from threshold.search.posterior import level_fraction
from threshold.search.settings import SearchConfig, SearchSettings

__all__ = [
    "ResponseModel",
    "Truth",
    "draw_truth",
    "listops_params",
    "listops_table",
    "make_truth",
    "run_fixed_design",
    "run_optuna",
    "run_policy",
    "sample_accuracy",
]

VOCAB_SIZE = 22  # ListOps mod 10: 10 digits, 6 ops, ( ) = and the end token
N_CTX = 60  # longest ListOps sequence at depth 2 with chain of thought


def listops_params(d, vocab_size: int = VOCAB_SIZE, n_ctx: int = N_CTX):
    """Total parameters of the recurrent transformer (closed form of ``param_count``).

    Block: 12 d^2 + 13 d (attention, MLP 4x, two LayerNorms); final LayerNorm 2 d; token and
    position embeddings and the untied head (2 vocab + context) d. Real-valued d is allowed.
    """
    d = np.asarray(d, dtype=float)
    return 12 * d**2 + 15 * d + (2 * vocab_size + n_ctx) * d


def listops_table(
    d_min: int = SearchConfig.d_min, d_max: int = SearchConfig.d_max
) -> tuple[tuple[int, int], ...]:
    """params_of_d for every integer d in [d_min, d_max]; by default the range a study of the
    tool's defaults may widen to, so a benchmark run from Python reads as ``bench search`` does."""
    return tuple((d, int(listops_params(d))) for d in range(d_min, d_max + 1))


@dataclass(frozen=True)
class ResponseModel:
    learned_mean: float = 0.975  # learned runs reach 0.95-1.0
    learned_sd: float = 0.02  # seed spread of learned runs
    unlearned_mean: float = 0.15  # unlearned runs sit at 0.1-0.25 for mod 10
    unlearned_sd: float = 0.04
    partial_rate: float = 0.2  # peak share of partial runs: about 10-15% near the transition
    d80_range: tuple[float, float] = (10.0, 200.0)  # true transitions, log-uniform in d
    slope_range: tuple[float, float] = (1.5, 6.0)  # per nat: 10-90% over a factor 4.3..1.4 in d
    level: float = 0.8  # the truth uses the same level definition as the search
    chance_corrected: bool = False


@dataclass(frozen=True)
class Truth:
    mid: float  # midpoint of p(x), x units
    slope: float  # per nat of parameters
    asymptote: float  # mean accuracy of learned runs (after clipping at 1)
    chance: float  # mean accuracy of unlearned runs
    x80: float  # where c + (A - c) p(x) reaches the level


def _clipped_mean(mean: float, sd: float) -> float:
    """E[min(Z, 1)] for Z ~ N(mean, sd)."""
    a = (1.0 - mean) / sd
    phi = np.exp(-0.5 * a * a) / np.sqrt(2 * np.pi)
    return float(mean - sd * phi + (1.0 - mean) * (1.0 - ndtr(a)))


def make_truth(model: ResponseModel, d80: float, slope: float) -> Truth:
    """The task whose x80 lies at size d80 (real-valued) with this slope (per nat)."""
    x80 = float(np.log(listops_params(d80)))
    asym = _clipped_mean(model.learned_mean, model.learned_sd)
    frac = float(level_fraction(asym, model.unlearned_mean, model.level, model.chance_corrected))
    return Truth(x80 - float(logit(frac)) / slope, slope, asym, model.unlearned_mean, x80)


def draw_truth(rng: np.random.Generator, model: ResponseModel) -> Truth:
    """A task with x80 log-uniform in d over d80_range and slope log-uniform over slope_range."""
    d80 = float(np.exp(rng.uniform(*np.log(model.d80_range))))
    slope = float(np.exp(rng.uniform(*np.log(model.slope_range))))
    return make_truth(model, d80, slope)


def sample_accuracy(
    rng: np.random.Generator, model: ResponseModel, truth: Truth, x: float
) -> float:
    """One run's final accuracy at x = ln(parameters)."""
    p = float(expit(truth.slope * (x - truth.mid)))
    if rng.random() < model.partial_rate * 4 * p * (1 - p):
        share = rng.beta(max(2 * p, 1e-3), max(2 * (1 - p), 1e-3))
        return float(truth.chance + (truth.asymptote - truth.chance) * share)
    if rng.random() < p:
        return float(min(rng.normal(model.learned_mean, model.learned_sd), 1.0))
    return float(np.clip(rng.normal(model.unlearned_mean, model.unlearned_sd), 0.0, 1.0))


def _result(runs: list[tuple[int, float]], settings: SearchSettings, lo, hi, est) -> dict:
    return {
        "runs": len(runs),
        "compute": float(settings.cost(np.array([d for d, _ in runs])).sum()),
        "lo": lo,
        "hi": hi,
        "est": est,
    }


def run_policy(
    settings: SearchSettings,
    model: ResponseModel,
    truth: Truth,
    rng: np.random.Generator,
    workers: int = 1,
) -> dict:
    """Drive ``decide`` to its stop with ``workers`` parallel workers; a run takes cost(d) time."""
    completed: list[tuple[int, float]] = []
    running: list[tuple[float, int, int]] = []  # (finish time, start order, d)
    active, clock, order = workers, 0.0, 0
    while True:
        while active > len(running):  # each idle worker asks for work
            decision = decide(settings, completed, [d for _, _, d in running])
            if decision.stop:
                active -= 1
                continue
            running.append((clock + float(settings.cost(decision.d)), order, decision.d))
            order += 1
        if not running:
            break
        running.sort()
        clock, _, d = running.pop(0)
        completed.append((d, sample_accuracy(rng, model, truth, float(settings.x_of(d)))))
    return _result(completed, settings, *_posterior_interval(settings, completed))


def run_policy_batched(
    settings: SearchSettings,
    model: ResponseModel,
    truth: Truth,
    rng: np.random.Generator,
    batch: int,
) -> dict:
    """Drive ``decide`` as a batch worker does: each round asks for up to ``batch`` sizes (each
    decision sees the round's earlier ones as pending; a stop ends the round), then all of them
    run at once. ``rounds`` counts the rounds: the wall-clock in units of one run, when a GPU
    trains a round's members side by side."""
    completed: list[tuple[int, float]] = []
    rounds = 0
    while True:
        pending: list[int] = []
        while len(pending) < batch:
            decision = decide(settings, completed, pending)
            if decision.stop:
                break
            pending.append(decision.d)
        if not pending:
            break
        rounds += 1
        for d in pending:
            completed.append((d, sample_accuracy(rng, model, truth, float(settings.x_of(d)))))
    result = _result(completed, settings, *_posterior_interval(settings, completed))
    return result | {"rounds": rounds}


def _posterior_interval(settings: SearchSettings, runs) -> tuple[float, float, float]:
    """(5%, 95%, 50%) posterior quantiles of x80 from the runs."""
    s, _ = posterior_summary(settings, runs)
    return s.x80_lo, s.x80_hi, s.x80_median


def _fitted(settings, runs, rng, n_boot) -> dict:
    """Least-squares fit and pairs-bootstrap interval of the runs made by a baseline."""
    x = settings.x_of(np.array([d for d, _ in runs]))
    y = np.array([v for _, v in runs])
    args = (settings.chance, settings.level, settings.chance_corrected)
    fit = fit_logistic(x, y, *args)
    interval = bootstrap_interval(x, y, args[0], rng, n_boot, *args[1:]) if fit else None
    lo, hi = interval if interval else (np.nan, np.nan)
    return _result(runs, settings, lo, hi, fit.x80 if fit else np.nan)


def run_fixed_design(
    settings: SearchSettings,
    model: ResponseModel,
    truth: Truth,
    rng: np.random.Generator,
    sizes,
    seeds: int = 3,
    n_boot: int = 200,
) -> dict:
    """The papers' dense grid: every size in ``sizes`` x ``seeds`` runs, fit and bootstrap.

    ``posterior`` holds the grid posterior's interval from the same runs, for comparison.
    """
    runs = [
        (int(d), sample_accuracy(rng, model, truth, float(settings.x_of(d))))
        for d in sizes
        for _ in range(seeds)
    ]
    out = _fitted(settings, runs, rng, n_boot)
    # read largest first (the same posterior, cheaper to sum: the largest runs rule out most)
    out["posterior"] = _result(runs, settings, *_posterior_interval(settings, runs[::-1]))
    return out


@contextlib.contextmanager
def _quiet_optuna():
    """Optuna logs every trial at INFO and warns that QMC is experimental; both are noise here.
    The verbosity is restored afterwards."""
    before = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(logging.WARNING)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            yield
    finally:
        optuna.logging.set_verbosity(before)


def run_optuna(
    settings: SearchSettings,
    model: ResponseModel,
    truth: Truth,
    rng: np.random.Generator,
    n_trials: int,
    d_range: tuple[int, int],
    sampler: str = "tpe",
    n_boot: int = 200,
) -> dict:
    """Plain Optuna (in-memory study): minimise |accuracy - level * best accuracy so far| over
    d_model (integer, log scale) for n_trials, then the same fit and bootstrap as the grid."""
    seed = int(rng.integers(2**31))
    with _quiet_optuna():
        if sampler == "tpe":
            chosen = optuna.samplers.TPESampler(seed=seed, n_startup_trials=5, multivariate=True)
        elif sampler == "qmc":
            chosen = optuna.samplers.QMCSampler(seed=seed, scramble=True)
        else:
            raise ValueError(f"sampler {sampler!r}: use tpe or qmc")
        study = optuna.create_study(sampler=chosen, direction="minimize")
        runs, best = [], 0.0
        for _ in range(n_trials):
            trial = study.ask()
            d = trial.suggest_int("d_model", d_range[0], d_range[1], log=True)
            y = sample_accuracy(rng, model, truth, float(settings.x_of(d)))
            best = max(best, y)
            runs.append((d, y))
            study.tell(trial, abs(y - settings.level * best))
    return _fitted(settings, runs, rng, n_boot)
