"""``threshold status``: the studies of a storage with their current transition estimates."""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.table import Table

from threshold.cli.common import Storage, run_guarded, wide_console
from threshold.search.record import study_rows
from threshold.search.study import default_storage_missing, open_storage, storage_url


def status(
    storage: Storage = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON list.")] = False,
) -> None:
    """List the studies in a storage with their current transition estimates."""

    def body():
        if default_storage_missing(storage):
            rows = []
        else:
            rows = study_rows(open_storage(storage_url(storage), create=False))
        if as_json:
            typer.echo(json.dumps(rows))
            return
        if not rows:
            typer.echo(f"no studies yet in {storage_url(storage)}: start one with `threshold find`")
            return
        table = Table(title="studies")
        table.add_column("study", no_wrap=True)
        for col in ("runs", "running", "80% point (params)", "90% interval", "d"):
            table.add_column(col, justify="right")
        for r in rows:
            est = r["estimate"] or {}
            interval = est.get("interval_params")
            table.add_row(
                r["study"],
                str(r["n_complete"]),
                str(r["n_running"]),
                f"{est['params_p80']:,.0f}" if est.get("params_p80") else "-",
                f"{interval[0]:,.0f} - {interval[1]:,.0f}" if interval else "-",
                f"{est['d_p80']:.1f}" if est.get("d_p80") else "-",
            )
        wide_console(*(r["study"] for r in rows), rest=75).print(table)

    run_guarded(body)
