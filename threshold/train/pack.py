"""How runs are stacked, resumed and saved: a :class:`Pack` of members trained together.

A pack stacks its members' models into one :class:`~threshold.train.ensemble.Ensemble` (weights
padded to the widest member) with one :class:`~threshold.train.optimizer.StackedAdamW`, and takes
one forward and backward pass a step. Each :class:`Member` keeps its own batches, AdamW state,
clipping, learning-rate schedule, stopping rules and sampled decoding, all from its own seed.
A member's training state is written to its run's state file (:func:`save_states`) and put back
from it (:func:`resume`) as :mod:`threshold.train.state` lays it out.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F

from threshold.config import TrainConfig
from threshold.tasks import TaskData
from threshold.train.batches import IGNORE
from threshold.train.ensemble import Ensemble
from threshold.train.graphs import StepGraphs
from threshold.train.layout import Batch, Feed, Rows, lay_out
from threshold.train.optimizer import StackedAdamW
from threshold.train.run import Run
from threshold.train.state import RunState, save_state

__all__ = [
    "Member",
    "Pack",
    "batch_size",
    "charge_cpu",
    "groups",
    "resume",
    "save_states",
    "seeds",
]


@dataclass
class Member:
    """The bookkeeping of one run while it trains."""

    index: int  # position in the caller's list
    run: Run
    batches: Iterator[np.ndarray]  # the run's own endless batches (indices, or window starts)
    chance: float  # majority rate of the measured op: what "stuck at chance" means
    lr_factor: Callable[[int], float]
    start: float  # perf_counter when its pack began
    # spans (3, K, B) of the batches drawn for its next K steps (kept across a repack: Feed)
    ahead: np.ndarray = field(default_factory=lambda: np.zeros((3, 0, 0), dtype=np.int64))
    step: int = 0
    tokens: int = 0
    train_s: float = 0.0
    cpu_s: float | None = 0.0  # see TrainResult.cpu_s
    history: list[dict] = field(default_factory=list)
    budget: list[dict] = field(default_factory=list)  # see TrainResult.budget
    val_acc: dict[str, float] = field(default_factory=dict)
    stop_reason: str | None = None

    @property
    def cfg(self) -> TrainConfig:
        return self.run.cfg

    @property
    def data(self) -> TaskData:
        return self.run.data

    @property
    def measure(self) -> str:
        return self.run.data.config.measured_op


def _forward_backward(
    ens: Ensemble, x: torch.Tensor, y: torch.Tensor, rows: Rows | None = None
) -> torch.Tensor:
    """Every member's loss on inputs ``x``, targets ``y`` (M, B, T), one sequence a row, or
    (M, 1, N) laid out as ``rows`` says (:func:`~threshold.train.layout.lay_out`), and its
    gradient in ``ens.grad``.
    Each member's loss is its own mean over its own targets, so its gradient is the one its
    model would get alone. Returns the losses (M,), on the device."""
    logits = ens(x, rows=rows)  # (M, 1, N, V)
    m = x.shape[0]
    nll = F.cross_entropy(
        logits.flatten(0, 2), y.flatten(), ignore_index=IGNORE, reduction="none"
    ).view(m, -1)  # (M, B*T)
    counts = (y != IGNORE).flatten(1).sum(1).clamp(min=1)  # (M,)
    losses = nll.sum(1) / counts  # (M,)
    with warnings.catch_warnings():
        # The weights are views into one buffer, so their gradients (views into another) are
        # not dense; autograd warns that this "may impair performance" and accumulates in place
        # all the same, which is what the one-buffer optimizer relies on.
        warnings.filterwarnings("ignore", message="grad and param do not obey the gradient")
        losses.sum().backward()
    return losses.detach()


@contextmanager
def arithmetic(device: torch.device, precision: str) -> Iterator[None]:
    """The forward and backward passes in ``precision`` (``TrainConfig.precision``): bf16 under
    autocast (matmuls and attention in bfloat16, reductions and the loss in fp32), tf32 lets a
    GPU's fp32 matmuls use TF32 (nothing on a CPU); the weights and the optimizer stay fp32."""
    if precision == "bf16":  # no cast cache: a CUDA graph's capture must not keep one
        with torch.autocast(device.type, dtype=torch.bfloat16, cache_enabled=False):
            yield
        return
    if precision != "tf32" or device.type != "cuda":
        yield
        return
    matmul = torch.backends.cuda.matmul
    before = matmul.allow_tf32
    matmul.allow_tf32 = True
    try:
        yield
    finally:
        matmul.allow_tf32 = before


@dataclass
class Pack:
    """Members trained in one stack, in lockstep (they all began together)."""

    ens: Ensemble
    opt: StackedAdamW
    members: list[Member]
    smooth: torch.Tensor  # (M,) smoothed training loss, on the device
    feed: Feed  # the members' batches, drawn ahead, on the device (static shapes: feed.static)
    # False once the pack was halved after an out-of-memory error: each graph keeps its step's
    # activations in a pool of its own, so graphed halves side by side need what the whole did;
    # eager steps free them, and the halves' peak is one half's
    graphed: bool = True
    graphs: StepGraphs | None = None
    last: Batch | None = None  # the batch of its last step (its shape and useful positions)
    saved_at: float = field(default_factory=time.perf_counter)  # its states last written

    def __post_init__(self) -> None:
        if self.feed.static and self.graphed and self.ens.device.type == "cuda":
            self.graphs = StepGraphs(self.ens, self.opt, self.eager_step)

    def eager_step(self, spans: torch.Tensor, n: int, t: int, dense: bool) -> torch.Tensor:
        """The batch laid out (:func:`~threshold.train.layout.lay_out`), forward, backward and
        the optimizer's update, as launched one kernel at a time."""
        x, y, rows = lay_out(self.feed.stream.tokens, spans, n, t, dense)
        with arithmetic(self.ens.device, self.members[0].cfg.precision):
            losses = _forward_backward(self.ens, x, y, rows)
        self.opt.step()
        return losses

    def keep(self, positions: list[int], graphed: bool | None = None) -> Pack:
        """The pack of the members at ``positions`` (a repack: the stack shrinks to them);
        ``graphed`` as this pack's unless given."""
        ens = self.ens.select(positions)
        index = torch.tensor(positions, device=self.smooth.device)
        members = [self.members[p] for p in positions]
        opt = self.opt.select(ens, positions)
        graphed = self.graphed if graphed is None else graphed
        feed = self.feed.select(members)
        return Pack(ens, opt, members, self.smooth[index], feed, graphed)


def resume(
    ens: Ensemble, opt: StackedAdamW, smooth: torch.Tensor, k: int, m: Member, state: RunState
) -> None:
    """Member ``k`` of a new pack put back where ``state`` left it."""
    with torch.no_grad():
        ens.put_member(ens.flat, k, state.weights)
        ens.put_member(opt.exp_avg, k, state.exp_avg)
        ens.put_member(opt.exp_avg_sq, k, state.exp_avg_sq)
        opt.steps[k] = state.optimizer_steps
        smooth[k] = state.smooth_loss
    for _ in range(state.step):  # its batches, drawn again from its seed up to where it was
        next(m.batches)
    m.step, m.tokens, m.train_s, m.cpu_s = state.step, state.tokens, state.train_s, state.cpu_s
    m.start -= state.wall_s
    m.history, m.budget, m.val_acc = state.history, state.budget, state.val_accuracy


def _member_tensors(ens: Ensemble, flat: torch.Tensor, k: int) -> dict[str, torch.Tensor]:
    """Member ``k``'s part of ``flat`` (laid out like the ensemble's weights), at its own width."""
    cut = ens.select_like(ens.unflatten(flat), [k], ens.d_models[k])
    return {name: t.cpu() for name, t in cut.items()}


def save_states(pack: Pack) -> None:
    """The state of every member that keeps one, written to its file."""
    smooth, now = pack.smooth.tolist(), time.perf_counter()
    for k, m in enumerate(pack.members):
        if m.run.state is None or m.stop_reason is not None:
            continue
        state = RunState(
            key=m.run.state_key(),
            weights=_member_tensors(pack.ens, pack.ens.flat, k),
            exp_avg=_member_tensors(pack.ens, pack.opt.exp_avg, k),
            exp_avg_sq=_member_tensors(pack.ens, pack.opt.exp_avg_sq, k),
            optimizer_steps=float(pack.opt.steps[k]),
            smooth_loss=smooth[k],
            step=m.step,
            tokens=m.tokens,
            train_s=m.train_s,
            wall_s=now - m.start,
            cpu_s=m.cpu_s,
            history=m.history,
            budget=m.budget,
            val_accuracy=m.val_acc,
        )
        save_state(m.run.state, state)
    pack.saved_at = now


def charge_cpu(members: list[Member], since: float) -> None:
    """The process's CPU seconds since ``since``, shared evenly among ``members``."""
    share = (time.process_time() - since) / len(members)
    for m in members:
        if m.cpu_s is not None:
            m.cpu_s += share


def groups(pack: Pack, positions: list[int]) -> list[tuple[TaskData, list[int], Ensemble]]:
    """``positions`` grouped by the data their members share, each with its sub-ensemble."""
    by_data: dict[int, list[int]] = {}
    for j in positions:
        by_data.setdefault(id(pack.members[j].data), []).append(j)
    out = []
    for group in by_data.values():
        ens = pack.ens if len(group) == len(pack.members) else pack.ens.select(group)
        out.append((pack.members[group[0]].data, group, ens))
    return out


def batch_size(pack: Pack, group: list[int]) -> int:
    return max(pack.members[j].cfg.eval_batch_size for j in group)


def seeds(pack: Pack, group: list[int]) -> list[int]:
    return [pack.members[j].cfg.seed for j in group]
