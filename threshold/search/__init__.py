"""Transition search: the maths (grid posterior, policy, fit, benchmark) and the Optuna side.

The names exported here are the maths: plain arrays and numbers, no torch and no Optuna storage
(the benchmark's Optuna baselines use in-memory studies). The Optuna side is imported by module:
``study`` (the only one that opens a storage), ``sampler`` (the adapter), ``worker``, ``find``.
"""

from threshold.search.benchmark import METHODS, bench_search
from threshold.search.fit import LogisticFit, bootstrap_interval, fit_logistic, transition_estimate
from threshold.search.policy import Decision, bracket, decide, posterior_summary, search_range
from threshold.search.posterior import PosteriorSettings, PosteriorSummary, level_fraction
from threshold.search.settings import SearchSettings
from threshold.search.simulate import (
    ResponseModel,
    Truth,
    draw_truth,
    listops_params,
    listops_table,
    make_truth,
    run_policy,
    sample_accuracy,
)

__all__ = [
    "METHODS",
    "Decision",
    "LogisticFit",
    "PosteriorSettings",
    "PosteriorSummary",
    "ResponseModel",
    "SearchSettings",
    "Truth",
    "bench_search",
    "bootstrap_interval",
    "bracket",
    "decide",
    "draw_truth",
    "fit_logistic",
    "level_fraction",
    "listops_params",
    "listops_table",
    "make_truth",
    "posterior_summary",
    "run_policy",
    "sample_accuracy",
    "search_range",
    "transition_estimate",
]
