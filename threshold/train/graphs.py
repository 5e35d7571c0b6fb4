"""A pack's training step captured as a CUDA graph, replayed every step with new batches.

A step of many tiny models on a GPU is bound by kernel launches (about 200 a step), not by
arithmetic; a CUDA graph replays the whole step (forward, loss, backward, clipping, AdamW) as one
launch. Replays need fixed shapes and fixed addresses, so the engine lays each batch out in one
of a few static shapes (:mod:`threshold.train.layout`) and the step reads everything that changes
from device tensors: the batch's spans are copied into the graph's own
buffer (the step lays them out itself, :func:`threshold.train.layout.lay_out`), the learning
rates live in ``StackedAdamW.lr`` and the step counts in ``StackedAdamW.steps``. One graph is
captured per shape of a pack, on first use; a repacked pack (a member ended) gets new graphs.
Capture warms up on a side stream with the real batch, then puts the weights and optimizer state
back as they were, so the captured step is the step that would have run eagerly. Where capture
fails the pack trains eagerly, and the log says so once.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import torch

from threshold.train.ensemble import Ensemble
from threshold.train.optimizer import StackedAdamW

__all__ = ["StepGraphs"]

log = logging.getLogger(__name__)

WARMUP = 2  # eager steps on a side stream before capture (cuBLAS and autograd set themselves up)
_warned: set[str] = set()


class StepGraphs:
    """The captured training steps of one pack, one per input shape."""

    def __init__(self, ens: Ensemble, opt: StackedAdamW, step: Callable) -> None:
        self.ens, self.opt, self.eager_step = ens, opt, step
        self.graphs: dict[tuple, tuple[torch.cuda.CUDAGraph, torch.Tensor, torch.Tensor]] = {}
        self.pool = None
        self.failed = False

    def step(self, spans: torch.Tensor, n: int, t: int, dense: bool) -> torch.Tensor:
        """One training step on the batch ``spans`` (3, M, B) laid out in ``n`` flat positions
        and rows of ``t`` (``Pack.eager_step``); the losses (M,), a tensor of their own."""
        if self.failed:
            return self.eager_step(spans, n, t, dense)
        key = (tuple(spans.shape), n, t, dense)
        if key not in self.graphs:
            try:
                self.graphs[key] = self._capture(spans, n, t, dense)
            except torch.OutOfMemoryError:
                raise  # the engine halves the pack
            except RuntimeError as e:  # capture is not possible here: train eagerly
                self.failed = True
                message = str(e).splitlines()[0] if str(e) else type(e).__name__
                if message not in _warned:
                    _warned.add(message)
                    log.warning("CUDA graph capture failed, training eagerly: %s", message)
                return self.eager_step(spans, n, t, dense)
        graph, buf, losses = self.graphs[key]
        buf.copy_(spans, non_blocking=True)
        graph.replay()
        return losses.clone()

    def _state(self) -> list[torch.Tensor]:
        opt = self.opt
        return [self.ens.flat, self.ens.grad, opt.exp_avg, opt.exp_avg_sq, opt.steps]

    def _capture(self, spans: torch.Tensor, n: int, t: int, dense: bool):
        saved = [s.clone() for s in self._state()]
        buf = spans.clone()
        side = torch.cuda.Stream(device=buf.device)
        side.wait_stream(torch.cuda.current_stream(buf.device))
        try:
            with torch.cuda.stream(side):
                for _ in range(WARMUP):
                    self.eager_step(buf, n, t, dense)
            torch.cuda.current_stream(buf.device).wait_stream(side)
        finally:
            with torch.no_grad():
                for now, before in zip(self._state(), saved, strict=True):
                    now.copy_(before)  # the warm-up steps never happened
        if self.pool is None:
            self.pool = torch.cuda.graph_pool_handle()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self.pool):
            losses = self.eager_step(buf, n, t, dense)
        return graph, buf, losses
