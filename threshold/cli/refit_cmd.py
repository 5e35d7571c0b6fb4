"""The ``refit`` command: existing studies re-read with the current posterior, nothing trained."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from threshold.cli.common import Storage, run_guarded, wide_console
from threshold.config import resolve_storage
from threshold.report.results import read_results
from threshold.search.refit import refit_results, refit_storage


def refit(
    storage: Storage = None,
    results: Annotated[
        list[Path] | None,
        typer.Option(help="A report's results.json instead of a storage (repeat for several)."),
    ] = None,
    chance_corrected: Annotated[
        bool | None,
        typer.Option(
            "--chance-corrected/--paper-level",
            help="Read the 80% point as chance + 0.8 (A - chance), or as 0.8 A (the paper's"
            " wording) \\[default: each study's stored setting].",
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON list.")] = False,
) -> None:
    """Refit every study's runs with the current posterior: old and new 80% point and asymptote,
    and how far its sizes stray from a smooth curve."""

    def body():
        if results:
            read = [(path, read_results(path)) for path in results]  # each checked, one line
            rows = [row for path, r in read for row in refit_results(path, chance_corrected, r)]
        else:
            rows = refit_storage(resolve_storage(storage), chance_corrected)
        if as_json:
            typer.echo(json.dumps(rows))
            return
        _print_rows(rows)

    run_guarded(body)


def _print_rows(rows: list[dict]) -> None:
    table = Table(title="refit: stored estimate -> current posterior (no retraining)")
    table.add_column("study", no_wrap=True)
    cols = (
        "runs",
        "best run",
        "80% point, d",
        "80% point, params",
        "90% interval",
        "asymptote",
        "P(largest size offset)",
    )
    for col in cols:
        table.add_column(col, justify="right")
    for r in rows:
        old, new = r["old"] or {}, r["new"]
        lo, hi = new["interval_params"]
        flag = " (flagged)" if new.get("flagged") else ""
        stray = new.get("stray_mass")
        table.add_row(
            r["label"] or r["study"],
            str(r["n_runs"]),
            f"{r['best_run']:.3f}",
            _pair(old, new, "d_p80", ".1f"),
            _pair(old, new, "params_p80", ",.0f"),
            f"{lo:,.0f} - {hi:,.0f}",
            _pair(old, new, "asymptote", ".3f") + flag,
            "-" if stray is None else f"{stray:.2f}" + (" (strays)" if new["strays"] else ""),
        )
    wide_console(*(r["label"] or r["study"] for r in rows), rest=150).print(table)


def _pair(old: dict, new: dict, key: str, fmt: str) -> str:
    before = format(old[key], fmt) if old.get(key) is not None else "-"
    return f"{before} -> {format(new[key], fmt)}"
