"""A pack's training step captured as a CUDA graph, replayed every step with new batches.

A step of many tiny models on a GPU is bound by kernel launches (about 200 a step), not by
arithmetic; a CUDA graph replays the whole step (forward, loss, backward, clipping, AdamW) as one
launch. Replays need fixed shapes and fixed addresses, so the engine lays each batch out in one
of a few static shapes (:mod:`threshold.train.layout`) and the step reads everything that changes
from device tensors: the batch's spans are copied into the graph's own
buffer (the step lays them out itself, :func:`threshold.train.layout.lay_out`), the learning
rates live in ``StackedAdamW.lr`` and the step counts in ``StackedAdamW.steps``. One graph is
captured per shape of a pack, on first use (or ahead of it: :meth:`StepGraphs.capture`); a
repacked pack (a member ended) gets new graphs. Capture warms up on a side stream with the real
batch, then puts the weights and optimizer state back as they were, so the captured step is the
step that would have run eagerly. Where capture fails the pack trains eagerly: the log says so,
and the process's count of failed captures (:func:`capture_counts`) says it to whoever asks (the
lend's record, ``bench gpu``'s summary, the CUDA test that fails on any).

The CUDA calls a capture makes are the three methods of :class:`Cuda`; the CPU tests hand
:class:`StepGraphs` a fake of them whose graph replays the step it recorded, to prove what is
captured and when, and that a replayed step trains as the eager one.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import torch

from threshold.train.ensemble import Ensemble
from threshold.train.optimizer import StackedAdamW

__all__ = [
    "CAPTURE_FILE_ENV",
    "Cuda",
    "StepGraphs",
    "capture_counts",
    "capture_words",
    "read_capture_counts",
    "write_capture_counts",
]

log = logging.getLogger(__name__)

WARMUP = 2  # eager steps on a side stream before capture (cuBLAS and autograd set themselves up)
_warned: set[str] = set()
# This process's captures: the graphs captured and the captures that failed (and left their pack
# eager), over every pack; read by capture_counts
_counts = {"graphs": 0, "failed": 0}


# A file the worker processes a lend starts append their counts to (read_capture_counts)
CAPTURE_FILE_ENV = "THRESHOLD_CAPTURE_FILE"


def capture_counts() -> dict[str, int]:
    """The CUDA graphs this process has captured and the captures that failed, so far."""
    return dict(_counts)


def capture_words(counts: dict[str, int]) -> str:
    """``capture: N graphs, M failed``, the line a lend's log and ``bench gpu`` say."""
    return f"capture: {counts['graphs']} graphs, {counts['failed']} failed"


def write_capture_counts() -> None:
    """This process's counts so far appended as one JSON line, with its pid, to the file
    ``$THRESHOLD_CAPTURE_FILE`` names (unset: nothing), for the process that started it: a
    lend's workers write one as they start, after each capture and as they end, so a worker
    that dies without its cleanup (killed outright, a crash mid-interrupt) is counted too."""
    path = os.environ.get(CAPTURE_FILE_ENV)
    if path:
        with open(path, "a") as f:  # one short write: lines of processes at once stay whole
            f.write(json.dumps({"pid": os.getpid()} | capture_counts()) + "\n")


def read_capture_counts(path: Path) -> dict[str, int]:
    """The counts the processes wrote to ``path`` (:func:`write_capture_counts`), each one's
    latest, summed, and how many processes wrote them."""
    lines = path.read_text().splitlines() if path.exists() else []
    latest = {}
    for n, line in enumerate(lines):
        if line.strip():
            counts = json.loads(line)
            latest[counts.pop("pid", -n)] = counts  # pid-less: a line of its own
    total = {key: sum(c[key] for c in latest.values()) for key in _counts}
    return total | {"processes": len(latest)}


class Cuda:
    """The CUDA calls of a capture: a side stream to warm up on, a memory pool, a recording."""

    def pool(self):
        return torch.cuda.graph_pool_handle()

    @contextmanager
    def side(self, device: torch.device) -> Iterator[None]:
        """Run the block on a side stream; the current stream waits for it after, also when the
        block raised (what was put back after a failed warm-up must not race its kernels)."""
        main = torch.cuda.current_stream(device)
        side = torch.cuda.Stream(device=device)
        side.wait_stream(main)
        try:
            with torch.cuda.stream(side):
                yield
        finally:
            main.wait_stream(side)

    def record(self, fn: Callable[[], torch.Tensor], pool) -> tuple:
        """``fn`` captured as a graph (its kernels recorded, not run): the graph and ``fn``'s
        output, which each replay writes again."""
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=pool):
            out = fn()
        return graph, out


CUDA = Cuda()


class StepGraphs:
    """The captured training steps of one pack, one per input shape."""

    def __init__(self, ens: Ensemble, opt: StackedAdamW, step: Callable, cuda: Cuda = CUDA) -> None:
        self.ens, self.opt, self.eager_step, self.cuda = ens, opt, step, cuda
        self.graphs: dict[tuple, tuple] = {}  # key -> (graph, its spans buffer, its losses)
        self.pool = None
        self.failed = False
        self.replays = 0

    def capture(self, spans: torch.Tensor, n: int, t: int, dense: bool) -> bool:
        """The graph of this batch's shape captured, if it is not yet (training nothing: a step
        to come then replays it); False where capture failed and the pack trains eagerly."""
        if self.failed:
            return False
        key = (tuple(spans.shape), n, t, dense)
        if key in self.graphs:
            return True
        try:
            self.graphs[key] = self._capture(spans, n, t, dense)
        except torch.OutOfMemoryError:
            raise  # the engine halves the pack
        except RuntimeError as e:  # capture is not possible here: train eagerly
            self.failed = True
            _counts["failed"] += 1
            write_capture_counts()
            message = str(e).splitlines()[0] if str(e) else type(e).__name__
            if message not in _warned:
                _warned.add(message)
                log.warning("CUDA graph capture failed, training eagerly: %s", message)
            return False
        _counts["graphs"] += 1
        write_capture_counts()
        return True

    def step(self, spans: torch.Tensor, n: int, t: int, dense: bool) -> torch.Tensor:
        """One training step on the batch ``spans`` (3, M, B) laid out in ``n`` flat positions
        and rows of ``t`` (``Pack.eager_step``); the losses (M,), a tensor of their own."""
        if not self.capture(spans, n, t, dense):
            return self.eager_step(spans, n, t, dense)
        graph, buf, losses = self.graphs[(tuple(spans.shape), n, t, dense)]
        buf.copy_(spans, non_blocking=True)
        graph.replay()
        self.replays += 1
        return losses.clone()

    def _state(self) -> list[torch.Tensor]:
        opt = self.opt
        return [self.ens.flat, self.ens.grad, opt.exp_avg, opt.exp_avg_sq, opt.steps]

    def _capture(self, spans: torch.Tensor, n: int, t: int, dense: bool):
        saved = [s.clone() for s in self._state()]
        buf = spans.clone()
        try:
            with self.cuda.side(buf.device):
                for _ in range(WARMUP):
                    self.eager_step(buf, n, t, dense)
            if self.pool is None:
                self.pool = self.cuda.pool()
            graph, losses = self.cuda.record(lambda: self.eager_step(buf, n, t, dense), self.pool)
        finally:
            with torch.no_grad():
                for now, before in zip(self._state(), saved, strict=True):
                    now.copy_(before)  # the warm-up steps never happened (nor a fake's record)
        return graph, buf, losses
