"""The budget axis' figure: each study's 80% point and its factor against tokens trained."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from threshold.report.data import StudyData
from threshold.report.figures.common import log_ticks, save_png, thousands, transition_kind

__all__ = ["budget_figure"]


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
        located = [b for b in s.budget if transition_kind(b.get("transition")) == "point"]
        tokens = np.array([b["tokens"] for b in located], dtype=float) * nudge[s.name]
        p80 = np.array([b["params_p80"] for b in located], dtype=float)
        lo, hi = np.array([b["interval_params"] for b in located], dtype=float).reshape(-1, 2).T
        left.errorbar(tokens, p80, yerr=[p80 - lo, hi - p80], fmt="o", linestyle=dash,
                      color=color, capsize=3, label=s.label)  # fmt: skip
        for b in s.budget:  # a bound: an arrowhead pointing the way the point lies
            kind = transition_kind(b.get("transition"))
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
        log_ticks(ax.xaxis, thousands)
        ax.set_yscale("log")
        ax.grid(True, which="major", alpha=0.3)
        ax.set_xlabel("training tokens by the checkpoint (log scale)")
    log_ticks(left.yaxis, thousands)
    left.set_ylabel("80% point, total parameters")
    left.set_title("80% point against training tokens, 90% intervals", fontsize=10)
    right.axhline(1.0, color="#555", linewidth=0.8)
    log_ticks(right.yaxis, lambda v, _p=None: f"{v:g}")
    right.set_ylabel("factor: baseline's 80% point / study's")
    right.set_title(
        "reduction factor against tokens (above 1: smaller; triangles: bounds)", fontsize=10
    )
    handles, labels = left.get_legend_handles_labels()  # one legend below both panels
    fig.legend(handles, labels, loc="outside lower center", fontsize=8, frameon=False,
               ncols=min(3, len(labels)) or 1)  # fmt: skip
    return save_png(fig, path)
