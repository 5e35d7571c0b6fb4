"""A study's runs as stored on its trials: the trial attributes' keys, a trial read into a
:class:`RunRecord`, and what the sampler writes on a trial (its decision, or that the policy
cancelled it). Nothing here knows a task or a training run, so the sampler that serves any
objective (:mod:`threshold.search.sampler`) builds on this alone; the study's record
(:mod:`threshold.search.record`) re-exports it beside the study-level reading.
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import optuna
from optuna.storages import BaseStorage
from optuna.trial import FrozenTrial

# The system attribute a worker's sampler writes on a trial as it takes it, ``host:pid:number``
# (threshold.search.study reads it to retry a killed worker's trial at once): the trial's number
# too, so a retry's copy of its failed trial's attributes names no live worker.
TAKEN_BY = "taken_by"


def taken_by(number: int) -> str:
    """:data:`TAKEN_BY`'s value for trial ``number`` taken by this process."""
    return f"{socket.gethostname()}:{os.getpid()}:{number}"


__all__ = [
    "RunRecord",
    "json_attr",
    "read_run",
    "read_seed",
    "split_runs",
    "write_cancel",
    "write_decision",
    "write_seed",
]

# Trial user attributes (written by the sampler, then the worker).
D_MODEL = "d_model"  # the size: also the Optuna parameter, kept as an attribute for retries
REPLICATE, SEED, DECISION, CANCELLED = "replicate", "seed", "decision", "cancelled"
WORKER, PARAMS_TOTAL, PARAMS_NON_EMBEDDING = "worker", "params_total", "params_non_embedding"
PRETRAIN_ACCURACY, PRETRAIN_STEPS = "pretrain_accuracy", "pretrain_steps"
CHECKPOINT, CHECKPOINT_SHA256 = "checkpoint_artifact", "checkpoint_sha256"
ACCURACY, STRICT_ACCURACY = "accuracy", "strict_accuracy"
SAMPLED_ACCURACY = "sampled_accuracy"  # per op, decoded at temperature 1
BUDGET = "budget"  # the measured op's accuracy at the recipe's checkpoints (TrainResult.budget)
STEPS, STOP_REASON, TRAIN_S = "steps", "stop_reason", "train_s"
CPU_S = "cpu_s"  # the run's CPU seconds (TrainResult.cpu_s); absent where not known
METRICS = "metrics"  # an objective's other metrics (threshold.search.objective_run), as JSON
_PENDING = ("RUNNING", "WAITING")


def json_attr(raw: Any) -> Any:
    """A JSON attribute's value; None when missing or unreadable (a hand-edited study)."""
    if raw is None or not isinstance(raw, str):
        return raw
    try:
        return json.loads(raw)
    except ValueError:
        return None


def _int(raw: Any) -> int | None:
    return None if raw is None else int(raw)


@dataclass(frozen=True)
class RunRecord:
    """One trial of a study: its size, seed, counts and results (None where not recorded)."""

    number: int
    state: str  # COMPLETE, RUNNING, WAITING, FAIL, PRUNED
    d_model: int | None  # None until the sampler decided
    value: float | None  # the measured op's test accuracy (COMPLETE trials)
    params_total: int | None = None
    params_non_embedding: int | None = None
    seed: int | None = None
    replicate: int | None = None
    accuracy: dict = field(default_factory=dict)  # greedy test accuracy per op
    strict_accuracy: dict = field(default_factory=dict)  # whole chain of thought right, per op
    sampled_accuracy: dict = field(default_factory=dict)  # sampled at temperature 1, per op
    budget: tuple = ()  # {"step", "tokens", "accuracy", "sampled_accuracy", "reached"} dicts
    steps: int | None = None
    stop_reason: str | None = None  # why training ended: max_steps, learned, stuck, time_limit
    train_s: float | None = None  # wall seconds of the run (TrainResult.wall_s)
    cpu_s: float | None = None  # its CPU seconds; None where not recorded
    worker: str | None = None  # host:pid
    checkpoint: str | None = None  # the artifact id of its checkpoint
    checkpoint_sha256: str | None = None
    decision: dict | None = None  # the policy's reasons for this size
    cancelled: str | None = None  # the policy stopped the study after this trial began
    pretrain_accuracy: dict | None = None
    pretrain_steps: int | None = None
    metrics: dict = field(default_factory=dict)  # an objective's other metrics
    seconds: float | None = None  # wall time from start to end, None while running
    last_step: int | None = None  # the last reported step and its validation accuracy
    val_accuracy: float | None = None

    @property
    def complete(self) -> bool:
        """A finished run with a size and a value: one the estimate is made from."""
        return self.state == "COMPLETE" and self.value is not None and self.d_model is not None

    @property
    def pending(self) -> bool:
        return self.state in _PENDING


def read_run(t: FrozenTrial) -> RunRecord:
    """The run of an Optuna trial."""
    a = t.user_attrs
    d = t.params.get(D_MODEL, a.get(D_MODEL))
    seconds = None
    if t.datetime_start is not None and t.datetime_complete is not None:
        seconds = (t.datetime_complete - t.datetime_start).total_seconds()
    last = max(t.intermediate_values, default=None)
    return RunRecord(
        number=t.number,
        state=t.state.name,
        d_model=_int(d),
        value=None if t.value is None else float(t.value),
        params_total=_int(a.get(PARAMS_TOTAL)),
        params_non_embedding=_int(a.get(PARAMS_NON_EMBEDDING)),
        seed=_int(a.get(SEED)),
        replicate=_int(a.get(REPLICATE)),
        accuracy=json_attr(a.get(ACCURACY)) or {},
        strict_accuracy=json_attr(a.get(STRICT_ACCURACY)) or {},
        sampled_accuracy=json_attr(a.get(SAMPLED_ACCURACY)) or {},
        budget=tuple(json_attr(a.get(BUDGET)) or ()),
        steps=_int(a.get(STEPS)),
        stop_reason=a.get(STOP_REASON),
        train_s=a.get(TRAIN_S),
        cpu_s=a.get(CPU_S),
        worker=a.get(WORKER),
        checkpoint=a.get(CHECKPOINT),
        checkpoint_sha256=a.get(CHECKPOINT_SHA256),
        decision=json_attr(a.get(DECISION)),
        cancelled=a.get(CANCELLED),
        pretrain_accuracy=json_attr(a.get(PRETRAIN_ACCURACY)),
        pretrain_steps=_int(a.get(PRETRAIN_STEPS)),
        metrics=json_attr(a.get(METRICS)) or {},
        seconds=seconds,
        last_step=last,
        val_accuracy=t.intermediate_values.get(last) if last is not None else None,
    )


def split_runs(
    runs: Iterable[RunRecord], exclude: int | None = None
) -> tuple[list[tuple[int, float]], list[int]]:
    """Completed (d, accuracy) pairs and the sizes of pending runs, leaving out ``exclude``:
    what the policy and the posterior take."""
    completed, pending = [], []
    for r in runs:
        if r.number == exclude or r.d_model is None:
            continue
        if r.complete:
            completed.append((r.d_model, r.value))
        elif r.pending:
            pending.append(r.d_model)
    return completed, pending


def write_decision(
    storage: BaseStorage, trial_id: int, d: int, replicate: int, seed: int, info: dict
) -> None:
    """The sampler's decision for a trial: its size, replicate index, seed and reasons."""
    storage.set_trial_user_attr(trial_id, D_MODEL, d)
    storage.set_trial_user_attr(trial_id, REPLICATE, replicate)
    storage.set_trial_user_attr(trial_id, SEED, seed)
    storage.set_trial_user_attr(trial_id, DECISION, json.dumps(info, sort_keys=True))


def write_cancel(storage: BaseStorage, trial_id: int, reason: str) -> None:
    """The policy stopped the study after this trial began: it will not be trained."""
    storage.set_trial_user_attr(trial_id, CANCELLED, f"study done ({reason})")


def read_seed(trial: optuna.Trial) -> int | None:
    """The seed recorded on a running trial, read from storage: ``trial.user_attrs`` is a copy
    taken when the trial was made, before its sampler wrote the decision's seed."""
    return _int(trial.storage.get_trial_user_attrs(trial._trial_id).get(SEED))


def write_seed(trial: optuna.Trial, seed: int) -> None:
    """The seed of a trial enqueued by hand (the sampler writes the others')."""
    trial.set_user_attr(SEED, seed)
