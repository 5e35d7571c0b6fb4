"""``threshold lend``: a suite continued from the last lent GPU's state, for the time given."""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path
from typing import Annotated

import torch
import typer

from threshold.cli.common import CacheDir, Device, run_guarded
from threshold.cli.suite_cmd import _Printer
from threshold.search.bounds import answer_words
from threshold.search.find import worker_devices
from threshold.search.record import storage_log_level
from threshold.suite import load_suite
from threshold.suite.lend import RECORD_FILE, STATE_FILE, run_lend
from threshold.train.graphs import capture_words


def lend(
    suite_file: Annotated[
        Path, typer.Argument(metavar="SUITE.toml", help="Suite file, e.g. studies/gpu.toml.")
    ],
    state: Annotated[
        Path,
        typer.Option(
            help=f"Folder of the last lend's {STATE_FILE} or its parts (none: the suite starts)."
        ),
    ],
    out: Annotated[
        Path, typer.Option(help=f"Folder for the new {STATE_FILE} and this lend's {RECORD_FILE}.")
    ],
    seconds: Annotated[
        float, typer.Option(help="Train this long, then stop the suite and pack its state.")
    ],
    trials_at_once: Annotated[
        int | None,
        typer.Option(
            "--trials-at-once",
            help="Trials a worker trains at once as one batched run \\[default: the suite's].",
        ),
    ] = None,
    save_every: Annotated[
        float, typer.Option(help="Seconds between saves of each running trial's training state.")
    ] = 15.0,
    device: Device = "auto",
    cache_dir: CacheDir = None,
) -> None:
    """Continue a suite from a lend's state for the seconds given; write the new state."""

    def body():
        suite = load_suite(suite_file)
        execution = suite.execution.but(
            trials_at_once=trials_at_once, device=device, cache_dir=cache_dir
        )
        worker_devices(execution)  # refused before anything is unpacked
        torch.set_num_threads(1)
        storage_log_level(logging.WARNING)
        printer = _LendPrinter()
        record = run_lend(
            replace(suite, execution=execution),
            state,
            out,
            seconds,
            printer,
            save_every_s=save_every,
        )
        how = "cut at its time" if record["cut"] else "the suite finished"
        files = record["state_files"] + record["checkpoint_files"]
        typer.echo(
            f"lend {record['lend']}: {how} after {record['run_s']:.0f} s; state "
            f"{record['state_bytes'] / 2**20:.1f} MiB in {out}: {', '.join(files)}",
            err=True,
        )
        typer.echo(capture_words(record["capture"]), err=True)  # a lend proves its graphs

    run_guarded(body)


class _LendPrinter(_Printer):
    """The suite's lines, and a line for each study at the lend's start and end."""

    def __init__(self) -> None:
        super().__init__(enabled=True)

    def __call__(self, event) -> None:
        if event.kind == "lend_start":
            self.say(f"lend {event.info['lend']} of suite {event.label} continues:")
            for line in standing_lines(event.info["studies"]):
                self.say(f"  {line}")
        elif event.kind == "lend_end":
            self.say(f"lend {event.info['lend']} of suite {event.label} reached:")
            for line in standing_lines(event.info["reached"]):
                self.say(f"  {line}")
        else:
            super().__call__(event)


def standing_lines(studies: list[dict]) -> list[str]:
    """One line a study: its finished runs and how far each unfinished run has got."""
    lines = []
    for s in studies:
        if not s["runs"] and not s["unfinished"]:
            lines.append(f"{s['label']}: not started")
            continue
        runs = [
            f"d {u['d']} seed {u['seed']} at step {u['step']:,}"
            + (f" of {u['max_steps']:,}" if "max_steps" in u else "")
            for u in s["unfinished"]
        ]
        rest = f"; {len(runs)} to continue: " + ", ".join(runs) if runs else ""
        answer = f"; {answer_words(s['answer'])}" if s.get("answer") else ""
        lines.append(f"{s['label']}: {s['runs']} runs done{answer}{rest}")
    return lines
