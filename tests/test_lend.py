"""A lend carries a suite on from one lent GPU to the next: two short lends in a row (the first
cut mid-run, state out; the second from that state, state in) end with every study and every run
the suite's uninterrupted run has, bit for bit, and return at most eight files."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import torch

from threshold.search.record import read_study, study_names
from threshold.suite import lend, load_suite, parse_suite
from threshold.suite.lend import DATABASE, RECORD_FILE, STATE_FILE, run_lend, unpack_state
from threshold.train.checkpoint import load_checkpoint

ROOT = Path(__file__).resolve().parent.parent

# Two studies of tiny runs (MAX mod 5 of depth 1, d 4..16, 100 steps), the three trials of each
# trained at once, the two studies together (shared workers): a cut leaves six runs unfinished.
TINY = """\
name = "tinylend"
workers = 1
trials_at_once = 3
heartbeat = 2

[defaults]
mod = 5
depth = 1
n_train = 1500
n_test = 100
d_lo = 4
d_hi = 16
budget = 3  # the initial bracket, one batch
recipe = "small"  # the GPU suite's recipes decay over a fixed span, as checkpoints need
steps = 100
checkpoints = [0.5, 1.0]  # budget checkpoints: kept in the training state across the cut

[[study]]
label = "a"
tasks = ["max"]

[[study]]
label = "b"
tasks = ["max", "min"]
measure = "max"
"""


def runs_of(
    state: Path, work: Path, names: dict[str, str], checkpoints: list[Path]
) -> dict[str, list[dict]]:
    """Each study's completed runs in the lend state in folder ``state`` (unpacked into
    ``work``, with the checkpoints the lends in ``checkpoints`` returned), by (d, seed): what they
    measured and their trained weights; none for a study not started."""
    unpack_state(state, work)
    for folder in checkpoints:  # each lend's finished runs
        lend.unpack_checkpoints(folder, work)
    url = f"sqlite:///{work / DATABASE}"
    known = set(study_names(url))
    found = {}
    for label, name in names.items():
        runs = read_study(url, name).runs if name in known else ()
        found[label] = [
            {
                "d": r.d_model,
                "seed": r.seed,
                "accuracy": r.accuracy,
                "sampled": r.sampled_accuracy,
                "budget": r.budget,
                "steps": r.steps,
                "value": r.value,
                "weights": load_checkpoint(work / "artifacts" / r.checkpoint).state_dict,
            }
            for r in sorted((r for r in runs if r.state == "COMPLETE"), key=_key)
        ]
    return found


def _key(r):
    return (r.d_model, r.seed)


# The three lends, in a process of their own: a lend's time ends by interrupting its main thread
# (as Ctrl-C would), which in a test process is pytest's (under xdist, a worker's) to lose.
LENDS = """\
import json, sys
from dataclasses import replace
from pathlib import Path
from threshold.suite import parse_suite
from threshold.suite.lend import run_lend
root = Path(sys.argv[1])
suite = parse_suite((root / "tiny.toml").read_text(), root / "tiny.toml")
suite = replace(suite, execution=suite.execution.but(device="cpu"))
work = root / "work"  # the first lend's unpacked state, watched for its runs' states
whole = run_lend(suite, root / "none", root / "whole", 600, save_every_s=0)
first = run_lend(
    suite, root / "none", root / "one", 600, save_every_s=0, work=work,
    stop_when=lambda: len(list(work.glob("artifacts/training/*/*.state"))) == 6,
)
second = run_lend(suite, root / "one", root / "two", 600, save_every_s=0)
print(json.dumps([whole, first, second]))
"""


@pytest.fixture(scope="module")
def lends(tmp_path_factory):
    """The suite uninterrupted (one lend that finishes it), and as two lends: the first cut as
    soon as each run of its first round (both studies' batches) has saved a training state
    (saved after every step here), the second from the state the first returned."""
    root = tmp_path_factory.mktemp("lend")
    (root / "tiny.toml").write_text(TINY)
    names = {s.label: s.name for s in parse_suite(TINY, root / "tiny.toml").studies}
    (root / "none").mkdir()  # no state yet: the suite starts
    env = os.environ | {"THRESHOLD_CACHE": str(root / "cache"), "PYTHONPATH": str(ROOT)}
    done = subprocess.run(  # the suite's data cache is relative: run in root
        [sys.executable, "-c", LENDS, str(root)], cwd=root, env=env, capture_output=True,
        text=True, timeout=900,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    whole, first, second = json.loads(done.stdout.strip().splitlines()[-1])
    got = {}
    for which, lends in (("whole", ["whole"]), ("one", ["one"]), ("two", ["one", "two"])):
        folders = [root / x for x in lends]
        got[which] = runs_of(root / which, root / f"x-{which}", names, folders)
    return root, (whole, first, second), got


def test_the_first_lend_is_cut_mid_run_and_says_how_far_each_run_got(lends):
    _, (whole, first, _), got = lends
    assert not whole["cut"] and first["cut"]
    for study in first["reached"]:  # the first round: both studies' batches, all mid-run
        assert study["runs"] == 0 and len(study["unfinished"]) == 3, study
        assert all(0 < u["step"] < u["max_steps"] == 100 for u in study["unfinished"]), study
    assert [s["runs"] for s in first["continued"]] == [0, 0]
    assert got["one"]["a"] == [] == got["one"]["b"]
    # each worker's count of CUDA graphs (none on the CPU) reached the record, the cut one's too
    assert whole["capture"] == {"graphs": 0, "failed": 0, "processes": 1}  # one shared worker
    assert first["capture"] == {"graphs": 0, "failed": 0, "processes": 1}


def test_the_second_lend_continues_every_study_and_run_bit_for_bit(lends):
    _, (whole, first, second), got = lends
    assert second["lend"] == 2 and not second["cut"]
    assert second["continued"] == first["reached"]  # what the first left is what the second read
    for label in ("a", "b"):
        want, have = got["whole"][label], got["two"][label]
        assert len(want) == 3, want
        assert [(r["d"], r["seed"]) for r in have] == [(r["d"], r["seed"]) for r in want]
        for w, h in zip(want, have, strict=True):
            for key in ("accuracy", "sampled", "budget", "steps", "value"):
                assert h[key] == w[key], (label, w["d"], key)
            assert h["weights"].keys() == w["weights"].keys()
            for name, tensor in w["weights"].items():
                assert torch.equal(h["weights"][name], tensor), (label, w["d"], name)
    assert [s["unfinished"] for s in second["reached"]] == [[], []]
    assert [s["runs"] for s in whole["reached"]] == [s["runs"] for s in second["reached"]]


def test_a_lend_returns_few_files_and_keeps_its_history(lends, tmp_path):
    root, (_, first, second), _ = lends
    for which, finished in (("one", []), ("two", ["checkpoints-2.tar.gz"])):
        files = [p for p in (root / which).rglob("*") if p.is_file()]
        assert sorted(p.name for p in files) == [*finished, RECORD_FILE, STATE_FILE]
        assert len(files) <= 8
    with tarfile.open(root / "two" / STATE_FILE) as tar:  # no checkpoint carried to the next
        stored = [n for n in tar.getnames() if n.startswith("artifacts")]
        assert all(n == "artifacts/training" or n.startswith("artifacts/training/") for n in stored)
    with tarfile.open(root / "two" / "checkpoints-2.tar.gz") as tar:
        assert len([n for n in tar.getnames() if n.startswith("artifacts/")]) == 6  # 2 x 3 runs
    history = unpack_state(root / "two", tmp_path)
    assert [h["lend"] for h in history] == [1, 2]
    assert [h["cut"] for h in history] == [True, False]
    assert history[0]["reached"]["a"]["unfinished"] == [
        [u["d"], u["step"]] for u in first["reached"][0]["unfinished"]
    ]
    assert second["state_bytes"] == (root / "two" / STATE_FILE).stat().st_size


# The first lend's command (.ci/gpu first) with its deadlines scaled for the CPU: its parts'
# own (CUDA tests, checks, throughput) and the whole's; the lend gets the rest less its margin
FIRST_LEND = {"TESTS_S": 20, "CHECKS_S": 30, "THROUGHPUT_S": 25, "LIMIT_S": 30 + 20 + 30 + 25}


@pytest.mark.slow  # two lends and the first lend's parts on the CPU: about 80 s
def test_the_lend_script_runs_two_lends_on_the_cpu(tmp_path):
    """``.ci/gpu`` with ``DEVICE=cpu``: the lend's command, twice, the second from the state the
    first returned, each cut by its time wherever the suite is (the API's test above checks the
    runs); each returns at most eight files, and the second's log says what it continues. The
    first is the first lend's command (``first``: the CUDA tests, skipped here, the engine's
    checks and the throughput before the lend), its deadlines scaled: every part ends within
    its own, the whole within its limit, and what comes back is at most eight files of at most
    16 MiB, two folders deep at most."""
    one = TINY.split('[[study]]\nlabel = "b"')[0]  # study a alone: the script, not the search
    (tmp_path / "one.toml").write_text(one)
    state = tmp_path / "state"
    state.mkdir()
    records = []
    for n in (1, 2):
        out = tmp_path / f"out{n}"
        env = os.environ | {
            "OUT": str(out),
            "DEVICE": "cpu",
            "SUITE": str(tmp_path / "one.toml"),
            "STATE": str(state),
            "LIMIT_S": "30",  # a few seconds of lend (5 at least), cut wherever it is
            # for its start (python, torch: 5 s on a busy CPU), stopping and packing: its
            # deadline is LIMIT_S less what ran before and 5 s, SIGKILL 5 s after
            "MARGIN_S": "20",
            "TESTS": "0",
            "THRESHOLD_CACHE": str(tmp_path / "cache"),
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",  # python3
        }
        command = ["bash", ".ci/gpu"]
        if n == 1:
            env |= {key: str(value) for key, value in FIRST_LEND.items()} | {"TESTS": "1"}
            command.append("first")
        done = subprocess.run(
            command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
        )
        assert done.returncode == 0, done.stdout + done.stderr
        log = (out / "lend.log").read_text()
        assert "lend exit 0" in log, log[-3000:]
        files = [p.relative_to(out) for p in out.rglob("*") if p.is_file()]
        names = sorted(p.name for p in files)
        assert {RECORD_FILE, "lend.log", STATE_FILE} <= set(names) and len(files) <= 8, files
        assert all(len(p.parts) <= 3 for p in files), files  # two folders deep at most
        assert all((out / p).stat().st_size <= 16 * 2**20 for p in files)
        (state / STATE_FILE).write_bytes((out / STATE_FILE).read_bytes())  # as a commit would
        records.append(json.loads((out / RECORD_FILE).read_text()))
        if n == 1:
            _within_deadlines(log, out)
    assert [r["lend"] for r in records] == [1, 2]
    assert records[1]["continued"] == records[0]["reached"]
    assert "lend 2 of suite tinylend continues:" in log
    assert "capture: 0 graphs, 0 failed" in log  # the lend's proof of its graphs (none here)


def _within_deadlines(log: str, out: Path) -> None:
    """Each part of the first lend's log ended within its deadline (``NAME (deadline S s)``,
    then ``NAME exit RC after T s``) and the whole within ``LIMIT_S``; the throughput part's
    record came back, its rows measured, cut at the deadline or skipped after it."""
    caps = dict(re.findall(r"\) (.+) \(deadline (\d+) s\)", log))
    took = {
        name: (int(rc), int(t))
        for name, rc, t in re.findall(r"\) (.+) exit (\d+) after (\d+) s", log)
    }
    assert set(caps) == set(took) == {"CUDA tests", "checks", "throughput", "lend"}, log
    for name, (_, seconds) in took.items():
        assert seconds <= int(caps[name]) + 1, (name, seconds, caps[name])
    for name, key in (
        ("CUDA tests", "TESTS_S"),
        ("checks", "CHECKS_S"),
        ("throughput", "THROUGHPUT_S"),
    ):
        assert int(caps[name]) == FIRST_LEND[key]
    whole = int(re.findall(r"\((\d+) s\) done", log)[-1])
    assert whole <= FIRST_LEND["LIMIT_S"], log
    (record,) = (out / "throughput").glob("gpu-*.json")  # its summary is made again here
    rows = json.loads(record.read_text())["throughput"]
    assert rows and all(
        "model_steps_per_s" in r or r["error"].startswith(("cut at the part's", "skipped:"))
        for r in rows
    ), rows
    assert not list(out.rglob("*.md"))


def test_a_state_larger_than_a_returned_file_comes_in_parts(tmp_path, monkeypatch):
    """Past 15 MiB (the lent machine returns 16 MiB a file) the state is cut into numbered parts,
    read back whole; a new state replaces the old one's files, whole or in parts."""
    work, out = tmp_path / "work", tmp_path / "out"
    (work / "artifacts" / "training").mkdir(parents=True)
    blob = os.urandom(50_000)  # the weights of a run barely compress
    (work / "artifacts" / "training" / "d8-seed1.state").write_bytes(blob)
    monkeypatch.setattr(lend, "PART_BYTES", 20_000)
    size = lend.pack_state(work, out, [{"lend": 1}])
    parts = lend.state_files(out)
    assert [p.name for p in parts] == [f"{STATE_FILE}.{n}" for n in (1, 2, 3)]
    assert sum(p.stat().st_size for p in parts) == size and size > 50_000
    assert unpack_state(out, tmp_path / "back") == [{"lend": 1}]
    assert (tmp_path / "back" / "artifacts" / "training" / "d8-seed1.state").read_bytes() == blob
    monkeypatch.setattr(lend, "PART_BYTES", 10**9)
    lend.pack_state(work, out, [{"lend": 2}])
    assert sorted(p.name for p in out.iterdir()) == [STATE_FILE]


def test_pretrained_models_travel_with_the_state(tmp_path):
    """A transfer study's pretrained models (the data cache's ``pretrained/``) go into the state
    when made during a lend and back into the cache at the next, so no run is pretrained twice."""
    work, cache = tmp_path / "work", tmp_path / "cache"
    (cache / "pretrained").mkdir(parents=True)
    (cache / "pretrained" / "old.ckpt").write_bytes(b"made before this lend")
    os.utime(cache / "pretrained" / "old.ckpt", (0, 0))
    keep = lend._carry_pretrained(work, cache)
    (cache / "pretrained" / "new.ckpt").write_bytes(b"made by this lend")
    keep()
    assert sorted(p.name for p in (work / "pretrained").iterdir()) == ["new.ckpt"]
    lend.pack_state(work, tmp_path / "out", [])
    again, fresh = tmp_path / "again", tmp_path / "fresh"
    unpack_state(tmp_path / "out", again)
    lend._carry_pretrained(again, fresh)
    assert (fresh / "pretrained" / "new.ckpt").read_bytes() == b"made by this lend"


def test_the_gpu_suite_asks_the_issues_questions_in_its_order():
    """``studies/gpu.toml``: item 1 (the mixture and ADD alone under ``paper`` to 100,000 steps,
    read at an eighth, a quarter, a half and all of it), then item 2 under ``small`` at 30,000
    steps, each study one pack of 16 runs."""
    suite = load_suite(ROOT / "studies" / "gpu.toml")
    assert suite.execution.trials_at_once == 16 and suite.execution.workers == 1
    labels = [s.label for s in suite.studies]
    assert labels[:2] == ["max-med-add-paper", "add-paper"]
    for study in suite.studies:
        train, search = study.settings.train, study.settings.search
        paper = study.label.endswith("-paper")
        assert train.max_steps == (100_000 if paper else 30_000), study.label
        assert (1.0 in train.checkpoints) and len(train.checkpoints) >= 3, study.label
        assert search.budget == 16
    order = ["add", "add-after-max-med", "add20", "add-prod20", "add43", "add-prod43", "add45"]
    assert labels[2:] == [*order, "add-prod45", "add-nadd", "perm3-mul", "perm3-mul-sgn-img"]
    assert suite.study("add-after-max-med").settings.pretrain == ("max", "med")
    assert {suite.study(x).settings.task.n for x in ("add-paper", "add", "add-nadd")} == {10}


def test_a_state_folder_that_is_not_there_is_refused(tmp_path):
    """A mistyped ``--state`` would start the suite anew and its state would replace the real
    one: refused, one line naming the folder, nothing written."""
    suite = parse_suite(TINY, tmp_path / "tiny.toml")
    with pytest.raises(lend.LendError, match="does not exist"):
        run_lend(suite, tmp_path / "typo", tmp_path / "out", 5)
    assert not (tmp_path / "out").exists()
