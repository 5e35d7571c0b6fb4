"""A worker: runs trials of one study until the policy says stop.

It asks for up to K trials at once (``batch``; K = 1 is no special case) and trains them with one
call of the engine, telling each as it ends (:func:`threshold.search.batch.run_batch`: heartbeats,
retries, saved training states and interrupted trials enqueued again are the batch's). The
studies of a suite share one worker and its packs in :mod:`threshold.search.shared`.
"""

from __future__ import annotations

import time

from threshold.config import Execution
from threshold.search.batch import join_study, run_batch
from threshold.search.holds import HOLD_AFTER_ENV, HOLD_AT_ENV, HOLD_ENV
from threshold.search.notes import NoteRender
from threshold.search.study import artifact_store, open_storage
from threshold.search.trials import Cancelled, quiet_storage_log, refresh_estimate
from threshold.train.device import resolve_device

__all__ = [
    "HOLD_AFTER_ENV",
    "HOLD_AT_ENV",
    "HOLD_ENV",
    "Cancelled",
    "quiet_storage_log",
    "refresh_estimate",
    "run_worker",
]


def run_worker(
    study_name: str,
    execution: Execution | None = None,
    max_trials: int | None = None,
    notes: NoteRender | None = None,
) -> int:
    """Run trials of ``study_name`` until the policy stops; returns how many this worker ran.

    The device is resolved here, on the machine the worker runs on (``auto``: its GPU if any).
    The worker takes up to ``execution.trials_on(device)`` trials at once and trains them with one
    call of the engine, telling each result as its run ends. ``notes`` words the study's
    dashboard note, rewritten after each finished run (none: no note). ``execution`` None: the
    defaults of :class:`Execution`.
    """
    execution = execution or Execution()
    device = resolve_device(execution.device)
    storage = open_storage(execution.storage_url, execution.heartbeat_s, create=False, write=True)
    joined = join_study(study_name, storage, execution, notes)
    store = artifact_store(execution.storage_url)
    ran = 0
    while max_trials is None or ran < max_trials:
        step = joined.next_step()
        if step == "wait":  # the budget counts running trials: wait for them (or their retry)
            time.sleep(min(5, execution.heartbeat_s))
            continue
        if step == "stop":
            break
        room = execution.trials_on(device.type)
        if max_trials is not None:
            room = min(room, max_trials - ran)
        batch = run_batch([joined], room, store, execution, device)
        ran += batch.ran[study_name]
        if batch.cancelled and not joined.grid:  # a grid's cancelled trial found its queue taken
            break
    refresh_estimate(joined.study, joined.sampler, notes)
    return ran
