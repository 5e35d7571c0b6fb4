"""``threshold report``: the studies of a storage as an HTML page, a Markdown summary and JSON."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table

from threshold.analysis import ANALYSIS_DIR
from threshold.cli.common import Storage, run_guarded
from threshold.config import resolve_storage
from threshold.errors import ConfigError
from threshold.report import collect, load_results
from threshold.report.text import terminal_cells
from threshold.report.write import check_output, write_report


class _Steps:
    """One rich progress bar per report step (reading studies, drawing figures), on stderr.

    The bars appear with the first step, so an error before it is the only line printed.
    """

    def __init__(self, enabled: bool) -> None:
        self.progress = Progress(
            TextColumn("{task.description:<16}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=Console(stderr=True),
            disable=not enabled,
            transient=False,
        )
        self.bars: dict[str, int] = {}
        self.started = False

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self.started:
            self.progress.stop()

    def __call__(self, stage: str, done: int, total: int) -> None:
        if not self.started:
            self.progress.start()
            self.started = True
        if stage not in self.bars:
            self.bars[stage] = self.progress.add_task(stage, total=total)
        self.progress.update(self.bars[stage], completed=done, total=total)


def report(
    out: Annotated[Path, typer.Option("-o", "--out", help="Report folder, e.g. reports/NAME.")],
    studies: Annotated[
        list[str] | None,
        typer.Argument(help="Studies to report (default: every study in the storage)."),
    ] = None,
    baseline: Annotated[
        list[str] | None,
        typer.Option(
            help="Study whose 80% point the others' factors divide: each study is compared with "
            "the baseline of its testbed and modulus (repeatable)."
        ),
    ] = None,
    transfer: Annotated[
        list[Path] | None,
        typer.Option("--transfer", help="Output of `threshold transfer --json` (repeatable)."),
    ] = None,
    storage: Storage = None,
    analysis_dir: Annotated[
        Path, typer.Option(help="Where `threshold analyze` wrote its figures.")
    ] = ANALYSIS_DIR,
    from_results: Annotated[
        Path | None,
        typer.Option(
            "--from",
            help="Render again from a report's results.json, no storage needed (its studies, "
            "transfer results and baselines, plus any --baseline).",
        ),
    ] = None,
    force: Annotated[
        bool, typer.Option("--force", help="Write over an existing report folder.")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Transitions, curves, reduction factors, analyses, transfer and search cost as a report."""

    def body():
        if from_results is not None and (studies or transfer or storage):
            raise ConfigError(
                "--from renders the studies and transfer results of its results.json: leave out "
                "STUDY, --transfer and --storage"
            )
        check_output(out, force)  # before the slow part
        with _Steps(enabled=not as_json) as steps:
            if from_results is not None:
                collected = load_results(from_results, baseline or ())
                source = str(from_results)
            else:
                url = resolve_storage(storage)
                collected = collect(
                    url, studies or (), baseline or (), transfer or (), analysis_dir, steps
                )
                source = "storage"
            results = write_report(collected, out, force, steps, rendered_from=source)
        if as_json:
            summary = {
                "out": str(out),
                "index": str(out / "index.html"),
                "baselines": results["baselines"],
                "comparison": results["comparison"],
                "files": results["files"],
            }
            typer.echo(json.dumps(summary))
        else:
            _print(results, out)

    run_guarded(body)


def _print(results: dict, out: Path) -> None:
    table = Table(title="learning transitions (posterior median, 90% interval)")
    for column in ("study", "runs", "80% point", "90% interval", "d"):
        table.add_column(column, justify="left" if column == "study" else "right")
    with_factor = bool(results["baselines"])
    if with_factor:
        table.add_column("factor vs its baseline (90%)", justify="right")
    for row in results["comparison"]:
        cells = terminal_cells(row, with_factor)
        table.add_row(row["label"], str(row["n_runs"]), *cells)
    console = Console()
    console.print(table)
    console.print(f"report: {out / 'index.html'} (also summary.md, results.json)")
