"""Dense grids (threshold.search.grid): every cell trained once, resumable from storage and from
the record alone, read by status like any study."""

from __future__ import annotations

import json
from dataclasses import replace

import optuna
import pytest
from optuna.trial import TrialState

from threshold.config import Execution
from threshold.errors import ConfigError
from threshold.search.grid import (
    CHECKPOINTS,
    GridSpec,
    export_record,
    grid_recipe,
    grid_settings,
    parse_sizes,
    prepare_grid,
    records_table,
    run_grid,
)
from threshold.search.record import read_study
from threshold.search.sampler import run_seed
from threshold.search.settings import SearchConfig
from threshold.search.spec import StudySettings
from threshold.search.worker import run_worker
from threshold.tasks import TaskConfig
from threshold.train import TrainConfig

# Depth 1: 9-token sequences, whose decoding is most of a tiny run's CPU (as test_search_workers)
TASK = TaskConfig(ops=("max",), n=5, depth=1, n_train=2000, n_test=100, n_val=50)
SPEC = GridSpec((4, 6, 8), seeds=2)


def settings() -> StudySettings:
    train = TrainConfig(max_steps=60, warmup_steps=10, decay_steps=50, eval_every=30)
    return StudySettings(TASK, replace(train, checkpoints=(0.5, 1.0)), SearchConfig())


def execution(tmp_path, db: str = "g.db") -> Execution:
    return Execution(storage=f"sqlite:///{tmp_path / db}", trials_at_once=4, device="cpu")


def cells(url: str, name: str) -> list[tuple[int, int]]:
    trials = optuna.load_study(study_name=name, storage=url).get_trials()
    done = [t for t in trials if t.state == TrialState.COMPLETE]
    return sorted((t.params["d_model"], t.user_attrs["replicate"]) for t in done)


def test_sizes_and_specs_are_checked():
    assert parse_sizes("4..8") == (4, 5, 6, 7, 8)
    assert parse_sizes("4..12/4,20") == (4, 8, 12, 20)
    for bad in ("4..", "8..4", "a,b", "4..8/0"):
        with pytest.raises(ConfigError, match="--sizes"):
            parse_sizes(bad)
    with pytest.raises(ConfigError, match="two or more sizes"):
        GridSpec((8,))
    with pytest.raises(ConfigError, match="--seeds"):
        GridSpec((4, 8), seeds=0)
    with pytest.raises(ConfigError, match="20,000 runs: use at most 10,000"):
        GridSpec(parse_sizes("1..2000"), seeds=10)
    assert SPEC.cells[:3] == [(4, 0), (6, 0), (8, 0)]  # a seed at every size, then the next


def test_a_budget_decay_is_fixed_to_the_budget_and_said():
    values, said = grid_recipe({"steps": 1000})
    assert values["checkpoints"] == CHECKPOINTS and values["decay_steps"] == 800  # 200 warm-up
    assert "decay_steps 800" in said
    values, said = grid_recipe({"recipe": "small"})  # a fixed span of its own: nothing changed
    assert "decay_steps" not in values and said is None


def test_a_grid_trains_each_cell_once_and_resumes(tmp_path, monkeypatch):
    monkeypatch.setenv("THRESHOLD_CACHE", str(tmp_path / "cache"))
    made = grid_settings(settings(), SPEC)
    runs = execution(tmp_path)
    name, queued = prepare_grid(made, SPEC, runs)
    assert queued == len(SPEC.cells)
    run_worker(name, runs, max_trials=2)  # a grid cut short: two runs of six
    assert len(cells(runs.storage_url, name)) == 2
    outcome, path, queued = run_grid(settings(), SPEC, runs, out=tmp_path / "out")
    assert outcome.study == name and queued == 0  # the four left were queued already
    assert outcome.n_new == 4  # the two done before are not trained again
    assert cells(runs.storage_url, name) == sorted(SPEC.cells)
    view = read_study(runs.storage_url, name)
    for r in view.completed:  # the seed a live study's r-th run at d gets
        assert r.seed == run_seed(0, TASK.ops, r.d_model, r.replicate)
    rec = json.loads(path.read_text())
    assert rec["kind"] == "threshold grid" and rec["n_runs"] == 6 and rec["n_cells"] == 6
    assert rec["checkpoint_steps"] == [30, 60]
    assert all([b["step"] for b in run["budget"]] == [30, 60] for run in rec["runs"])
    assert all(rec["params"][str(r.d_model)] == r.params_total for r in view.completed)
    assert rec["chance"] == pytest.approx(view.chance)

    again, _, queued = run_grid(settings(), SPEC, runs, out=tmp_path / "out")
    assert (again.n_new, queued) == (0, 0)  # whole: nothing trained

    # A cell trained twice (two workers each retried its dead trial) is one run of the record
    study = optuna.load_study(study_name=name, storage=runs.storage_url)
    twice = next(t for t in study.get_trials() if t.state == TrialState.COMPLETE)
    study.add_trial(optuna.trial.create_trial(
        value=twice.value, params=twice.params, distributions=twice.distributions,
        user_attrs=twice.user_attrs, system_attrs=twice.system_attrs,
    ))  # fmt: skip
    assert len(read_study(runs.storage_url, name).completed) == 7
    dup = export_record(read_study(runs.storage_url, name), tmp_path / "dup.json")
    assert dup["n_runs"] == 6 and dup["runs"] == rec["runs"]

    rec["git_commit"] = "0" * 40  # begun at an older commit
    path.write_text(json.dumps(rec, indent=1, sort_keys=True) + "\n")
    before = path.read_text()
    fresh = execution(tmp_path, "fresh.db")  # another machine: a new database, the record
    moved, _, queued = run_grid(settings(), SPEC, fresh, out=tmp_path / "out")
    assert (moved.n_new, queued) == (0, 0)
    assert path.read_text() == before  # nothing new: the record as it was, its commit too
    assert cells(fresh.storage_url, name) == sorted(SPEC.cells)
    assert moved.answer == outcome.answer  # the same reading of the same runs
    (row,) = records_table(tmp_path / "out")
    assert (row["study"], row["runs"], row["cells"], row["seeds"]) == (name, 6, 6, 2)
    assert row["answer"] == outcome.answer


def test_a_record_of_other_settings_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("THRESHOLD_CACHE", str(tmp_path / "cache"))
    made = grid_settings(settings(), SPEC)
    other = replace(made, search=replace(made.search, base_seed=1))
    path = tmp_path / "rec.json"
    path.write_text(json.dumps({"study": "x", "settings": other.to_attrs(), "runs": []}))
    with pytest.raises(ConfigError, match="other settings"):
        prepare_grid(made, SPEC, execution(tmp_path), "g", from_record=path)


def test_the_command_refuses_bad_sizes_in_one_line(cli):
    result = cli(["grid", "--sizes", "9..3"])
    assert result.exit_code == 2
    assert result.stderr.strip().splitlines() == [
        "error: --sizes '9..3' is not a list of sizes like 4..32, 4..32/2 or 8,12,16"
    ]
