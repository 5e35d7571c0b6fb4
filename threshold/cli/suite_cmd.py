"""``threshold run``: a suite file's studies, transfer experiments, analyses and reports."""

from __future__ import annotations

import json
import logging
from dataclasses import replace
from pathlib import Path
from typing import Annotated

import torch
import typer
from rich.console import Console
from rich.table import Table

from threshold.cli.common import (
    CacheDir,
    Device,
    OldBatch,
    name_list,
    refuse_old_batch,
    run_guarded,
    run_words,
)
from threshold.cli.find_cmd import no_worker_words
from threshold.config import DEFAULT_STORAGE
from threshold.interrupt import exit_status
from threshold.report.text import duration, terminal_cells
from threshold.search.bounds import answer_words
from threshold.search.find import worker_devices
from threshold.search.record import storage_log_level
from threshold.suite import load_suite
from threshold.suite.plan import plan
from threshold.suite.run import make_suite_studies, run_suite


def run_suite_cmd(
    suite_file: Annotated[
        Path, typer.Argument(metavar="SUITE.toml", help="Suite file, e.g. studies/cpu.toml.")
    ],
    workers: Annotated[
        int | None,
        typer.Option(
            help="Worker processes, each running every study (one at a time: per study); 0: "
            "create the studies only, train nothing, and print the `threshold worker` command "
            "that trains them (on a cluster too) \\[default: the suite's workers]."
        ),
    ] = None,
    storage: Annotated[
        str | None,
        typer.Option(
            help="Database URL (default: the suite's storage, else $THRESHOLD_STORAGE, else "
            f"{DEFAULT_STORAGE})."
        ),
    ] = None,
    only: Annotated[
        str | None,
        typer.Option(help="Comma-separated labels: run only these studies and transfers."),
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Check the suite and print the plan; run nothing.")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
    trials_at_once: Annotated[
        int | None,
        typer.Option(
            "--trials-at-once",
            help="Trials a worker trains at once as one batched run \\[default: the suite's"
            " batch].",
        ),
    ] = None,
    one_at_a_time: Annotated[
        bool,
        typer.Option(
            "--one-at-a-time",
            help="Search the studies one after the other, each with workers of its own (default:"
            " all at once, their trials trained together in shared packs; the runs are the same).",
        ),
    ] = False,
    batch: OldBatch = None,
    device: Device = "auto",
    cache_dir: CacheDir = None,
) -> None:
    """Run a suite: every study (resuming where it stopped), then analyses and reports."""

    def body():
        suite = load_suite(suite_file)
        labels = None if only is None else list(name_list(only))
        suite.select(labels)  # an unknown label fails here, before anything is opened
        create_only = workers == 0  # the studies only, for workers started elsewhere
        execution = suite.execution.but(
            storage=storage,
            workers=workers or None,
            trials_at_once=trials_at_once,
            device=device,
            cache_dir=cache_dir,
        )
        suite = replace(suite, execution=execution)
        # refused before anything is opened: no device, more workers than the machine runs
        if not create_only:  # no worker starts here: its device may be another machine's
            worker_devices(execution)
        refuse_old_batch(batch)
        if dry_run:
            planned = plan(suite, labels)
            if as_json:
                typer.echo(json.dumps(planned))
            else:
                _print_plan(planned, suite)
            return
        if create_only:
            _make_studies(suite, labels, as_json)
            return
        torch.set_num_threads(1)  # analyses run here; several threads spin on a busy machine
        storage_log_level(logging.WARNING)  # progress is the lines below
        try:
            printer = _Printer(enabled=not as_json)
            record = run_suite(suite, labels, True, printer, shared=not one_at_a_time)
        except KeyboardInterrupt:
            typer.echo(f"interrupted: run `threshold run {suite_file}` again to resume", err=True)
            raise typer.Exit(exit_status()) from None
        if as_json:
            typer.echo(json.dumps(record))
        else:
            _print_record(record)

    run_guarded(body)


def _make_studies(suite, labels: list[str] | None, as_json: bool) -> None:
    """``--workers 0``: the suite's studies created (or found again), each said, and the one
    worker command that trains them all together."""
    storage_log_level(logging.WARNING)  # not Optuna's "A new study created": the lines below
    rows = make_suite_studies(suite, labels)
    if as_json:
        typer.echo(json.dumps({"studies": rows}))
    else:
        for row in rows:
            typer.echo(
                f"{row['label']}: study {row['study']}, {row['status']}, {row['n_runs']} runs"
            )
    studies = [row["study"] for row in rows]
    typer.echo(no_worker_words(studies, suite.execution), err=True)


class _Printer:
    """One line per event on stderr: readable in a terminal and in a log file alike."""

    def __init__(self, enabled: bool) -> None:
        self.console = Console(stderr=True, highlight=False)
        self.enabled = enabled

    def say(self, text: str) -> None:
        if self.enabled:
            self.console.print(text, markup=False, soft_wrap=True)

    def __call__(self, event) -> None:
        kind, label, info = event.kind, event.label, event.info
        if kind in ("study_start", "study_skip"):
            head = f"[{info['index']}/{info['total']}] {label} ({info['study']})"
            if kind == "study_skip":
                self.say(
                    f"{head}: done ({info['reason']}) after {info['n_runs']} runs: "
                    f"{answer_words(info['answer'])}"
                )
            else:
                shared = " shared with the suite's other studies" if info.get("shared") else ""
                self.say(
                    f"{head}: {info['n_runs']} runs so far; {info['workers']} worker(s){shared}"
                )
        elif kind == "trial":
            row = info["trial"]
            self.say(
                f"  {label} trial {row['number']}: {run_words(row)}; {answer_words(info['answer'])}"
            )
        elif kind == "study_end":
            self.say(
                f"  {label}: {'done (' + info['reason'] + ')' if info['reason'] else 'stopped'}"
                f" after {info['n_runs']} runs in {duration(info['wall_s'])}: "
                f"{answer_words(info['answer'])}"
            )
        elif kind == "transfer_end":
            self.say(
                f"  transfer {label}: pretrained {info['transfer_mean']:.3f} vs from scratch "
                f"{info['scratch_mean']:.3f} ({info['file']})"
            )
        elif kind == "survey":
            done = "scored" if info["ran"] else "scored before"
            self.say(f"survey {label}: {info['runs']} runs {done} ({info['file']})")
        elif kind in _EVENT_WORDS:
            self.say(_EVENT_WORDS[kind].format(label=label, **info))


# The line of each event that is its fields written out (the others are written above).
_EVENT_WORDS = {
    "transfer_skip": "transfer {label}: done ({file})",
    "transfer_start": "transfer {label}: d = {d}, seeds {seeds}",
    "transfer_phase": "  transfer {label}: seed {seed} {phase}",
    "analysis_start": "analysis {label} trial {trial} ({how})",
    "analysis_skip": "analysis {label} trial {trial}: done",
    "analysis_failed": "analysis {label} ({how}): not done: {error}",
    "survey_failed": "survey {label}: not done: {error}",
    "report": "report {label}: {folder}/index.html",
}


def _print_plan(planned: dict, suite) -> None:
    console = Console()
    where = "" if planned["storage_exists"] else " (does not exist yet)"
    console.print(
        f"suite {planned['name']} ({planned['suite']}): storage {planned['storage']}{where}, "
        f"{suite.execution.workers} worker(s) per study",
        markup=False,
    )
    table = Table(title="studies, in the order they run")
    table.add_column("label")
    table.add_column("study", overflow="fold")
    table.add_column("status")
    table.add_column("runs", justify="right")
    for s in planned["studies"]:
        table.add_row(s["label"], s["study"], s["status"], str(s["n_runs"]))
    console.print(table)
    for t in planned["transfers"]:
        console.print(
            f"transfer {t['label']}: {'done' if t['done'] else 'to run'} ({t['file']})",
            markup=False,
        )
    for a in planned["analyses"]:
        how = a["pick"] if a["d"] is None else f"d = {a['d']}"
        console.print(f"analysis {a['study']} ({how})", markup=False)
    for c in planned["comparisons"]:
        console.print(
            f"comparison {' vs '.join(c['studies'])} (matched by {c['match']})", markup=False
        )
    for v in planned["surveys"]:
        console.print(f"survey {v['study']} (accuracy >= {v['min_accuracy']:g})", markup=False)
    for r in planned["reports"]:
        base = f", baseline {r['baseline']}" if r["baseline"] else ""
        console.print(
            f"report {r['name']}: {r['folder']} ({len(r['studies'])} studies{base})", markup=False
        )


def _print_record(record: dict) -> None:
    console = Console()
    for r in record["reports"]:
        if r["status"] != "written":
            console.print(f"report {r['name']}: {r['status']}", markup=False)
            continue
        title = f"report {r['name']}" + (
            f" (baseline {r['baseline_label']})" if r["baseline"] else ""
        )
        table = Table(title=title)
        for column in ("study", "runs", "80% point", "90% interval", "d"):
            table.add_column(column, justify="left" if column == "study" else "right")
        if r["baseline"] is not None:
            table.add_column("reduction (90%)", justify="right")
        for row in r["comparison"]:
            cells = terminal_cells(row, r["baseline"])
            table.add_row(row["suite_label"] or row["label"], str(row["n_runs"]), *cells)
        console.print(table)
        console.print(f"{r['folder']}/index.html", markup=False)
    failed = [a for a in record["analyses"] if a["status"] != "done"]
    for a in failed:
        console.print(
            f"analysis of {', '.join(a['studies'])} ({a['how']}) not done: {a['error']}",
            markup=False,
        )
    for v in record.get("surveys", []):
        if v["status"] != "done":
            console.print(f"survey of {v['study']} not done: {v['error']}", markup=False)
    console.print(
        f"suite record: {Path(record['reports'][0]['folder']).parent / 'suite.json'}", markup=False
    )
