"""The optimizer of a stack: AdamW per member, and the learning-rate schedule.

:class:`StackedAdamW` is torch's AdamW written for one buffer whose first dimension is the member
(see :class:`~threshold.train.ensemble.Ensemble`): every member has its own betas, weight decay,
clipping norm and step count, and every operation is per member (row-wise), so a member's update
never depends on the members beside it. Its hyperparameters live in device tensors, so a captured
step (a CUDA graph) replays with the current values.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from threshold.config import TrainConfig
from threshold.train.ensemble import Ensemble

__all__ = ["StackedAdamW", "lr_factor"]


def lr_factor(cfg: TrainConfig) -> Callable[[int], float]:
    """The learning rate at a step as a share of ``cfg.lr``: linear warm-up, then the schedule
    (cosine or exponential to ``min_lr_ratio`` over ``decay_steps``, or the budget; or constant)."""
    span = cfg.decay_steps or max(1, cfg.max_steps - cfg.warmup_steps)
    end = cfg.min_lr_ratio

    def factor(step: int) -> float:
        if step < cfg.warmup_steps:
            return (step + 1) / cfg.warmup_steps
        if cfg.schedule == "constant":
            return 1.0
        progress = min(1.0, (step - cfg.warmup_steps) / span)
        if cfg.schedule == "exponential":
            return end**progress
        return end + (1 - end) * 0.5 * (1 + math.cos(math.pi * progress))

    return factor


class StackedAdamW:
    """AdamW over stacked member weights, every member with its own hyperparameters and step count.

    The update is torch's AdamW, written for tensors whose first dimension is the member: decoupled
    weight decay on matrices and embeddings only (on every weight with ``decay_all``),
    bias-corrected moments, ``eps`` outside the root; gradients clipped to each member's own norm.
    """

    def __init__(self, ens: Ensemble, cfgs: list[TrainConfig], eps: float = 1e-8) -> None:
        dev = ens.device

        def per_member(values) -> torch.Tensor:
            return torch.tensor(values, dtype=torch.float32, device=dev)  # (M,)

        self.ens, self.eps = ens, eps
        self.beta1 = per_member([c.betas[0] for c in cfgs])
        self.beta2 = per_member([c.betas[1] for c in cfgs])
        self.weight_decay = per_member([c.weight_decay for c in cfgs])
        self.decay_all = per_member([float(c.decay_all) for c in cfgs])
        self.grad_clip = per_member([c.grad_clip for c in cfgs])
        self.steps = torch.zeros(len(cfgs), device=dev)  # (M,)
        self.lr = torch.zeros(len(cfgs), device=dev)  # (M,): set before each step
        self.exp_avg = torch.zeros_like(ens.flat)  # (M, P)
        self.exp_avg_sq = torch.zeros_like(ens.flat)  # (M, P)
        decayed = ens.decayed  # (P,)
        if bool(self.decay_all.any()):  # (M, P) when some member decays every weight
            decayed = torch.maximum(decayed, self.decay_all[:, None])
        self.decayed = decayed

    def select(self, ens: Ensemble, members: list[int]) -> StackedAdamW:
        """The state of ``members`` for ``ens``, their repacked ensemble (made by ``select``)."""
        new = object.__new__(StackedAdamW)
        index = torch.tensor(members, device=ens.device)
        new.ens, new.eps = ens, self.eps
        for name in ("beta1", "beta2", "weight_decay", "decay_all", "grad_clip", "steps", "lr"):
            setattr(new, name, getattr(self, name).index_select(0, index))
        for name in ("exp_avg", "exp_avg_sq"):
            views = self.ens.unflatten(getattr(self, name))
            kept = self.ens.select_like(views, members, ens.width).values()
            setattr(new, name, torch.cat([t.reshape(len(members), -1) for t in kept], 1))
        new.decayed = ens.decayed
        if bool(new.decay_all.any()):
            new.decayed = torch.maximum(ens.decayed, new.decay_all[:, None])
        return new

    @torch.no_grad()
    def step(self) -> None:
        """One update with the learning rates in :attr:`lr` (M,); gradients are clipped per
        member first, and zeroed after (they are the ensemble's one buffer, refilled by the next
        backward). Every operation stays on the device: no host value is read."""
        w, g = self.ens.flat, self.ens.grad  # (M, P) each
        col = (-1, 1)  # a per-member value against the (M, P) buffers
        norm = g.square().sum(1).sqrt()  # (M,)
        g.mul_((self.grad_clip / (norm + 1e-6)).clamp(max=1.0).view(col))  # torch's clip rule
        self.steps += 1
        bc1 = 1 - self.beta1**self.steps  # (M,)
        bc2_sqrt = (1 - self.beta2**self.steps).sqrt()
        w.mul_(1 - (self.lr * self.weight_decay).view(col) * self.decayed)  # decoupled decay
        self.exp_avg.lerp_(g, (1 - self.beta1).view(col))
        self.exp_avg_sq.mul_(self.beta2.view(col)).add_(g.square().mul_((1 - self.beta2).view(col)))
        denom = (self.exp_avg_sq.sqrt() / bc2_sqrt.view(col)).add_(self.eps)
        w.sub_(self.exp_avg / denom * (self.lr / bc1).view(col))
        g.zero_()
