"""What the report's figures share: the studies' colours and line styles, the PNG writer (with
the layout a legibility check reads), the log axes, and where a study's curve marks its point.

Figures are built on ``matplotlib.figure.Figure`` (no pyplot: no global state, no display).
"""

from __future__ import annotations

import json
from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.image import imsave
from matplotlib.text import Text
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

from threshold.report.data import StudyData
from threshold.search.posterior import level_target

__all__ = [
    "COLORS",
    "DASHES",
    "DPI",
    "LAYOUT_KEY",
    "LEGEND_INSIDE",
    "is_located",
    "layout",
    "level_accuracy",
    "log_params_axis",
    "log_ticks",
    "save_png",
    "study_style",
    "thousands",
    "transition_kind",
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


def save_png(fig: Figure, path: Path) -> Path:
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


def thousands(value, _pos=None) -> str:
    if value >= 1e6:
        return f"{value / 1e6:g}M"
    if value >= 1e3:
        return f"{value / 1e3:g}k"
    return f"{value:g}"


def log_ticks(axis, label) -> None:
    """Ticks at 1, 2 and 5 times powers of ten, each labelled; none on the minor ticks (which
    matplotlib labels on an axis short of a decade, in scientific notation)."""
    axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    axis.set_major_formatter(FuncFormatter(label))
    axis.set_minor_formatter(NullFormatter())


def log_params_axis(ax) -> None:
    ax.set_xscale("log")
    log_ticks(ax.xaxis, thousands)
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


def is_located(s: StudyData) -> bool:
    """The study's runs locate its 80% point (threshold.search.bounds): drawn filled."""
    return transition_kind(s.transition) == "point"


def transition_kind(transition: dict | None) -> str:
    return "point" if transition is None else transition["kind"]
