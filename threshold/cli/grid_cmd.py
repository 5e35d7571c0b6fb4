"""``threshold grid``: a dense grid of real runs (every size of a range x S seeds), the truth a
search is judged against; resumable, its record rewritten as each run ends.

This process follows the grid and trains nothing, as ``find`` does."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from threshold.cli.common import (
    LINE_EVERY_S,
    pace_span,
    run_guarded,
    run_words,
    takes,
    wide_console,
)
from threshold.interrupt import exit_status
from threshold.options import EXECUTION, RECIPE, SEARCH, TASK, execution_of, only
from threshold.search.bounds import answer_words
from threshold.search.find import Interrupted, worker_trials
from threshold.search.grid import (
    GRID_DIR,
    GridSpec,
    grid_recipe,
    parse_sizes,
    records_table,
    run_grid,
)
from threshold.search.record import storage_log_level
from threshold.search.spec import StudySettings

PACK = 8  # trials a grid's worker trains together unless told (a pack of the one engine)
READING = only(SEARCH, "level", "chance_corrected", "seed")


@takes(StudySettings.defaults(), task=TASK, search=READING, recipe=RECIPE, execution=EXECUTION)
def grid(
    task: dict,
    search: dict,
    recipe: dict,
    execution: dict,
    sizes: Annotated[
        str, typer.Option(help="Sizes d: 4..32 (every one), 4..32/2 (every other), or 8,12,16.")
    ] = "4..32",
    seeds: Annotated[int, typer.Option(help="Runs a size, each its own seed.")] = 5,
    out: Annotated[
        Path, typer.Option(help="Folder of the grid's record (NAME.json), read first to resume.")
    ] = GRID_DIR,
    study: Annotated[str | None, typer.Option(help="Study name \\[default: derived].")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
    listed: Annotated[
        bool,
        typer.Option("--list", help="Instead: list the grid records in --out, trains nothing."),
    ] = False,
) -> None:
    """Train every size of a range x seeds of one task: a dense grid, stored as a study."""

    def body():
        if listed:
            _list(out, as_json)
            return
        spec = GridSpec(parse_sizes(sizes), seeds)
        given = {"trials_at_once": PACK} | {k: v for k, v in execution.items() if v is not None}
        runs = execution_of(given)
        values, changed = grid_recipe(recipe)
        if changed is not None:
            typer.echo(f"grid: {changed}", err=True)
        settings = StudySettings.from_options(**task, **search, **values)
        storage_log_level(logging.WARNING)
        view = _GridView(len(spec.cells), runs.workers * worker_trials(runs))
        try:
            outcome, path, queued = run_grid(
                settings, spec, runs, study, out, view.update, view.run_ended
            )
        except Interrupted as e:
            typer.echo(f"interrupted: run the same command to resume grid {e.study!r}", err=True)
            raise typer.Exit(exit_status()) from None
        report = outcome.to_json() | {"record": str(path), "queued": queued}
        if as_json:
            typer.echo(json.dumps(report))
            return
        Console().print(
            f"grid {outcome.study}: {outcome.n_trials} of {len(spec.cells)} runs "
            f"({outcome.n_new} new, in {outcome.wall_s:.0f} s); record {path}\n"
            f"reading of all its runs: {answer_words(outcome.answer)}",
            soft_wrap=True,
            highlight=False,
        )

    run_guarded(body)


class _GridView:
    """A line a finished run, with the grid's count and its time left at this call's pace, and
    while runs train, a line every :data:`threshold.cli.common.LINE_EVERY_S` seconds."""

    def __init__(self, cells: int, slots: int) -> None:
        self.cells, self.slots = cells, slots
        self.start = self.said = time.monotonic()
        self.before: int | None = None  # runs done when this call began
        self.new = 0  # runs completed since
        self.console = Console(stderr=True)

    def _say(self, words: str) -> None:
        self.said = time.monotonic()
        self.console.print(words, highlight=False, soft_wrap=True)

    def _pace(self) -> str:
        left = self.cells - (self.before or 0) - self.new
        if self.new == 0 or left <= 0:
            return ""
        each = (time.monotonic() - self.start) / self.new  # wall seconds a run, packs and all
        return f", about {pace_span(left * each)} left"

    def update(self, snap: dict) -> None:
        if self.before is None:
            self.before = snap["n_trials"]
            if self.before:
                self._say(f"grid {snap['study']}: {self.before} of {self.cells} runs done before")
        if time.monotonic() - self.said >= LINE_EVERY_S:
            steps = [r["step"] for r in snap["trials"] if r["state"] == "RUNNING" and r["step"]]
            at = f", the running ones at step {min(steps):,} to {max(steps):,}" if steps else ""
            done = (self.before or 0) + self.new
            self._say(f"grid: {done}/{self.cells} runs{self._pace()}{at}")

    def run_ended(self, row: dict, snap: dict) -> None:
        self.new += row["state"] == "COMPLETE"
        done = (self.before or 0) + self.new
        self._say(
            f"grid: {done}/{self.cells} runs{self._pace()}; trial {row['number']}: {run_words(row)}"
        )


def _list(folder: Path, as_json: bool) -> None:
    rows = records_table(folder)
    if as_json:
        typer.echo(json.dumps(rows))
        return
    if not rows:
        typer.echo(f"no grid records in {folder}: train one with `threshold grid`")
        return
    table = Table(title=f"grid records in {folder}")
    for col in ("study", "task (measured)", "steps", "checkpoints", "sizes", "seeds", "runs",
                "CPU h", "reading of all its runs"):  # fmt: skip
        table.add_column(col, justify="left" if col in ("study", "task (measured)") else "right")
    for r in rows:
        sizes = r["sizes"]
        table.add_row(
            r["study"], f"{r['task']} ({r['measure']})", f"{r['steps']:,}",
            ",".join(f"{s:,}" for s in r["checkpoints"]),
            f"{len(sizes)}: {sizes[0]}-{sizes[-1]}", str(r["seeds"]),
            f"{r['runs']}/{r['cells']}", f"{r['cpu_h']:.2f}", answer_words(r["answer"]),
        )  # fmt: skip
    wide_console(*(r["study"] for r in rows), rest=150).print(table)
