"""``threshold bench gpu`` on the CPU (tiny settings): the wiring CI can prove without a GPU."""

import json
import os
import subprocess
import sys
import tarfile
import time
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from threshold.config import TrainConfig, model_config_for
from threshold.search.bench import gpu
from threshold.search.bench.gpu import (
    _factor,
    _free_stem,
    _point,
    _seconds_per_step,
    _steps_to_learn,
    _time_limited,
    _timed_captures,
)
from threshold.tasks import TaskConfig, load_task_data
from threshold.train.bench import timed_steps
from threshold.train.checkpoint import load_checkpoint
from threshold.train.engine import start_pack
from threshold.train.gpu import Spec, throughput
from threshold.train.run import Run


def test_bench_gpu_on_the_cpu_writes_its_record_and_summary(tmp_path, cli):
    out = cli(["bench", "gpu", "--device", "cpu", "--out", tmp_path, "--cache-dir",
               tmp_path / "cache"])  # fmt: skip
    assert out.exit_code == 0, (out.stderr[-3000:], out.exception)
    (record_path,) = tmp_path.glob("gpu-*.json")
    record = json.loads(record_path.read_text())
    assert record["tiny"] and record["torch"].startswith("2.")
    assert all(check["ok"] for check in record["checks"].values()), record["checks"]
    rows = record["throughput"]
    paths = {"eager", "graphs", "planned", "peer vmap", "peer plain"}
    assert {r["path"] for r in rows} == paths and all("error" not in r for r in rows)
    assert all(r["model_steps_per_s"] > 0 and r["tokens_per_s"] > 0 for r in rows)
    (planned,) = [r for r in rows if r["path"] == "planned"]  # d 8 and 12: packs by width
    assert planned["packs"] == [2, 2] and planned["weight_share"] == 1
    assert planned["graphs_before"] == planned["graphs_after"]
    engine = [r for r in rows if r["path"] in ("eager", "graphs")]
    # one pack padded to d 12: one member of d 8 and 12 each is no padding
    assert all((r["weight_share"] == 1) == (r["members"] == 1) for r in engine), engine
    kinds = {("fast", "fp32"), ("fast", "bf16"), ("paper", "fp32")}
    assert {(r["recipe"], r["precision"]) for r in engine} == kinds
    # the static step's flat layout: whole sequences nearly all useful, windows all; the eager
    # step's rows padded to their longest less; the host's ms a step (a chunk of draws, shared
    # out) well under the step's own
    assert all(r["useful_share"] > (0.9 if r["path"] == "graphs" else 0.5) for r in engine)
    assert all(r["useful_share"] == 1 for r in engine if r["recipe"] == "paper")
    assert all(0 < r["host_batch_ms"] < r["step_ms"] and r["device_step_ms"] > 0 for r in engine)
    science = record["science"]
    assert science["steps"] == 40 and len(science["runs"]) == 8
    assert {r["stop_reason"] for r in science["runs"]} <= {"learned", "max_steps"}
    for r in science["runs"]:  # each validation's ADD (or MAX+MED+ADD's ADD) accuracy
        assert r["val_tf"] and r["val_tf"][-1][0] == r["steps"]
        assert all(0 <= acc <= 1 for _, acc in r["val_tf"])
        # and its test accuracy at every budget checkpoint: a grid a checkpoint to replay
        assert [b["step"] for b in r["budget"]] == [20, 40]
        assert r["budget"][-1]["accuracy"] == r["accuracy"]
    assert [row["step"] for row in science["budget"]] == [20, 40]
    for row in science["budget"]:
        assert (
            row["factor"]["interval"][0] <= row["factor"]["factor"] <= row["factor"]["interval"][1]
        )
        # A side its runs do not locate makes the factor a bound (threshold.search.bounds)
        kinds = {row["add"]["located"], row["max+med+add"]["located"]}
        assert kinds <= {"point", "lower bound", "upper bound", "none"}
        assert (row["factor"]["bound"]["form"] == "point") == (kinds == {"point"})
    (models,) = tmp_path.glob("gpu-*-models.tar.gz")  # every trained model, for the analyses
    assert science["models"] == models.name
    with tarfile.open(models) as tar:
        names = sorted(tar.getnames())
        assert len(names) == 8 and names[0] == "add-d16-seed0.pt"
        tar.extract(names[-1], tmp_path, filter="data")
    assert load_checkpoint(tmp_path / names[-1]).metrics["study"] == "max+med+add"
    summary = record_path.with_suffix(".md").read_text()
    assert record["capture"] == {"graphs": 0, "failed": 0}  # no CUDA graphs on the CPU
    assert "capture: 0 graphs, 0 failed." in summary
    assert "No row captured a CUDA graph inside its timed steps." in summary
    assert "## Engine against the CPU" in summary and "## Science pair" in summary
    assert "| graphs |" in summary and "only bounds it" in summary
    assert "Steps to learn ADD" in summary and "| 16 |" in summary


def test_bench_gpu_refuses_a_part_it_does_not_have(tmp_path, cli):
    out = cli(["bench", "gpu", "--device", "cpu", "--parts", "checks,plots", "--out", tmp_path])
    assert out.exit_code != 0
    assert "--parts 'checks,plots' is not allowed" in out.stderr
    assert "checks, throughput, science" in out.stderr and not list(tmp_path.glob("gpu-*"))


@pytest.mark.parametrize(
    ("sizes", "words"),
    [
        ("32", "give two or more positive sizes"),
        ("16,x", "is not an integer"),
        ("16,16", "repeats"),
    ],
)
def test_bench_gpu_refuses_science_sizes_it_cannot_run(tmp_path, cli, sizes, words):
    out = cli(["bench", "gpu", "--device", "cpu", "--sizes", sizes, "--out", tmp_path])
    assert out.exit_code != 0 and words in out.stderr and not list(tmp_path.glob("gpu-*"))


def test_bench_gpu_runs_the_seeds_it_is_asked_for(tmp_path, cli):
    out = cli(["bench", "gpu", "--device", "cpu", "--parts", "science", "--seeds", "3", "--out",
               tmp_path, "--cache-dir", tmp_path / "cache"])  # fmt: skip
    assert out.exit_code == 0, (out.stderr[-3000:], out.exception)
    (record_path,) = tmp_path.glob("gpu-*.json")
    science = json.loads(record_path.read_text())["science"]
    assert science["seeds"] == 3 and len(science["runs"]) == 12  # 2 studies x 2 sizes x 3 seeds
    assert {r["seed"] for r in science["runs"]} == {0, 1, 2}
    assert "3 seeds" in record_path.with_suffix(".md").read_text()


def test_bench_gpu_runs_the_pair_on_the_split_it_is_asked_for(tmp_path, cli):
    """--split triples: the group's held-out triples (issue 59), so a lend can pair the splits."""
    bad = cli(["bench", "gpu", "--device", "cpu", "--split", "pairs", "--out", tmp_path])
    assert bad.exit_code != 0 and "split 'pairs' is not allowed" in bad.stderr
    args = ["--parts", "science", "--seeds", "1", "--split", "triples"]
    out = cli(["bench", "gpu", "--device", "cpu", *args, "--out", tmp_path, "--cache-dir",
               tmp_path / "cache"])  # fmt: skip
    assert out.exit_code == 0, (out.stderr[-3000:], out.exception)
    (record_path,) = tmp_path.glob("gpu-*.json")
    science = json.loads(record_path.read_text())["science"]
    assert science["split"] == "triples" and science["recipe"] == "small"
    assert "small recipe, split triples" in record_path.with_suffix(".md").read_text()


def test_the_science_pair_notes_its_progress_as_it_trains(tmp_path, monkeypatch):
    """A progress line every NOTE_EVERY_S seconds (here every notice), so a log that a lend's
    time limit cut off still says how far the pair got."""
    monkeypatch.setattr(gpu, "NOTE_EVERY_S", 0.0)
    notes = []
    out = gpu.science_pair(torch.device("cpu"), 60, tiny=True, cache_dir=tmp_path,
                           note=notes.append, seeds=1)  # fmt: skip
    lines = [n.split() for n in notes if n.startswith("science pair: step")]
    steps = [int(words[3].replace(",", "")) for words in lines]
    assert steps and max(steps) == out["steps"] == 40 and steps == sorted(steps), notes


def test_bench_gpu_refuses_a_recipe_whose_schedule_follows_the_budget(tmp_path, cli):
    out = cli(["bench", "gpu", "--device", "cpu", "--recipe", "fast", "--out", tmp_path])
    assert out.exit_code != 0 and "--recipe 'fast' is not allowed" in out.stderr
    assert not list(tmp_path.glob("gpu-*"))


def test_bench_gpu_refuses_no_seeds(tmp_path, cli):
    out = cli(["bench", "gpu", "--device", "cpu", "--seeds", "0", "--out", tmp_path])
    assert out.exit_code != 0 and "--seeds 0 is not allowed" in out.stderr


def test_a_study_its_runs_only_bound_shows_their_bound_before_the_posterior():
    estimate = {"params_p80": 120000.0, "interval_params": [43360.0, 414900.0]}
    bounded = estimate | {"located": "lower bound", "bound_params": 16096.0, "bound_d": 32}
    assert _point(bounded) == "> 16,096 (d 32; posterior 120,000 (43,360-414,900))"
    assert _point(estimate | {"located": "point"}) == "120,000 (43,360-414,900)"
    late = bounded | {"first_d": 40, "out_of_order": [101, 128]}  # what pulls the posterior up
    assert _point(late) == (
        "> 16,096 (d 32; d 101, 128 short after d 40 learned; posterior 120,000 (43,360-414,900))"
    )
    upper = late | {"located": "upper bound"}  # larger sizes short do not pull a point down
    assert _point(upper) == "<= 16,096 (d 32; posterior 120,000 (43,360-414,900))"
    neither = late | {"located": "none", "bound_params": None, "bound_d": None}
    assert _point(neither) == (
        "120,000 (43,360-414,900), none (d 101, 128 short after d 40 learned)"
    )
    older = estimate | {"located": "lower bound"}  # a record from before the bound was kept
    assert _point(older) == "120,000 (43,360-414,900), lower bound"


def test_a_bounded_factor_keeps_the_posterior_beside_the_bound():
    posterior = {"factor": 1.675, "interval": [0.862, 4.937]}
    assert _factor(posterior | {"bound": {"form": "point"}}) == "1.68x (0.86-4.94)"
    bound = {"form": "lower bound", "value": 0.5147, "at_median": 0.8797}
    assert _factor(posterior | {"bound": bound}) == (
        "at least 0.51x (0.88x at the median; posterior 1.68x (0.86-4.94))"
    )


def test_runs_the_time_limit_ended_early_are_named_with_the_step_they_reached():
    runs = [{"steps": 19943}, {"steps": 19943}]
    words = _time_limited({"steps": 22600, "runs": runs})
    assert "by step 19,943" in words and "past step 19,943" in words
    assert _time_limited({"steps": 22600, "runs": [{"steps": 22600}, *runs]}) == ""
    learned = {"steps": 12000, "stop_reason": "learned"}
    timed = {"steps": 19943, "stop_reason": "time_limit"}
    assert _time_limited({"steps": 22600, "runs": [learned, learned]}) == ""
    words = _time_limited({"steps": 22600, "runs": [learned, timed]})
    assert "ended 1 of 2 runs by step 19,943" in words


def test_a_later_call_of_the_same_day_and_commit_writes_beside_the_first(tmp_path):
    stem = "gpu-2026-11-27-796d23377e"
    assert _free_stem(tmp_path, stem) == stem
    (tmp_path / f"{stem}.json").write_text("{}")
    assert _free_stem(tmp_path, stem) == f"{stem}-2"
    (tmp_path / f"{stem}-2.json").write_text("{}")
    assert _free_stem(tmp_path, stem) == f"{stem}-3"


def test_the_plan_times_a_step_at_the_pace_training_keeps(tmp_path):
    task = TaskConfig(ops=("max",), n=5, depth=1, n_train=200, n_test=20, n_val=20)
    data = load_task_data(task, tmp_path)
    cfg = TrainConfig(batch_size=8)
    runs = [Run(model_config_for(task, d, cfg), data, replace(cfg, seed=d)) for d in (8, 16)]
    rate = _seconds_per_step(runs, torch.device("cpu"), steps=6)
    pack = start_pack(list(enumerate(runs)), torch.device("cpu"))
    pace = timed_steps(pack, 12, 0, torch.device("cpu"))[0] / 12
    assert 0.2 * pace < rate < 5 * pace


def test_steps_to_learn_are_each_runs_first_validation_past_the_level():
    def run(study, seed, accs):
        val_tf = [[step, acc] for step, acc in zip((500, 1000, 1500), accs, strict=True)]
        return {"study": study, "d": 64, "seed": seed, "val_tf": val_tf}

    sci = {
        "sizes": [64],
        "val_every": 500,
        "runs": [
            run("add", 0, (0.1, 0.2, 0.6)),
            run("add", 1, (0.1, 0.2, 0.3)),
            run("max+med+add", 0, (0.6, 0.9, 0.9)),
            run("max+med+add", 1, (0.2, 0.5, 0.9)),
        ],
    }
    assert _steps_to_learn(sci)[-1] == "| 64 | 1,500 / > 1,500 | 500 / 1,000 |"
    old = {**sci, "runs": [{k: v for k, v in r.items() if k != "val_tf"} for r in sci["runs"]]}
    assert _steps_to_learn(old) == []  # records from before the validations were kept


def test_the_prepared_command_for_a_lent_gpu_runs_every_step(tmp_path):
    """``.ci/gpu pair``, the lent GPU's quick check, here on tiny settings (``DEVICE=cpu``): the
    checks, the CUDA tests (skipped here) and the science pair, each step's outcome in the log;
    the pair under ``--recipe paper`` (128-token windows), read on sampled accuracy."""
    root = Path(__file__).resolve().parents[1]
    out = tmp_path / "out"
    env = os.environ | {
        "OUT": str(out),
        "DEVICE": "cpu",
        "THRESHOLD_CACHE": str(tmp_path / "cache"),
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",  # python3
    }
    command = ["bash", ".ci/gpu", "pair", "--seeds", "1", "--recipe", "paper"]
    done = subprocess.run(command, cwd=root, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    log = (out / "lend.log").read_text()
    assert "checks exit 0" in log and "science exit 0" in log, log[-3000:]
    tests = next(line for line in log.splitlines() if " deselected in " in line)
    assert "skipped" in tests and "passed" not in tests and "failed" not in tests  # no GPU here
    (checks,) = (out / "checks").glob("gpu-*.json")
    assert all(c["ok"] for c in json.loads(checks.read_text())["checks"].values())
    (record_path,) = (out / "science").glob("gpu-*.json")
    science = json.loads(record_path.read_text())["science"]
    assert science["recipe"] == "paper" and science["decoding"] == "sampled"
    assert science["steps"] == 40 and len(science["runs"]) == 4  # 2 studies x 2 sizes
    assert all(0 <= r["sampled_accuracy"] <= 1 for r in science["runs"])
    (models,) = (out / "science").glob("gpu-*-models.tar.gz")
    with tarfile.open(models) as tar:
        tar.extract("add-d16-seed0.pt", tmp_path, filter="data")
    kept = load_checkpoint(tmp_path / "add-d16-seed0.pt").train_config
    assert kept["batches"] == "windows" and kept["decoding"] == "sampled"
    summary = record_path.with_suffix(".md").read_text()
    assert "## Science pair (paper recipe, split triples)" in summary  # the recipe's split
    assert "of sampled accuracy" in summary


def test_the_throughput_part_cuts_its_row_in_flight_at_its_deadline(tmp_path):
    """A row that would run for hours is cut at the part's deadline and said so; the rows after
    it are skipped, and the part returns (so a lend's command keeps its time plan)."""
    task = TaskConfig(ops=("max",), n=5, depth=1, n_train=200, n_test=20, n_val=20)
    data = load_task_data(task, tmp_path)
    specs = [Spec("eager", 2, (8,)), Spec("peer plain", 1, (8,))]
    rows = throughput(data, torch.device("cpu"), specs, 10**7, lambda _: None,
                      time.perf_counter() + 2)  # fmt: skip
    assert rows[0]["error"].startswith("cut at the part's deadline after ")
    assert rows[1]["error"] == "skipped: the part's minutes were spent"


def test_the_summary_names_the_rows_that_captured_inside_their_timed_steps():
    rows = [
        {"path": "graphs", "members": 64, "graphs_before": 12, "graphs_after": 12},
        {"path": "graphs", "members": 512, "graphs_before": 9, "graphs_after": 11},
        {"path": "peer vmap", "members": 512},
    ]
    assert _timed_captures(rows).endswith("(slower than replays): graphs 512.")
    assert _timed_captures(rows[:1]) == "No row captured a CUDA graph inside its timed steps."
    assert "did not count" in _timed_captures(rows[2:])  # peers, and records before issue 69
