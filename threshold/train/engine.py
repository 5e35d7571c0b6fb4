"""The training engine: every run of the tool, alone or many at once, on the CPU or a GPU.

A :class:`Run` is what one training run needs (model config, data, :class:`TrainConfig`, and
optionally a model to continue, the transfer step). :func:`train_runs` trains a list of them; a
single run is a list of one, trained by the same code. The runs are stacked into packs
(:class:`~threshold.train.ensemble.Ensemble`, weights padded to the widest member) that take one
forward and backward pass a step; :mod:`threshold.train.memory` plans the packs (one member each
on the CPU, shared on a GPU) and which fit in memory side by side. Packs that fit together step
in turns, so every run moves on; a CUDA out-of-memory error halves the pack it happened in and
carries on, losing no run.

Each member keeps its own batches, AdamW state, clipping, learning-rate schedule, stopping rules
and sampled decoding, all from its own seed. It stops by absolute rules only: *learned* (its
teacher-forced validation answers right, confirmed by greedy decoding), *stuck* (late in the
budget, at chance, its answer loss flat, and no other op of its mixture improving), *diverged*
(its training loss is not finite), its step budget, or its time limit. A member that stops is
evaluated on the test sets, handed to ``on_done`` at once and cut out of its pack. A run that
names a state file is saved to it every ``save_every_s`` seconds of training and continues from it
when it starts again (:mod:`threshold.train.state`). Nothing here prints: progress goes to
callbacks.
"""

from __future__ import annotations

import logging
import math
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from threshold.config import Execution, ModelConfig, TrainConfig, param_count
from threshold.errors import ConfigError
from threshold.model import RecurrentTransformer
from threshold.tasks import TaskData
from threshold.train.batches import IGNORE, drawn_arrays, drawn_length, drawn_tokens, train_batches
from threshold.train.ensemble import Ensemble, check_members
from threshold.train.evaluate import (
    decode,
    decode_greedy_and_sampled,
    majority_rate,
    teacher_forced,
)
from threshold.train.graphs import StepGraphs, static_length
from threshold.train.memory import plan_waves
from threshold.train.optimizer import StackedAdamW, lr_factor
from threshold.train.state import RunState, load_state, save_state

__all__ = [
    "STOP_REASONS",
    "Progress",
    "Run",
    "TrainResult",
    "continue_training",
    "init_model",
    "is_stuck",
    "stacked_batch",
    "start_pack",
    "step_pack",
    "train",
    "train_runs",
]

log = logging.getLogger(__name__)

IMPROVING = 0.01  # an op whose accuracy rose more than this in the stuck window is still learning
STOP_REASONS = ("learned", "stuck", "diverged", "max_steps", "time_limit")


@dataclass(frozen=True)
class Progress:
    """What a callback sees every few steps."""

    step: int
    max_steps: int
    loss: float  # training loss, smoothed
    tokens_per_s: float  # non-padding tokens per second of training
    val_accuracy: dict[str, float]  # latest teacher-forced val answer accuracy per op


@dataclass
class TrainResult:
    model: RecurrentTransformer
    steps: int
    stop_reason: str  # one of STOP_REASONS
    wall_s: float
    train_s: float  # seconds in the training steps it took part in, without evaluation
    # Its share of the process's CPU seconds (a pack's CPU split evenly among its members),
    # evaluation included; None when it continued from a state saved without it.
    cpu_s: float | None
    tokens: int  # non-padding tokens trained on
    accuracy: dict[str, float]  # greedy final-answer accuracy on each op's test set
    strict_accuracy: dict[str, float]  # the whole chain of thought right
    teacher_forced: dict[str, float]  # teacher-forced answer accuracy on test
    history: list[dict] = field(default_factory=list)
    sampled_accuracy: dict[str, float] = field(default_factory=dict)  # temperature 1, on test
    # The measured op's test accuracy at the config's checkpoint steps: {"step", "tokens",
    # "accuracy", "sampled_accuracy", "reached"}; a run that stopped earlier (learned or stuck)
    # carries its final accuracy to the later checkpoints, "reached" false.
    budget: list[dict] = field(default_factory=list)

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.train_s if self.train_s > 0 else 0.0

    def metrics(self) -> dict:
        """What a run measured, as every caller stores or prints it (JSON-ready)."""
        return {
            "accuracy": self.accuracy,
            "strict_accuracy": self.strict_accuracy,
            "sampled_accuracy": self.sampled_accuracy,
            "teacher_forced_accuracy": self.teacher_forced,
            "budget": self.budget,
            "steps": self.steps,
            "stop_reason": self.stop_reason,
            "wall_s": round(self.wall_s, 2),
            "cpu_s": None if self.cpu_s is None else round(self.cpu_s, 2),
            "tokens_per_s": round(self.tokens_per_s),
        }


@dataclass(frozen=True)
class Run:
    """One training run: a fresh model from ``cfg.seed``, or ``init`` continued (transfer).

    ``state``: where the run keeps its training state while it trains (none: nowhere); a run
    that finds one there continues from it, and the file is removed once the run is handed on.
    """

    model_cfg: ModelConfig
    data: TaskData
    cfg: TrainConfig
    init: RecurrentTransformer | None = None
    state: Path | None = None

    def state_key(self) -> dict:
        """What a saved state must have been written for to be continued by this run."""
        return {
            "model": self.model_cfg.to_dict(),
            "train": self.cfg.to_dict(),
            "data": self.data.config.to_dict(),
        }


OnProgress = Callable[[int, Progress], None]
OnDone = Callable[[int, TrainResult], None]


def init_model(model_cfg: ModelConfig, seed: int) -> RecurrentTransformer:
    """A fresh model initialised from ``seed``, leaving torch's global generator untouched."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return RecurrentTransformer(model_cfg)


def train(
    model_cfg: ModelConfig,
    data: TaskData,
    cfg: TrainConfig,
    on_progress: Callable[[Progress], None] | None = None,
    progress_every: int = 25,
    device: str | torch.device = "cpu",
) -> TrainResult:
    """Train a fresh model: :func:`train_runs` of one run."""
    return _one(Run(model_cfg, data, cfg), on_progress, progress_every, device)


def continue_training(
    model: RecurrentTransformer,
    data: TaskData,
    cfg: TrainConfig,
    on_progress: Callable[[Progress], None] | None = None,
    progress_every: int = 25,
    device: str | torch.device = "cpu",
) -> TrainResult:
    """Train ``model`` further with a fresh optimizer (the transfer step): a run of one."""
    return _one(Run(model.cfg, data, cfg, model), on_progress, progress_every, device)


def _one(run: Run, on_progress, progress_every: int, device) -> TrainResult:
    report = None if on_progress is None else (lambda _, p: on_progress(p))
    return train_runs([run], device, report, progress_every=progress_every)[0]


def train_runs(
    runs: list[Run],
    device: str | torch.device = "cpu",
    on_progress: OnProgress | None = None,
    on_done: OnDone | None = None,
    progress_every: int = 25,
    memory_bytes: int | None = None,
    share: bool | None = None,
    static: bool | None = None,
    save_every_s: float = Execution.save_every_s,
) -> list[TrainResult]:
    """Train every run; the results come back in the order of ``runs``.

    ``on_progress(i, progress)`` and ``on_done(i, result)`` name the run by its position. Packs
    are planned to fit ``memory_bytes`` (default: what the device has free); ``share`` (default:
    on a GPU) lets runs share padded packs (see :func:`threshold.train.memory.plan_packs`).
    ``static`` (default: on a GPU) pads every batch to a static length
    (:func:`threshold.train.graphs.static_length`) and, on a GPU, replays each step as a CUDA
    graph. Runs with a :attr:`Run.state` file are saved to it every ``save_every_s`` seconds.
    The model comes back on the CPU.
    """
    device = torch.device(device)
    static = device.type == "cuda" if static is None else static
    check_members([r.model_cfg for r in runs])
    if device.type == "cpu":
        torch.set_num_threads(max(r.cfg.threads for r in runs))
    results: list[TrainResult | None] = [None] * len(runs)

    def done(i: int, result: TrainResult) -> None:
        results[i] = result
        if on_done is not None:
            on_done(i, result)

    configs = [(r.model_cfg, r.cfg) for r in runs]
    for wave in plan_waves(configs, device, memory_bytes, share):
        active = [start_pack([(i, runs[i]) for i in group], device, static) for group in wave]
        while active:
            for pack in list(active):
                try:
                    _advance(pack, on_progress, done, progress_every)
                    if pack.members and time.perf_counter() - pack.saved_at >= save_every_s:
                        _save_states(pack)
                    continue
                except torch.OutOfMemoryError:
                    if len(pack.members) == 1:
                        raise
                # split outside the handler: its traceback pins the failed step's activations
                active.remove(pack)
                active += _halve(pack)
            active = [pack for pack in active if pack.members]
    return results  # type: ignore[return-value]


def _halve(pack: _Pack) -> list[_Pack]:
    """The pack in two halves, after an out-of-memory error: its CUDA graphs (and their memory
    pools) are dropped first, so the copies need only the room of the weights and moments."""
    n, half = len(pack.members), len(pack.members) // 2
    log.warning("out of memory with %d members: halving the pack", n)
    pack.graphs = None
    torch.cuda.empty_cache()
    return [pack.keep(list(range(half))), pack.keep(list(range(half, n)))]


@dataclass
class _Member:
    """The bookkeeping of one run while it trains."""

    index: int  # position in the caller's list
    run: Run
    batches: Iterator[np.ndarray]  # the run's own endless batches (indices, or windows)
    chance: float  # majority rate of the measured op: what "stuck at chance" means
    lr_factor: Callable[[int], float]
    start: float  # perf_counter when its pack began
    pending: np.ndarray | None = None  # a drawn batch not yet trained on (kept across a split)
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


@dataclass
class _Pack:
    """Members trained in one stack, in lockstep (they all began together)."""

    ens: Ensemble
    opt: StackedAdamW
    members: list[_Member]
    smooth: torch.Tensor  # (M,) smoothed training loss, on the device
    static: bool = False  # batches padded to static lengths (and on a GPU, graphed steps)
    graphs: StepGraphs | None = None
    saved_at: float = field(default_factory=time.perf_counter)  # its states last written

    def __post_init__(self) -> None:
        if self.static and self.ens.device.type == "cuda":
            self.graphs = StepGraphs(self.ens, self.opt, self.eager_step)

    def eager_step(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Forward, backward and the optimizer's update, as launched one kernel at a time."""
        losses = _forward_backward(self.ens, x, y)
        self.opt.step()
        return losses

    def keep(self, positions: list[int]) -> _Pack:
        """The pack of the members at ``positions`` (a repack: the stack shrinks to them)."""
        ens = self.ens.select(positions)
        index = torch.tensor(positions, device=self.smooth.device)
        members = [self.members[p] for p in positions]
        opt = self.opt.select(ens, positions)
        return _Pack(ens, opt, members, self.smooth[index], self.static)


def start_pack(indexed: list[tuple[int, Run]], device: torch.device, static: bool = False) -> _Pack:
    """A pack of the runs (with their positions) at step 0, stacked on ``device``."""
    models, members, start, cpu = [], [], time.perf_counter(), time.process_time()
    for i, run in indexed:
        model = run.init if run.init is not None else init_model(run.model_cfg, run.cfg.seed)
        if param_count(model.cfg) != model.num_params():
            raise AssertionError("parameter formula and model disagree")
        if run.cfg.batches == "windows" and model.cfg.n_ctx < run.cfg.window:
            raise ConfigError(
                f"window {run.cfg.window} is longer than the model's context (n_ctx "
                f"{model.cfg.n_ctx}): build the model with model_config_for(task, d, train) or"
                " use a smaller window"
            )
        models.append(model)
        chance = majority_rate(run.data.val[run.data.config.measured_op])
        batches = train_batches(run.data.train, run.cfg)
        members.append(_Member(i, run, batches, chance, lr_factor(run.cfg), start))
    ens = Ensemble.from_models(models, device)
    opt = StackedAdamW(ens, [m.cfg for m in members])
    smooth = torch.zeros(len(members), device=ens.device)
    for k, m in enumerate(members):
        state = None if m.run.state is None else load_state(m.run.state, m.run.state_key())
        if state is not None:
            _resume(ens, opt, smooth, k, m, state)
    pack = _Pack(ens, opt, members, smooth, static)
    _charge_cpu(members, cpu)
    return pack


def _resume(
    ens: Ensemble, opt: StackedAdamW, smooth: torch.Tensor, k: int, m: _Member, state: RunState
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
    log.info("run %d continues from step %d (%s)", m.index, m.step, m.run.state)


def _member_tensors(ens: Ensemble, flat: torch.Tensor, k: int) -> dict[str, torch.Tensor]:
    """Member ``k``'s part of ``flat`` (laid out like the ensemble's weights), at its own width."""
    cut = ens.select_like(ens.unflatten(flat), [k], ens.d_models[k])
    return {name: t.cpu() for name, t in cut.items()}


def _save_states(pack: _Pack) -> None:
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


def _advance(pack: _Pack, on_progress, done, progress_every: int) -> None:
    """One step of the pack and its stopping rules; a member that stops is handed to ``done``
    and cut out of the pack (which is empty when the last one has stopped)."""
    cpu = time.process_time()
    step_pack(pack)
    _check(pack)
    _charge_cpu(pack.members, cpu)
    smooth = None
    for j, m in enumerate(pack.members):
        at_end = m.stop_reason is not None
        if on_progress is not None and (m.step % progress_every == 0 or at_end):
            smooth = pack.smooth.tolist() if smooth is None else smooth
            rate = m.tokens / m.train_s if m.train_s > 0 else 0.0
            on_progress(
                m.index, Progress(m.step, m.cfg.max_steps, smooth[j], rate, dict(m.val_acc))
            )
    ended = [j for j, m in enumerate(pack.members) if m.stop_reason is not None]
    if not ended:
        return
    for j, result in zip(ended, _finish(pack, ended), strict=True):
        done(pack.members[j].index, result)
        if pack.members[j].run.state is not None:  # handed on: its state is spent
            pack.members[j].run.state.unlink(missing_ok=True)
    left = [j for j in range(len(pack.members)) if j not in ended]
    if not left:
        pack.members = []
        return
    new = pack.keep(left)
    pack.ens, pack.opt, pack.members, pack.smooth = new.ens, new.opt, new.members, new.smooth
    pack.graphs = new.graphs


def _charge_cpu(members: list[_Member], since: float) -> None:
    """The process's CPU seconds since ``since``, shared evenly among ``members``."""
    share = (time.process_time() - since) / len(members)
    for m in members:
        if m.cpu_s is not None:
            m.cpu_s += share


def step_pack(pack: _Pack) -> None:
    """One training step of every member of the pack (no evaluation)."""
    ts = time.perf_counter()
    x, y = stacked_batch(pack)
    lr = [m.cfg.lr * m.lr_factor(m.step) for m in pack.members]
    pack.opt.lr.copy_(torch.tensor(lr))
    step = pack.eager_step if pack.graphs is None else pack.graphs.step
    losses = step(x, y)
    first = [m.step == 0 for m in pack.members]  # members resumed mid-run beside new ones differ
    if all(first):
        pack.smooth = losses
    elif not any(first):
        pack.smooth = 0.95 * pack.smooth + 0.05 * losses
    else:
        new = torch.tensor(first, device=losses.device)
        pack.smooth = torch.where(new, losses, 0.95 * pack.smooth + 0.05 * losses)
    spent = time.perf_counter() - ts
    for m in pack.members:
        m.step += 1
        m.tokens += drawn_tokens(m.data.train, m.pending)
        m.train_s += spent
        m.pending = None


def _forward_backward(ens: Ensemble, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Every member's loss on inputs ``x`` (M, B, T), targets ``y`` (M, B, T), and its gradient
    in ``ens.grad``. Each member's loss is its own mean over its own targets, so its gradient is
    the one its model would get alone. Returns the losses (M,), on the device."""
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
    return losses.detach()


def stacked_batch(pack: _Pack) -> tuple[torch.Tensor, torch.Tensor]:
    """Every member's next batch, padded to one shape: inputs and targets (M, B, T)."""
    for m in pack.members:
        if m.pending is None:
            m.pending = next(m.batches)
    length = max(drawn_length(m.data.train, m.pending) for m in pack.members)
    if pack.static:
        length = static_length(length, pack.ens.cfg.n_ctx)
    rows = max(len(m.pending) for m in pack.members)
    xs, ys = [], []
    for m in pack.members:
        pad = m.data.vocab.pad_id
        x, y = drawn_arrays(m.data.train, m.pending, m.cfg, pad, length)
        if len(x) < rows:  # a member with a smaller batch: rows of padding, out of the loss
            x = np.concatenate([x, np.full((rows - len(x), length), pad, dtype=x.dtype)])
            y = np.concatenate([y, np.full((rows - len(y), length), IGNORE, dtype=y.dtype)])
        xs.append(x)
        ys.append(y)
    dev = pack.ens.device
    x = torch.from_numpy(np.stack(xs).astype(np.int64))  # (M, B, T)
    y = torch.from_numpy(np.stack(ys).astype(np.int64))  # (M, B, T)
    if dev.type == "cuda":  # pinned, so the copies overlap the device's work
        x, y = x.pin_memory(), y.pin_memory()
    return x.to(dev, non_blocking=True), y.to(dev, non_blocking=True)


def _groups(pack: _Pack, positions: list[int]) -> list[tuple[TaskData, list[int], Ensemble]]:
    """``positions`` grouped by the data their members share, each with its sub-ensemble."""
    by_data: dict[int, list[int]] = {}
    for j in positions:
        by_data.setdefault(id(pack.members[j].data), []).append(j)
    out = []
    for group in by_data.values():
        ens = pack.ens if len(group) == len(pack.members) else pack.ens.select(group)
        out.append((pack.members[group[0]].data, group, ens))
    return out


def _batch_size(pack: _Pack, group: list[int]) -> int:
    return max(pack.members[j].cfg.eval_batch_size for j in group)


def _seeds(pack: _Pack, group: list[int]) -> list[int]:
    return [pack.members[j].cfg.seed for j in group]


def _check(pack: _Pack) -> None:
    """The budget checkpoints and the stopping rules of every member due."""
    _measure_budget(pack)
    due = [
        j
        for j, m in enumerate(pack.members)
        if m.step % m.cfg.eval_every == 0 or m.step == m.cfg.max_steps
    ]
    smooth = pack.smooth.tolist() if due else []
    candidates = []
    for data, group, ens in _groups(pack, due):
        bs = _batch_size(pack, group)
        val = {op: teacher_forced(ens, s, data.vocab.pad_id, bs) for op, s in data.val.items()}
        for k, j in enumerate(group):
            m = pack.members[j]
            m.val_acc = {op: float(acc[k]) for op, (acc, _) in val.items()}
            entry = {
                "step": m.step,
                "loss": smooth[j],
                "val_tf": dict(m.val_acc),
                "val_answer_loss": float(val[m.measure][1][k]),
            }
            m.history.append(entry)
            if not math.isfinite(smooth[j]):
                m.stop_reason = "diverged"
            elif all(a >= m.cfg.learned_tf for a in m.val_acc.values()):
                candidates.append(j)
    for data, group, ens in _groups(pack, candidates):
        eos, bs = data.vocab.eos_id, _batch_size(pack, group)
        greedy = {op: decode(ens, s, eos, bs)[0].mean(1) for op, s in data.val.items()}
        for k, j in enumerate(group):
            m = pack.members[j]
            m.history[-1]["val_greedy"] = {op: float(a[k]) for op, a in greedy.items()}
            if all(a[k] >= m.cfg.learned_acc for a in greedy.values()):
                m.stop_reason = "learned"
    for j in due:
        m = pack.members[j]
        if m.stop_reason is None and is_stuck(m.history, m.cfg, m.chance, m.measure):
            m.stop_reason = "stuck"
    now = time.perf_counter()
    for m in pack.members:
        if m.stop_reason is None and m.step >= m.cfg.max_steps:
            m.stop_reason = "max_steps"
        limit = m.cfg.time_limit_s
        if m.stop_reason is None and limit is not None and now - m.start > limit:
            m.stop_reason = "time_limit"


def is_stuck(history: list[dict], cfg: TrainConfig, chance: float, measure: str) -> bool:
    """Absolute rule: late in the budget, at chance, the answer loss has stopped moving, and no
    other op of the mixture is still improving (its accuracy up by over ``IMPROVING`` within the
    window); never with ``early_stop = "learned"``."""
    step = history[-1]["step"]
    if cfg.early_stop != "learned_or_stuck" or step < cfg.stuck_after * cfg.max_steps:
        return False
    if max(h["val_tf"][measure] for h in history) > chance + cfg.stuck_margin:
        return False
    window_start = step - cfg.stuck_window * cfg.max_steps
    earlier = [h for h in history if h["step"] <= window_start]
    if not earlier:
        return False
    recent = [h for h in history if h["step"] > window_start]
    for op in history[-1]["val_tf"]:
        if op != measure and max(h["val_tf"][op] for h in recent) > IMPROVING + max(
            h["val_tf"][op] for h in earlier
        ):
            return False
    return history[-1]["val_answer_loss"] > 0.98 * min(h["val_answer_loss"] for h in earlier)


def _measure_budget(pack: _Pack) -> None:
    """The measured op's test accuracy of every member at one of its checkpoint steps (the last
    is measured by :func:`_finish`)."""
    at = [
        j
        for j, m in enumerate(pack.members)
        if m.step in m.cfg.checkpoint_steps and m.step < m.cfg.max_steps
    ]
    for data, group, ens in _groups(pack, at):
        bs, eos = _batch_size(pack, group), data.vocab.eos_id
        test = data.test[data.config.measured_op]
        greedy, sampled = decode_greedy_and_sampled(ens, test, eos, bs, _seeds(pack, group))
        greedy, sampled = greedy[0].mean(1), sampled[0].mean(1)
        for k, j in enumerate(group):
            m = pack.members[j]
            m.budget.append(_budget_point(m.step, m.tokens, greedy[k], sampled[k], True))


def _budget_point(step: int, tokens: int, greedy, sampled, reached: bool) -> dict:
    """One entry of :attr:`TrainResult.budget`."""
    return {
        "step": step,
        "tokens": tokens,
        "accuracy": float(greedy),
        "sampled_accuracy": float(sampled),
        "reached": reached,
    }


def _complete_budget(m: _Member, greedy: float, sampled: float) -> None:
    """Add the checkpoints at or past the step where ``m`` ended: the final accuracy, the tokens
    scaled to the checkpoint's step (a run that stopped early is taken to stay put)."""
    done = {b["step"] for b in m.budget}  # measured during the run
    for at in m.cfg.checkpoint_steps:
        if at >= m.step and at not in done:
            scaled = round(m.tokens * at / max(m.step, 1))
            m.budget.append(_budget_point(at, scaled, greedy, sampled, at == m.step))


def _finish(pack: _Pack, ended: list[int]) -> list[TrainResult]:
    """Test-set measurements and the trained model of each member in ``ended``."""
    results = {}
    for data, group, ens in _groups(pack, ended):
        cpu = time.process_time()
        bs, eos = _batch_size(pack, group), data.vocab.eos_id
        accuracy, strict, teacher, sampled = ({j: {} for j in group} for _ in range(4))
        for op, s in data.test.items():
            (answer_ok, strict_ok), (draws, _) = decode_greedy_and_sampled(
                ens, s, eos, bs, _seeds(pack, group)
            )
            tf = teacher_forced(ens, s, data.vocab.pad_id, bs)[0]
            for k, j in enumerate(group):
                accuracy[j][op] = float(answer_ok[k].mean())
                strict[j][op] = float(strict_ok[k].mean())
                teacher[j][op] = float(tf[k])
                sampled[j][op] = float(draws[k].mean())
        _charge_cpu([pack.members[j] for j in group], cpu)
        for k, j in enumerate(group):
            m = pack.members[j]
            _complete_budget(m, accuracy[j][m.measure], sampled[j][m.measure])
            results[j] = TrainResult(
                model=ens.member(k),
                steps=m.step,
                stop_reason=m.stop_reason,
                wall_s=time.perf_counter() - m.start,
                train_s=m.train_s,
                cpu_s=m.cpu_s,
                tokens=m.tokens,
                accuracy=accuracy[j],
                strict_accuracy=strict[j],
                teacher_forced=teacher[j],
                history=m.history,
                sampled_accuracy=sampled[j],
                budget=m.budget,
            )
    return [results[j] for j in ended]
