"""Train many models in one batched pass: the engine behind lists of sizes and seeds, on CPU or GPU.

Each member is what :func:`threshold.train.train` would run on its own (its model config, data and
:class:`TrainConfig`): it keeps its own batch order, AdamW state, gradient clipping, learning-rate
schedule and stopping rules, and ends as the same :class:`TrainResult`. The members are stacked
into a padded :class:`~threshold.ensemble.Ensemble` and trained by one forward and backward pass a
step. A member that stops (learned, stuck, budget, time) is evaluated, handed to ``on_done`` at
once, and cut out of the stack (a repack: the rest continue at the cost of the members left, not
of the ones that started). Members that cannot share a stack (other model settings; on the CPU,
another d) go in separate packs, stepped in turns; packs that would not fit in memory together
wait for the ones before them; a CUDA out-of-memory error halves the pack it happened in and
carries on, losing no member. ``TrainResult.train_s`` of a member is the time of the batched
steps it took part in, so its ``tokens_per_s`` is its own tokens over the shared time.
"""

from __future__ import annotations

import logging
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F

from threshold.batched_eval import ensemble_decode, ensemble_greedy, ensemble_teacher_forced
from threshold.config import TrainConfig
from threshold.ensemble import Ensemble, check_members
from threshold.memory import plan_waves
from threshold.model import ModelConfig, RecurrentTransformer, param_count
from threshold.tasks import TaskData
from threshold.train import (
    IGNORE,
    Progress,
    TrainResult,
    budget_point,
    check_context,
    complete_budget,
    drawn_length,
    drawn_tensors,
    drawn_tokens,
    init_model,
    is_stuck,
    lr_factor,
    majority_rate,
    train_batches,
)

__all__ = [
    "Member",
    "StackedAdamW",
    "ensemble_step",
    "stacked_batch",
    "start_pack",
    "step_pack",
    "train_batched",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Member:
    """One run of a batch: what ``train(model_cfg, data, cfg)`` would train alone.

    ``init`` continues a given model (the transfer step) instead of a fresh one from ``cfg.seed``.
    """

    model_cfg: ModelConfig
    data: TaskData
    cfg: TrainConfig
    init: RecurrentTransformer | None = None


class StackedAdamW:
    """AdamW over stacked member weights, every member with its own hyperparameters and step count.

    The update is torch's AdamW, written for tensors whose first dimension is the member: decoupled
    weight decay on matrices and embeddings only (on every weight with ``decay_all``),
    bias-corrected moments, ``eps`` outside the root.
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
        self.exp_avg = torch.zeros_like(ens.flat)  # (M, P)
        self.exp_avg_sq = torch.zeros_like(ens.flat)  # (M, P)

    def select(self, ens: Ensemble, members: list[int]) -> StackedAdamW:
        """The state of ``members`` for ``ens``, their repacked ensemble (made by ``select``)."""
        new = object.__new__(StackedAdamW)
        index = torch.tensor(members, device=ens.device)
        new.ens, new.eps = ens, self.eps
        for name in ("beta1", "beta2", "weight_decay", "decay_all", "grad_clip", "steps"):
            setattr(new, name, getattr(self, name).index_select(0, index))
        for name in ("exp_avg", "exp_avg_sq"):
            views = self.ens.unflatten(getattr(self, name))
            kept = self.ens.select_like(views, members, ens.width).values()
            setattr(new, name, torch.cat([t.reshape(len(members), -1) for t in kept], 1))
        return new

    @torch.no_grad()
    def step(self, lr: torch.Tensor) -> None:
        """One update with learning rates ``lr`` (M,); gradients are clipped per member first,
        and zeroed after (they are the ensemble's one buffer, refilled by the next backward)."""
        w, g, ens = self.ens.flat, self.ens.grad, self.ens  # (M, P) each
        col = (-1, 1)  # a per-member value against the (M, P) buffers
        norm = g.square().sum(1).sqrt()  # (M,)
        g.mul_((self.grad_clip / (norm + 1e-6)).clamp(max=1.0).view(col))  # torch's clip rule
        self.steps += 1
        bc1 = 1 - self.beta1**self.steps  # (M,)
        bc2_sqrt = (1 - self.beta2**self.steps).sqrt()
        decayed = ens.decayed  # (P,), or (M, P) when some member decays every weight
        if bool(self.decay_all.any()):
            decayed = torch.maximum(decayed, self.decay_all.view(col))
        w.mul_(1 - (lr * self.weight_decay).view(col) * decayed)  # decoupled decay
        self.exp_avg.lerp_(g, (1 - self.beta1).view(col))
        self.exp_avg_sq.mul_(self.beta2.view(col)).add_(g.square().mul_((1 - self.beta2).view(col)))
        denom = (self.exp_avg_sq.sqrt() / bc2_sqrt.view(col)).add_(self.eps)
        w.sub_(self.exp_avg / denom * (lr / bc1).view(col))
        g.zero_()


def ensemble_step(
    ens: Ensemble, opt: StackedAdamW, x: torch.Tensor, y: torch.Tensor, lr: torch.Tensor
) -> torch.Tensor:
    """One optimizer step of every member on inputs ``x`` (M, B, T), targets ``y`` (M, B, T).

    Each member's loss is its own mean over its own targets, so its gradient is the one its model
    would get alone. Returns the losses (M,), still on the device.
    """
    logits = ens(x)  # (M, B, T, V)
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
    opt.step(lr)
    return losses.detach()


@dataclass
class _Run:
    """The bookkeeping of one member while it trains."""

    index: int  # position in the caller's list
    member: Member
    batches: Iterator[np.ndarray]  # the member's own endless batches (indices, or windows)
    chance: float  # majority rate of the measured op: what "stuck at chance" means
    lr_factor: Callable[[int], float]
    start: float  # perf_counter when its pack began
    pending: np.ndarray | None = None  # a drawn batch not yet trained on (kept across a split)
    step: int = 0
    tokens: int = 0
    train_s: float = 0.0
    history: list[dict] = field(default_factory=list)
    budget: list[dict] = field(default_factory=list)  # see TrainResult.budget
    val_acc: dict[str, float] = field(default_factory=dict)
    reported: int = 0
    stop_reason: str | None = None

    @property
    def cfg(self) -> TrainConfig:
        return self.member.cfg

    @property
    def data(self) -> TaskData:
        return self.member.data


@dataclass
class _Pack:
    """Members trained in one stack, in lockstep (they all began together)."""

    ens: Ensemble
    opt: StackedAdamW
    runs: list[_Run]
    smooth: torch.Tensor  # (M,) smoothed training loss, on the device

    def keep(self, positions: list[int]) -> _Pack:
        """The pack of the runs at ``positions`` (a repack: the stack shrinks to them)."""
        ens = self.ens.select(positions)
        index = torch.tensor(positions, device=self.smooth.device)
        opt = self.opt.select(ens, positions)
        runs = [self.runs[p] for p in positions]
        return _Pack(ens, opt, runs, self.smooth.index_select(0, index))


OnProgress = Callable[[int, Progress], None]
OnDone = Callable[[int, TrainResult], None]


def train_batched(
    members: list[Member],
    device: str | torch.device = "cpu",
    on_progress: OnProgress | None = None,
    on_done: OnDone | None = None,
    progress_every: int = 25,
    memory_bytes: int | None = None,
) -> list[TrainResult]:
    """Train every member, batched; the results come back in the order of ``members``.

    ``on_progress(i, progress)`` and ``on_done(i, result)`` name the member by its position.
    Packs are planned to fit ``memory_bytes`` (default: what the device has free); the packs
    that fit together step in turns (so every member moves on and an early stopper is handed
    over early), and packs that do not wait for them.
    """
    device = torch.device(device)
    check_members([m.model_cfg for m in members])
    if device.type == "cpu":
        torch.set_num_threads(max(m.cfg.threads for m in members))
    results: list[TrainResult | None] = [None] * len(members)

    def done(i: int, result: TrainResult) -> None:
        results[i] = result
        if on_done is not None:
            on_done(i, result)

    configs = [(m.model_cfg, m.cfg) for m in members]
    for wave in plan_waves(configs, device, memory_bytes):
        active = [start_pack([(i, members[i]) for i in group], device) for group in wave]
        while active:
            for pack in list(active):
                try:
                    _advance(pack, on_progress, done, progress_every)
                except torch.OutOfMemoryError:
                    if len(pack.runs) == 1:
                        raise
                    log.warning("out of memory with %d members: halving the pack", len(pack.runs))
                    half, n = len(pack.runs) // 2, len(pack.runs)
                    active.remove(pack)
                    torch.cuda.empty_cache()
                    active += [pack.keep(list(range(half))), pack.keep(list(range(half, n)))]
            active = [pack for pack in active if pack.runs]
    return results  # type: ignore[return-value]


def start_pack(indexed: list[tuple[int, Member]], device: torch.device) -> _Pack:
    """A pack of the members (with their positions) at step 0, stacked on ``device``."""
    models, runs, start = [], [], time.perf_counter()
    for i, member in indexed:
        model = member.init
        if model is None:
            model = init_model(member.model_cfg, member.cfg.seed)
        if param_count(model.cfg) != model.num_params():
            raise AssertionError("parameter formula and model disagree")
        check_context(model.cfg, member.cfg)
        models.append(model)
        data, cfg = member.data, member.cfg
        chance = majority_rate(data.val[data.config.measured_op])
        batches = train_batches(data.train, cfg)
        runs.append(_Run(i, member, batches, chance, lr_factor(cfg), start))
    ens = Ensemble.from_models(models, device)
    opt = StackedAdamW(ens, [r.cfg for r in runs])
    return _Pack(ens, opt, runs, torch.zeros(len(runs), device=ens.device))


def _advance(pack: _Pack, on_progress, done, progress_every: int) -> None:
    """One step of the pack and its stopping rules; a member that stops is handed to ``done``
    and cut out of the pack (which is empty when the last one has stopped)."""
    step_pack(pack)
    _check(pack)
    smooth = None
    for j, r in enumerate(pack.runs):
        at_end = r.stop_reason is not None
        if on_progress is not None and (r.step % progress_every == 0 or at_end):
            if smooth is None:
                smooth = pack.smooth.tolist()
            tokens_per_s = r.tokens / r.train_s
            on_progress(
                r.index,
                Progress(r.step, r.cfg.max_steps, smooth[j], tokens_per_s, dict(r.val_acc)),
            )
    ended = [j for j, r in enumerate(pack.runs) if r.stop_reason is not None]
    if not ended:
        return
    for j, result in zip(ended, _finish(pack, ended), strict=True):
        done(pack.runs[j].index, result)
    left = [j for j in range(len(pack.runs)) if j not in ended]
    if not left:
        pack.runs = []
        return
    new = pack.keep(left)
    pack.ens, pack.opt, pack.runs, pack.smooth = new.ens, new.opt, new.runs, new.smooth


def step_pack(pack: _Pack) -> None:
    """One training step of every member of the pack (no evaluation)."""
    ts = time.perf_counter()
    x, y, lr = stacked_batch(pack)
    losses = ensemble_step(pack.ens, pack.opt, x, y, lr)
    first = pack.runs[0].step == 0
    pack.smooth = losses if first else 0.95 * pack.smooth + 0.05 * losses
    spent = time.perf_counter() - ts
    for r in pack.runs:
        r.step += 1
        r.tokens += drawn_tokens(r.data.train, r.pending)
        r.train_s += spent
        r.pending = None


def stacked_batch(pack: _Pack) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Every member's next batch, padded to one shape: inputs, targets (M, B, T), rates (M,)."""
    for r in pack.runs:
        if r.pending is None:
            r.pending = next(r.batches)
    length = max(drawn_length(r.data.train, r.pending) for r in pack.runs)
    rows = max(len(r.pending) for r in pack.runs)
    xs, ys = [], []
    for r in pack.runs:
        pad = r.data.vocab.pad_id
        x, y = drawn_tensors(r.data.train, r.pending, r.cfg, pad, length)
        if len(x) < rows:  # a member with a smaller batch: rows of padding, out of the loss
            x = torch.cat([x, torch.full((rows - len(x), length), pad, dtype=x.dtype)])
            y = torch.cat([y, torch.full((rows - len(y), length), IGNORE, dtype=y.dtype)])
        xs.append(x)
        ys.append(y)
    dev = pack.ens.device
    lr = [r.cfg.lr * r.lr_factor(r.step) for r in pack.runs]
    x = torch.stack(xs).to(dev, non_blocking=True)  # (M, B, T)
    y = torch.stack(ys).to(dev, non_blocking=True)  # (M, B, T)
    return x, y, torch.tensor(lr, device=dev)


def _groups(pack: _Pack, positions: list[int]) -> list[tuple[TaskData, list[int], Ensemble]]:
    """``positions`` grouped by the data their members share, each with its sub-ensemble."""
    by_data: dict[int, list[int]] = {}
    for j in positions:
        by_data.setdefault(id(pack.runs[j].data), []).append(j)
    out = []
    for group in by_data.values():
        ens = pack.ens if len(group) == len(pack.runs) else pack.ens.select(group)
        out.append((pack.runs[group[0]].data, group, ens))
    return out


def _measure_budget(pack: _Pack) -> None:
    """The measured op's test accuracy of every member at one of its checkpoint steps (the last
    is measured by :func:`_finish`)."""
    at = [
        j
        for j, r in enumerate(pack.runs)
        if r.step in r.cfg.checkpoint_steps and r.step < r.cfg.max_steps
    ]
    for data, group, ens in _groups(pack, at):
        bs = max(pack.runs[j].cfg.eval_batch_size for j in group)
        test, eos = data.test[data.config.measured_op], data.vocab.eos_id
        greedy = ensemble_greedy(ens, test, eos, bs)[0].mean(1)
        sampled = ensemble_decode(ens, test, eos, bs, pack.runs[group[0]].cfg.seed)[0].mean(1)
        for k, j in enumerate(group):
            r = pack.runs[j]
            r.budget.append(
                budget_point(r.step, r.tokens, float(greedy[k]), float(sampled[k]), True)
            )


def _check(pack: _Pack) -> None:
    """The stopping rules of :func:`threshold.train.continue_training`, for every member due."""
    _measure_budget(pack)
    due = [
        j
        for j, r in enumerate(pack.runs)
        if r.step % r.cfg.eval_every == 0 or r.step == r.cfg.max_steps
    ]
    smooth = pack.smooth.tolist() if due else []
    candidates = []
    for data, group, ens in _groups(pack, due):
        bs = max(pack.runs[j].cfg.eval_batch_size for j in group)
        val = {
            op: ensemble_teacher_forced(ens, s, data.vocab.pad_id, bs) for op, s in data.val.items()
        }
        for k, j in enumerate(group):
            r = pack.runs[j]
            r.val_acc = {op: float(acc[k]) for op, (acc, _) in val.items()}
            measure = data.config.measured_op
            entry = {
                "step": r.step,
                "loss": smooth[j],
                "val_tf": dict(r.val_acc),
                "val_answer_loss": float(val[measure][1][k]),
            }
            r.history.append(entry)
            if all(a >= r.cfg.learned_tf for a in r.val_acc.values()):
                candidates.append(j)
    for data, group, ens in _groups(pack, candidates):
        bs = max(pack.runs[j].cfg.eval_batch_size for j in group)
        eos = data.vocab.eos_id
        greedy = {op: ensemble_greedy(ens, s, eos, bs)[0].mean(1) for op, s in data.val.items()}
        for k, j in enumerate(group):
            r = pack.runs[j]
            r.history[-1]["val_greedy"] = {op: float(a[k]) for op, a in greedy.items()}
            if all(a[k] >= r.cfg.learned_acc for a in greedy.values()):
                r.stop_reason = "learned"
    for j in due:
        r = pack.runs[j]
        if r.stop_reason is None and is_stuck(
            r.history, r.cfg, r.chance, r.data.config.measured_op
        ):
            r.stop_reason = "stuck"
    now = time.perf_counter()
    for r in pack.runs:
        if r.stop_reason is None and r.step >= r.cfg.max_steps:
            r.stop_reason = "max_steps"
        limit = r.cfg.time_limit_s
        if r.stop_reason is None and limit is not None and now - r.start > limit:
            r.stop_reason = "time_limit"


def _finish(pack: _Pack, ended: list[int]) -> list[TrainResult]:
    """Test-set measurements and the trained model of each member in ``ended``."""
    results = {}
    for data, group, ens in _groups(pack, ended):
        bs = max(pack.runs[j].cfg.eval_batch_size for j in group)
        accuracy, strict, teacher, sampled = ({j: {} for j in group} for _ in range(4))
        seed = pack.runs[group[0]].cfg.seed
        for op, s in data.test.items():
            answer_ok, strict_ok = ensemble_greedy(ens, s, data.vocab.eos_id, bs)
            tf = ensemble_teacher_forced(ens, s, data.vocab.pad_id, bs)[0]
            draws = ensemble_decode(ens, s, data.vocab.eos_id, bs, seed)[0]
            for k, j in enumerate(group):
                accuracy[j][op] = float(answer_ok[k].mean())
                strict[j][op] = float(strict_ok[k].mean())
                teacher[j][op] = float(tf[k])
                sampled[j][op] = float(draws[k].mean())
        measure = data.config.measured_op
        for k, j in enumerate(group):
            r = pack.runs[j]
            complete_budget(
                r.budget, r.cfg, r.step, r.tokens, accuracy[j][measure], sampled[j][measure]
            )
            results[j] = TrainResult(
                model=ens.member(k),
                steps=r.step,
                stop_reason=r.stop_reason,
                wall_s=time.perf_counter() - r.start,
                train_s=r.train_s,
                tokens=r.tokens,
                accuracy=accuracy[j],
                strict_accuracy=strict[j],
                teacher_forced=teacher[j],
                history=r.history,
                sampled_accuracy=sampled[j],
                budget=r.budget,
            )
    return [results[j] for j in ended]
