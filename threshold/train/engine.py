"""The training engine: every run of the tool, alone or many at once, on the CPU or a GPU.

:func:`train_runs` trains a list of :class:`~threshold.train.run.Run`; a single run is a list
of one, trained by the same code. The runs are stacked into packs (:mod:`threshold.train.pack`)
that take one forward and backward pass a step; :mod:`threshold.train.memory` plans the packs
(one member each on the CPU, shared on a GPU) and which fit in memory side by side. Packs that
fit together step in turns, so every run moves on; a CUDA out-of-memory error halves the pack it
happened in and carries on, losing no run.

A member that stops (:mod:`threshold.train.checks`) is evaluated on the test sets, handed to
``on_done`` at once and cut out of its pack. A run that names a state file is saved to it every
``save_every_s`` seconds of training and continues from it when it starts again
(:mod:`threshold.train.state`), telling ``on_progress`` so once (``Progress.resumed``). Nothing
here prints: progress goes to callbacks.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import torch

from threshold.config import Execution, ModelConfig, TrainConfig, param_count
from threshold.errors import ConfigError
from threshold.model import RecurrentTransformer
from threshold.tasks import TaskData
from threshold.train.batches import train_batches
from threshold.train.checks import check, complete_budget
from threshold.train.ensemble import Ensemble, check_members, shape_key
from threshold.train.evaluate import decode_greedy_and_sampled, majority_rate, teacher_forced
from threshold.train.layout import Feed
from threshold.train.memory import plan_waves, weight_share
from threshold.train.optimizer import StackedAdamW, lr_factor
from threshold.train.pack import (
    Member,
    Pack,
    batch_size,
    charge_cpu,
    groups,
    resume,
    save_states,
    seeds,
)
from threshold.train.run import Progress, Run, TrainResult
from threshold.train.state import load_state

__all__ = [
    "init_model",
    "start_pack",
    "step_pack",
    "train",
    "train_runs",
]

log = logging.getLogger(__name__)

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
    init: RecurrentTransformer | None = None,
) -> TrainResult:
    """Train a fresh model, or ``init`` further with a fresh optimizer (the transfer step):
    :func:`train_runs` of one run."""
    report = None if on_progress is None else (lambda _, p: on_progress(p))
    run = Run(model_cfg, data, cfg, init)
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
    on_packs: Callable[[list[list[int]]], None] | None = None,
) -> list[TrainResult]:
    """Train every run; the results come back in the order of ``runs``.

    ``on_progress(i, progress)`` and ``on_done(i, result)`` name the run by its position. Runs
    of other model shapes (another vocabulary or context: another task) train in packs of their
    own, beside the others. Packs
    are planned to fit ``memory_bytes`` (default: what the device has free); ``share`` (default:
    on a GPU) lets runs share padded packs (see :func:`threshold.train.memory.plan_packs`).
    ``static`` (default: on a GPU) rounds every batch's layout to a few static shapes
    (:class:`threshold.train.layout.Feed`) and, on a GPU, replays each step as a CUDA graph.
    Runs with a :attr:`Run.state` file are saved to it every ``save_every_s`` seconds.
    ``on_packs(packs)`` sees the plan before anything trains: each pack as the positions of its
    members. The model comes back on the CPU.
    """
    device = torch.device(device)
    static = device.type == "cuda" if static is None else static
    shapes: dict[tuple, list[ModelConfig]] = {}  # runs of other shapes train in other packs
    for r in runs:
        shapes.setdefault(shape_key(r.model_cfg), []).append(r.model_cfg)
    for cfgs in shapes.values():
        check_members(cfgs)
    if device.type == "cpu":
        torch.set_num_threads(max(r.cfg.threads for r in runs))
    results: list[TrainResult | None] = [None] * len(runs)

    def done(i: int, result: TrainResult) -> None:
        results[i] = result
        if on_done is not None:
            on_done(i, result)

    configs = [(r.model_cfg, r.cfg) for r in runs]
    waves = plan_waves(configs, device, memory_bytes, share)
    packs = [pack for wave in waves for pack in wave]
    if on_packs is not None:
        on_packs(packs)
    if len(runs) > 1:
        log.info(
            "%d runs in %d packs of %s members, %.0f%% of their weights their own",
            len(runs), len(packs), ", ".join(str(len(p)) for p in packs),
            100 * weight_share(configs, packs),
        )  # fmt: skip
    for wave in waves:
        active = [start_pack([(i, runs[i]) for i in group], device, static) for group in wave]
        if on_progress is not None:
            for pack in active:
                _say_resumed(pack, on_progress)
        while active:
            for pack in list(active):
                try:
                    _advance(pack, on_progress, done, progress_every)
                    if pack.members and time.perf_counter() - pack.saved_at >= save_every_s:
                        save_states(pack)
                    continue
                except torch.OutOfMemoryError:
                    if len(pack.members) == 1:
                        raise
                # split outside the handler: its traceback pins the failed step's activations
                active.remove(pack)
                active += _halve(pack)
            active = [pack for pack in active if pack.members]
    return results  # type: ignore[return-value]


def _halve(pack: Pack) -> list[Pack]:
    """The pack in two halves, after an out-of-memory error. The halves step eagerly: a CUDA
    graph keeps its step's activations in a memory pool of its own, so two graphed halves side by
    side would need what the whole did (a GPU check halved 16 members down to one that way and
    still ran out). Its graphs are dropped first, so the copies need only the room of the
    weights and moments."""
    n, half = len(pack.members), len(pack.members) // 2
    log.warning("out of memory with %d members: halving the pack, its halves step eagerly", n)
    pack.graphs = None
    torch.cuda.empty_cache()
    parts = list(range(half)), list(range(half, n))
    return [pack.keep(part, graphed=False) for part in parts]


def start_pack(indexed: list[tuple[int, Run]], device: torch.device, static: bool = False) -> Pack:
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
        members.append(Member(i, run, batches, chance, lr_factor(run.cfg), start))
    ens = Ensemble.from_models(models, device)
    opt = StackedAdamW(ens, [m.cfg for m in members])
    smooth = torch.zeros(len(members), device=ens.device)
    for k, m in enumerate(members):
        state = None if m.run.state is None else load_state(m.run.state, m.run.state_key())
        if state is not None:
            resume(ens, opt, smooth, k, m, state)
            log.info("run %d continues from step %d (%s)", m.index, m.step, m.run.state)
    feed = Feed(members, ens.device, static, ens.cfg.n_ctx)
    pack = Pack(ens, opt, members, smooth, feed)
    charge_cpu(members, cpu)
    return pack


def _say_resumed(pack: Pack, on_progress: OnProgress) -> None:
    """``on_progress`` for each member of a new pack that continued from its saved state (a
    new pack's members start at step 0 unless they did)."""
    smooth = pack.smooth.tolist()
    for j, m in enumerate(pack.members):
        if m.step > 0:
            on_progress(m.index, _progress(m, smooth[j], resumed=True))


def _progress(m: Member, loss: float, resumed: bool = False) -> Progress:
    rate = m.tokens / m.train_s if m.train_s > 0 else 0.0
    return Progress(m.step, m.cfg.max_steps, loss, rate, dict(m.val_acc), resumed)


def _advance(pack: Pack, on_progress, done, progress_every: int) -> None:
    """One step of the pack and its stopping rules; a member that stops is handed to ``done``
    and cut out of the pack (which is empty when the last one has stopped)."""
    cpu = time.process_time()
    step_pack(pack)
    check(pack)
    charge_cpu(pack.members, cpu)
    smooth = None
    for j, m in enumerate(pack.members):
        at_end = m.stop_reason is not None
        if on_progress is not None and (m.step % progress_every == 0 or at_end):
            smooth = pack.smooth.tolist() if smooth is None else smooth
            on_progress(m.index, _progress(m, smooth[j]))
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
    pack.feed, pack.graphs = new.feed, new.graphs


def step_pack(pack: Pack) -> None:
    """One training step of every member of the pack (no evaluation)."""
    ts = time.perf_counter()
    batch = pack.feed.next()
    pack.opt.lr.copy_(batch.lr)
    step = pack.eager_step if pack.graphs is None else pack.graphs.step
    losses = step(batch.spans, batch.n, batch.t, batch.dense)
    first = [m.step == 0 for m in pack.members]  # members resumed mid-run beside new ones differ
    if all(first):
        pack.smooth = losses
    elif not any(first):
        pack.smooth = 0.95 * pack.smooth + 0.05 * losses
    else:
        new = torch.tensor(first, device=losses.device)
        pack.smooth = torch.where(new, losses, 0.95 * pack.smooth + 0.05 * losses)
    spent = time.perf_counter() - ts
    for m, tokens in zip(pack.members, batch.tokens.tolist(), strict=True):
        m.step += 1
        m.tokens += tokens
        m.train_s += spent
    pack.last = batch


def _finish(pack: Pack, ended: list[int]) -> list[TrainResult]:
    """Test-set measurements and the trained model of each member in ``ended``."""
    results = {}
    for data, group, ens in groups(pack, ended):
        cpu = time.process_time()
        bs, eos = batch_size(pack, group), data.vocab.eos_id
        accuracy, strict, teacher, sampled = ({j: {} for j in group} for _ in range(4))
        for op, s in data.test.items():
            (answer_ok, strict_ok), (draws, _) = decode_greedy_and_sampled(
                ens, s, eos, bs, seeds(pack, group)
            )
            tf = teacher_forced(ens, s, data.vocab.pad_id, bs)[0]
            for k, j in enumerate(group):
                accuracy[j][op] = float(answer_ok[k].mean())
                strict[j][op] = float(strict_ok[k].mean())
                teacher[j][op] = float(tf[k])
                sampled[j][op] = float(draws[k].mean())
        charge_cpu([pack.members[j] for j in group], cpu)
        for k, j in enumerate(group):
            m = pack.members[j]
            complete_budget(m, accuracy[j][m.measure], sampled[j][m.measure])
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
