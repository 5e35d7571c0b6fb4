"""Concurrency: worker processes on one machine share one study, on the default SQLite storage
and on a real PostgreSQL server: 2 (one a core) in the default suite, 4 on the 2 cores (the
README's figures) with ``-m slow``. Every trial is recorded exactly once, nothing fails with
"database is locked", and no proposal is duplicated unless the sampler meant it (a repeat at a size
is a new replicate with a new seed).

Trials are short on purpose: 20 training steps of MAX mod 5 at d <= 16, 20 test and 20 validation
sequences, about 0.4 s of training and evaluation alone. What is measured is the search machinery
beside it: decisions, storage writes, heartbeats, checkpoint uploads, four processes on two cores.
The figures are printed (``-s``) and written to ``concurrency.json`` in pytest's base temporary
directory:

    python -m pytest tests/reliability -k concurrency -s -m "slow or not slow"
"""

from __future__ import annotations

import json
import statistics
import time
from collections import Counter
from dataclasses import replace

import optuna
import pytest
from optuna.trial import TrialState
from support import cache_with_data, reader, trials
from test_search_workers import check_recorded_once, start_worker

from threshold.search.policy import decide
from threshold.search.sampler import CANCEL, policy_settings, split_trials
from threshold.search.spec import StudySettings
from threshold.search.study import SearchConfig, create_or_load_study, open_storage
from threshold.tasks import TaskConfig, load_task_data
from threshold.train import TrainConfig

SHORT = StudySettings(
    TaskConfig(ops=("max",), n=5, n_train=2000, n_test=20, n_val=20),
    TrainConfig(max_steps=20, eval_every=20),
    # A precision no run count reaches, so the budget (or the give-up rule) ends the study; d
    # capped at 16 so that widening cannot make a trial long.
    SearchConfig(d_min=2, d_lo=4, d_hi=16, d_max=16, budget=16, precision=1.001),
)


@pytest.fixture(scope="module")
def figures(tmp_path_factory):
    found: dict = {}
    yield found
    path = tmp_path_factory.getbasetemp() / "concurrency.json"
    path.write_text(json.dumps(found, indent=2))


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
@pytest.mark.parametrize(
    ("workers", "budget"), [(2, 8), pytest.param(4, 16, marks=pytest.mark.slow)]
)
def test_workers_record_every_trial_once(
    kind, workers, budget, request, tmp_path, shared_cache, figures
):
    if kind == "sqlite":
        url = f"sqlite:///{tmp_path}/s.db"
    else:
        url = request.getfixturevalue("postgres_url")
    name = f"concurrency-{kind}-{workers}"
    settings = StudySettings(SHORT.task, SHORT.train, replace(SHORT.search, budget=budget))
    create_or_load_study(settings, open_storage(url, heartbeat_s=1), name)
    cache = cache_with_data(tmp_path, shared_cache)
    load_task_data(SHORT.task, cache)  # generated once, not by every worker at a time
    t0 = time.perf_counter()
    procs = [start_worker(url, name, cache) for _ in range(workers)]
    outs = [p.communicate(timeout=400)[0] for p in procs]
    wall = time.perf_counter() - t0
    assert [p.returncode for p in procs] == [0] * workers, outs
    for out in outs:
        assert "database is locked" not in out, out

    ts = trials(reader(url), name)
    # The budget ends the study, or the search gives up first: every run scores 0 at d <= 16
    # (20 steps), at or below chance, so the transition lies above the allowed sizes.
    completed, _ = split_trials(ts)
    study = optuna.load_study(study_name=name, storage=url)
    chance = json.loads(study.user_attrs["estimate"])["chance"]
    final = decide(policy_settings(settings, chance), completed, [])
    assert final.stop and final.reason in ("budget", "above_range"), final
    done = check_recorded_once(ts, budget if final.reason == "budget" else len(completed))
    # Anything else is a trial cancelled before training because the last slot was taken.
    others = [t for t in ts if t.state != TrialState.COMPLETE]
    assert all(t.state == TrialState.FAIL and CANCEL in t.system_attrs for t in others)
    # Each decision saw every earlier one: at every size the replicates are 0, 1, 2, ...
    replicates: dict[int, list[int]] = {}
    for t in done:
        replicates.setdefault(t.params["d_model"], []).append(t.user_attrs["replicate"])
    assert all(sorted(r) == list(range(len(r))) for r in replicates.values()), replicates
    # One checkpoint per trial in the artifact store, none half-written or twice uploaded.
    assert len([p for p in (cache / "art").iterdir()]) == len(done)
    assert {t.user_attrs["checkpoint_artifact"] for t in done} == {
        p.name for p in (cache / "art").iterdir()
    }

    start = min(t.datetime_start for t in done)
    end = max(t.datetime_complete for t in done)
    busy = (end - start).total_seconds()
    by_worker = Counter(t.user_attrs["worker"] for t in done)
    assert {w.rsplit(":", 1)[1] for w in by_worker} <= {str(p.pid) for p in procs}
    if workers > 2:  # the work was shared (2 workers on a busy machine: one may start late)
        assert len(by_worker) >= 2, by_worker
    found = {
        "storage": kind,
        "workers": workers,
        "trials": len(done),
        "cancelled": len(others),
        "trials_per_worker": sorted(by_worker.values()),
        "sizes": dict(sorted(Counter(t.params["d_model"] for t in done).items())),
        "trials_per_s": round(len(done) / busy, 2),
        "median_trial_s": round(statistics.median(t.duration.total_seconds() for t in done), 2),
        "median_train_s": round(statistics.median(t.user_attrs["train_s"] for t in done), 2),
        "first_start_to_last_end_s": round(busy, 1),
        "wall_with_process_start_s": round(wall, 1),
    }
    figures[f"{kind}-{workers}"] = found
    print(f"\nconcurrency {json.dumps(found)}")
