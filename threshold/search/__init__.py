"""Transition search maths: the grid posterior, the decision policy, the fit and the benchmark.

Everything here takes plain arrays and numbers: no torch, no Optuna storage (the Optuna baselines
of the benchmark import Optuna inside their functions and use in-memory studies only).
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
