"""Running a search: prepare the study, start worker processes, and read its state for display."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import optuna
from optuna.trial import TrialState

from threshold.errors import ConfigError
from threshold.search.sampler import PARAM
from threshold.search.study import (
    StudySettings,
    check_study_name,
    create_or_load_study,
    open_storage,
    storage_url,
)

__all__ = ["prepare_study", "snapshot", "start_workers", "stop_workers"]


def prepare_study(
    settings: StudySettings, url: str | None, name: str | None, heartbeat_s: int
) -> tuple[str, str]:
    """Create (or check and reuse) the study; returns its name and the storage URL."""
    if name is not None:
        check_study_name(name)  # before the storage is created
    url = storage_url(url)
    storage = open_storage(url, heartbeat_s)
    study = create_or_load_study(settings, storage, name)
    return study.study_name, url


def start_workers(
    name: str,
    url: str,
    workers: int,
    heartbeat_s: int,
    cache_dir: Path | None,
    device: str = "auto",
    batch: int = 1,
) -> list[subprocess.Popen]:
    """``workers`` processes of ``threshold worker``, each with one torch thread.

    On CUDA each worker gets a GPU of its own (one process per GPU: processes that share one slow
    each other 3-4x); more workers than GPUs is refused.
    """
    devices = [device] * workers
    if device != "cpu":
        from threshold.device import resolve_device

        resolved = resolve_device(device)
        if resolved.type == "cuda" and resolved.index is None:
            import torch

            count = torch.cuda.device_count()
            if workers > count:
                raise ConfigError(
                    f"--workers {workers} on CUDA: one worker per GPU, and this machine has "
                    f"{count}; use --workers {count}, or --device cpu for CPU workers"
                )
            devices = [f"cuda:{i}" for i in range(workers)]
        elif resolved.type == "cuda" and workers > 1:
            raise ConfigError(f"--workers {workers} on {device}: one worker per GPU; use 1")
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    if cache_dir is not None:
        env["THRESHOLD_CACHE"] = str(cache_dir)
    command = [sys.executable, "-m", "threshold", "worker", "--study", name, "--storage", url]
    command += ["--heartbeat", str(heartbeat_s), "--batch", str(batch), "--quiet"]
    return [subprocess.Popen([*command, "--device", dev], env=env) for dev in devices]


def stop_workers(procs: list[subprocess.Popen], grace_s: float = 60) -> None:
    """Interrupt workers (their running trials are marked failed), then kill any that hang."""
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    for p in procs:
        try:
            p.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def snapshot(storage: optuna.storages.BaseStorage, name: str) -> dict:
    """Trials (size, parameters, seed, accuracy, time, state, progress) and the estimate."""
    study = optuna.load_study(study_name=name, storage=storage)
    rows = []
    for t in study.get_trials(deepcopy=False):
        d = t.params.get(PARAM, t.user_attrs.get(PARAM))
        duration = None
        if t.datetime_start is not None and t.datetime_complete is not None:
            duration = (t.datetime_complete - t.datetime_start).total_seconds()
        last_step = max(t.intermediate_values, default=None)
        rows.append(
            {
                "number": t.number,
                "state": t.state.name,
                "d_model": d,
                "params_total": t.user_attrs.get("params_total"),
                "seed": t.user_attrs.get("seed"),
                "accuracy": t.value,
                "stop_reason": t.user_attrs.get("stop_reason"),
                "seconds": duration,
                "step": last_step,
                "val_accuracy": t.intermediate_values.get(last_step) if last_step else None,
            }
        )
    attrs = study.user_attrs
    estimate = json.loads(attrs["estimate"]) if "estimate" in attrs else None
    complete = sum(r["state"] == TrialState.COMPLETE.name for r in rows)
    return {"study": name, "trials": rows, "estimate": estimate, "n_trials": complete}
