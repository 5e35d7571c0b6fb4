"""``threshold status``: the studies of a storage with their current transition estimates."""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.table import Table

from threshold.cli.common import Storage, run_guarded, wide_console
from threshold.config import resolve_storage
from threshold.search.record import study_rows
from threshold.search.study import default_storage_missing, open_storage


def status(
    storage: Storage = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON list.")] = False,
) -> None:
    """List the studies in a storage with their current transition estimates."""

    def body():
        url = resolve_storage(storage)
        if default_storage_missing(url, named=storage is not None):
            rows = []
        else:
            rows = study_rows(open_storage(url, create=False))
        if as_json:
            typer.echo(json.dumps(rows))
            return
        if not rows:
            typer.echo(f"no studies yet in {url}: start one with `threshold find`")
            return
        table = Table(title="studies")
        table.add_column("study", no_wrap=True)
        named = any((r["answer"] or {}).get("size_name") for r in rows)  # objectives' studies
        for col in (
            "runs",
            "running",
            "80% point (params)",
            "90% interval",
            "size" if named else "d",
        ):
            table.add_column(col, justify="right")
        for r in rows:
            table.add_row(r["study"], str(r["n_complete"]), str(r["n_running"]), *_cells(r))
        wide_console(*(r["study"] for r in rows), rest=75).print(table)
        if any(r["answer"] and not r["answer"]["located"] for r in rows):
            typer.echo(
                "not located: the runs only bound the 80% point (>: no run up to that size reached "
                "the level; <=: every run from it up did), or not even that; `threshold find "
                "--json` or `threshold report` says more"
            )

    run_guarded(body)


def _cells(row: dict) -> tuple[str, str, str]:
    """80% point, interval and d of a study as its answer has them (located or bound:
    threshold.search.bounds.answer), the way ``threshold report`` writes them."""
    ans = row["answer"]
    if ans is None:
        return "-", "-", "-"
    if ans["located"]:
        interval = "-" if ans["interval"] is None else "{:,.0f} - {:,.0f}".format(*ans["interval"])
        d = f"{ans['median_d']:.1f}" if ans["median_d"] is not None else "-"
        if ans.get("size_name") and d != "-":  # an objective's: the size in its words
            d = f"{ans['size_name']} {d}"
        return f"{ans['median']:,.0f}", interval, d
    if ans["kind"] in ("lower bound", "upper bound"):
        sign = ">" if ans["kind"] == "lower bound" else "<="
        size = f"{ans['size_name']} " if ans.get("size_name") else ""
        return f"{sign} {ans['params']:,.0f}", "not located", f"{size}{sign} {ans['d']}"
    return "not located", "not located", "-"
