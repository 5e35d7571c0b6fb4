"""The report's figures: static PNGs with matplotlib's object API, one interactive plotly figure.

Each PNG function takes collected data and a path, writes one file and returns the path. Figures
are built on ``matplotlib.figure.Figure`` (no pyplot: no global state, no display). The curves
drawn are the posterior's (median and 90% credible band of the mean accuracy, from
:mod:`threshold.search.posterior`) and the least-squares logistic stored with the estimate, drawn
with the dashboard's own curve maths (:func:`threshold.search.notes.fit_accuracy`).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import plotly.graph_objects as go
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.image import imsave
from matplotlib.text import Text
from matplotlib.ticker import FixedLocator, FuncFormatter, LogLocator, NullFormatter

from threshold.report.data import StudyData
from threshold.search.notes import fit_accuracy
from threshold.search.posterior import level_target

__all__ = [
    "COLORS",
    "LAYOUT_KEY",
    "budget_figure",
    "comparison_figure",
    "comparison_plotly",
    "curves_figure",
    "layout",
    "level_accuracy",
    "study_figure",
    "study_style",
    "transfer_figure",
]

# matplotlib's tab10, shared by the PNGs and the plotly figure so a study keeps its colour.
COLORS = [
    *("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd"),
    *("#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"),
]
# After ten studies the colours come round again with another line style (matplotlib, plotly).
DASHES = [("-", "solid"), ("--", "dash"), (":", "dot")]
LEGEND_INSIDE = 6  # more studies than this and the curves' legend moves beside the axes
DPI = 110
LAYOUT_KEY = "threshold:layout"  # the PNG text chunk that holds layout(fig)


def study_style(i: int) -> tuple[str, tuple[str, str]]:
    """The colour and the (matplotlib, plotly) line style of the i-th study of a report."""
    return COLORS[i % len(COLORS)], DASHES[i // len(COLORS) % len(DASHES)]


def _save(fig: Figure, path: Path) -> Path:
    """Write the PNG, with what a legibility check needs in its metadata (:func:`layout`). Drawn
    once: the pixels of that drawing are saved, as ``savefig`` would save them after drawing the
    figure again (half of a report's figure time)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.set_dpi(DPI)  # the layout below is the one saved
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    meta = {LAYOUT_KEY: json.dumps(layout(fig))}
    imsave(path, canvas.buffer_rgba(), format="png", dpi=DPI, metadata=meta)
    return path


def layout(fig: Figure) -> dict:
    """The drawn figure's panels and smallest text, in pixels of the PNG: ``axes`` (each
    panel's [x, y, width, height] from the top left, secondary axes left out) and
    ``min_font_px`` (the smallest visible text). A page shown at a scale multiplies both."""
    height = fig.bbox.height
    boxes = []
    for ax in fig.axes:
        if not ax.get_visible() or ax.__class__.__name__ == "SecondaryAxis":
            continue
        b = ax.get_window_extent()
        boxes.append([round(b.x0), round(height - b.y1), round(b.width), round(b.height)])
    sizes = [
        t.get_fontsize()
        for t in fig.findobj(Text)
        if t.get_visible() and t.get_text().strip() and t.get_window_extent().width > 0
    ]
    return {
        "axes": boxes,
        "min_font_px": round(min(sizes) * DPI / 72, 1) if sizes else None,
        "width": round(fig.bbox.width),
    }


def _thousands(value, _pos=None) -> str:
    if value >= 1e6:
        return f"{value / 1e6:g}M"
    if value >= 1e3:
        return f"{value / 1e3:g}k"
    return f"{value:g}"


def _log_ticks(axis, label) -> None:
    """Ticks at 1, 2 and 5 times powers of ten, each labelled; none on the minor ticks (which
    matplotlib labels on an axis short of a decade, in scientific notation)."""
    axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    axis.set_major_formatter(FuncFormatter(label))
    axis.set_minor_formatter(NullFormatter())


def _log_params_axis(ax) -> None:
    ax.set_xscale("log")
    _log_ticks(ax.xaxis, _thousands)
    ax.grid(True, which="major", alpha=0.3)
    ax.grid(True, which="minor", alpha=0.1)


def level_accuracy(s: StudyData, share: float | None = None) -> float:
    """Accuracy at which the curve marks the transition (share None) or a share of the way
    from chance to the asymptote (0.5: the midpoint)."""
    est = s.estimate
    chance, asym = est["chance"], est["asymptote"]
    if share is not None:
        return chance + share * (asym - chance)
    corrected = bool(est.get("chance_corrected"))
    return float(level_target(asym, chance, s.settings.search.level, corrected))


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
            ax.scatter(
                params[keep],
                [ys[i] for i in keep],
                marker=next(markers, "o"),
                s=22,
                facecolors="none",
                edgecolors="0.55",
                linewidths=0.8,
                label=f"{op.upper()} (not measured)",
                zorder=2,
            )
    est = s.estimate if s.ok else None
    if est is not None:
        band = s.band
        ax.fill_between(
            band["params"],
            band["lo"],
            band["hi"],
            color=COLORS[0],
            alpha=0.2,
            linewidth=0,
            label="posterior: 90% credible band",
        )
        ax.plot(band["params"], band["median"], color=COLORS[0], label="posterior: median curve")
        fit = est.get("fit")
        if fit:
            xs = np.asarray(band["params"])
            ax.plot(
                xs,
                fit_accuracy(fit, xs),
                color=COLORS[3],
                linestyle="--",
                linewidth=1.2,
                label="least-squares logistic",
            )
        lo, hi = est["interval_params"]
        p80 = est["params_p80"]
        point = f"{s.settings.search.level:.0%} point"
        label = f"{point} {p80:,.0f} (90%: {lo:,.0f} - {hi:,.0f})"
        if not _located(s):  # the fit's point stays, hollow, and the runs' bound is drawn
            label = f"fitted {label}: not located by the runs"
            if s.transition["params"] is not None:
                sign = ">" if s.transition["kind"] == "lower bound" else "<="
                bound = s.transition["params"]
                ax.axvline(bound, color=COLORS[1], linestyle=":", linewidth=1.5,
                           label=f"{point} {sign} {bound:,.0f} (the runs' bound)")  # fmt: skip
        ax.errorbar(
            [p80],
            [level_accuracy(s)],
            xerr=[[p80 - lo], [hi - p80]],
            fmt="D",
            color=COLORS[1],
            mfc=COLORS[1] if _located(s) else "white",
            markersize=8,
            capsize=4,
            zorder=5,
            label=label,
        )
        mid = est.get("midpoint_params")
        if mid:
            m_lo, m_hi = est.get("midpoint_interval_params", [mid, mid])
            ax.errorbar(
                [mid],
                [level_accuracy(s, 0.5)],
                xerr=[[mid - m_lo], [m_hi - mid]],
                fmt="o",
                color=COLORS[4],
                markersize=7,
                capsize=4,
                zorder=5,
                label=f"midpoint {mid:,.0f} (90%: {m_lo:,.0f} - {m_hi:,.0f})",
            )
        ax.axhline(
            est["chance"],
            color="0.4",
            linestyle=":",
            linewidth=1,
            label=f"chance (majority answer) {est['chance']:.2f}",
        )
    ax.scatter(
        params,
        [r["accuracy"] for r in runs],
        color="black",
        s=26,
        alpha=0.8,
        zorder=4,
        label=f"{measure.upper()} test accuracy, one point per run",
    )
    if est is None:
        ax.text(
            0.5,
            0.5,
            "too few runs to fit",
            transform=ax.transAxes,
            ha="center",
            va="center",
            fontsize=14,
            color="0.4",
        )
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


def curves_figure(studies: list[StudyData], styles: dict, path: Path) -> Path:
    """Every fitted study's posterior median curve and 90% band on one axis, 80% points marked."""
    outside = len(studies) > LEGEND_INSIDE
    fig = Figure(figsize=(11.0 if outside else 8.2, 4.6), layout="constrained")
    ax = fig.subplots()
    for s in studies:
        if not s.ok:
            continue
        color, (dash, _) = styles[s.name]
        band, est = s.band, s.estimate
        ax.fill_between(
            band["params"], band["lo"], band["hi"], color=color, alpha=0.15, linewidth=0
        )
        ax.plot(band["params"], band["median"], color=color, linestyle=dash, label=s.label)
        lo, hi = est["interval_params"]
        p80 = est["params_p80"]
        ax.errorbar(
            [p80],
            [level_accuracy(s)],
            xerr=[[p80 - lo], [hi - p80]],
            fmt="D",
            color=color,
            mfc=color if _located(s) else "white",  # hollow: not located by the runs
            capsize=3,
            markersize=6,
        )
    _log_params_axis(ax)
    ax.set_ylim(0, 1.02)
    ax.set_xlabel("total parameters (log scale)")
    ax.set_ylabel("measured-op test accuracy")
    ax.set_title(
        "posterior median curves, 90% bands; diamonds: 80% points with 90% intervals", fontsize=10
    )
    if outside:
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), handlelength=2.6)
    else:
        ax.legend(fontsize=8, loc="upper left", handlelength=2.6)
    return _save(fig, path)


def _located(s: StudyData) -> bool:
    """The study's runs locate its 80% point (threshold.search.bounds): drawn filled."""
    return _kind(s.transition) == "point"


def _kind(transition: dict | None) -> str:
    return "point" if transition is None else transition["kind"]


def budget_figure(studies: list[StudyData], styles: dict, path: Path) -> Path:
    """The budget axis: each study's 80% point against the tokens its runs had trained by each
    checkpoint (left), and its factor against its baseline at the same checkpoints (right), both
    with 90% intervals; a bound (the runs there do not locate the point) as a hollow triangle
    pointing the way the value lies, and nothing where there is neither."""
    shown = [s for s in studies if s.budget]
    fig = Figure(figsize=(11.0, 4.0 + 0.2 * len(shown)), layout="constrained")
    left, right = fig.subplots(1, 2)
    nudge = {s.name: 1 + 0.03 * (i - (len(shown) - 1) / 2) for i, s in enumerate(shown)}
    for s in shown:
        color, (dash, _) = styles[s.name]
        located = [b for b in s.budget if _kind(b.get("transition")) == "point"]
        tokens = np.array([b["tokens"] for b in located], dtype=float) * nudge[s.name]
        p80 = np.array([b["params_p80"] for b in located], dtype=float)
        lo, hi = np.array([b["interval_params"] for b in located], dtype=float).reshape(-1, 2).T
        left.errorbar(tokens, p80, yerr=[p80 - lo, hi - p80], fmt="o", linestyle=dash,
                      color=color, capsize=3, label=s.label)  # fmt: skip
        for b in s.budget:  # a bound: an arrowhead pointing the way the point lies
            kind = _kind(b.get("transition"))
            if kind in ("lower bound", "upper bound") and b["transition"]["params"] is not None:
                left.plot(
                    [b["tokens"] * nudge[s.name]],
                    [b["transition"]["params"]],
                    marker="^" if kind == "lower bound" else "v",
                    mfc="white",
                    color=color,
                    linestyle="none",
                )
        points = [b for b in s.budget_reduction if b.get("form", "point") == "point"]
        if points:
            t = np.array([b["tokens"] for b in points], dtype=float) * nudge[s.name]
            f = np.array([b["factor"] for b in points])
            flo, fhi = np.array([b["interval"] for b in points], dtype=float).T
            right.errorbar(t, f, yerr=[f - flo, fhi - f], fmt="o", linestyle=dash, color=color,
                           capsize=3, label=s.label)  # fmt: skip
        for b in s.budget_reduction:
            if b.get("form") in ("lower bound", "upper bound"):
                right.plot(
                    [b["tokens"] * nudge[s.name]],
                    [b["bound"]["value"]],
                    marker="^" if b["form"] == "lower bound" else "v",
                    mfc="white",
                    color=color,
                    linestyle="none",
                )
    for ax in (left, right):
        ax.set_xscale("log")
        _log_ticks(ax.xaxis, _thousands)
        ax.set_yscale("log")
        ax.grid(True, which="major", alpha=0.3)
        ax.set_xlabel("training tokens by the checkpoint (log scale)")
    _log_ticks(left.yaxis, _thousands)
    left.set_ylabel("80% point, total parameters")
    left.set_title("80% point against training tokens, 90% intervals", fontsize=10)
    right.axhline(1.0, color="#555", linewidth=0.8)
    _log_ticks(right.yaxis, lambda v, _p=None: f"{v:g}")
    right.set_ylabel("factor: baseline's 80% point / study's")
    right.set_title(
        "reduction factor against tokens (above 1: smaller; triangles: bounds)", fontsize=10
    )
    handles, labels = left.get_legend_handles_labels()  # one legend below both panels
    fig.legend(handles, labels, loc="outside lower center", fontsize=8, frameon=False,
               ncols=min(3, len(labels)) or 1)  # fmt: skip
    return _save(fig, path)


def comparison_figure(groups, styles: dict, path: Path) -> Path:
    """The headline: a block of rows for each baseline (``groups``, view Groups; a row labelled
    without what its block's title says), each study's 80% point with its 90% interval on the
    left and, in a group with a baseline, its
    factor against it with its 90% interval on the right (hollow: a size ratio, another op)."""
    rows = []  # (y label, row or None for a group's title)
    for g in groups:
        title = f"against {g.baseline_label}" if g.baseline else "no baseline"
        rows.append((title, None))
        for r in g.rows:
            rows.append((_within(r.label, g.baseline_label) if g.baseline else r.label, r))
    with_factors = any(g.baseline for g in groups)
    height = 1.0 + 0.3 * len(rows)
    fig = Figure(figsize=(10.5 if with_factors else 8.2, height), layout="constrained")
    axes = (
        fig.subplots(1, 2, width_ratios=[3, 2], sharey=True) if with_factors else [fig.subplots()]
    )
    y = np.arange(len(rows))[::-1]  # first row on top
    left = axes[0]
    for yi, (_, row) in zip(y, rows, strict=True):
        for ax in axes:
            if row is None:
                ax.axhspan(yi - 0.5, yi + 0.5, color="0.93", linewidth=0, zorder=0)
        if row is None:
            continue
        color = styles[row.name][0]
        if not row.ok:
            left.text(
                0.02,
                yi,
                row.status.replace("_", " "),
                transform=left.get_yaxis_transform(),
                va="center",
                fontsize=8,
                color="0.4",
            )
            continue
        if not row.located:
            t = row.transition
            if t["params"] is not None:  # one-sided: an arrowhead at the bound
                left.plot(
                    [t["params"]],
                    [yi],
                    marker="4" if t["kind"] == "lower bound" else "3",
                    markersize=12,
                    markeredgewidth=2,
                    color=color,
                    linestyle="none",
                )
            left.text(
                0.02,
                yi,
                "not located",
                transform=left.get_yaxis_transform(),
                va="center",
                fontsize=8,
                color="0.4",
            )
            continue
        lo, hi = row.interval_params
        p80 = row.params_p80
        left.errorbar(
            [p80],
            [yi],
            xerr=[[p80 - lo], [hi - p80]],
            fmt="D",
            color=color,
            capsize=3,
            markersize=6 if row.is_baseline else 5,
            mfc=color if row.is_baseline else "white",
        )
    left.set_yticks(y, [name for name, _ in rows], fontsize=8.5)
    for tick, (_, row) in zip(left.get_yticklabels(), rows, strict=True):
        if row is None:
            tick.set_fontweight("bold")
    left.set_ylim(-0.6, len(rows) - 0.4)
    _log_params_axis(left)
    left.set_xlabel("80% point in total parameters, 90% interval", fontsize=9)
    left.set_title("80% points (filled: the baseline)", fontsize=9.5)
    if with_factors:
        right = axes[1]
        right.axvline(1.0, color="0.4", linestyle=":")
        for yi, (_, row) in zip(y, rows, strict=True):
            if row is None or row.ratio is None:
                if row is not None and row.is_baseline:
                    right.text(1.0, yi, "  baseline", va="center", fontsize=8, color="0.3")
                continue
            r = row.ratio
            other = r.kind == "size ratio"
            if r.form != "point":
                value, least = r.bound["value"], r.form == "lower bound"
                right.plot(
                    [value],
                    [yi],
                    marker="4" if least else "3",
                    markersize=12,
                    markeredgewidth=2,
                    color=styles[row.name][0],
                    linestyle="none",
                )
                right.annotate(
                    f"{'>=' if least else '<='} {value:.2g}x",
                    (value, yi),
                    textcoords="offset points",
                    xytext=(0, 6),
                    ha="center",
                    va="bottom",
                    fontsize=7.5,
                    color="0.25",
                )
                continue
            right.errorbar(
                [r.factor],
                [yi],
                xerr=[[r.factor - r.lo], [r.hi - r.factor]],
                fmt="s",
                color=styles[row.name][0],
                capsize=3,
                markersize=5,
                mfc="white" if other else styles[row.name][0],
            )
            right.annotate(
                f"{r.factor:.2g}x",
                (r.factor, yi),
                textcoords="offset points",
                xytext=(0, 6),
                ha="center",
                va="bottom",
                fontsize=7.5,
                color="0.25",
            )
        right.set_xscale("log")
        right.margins(x=0.15)  # room for a bound's arrowhead and its label at the edge
        _log_ticks(right.xaxis, lambda v, _p: f"{v:g}x")
        right.grid(True, alpha=0.3)
        right.set_xlabel("factor = baseline / study (> 1: smaller)", fontsize=9)
        hollow = any(r.ratio is not None and r.ratio.kind == "size ratio" for _, r in rows if r)
        right.set_title(
            "factor, 90% interval" + (" (hollow: another op)" if hollow else ""), fontsize=9.5
        )
    return _save(fig, path)


def _within(label: str, baseline: str) -> str:
    """A study's label under its group's title (``against ADD, mod 10 (recipe B)``), without what
    the title says: the testbed and modulus, and the baseline's bracketed words (its recipe).
    ``ADD in MAX+MED+ADD, mod 10 (recipe B; ADD nodes matched)`` becomes ``ADD in MAX+MED+ADD
    (ADD nodes matched)``; a label of another form is kept whole."""
    where, _, extras = baseline.partition(", ")[2].partition(" (")
    shared = set(extras.removesuffix(")").split("; ")) if extras else set()
    head, found, rest = label.partition(f", {where}")
    parts = re.fullmatch(r"(?: \((.*)\))?( \[\w+\])?", rest) if found and where else None
    if parts is None:
        return label
    keep = [w for w in (parts[1] or "").split("; ") if w and w not in shared]
    return head + (f" ({'; '.join(keep)})" if keep else "") + (parts[2] or "")


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
    ax.set_title(
        f"{'+'.join(t['tasks']).upper()} at d = {t['d_model']}: pretrained on "
        f"{source} (solid) vs from scratch (dashed)",
        fontsize=10,
    )
    ax.legend(fontsize=7.5, ncol=2, loc="lower right")
    return _save(fig, path)


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
                hovertemplate=("" if _located(s) else "not located by the runs; fitted ")
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
