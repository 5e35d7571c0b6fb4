"""Running an objective's study: a worker that calls ``objective(size, seed)`` trial by trial,
and ask and tell for runs launched elsewhere.

:func:`run_objective_worker` is :func:`threshold.search.worker.run_worker` for an objective:
the same sampler, the same next step (stale trials of killed workers failed and retried with
their size and seed), heartbeats, an interrupted trial put back to run again, and the estimate
refreshed after each run; it trains nothing itself. Worker processes
(:func:`threshold.search.find.start_workers`) import the objective by its import path.

:func:`ask` answers the next sizes and seeds to run, each a trial left RUNNING until
:func:`tell` records its accuracy (or its failure): the pattern of Optuna's ask-and-tell
interface, with the policy's decisions and stop. A trial asked and never told counts against
the budget; tell it failed to give its slot back.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable

import optuna
from optuna.trial import TrialState

from threshold.config import Execution
from threshold.errors import ConfigError, ThresholdError
from threshold.interrupt import interrupted
from threshold.search import runs
from threshold.search.objective import ObjectiveSettings, load_objective, read_result
from threshold.search.record import read_study
from threshold.search.sampler import TransitionSampler
from threshold.search.study import ask_trial, load_study, open_storage
from threshold.search.trials import (
    Cancelled,
    Heartbeats,
    decided_size,
    enqueue_again,
    next_step,
    refresh_estimate,
)

__all__ = ["ask", "run_objective_worker", "tell"]

log = logging.getLogger(__name__)


def _open(study_name: str, storage_url: str, heartbeat_s: int = Execution.heartbeat_s):
    """The objective's study, its settings and its sampler; refused for a testbed's study."""
    storage = open_storage(storage_url, heartbeat_s, create=False, write=True)
    study, settings = load_study(study_name, storage)
    if not isinstance(settings, ObjectiveSettings):
        raise ConfigError(
            f"study {study_name!r} trains a testbed, not an objective: use threshold find or "
            "threshold worker for it"
        )
    sampler = TransitionSampler(settings, settings.chance)
    study.sampler = sampler
    return study, settings, sampler


def _begin(study: optuna.Study, trial: optuna.Trial, settings, sampler) -> dict:
    """The size and seed of ``trial`` (decided by the sampler, or fixed by a retry), its
    parameter count written on it: what the run needs to know."""
    size = decided_size(trial, sampler)
    seed = runs.read_seed(trial)
    if seed is None:  # enqueued by hand: a seed no earlier run at this size used
        earlier = [
            t
            for t in study.get_trials(deepcopy=False)
            if t.number < trial.number and t.params.get(runs.D_MODEL) == size
        ]
        seed = sampler.policy.run_seed(settings.seed_key, size, len(earlier))
        runs.write_seed(trial, seed)
    params = dict(zip(settings.sizes, settings.params, strict=True))[size]
    trial.set_user_attr(runs.PARAMS_TOTAL, params)
    return {"trial": trial.number, "size": size, "seed": seed, "params": params}


def _record(study: optuna.Study, trial: optuna.Trial | int, value) -> float:
    """Tell the trial its objective's answer (an accuracy, or a dict with it): its other
    metrics are written on it first."""
    accuracy, metrics = read_result(value)
    trial_id = trial._trial_id if isinstance(trial, optuna.Trial) else trial
    if metrics:
        study._storage.set_trial_user_attr(
            trial_id, runs.METRICS, json.dumps(metrics, sort_keys=True)
        )
    return accuracy


def run_objective_worker(
    study_name: str,
    storage_url: str,
    objective: Callable | None = None,
    heartbeat_s: int = Execution.heartbeat_s,
    max_trials: int | None = None,
) -> int:
    """Run trials of the objective's study until its policy stops; how many this worker ran.

    ``objective`` None: the study's own, imported by its path. A run that raises fails its
    trial and ends the worker with the error; an interrupt (Ctrl-C, SIGTERM) fails it and puts
    it back to run again, with its size and seed, when the search resumes."""
    study, settings, sampler = _open(study_name, storage_url, heartbeat_s)
    fn = objective if objective is not None else load_objective(settings.objective)
    ran = 0
    while max_trials is None or ran < max_trials:
        step = next_step(study, sampler, storage_url)
        if step == "wait":  # the budget counts running trials: wait for them (or their retry)
            time.sleep(min(5, heartbeat_s))
            continue
        if step == "stop":
            break
        with Heartbeats(study, heartbeat_s) as beats:
            trial = ask_trial(study, storage_url)  # beats: the worker's Heartbeats
            beats.add(trial)
            try:
                run = _begin(study, trial, settings, sampler)
                t0 = time.perf_counter()
                value = _record(study, trial, fn(run["size"], run["seed"]))
                trial.set_user_attr(runs.TRAIN_S, round(time.perf_counter() - t0, 3))
            except Cancelled as e:
                log.info("trial %d cancelled: %s", trial.number, e)
                study.tell(trial, state=TrialState.FAIL)
                break
            except BaseException as e:
                study.tell(trial, state=TrialState.FAIL)
                if interrupted(e):
                    enqueue_again(study, trial)
                    if not isinstance(e, KeyboardInterrupt):
                        raise KeyboardInterrupt from e
                raise
            study.tell(trial, value)
            beats.forget(trial)
        log.info(
            "trial %d: %s %d accuracy %.3f", trial.number, settings.size_name, run["size"], value
        )
        refresh_estimate(study, sampler)
        ran += 1
    refresh_estimate(study, sampler)
    return ran


def ask(study_name: str, storage_url: str, n: int = 1) -> dict:
    """The next ``n`` runs of the objective's study, each ``{"trial", "size", "seed",
    "params"}``, left RUNNING until :func:`tell`; fewer (or none) where the policy stops or the
    budget is held by runs not yet told: then ``stop`` says why (else None)."""
    if n < 1:
        raise ConfigError(f"n {n} is not allowed: ask for 1 run or more")
    study, settings, sampler = _open(study_name, storage_url)
    asked, stop = [], None
    while len(asked) < n:
        step = next_step(study, sampler, storage_url)
        if step != "run":
            stop = "budget held by runs not yet told" if step == "wait" else _stop_reason(study)
            break
        trial = ask_trial(study, storage_url)  # beats none: tell it failed to free it
        try:
            asked.append(_begin(study, trial, settings, sampler))
        except Cancelled as e:
            study.tell(trial, state=TrialState.FAIL)
            stop = str(e)
            break
    return {"study": study_name, "runs": asked, "stop": stop}


def _stop_reason(study: optuna.Study) -> str:
    return read_study(study._storage, study.study_name).stop.text


def tell(
    study_name: str,
    storage_url: str,
    trial: int,
    accuracy: float | dict | None = None,
    failed: bool = False,
) -> dict:
    """Record the result of trial ``trial`` (asked by :func:`ask`): its accuracy, or a dict
    with ``accuracy`` and other metrics; ``failed`` True: the run failed (its slot is free
    again). Returns the study's estimate and answer after it, and its status."""
    study, _, sampler = _open(study_name, storage_url)
    frozen = _running(study, trial)
    if failed:
        study.tell(trial, state=TrialState.FAIL)
    else:
        if accuracy is None:
            raise ConfigError("tell needs the run's accuracy (or failed=True, --failed)")
        study.tell(trial, _record(study, frozen._trial_id, accuracy))
    refresh_estimate(study, sampler)
    view = read_study(study._storage, study_name)
    estimate = view.estimate.to_dict() if view.estimate is not None else None
    return {
        "study": study_name,
        "estimate": estimate,
        "answer": view.answer,
        "status": view.stop.text,
    }


def _running(study: optuna.Study, number: int):
    """The trial ``number`` of the study, refused unless it is running (asked, not told)."""
    trials = study.get_trials(deepcopy=False)
    found = next((t for t in trials if t.number == number), None)
    if found is None:
        raise ThresholdError(
            f"trial {number} is not in study {study.study_name!r} (trials 0..{len(trials) - 1})"
        )
    if found.state != TrialState.RUNNING:
        raise ThresholdError(
            f"trial {number} of {study.study_name!r} is {found.state.name}, not running: "
            "tell each asked trial once"
        )
    return found
