"""When a member stops, and its budget checkpoints.

A member stops by absolute rules only (:func:`check`): *learned* (its teacher-forced validation
answers right, confirmed by greedy decoding; not with ``early_stop = "never"``, which records
validation and trains the whole budget), *stuck* (late in the budget, at chance, its answer
loss flat, and no other op of its mixture improving: :func:`is_stuck`), *diverged* (its
training loss is not finite), its step budget, or its time limit. At each of its config's
checkpoint steps the measured op's test accuracy is recorded (:attr:`TrainResult.budget
<threshold.train.run.TrainResult.budget>`), and the checkpoints a run stopped before are filled
in when it ends (:func:`complete_budget`).
"""

from __future__ import annotations

import math
import time

from threshold.config import TrainConfig
from threshold.train.evaluate import decode, decode_greedy_and_sampled, teacher_forced
from threshold.train.pack import Member, Pack, batch_size, groups, seeds

__all__ = ["IMPROVING", "check", "complete_budget", "is_stuck"]

IMPROVING = 0.01  # an op whose accuracy rose more than this in the stuck window is still learning


def check(pack: Pack) -> None:
    """The budget checkpoints and the stopping rules of every member due."""
    _measure_budget(pack)
    due = [
        j
        for j, m in enumerate(pack.members)
        if m.step % m.cfg.eval_every == 0 or m.step == m.cfg.max_steps
    ]
    smooth = pack.smooth.tolist() if due else []
    candidates = []
    for data, group, ens in groups(pack, due):
        bs = batch_size(pack, group)
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
            elif m.cfg.early_stop != "never" and all(
                a >= m.cfg.learned_tf for a in m.val_acc.values()
            ):
                candidates.append(j)
    for data, group, ens in groups(pack, candidates):
        eos, bs = data.vocab.eos_id, batch_size(pack, group)
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
    window); only with ``early_stop = "learned_or_stuck"``."""
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


def _measure_budget(pack: Pack) -> None:
    """The measured op's test accuracy of every member at one of its checkpoint steps (the last
    is measured when the run ends, by the engine)."""
    at = [
        j
        for j, m in enumerate(pack.members)
        if m.step in m.cfg.checkpoint_steps and m.step < m.cfg.max_steps
    ]
    for data, group, ens in groups(pack, at):
        bs, eos = batch_size(pack, group), data.vocab.eos_id
        test = data.test[data.config.measured_op]
        greedy, sampled = decode_greedy_and_sampled(ens, test, eos, bs, seeds(pack, group))
        greedy, sampled = greedy[0].mean(1), sampled[0].mean(1)
        for k, j in enumerate(group):
            m = pack.members[j]
            m.budget.append(_budget_point(m.step, m.tokens, greedy[k], sampled[k], True))


def _budget_point(step: int, tokens: int, greedy, sampled, reached: bool) -> dict:
    """One entry of :attr:`threshold.train.run.TrainResult.budget`."""
    return {
        "step": step,
        "tokens": tokens,
        "accuracy": float(greedy),
        "sampled_accuracy": float(sampled),
        "reached": reached,
    }


def complete_budget(m: Member, greedy: float, sampled: float) -> None:
    """Add the checkpoints at or past the step where ``m`` ended: the final accuracy, the tokens
    scaled to the checkpoint's step (a run that stopped early is taken to stay put)."""
    done = {b["step"] for b in m.budget}  # measured during the run
    for at in m.cfg.checkpoint_steps:
        if at >= m.step and at not in done:
            scaled = round(m.tokens * at / max(m.step, 1))
            m.budget.append(_budget_point(at, scaled, greedy, sampled, at == m.step))
