"""Replays of recorded grids (threshold/search/bench/recorded.py, replay.py): loading, the runs,
scoring."""

import json
from pathlib import Path

import numpy as np
import pytest

from threshold.errors import ConfigError
from threshold.report.figures import replay_figure
from threshold.report.figures.replay import grid_label
from threshold.search.bench.recorded import RecordedGrid, load_grids
from threshold.search.bench.replay import (
    _bisection,
    _halfway,
    _oracle,
    _Pool,
    _score,
    _summary,
    bench_replay,
    calibration_summary,
    reading,
    replay_grid,
    user_grid,
)

SIZES = (8, 16, 32, 64)
PARAMS = {d: 12 * d * d + 100 * d for d in SIZES}


def _report(tmp_path, runs, name="listops10-add-add-test"):
    """A report's results.json with one study of these (d, accuracy) runs in trial order."""
    rows = [
        {"trial": i, "d": d, "params": PARAMS[d], "seed": i, "accuracy": y}
        for i, (d, y) in enumerate(runs)
    ]
    path = tmp_path / "results.json"
    study = {"row": {"name": name}, "chance": 0.15, "level": 0.8, "runs": rows}
    path.write_text(json.dumps({"studies": [study]}))
    return path


def _clean(at: int = 20) -> list:
    """Two seeds a size, learned (0.97) above d = at, at chance below."""
    return [(d, 0.97 if d > at else 0.15 + 0.01 * s) for d in SIZES for s in range(2)]


def test_a_report_gives_its_study_as_a_grid_and_a_grid_of_two_sizes_is_left_out(tmp_path):
    (grid,) = load_grids([_report(tmp_path, _clean())])
    assert grid.sizes == list(SIZES) and len(grid.runs) == 8
    assert grid.settings.d_lo == 8 and grid.settings.d_hi == 64 and grid.settings.chance == 0.15
    assert load_grids([_report(tmp_path, [(8, 0.15), (64, 0.97), (64, 0.96)])]) == []
    with pytest.raises(ConfigError, match="no such file"):
        load_grids([tmp_path / "missing.json"])


def test_the_pool_answers_in_recorded_order_and_redirects_an_exhausted_size(tmp_path):
    (grid,) = load_grids([_report(tmp_path, [(8, 0.1), (8, 0.2), (16, 0.3), (64, 0.9)])])
    pool = _Pool(grid)
    assert pool.draw(8) == (8, 0.1) and pool.draw(8) == (8, 0.2)
    assert pool.draw(8) == (16, 0.3) and pool.redirected == 1  # 16 is nearest 8 with runs left
    assert pool.draw(16) == (64, 0.9)
    assert pool.draw(64) is None
    turned = _Pool(grid, turn=1)  # the second seed order: each size's seeds turned by one
    assert turned.draw(8) == (8, 0.2) and turned.draw(8) == (8, 0.1)
    assert turned.draw(64) == (64, 0.9)


def test_bisection_closes_on_the_step_and_then_uses_every_run(tmp_path):
    (grid,) = load_grids([_report(tmp_path, _clean(at=20))])
    runs, stop = _bisection(grid)
    assert runs[0][0] == 64 and sorted(runs) == sorted(grid.runs)
    assert {d for d, _ in runs[1:stop]} <= {16, 32}  # between the ends, not at them


def test_scores_against_a_point_and_against_a_bound():
    point = {"x": 10.0, "lo": 9.6, "hi": 10.4, "kind": "point"}  # within a precision of 2.5
    read = {"x": 10.5, "lo": 9.5, "hi": 11.0, "kind": "point", "runs": 6}
    assert _score(read, point, 12) == {
        "runs": 6, "share": 0.5, "kind": "point", "covered": True, "error": 0.5,
        "x": 10.5, "lo": 9.5, "hi": 11.0,
    }  # fmt: skip
    lower = {"x": 12.0, "lo": 11.0, "hi": 14.0, "kind": "lower bound"}
    assert _score(read, lower, 12)["bound_ok"] is False and _score(read, lower, 12)["located"]
    grids = [
        {"reference": point, "methods": {"m": [{"stop": _score(read, point, 12)}]}},
        {"reference": lower, "methods": {"m": [{"stop": _score(read, lower, 12)}]}},
    ]
    s = _summary(grids, "m", "stop")
    assert s["coverage"] == 1.0 and s["bound_ok"] == 0.0 and s["bound_read_located"] == 1.0
    assert s["precise_grids"] == 1 and s["precise_within_60"] == 1.0
    assert "precise_grids" not in _summary(grids, "m", "stop", precision=2.0)


@pytest.mark.slow
def test_every_method_replays_a_clean_grid_and_covers_its_reading(tmp_path):
    (grid,) = load_grids([_report(tmp_path, _clean(at=20))])
    assert isinstance(grid, RecordedGrid)
    out = replay_grid(grid, counts=(4, 6), orders=2)
    assert out["reference"]["kind"] in ("point", "upper bound", "lower bound", "none")
    for method, trials in out["methods"].items():
        for trial in trials:
            assert {"stop", "4", "6"} <= set(trial), method
            assert 3 <= trial["stop"]["runs"] <= 8
            assert np.isfinite(trial["4"]["share"])


def test_a_science_record_that_keeps_its_runs_at_each_checkpoint_gives_a_grid_each(tmp_path):
    runs = [
        {"study": study, "d": d, "seed": s, "accuracy": 0.9,
         "budget": [{"step": 100, "accuracy": 0.15 + 0.01 * s}, {"step": 200, "accuracy": 0.9}]}
        for study in ("add", "max+med+add") for d in (16, 32, 64) for s in range(2)
    ]  # fmt: skip
    path = tmp_path / "gpu-run.json"
    science = {"recipe": "small", "mod": 10, "steps": 200, "runs": runs}
    path.write_text(json.dumps({"tiny": False, "science": science}))
    grids = load_grids([path])
    assert sorted(g.name for g in grids) == [
        f"gpu-run {study} @{step}" for study in ("add", "max+med+add") for step in (100, 200)
    ]
    first = next(g for g in grids if g.name == "gpu-run add @100")
    assert first.runs[:2] == ((16, 0.15), (16, 0.16)) and first.sizes == [16, 32, 64]
    assert 0.1 < first.settings.chance < 0.2  # the majority answer's rate of ADD mod 10
    del science["runs"][0]["budget"]  # a study whose runs keep the end only: one grid
    path.write_text(json.dumps({"tiny": False, "science": science}))
    names = sorted(g.name for g in load_grids([path]))
    assert names == ["gpu-run add @end", "gpu-run max+med+add @100", "gpu-run max+med+add @200"]


@pytest.mark.slow
def test_bench_search_replays_a_report_and_prints_its_tables(tmp_path, cli):
    path = _report(tmp_path, _clean(at=20))
    out = cli(["bench", "search", "--replay", str(path), "--runs", "4", "--orders", "1", "--json"])
    assert out.exit_code == 0, (out.stderr[-2000:], out.exception)
    result = json.loads(out.stdout)
    assert [g["name"] for g in result["grids"]] == ["listops10-add-add-test"]
    assert set(result["summary"]) == {"sampler", "psi", "bisection", "random"}
    assert {"stop", "4"} <= set(result["summary"]["sampler"])
    out = cli(["bench", "search", "--replay", str(tmp_path / "nothing.json")])
    assert out.exit_code != 0 and "no such file" in out.stderr


# --- dense grids (threshold grid's records) ----------------------------------------------------

DENSE = tuple(range(4, 24))  # 20 sizes: 16 for the user's grid, and some to spare


def _dense_record(tmp_path, seeds: int = 3, x80: float = np.log(3000.0)):
    """A dense grid's record (as threshold.search.grid.export_record writes it) of bimodal runs:
    a seed learns (0.95) with a probability rising in ln(params) through ``x80``, else stays
    near chance; read at two checkpoints, the first all at chance (a bound)."""
    rng = np.random.default_rng(0)
    params = {d: 12 * d * d + 100 * d for d in DENSE}
    runs = []
    for d in DENSE:
        for r in range(seeds):
            learns = rng.random() < 1 / (1 + np.exp(-4 * (np.log(params[d]) - x80)))
            y = 0.95 if learns else 0.1 + 0.02 * rng.random()
            budget = [
                {"step": step, "accuracy": a, "sampled_accuracy": a, "reached": True}
                for step, a in ((50, 0.1), (100, y))
            ]
            runs.append({"d": d, "replicate": r, "value": y, "budget": budget})
    record = {
        "kind": "threshold grid", "study": "grid-test", "decoding": "greedy", "chance": 0.1,
        "level": 0.8, "chance_corrected": False, "checkpoint_steps": [50, 100],
        "params": {str(d): p for d, p in params.items()},
        "settings": {"task": json.dumps({"n_test": 2000})}, "runs": runs,
    }  # fmt: skip
    path = tmp_path / "grid-test.json"
    path.write_text(json.dumps(record))
    return path


def test_a_grid_still_training_is_left_out(tmp_path):
    path = _dense_record(tmp_path)
    record = json.loads(path.read_text())
    record["n_cells"] = len(record["runs"]) + 1  # one cell not yet trained
    path.write_text(json.dumps(record))
    assert load_grids([path]) == []
    record["n_cells"] -= 1
    path.write_text(json.dumps(record))
    assert len(load_grids([path])) == 2  # whole: a grid a checkpoint


def test_a_dense_record_is_a_grid_at_each_checkpoint_read_in_seed_order(tmp_path):
    grids = {g.name: g for g in load_grids([_dense_record(tmp_path)])}
    assert sorted(grids) == ["grid-test @100", "grid-test @50"]
    early, late = grids["grid-test @50"], grids["grid-test @100"]
    assert early.dense and late.dense and late.trials == 2000
    assert late.sizes == list(DENSE) and len(late.runs) == 3 * len(DENSE)
    assert all(y == 0.1 for _, y in early.runs)  # the first checkpoint's accuracies
    assert [d for d, _ in late.runs[:4]] == [4, 4, 4, 5]  # by size, replicates in order


def test_the_users_grid_the_samplers_stop_and_the_skeptics_figure(tmp_path):
    begun = []
    result = bench_replay(
        [_dense_record(tmp_path)], methods=("sampler", "grid48"), counts=(6, 12), orders=2,
        on_grid=lambda i, n, grid: begun.append((i, n, grid.name)),
    )  # fmt: skip
    assert begun == [(0, 2, "grid-test @50"), (1, 2, "grid-test @100")]  # a line a grid
    grids = {g["name"]: g for g in result["grids"]}
    out = grids["grid-test @100"]
    # a dense grid is replayed once a seed order: two studies a user could have run
    assert len(out["methods"]["sampler"]) == len(out["methods"]["grid48"]) == 2
    assert result["summary"]["sampler"]["stop"]["replays_located"] == 2
    user = out["methods"]["grid48"][0]["stop"]
    assert user["runs"] == 48
    assert out["reference"]["kind"] == "point"
    own = out["methods"]["sampler"][0]["stop"]
    assert own["runs"] < user["runs"]  # the promise: fewer runs than the grid a user would run
    assert {"x", "lo", "hi"} <= set(own)  # the interval the figure draws
    bound = grids["grid-test @50"]
    assert bound["reference"]["kind"] != "point"  # no run learned by step 50: a bound
    assert not bound["methods"]["sampler"][0]["stop"]["located"]
    path = replay_figure(result, tmp_path / "replay.png")
    assert path is not None and path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    bound_only = {**result, "grids": [bound]}
    assert replay_figure(bound_only, tmp_path / "none.png") is None
    # its rows in the record's words where they are given, the checkpoint's steps beside them
    words = {str(Path(out["source"]).resolve()): "listops10 max (max)"}
    assert grid_label(out, words) == "listops10 max (max), 100 steps"
    assert grid_label(out, {}) == "grid-test @100"
    assert replay_figure(result, tmp_path / "words.png", words) is not None


def test_the_users_grid_needs_a_dense_grid(tmp_path):
    (grid,) = load_grids([_report(tmp_path, _clean())])
    assert "grid48" not in replay_grid(grid, methods=("grid48",))["methods"]


@pytest.mark.slow  # psignifit's grid posterior: seconds a fit (the bench extra)
def test_psignifit_reads_a_dense_grid_beside_ours(tmp_path):
    pytest.importorskip("psignifit")
    grids = {g.name: g for g in load_grids([_dense_record(tmp_path)])}
    out = replay_grid(
        grids["grid-test @100"], methods=("sampler",), counts=(12, 24), orders=1, peer=True
    )
    peer, ours = out["peer_reference"], out["reference"]
    assert peer["lo"] < peer["x"] < peer["hi"]
    assert abs(peer["x"] - ours["x"]) < 0.5  # the same runs: readings within 1.65x
    assert set(out["calibration"]) == {"12", "24"}
    (at24,) = out["calibration"]["24"]  # one seed order
    for read in at24.values():
        assert read["width"] > 0


def test_the_oracle_aims_at_the_answer_and_errors_are_also_read_against_the_grid_held_out(
    tmp_path,
):
    grids = {g.name: g for g in load_grids([_dense_record(tmp_path)])}
    grid = grids["grid-test @100"]
    out = replay_grid(grid, methods=("oracle", "grid48"), counts=(6,), orders=1)
    ref = out["reference"]
    xs = grid.settings.x_of(np.array(grid.sizes))
    aims = {grid.sizes[int(np.argmin(np.abs(xs - ref[k])))] for k in ("x", "lo", "hi")}
    runs, stop = _oracle(grid, ref)
    assert runs[0][0] == grid.sizes[-1]  # the ceiling first
    assert {d for d, _ in runs[1:7]} <= aims  # then only where the answer is
    assert sorted(runs) == sorted(grid.runs) and 3 <= stop <= len(runs)
    (oracle,) = out["methods"]["oracle"]
    assert oracle["stop"]["runs"] == stop and "6" in oracle
    # held out: the error against the grid read without the method's runs, not the same number
    (user,) = out["methods"]["grid48"]
    for score in (oracle["stop"], user["stop"]):
        assert np.isfinite(score["heldout_error"])
    assert user["stop"]["heldout_error"] != user["stop"]["error"]
    rest = list(grid.runs)
    for run in user_grid(grid):
        rest.remove(run)
    x_rest = reading(grid.settings, sorted(rest, reverse=True))["x"]
    assert user["stop"]["heldout_error"] == pytest.approx(user["stop"]["x"] - x_rest)
    assert "oracle" not in replay_grid(grids["grid-test @50"], methods=("oracle",))["methods"]
    # spread by the grid's own curve: the median, halfway up the rise, and as far above
    half = _halfway(grid)
    assert xs[0] < half < ref["x"]
    spread = {grid.sizes[int(np.argmin(np.abs(xs - t)))]
              for t in (ref["x"], half, 2 * ref["x"] - half)}  # fmt: skip
    runs, _ = _oracle(grid, ref, spread=True)
    assert {d for d, _ in runs[1:7]} == spread and len(spread) == 3


def test_calibration_says_how_wide_each_readers_intervals_needed_to_be():
    def replay(err_ours, err_peer):  # intervals 1.0 wide (ours) and 2.0 (psignifit)
        return {
            "ours": {"width": 1.0, "covered": abs(err_ours) <= 0.5, "error": err_ours},
            "psignifit": {"width": 2.0, "covered": abs(err_peer) <= 1.0, "error": err_peer},
        }

    errors = [0.05 * i for i in range(10)]  # 0 to 0.45: all inside both intervals
    point = {"kind": "point"}
    grids = [
        {"reference": point, "calibration": {"12": [replay(e, -e) for e in errors]}},
        {"reference": {"kind": "lower bound"}, "calibration": {"12": [replay(9.0, 9.0)]}},
    ]
    (row,) = calibration_summary(grids).values()
    assert row["replays"] == 10 and row["ours_coverage"] == row["psignifit_coverage"] == 1.0
    assert row["width_ratio"] == 0.5
    # the 90th percentile |error| over the half-width: 0.405 / 0.5 and 0.405 / 1.0
    assert row["ours_scale"] == pytest.approx(0.81) and row["psignifit_scale"] == (
        pytest.approx(0.405)
    )
