"""The optuna-dashboard note's figure (plotly): a study's runs, its fitted curve and its 80% point.

Drawn by the worker beside the note's words (:mod:`threshold.report.notes`) and stored on the
study (:func:`threshold.search.notes.write_note`); :mod:`threshold.report.dashboard_note` hands
the two on together.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go

from threshold.report.notes import bound_words, study_answer
from threshold.report.text import number
from threshold.search.notes import MIN_RUNS, NoteRun, curve_sizes, fit_accuracy

__all__ = ["transition_figure"]


def transition_figure(estimate: dict | None, runs: Sequence[NoteRun], level: float = 0.8):
    """Accuracy against total parameters (log x): the runs, the fitted logistic and the
    80% point (the fit's on its curve; the posterior's as a line in its shaded 90% interval)."""
    point = f"{level:.0%} point"
    fig = go.Figure()
    est = estimate or {}
    ans = study_answer(est, runs) if est.get("interval_params") and len(runs) >= MIN_RUNS else None
    bound = bound_words(ans)
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
                name=f"{point} {number(est['params_p80'])} (posterior"
                + (", context only)" if bound is not None else ")"),
            )
        )
    if bound is not None and ans.get("params") is not None:  # the bound itself, as the title says
        fig.add_trace(
            go.Scatter(
                x=[ans["params"]] * 2,
                y=[0, 1],
                mode="lines",
                line={"color": "black", "width": 3},
                name=f"{point} {bound} parameters (the runs' bound)",
            )
        )
    if est.get("chance") is not None:
        fig.add_hline(
            y=est["chance"],
            line={"color": "gray", "dash": "dot", "width": 1},
            annotation_text="chance",
            annotation_position="bottom right",
        )
    params = np.array([r.params for r in runs], dtype=float)  # (N,)
    fit = est.get("fit")
    if fit and params.size:
        xs = curve_sizes(params, fit["params_p80"])  # (P,)
        ys = fit_accuracy(fit, xs)  # (P,)
        fig.add_trace(
            go.Scatter(
                x=_round(xs),
                y=_round(ys),
                mode="lines",
                name="logistic fit",
                line={"color": "rgb(239, 85, 59)"},
            )
        )
        y80 = float(fit_accuracy(fit, fit["params_p80"]))
        fig.add_trace(
            go.Scatter(
                x=[fit["params_p80"]],
                y=[round(y80, 4)],
                mode="markers",
                marker={"symbol": "diamond", "size": 12, "color": "rgb(239, 85, 59)"},
                name=f"{point} {number(fit['params_p80'])} (fit)",
            )
        )
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
    fig.update_layout(
        # Its first line is short: the mode bar (plotly's buttons, top right) hid a long one.
        title={"text": _figure_title(est, runs, point), "x": 0.02, "xanchor": "left"},
        template="none",  # plotly's default template adds ~10 kB of JSON to every save
        xaxis={"type": "log", "title": "total parameters", "showgrid": True},
        yaxis={"title": "accuracy (measured op)", "range": [0, 1.02], "showgrid": True},
        legend={"orientation": "h", "y": -0.25},
        margin={"l": 60, "r": 20, "t": 90, "b": 90},
    )
    return fig


def _figure_title(est: dict, runs: Sequence[NoteRun], point: str) -> str:
    """What the study found, on top of its figure (the dashboard's study page shows the figure,
    not the note): the 80% point and its interval, or why there is none yet."""
    if not runs:
        return "accuracy against size: no runs yet"
    if not (est.get("interval_params") and len(runs) >= MIN_RUNS):
        return f"accuracy against size: {len(runs)} runs, too few for an estimate"
    lo, hi = est["interval_params"]
    d = f", d = {est['d_p80']:.1f}" if est.get("d_p80") else ""
    bound = bound_words(study_answer(est, runs))
    if bound is not None:  # the posterior's median after the bound, as context only
        said = "not located" if bound == "not located" else f"{bound} parameters, not located"
        return (
            f"<b>{point}: {said}</b><br>posterior median {number(est['params_p80'])} (90%: "
            f"{number(lo)} - {number(hi)}), context only; accuracy against size, {len(runs)} runs"
        )
    return (
        f"<b>{point}: {number(est['params_p80'])} parameters</b><br>90%: {number(lo)} - "
        f"{number(hi)}{d}; accuracy against size, {len(runs)} runs"
    )


def _round(values) -> list[float]:
    return [float(f"{v:.4g}") for v in values]
