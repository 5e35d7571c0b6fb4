"""The ``complexity`` command: compressed size of a minimal program solving a task mixture."""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from threshold.analysis.complexity import complexity as measure
from threshold.cli.common import run_guarded, takes
from threshold.options import TASK, only
from threshold.tasks import TaskConfig


@takes(task=only(TASK, "tasks", "testbed", "mod"))
def complexity(
    task: dict,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Kolmogorov-complexity proxy of one mixture: compressed bytes of its program, per op too."""

    def body():
        cfg = TaskConfig.from_options(**task)  # checked: ops of the testbed, a size it takes
        report = measure(cfg.testbed, list(cfg.ops), cfg.n)
        if as_json:
            typer.echo(json.dumps(report))
        else:
            _print_complexity(report)

    run_guarded(body)


def _print_complexity(report: dict) -> None:
    size = f"mod {report['size']}" if report["testbed"] == "listops" else f"S_{report['size']}"
    table = Table(
        title=f"{','.join(report['ops'])} ({size}): compressed bytes",
        caption=f"{report['primary']} is the primary measure",
    )
    table.add_column("program")
    for name in ("zlib", "lzma", "chars"):
        table.add_column(name, justify="right")

    def row(name: str, sizes: dict, style: str | None = None) -> None:
        table.add_row(name, *(str(sizes[k]) for k in ("zlib", "lzma", "chars")), style=style)

    row("evaluator (shared)", report["evaluator"])
    for op, sizes in report["per_op"].items():
        row(f"{op}: solver alone", sizes["solver"])
        row(f"{op}: evaluator + solver", sizes["task"])
    row("mixture", report["mixture"], style="bold")
    Console().print(table)
