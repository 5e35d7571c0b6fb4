"""Searching many studies with one set of workers: :func:`run_searches`, the loop behind
``threshold run``'s studies.

Each study is made (or found again) as :func:`~threshold.search.find.run_search` makes it; then
``execution.workers`` processes each run :func:`threshold.search.shared.run_shared_worker` over
all of them (the runnable trials of every study trained together, each study deciding its own
sizes), followed until they end and stopped on an interrupt, leaving none behind. No torch here,
as in :mod:`threshold.search.find`.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from threshold.config import Execution
from threshold.errors import ThresholdError
from threshold.search.find import (
    Follower,
    Interrupted,
    SearchOutcome,
    follow_workers,
    prepare_study,
    start_workers,
    worker_devices,
)
from threshold.search.spec import StudySettings

__all__ = ["run_searches"]


def run_searches(
    studies: list[tuple[StudySettings, str | None]],
    execution: Execution | None = None,
    on_run: Callable[[str, dict, dict], None] | None = None,
    poll_s: float = 2.0,
) -> list[SearchOutcome]:
    """Run (or resume) the studies, each of (settings, name), with shared workers until every
    one's policy stops; their outcomes in the same order.

    ``on_run(study, row, snapshot)`` sees each run that ends while the search runs, once, with
    its study as it was then (:func:`~threshold.search.find.snapshot`). Bad settings are refused
    before anything is written; an interrupt stops the workers (their running trials are marked
    failed, and enqueued again) and raises :class:`~threshold.search.find.Interrupted` naming the
    first study. ``execution`` None: the defaults of :class:`Execution`.
    """
    execution = execution or Execution()
    worker_devices(execution)  # refused here, before any study is written
    t0 = time.perf_counter()
    made = [prepare_study(settings, execution, name) for settings, name in studies]
    names, url = [name for name, _ in made], execution.storage_url
    try:
        procs, follows, finals = follow_workers(
            lambda: start_workers(names[0], execution, studies=names),
            lambda db: [Follower(db, name, None, _told(on_run, name)) for name in names],
            url,
            poll_s,
        )
    except KeyboardInterrupt:
        raise Interrupted(names[0]) from None
    failed = [p.returncode for p in procs if p.returncode != 0]
    if failed:
        raise ThresholdError(
            f"studies {', '.join(names)}: {len(failed)} shared worker(s) failed (exit "
            f"{failed[0]}); see their output above, then run again to resume them"
        )
    wall = round(time.perf_counter() - t0, 1)
    return [
        SearchOutcome(name, url, f["estimate"], f["n_trials"], wall, follow.completed, f["answer"])
        for name, f, follow in zip(names, finals, follows, strict=True)
    ]


def _told(on_run, name: str):
    return None if on_run is None else (lambda row, snap: on_run(name, row, snap))
