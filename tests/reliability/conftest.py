"""Session fixtures of the reliability tests: the tiny study's data, and its uninterrupted run."""

from __future__ import annotations

import time
from dataclasses import dataclass

import pytest
from support import SETTINGS, outcome, reader

from threshold.config import Execution
from threshold.search.study import create_or_load_study, open_storage
from threshold.search.worker import run_worker
from threshold.tasks import load_task_data


@pytest.fixture(scope="session")
def shared_cache(tmp_path_factory):
    """A data cache holding the tiny study's data, generated once for every process."""
    cache = tmp_path_factory.mktemp("shared-cache")
    load_task_data(SETTINGS.task, cache)
    return cache


@dataclass(frozen=True)
class Reference:
    url: str
    name: str
    runs: list  # sorted (d, seed, accuracy) of the completed trials
    estimate: dict
    wall_s: float


@pytest.fixture(scope="session")
def reference(tmp_path_factory, shared_cache) -> Reference:
    """The tiny study run once without faults, in this process, by one worker."""
    root = tmp_path_factory.mktemp("reference")
    url = f"sqlite:///{root}/ref.db"
    name = create_or_load_study(SETTINGS, open_storage(url, heartbeat_s=1)).study_name
    t0 = time.perf_counter()
    run_worker(name, Execution(url, heartbeat_s=1, cache_dir=shared_cache))
    runs, estimate = outcome(reader(url), name)
    return Reference(url, name, runs, estimate, time.perf_counter() - t0)
