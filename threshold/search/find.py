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

__all__ = [
    "die_with_parent",
    "prepare_study",
    "snapshot",
    "start_workers",
    "stop_workers",
    "worker_devices",
]

PARENT_ENV = "THRESHOLD_WORKER_PARENT"  # set on workers started by find and run: their parent


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


def worker_devices(workers: int, device: str = "auto", oversubscribe: bool = False) -> list[str]:
    """The device of each of ``workers`` worker processes; more workers than the machine runs at
    once (one a core on the CPU, one a GPU on CUDA) are refused unless ``oversubscribe``."""
    if workers < 1:
        raise ConfigError(f"--workers {workers} is not allowed: use 1 or more")
    from threshold.device import resolve_device  # torch: loaded only when workers start

    resolved = None if device == "cpu" else resolve_device(device)
    if resolved is not None and resolved.type == "cuda":
        count = 1 if resolved.index is not None else torch_cuda_count()
        if workers > count and not oversubscribe:
            raise ConfigError(
                f"--workers {workers} on {device}: one worker a GPU (processes that share one slow "
                f"each other 3-4x), and there are {count}; use --workers {count} and --batch to "
                "fill a GPU, or --oversubscribe to start them anyway"
            )
        if resolved.index is not None:
            return [str(resolved)] * workers
        return [f"cuda:{i % count}" for i in range(workers)]
    cores = os.cpu_count() or 1
    if workers > cores and not oversubscribe:
        raise ConfigError(
            f"--workers {workers} is more than this machine runs at once ({cores} cores, one "
            f"worker each): use --workers {cores} or fewer, or --oversubscribe to start them anyway"
        )
    return [device] * workers


def torch_cuda_count() -> int:
    import torch

    return torch.cuda.device_count()


def start_workers(
    name: str,
    url: str,
    workers: int,
    heartbeat_s: int,
    cache_dir: Path | None,
    device: str = "auto",
    batch: int = 1,
    oversubscribe: bool = False,
) -> list[subprocess.Popen]:
    """``workers`` processes of ``threshold worker``, each with one torch thread (and on CUDA a
    GPU of its own). Interrupted while starting them, it stops the ones it started; each worker
    also ends with this process (Linux), so none is left behind whatever stops this one."""
    devices = worker_devices(workers, device, oversubscribe)
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    env[PARENT_ENV] = str(os.getpid())
    if cache_dir is not None:
        env["THRESHOLD_CACHE"] = str(cache_dir)
    command = [sys.executable, "-m", "threshold", "worker", "--study", name, "--storage", url]
    command += ["--heartbeat", str(heartbeat_s), "--batch", str(batch), "--quiet"]
    procs: list[subprocess.Popen] = []
    try:
        for dev in devices:
            procs.append(subprocess.Popen([*command, "--device", dev], env=env))
    except BaseException:
        stop_workers(procs)
        raise
    return procs


def die_with_parent() -> None:
    """In a worker started by :func:`start_workers`: end (SIGTERM, so a running trial is marked
    failed) when the process that started it ends, even if that one was killed outright."""
    parent = os.environ.get(PARENT_ENV)
    if parent is None or not sys.platform.startswith("linux"):
        return
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    if os.getppid() != int(parent):  # the parent ended before the line above
        os.kill(os.getpid(), signal.SIGTERM)


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
