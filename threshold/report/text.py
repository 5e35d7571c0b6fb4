"""How the report writes numbers: the templates' filters, and the terminal's table cells."""

from __future__ import annotations

__all__ = [
    "GRID_WORDS",
    "bound",
    "cyclic_words",
    "duration",
    "factor",
    "interval",
    "near_transition_words",
    "number",
    "point",
    "point_d",
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
    get = ratio.get if isinstance(ratio, dict) else lambda key: getattr(ratio, key, None)
    form = get("form") or "point"
    if form != "point":
        return bound(form, get("bound")["value"])
    return f"{get('factor'):.2f}x ({get('lo'):.2f} - {get('hi'):.2f})"


def bound(form: str, value: float) -> str:
    """A factor bound as a cell: ``>= 8.09x (bound)``, ``<= 0.50x (bound)``."""
    sign = ">=" if form == "lower bound" else "<="
    return f"{sign} {value:.2f}x (bound)"


def point_d(row) -> str:
    """The d cell beside :func:`point`: ``43.5``, ``> 190``, ``<= 16`` or ``-``."""
    get = row.get if isinstance(row, dict) else lambda key: getattr(row, key, None)
    t = get("transition")
    if t is None or t["kind"] == "point":
        return number(get("d_p80"), 1)
    if t["d"] is None:
        return "-"
    return f"{'>' if t['kind'] == 'lower bound' else '<='} {t['d']}"


def point(row) -> str:
    """A study's 80% point cell (a Row or its JSON): ``27,890``, or a bound the runs give
    instead (``> 455,810``, ``<= 4,976``, ``not located``)."""
    get = row.get if isinstance(row, dict) else lambda key: getattr(row, key, None)
    t = get("transition")
    if t is None or t["kind"] == "point":
        return number(get("params_p80"))
    if t["kind"] == "lower bound":
        return f"> {number(t['params'])}"
    if t["kind"] == "upper bound":
        return f"<= {number(t['params'])}"
    return "not located"


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
    if row["status"] == "ok" and (row.get("transition") or {}).get("kind", "point") != "point":
        cells = [point(row), "not located", point_d(row)]
    elif row["status"] == "ok":
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


def near_transition_words(estimate: dict) -> str | None:
    """The runs near the 80% point in words ("N runs, accuracy sd S, P% learned"), or None."""
    spread = estimate.get("seed_spread") or {}
    if not spread.get("n_near"):
        return None
    sd, share = spread.get("acc_sd"), spread.get("learned_share")
    return (
        f"{spread['n_near']} runs"
        + (f", accuracy sd {sd:.3f}" if sd is not None else "")
        + (f", {share:.0%} learned" if share is not None else "")
    )
