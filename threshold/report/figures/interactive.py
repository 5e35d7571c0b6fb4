"""The report's one interactive figure (plotly): every fitted study's curve, band, 80% point and
runs, in the colours and line styles of the PNGs
(:func:`threshold.report.figures.common.study_style`), and plotly's script beside it.

Imported by the report writer alone, and only where plotly is installed: a lent GPU machine runs
without it (``.ci/wheels``), and its reports go without this figure.
"""

from __future__ import annotations

from pathlib import Path

import plotly.graph_objects as go
from plotly.offline import get_plotlyjs

from threshold.report.data import StudyData
from threshold.report.figures.common import is_located, level_accuracy

__all__ = ["comparison_plotly", "write_plotly_js"]


def _rgba(color: str, alpha: float) -> str:
    r, g, b = (int(color[i : i + 2], 16) for i in (1, 3, 5))
    return f"rgba({r}, {g}, {b}, {alpha})"


def comparison_plotly(studies: list[StudyData], styles: dict):
    """The interactive figure: each fitted study's median curve and 90% band, its 80% point
    with its interval, and its runs. One legend entry a study (band, point and runs go with it);
    two buttons show or hide every study's runs."""
    fig = go.Figure()
    runs_traces = []
    for s in studies:
        if not s.ok:
            continue
        color, (_, dash) = styles[s.name]
        band, est = s.band, s.estimate
        xs = band["params"]
        common = {"legendgroup": s.name, "showlegend": False}
        fig.add_trace(
            go.Scatter(
                x=xs + xs[::-1],
                y=band["hi"] + band["lo"][::-1],
                fill="toself",
                fillcolor=_rgba(color, 0.12),
                line={"width": 0},
                hoverinfo="skip",
                name=f"{s.label}: 90% band",
                **common,
            )
        )
        fig.add_trace(
            go.Scatter(
                x=xs,
                y=band["median"],
                mode="lines",
                line={"color": color, "dash": dash},
                name=s.label,
                legendgroup=s.name,
                hovertemplate="%{x:,.0f} params: median accuracy %{y:.3f}<extra>"
                + s.label
                + "</extra>",
            )
        )
        lo, hi = est["interval_params"]
        p80 = est["params_p80"]
        fig.add_trace(
            go.Scatter(
                x=[p80],
                y=[level_accuracy(s)],
                mode="markers",
                marker={"symbol": "diamond", "size": 10, "color": color},
                error_x={
                    "type": "data",
                    "symmetric": False,
                    "array": [hi - p80],
                    "arrayminus": [p80 - lo],
                    "color": color,
                },
                name=f"{s.label}: 80% point",
                hovertemplate=("" if is_located(s) else "not located by the runs; fitted ")
                + f"80% point {p80:,.0f} params (90%: {lo:,.0f} - {hi:,.0f}), "
                f"d = {est['d_p80']:.1f}<extra>{s.label}</extra>",
                **common,
            )
        )
        runs = [r for r in s.runs if r["params"]]
        runs_traces.append(len(fig.data))
        fig.add_trace(
            go.Scatter(
                x=[r["params"] for r in runs],
                y=[r["accuracy"] for r in runs],
                mode="markers",
                marker={"color": color, "size": 6, "opacity": 0.75, "line": {"width": 0}},
                name=f"{s.label}: runs",
                visible=False,
                text=[f"trial {r['trial']}, d = {r['d']}, seed {r['seed']}" for r in runs],
                hovertemplate="%{text}<br>%{x:,} params, accuracy %{y:.3f}<extra>"
                + s.label
                + "</extra>",
                **common,
            )
        )

    def runs_visible(shown: bool) -> list:
        return [shown if i in runs_traces else True for i in range(len(fig.data))]

    buttons = [
        {"label": "curves", "method": "restyle", "args": [{"visible": runs_visible(False)}]},
        {
            "label": "curves and runs",
            "method": "restyle",
            "args": [{"visible": runs_visible(True)}],
        },
    ]
    fig.update_layout(
        template="none",
        xaxis={"type": "log", "title": "total parameters", "showgrid": True},
        yaxis={"title": "measured-op test accuracy", "range": [0, 1.02], "showgrid": True},
        # Below the plot, across its width: beside it, long labels squeezed the plot.
        legend={
            "orientation": "h",
            "x": 0,
            "xanchor": "left",
            "y": -0.14,
            "yanchor": "top",
            "font": {"size": 12},
            "itemwidth": 30,
        },
        updatemenus=[
            {
                "type": "buttons",
                "direction": "right",
                "buttons": buttons,
                "x": 0.0,
                "y": 1.01,
                "xanchor": "left",
                "yanchor": "bottom",
                "showactive": True,
                "pad": {"r": 4},
            }
        ],
        margin={"l": 60, "r": 10, "t": 50, "b": 50},
        height=500 + 24 * len(runs_traces),  # the legend's rows below the plot
    )
    return fig


def write_plotly_js(path: Path) -> None:
    """plotly's full bundle (4.8 MB: the package ships no other) written to ``path``."""
    path.write_text(get_plotlyjs(), encoding="utf-8")
