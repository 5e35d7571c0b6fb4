"""The figures that set studies side by side: the headline comparison (80% points and factors,
a block of rows per baseline) and every study's posterior curve on one axis.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from threshold.report.data import StudyData
from threshold.report.figures.common import (
    LEGEND_INSIDE,
    is_located,
    level_accuracy,
    log_params_axis,
    log_ticks,
    save_png,
)

__all__ = ["comparison_figure", "curves_figure"]


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
                _arrowhead(left, t["params"], yi, t["kind"] == "lower bound", color)
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
    log_params_axis(left)
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
                _arrowhead(right, value, yi, least, styles[row.name][0])
                _factor_label(right, f"{'>=' if least else '<='} {value:.2g}x", value, yi)
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
            _factor_label(right, f"{r.factor:.2g}x", r.factor, yi)
        right.set_xscale("log")
        right.margins(x=0.15)  # room for a bound's arrowhead and its label at the edge
        log_ticks(right.xaxis, lambda v, _p: f"{v:g}x")
        right.grid(True, alpha=0.3)
        right.set_xlabel("factor = baseline / study (> 1: smaller)", fontsize=9)
        hollow = any(r.ratio is not None and r.ratio.kind == "size ratio" for _, r in rows if r)
        right.set_title(
            "factor, 90% interval" + (" (hollow: another op)" if hollow else ""), fontsize=9.5
        )
    return save_png(fig, path)


def _arrowhead(ax, x: float, y: float, lower: bool, color: str) -> None:
    """A one-sided value: an arrowhead at ``x`` pointing the way it lies (right: at least)."""
    ax.plot([x], [y], marker="4" if lower else "3", markersize=12, markeredgewidth=2,
            color=color, linestyle="none")  # fmt: skip


def _factor_label(ax, text: str, x: float, y: float) -> None:
    """A factor's value written just above its marker."""
    ax.annotate(text, (x, y), textcoords="offset points", xytext=(0, 6), ha="center",
                va="bottom", fontsize=7.5, color="0.25")  # fmt: skip


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
            mfc=color if is_located(s) else "white",  # hollow: not located by the runs
            capsize=3,
            markersize=6,
        )
    log_params_axis(ax)
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
    return save_png(fig, path)
