"""How the report writes numbers: the templates' filters, and the terminal's table cells."""

from __future__ import annotations

__all__ = [
    "GRID_WORDS",
    "cyclic_words",
    "duration",
    "factor",
    "interval",
    "number",
    "share",
    "spread_words",
    "terminal_cells",
]

GRID_WORDS = (
    "Dense grid (the papers' method): {sizes} log-spaced sizes over the d range each study "
    "explored, {seeds} seeds each, every run trained for the study's full step budget. A grid "
    "run's seconds are its steps times a per-step cost a + b d² fitted to the study's own runs "
    "(training seconds over steps, evaluations included), so grid and search are priced alike. "
    "The grid is given the range the search found, which favours the grid; the papers' earlier "
    "version used about a thousand runs per curve."
)


def number(value, digits: int = 0) -> str:
    """``12,345`` (``digits`` after the point); ``-`` for None."""
    if value is None:
        return "-"
    return f"{value:,.{digits}f}"


def interval(pair, digits: int = 0) -> str:
    if not pair:
        return "-"
    lo, hi = pair
    return f"{number(lo, digits)} - {number(hi, digits)}"


def share(value) -> str:
    return "-" if value is None else f"{value:.2f}"


def duration(seconds) -> str:
    if seconds is None:
        return "-"
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def factor(ratio) -> str:
    """A ratio as ``1.57x (0.54 - 4.73)``: the factor and its 90% interval; ``-`` for None.
    ``ratio``: a :class:`threshold.report.view.Ratio` or its JSON."""
    if ratio is None:
        return "-"
    get = ratio.get if isinstance(ratio, dict) else lambda key: getattr(ratio, key)
    return f"{get('factor'):.2f}x ({get('lo'):.2f} - {get('hi'):.2f})"


def cyclic_words(summary: dict) -> str:
    """An analysis summary's cyclic score as one cell: ``0.98 (k = 1; 1.75x null)``."""
    if summary.get("cyclic") is None:
        return "-"
    k, vs = summary["cyclic_frequency"], summary["cyclic_vs_p95"]
    return f"{summary['cyclic']:.2f} (k = {k}; {vs:.2f}x null)"


def spread_words(spread: dict | None) -> str:
    """A survey's median and range of a score as one cell: ``0.75 (0.36 - 0.98)``."""
    if spread is None:
        return "-"
    return f"{spread['median']:.2f} ({spread['min']:.2f} - {spread['max']:.2f})"


def terminal_cells(row: dict, with_factor) -> list[str]:
    """A study's cells in the terminal summary (a ``comparison`` row of ``results.json``): 80%
    point, interval, d and, when ``with_factor``, its factor against its own baseline."""
    if row["status"] == "ok":
        cells = [number(row["params_p80"]), interval(row["interval_params"])]
        cells.append(number(row["d_p80"], 1))
    else:
        cells = [row["status"].replace("_", " "), "", ""]
    if not with_factor:
        return cells
    if row["is_baseline"]:
        return [*cells, "baseline"]
    ratio = row["ratio"]
    if ratio is None:
        return [*cells, "-" if row.get("baseline") else ""]
    kind = ", another op" if ratio["kind"] == "size ratio" else ""
    return [*cells, factor(ratio) + kind]
