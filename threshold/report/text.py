"""Words and numbers shared by the HTML page and the Markdown summary: cells of the tables."""

from __future__ import annotations

__all__ = [
    "GRID_WORDS",
    "OTHER_OP",
    "SIZE_RATIO_WORDS",
    "comparison_rows",
    "cyclic_words",
    "duration",
    "efficiency_rows",
    "factor",
    "interval",
    "number",
    "settings_rows",
    "spread_words",
]

GRID_WORDS = (
    "Dense grid (the papers' method): {sizes} log-spaced sizes over the d range each study "
    "explored, {seeds} seeds each, every run trained for the study's full step budget. A grid "
    "run's seconds are its steps times a per-step cost a + b d² fitted to the study's own runs "
    "(training seconds over steps, evaluations included), so grid and search are priced alike. "
    "The grid is given the range the search found, which favours the grid; the papers' earlier "
    "version used about a thousand runs per curve."
)

# How a baseline / study ratio of 80% points is marked when the study measures another op (a
# size ratio: how much larger a model the baseline's op needs, not a reduction by a mixture).
OTHER_OP = "another op"
SIZE_RATIO_WORDS = (
    "For a study of another op on the baseline's testbed and modulus the same ratio is shown "
    f"marked '{OTHER_OP}': how many times larger a model the baseline's op needs, not a reduction."
)


def number(value, digits: int = 0) -> str:
    if value is None:
        return "-"
    return f"{value:,.{digits}f}"


def interval(pair, digits: int = 0) -> str:
    if not pair:
        return "-"
    lo, hi = pair
    return f"{number(lo, digits)} - {number(hi, digits)}"


def duration(seconds) -> str:
    if seconds is None:
        return "-"
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def cyclic_words(summary: dict) -> str:
    """An analysis summary's cyclic score as one cell: ``0.98 (k = 1; 1.75x null)``."""
    if summary.get("cyclic") is None:
        return "-"
    return (f"{summary['cyclic']:.2f} (k = {summary['cyclic_frequency']}; "
            f"{summary['cyclic_vs_p95']:.2f}x null)")  # fmt: skip


def spread_words(spread: dict | None) -> str:
    """A survey's median and range of a score as one cell: ``0.75 (0.36 - 0.98)``."""
    if spread is None:
        return "-"
    return f"{spread['median']:.2f} ({spread['min']:.2f} - {spread['max']:.2f})"


def factor(r: dict | None) -> tuple[str, str, str]:
    """(factor, 90% interval, P(study smaller)) cells."""
    if r is None:
        return "-", "-", "-"
    lo, hi = r["interval"]
    return f"{r['factor']:.2f}x", f"{lo:.2f} - {hi:.2f}", f"{r['p_above_1']:.3f}"


def terminal_cells(row: dict, baseline: str | None) -> list[str]:
    """A study's cells in the terminal summary: 80% point, interval, d and, with a baseline, the
    reduction factor (90%)."""
    if row["status"] == "ok":
        cells = [number(row["params_p80"]), interval(row["interval_params"]),
                 number(row["d_p80"], 1)]  # fmt: skip
    else:
        cells = [row["status"].replace("_", " "), "", ""]
    if baseline is None:
        return cells
    if row["name"] == baseline:
        return [*cells, "baseline"]
    if row["reduction"] is None and row.get("size_ratio") is None:
        return [*cells, "-"]
    value, span, _ = factor(row["reduction"] or row["size_ratio"])
    return [*cells, f"{value} ({span})" + (f", {OTHER_OP}" if row["reduction"] is None else "")]


def comparison_rows(results: dict) -> tuple[list[str], list[list[str]]]:
    """Header and rows of the transitions table."""
    header = ["study", "runs", "80% point (params)", "90% interval", "d at 80%",
              "90% interval (d)", "midpoint (params)", "midpoint 90%"]  # fmt: skip
    with_factors = results["baseline"] is not None
    if with_factors:
        header += ["reduction vs baseline", "90% interval", "P(smaller than baseline)"]
    header.append("status")
    rows = []
    for row in results["comparison"]:
        if row["status"] == "ok":
            cells = [
                number(row["params_p80"]),
                interval(row["interval_params"]),
                number(row["d_p80"], 1),
                interval(row["interval_d"], 1),
                number(row["midpoint_params"]),
                interval(row["midpoint_interval_params"]),
            ]
        else:
            cells = ["-"] * 6
        out = [row["label"], str(row["n_runs"]), *cells]
        if with_factors:
            if row["name"] == results["baseline"]:
                out += ["baseline", "", ""]
            elif row["reduction"] is not None:
                out += list(factor(row["reduction"]))
            elif row.get("size_ratio") is not None:
                value, span, p = factor(row["size_ratio"])
                out += [f"{value} ({OTHER_OP})", span, p]
            else:
                out += [row["reduction_note"] or "-", "", ""]
        out.append(row["status_text"])
        rows.append(out)
    return header, rows


def settings_rows(study: dict) -> list[tuple[str, str]]:
    """(setting, value) pairs that define a study."""
    st = study["settings"]
    task, train, search = st["task"], st["train"], st["search"]
    n_train = task["n_train"] if task["n_train"] is not None else 5000 * task["n"]
    level = (
        f"chance + {search['level']:g} x (asymptote - chance)"
        if search["chance_corrected"]
        else f"{search['level']:g} x asymptote (the paper's wording)"
    )
    where = "modulus" if task["testbed"] == "listops" else "degree k of S_k"
    chance = (study.get("estimate") or {}).get("chance")
    rows = [
        ("study", study["name"]),
        ("mixture", "+".join(task["ops"]).upper()),
        ("measured op", st["measured_op"].upper()),
        ("testbed", f"{task['testbed']}, {where} {task['n']}"),
        ("grammar", f"depth {task['depth']}, arity {task['arity_min']}-{task['arity_max']}, "
                    f"p_nest {task['p_nest']:g}"),
        ("data", f"{n_train:,} training sequences, {task['n_test']:,} test per op, "
                 f"hold-out {task['holdout']:g}, split seed {task['split_seed']}"),
        ("pretraining", "+".join(st["pretrain"]).upper() or "none"),
        ("training", f"at most {train['max_steps']:,} steps a run, batch {train['batch_size']}, "
                     f"lr {train['lr']:g}, weight decay {train['weight_decay']:g}"),
        ("search", f"precision {search['precision']:g}x, budget {search['budget']} runs, "
                   f"first bracket d {search['d_lo']}-{search['d_hi']} "
                   f"(limits {search['d_min']}-{search['d_max']}), base seed "
                   f"{search['base_seed']}"),
        ("transition", level),
        ("chance", "-" if chance is None else f"{chance:.3f} (majority answer or 1/n)"),
        ("threshold", f"{study.get('version') or '?'}, commit "
                      f"{str(study.get('git_commit') or '?')[:10]}"),
    ]  # fmt: skip
    return rows


def efficiency_rows(results: dict) -> tuple[list[str], list[list[str]]]:
    header = ["study", "runs (failed)", "steps", "training time", "grid runs", "grid steps",
              "grid time (predicted)", "search / grid: runs, steps, time",
              "cost per step"]  # fmt: skip
    rows = []
    for s in results["studies"]:
        e = s["efficiency"]
        g, c = e["grid"], e["cost_model"]

        def share(v):
            return "-" if v is None else f"{v:.2f}"

        cost = f"{c['a_s'] * 1e3:.1f} ms + {c['b_s'] * 1e3:.2g} ms d² ({c['source']})"
        rows.append([
            s["label"], f"{e['runs']} ({e['failed']})", number(e["steps"]),
            duration(e["train_s"]),
            f"{g['runs']} ({len(g['sizes'])} sizes d {g['sizes'][0]}-{g['sizes'][-1]} "
            f"x {g['seeds']})",
            number(g["steps"]), duration(g["train_s"]),
            f"{share(e['share_runs'])}, {share(e['share_steps'])}, {share(e['share_s'])}",
            cost,
        ])  # fmt: skip
    return header, rows
