"""Study notes for optuna-dashboard: the current transition estimate in words and as a curve.

Each threshold study carries a Markdown note (optuna-dashboard's ``save_note``) with the 80%
point in parameters and in d, its 90% interval, the midpoint, the asymptote, the runs done, why
the study stopped, and a summary of its settings; and a plotly figure (``save_plotly_graph_object``)
of accuracy against total parameters with one point per run, the least-squares logistic of
``fit.py`` and the 80% point marked. This module reads the trials and stores both; their words
and drawing are :mod:`threshold.report.notes` (the report's templates). Both live in the study's
system attributes, where the dashboard reads them. The worker rewrites them after every estimate
refresh and ``threshold dashboard`` at start-up (so older studies get them too); a note whose
text has not changed is left alone, so its version only moves when the estimate does. Edits made
to the note in the dashboard are overwritten at the next refresh.

optuna-dashboard (it loads scikit-learn and rich), plotly and the report's templates are imported
on first use, so that importing the worker stays light.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import optuna
from optuna.trial import FrozenTrial, TrialState

from threshold.errors import ThresholdError
from threshold.search.fit import logistic
from threshold.search.policy import bracket, decide
from threshold.search.sampler import PARAM, policy_settings, split_trials
from threshold.search.settings import SearchSettings
from threshold.search.study import StudySettings

__all__ = [
    "FIGURE_ID",
    "Run",
    "completed_runs",
    "curve_sizes",
    "fit_accuracy",
    "stop_status",
    "write_all_notes",
    "write_note",
]

log = logging.getLogger(__name__)

FIGURE_ID = "transition-curve"  # fixed, so each refresh replaces the figure instead of adding one
MIN_RUNS = 3  # the initial bracket: before it is complete the posterior is mostly its prior
CURVE_POINTS = 120  # points of the plotted logistic: smooth on a log axis, small JSON

_STOP_WORDS = {
    "precision": "the 90% interval is within the precision",
    "budget": "the budget of runs is used",
    "above_range": "the transition lies above the largest allowed size",
    "below_range": "the transition lies below the smallest allowed size",
}


@dataclass(frozen=True)
class Run:
    """One completed trial, as the note and the figure show it."""

    number: int
    d: int
    params: int  # total parameters
    accuracy: float  # the measured op's test accuracy: the trial's value
    seed: int | None
    stop_reason: str | None


def completed_runs(trials: Sequence[FrozenTrial], policy: SearchSettings | None) -> list[Run]:
    """The completed trials with a size and a value, in trial order.

    Parameters come from the trial (``params_total``), else from the policy's size table.
    """
    table = dict(policy.params_of_d) if policy is not None else {}
    runs = []
    for t in trials:
        d = t.params.get(PARAM, t.user_attrs.get(PARAM))
        if t.state != TrialState.COMPLETE or t.value is None or d is None:
            continue
        params = t.user_attrs.get("params_total", table.get(int(d)))
        if params is None:
            continue
        runs.append(
            Run(
                t.number,
                int(d),
                int(params),
                float(t.value),
                t.user_attrs.get("seed"),
                t.user_attrs.get("stop_reason"),
            )
        )
    return runs


def stop_status(
    policy: SearchSettings | None, completed: Sequence[tuple[int, float]], pending: Sequence[int]
) -> tuple[str | None, str]:
    """(stop reason or None, one sentence on where the search stands), from the policy itself."""
    if not completed and not pending:
        return None, "not started: no runs yet"
    if policy is None:
        return None, "unknown: the study has no stored estimate yet"
    decision = decide(policy, completed, pending)
    if not decision.stop:
        return None, f"searching: the next run is at d = {decision.d} ({decision.reason})"
    words = _STOP_WORDS.get(decision.reason, decision.reason)
    if decision.reason == "precision":
        words += f" ({policy.precision:g}x)"
    elif decision.reason == "budget":
        words = f"the budget of {policy.budget} runs is used"
    if pending:
        return decision.reason, f"finishing: {words}; {len(pending)} run(s) still running"
    return decision.reason, f"stopped ({decision.reason}): {words}"


def curve_sizes(params, *marks: float, n: int = CURVE_POINTS) -> np.ndarray:
    """Log-spaced total parameters covering the runs' sizes and the marked ones, 1.5x beyond
    each end: where a fitted curve is drawn. (n,)"""
    ends = [*np.asarray(params, dtype=float).ravel(), *marks]
    return np.geomspace(min(ends) / 1.5, max(ends) * 1.5, n)


def fit_accuracy(fit: dict, params) -> np.ndarray:
    """The least-squares logistic stored in an estimate (its ``fit``) at total parameters."""
    curve = (fit["lower"], fit["upper"], np.log(fit["midpoint_params"]), fit["slope"])
    return logistic(np.log(np.asarray(params, dtype=float)), *curve)


def write_note(
    study: optuna.Study,
    settings: StudySettings,
    policy: SearchSettings | None,
    estimate: dict | None,
) -> str:
    """Write the study's note and figure for its current trials and ``estimate``; returns the
    note. Nothing is written when the note's text is unchanged (figure first, then note, so an
    unchanged note means its figure is current)."""
    from optuna_dashboard import get_note, save_note, save_plotly_graph_object

    # The note's words and figure are presentation, rendered by the report layer's templates
    # (one renderer for pages, READMEs and notes); this module reads the trials and stores them.
    from threshold.report.notes import note_markdown, transition_figure

    trials = study.get_trials(deepcopy=False)
    completed, pending = split_trials(trials)
    runs = completed_runs(trials, policy)
    _, status = stop_status(policy, completed, pending)
    body = note_markdown(
        settings,
        estimate,
        runs,
        n_running=sum(t.state == TrialState.RUNNING for t in trials),
        status=status,
        attrs=study.user_attrs,
        bracket_d=bracket(policy) if policy is not None else (),
    )
    if body != get_note(study):
        figure = transition_figure(estimate, runs, settings.search.level)
        save_plotly_graph_object(study, figure, graph_object_id=FIGURE_ID)
        save_note(study, body)
    return body


def write_all_notes(storage: optuna.storages.BaseStorage) -> list[str]:
    """Write the note of every threshold study in ``storage``; returns their names.

    Studies that are not threshold studies (no readable settings) are left alone. The policy is
    rebuilt from the stored settings and the chance rate stored with the estimate.
    """
    written = []
    for summary in storage.get_all_studies():
        name = summary.study_name
        try:
            settings = StudySettings.from_attrs(summary.user_attrs)
        except ThresholdError:
            log.info("study %s has no threshold settings: no note", name)
            continue
        raw = summary.user_attrs.get("estimate")
        estimate = json.loads(raw) if raw else None
        policy = None
        if estimate and estimate.get("chance") is not None:
            try:
                policy = policy_settings(settings, float(estimate["chance"]))
            except ThresholdError as e:
                log.warning("study %s: no stop status (%s)", name, e)
        study = optuna.load_study(study_name=name, storage=storage)
        write_note(study, settings, policy, estimate)
        written.append(name)
    return written
