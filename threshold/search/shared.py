"""One device, many studies: a worker that trains the runnable trials of all of a suite's studies
in shared packs.

Each round, every study not stopped says what it does next (:func:`~threshold.search.trials.
next_step`: run, wait or stop, by its own sampler and policy from its own trials); each study that
runs is asked for up to K trials (``Execution.trials_on``, K a study, as a worker of its own would
ask), and all of them train in one call of the engine (:func:`~threshold.search.batch.run_batch`),
which packs members by width: on a GPU members of several studies share a pack. Each run that
ends is told into its own study and refreshes that study's estimate; a study that stops drops
out, and when its runs have ended it is asked again at the next round. Studies whose models do
not stack (another vocabulary or context: another testbed, modulus or depth) train in packs of
their own in the same call, side by side; only runs at other torch threads (a setting that
changes a run's arithmetic) train in calls of their own, one after the other.

A study's runs, seeds and estimates are those it gets run alone at the same K: its sizes come from
its own sampler reading its own trials only, its seeds from its own ``run_seed``, and a round asks
a study only when its earlier trials have ended, as a worker of its own does between its batches.
On the CPU every member trains in a pack of its own (the engine's rule), so each run is bit for bit
the run alone; the CPU gains one process, one start and one data load for the suite. A worker
interrupted fails its running trials and enqueues them again, as :func:`~threshold.search.worker.
run_worker` does, so the suite continues where it was cut.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from threshold.config import Execution
from threshold.errors import ConfigError
from threshold.search.batch import join_study, run_batch
from threshold.search.notes import NoteRender
from threshold.search.study import artifact_store, open_storage
from threshold.search.trials import refresh_estimate
from threshold.train.device import resolve_device

__all__ = ["SharedOutcome", "run_shared_worker"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SharedOutcome:
    """What a shared worker did: trials run by study, its rounds, and each call of the engine
    as (runs, studies they came from, its packs each as (members, studies)), round after round."""

    ran: dict[str, int]
    rounds: int
    calls: list[tuple[int, int, list[tuple[int, int]]]]

    @property
    def packs(self) -> list[tuple[int, int]]:
        """Every pack the engine trained, as (members, studies they came from)."""
        return [pack for _, _, packs in self.calls for pack in packs]


def run_shared_worker(
    study_names: list[str],
    execution: Execution | None = None,
    notes: NoteRender | None = None,
    share: bool | None = None,
) -> SharedOutcome:
    """Run the trials of every study of ``study_names`` (one storage) until each one's policy
    stops, the runnable trials of all of them trained together each round.

    ``execution`` as :func:`~threshold.search.worker.run_worker` takes it (None: the defaults);
    ``notes`` words each study's dashboard note; ``share``: whether members of other sizes share
    padded packs (the engine's default: on a GPU; True on the CPU moves each run by rounding).
    A name given twice, a study not in the storage and an objective's study are refused (each in
    one line) before anything trains."""
    twice = next((n for i, n in enumerate(study_names) if n in study_names[:i]), None)
    if twice is not None:
        raise ConfigError(f"study {twice!r} is named twice: name each study once")
    if not study_names:
        raise ConfigError("a shared worker needs a study to run: name one or more")
    execution = execution or Execution()
    device = resolve_device(execution.device)
    storage = open_storage(execution.storage_url, execution.heartbeat_s, create=False, write=True)
    joined = [join_study(name, storage, execution, notes) for name in study_names]
    store = artifact_store(execution.storage_url)
    ran, calls, rounds = dict.fromkeys(study_names, 0), [], 0
    active = list(joined)
    while active:
        steps = [of.next_step() for of in active]
        runnable = [of for of, step in zip(active, steps, strict=True) if step == "run"]
        active = [of for of, step in zip(active, steps, strict=True) if step != "stop"]
        if not runnable:  # each waits for running trials of other workers (or their retry)
            if active:
                time.sleep(min(5, execution.heartbeat_s))
            continue
        batch = run_batch(
            runnable, execution.trials_on(device.type), store, execution, device, share
        )
        rounds += 1
        for name, n in batch.ran.items():
            ran[name] += n
        calls += batch.calls
        # a cancelled trial: the study stopped meanwhile (another worker finished it); a grid's
        # only found its queue taken
        active = [of for of in active if of.grid or of.study.study_name not in batch.cancelled]
    for of in joined:
        refresh_estimate(of.study, of.sampler, notes)
    return SharedOutcome(ran, rounds, calls)
