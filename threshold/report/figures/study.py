"""A study's own figure: accuracy of the measured op against total parameters, every run, with
the posterior's mean curve and 90% band, the least-squares logistic (drawn with the dashboard's
own curve maths, :func:`threshold.search.notes.fit_accuracy`), the 80% point and the midpoint;
embedding size d on the top axis.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter

from threshold.report.data import StudyData, other_ops
from threshold.report.figures.common import (
    COLORS,
    is_located,
    level_accuracy,
    log_params_axis,
    save_png,
)
from threshold.search.notes import fit_accuracy
from threshold.search.objective import ObjectiveSettings

__all__ = ["study_figure"]


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
    words = getattr(s.settings, "size_name", "embedding size d")  # an objective's, its own
    top.set_xlabel(words, fontsize=9)
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
    objective = isinstance(s.settings, ObjectiveSettings)  # anyone's: its own axis words
    measure = "accuracy" if objective else s.settings.task.measured_op.upper()
    runs = [r for r in s.runs if r["params"]]
    params = np.array([r["params"] for r in runs], dtype=float)  # (N,)
    markers = iter("s^vP*X")
    for op in other_ops(s.settings):
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
        if not is_located(s):  # the fit's point stays, hollow, and the runs' bound is drawn
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
            mfc=COLORS[1] if is_located(s) else "white",
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
        label=f"{measure} {'' if objective else 'test accuracy'}, one point per run",
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
    log_params_axis(ax)
    _d_axis(ax, s)
    ax.set_ylim(0, 1.02)
    if objective and not s.settings.counted:
        ax.set_xlabel(f"{s.settings.size_name} (log scale)")
    else:
        ax.set_xlabel("total parameters (log scale)")
    ax.set_ylabel(
        f"{measure} (the objective's)" if objective else f"{measure} test accuracy (greedy)"
    )
    ax.set_title(s.label, fontsize=11)
    ax.legend(fontsize=7.5, loc="lower right", framealpha=0.85)
    return save_png(fig, path)
