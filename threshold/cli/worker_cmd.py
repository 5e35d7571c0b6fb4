"""``threshold worker``: join a study, or several trained together in shared packs, and run
their trials in this process until they are done."""

from __future__ import annotations

import logging
from typing import Annotated

import typer

from threshold.cli.common import (
    OldBatch,
    check_worker_studies,
    refuse_old_batch,
    run_guarded,
    takes,
)
from threshold.cli.objective_cmds import import_here
from threshold.options import EXECUTION, execution_of, only
from threshold.report.dashboard_note import NOTE_RENDER
from threshold.search.bounds import answer_words
from threshold.search.find import die_with_parent
from threshold.search.objective import ObjectiveSettings
from threshold.search.objective_run import run_objective_worker
from threshold.search.record import read_study, storage_log_level
from threshold.search.shared import run_shared_worker
from threshold.search.study import open_storage
from threshold.search.worker import run_worker


@takes(execution=only(EXECUTION, "storage", "heartbeat", "trials_at_once", "device", "cache_dir"))
def worker(
    execution: dict,
    study: Annotated[
        list[str],
        typer.Option(
            help="Name of the study to join. Repeat it (--study a --study b) for several: their "
            "trials train together in shared packs, each study deciding its own sizes."
        ),
    ],
    max_trials: Annotated[
        int | None,
        typer.Option(
            help="Stop after this many trials (one --study only; several run to the end)."
        ),
    ] = None,
    quiet: Annotated[bool, typer.Option(help="Log warnings only.")] = False,
    batch: OldBatch = None,
) -> None:
    """Join a study, or several trained together, and run its trials until it is done.

    The study may be this machine's or another's (a database server). Several (--study
    repeated): their trials are trained together in shared packs, each study deciding its own
    sizes."""

    def body():
        refuse_old_batch(batch)
        check_worker_studies(study, max_trials)
        die_with_parent()
        level = logging.WARNING if quiet else logging.INFO
        logging.basicConfig(level=level, format="%(asctime)s worker %(process)d %(message)s")
        storage_log_level(level)
        runs = execution_of(execution)
        # opened to write first: a storage this user may only read is refused in one line here
        storage = open_storage(runs.storage_url, runs.heartbeat_s, create=False, write=True)
        if len(study) > 1:  # a study missing, an objective's: refused there, in one line
            run_shared_worker(study, runs, notes=NOTE_RENDER)  # its packs' lines at INFO
        elif isinstance(read_study(storage, study[0]).settings, ObjectiveSettings):
            import_here()  # its objective by its path, found in this folder too
            url, beat = runs.storage_url, runs.heartbeat_s
            run_objective_worker(study[0], url, heartbeat_s=beat, max_trials=max_trials)
        else:
            run_worker(study[0], runs, max_trials, notes=NOTE_RENDER)
        for name in study:  # where each study stands now, as find ends with it
            view = read_study(runs.storage_url, name)
            done = len(view.completed)
            typer.echo(f"study {name}: {done} runs, {view.stop.text}; {answer_words(view.answer)}")

    run_guarded(body)
