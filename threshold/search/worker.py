"""A worker: runs trials of one study until the policy says stop.

Each trial trains one model at the size the sampler chose, with the seed recorded on the trial,
uploads its checkpoint to the artifact store, records per-op metrics on the trial and refreshes the
study's transition estimate. Trials are run through ``study.optimize`` one at a time, so Optuna's
heartbeat thread runs beside training and stale trials of killed workers are failed and retried
(same size, same seed) before each new trial.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import tempfile
import time
import warnings
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import optuna
from optuna.artifacts import upload_artifact
from optuna.storages import fail_stale_trials
from optuna.trial import TrialState

from threshold.checkpoint import save_checkpoint
from threshold.device import resolve_device
from threshold.errors import ThresholdError
from threshold.model import param_count
from threshold.pretrain import pretrain_task, pretrained, transfer_model_config
from threshold.search.fit import transition_estimate
from threshold.search.policy import decide
from threshold.search.sampler import CANCEL, PARAM, TransitionSampler, run_seed, split_trials
from threshold.search.study import StudySettings, artifact_store, load_study, open_storage
from threshold.tasks import TaskData, load_task_data
from threshold.train import continue_training, majority_rate, model_config_for, train

__all__ = [
    "Cancelled",
    "refresh_estimate",
    "run_worker",
]

log = logging.getLogger(__name__)


class Cancelled(ThresholdError):
    """The policy decided to stop after this trial began (another worker finished the study)."""


def refresh_estimate(study: optuna.Study, sampler: TransitionSampler) -> dict | None:
    """Fit the transition to the completed trials and store it on the study."""
    completed, _ = split_trials(study.get_trials(deepcopy=False))
    if not completed:
        return None
    estimate = transition_estimate(sampler.policy, completed)
    study.set_user_attr("estimate", json.dumps(estimate, sort_keys=True))
    from threshold.search.notes import write_note

    write_note(study, sampler.settings, sampler.policy, estimate)
    return estimate


def _objective(
    settings: StudySettings,
    data: TaskData,
    store,
    sampler: TransitionSampler,
    cache_dir=None,
    device="cpu",
) -> Callable[[optuna.Trial], float]:
    measure = settings.task.measured_op

    def objective(trial: optuna.Trial) -> float:
        d = trial.suggest_int(PARAM, sampler.distribution.low, sampler.distribution.high)
        cancel = trial.storage.get_trial_system_attrs(trial._trial_id).get(CANCEL)
        if cancel is not None:
            raise Cancelled(cancel)
        seed = trial.user_attrs.get("seed")
        if seed is None:  # enqueued by hand: derive a seed that no earlier run at d used
            earlier = [
                t
                for t in trial.study.get_trials(deepcopy=False)
                if t.number < trial.number and t.params.get(PARAM) == d
            ]
            seed = run_seed(settings.search.base_seed, settings.task.ops, d, len(earlier))
            trial.set_user_attr("seed", seed)
        source = pretrain_task(settings.task, settings.pretrain) if settings.pretrain else None
        if source is None:
            model_cfg = model_config_for(data.config, d)
        else:
            model_cfg = transfer_model_config(source, settings.task, d)
        counts = param_count(model_cfg)
        trial.set_user_attr("worker", f"{socket.gethostname()}:{os.getpid()}")
        trial.set_user_attr("params_total", counts["total"])
        trial.set_user_attr("params_non_embedding", counts["non_embedding"])

        def report(progress) -> None:
            acc = progress.val_accuracy.get(measure)
            if acc is not None:
                trial.report(acc, progress.step)

        cfg = replace(settings.train, seed=seed)
        if source is None:
            result = train(
                model_cfg, data, cfg, report, progress_every=cfg.eval_every, device=device
            )
        else:  # pretrained at this size and seed (cached), then trained on the task
            pre = pretrained(source, model_cfg, cfg, cache_dir, device=device)
            trial.set_user_attr("pretrain_accuracy", json.dumps(pre.metrics["accuracy"]))
            trial.set_user_attr("pretrain_steps", pre.metrics["steps"])
            result = continue_training(
                pre.model, data, cfg, report, progress_every=cfg.eval_every, device=device
            )
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / f"trial{trial.number}-d{d}-seed{seed}.ckpt"
            metrics = {
                "accuracy": result.accuracy,
                "strict_accuracy": result.strict_accuracy,
                "steps": result.steps,
                "stop_reason": result.stop_reason,
                "trial": trial.number,
                "study": trial.study.study_name,
            }
            digest = save_checkpoint(path, result.model, settings.task, cfg.to_dict(), metrics)
            artifact_id = upload_artifact(
                artifact_store=store, file_path=str(path), study_or_trial=trial
            )
        trial.set_user_attr("checkpoint_artifact", artifact_id)
        trial.set_user_attr("checkpoint_sha256", digest)
        trial.set_user_attr("accuracy", json.dumps(result.accuracy, sort_keys=True))
        trial.set_user_attr("strict_accuracy", json.dumps(result.strict_accuracy, sort_keys=True))
        trial.set_user_attr("steps", result.steps)
        trial.set_user_attr("stop_reason", result.stop_reason)
        trial.set_user_attr("train_s", round(result.wall_s, 2))
        return result.accuracy[measure]

    return objective


def run_worker(
    study_name: str,
    storage_url: str | None = None,
    heartbeat_s: int = 30,
    max_trials: int | None = None,
    cache_dir: Path | None = None,
    device: str = "auto",
) -> int:
    """Run trials of ``study_name`` until the policy stops; returns how many this worker ran.

    ``device`` is resolved here, on the machine the worker runs on (``auto``: its GPU if any).
    """
    device = resolve_device(device)
    storage = open_storage(storage_url, heartbeat_s, create=False)
    study, settings = load_study(study_name, storage)
    data = load_task_data(settings.task, cache_dir)
    sampler = TransitionSampler(settings, majority_rate(data.test[settings.task.measured_op]))
    study.sampler = sampler
    store = artifact_store(storage_url)
    objective = _objective(settings, data, store, sampler, cache_dir, device)
    ran = 0
    while max_trials is None or ran < max_trials:
        with warnings.catch_warnings():  # "experimental" since Optuna 2.9
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            fail_stale_trials(study)
        trials = study.get_trials(deepcopy=False)
        waiting = any(t.state == TrialState.WAITING for t in trials)
        completed, pending = split_trials(trials)
        if not waiting:
            decision = decide(sampler.policy, completed, pending)
            if decision.stop:
                others_running = any(t.state == TrialState.RUNNING for t in trials)
                if decision.reason == "budget" and others_running:
                    # The budget counts running trials: wait for them, or for their retry if
                    # their worker died, before ending the study.
                    time.sleep(min(5, heartbeat_s))
                    continue
                log.info("study %s: stop (%s)", study_name, decision.reason)
                break
        finished: list = []

        def after_trial(s: optuna.Study, t, finished=finished) -> None:
            finished.append(t)
            refresh_estimate(s, sampler)

        study.optimize(objective, n_trials=1, catch=(Cancelled,), callbacks=[after_trial])
        ran += 1
        if finished and CANCEL in finished[0].system_attrs:
            break
    refresh_estimate(study, sampler)
    return ran
