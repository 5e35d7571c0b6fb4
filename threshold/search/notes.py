"""Study notes for optuna-dashboard: the current transition estimate in words and as a curve.

Each threshold study carries a Markdown note (optuna-dashboard's ``save_note``) with the 80%
point in parameters and in d, its 90% interval, the midpoint, the asymptote, the runs done, why
the study stopped, and a summary of its settings; and a plotly figure (``save_plotly_graph_object``)
of accuracy against total parameters with one point per run, the least-squares logistic of
``fit.py`` and the 80% point marked. Both live in the study's system attributes, where the
dashboard reads them. The worker rewrites them after every estimate refresh and ``threshold
dashboard`` at start-up (so older studies get them too); a note whose text has not changed is
left alone, so its version only moves when the estimate does. Edits made to the note in the
dashboard are overwritten at the next refresh.

optuna-dashboard (it loads scikit-learn and rich) and plotly are imported on first use, so that
importing the worker stays light.
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
from threshold.search.fit import MIN_POINTS, logistic
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
    "near_transition_words",
    "note_markdown",
    "stop_status",
    "transition_figure",
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


def _n(value: float) -> str:
    return f"{value:,.0f}"


def _title(settings: StudySettings) -> str:
    task = settings.task
    where = f"listops mod {task.n}" if task.testbed == "listops" else f"{task.testbed} S_{task.n}"
    measured = task.measured_op.upper()
    if tuple(task.ops) == (task.measured_op,):
        return f"{measured} ({where})"
    return f"{measured} in {'+'.join(op.upper() for op in task.ops)} ({where})"


def _settings_lines(settings: StudySettings, attrs: dict) -> list[str]:
    task, train, search = settings.task, settings.train, settings.search
    n_train = task.n_train if task.n_train is not None else 5000 * task.n
    level = (
        f"chance + {search.level:g} x (asymptote - chance)"
        if search.chance_corrected
        else f"{search.level:g} x asymptote"
    )
    lines = [
        f"- **Task**: {task.testbed} n = {task.n}, ops {', '.join(task.ops)}, measured "
        f"{task.measured_op}; depth {task.depth}, arity {task.arity_min}-{task.arity_max}, "
        f"p_nest {task.p_nest:g}; {n_train:,} training and {task.n_test:,} test sequences "
        f"(split seed {task.split_seed})",
        f"- **Training**: at most {train.max_steps:,} steps a run, batch {train.batch_size}, "
        f"lr {train.lr:g}, weight decay {train.weight_decay:g}",
        f"- **Search**: precision {search.precision:g}x, budget {search.budget} runs, first "
        f"bracket d {search.d_lo}-{search.d_hi} (limits {search.d_min}-{search.d_max}), "
        f"transition at {level}, base seed {search.base_seed}",
    ]
    version, commit = attrs.get("version"), attrs.get("git_commit")
    if version or commit:
        lines.append(f"- threshold {version or '?'}, commit {str(commit or '?')[:10]}")
    return lines


def near_transition_words(estimate: dict) -> str | None:
    """The runs near the 80% point in words ("N runs, accuracy sd S, P% learned"), or None."""
    spread = estimate.get("seed_spread") or {}
    if not spread.get("n_near"):
        return None
    sd, share = spread.get("acc_sd"), spread.get("learned_share")
    return (
        f"{spread['n_near']} runs"
        + (f", accuracy sd {sd:.3f}" if sd is not None else "")
        + (f", {share:.0%} learned" if share is not None else "")
    )


def note_markdown(
    settings: StudySettings,
    estimate: dict | None,
    runs: Sequence[Run],
    *,
    n_running: int = 0,
    status: str = "",
    attrs: dict | None = None,
    bracket_d: Sequence[int] = (),
) -> str:
    """The note: estimate table, runs and status, settings. Pure: no storage."""
    level = settings.search.level
    point = f"{level:.0%} point"
    n_runs = len(runs)
    lines = []
    enough = estimate is not None and n_runs >= MIN_RUNS and estimate.get("params_p80")
    if not enough:
        lines.append(f"## {_title(settings)}: too few runs for an estimate")
        lines.append("")
        sizes = f" (d = {', '.join(str(d) for d in bracket_d)})" if bracket_d else ""
        lines.append(
            f"{n_runs} completed run(s): the estimate of the {point} starts once the "
            f"{MIN_RUNS} runs of the initial bracket{sizes} are done."
        )
        lines.append("")
    else:
        est = estimate
        lo, hi = est["interval_params"]
        d_lo, d_hi = est.get("interval_d", [None, None])
        lines.append(
            f"## {_title(settings)}: {point} at {_n(est['params_p80'])} parameters "
            f"(d = {est['d_p80']:.1f})"
        )
        lines.append("")
        lines.append("| | parameters | d |")
        lines.append("|---|---:|---:|")
        lines.append(
            f"| **{point}** (posterior median) | **{_n(est['params_p80'])}** | "
            f"**{est['d_p80']:.1f}** |"
        )
        ratio = est.get("interval_ratio", hi / lo)
        d_cell = f"{d_lo:.1f} - {d_hi:.1f}" if d_lo is not None else ""
        lines.append(
            f"| 90% credible interval | {_n(lo)} - {_n(hi)} ({ratio:.2f}x wide) | {d_cell} |"
        )
        if est.get("midpoint_params"):
            mid_lo, mid_hi = est.get("midpoint_interval_params", [None, None])
            mid_interval = f" (90%: {_n(mid_lo)} - {_n(mid_hi)})" if mid_lo else ""
            mid_d = f"{est['midpoint_d']:.1f}" if est.get("midpoint_d") else ""
            lines.append(
                f"| midpoint (half-way up the curve) | {_n(est['midpoint_params'])}"
                f"{mid_interval} | {mid_d} |"
            )
        fit = est.get("fit")
        if fit:
            lines.append(
                f"| least-squares logistic fit: {point} | {_n(fit['params_p80'])} | "
                f"{fit['d_p80']:.1f} |"
            )
        lines.append("")
        if not fit:
            why = (
                f"needs {MIN_POINTS} runs at 3 sizes"
                if n_runs < MIN_POINTS
                else "failed, or its curve never reaches the level"
            )
            lines.append(f"- **Least-squares fit**: none ({why})")
        chance = est.get("chance")
        chance_words = f" (chance {chance:.3g})" if chance is not None else ""
        lines.append(f"- **Asymptote**: {est['asymptote']:.3g}{chance_words}")
        near = near_transition_words(est)
        if near:
            lines.append(f"- **Near the transition** (within 1.5x in d): {near}")
    done = f"- **Runs**: {n_runs} done, {n_running} running"
    if estimate is not None and estimate.get("n_runs") not in (None, n_runs):
        done += f" (the estimate is from {estimate['n_runs']})"
    lines.append(done)
    if status:
        lines.append(f"- **Status**: {status}")
    lines.append("")
    lines.append("### Settings")
    lines.append("")
    lines.extend(_settings_lines(settings, attrs or {}))
    lines.append("")
    lines.append(
        "*Written by threshold from the stored trials; rewritten after every run, "
        "so edits made here are lost.*"
    )
    return "\n".join(lines) + "\n"


def transition_figure(estimate: dict | None, runs: Sequence[Run], level: float = 0.8):
    """Accuracy against total parameters (log x): the runs, the fitted logistic and the
    80% point (the fit's on its curve; the posterior's as a line in its shaded 90% interval)."""
    import plotly.graph_objects as go

    point = f"{level:.0%} point"
    fig = go.Figure()
    est = estimate or {}
    if est.get("interval_params") and len(runs) >= MIN_RUNS:
        lo, hi = est["interval_params"]
        fig.add_trace(
            go.Scatter(
                x=[lo, lo, hi, hi, lo],
                y=[0, 1, 1, 0, 0],
                fill="toself",
                mode="none",
                fillcolor="rgba(99, 110, 250, 0.12)",
                name="90% interval",
                hoverinfo="skip",
            )
        )
        fig.add_trace(
            go.Scatter(
                x=[est["params_p80"]] * 2,
                y=[0, 1],
                mode="lines",
                line={"color": "rgb(99, 110, 250)", "dash": "dash"},
                name=f"{point} {_n(est['params_p80'])} (posterior)",
            )
        )
    if est.get("chance") is not None:
        fig.add_hline(
            y=est["chance"], line={"color": "gray", "dash": "dot", "width": 1},
            annotation_text="chance", annotation_position="bottom right",
        )  # fmt: skip
    params = np.array([r.params for r in runs], dtype=float)  # (N,)
    fit = est.get("fit")
    if fit and params.size:
        xs = curve_sizes(params, fit["params_p80"])  # (P,)
        ys = fit_accuracy(fit, xs)  # (P,)
        fig.add_trace(
            go.Scatter(
                x=_round(xs), y=_round(ys), mode="lines", name="logistic fit",
                line={"color": "rgb(239, 85, 59)"},
            )
        )  # fmt: skip
        y80 = float(fit_accuracy(fit, fit["params_p80"]))
        fig.add_trace(
            go.Scatter(
                x=[fit["params_p80"]], y=[round(y80, 4)], mode="markers",
                marker={"symbol": "diamond", "size": 12, "color": "rgb(239, 85, 59)"},
                name=f"{point} {_n(fit['params_p80'])} (fit)",
            )
        )  # fmt: skip
    if runs:
        fig.add_trace(
            go.Scatter(
                x=params.tolist(),
                y=[round(r.accuracy, 4) for r in runs],
                mode="markers",
                marker={"size": 8, "color": "black", "opacity": 0.7},
                name="runs",
                text=[
                    f"trial {r.number}, d = {r.d}, seed {r.seed}, {r.stop_reason or ''}"
                    for r in runs
                ],
                hovertemplate="%{text}<br>%{x:,} params, accuracy %{y:.3f}<extra></extra>",
            )
        )
    title = "accuracy against size" if runs else "accuracy against size: no runs yet"
    fig.update_layout(
        title={"text": title, "x": 0.02, "xanchor": "left"},  # clear of the plot's mode bar
        template="none",  # plotly's default template adds ~10 kB of JSON to every save
        xaxis={"type": "log", "title": "total parameters", "showgrid": True},
        yaxis={"title": "accuracy (measured op)", "range": [0, 1.02], "showgrid": True},
        legend={"orientation": "h", "y": -0.25},
        margin={"l": 60, "r": 20, "t": 50, "b": 90},
    )
    return fig


def curve_sizes(params, *marks: float, n: int = CURVE_POINTS) -> np.ndarray:
    """Log-spaced total parameters covering the runs' sizes and the marked ones, 1.5x beyond
    each end: where a fitted curve is drawn. (n,)"""
    ends = [*np.asarray(params, dtype=float).ravel(), *marks]
    return np.geomspace(min(ends) / 1.5, max(ends) * 1.5, n)


def fit_accuracy(fit: dict, params) -> np.ndarray:
    """The least-squares logistic stored in an estimate (its ``fit``) at total parameters."""
    curve = (fit["lower"], fit["upper"], np.log(fit["midpoint_params"]), fit["slope"])
    return logistic(np.log(np.asarray(params, dtype=float)), *curve)


def _round(values: np.ndarray) -> list[float]:
    return [float(f"{v:.4g}") for v in values]


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
