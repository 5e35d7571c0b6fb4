"""A pack's training step captured as a CUDA graph, replayed every step with new batches.

A step of many tiny models on a GPU is bound by kernel launches (about 200 a step), not by
arithmetic; a CUDA graph replays the whole step (forward, loss, backward, clipping, AdamW) as one
launch. Replays need fixed shapes and fixed addresses, so the engine pads each batch to a static
shape (:func:`static_length`) and the step reads everything that changes from device tensors:
the inputs and targets are copied into the graph's own buffers, the learning rates live in
``StackedAdamW.lr`` and the step counts in ``StackedAdamW.steps``. One graph is captured per
input shape of a pack, on first use; a repacked pack (a member ended) gets new graphs. Capture
warms up on a side stream with the real batch, then puts the weights and optimizer state back as
they were, so the captured step is the step that would have run eagerly. Where capture fails the
pack trains eagerly, and the log says so once.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import torch

from threshold.train.ensemble import Ensemble
from threshold.train.optimizer import StackedAdamW

__all__ = ["LENGTH_QUANTUM", "StepGraphs", "static_length"]

log = logging.getLogger(__name__)

LENGTH_QUANTUM = 16  # static lengths are multiples of this: a few graphs cover every batch
WARMUP = 2  # eager steps on a side stream before capture (cuBLAS and autograd set themselves up)
_warned: set[str] = set()


def static_length(length: int, n_ctx: int) -> int:
    """The static input length of a batch of ``length`` positions: the next multiple of
    :data:`LENGTH_QUANTUM`, at most the context."""
    return min(n_ctx, -(-length // LENGTH_QUANTUM) * LENGTH_QUANTUM)


class StepGraphs:
    """The captured training steps of one pack, one per input shape."""

    def __init__(self, ens: Ensemble, opt: StackedAdamW, step: Callable) -> None:
        self.ens, self.opt, self.eager_step = ens, opt, step
        self.graphs: dict[
            tuple, tuple[torch.cuda.CUDAGraph, torch.Tensor, torch.Tensor, torch.Tensor]
        ] = {}
        self.pool = None
        self.failed = False

    def step(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """One training step on ``x``, ``y`` (M, B, T); the losses (M,), a tensor of its own."""
        if self.failed:
            return self.eager_step(x, y)
        key = tuple(x.shape)
        if key not in self.graphs:
            try:
                self.graphs[key] = self._capture(x, y)
            except torch.OutOfMemoryError:
                raise  # the engine halves the pack
            except RuntimeError as e:  # capture is not possible here: train eagerly
                self.failed = True
                message = str(e).splitlines()[0] if str(e) else type(e).__name__
                if message not in _warned:
                    _warned.add(message)
                    log.warning("CUDA graph capture failed, training eagerly: %s", message)
                return self.eager_step(x, y)
        graph, x_buf, y_buf, losses = self.graphs[key]
        x_buf.copy_(x, non_blocking=True)
        y_buf.copy_(y, non_blocking=True)
        graph.replay()
        return losses.clone()

    def _state(self) -> list[torch.Tensor]:
        opt = self.opt
        return [self.ens.flat, self.ens.grad, opt.exp_avg, opt.exp_avg_sq, opt.steps]

    def _capture(self, x: torch.Tensor, y: torch.Tensor):
        saved = [t.clone() for t in self._state()]
        x_buf, y_buf = x.clone(), y.clone()
        side = torch.cuda.Stream(device=x.device)
        side.wait_stream(torch.cuda.current_stream(x.device))
        try:
            with torch.cuda.stream(side):
                for _ in range(WARMUP):
                    self.eager_step(x_buf, y_buf)
            torch.cuda.current_stream(x.device).wait_stream(side)
        finally:
            with torch.no_grad():
                for t, s in zip(self._state(), saved, strict=True):
                    t.copy_(s)  # the warm-up steps never happened
        if self.pool is None:
            self.pool = torch.cuda.graph_pool_handle()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self.pool):
            losses = self.eager_step(x_buf, y_buf)
        return graph, x_buf, y_buf, losses
