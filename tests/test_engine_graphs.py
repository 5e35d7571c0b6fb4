"""The engine's CUDA graphs: what is captured and when, and that a replay trains as the eager step.

On the CPU a fake of :class:`threshold.train.graphs.Cuda` stands in for CUDA: its graph records
the step it was given and replays it on the same buffers, so the tests see every capture and
replay the engine asks for, and that the warm-up before a capture leaves no trace. On a GPU the
real graphs: no pack may fall back to eager steps.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from contextlib import contextmanager
from dataclasses import replace

import pytest
import torch

from threshold.config import TrainConfig, model_config_for
from threshold.tasks import TaskConfig, load_task_data
from threshold.train import Run, train_runs
from threshold.train.bench import timed_steps, warm_up
from threshold.train.engine import start_pack, step_pack
from threshold.train.graphs import (
    CAPTURE_FILE_ENV,
    StepGraphs,
    capture_counts,
    capture_words,
    read_capture_counts,
    write_capture_counts,
)

SIZES = [8, 12, 16, 5]  # mixed widths: a padded pack


class FakeCuda:
    """The three CUDA calls of a capture, on the CPU: a recorded graph replays its step."""

    def __init__(self, fail: bool = False) -> None:
        self.fail, self.captures, self.replays, self.sides = fail, 0, 0, 0

    def pool(self):
        return None

    @contextmanager
    def side(self, device):
        try:
            yield
        finally:
            self.sides += 1  # the current stream waits for the side stream, also after a raise

    def record(self, fn, pool):
        if self.fail:
            raise RuntimeError("operation not permitted when stream is capturing")
        self.captures += 1
        out = fn()  # a real capture runs nothing: the graphs put the state back after it

        fake = self

        class Graph:
            def replay(self) -> None:
                fake.replays += 1
                out.copy_(fn())

        return Graph(), out


@pytest.fixture(scope="module")
def max5(tmp_path_factory):
    task = TaskConfig(ops=("max",), n=5, n_train=1000, n_test=20, n_val=20)
    return load_task_data(task, tmp_path_factory.mktemp("c"))


def _pack(data, cuda=None, sizes=SIZES):
    cfg = TrainConfig(max_steps=1000, eval_every=1000, lr=3e-3)
    runs = [Run(model_config_for(data.config, d), data, replace(cfg, seed=d)) for d in sizes]
    pack = start_pack(list(enumerate(runs)), torch.device("cpu"), static=True)
    if cuda is not None:
        pack.graphs = StepGraphs(pack.ens, pack.opt, pack.eager_step, cuda)
    return pack


def test_the_timed_steps_replay_graphs_captured_before_them_and_capture_nothing(max5):
    cuda = FakeCuda()
    pack = _pack(max5, cuda)
    warm_up(pack, 3, 30)
    keys = len(pack.graphs.graphs)
    assert keys > 3  # more shapes than the warm-up steps meet: captured ahead, not by stepping
    captures, replays = cuda.captures, cuda.replays
    timed_steps(pack, 30, 0, torch.device("cpu"))
    assert cuda.captures == captures and len(pack.graphs.graphs) == keys
    assert cuda.replays == replays + 30 and not pack.graphs.failed


def test_the_warm_up_steps_into_a_new_chunk_where_the_one_drawn_is_short(max5):
    cuda = FakeCuda()
    pack = _pack(max5, cuda, [8])
    for _ in range(60):  # 4 batches left of the chunk of 64
        step_pack(pack)
    warm_up(pack, 0, 30)
    assert len(pack.feed.chunk) >= 30
    captures = cuda.captures
    timed_steps(pack, 30, 0, torch.device("cpu"))
    assert cuda.captures == captures


def test_a_replayed_step_trains_as_the_eager_step_bit_for_bit(max5):
    """The capture's warm-up steps (and the fake's recording) are undone: the graphed pack
    trains exactly as the plain static step."""
    cuda = FakeCuda()
    graphed, plain = _pack(max5, cuda), _pack(max5)
    for _ in range(40):
        step_pack(graphed)
        step_pack(plain)
    assert cuda.replays == 40 and cuda.captures == len(graphed.graphs.graphs) > 1
    assert torch.equal(graphed.ens.flat, plain.ens.flat)
    assert torch.equal(graphed.opt.exp_avg_sq, plain.opt.exp_avg_sq)
    assert torch.equal(graphed.smooth, plain.smooth)


def test_a_failed_capture_is_counted_and_leaves_the_step_as_it_was(max5):
    before = capture_counts()
    cuda = FakeCuda(fail=True)
    graphed, plain = _pack(max5, cuda), _pack(max5)
    for _ in range(5):
        step_pack(graphed)
        step_pack(plain)
    assert graphed.graphs.failed and cuda.replays == 0
    after = capture_counts()
    assert after["failed"] == before["failed"] + 1 and after["graphs"] == before["graphs"]
    assert torch.equal(graphed.ens.flat, plain.ens.flat)


def test_a_failed_warm_up_waits_for_its_stream_and_puts_the_state_back(max5):
    cuda = FakeCuda()
    pack = _pack(max5)
    state = [pack.ens.flat.clone(), pack.opt.exp_avg.clone(), pack.opt.steps.clone()]
    calls = []

    def step(spans, n, t, dense):  # the first warm-up step trains, the second fails
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("CUDA error: an illegal memory access")
        return pack.eager_step(spans, n, t, dense)

    graphs = StepGraphs(pack.ens, pack.opt, step, cuda)
    batch = pack.feed.next()
    assert not graphs.capture(batch.spans, batch.n, batch.t, batch.dense)
    assert cuda.sides == 1 and graphs.failed
    now = [pack.ens.flat, pack.opt.exp_avg, pack.opt.steps]
    assert all(torch.equal(a, b) for a, b in zip(now, state, strict=True))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU on this machine")
def test_on_a_gpu_every_pack_is_captured_and_none_falls_back_to_eager(max5):
    before = capture_counts()
    cfg = TrainConfig(max_steps=60, eval_every=30)
    runs = [Run(model_config_for(max5.config, d), max5, replace(cfg, seed=d)) for d in SIZES]
    runs += [replace(r, cfg=replace(r.cfg, precision="bf16")) for r in runs[:2]]
    train_runs(runs, "cuda")
    after = capture_counts()
    assert after["failed"] == before["failed"], "a pack fell back to eager steps"
    assert after["graphs"] > before["graphs"]


def test_the_counts_of_processes_add_up_in_the_file_they_are_written_to(tmp_path, monkeypatch):
    """Each process's latest line counts, once: one that wrote as it started and was then killed
    outright (no cleanup ran) is counted too."""
    path = tmp_path / "captures.jsonl"
    assert read_capture_counts(path) == {"graphs": 0, "failed": 0, "processes": 0}
    monkeypatch.setenv(CAPTURE_FILE_ENV, str(path))
    write_capture_counts()
    write_capture_counts()  # this process again: its latest line replaces its first
    killed = "import os, signal; from threshold.train.graphs import write_capture_counts as w; "
    killed += "w(); os.kill(os.getpid(), signal.SIGKILL)"
    done = subprocess.run([sys.executable, "-c", killed], timeout=120)
    assert done.returncode == -signal.SIGKILL
    mine = capture_counts()
    total = read_capture_counts(path)
    assert len(path.read_text().splitlines()) == 3
    assert total == {"graphs": mine["graphs"], "failed": mine["failed"], "processes": 2}
    assert capture_words(total).startswith(f"capture: {mine['graphs']} graphs, ")
