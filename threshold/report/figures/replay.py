"""The skeptic's figure of the dense grids: per grid, on one log axis of parameters, the dense
reference (all its runs, our posterior) with its 90% interval, the sampler's reading at its own
stop and the reading of the grid a user would run instead (48 runs), each with its interval and
its run count; psignifit's reading of the whole grid beside the reference where the replay has
it (``bench search --replay --peer``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from threshold.report.figures.common import COLORS, log_params_axis, save_png

__all__ = ["grid_label", "replay_figure"]

# (key, label, colour): the readings drawn for a grid, top to bottom within its row
_READINGS = (
    ("reference", "dense grid, every run (reference)", "black"),
    ("peer_reference", "dense grid, psignifit", COLORS[7]),
    ("sampler", "sampler at its own stop", COLORS[0]),
    ("grid48", "16 sizes x 3 seeds (48 runs)", COLORS[1]),
)


def replay_figure(result: dict, path: Path, labels: dict[str, str] | None = None) -> Path | None:
    """The figure of ``result`` (:func:`threshold.search.bench.replay.bench_replay`) over its
    dense grids whose reference is located; None where there is none. ``labels``: words for a
    record's rows, by its file's resolved path (:func:`grid_label`); else each grid's name."""
    grids = [g for g in result["grids"] if "grid48" in g["methods"]]
    grids = [g for g in grids if g["reference"]["kind"] == "point"]
    if not grids:
        return None
    fig = Figure(figsize=(9.0, 1.8 + 0.55 * len(grids)), layout="constrained")
    ax = fig.subplots()
    offsets = np.linspace(0.27, -0.27, len(_READINGS))
    for row, g in enumerate(grids):
        for (key, label, color), dy in zip(_READINGS, offsets, strict=True):
            read = _reading(g, key)
            if read is None:
                continue
            y = -row + dy
            lo, mid, hi = np.exp([read["lo"], read["x"], read["hi"]])
            ax.plot([lo, hi], [y, y], color=color, lw=2, solid_capstyle="butt",
                    label=label if row == 0 else None)  # fmt: skip
            ax.plot([mid], [y], "o", color=color, ms=4)
            if read.get("runs"):
                ax.annotate(f"{read['runs']}", (hi, y), xytext=(3, 0), textcoords="offset points",
                            va="center", fontsize=7, color=color)  # fmt: skip
    names = [grid_label(g, labels or {}) for g in grids]
    ax.set_yticks([-i for i in range(len(grids))], names, fontsize=7)
    log_params_axis(ax)
    ax.set_xlabel("80% point, total parameters (90% interval; runs beside it)")
    fig.legend(loc="outside upper center", ncol=2, fontsize=8, frameon=False)
    return save_png(fig, path)


def grid_label(grid: dict, labels: dict[str, str]) -> str:
    """A row's words: its record's (``listops10 add (add)``, by the resolved path of the grid's
    source) and its checkpoint's steps (``2,000 steps``), or the grid's name where none is given."""
    words = labels.get(str(Path(grid["source"]).resolve())) if grid.get("source") else None
    if words is None:
        return grid["name"]
    steps = grid["name"].rpartition(" @")[2]
    return f"{words}, {int(steps):,} steps" if steps.isdigit() else words


def _reading(grid: dict, key: str) -> dict | None:
    """A reading's x, lo, hi (ln params) and runs: the reference, psignifit's, or a method's at
    its own stop (where its score kept the interval)."""
    if key in ("reference", "peer_reference"):
        read = grid.get(key)
        return (
            None if read is None else read | {"runs": grid["runs"] if key == "reference" else None}
        )
    trials = grid["methods"].get(key) or []
    stop = trials[0]["stop"] if trials else None
    return stop if stop is not None and "lo" in stop else None
