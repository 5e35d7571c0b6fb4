"""The life of a study's trials beside the training: what a worker does next (run, wait or
stop; stale trials of dead workers failed and retried first), the heartbeats of the trials it
runs, an interrupted trial put back to run again, and the study's estimate refreshed after each
run. Shared by the worker that trains (:mod:`threshold.search.worker`) and the one that calls
a user's objective (:mod:`threshold.search.objective_run`); nothing here trains.
"""

from __future__ import annotations

import logging
import threading

import optuna
from optuna.trial import TrialState

from threshold.errors import ThresholdError
from threshold.interrupt import raise_if_interrupted
from threshold.search import record
from threshold.search.fit import transition_estimate
from threshold.search.notes import NoteRender, write_note
from threshold.search.policy import decide
from threshold.search.sampler import CANCEL, PARAM, TransitionSampler, split_trials
from threshold.search.study import fail_stale

__all__ = [
    "Cancelled",
    "Heartbeats",
    "decided_size",
    "enqueue_again",
    "finished",
    "next_step",
    "quiet_storage_log",
    "refresh_estimate",
]

log = logging.getLogger(__name__)


def quiet_storage_log() -> None:
    """Optuna's log at warnings only (a worker process: its trials are the study's record)."""
    optuna.logging.set_verbosity(logging.WARNING)


class Cancelled(ThresholdError):
    """The policy decided to stop after this trial began (another worker finished the study)."""


def refresh_estimate(
    study: optuna.Study, sampler: TransitionSampler, notes: NoteRender | None = None
) -> dict | None:
    """Fit the transition to the completed trials and store it on the study (and its
    dashboard note, worded by ``notes``, when given)."""
    completed, _ = split_trials(study.get_trials(deepcopy=False))
    if not completed:
        return None
    estimate = transition_estimate(sampler.policy, completed)
    record.write_estimate(study, estimate, sampler.policy.chance)
    if notes is not None:
        write_note(study, sampler.settings, sampler.policy, estimate, notes)
    return estimate


def decided_size(trial: optuna.Trial, sampler: TransitionSampler) -> int:
    """The size the sampler chose for ``trial`` (or a retry fixed); :class:`Cancelled` when
    the policy stopped the study after the trial was made."""
    d = trial.suggest_int(PARAM, sampler.distribution.low, sampler.distribution.high)
    cancel = trial.storage.get_trial_system_attrs(trial._trial_id).get(CANCEL)
    if cancel is not None:
        raise Cancelled(cancel)
    return d


def next_step(study: optuna.Study, sampler: TransitionSampler, url: str, grid: bool = False) -> str:
    """``run`` another trial, ``wait`` for running ones, or ``stop``: stale trials of dead
    workers are failed (and retried) first (:func:`~threshold.search.study.fail_stale`, under
    the storage at ``url``'s lock); a waiting (retried or enqueued) trial always runs. A
    ``grid`` runs its queue only: with nothing waiting it waits for running trials (one may
    fail and come back), then stops."""
    raise_if_interrupted()
    fail_stale(study, url)
    trials = study.get_trials(deepcopy=False)
    if any(t.state == TrialState.WAITING for t in trials):
        return "run"
    if grid:
        return "wait" if any(t.state == TrialState.RUNNING for t in trials) else "stop"
    completed, pending = split_trials(trials)
    decision = decide(sampler.policy, completed, pending)
    if not decision.stop:
        return "run"
    if decision.reason == "budget" and any(t.state == TrialState.RUNNING for t in trials):
        return "wait"
    log.info("study %s: stop (%s)", study.study_name, decision.reason)
    return "stop"


def finished(study: optuna.Study) -> set[int]:
    """The numbers of the study's trials that are told (complete, failed or pruned)."""
    done = (TrialState.COMPLETE, TrialState.FAIL, TrialState.PRUNED)
    return {t.number for t in study.get_trials(deepcopy=False, states=done)}


def enqueue_again(study: optuna.Study, trial: optuna.Trial) -> None:
    """A waiting copy of interrupted ``trial`` (its size, seed, attributes and the accuracies it
    reported so far, so the dashboard's curve has no gap), which the next worker runs first and
    continues from the trial's saved state. Unlike the retry of a stale trial, an interruption
    is no fault, so it does not count against that retry's limit."""
    frozen = study._storage.get_trial(trial._trial_id)
    study.add_trial(
        optuna.create_trial(
            state=TrialState.WAITING,
            params=frozen.params,
            distributions=frozen.distributions,
            user_attrs=frozen.user_attrs,
            system_attrs=frozen.system_attrs | {"interrupted_trial": frozen.number},
            intermediate_values=frozen.intermediate_values,
        )
    )


class Heartbeats:
    """Heartbeats of a batch's running trials from a thread (``study.optimize`` has its own for
    one trial; ask-and-tell has none), so a killed batch worker's trials go stale and retry."""

    def __init__(self, study: optuna.Study, interval_s: float) -> None:
        self.storage, self.interval_s = study._storage, interval_s
        self.enabled = self.storage.get_heartbeat_interval() is not None  # RDB storage: yes
        self.ids: set[int] = set()
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._beat, daemon=True)

    def _beat(self) -> None:
        while True:
            with self.lock:
                ids = list(self.ids)
            for trial_id in ids:
                self.storage.record_heartbeat(trial_id)
            if self.stop.wait(self.interval_s):
                return

    def add(self, trial) -> None:
        if self.enabled:
            self.storage.record_heartbeat(trial._trial_id)
        with self.lock:
            self.ids.add(trial._trial_id)

    def forget(self, trial) -> None:
        with self.lock:
            self.ids.discard(trial._trial_id)

    def __enter__(self):
        if self.enabled:
            self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        if self.thread.is_alive():
            self.thread.join()
