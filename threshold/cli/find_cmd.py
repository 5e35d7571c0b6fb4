"""``threshold find``: locate a mixture's learning transition, the study shown as it runs.

This process follows the search and trains nothing: it loads no torch (its workers do, and the
devices are asked of a child process, :mod:`threshold.search.device_probe`).
"""

from __future__ import annotations

import json
import logging
import shlex
from typing import Annotated

import typer
from rich.console import Console
from rich.live import Live
from rich.table import Table

from threshold.cli.common import (
    OldBatch,
    pace_words,
    refuse_old_batch,
    run_guarded,
    run_words,
    takes,
)
from threshold.cli.objective_cmds import (
    Bracket,
    Chance,
    Objective,
    Params,
    SizeName,
    Sizes,
    objective_settings,
)
from threshold.config import Execution, fitted_words
from threshold.interrupt import exit_status
from threshold.options import EXECUTION, RECIPE, SEARCH, TASK, execution_of
from threshold.search.bounds import answer_words, near_chance_words
from threshold.search.find import Interrupted, run_search, worker_trials
from threshold.search.fit import strays
from threshold.search.record import storage_log_level
from threshold.search.spec import StudySettings
from threshold.search.study import sqlite_path


@takes(StudySettings.defaults(), task=TASK, search=SEARCH, recipe=RECIPE, execution=EXECUTION)
def find(
    task: dict,
    search: dict,
    recipe: dict,
    execution: dict,
    study: Annotated[str | None, typer.Option(help="Study name \\[default: derived].")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
    batch: OldBatch = None,
    objective: Objective = None,
    sizes: Sizes = None,
    params: Params = None,
    chance: Chance = None,
    size_name: SizeName = "size",
    bracket: Bracket = None,
) -> None:
    """Locate the learning transition of a mixture with an Optuna study."""

    def body():
        refuse_old_batch(batch)
        workers = execution["workers"]  # 0: the study only (run_search's create_only)
        runs = execution_of(execution | {"workers": workers or 1})  # checked before the study
        if objective is None:
            settings = StudySettings.from_options(**task, **search, **recipe)
            typed = {k for k, v in recipe.items() if v is not None}
            notes = [f"note: {words}" for words in fitted_words(settings.train, typed)]
        else:  # anyone's experiment, its sizes in its own words
            values = {"objective": objective, "sizes": sizes, "params": params}
            values |= {"chance": chance, "size_name": size_name, "bracket": bracket}
            defaults = StudySettings.defaults()
            given = [k for k, v in (task | recipe).items() if v is not None and v != defaults[k]]
            settings, notes = objective_settings(values, search, given, workers == 0), []
        storage_log_level(logging.WARNING)  # not Optuna's "A new study created": the lines below
        slots = runs.workers * worker_trials(runs)
        try:
            with _LiveView(not as_json, slots, runs.heartbeat_s, notes) as view:
                outcome = run_search(
                    settings, runs, study, on_update=view.update, on_run=view.run_ended,
                    create_only=workers == 0,
                )  # fmt: skip
        except Interrupted as e:
            typer.echo(f"interrupted: run the same command to resume study {e.study!r}", err=True)
            raise typer.Exit(exit_status()) from None
        view.say_notes()  # --workers 0: no look at the study said them
        _say_outcome(outcome.to_json(), as_json)
        if workers == 0:  # the study only: say how its trials get run
            typer.echo(no_worker_words([outcome.study], runs), err=True)
            if objective is not None:  # or by the user's own launcher
                where = "" if runs.storage is None else f" --storage {runs.storage}"
                typer.echo(
                    f"or `threshold ask --study {outcome.study}{where}` for the next runs and "
                    "`threshold tell` for each result, from your own launcher",
                    err=True,
                )

    run_guarded(body)


def _say_outcome(report: dict, as_json: bool) -> None:
    """The study's answer: one JSON object, or its summary and a warning near chance."""
    report["warning"] = near_chance_words(report["transition"])
    if as_json:
        typer.echo(json.dumps(report))
        return
    _print_summary(report)
    if report["warning"]:
        typer.echo(f"warning: {report['warning']}", err=True)


def no_worker_words(studies: list[str], execution: Execution) -> str:
    """How the trials of studies made with ``--workers 0`` get run: by a worker on this machine
    (one for all of them, their trials trained together), or, where the storage is a server, on
    others too."""
    where = "" if execution.storage is None else f" --storage {shlex.quote(execution.storage)}"
    named = "".join(f" --study {shlex.quote(s)}" for s in studies)
    its = "its" if len(studies) == 1 else "their"
    words = f"no worker started (--workers 0): run `threshold worker{named}{where}`"
    if sqlite_path(execution.storage_url) is None:  # a database server: many machines
        return (
            f"{words} to run {its} trials, on other machines too, or `threshold cluster slurm"
            f"{named}{where}` for a SLURM job array"
        )
    return f"{words} to run {its} trials"


class _LiveView:
    """A live table of the study's trials and its current estimate on stderr; where stderr is
    not a terminal (a log file, nohup, CI), one plain line per run as it ends instead."""

    def __init__(
        self, enabled: bool, slots: int = 1, heartbeat_s: int = 30, notes: list[str] = ()
    ) -> None:
        console = Console(stderr=True)
        self.live = Live(console=console, refresh_per_second=2, transient=False)
        self.plain = enabled and not console.is_terminal
        self.enabled = enabled and not self.plain
        self.slots = slots  # trials that train at once: workers x trials at once
        self.heartbeat_s = heartbeat_s
        self.paced = False  # the time left said once: after the first run, or of stored runs
        self.first = True  # the first look at the study: trials another process left running
        self.notes = list(notes)  # said at the first look: once the study is known to run

    def run_ended(self, row: dict, snap: dict) -> None:
        if self.plain:
            typer.echo(
                f"trial {row['number']}: {run_words(row, snap.get('size_name', 'd'))}; "
                f"{answer_words(snap['answer'])}",
                err=True,
            )
            self._pace(snap)

    def _pace(self, snap: dict) -> None:
        """The study's time left, once: from its first run, or a resumed study's stored runs."""
        pace = None if self.paced else pace_words(snap, self.slots)
        if pace is not None:
            self.paced = True
            typer.echo(f"study {snap['study']}: {pace}", err=True)

    def __enter__(self):
        if self.enabled:
            self.live.__enter__()
        return self

    def __exit__(self, *exc):
        if self.enabled:
            return self.live.__exit__(*exc)
        return None

    def say_notes(self) -> None:
        for words in self.notes:
            typer.echo(words, err=True)
        self.notes = []

    def update(self, snap: dict) -> None:
        self.say_notes()
        if self.plain and self.first:  # before this search's workers (still loading) ask any
            held = [r["number"] for r in snap["trials"] if r["state"] == "RUNNING"]
            if held:
                typer.echo(
                    f"trial{'s' if len(held) > 1 else ''} {', '.join(map(str, held))} of study "
                    f"{snap['study']} {'are' if len(held) > 1 else 'is'} marked running by a "
                    "worker that may have died: retried after 3 missed heartbeats (about "
                    f"{3 * self.heartbeat_s} s at --heartbeat {self.heartbeat_s}); other sizes "
                    "run meanwhile",
                    err=True,
                )
        self.first = False
        if self.plain:
            self._pace(snap)  # a resumed study's stored runs say it before a new one ends
        if self.enabled:
            self.live.update(_trials_table(snap, self.slots))


def _trials_table(snap: dict, slots: int = 1):
    est = snap["estimate"]
    caption = answer_words(snap.get("answer"))  # located or bound, as every view says it
    if est and est.get("params_p80") and strays(est):
        caption += "; its sizes stray from any smooth curve"
    pace = pace_words(snap, slots) if "budget" in snap else None
    if pace is not None:
        caption += f"; {pace}"
    if any(r["state"] == "RUNNING" for r in snap["trials"]):
        caption += (
            "; a running trial whose worker died is retried after 3 missed heartbeats"
            " (90 s at the default --heartbeat 30)"
        )
    table = Table(title=f"study {snap['study']}", caption=caption)
    for col in ("trial", snap.get("size_name", "d"), "params", "seed", "accuracy", "time", "state"):
        table.add_column(col, justify="right")
    for r in snap["trials"][-20:]:
        if r["accuracy"] is not None:
            acc = f"{r['accuracy']:.3f}"
        elif r["val_accuracy"] is not None:
            acc = f"({r['val_accuracy']:.2f} @ {r['step']})"
        else:
            acc = "-"
        table.add_row(
            str(r["number"]),
            str(r["d_model"] or "-"),
            f"{r['params_total']:,}" if r["params_total"] else "-",
            str(r["seed"] if r["seed"] is not None else "-"),
            acc,
            f"{r['seconds']:.0f}s" if r["seconds"] is not None else "-",
            r["state"].lower() + (f" ({r['stop_reason']})" if r["stop_reason"] else ""),
        )
    return table


def _print_summary(report: dict) -> None:
    console = Console()
    est, ans = report["transition"], report["answer"]
    if ans is None:
        console.print(
            f"study {report['study']}: {report['n_trials']} runs, no estimate yet", soft_wrap=True
        )
        return
    n, new = report["n_trials"], report["n_new"]
    if new == n:
        runs = f"{n} runs in {report['wall_s']:.0f} s"
    elif new == 0:
        runs = f"{n} runs, all from before (nothing left to run)"
    else:
        runs = f"{n} runs, {new} of them new, in {report['wall_s']:.0f} s"
    lines = [f"study {report['study']}: {runs}"]
    if ans["located"] and not ans.get("size_name"):
        lo, hi = est["interval_params"]
        lines += [
            f"80% point: {est['params_p80']:,.0f} parameters (d = {est['d_p80']:.1f}), "
            f"90% interval {lo:,.0f} - {hi:,.0f}",
            f"midpoint: {est['midpoint_params']:,.0f} parameters",
        ]
    else:  # a bound as every view says it; the posterior's median after it, as context only
        lines.append(answer_words(ans))
    console.print("\n".join(lines), soft_wrap=True)  # the study's name is copied: never broken
