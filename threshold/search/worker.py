"""A worker: runs trials of one study until the policy says stop.

Each trial trains one model at the size the sampler chose, with the seed recorded on the trial,
uploads its checkpoint to the artifact store, records per-op metrics on the trial and refreshes the
study's transition estimate. A worker asks for up to K trials at once (``batch``; K = 1 is no
special case) and trains them with one call of the engine, telling each as it ends; a thread
beats the heartbeats of its running trials, so stale trials of killed workers are failed and
retried (same size, same seed) before each new round. Each run keeps its training state beside the
checkpoints while it trains (:func:`~threshold.search.study.training_state_path`), and a trial
interrupted (SIGINT, SIGTERM) is enqueued again as it was, so whichever worker runs the retry, of
an interrupted or of a killed one, continues the run where its state left it.

For the tests of kills and signals, ``THRESHOLD_TEST_HOLD`` naming a file makes a worker stop
mid-run at a known point (:func:`_hold`), however short its runs are.
"""

from __future__ import annotations

import logging
import os
import socket
import tempfile
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import optuna
from optuna.artifacts import upload_artifact
from optuna.trial import TrialState

from threshold.config import Execution, ModelConfig, TrainConfig, param_count, pretrain_task
from threshold.files import atomic_write
from threshold.interrupt import interrupted, raise_if_interrupted
from threshold.model import RecurrentTransformer
from threshold.search import record
from threshold.search.notes import NoteRender
from threshold.search.sampler import PARAM, QueueOnly, TransitionSampler, run_seed
from threshold.search.spec import StudySettings
from threshold.search.study import (
    artifact_store,
    load_study,
    open_storage,
    training_state_path,
)
from threshold.search.trials import (
    Cancelled,
    Heartbeats,
    decided_size,
    enqueue_again,
    finished,
    next_step,
    quiet_storage_log,
    refresh_estimate,
)
from threshold.tasks import TaskData, load_task_data
from threshold.train import Run, TrainResult, chance_rate, train_runs
from threshold.train.checkpoint import save_checkpoint
from threshold.train.device import resolve_device
from threshold.train.pretrain import pretrained_many

__all__ = [
    "Cancelled",
    "quiet_storage_log",
    "refresh_estimate",
    "run_worker",
]

log = logging.getLogger(__name__)

HOLD_ENV = "THRESHOLD_TEST_HOLD"  # tests only: see _hold
HOLD_AT_ENV = "THRESHOLD_TEST_HOLD_AT"  # "deciding", "training" (default), "evaluating", "writing"
HOLD_AFTER_ENV = "THRESHOLD_TEST_HOLD_AFTER"  # completed trials before the hold (default 1)


@dataclass
class _Trial:
    """A trial whose size, seed and model are decided, ready to train."""

    trial: optuna.Trial
    model_cfg: ModelConfig
    cfg: TrainConfig  # the study's training settings with this run's seed
    init: RecurrentTransformer | None  # the pretrained model a transfer run continues


def _begin(trial: optuna.Trial, settings: StudySettings, sampler) -> _Trial:
    """Size (from the sampler, or fixed by a retry), seed and model config of ``trial``, recorded
    on it; :class:`Cancelled` when the policy stopped the study after the trial was made."""
    d = decided_size(trial, sampler)
    seed = record.read_seed(trial)  # the decision's (or, on a retry, the failed trial's)
    if seed is None:  # enqueued by hand: derive a seed that no earlier run at d used
        earlier = [
            t
            for t in trial.study.get_trials(deepcopy=False)
            if t.number < trial.number and t.params.get(PARAM) == d
        ]
        seed = run_seed(settings.search.base_seed, settings.task.ops, d, len(earlier))
        record.write_seed(trial, seed)
    model_cfg = settings.model_config(d)
    counts = param_count(model_cfg)
    record.write_size(trial, f"{socket.gethostname()}:{os.getpid()}", counts)
    return _Trial(trial, model_cfg, replace(settings.train, seed=seed), None)


def _pretrain(runs: list[_Trial], settings: StudySettings, cache_dir, device) -> None:
    """With ``--pretrain``, each run's model pretrained at its size and seed (cached; the ones
    not cached train together), recorded on its trial and set as the model it continues."""
    if not settings.pretrain or not runs:
        return
    source = pretrain_task(settings.task, settings.pretrain)
    done = pretrained_many(source, [(r.model_cfg, r.cfg) for r in runs], cache_dir, None, device)
    for run, pre in zip(runs, done, strict=True):
        record.write_pretrain(run.trial, pre.metrics["accuracy"], pre.metrics["steps"])
        run.init = pre.model


def _record(run: _Trial, result: TrainResult, settings: StudySettings, store) -> float:
    """Upload the checkpoint and record the metrics of a finished run; its measured accuracy."""
    trial, cfg = run.trial, run.cfg
    metrics = result.metrics()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"trial{trial.number}-d{run.model_cfg.d_model}-seed{cfg.seed}.ckpt"
        stored = metrics | {"trial": trial.number, "study": trial.study.study_name}
        digest = save_checkpoint(path, result.model, settings.task, cfg.to_dict(), stored)
        artifact_id = upload_artifact(
            artifact_store=store, file_path=str(path), study_or_trial=trial
        )
    record.write_result(trial, artifact_id, digest, metrics)
    scored = metrics["sampled_accuracy" if cfg.decoding == "sampled" else "accuracy"]
    return scored[settings.task.measured_op]


def _reporter(trial: optuna.Trial, measure: str) -> Callable:
    """Report the measured op's accuracy at each evaluation as the trial's intermediate value.

    A retry (of an interrupted or a killed run) holds the accuracies its failed trial reported,
    and its run resumes from a state saved up to a minute before the last of them, or from step 0
    when the state is gone: those steps come again. They are skipped, read once here, so the
    values held stand and Optuna does not warn "already reported" once a step.
    """
    held = set(trial.storage.get_trial(trial._trial_id).intermediate_values)

    def report(progress) -> None:
        raise_if_interrupted()  # a signal dropped inside a finalizer stops the run here
        acc = progress.val_accuracy.get(measure)
        if acc is not None and progress.step not in held:
            trial.report(acc, progress.step)

    return report


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
    study, settings = load_study(study_name, storage)
    data = load_task_data(settings.task, execution.cache_dir)
    measured = data.test[data.config.measured_op]
    sampler = TransitionSampler(settings, chance_rate(measured, settings.train.decoding))
    grid = record.read_grid(study.user_attrs) is not None  # a dense grid: its queue, no sampler
    study.sampler = QueueOnly() if grid else sampler
    store = artifact_store(execution.storage_url)
    ran = 0
    while max_trials is None or ran < max_trials:
        step = next_step(study, sampler, grid)
        if step == "wait":  # the budget counts running trials: wait for them (or their retry)
            time.sleep(min(5, execution.heartbeat_s))
            continue
        if step == "stop":
            break
        room = execution.trials_on(device.type)
        if max_trials is not None:
            room = min(room, max_trials - ran)
        n, cancelled = _run_batch(
            study, settings, data, store, sampler, room, execution, device, notes, grid
        )
        ran += n
        if cancelled and not grid:  # a grid's cancelled trial only found its queue taken
            break
    refresh_estimate(study, sampler, notes)
    return ran


def _run_batch(study, settings, data, store, sampler, k, execution, device, notes, grid=False):
    """Up to ``k`` trials trained together; (trials run, whether the policy cancelled one).

    A run that ends is told at once (checkpoint, metrics, estimate); if training is stopped,
    the unfinished trials are told failed, and those interrupted are enqueued again to go on.
    """
    runs: list[_Trial] = []
    reporters: list[Callable] = []  # runs[i]'s
    live: dict[int, _Trial] = {}
    cancelled = False
    measure = settings.task.measured_op
    reported: set[int] = set()

    def progress(i: int, p) -> None:  # called every eval_every steps and at the last
        if p.resumed:  # a resumed run's notice repeats what it saved, at the step it saved
            return
        reporters[i](p)
        reported.add(i)
        held = os.environ.get(HOLD_AT_ENV, "training") == "training"
        if os.environ.get(HOLD_ENV) and held and len(reported) == len(live) == len(runs):
            _hold(study, len(runs), Path(os.environ[HOLD_ENV]))

    def done(i: int, result: TrainResult) -> None:
        run = live[i]  # live until told: an interrupt while recording fails it and enqueues it
        if os.environ.get(HOLD_ENV) and os.environ.get(HOLD_AT_ENV) == "writing":
            _hold(study, len(runs), Path(os.environ[HOLD_ENV]))  # trained, nothing written yet
        value = _record(run, result, settings, store)
        study.tell(run.trial, value)
        del live[i]
        log.info(  # one line a run (Optuna logs a finished trial only under study.optimize)
            "trial %d: d = %d accuracy %.3f (%s, %d steps, %.0f s)",
            run.trial.number, run.model_cfg.d_model, value, result.stop_reason, result.steps,
            result.wall_s,
        )  # fmt: skip
        beats.forget(run.trial)
        refresh_estimate(study, sampler, notes)

    with Heartbeats(study, execution.heartbeat_s) as beats:
        try:
            while len(runs) < k and (not runs or next_step(study, sampler, grid) == "run"):
                with warnings.catch_warnings():  # heartbeats without optimize: ours, below
                    warnings.filterwarnings("ignore", message="Heartbeat of storage is supposed")
                    trial = study.ask()
                beats.add(trial)
                try:
                    run = _begin(trial, settings, sampler)
                except Cancelled as e:
                    log.info("trial %d cancelled: %s", trial.number, e)
                    study.tell(trial, state=TrialState.FAIL)
                    beats.forget(trial)
                    cancelled = True
                    break
                except BaseException:
                    study.tell(trial, state=TrialState.FAIL)
                    raise
                if os.environ.get(HOLD_ENV) and os.environ.get(HOLD_AT_ENV) == "deciding":
                    _hold(study, 1, Path(os.environ[HOLD_ENV]))  # decided, not yet training
                live[len(runs)] = run
                runs.append(run)
                reporters.append(_reporter(trial, measure))
            _pretrain(runs, settings, execution.cache_dir, device)
            if runs:
                fed = _held_at_evaluation(data, study, len(runs))
                members = [
                    Run(r.model_cfg, fed, r.cfg, r.init, _state_path(execution, r)) for r in runs
                ]
                every = _progress_every(runs)
                train_runs(
                    members, device, progress, done, every, save_every_s=execution.save_every_s
                )
        except BaseException as e:  # told trials stay told; the others fail, to be run again
            cut = interrupted(e)
            # a signal can strike between a run's tell and its del; with no run live (the error
            # came before any began: the storage, say) the storage is not asked again
            told = finished(study) if live else set()
            for run in (r for r in live.values() if r.trial.number not in told):
                study.tell(run.trial, state=TrialState.FAIL)
                if cut:
                    enqueue_again(study, run.trial)
            if cut and not isinstance(e, KeyboardInterrupt):
                raise KeyboardInterrupt from e  # the process ends as the signal asked
            raise
    return len(runs), cancelled


def _progress_every(runs: list[_Trial]) -> int:
    """Steps between progress reports: the runs' validation interval; with the hold at training
    (tests), also halfway through the shortest run, so that the hold is mid-run where the run
    validates only at its end (a progress report changes nothing of the run)."""
    every = min(r.cfg.eval_every for r in runs)
    if os.environ.get(HOLD_ENV) and os.environ.get(HOLD_AT_ENV, "training") == "training":
        every = min(every, *(max(1, r.cfg.max_steps // 2) for r in runs))
    return every


def _held_at_evaluation(data: TaskData, study: optuna.Study, runs: int) -> TaskData:
    """``data``, or with ``THRESHOLD_TEST_HOLD_AT=evaluating`` a copy whose test sets hold the
    worker (:func:`_hold`) when the engine begins a run's test evaluation (its only reading of
    ``test.items()``): trained, not yet measured. Tests only; otherwise ``data`` itself."""
    if not os.environ.get(HOLD_ENV) or os.environ.get(HOLD_AT_ENV) != "evaluating":
        return data
    return replace(data, test=_HeldTestSets(data.test, study, runs, Path(os.environ[HOLD_ENV])))


class _HeldTestSets(dict):
    """Test sets whose ``items()`` holds first (:func:`_hold`; see :func:`_held_at_evaluation`)."""

    def __init__(self, sets: dict, study: optuna.Study, runs: int, path: Path) -> None:
        super().__init__(sets)
        self.hold = (study, runs, path)

    def items(self):
        _hold(*self.hold)
        return super().items()


def _hold(study: optuna.Study, runs: int, path: Path) -> None:
    """Where the kill and signal tests strike (``THRESHOLD_TEST_HOLD=path``): once each of the
    batch's ``runs`` has reported progress and none has ended (``THRESHOLD_TEST_HOLD_AT``
    ``training``, the default), once a run has trained as its test evaluation begins
    (``evaluating``), or once it is measured and before its result is written
    (``writing``), and the study has a completed trial or the batch trains several runs, write
    this process's id to ``path`` and wait, the runs unfinished and their trials running
    (heartbeats beating), until a signal ends it. ``THRESHOLD_TEST_HOLD_AFTER=N``: once the
    study has N completed trials (default 1)."""
    after = int(os.environ.get(HOLD_AFTER_ENV, "1"))
    done = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    if runs == 1 and len(done) < after:
        return
    with atomic_write(path, text=True) as f:  # whole when it appears
        f.write(f"{os.getpid()}\n")
    while True:
        raise_if_interrupted()
        time.sleep(0.05)


def _state_path(execution: Execution, run: _Trial) -> Path:
    study = run.trial.study.study_name
    return training_state_path(execution.storage_url, study, run.model_cfg.d_model, run.cfg.seed)
