"""The report's figures: static PNGs with matplotlib's object API, one interactive plotly figure.

Each PNG function takes collected data and a path, writes one file and returns the path. Figures
are built on ``matplotlib.figure.Figure`` (no pyplot: no global state, no display). The curves
drawn are the posterior's (median and 90% credible band of the mean accuracy, from
:mod:`threshold.search.posterior`) and the least-squares logistic stored with the estimate, drawn
with the dashboard's own curve maths (:func:`threshold.search.notes.fit_accuracy`).
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter

from threshold.report.data import StudyData
from threshold.report.text import OTHER_OP
from threshold.search.notes import fit_accuracy

__all__ = [
    "COLORS",
    "comparison_figure",
    "comparison_plotly",
    "curves_figure",
    "level_accuracy",
    "study_figure",
    "study_style",
    "transfer_figure",
]

# matplotlib's tab10, shared by the PNGs and the plotly figure so a study keeps its colour.
COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
          "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"]  # fmt: skip
# After ten studies the colours come round again with another line style (matplotlib, plotly).
DASHES = [("-", "solid"), ("--", "dash"), (":", "dot")]
LEGEND_INSIDE = 6  # more studies than this and the curves' legend moves beside the axes
DPI = 110


def study_style(i: int) -> tuple[str, tuple[str, str]]:
    """The colour and the (matplotlib, plotly) line style of the i-th study of a report."""
    return COLORS[i % len(COLORS)], DASHES[i // len(COLORS) % len(DASHES)]


def _save(fig: Figure, path: Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=DPI)
    return path


def _thousands(value, _pos=None) -> str:
    if value >= 1e6:
        return f"{value / 1e6:g}M"
    if value >= 1e3:
        return f"{value / 1e3:g}k"
    return f"{value:g}"


def _log_params_axis(ax) -> None:
    ax.set_xscale("log")
    ax.xaxis.set_major_formatter(FuncFormatter(_thousands))
    ax.grid(True, which="major", alpha=0.3)
    ax.grid(True, which="minor", alpha=0.1)


def level_accuracy(s: StudyData, share: float | None = None) -> float:
    """Accuracy at which the curve marks the transition (share None) or a share of the way
    from chance to the asymptote (0.5: the midpoint)."""
    est = s.estimate
    chance, asym = est["chance"], est["asymptote"]
    if share is not None:
        return chance + share * (asym - chance)
    level = s.settings.search.level
    return chance + level * (asym - chance) if est.get("chance_corrected") else level * asym


def _d_axis(ax, s: StudyData) -> None:
    """Embedding size d on the top axis, read off the study's size table."""
    policy = s.policy
    if policy is None:
        return
    log_d, log_p = np.log(policy.sizes), policy.log_params

    def to_d(p):
        return policy.d_of(np.log(np.maximum(p, 1e-9)))

    def to_params(d):  # the inverse of d_of: log-log interpolation, end segments extended
        u = np.log(np.maximum(d, 1e-9))
        inside = np.interp(u, log_d, log_p)
        below = log_p[0] + (u - log_d[0]) * (log_p[1] - log_p[0]) / (log_d[1] - log_d[0])
        above = log_p[-1] + (u - log_d[-1]) * (log_p[-1] - log_p[-2]) / (log_d[-1] - log_d[-2])
        return np.exp(np.where(u < log_d[0], below, np.where(u > log_d[-1], above, inside)))

    top = ax.secondary_xaxis("top", functions=(to_d, to_params))
    top.set_xlabel("embedding size d", fontsize=9)
    lo, hi = policy.sizes[0], policy.sizes[-1]  # beyond the size table d is not defined

    def ticks(values):
        return FixedLocator([v for v in values if lo <= v <= hi])

    top.xaxis.set_major_locator(ticks([2.0**k for k in range(12)]))  # 1, 2, 4, 8, ...
    top.xaxis.set_minor_locator(ticks([3.0 * 2.0**k for k in range(12)]))  # 3, 6, 12, ...
    top.xaxis.set_major_formatter(FuncFormatter(lambda v, _p: f"{v:g}"))
    top.xaxis.set_minor_formatter(NullFormatter())


def study_figure(s: StudyData, path: Path) -> Path:
    """Accuracy of the measured op against total parameters, every run; the posterior's mean
    curve with its 90% band, the least-squares logistic, the 80% point and the midpoint with
    their 90% intervals; the other ops of the mixture as faint points."""
    fig = Figure(figsize=(8.2, 4.9), layout="constrained")
    ax = fig.subplots()
    task = s.settings.task
    measure = task.measured_op
    runs = [r for r in s.runs if r["params"]]
    params = np.array([r["params"] for r in runs], dtype=float)  # (N,)
    markers = iter("s^vP*X")
    for op in task.ops:
        if op == measure:
            continue
        ys = [r["accuracy_ops"].get(op) for r in runs]
        keep = [i for i, y in enumerate(ys) if y is not None]
        if keep:
            ax.scatter(params[keep], [ys[i] for i in keep], marker=next(markers, "o"), s=22,
                       facecolors="none", edgecolors="0.55", linewidths=0.8,
                       label=f"{op.upper()} (not measured)", zorder=2)  # fmt: skip
    est = s.estimate if s.ok else None
    if est is not None:
        band = s.band
        ax.fill_between(band["params"], band["lo"], band["hi"], color=COLORS[0], alpha=0.2,
                        linewidth=0, label="posterior: 90% credible band")  # fmt: skip
        ax.plot(band["params"], band["median"], color=COLORS[0], label="posterior: median curve")
        fit = est.get("fit")
        if fit:
            xs = np.asarray(band["params"])
            ax.plot(xs, fit_accuracy(fit, xs), color=COLORS[3], linestyle="--", linewidth=1.2,
                    label="least-squares logistic")  # fmt: skip
        lo, hi = est["interval_params"]
        p80 = est["params_p80"]
        point = f"{s.settings.search.level:.0%} point"
        ax.errorbar([p80], [level_accuracy(s)], xerr=[[p80 - lo], [hi - p80]], fmt="D",
                    color=COLORS[1], markersize=8, capsize=4, zorder=5,
                    label=f"{point} {p80:,.0f} (90%: {lo:,.0f} - {hi:,.0f})")  # fmt: skip
        mid = est.get("midpoint_params")
        if mid:
            m_lo, m_hi = est.get("midpoint_interval_params", [mid, mid])
            ax.errorbar([mid], [level_accuracy(s, 0.5)], xerr=[[mid - m_lo], [m_hi - mid]],
                        fmt="o", color=COLORS[4], markersize=7, capsize=4, zorder=5,
                        label=f"midpoint {mid:,.0f} (90%: {m_lo:,.0f} - {m_hi:,.0f})")  # fmt: skip
        ax.axhline(est["chance"], color="0.4", linestyle=":", linewidth=1,
                   label=f"chance (majority answer) {est['chance']:.2f}")  # fmt: skip
    ax.scatter(params, [r["accuracy"] for r in runs], color="black", s=26, alpha=0.8, zorder=4,
               label=f"{measure.upper()} test accuracy, one point per run")  # fmt: skip
    if est is None:
        ax.text(0.5, 0.5, "too few runs to fit", transform=ax.transAxes, ha="center",
                va="center", fontsize=14, color="0.4")  # fmt: skip
        if params.size:
            ax.set_xlim(params.min() / 2, params.max() * 2)
    _log_params_axis(ax)
    _d_axis(ax, s)
    ax.set_ylim(0, 1.02)
    ax.set_xlabel("total parameters (log scale)")
    ax.set_ylabel(f"{measure.upper()} test accuracy (greedy)")
    ax.set_title(s.label, fontsize=11)
    ax.legend(fontsize=7.5, loc="lower right", framealpha=0.85)
    return _save(fig, path)


def curves_figure(studies: list[StudyData], path: Path) -> Path:
    """Every fitted study's posterior median curve and 90% band on one axis, 80% points marked."""
    outside = len(studies) > LEGEND_INSIDE
    fig = Figure(figsize=(11.0 if outside else 8.2, 4.6), layout="constrained")
    ax = fig.subplots()
    for i, s in enumerate(studies):
        if not s.ok:
            continue
        color, (dash, _) = study_style(i)
        band, est = s.band, s.estimate
        ax.fill_between(band["params"], band["lo"], band["hi"], color=color, alpha=0.15,
                        linewidth=0)  # fmt: skip
        ax.plot(band["params"], band["median"], color=color, linestyle=dash, label=s.label)
        lo, hi = est["interval_params"]
        p80 = est["params_p80"]
        ax.errorbar([p80], [level_accuracy(s)], xerr=[[p80 - lo], [hi - p80]], fmt="D",
                    color=color, capsize=3, markersize=6)  # fmt: skip
    _log_params_axis(ax)
    ax.set_ylim(0, 1.02)
    ax.set_xlabel("total parameters (log scale)")
    ax.set_ylabel("measured-op test accuracy")
    ax.set_title("posterior median curves, 90% bands; diamonds: 80% points with 90% intervals",
                 fontsize=10)  # fmt: skip
    if outside:
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), handlelength=2.6)
    else:
        ax.legend(fontsize=8, loc="upper left", handlelength=2.6)
    return _save(fig, path)


def comparison_figure(studies: list[StudyData], baseline: str | None, path: Path) -> Path:
    """Each study's 80% point and midpoint with 90% intervals; beside it, with a baseline, each
    study's reduction factor with its 90% interval."""
    rows = list(reversed(studies))  # first study on top
    with_factors = baseline is not None
    fig = Figure(figsize=(10.5 if with_factors else 8.2, 1.4 + 0.55 * len(rows)),
                 layout="constrained")  # fmt: skip
    axes = fig.subplots(1, 2, width_ratios=[3, 2]) if with_factors else [fig.subplots()]
    ax = axes[0]
    y = np.arange(len(rows))
    for yi, s in zip(y, rows, strict=True):
        color, _ = study_style(studies.index(s))
        if not s.ok:
            ax.text(0.02, yi, s.status_text.split(":")[0], transform=ax.get_yaxis_transform(),
                    va="center", fontsize=8, color="0.4")  # fmt: skip
            continue
        est = s.estimate
        lo, hi = est["interval_params"]
        p80 = est["params_p80"]
        ax.errorbar([p80], [yi + 0.12], xerr=[[p80 - lo], [hi - p80]], fmt="D", color=color,
                    capsize=4, label="80% point" if yi == y[-1] else None)  # fmt: skip
        mid = est.get("midpoint_params")
        if mid:
            m_lo, m_hi = est.get("midpoint_interval_params", [mid, mid])
            ax.errorbar([mid], [yi - 0.12], xerr=[[mid - m_lo], [m_hi - mid]], fmt="o",
                        mfc="white", color=color, capsize=3, alpha=0.8)  # fmt: skip
    ax.set_yticks(y, [s.label for s in rows], fontsize=8.5)
    ax.set_ylim(-0.6, len(rows) - 0.4)
    _log_params_axis(ax)
    ax.set_xlabel("total parameters")
    ax.set_title("80% point (diamond) and midpoint (circle), 90% intervals", fontsize=9.5)
    if with_factors:
        right = axes[1]
        right.axvline(1.0, color="0.4", linestyle=":")
        for yi, s in zip(y, rows, strict=True):
            color, _ = study_style(studies.index(s))
            if s.name == baseline:
                right.text(1.0, yi, "  baseline", va="center", fontsize=8)
            elif s.reduction is not None or s.size_ratio is not None:
                r = s.reduction or s.size_ratio
                lo, hi = r["interval"]
                f = r["factor"]
                other = s.reduction is None  # another op: hollow, and said so
                right.errorbar([f], [yi], xerr=[[f - lo], [hi - f]], fmt="s", color=color,
                               capsize=4, mfc="white" if other else color)  # fmt: skip
                right.annotate(f"{f:.2g}x" + (f", {OTHER_OP}" if other else ""), (f, yi),
                               textcoords="offset points", xytext=(0, 7), ha="center",
                               fontsize=8)  # fmt: skip
            else:
                note = textwrap.fill(s.reduction_note, 34)
                right.text(0.02, yi, note, transform=right.get_yaxis_transform(), va="center",
                           fontsize=7, color="0.4")  # fmt: skip
        right.set_yticks(y, [""] * len(rows))
        right.set_ylim(-0.6, len(rows) - 0.4)
        right.set_xscale("log")
        right.xaxis.set_major_formatter(FuncFormatter(lambda v, _p: f"{v:g}x"))
        right.grid(True, alpha=0.3)
        right.set_xlabel("reduction factor")
        hollow = any(s.reduction is None and s.size_ratio is not None for s in rows)
        right.set_title("baseline 80% point / study's, 90% interval"
                        + ("\n(hollow: another op, a size ratio)" if hollow else ""),
                        fontsize=9.5)  # fmt: skip
    return _save(fig, path)


def transfer_figure(t: dict, path: Path) -> Path:
    """Validation accuracy against training step on the target, pretrained (solid) and from
    scratch (dashed), one colour per seed."""
    fig = Figure(figsize=(8.2, 4.2), layout="constrained")
    ax = fig.subplots()
    for i, c in enumerate(t["curves"]):
        color = COLORS[i % len(COLORS)]
        for key, style, words in (("transfer", "-", "pretrained"), ("scratch", "--", "scratch")):
            if c[key]:
                steps, acc = zip(*c[key], strict=True)
                ax.plot(steps, acc, style, color=color, label=f"seed {c['seed']}, {words}")
    ax.set_ylim(0, 1.02)
    ax.grid(True, alpha=0.3)
    ax.set_xlabel("training step on the target")
    ax.set_ylabel(f"{t['measure'].upper()} validation accuracy (teacher-forced)")
    source = "+".join(t["pretrain"]).upper()
    ax.set_title(f"{'+'.join(t['tasks']).upper()} at d = {t['d_model']}: pretrained on "
                 f"{source} (solid) vs from scratch (dashed)", fontsize=10)  # fmt: skip
    ax.legend(fontsize=7.5, ncol=2, loc="lower right")
    return _save(fig, path)


def _rgba(color: str, alpha: float) -> str:
    r, g, b = (int(color[i : i + 2], 16) for i in (1, 3, 5))
    return f"rgba({r}, {g}, {b}, {alpha})"


def comparison_plotly(studies: list[StudyData]):
    """The interactive comparison: each fitted study's median curve and 90% band, its 80% point
    with its interval, and its runs (hidden until clicked in the legend)."""
    import plotly.graph_objects as go

    fig = go.Figure()
    for i, s in enumerate(studies):
        if not s.ok:
            continue
        color, (_, dash) = study_style(i)
        band, est = s.band, s.estimate
        group = s.name
        xs = band["params"]
        fig.add_trace(
            go.Scatter(
                x=xs + xs[::-1], y=band["hi"] + band["lo"][::-1], fill="toself",
                fillcolor=_rgba(color, 0.15), line={"width": 0}, hoverinfo="skip",
                legendgroup=group, showlegend=False, name=f"{s.label}: 90% band",
            )
        )  # fmt: skip
        fig.add_trace(
            go.Scatter(
                x=xs, y=band["median"], mode="lines", line={"color": color, "dash": dash},
                name=s.label,
                legendgroup=group,
                hovertemplate="%{x:,.0f} params: median accuracy %{y:.3f}<extra>"
                + s.label + "</extra>",
            )
        )  # fmt: skip
        lo, hi = est["interval_params"]
        p80 = est["params_p80"]
        fig.add_trace(
            go.Scatter(
                x=[p80], y=[level_accuracy(s)], mode="markers", legendgroup=group,
                showlegend=False, marker={"symbol": "diamond", "size": 11, "color": color},
                error_x={"type": "data", "symmetric": False, "array": [hi - p80],
                         "arrayminus": [p80 - lo], "color": color},
                name=f"{s.label}: 80% point",
                hovertemplate=f"80% point {p80:,.0f} params (90%: {lo:,.0f} - {hi:,.0f}), "
                f"d = {est['d_p80']:.1f}<extra>{s.label}</extra>",
            )
        )  # fmt: skip
        runs = [r for r in s.runs if r["params"]]
        fig.add_trace(
            go.Scatter(
                x=[r["params"] for r in runs], y=[r["accuracy"] for r in runs], mode="markers",
                marker={"color": color, "size": 7, "opacity": 0.7, "line": {"width": 0}},
                name=f"{s.label}: runs", legendgroup=group, visible="legendonly",
                text=[f"trial {r['trial']}, d = {r['d']}, seed {r['seed']}" for r in runs],
                hovertemplate="%{text}<br>%{x:,} params, accuracy %{y:.3f}<extra></extra>",
            )
        )  # fmt: skip
    fig.update_layout(
        title={"text": "learning transitions: accuracy against size", "x": 0.02},
        template="none",
        xaxis={"type": "log", "title": "total parameters", "showgrid": True},
        yaxis={"title": "measured-op test accuracy", "range": [0, 1.02], "showgrid": True},
        legend={"orientation": "h", "y": -0.2},
        margin={"l": 60, "r": 20, "t": 50, "b": 60},
        height=520,
    )
    return fig
