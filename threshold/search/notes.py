"""Study notes for optuna-dashboard: the current transition estimate in words and as a curve.

Each threshold study carries a Markdown note (optuna-dashboard's ``save_note``) with the 80%
point in parameters and in d, its 90% interval (also in a few words as the study user attribute
``80% point``, which the dashboard's study page lists; a new study sets it first, so it is on
the list's first page), the midpoint, the asymptote, the runs done, why
the study stopped, and a summary of its settings; and a plotly figure (``save_plotly_graph_object``)
of accuracy against total parameters with one point per run, the least-squares logistic of
``fit.py`` and the 80% point marked. This module reads the study's record
(:mod:`threshold.search.record`) and stores both; their words and drawing come from a
:class:`NoteRender` its caller hands in (the report layer's,
:data:`threshold.report.dashboard_note.NOTE_RENDER`, wired in by the command line, so this layer
never imports the one above it). Both live in the study's system attributes, where the dashboard
reads them. The worker rewrites them after every estimate refresh and ``threshold dashboard`` at
start-up (so older studies get them too); a note whose text has not
changed is left alone, so its version only moves when the estimate does. Edits made to the note in
the dashboard are overwritten at the next refresh. Where the search stands is the record's stop
status (:func:`threshold.search.record.stop_status`), read off the estimate without the policy's
look-ahead.

The note and figure are written where optuna-dashboard reads them by
:mod:`threshold.search.dashboard_attrs`, without importing optuna-dashboard (its server and, through
Optuna's fANOVA, scikit-learn: 1-1.5 s of CPU in every worker process).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import optuna

from threshold.errors import ThresholdError
from threshold.search.dashboard_attrs import get_note, save_figure, save_note
from threshold.search.fit import logistic
from threshold.search.policy import bracket
from threshold.search.record import StudyView, read_studies, read_study
from threshold.search.sampler import policy_settings
from threshold.search.settings import SearchSettings
from threshold.search.spec import StudySettings
from threshold.search.study import RESULT_ATTR, name_metric

__all__ = [
    "FIGURE_ID",
    "NoteRender",
    "NoteRun",
    "completed_runs",
    "curve_sizes",
    "fit_accuracy",
    "write_all_notes",
    "write_note",
]

log = logging.getLogger(__name__)

FIGURE_ID = "transition-curve"  # fixed, so each refresh replaces the figure instead of adding one
MIN_RUNS = 3  # the initial bracket: before it is complete the posterior is mostly its prior
CURVE_POINTS = 120  # points of the plotted logistic: smooth on a log axis, small JSON


@dataclass(frozen=True)
class NoteRun:
    """One completed trial, as the note and the figure show it."""

    number: int
    d: int
    params: int  # total parameters
    accuracy: float  # the measured op's test accuracy: the trial's value
    seed: int | None
    stop_reason: str | None


def completed_runs(view: StudyView, policy: SearchSettings | None) -> list[NoteRun]:
    """The completed runs of a study, in trial order.

    Parameters come from the run (``params_total``), else from the policy's size table.
    """
    table = dict(policy.params_of_d) if policy is not None else {}
    runs = []
    for r in view.completed:
        params = r.params_total if r.params_total is not None else table.get(r.d_model)
        if params is None:
            continue
        runs.append(NoteRun(r.number, r.d_model, int(params), r.value, r.seed, r.stop_reason))
    return runs


def curve_sizes(params, *marks: float, n: int = CURVE_POINTS) -> np.ndarray:
    """Log-spaced total parameters covering the runs' sizes and the marked ones, 1.5x beyond
    each end: where a fitted curve is drawn. (n,)"""
    ends = [*np.asarray(params, dtype=float).ravel(), *marks]
    return np.geomspace(min(ends) / 1.5, max(ends) * 1.5, n)


def fit_accuracy(fit: dict, params) -> np.ndarray:
    """The least-squares logistic stored in an estimate (its ``fit``) at total parameters."""
    curve = (fit["lower"], fit["upper"], np.log(fit["midpoint_params"]), fit["slope"])
    return logistic(np.log(np.asarray(params, dtype=float)), *curve)


@dataclass(frozen=True)
class NoteRender:
    """How a note is worded and drawn: ``markdown(settings, estimate, runs, *, n_running,
    status, attrs, bracket_d) -> str``, ``figure(estimate, runs, level) -> plotly figure`` (None:
    no figure) and ``result(estimate, runs) -> str``, the finding in a few words (the ``80%
    point`` attribute: optuna-dashboard's attribute table cuts a longer value)."""

    markdown: Callable[..., str]
    figure: Callable[..., object] | None
    result: Callable[..., str]


def write_note(
    study: optuna.Study,
    settings: StudySettings,
    policy: SearchSettings | None,
    estimate: dict | None,
    render: NoteRender,
) -> str:
    """Write the study's note and figure for its current trials and ``estimate``; returns the
    note. Nothing is written when the note's text is unchanged (figure first, then note, so an
    unchanged note means its figure is current)."""
    view = read_study(study, study.study_name)
    body = render.markdown(
        settings,
        estimate,
        completed_runs(view, policy),
        n_running=view.n_running,
        status=view.stop.text,
        attrs=view.attrs,
        bracket_d=bracket(policy) if policy is not None else (),
    )
    if body != get_note(study):
        if render.figure is not None:
            figure = render.figure(estimate, completed_runs(view, policy), settings.search.level)
            save_figure(study, FIGURE_ID, figure.to_json())
        save_note(study, body)
    result = render.result(estimate, completed_runs(view, policy))
    if view.attrs.get(RESULT_ATTR) != result:  # the study page's attribute table shows it
        study.set_user_attr(RESULT_ATTR, result)
    return body


def write_all_notes(
    storage: optuna.storages.BaseStorage, render: NoteRender
) -> list[tuple[str, int]]:
    """Write the note of every threshold study in ``storage``; returns their names and ids (the
    id is in the study's dashboard address).

    Studies that are not threshold studies (no readable settings) are left alone. The policy is
    rebuilt from the stored settings and the study's stored chance rate.
    """
    written = []
    for view in read_studies(storage):
        policy = None
        if view.chance is not None:
            try:
                policy = policy_settings(view.settings, view.chance)
            except ThresholdError as e:
                log.warning("study %s: no size table (%s)", view.name, e)
        study = optuna.load_study(study_name=view.name, storage=storage)
        name_metric(study, view.settings)  # so the dashboard does not say "Objective 0"
        estimate = view.estimate.to_dict() if view.estimate is not None else None
        write_note(study, view.settings, policy, estimate, render)
        written.append((view.name, study._study_id))
    return written
