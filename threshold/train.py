"""Train one recurrent transformer on a task's sequences and evaluate it.

Nothing here knows a task by name: the data is a training :class:`SequenceSet` plus validation and
test sets keyed by op, all token ids. Training uses length-bucketed batches (sequences of similar
length share a batch, so little compute goes to padding) or random windows of the concatenated
training stream (``TrainConfig.batches``; evaluation is always on whole sequences), AdamW with
linear warm-up and cosine decay, and gradient clipping. Accuracy is measured by greedy
chain-of-thought decoding from the prompt: the final answer is the token before the end token. A run
stops early only by absolute rules: *learned* (teacher-forced answers right on validation, confirmed
by greedy decoding), or *stuck* (after half the budget, the measured op's answers are still at
chance and its answer loss has stopped moving). Progress is reported through a callback; nothing is
printed.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F

from threshold.batches import bucket_batches, make_batches, token_stream, window_batches
from threshold.config import TrainConfig
from threshold.errors import ConfigError
from threshold.model import KVCache, ModelConfig, RecurrentTransformer, param_count
from threshold.tasks import SequenceSet, TaskConfig, TaskData

__all__ = [
    "Progress",
    "TrainConfig",
    "TrainResult",
    "batch_tensors",
    "bucket_batches",
    "budget_point",
    "check_context",
    "complete_budget",
    "continue_training",
    "drawn_length",
    "drawn_tensors",
    "drawn_tokens",
    "evaluate_decode",
    "evaluate_greedy",
    "evaluate_teacher_forced",
    "init_model",
    "is_stuck",
    "lr_factor",
    "majority_rate",
    "make_batches",
    "make_optimizer",
    "model_config_for",
    "pick_tokens",
    "prompt_groups",
    "sampler_for",
    "score_traces",
    "train",
    "train_batches",
    "train_step",
]

IGNORE = -100  # target id that the loss skips
IMPROVING = 0.01  # an op whose accuracy rose more than this in the stuck window is still learning


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
    stop_reason: str  # learned | stuck | max_steps | time_limit
    wall_s: float
    train_s: float  # seconds in training steps, without evaluation
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


def model_config_for(
    task: TaskConfig, d_model: int, train: TrainConfig | None = None, **kwargs
) -> ModelConfig:
    """The model config that fits the vocabulary and longest sequence of ``task`` (and the
    windows of ``train``, when it trains on stream windows: see :meth:`TrainConfig.context`).

    Needs no generated data, so settings can be checked before anything is written.
    """
    n_ctx = task.max_len if train is None else train.context(task.max_len)
    return ModelConfig(vocab_size=len(task.vocab), n_ctx=n_ctx, d_model=d_model, **kwargs)


def batch_tensors(
    seqs: SequenceSet, index: np.ndarray, pad_id: int, completion_only: bool, length: int = 0
):
    """Inputs and targets of sequences ``index``, right-padded to at least ``length`` + 1 tokens."""
    tokens = seqs.padded(index, pad_id)  # (B, L)
    if tokens.shape[1] < length + 1:
        extra = np.full((len(index), length + 1 - tokens.shape[1]), pad_id, dtype=tokens.dtype)
        tokens = np.concatenate([tokens, extra], axis=1)
    x = torch.from_numpy(tokens[:, :-1])  # (B, T)
    y = tokens[:, 1:].copy()  # (B, T): y[:, t] is token t + 1
    y[y == pad_id] = IGNORE
    if completion_only:
        t = np.arange(y.shape[1])[None, :]
        y[t + 1 < seqs.prompt_len[index].astype(np.int64)[:, None]] = IGNORE
    return x, torch.from_numpy(y)


def drawn_tensors(
    seqs: SequenceSet, drawn: np.ndarray, cfg: TrainConfig, pad_id: int, length: int = 0
):
    """Inputs and targets (B, T) of a batch from :func:`train_batches`, at least ``length`` long.

    ``drawn`` is an index array (B,) of sequences (see :func:`batch_tensors`) or, with stream
    windows, a token array (B, window + 1): every target in the loss, padding beyond it out.
    """
    if drawn.ndim == 1:
        return batch_tensors(seqs, drawn, pad_id, cfg.loss_on == "completion", length)
    tokens = drawn  # (B, W + 1)
    if tokens.shape[1] < length + 1:
        extra = np.full((len(tokens), length + 1 - tokens.shape[1]), pad_id, dtype=tokens.dtype)
        tokens = np.concatenate([tokens, extra], axis=1)
    x = torch.from_numpy(np.ascontiguousarray(tokens[:, :-1]))  # (B, T)
    y = tokens[:, 1:].copy()  # (B, T)
    y[:, drawn.shape[1] - 1 :] = IGNORE  # the padding, if any
    return x, torch.from_numpy(y)


def drawn_tokens(seqs: SequenceSet, drawn: np.ndarray) -> int:
    """Tokens a drawn batch trains on: its sequences' lengths, or batch x window."""
    if drawn.ndim == 1:
        return int(seqs.lengths[drawn].sum())
    return drawn.shape[0] * (drawn.shape[1] - 1)


def drawn_length(seqs: SequenceSet, drawn: np.ndarray) -> int:
    """Input positions a drawn batch needs: its longest sequence less one, or the window."""
    if drawn.ndim == 1:
        return int(seqs.lengths[drawn].max()) - 1
    return drawn.shape[1] - 1


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


def make_optimizer(model: RecurrentTransformer, cfg: TrainConfig) -> torch.optim.AdamW:
    decay = [p for p in model.parameters() if p.dim() >= 2 or cfg.decay_all]
    no_decay = [p for p in model.parameters() if p.dim() < 2 and not cfg.decay_all]
    groups = [
        {"params": decay, "weight_decay": cfg.weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]
    # The fused kernel updates every tensor in one pass: 0-4% faster steps at d = 32 here.
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=cfg.betas, fused=True)


def train_step(
    model: RecurrentTransformer,
    opt: torch.optim.Optimizer,
    x: torch.Tensor,
    y: torch.Tensor,
    grad_clip: float,
) -> float:
    """One optimizer step on inputs ``x`` (B, T) and targets ``y`` (B, T); returns the loss."""
    logits = model(x)  # (B, T, V)
    loss = F.cross_entropy(logits.flatten(0, 1), y.flatten(), ignore_index=IGNORE)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    opt.step()
    return float(loss.detach())


@torch.no_grad()
def evaluate_teacher_forced(
    model: RecurrentTransformer, seqs: SequenceSet, pad_id: int, batch_size: int = 256
) -> tuple[float, float]:
    """Teacher-forced answer accuracy and mean answer loss: the cheap signal for early stopping."""
    model.eval()
    device = model.head.weight.device
    order = np.argsort(seqs.lengths, kind="stable")
    correct, loss = 0, 0.0
    for start in range(0, len(order), batch_size):
        index = order[start : start + batch_size]
        tokens = torch.from_numpy(seqs.padded(index, pad_id)).to(device)  # (B, L)
        logits = model(tokens[:, :-1])  # (B, T, V)
        where = torch.from_numpy(seqs.lengths[index] - 3)  # (B,): logits that predict the answer
        answer_logits = logits[torch.arange(len(index)), where.to(device)]  # (B, V)
        answers = torch.from_numpy(seqs.answers[index].astype(np.int64)).to(device)  # (B,)
        correct += int((answer_logits.argmax(-1) == answers).sum())
        loss += float(F.cross_entropy(answer_logits, answers, reduction="sum"))
    model.train()
    return correct / len(seqs), loss / len(seqs)


def sampler_for(device, seed: int | None) -> torch.Generator | None:
    """The generator that sampled decoding draws from (``None``: greedy decoding)."""
    if seed is None:
        return None
    return torch.Generator(device=device).manual_seed(seed % 2**63)


def pick_tokens(logits: torch.Tensor, gen: torch.Generator | None) -> torch.Tensor:
    """Next tokens from ``logits`` (..., V): the argmax, or with ``gen`` a draw at temperature 1."""
    if gen is None:
        return logits.argmax(-1)
    probs = logits.float().softmax(-1).reshape(-1, logits.shape[-1])  # (N, V)
    return torch.multinomial(probs, 1, generator=gen).view(logits.shape[:-1])


def evaluate_greedy(
    model: RecurrentTransformer, seqs: SequenceSet, eos_id: int, batch_size: int = 256
) -> tuple[np.ndarray, np.ndarray]:
    """Greedy chain-of-thought decoding from each prompt, with a KV cache.

    Returns per sequence whether the final answer is right and whether the whole trace is right.
    Decoding stops at the end token or when the context is full, so an untrained model cannot run
    away; no end token means a wrong answer.
    """
    return evaluate_decode(model, seqs, eos_id, batch_size)


@torch.no_grad()
def evaluate_decode(
    model: RecurrentTransformer,
    seqs: SequenceSet,
    eos_id: int,
    batch_size: int = 256,
    sample_seed: int | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`evaluate_greedy`, or with ``sample_seed`` sampling each token at temperature 1."""
    model.eval()
    device = model.head.weight.device
    n_ctx = model.cfg.n_ctx
    gen = sampler_for(device, sample_seed)
    answer_ok = np.zeros(len(seqs), dtype=bool)
    strict_ok = np.zeros(len(seqs), dtype=bool)
    for p, index in prompt_groups(seqs, batch_size):
        prompts = torch.from_numpy(seqs.padded(index, 0)[:, :p]).to(device)  # (B, P)
        cache = KVCache(model.cfg, len(index), device=device)
        next_tok = pick_tokens(model(prompts, cache)[:, -1], gen)  # (B,)
        out = [next_tok]
        done = next_tok == eos_id  # (B,)
        while not bool(done.all()) and cache.length < n_ctx:
            next_tok = pick_tokens(model(next_tok[:, None], cache)[:, -1], gen)  # (B,)
            out.append(next_tok)
            done |= next_tok == eos_id
        generated = torch.stack(out, 1).cpu().numpy()  # (B, G)
        answer_ok[index], strict_ok[index] = score_traces(generated, seqs, index, p, eos_id)
    model.train()
    return answer_ok, strict_ok


def prompt_groups(seqs: SequenceSet, batch_size: int):
    """``(prompt length, indices)`` chunks of at most ``batch_size`` sequences: decoding batches."""
    prompt_len = seqs.prompt_len.astype(np.int64)
    for p in np.unique(prompt_len):
        group = np.flatnonzero(prompt_len == p)
        for start in range(0, len(group), batch_size):
            yield int(p), group[start : start + batch_size]


def score_traces(
    generated: np.ndarray, seqs: SequenceSet, index: np.ndarray, p: int, eos_id: int
) -> tuple[np.ndarray, np.ndarray]:
    """Whether each decoded trace ``generated`` (B, G) has the right answer, and is right whole.

    Row b continues the prompt (``p`` tokens) of sequence ``index[b]``; the answer is the token
    before the first end token, and no end token (or one at the start) is a wrong answer.
    """
    reference = seqs.padded(index, -1)[:, p:]  # (B, Lr): the completion, -1 beyond its end
    ref_len = seqs.lengths[index] - p  # (B,)
    width = max(generated.shape[1], reference.shape[1])
    gen = np.full((len(index), width), -2, dtype=np.int64)  # (B, W)
    gen[:, : generated.shape[1]] = generated
    ref = np.full((len(index), width), -1, dtype=np.int64)  # (B, W)
    ref[:, : reference.shape[1]] = reference
    is_end = gen == eos_id  # (B, W)
    first = is_end.argmax(1)  # (B,): the first end token (0 when there is none)
    found = is_end.any(1) & (first > 0)
    rows = np.arange(len(index))
    answer_ok = found & (gen[rows, np.maximum(first - 1, 0)] == ref[rows, ref_len - 2])
    strict_ok = found & (first + 1 == ref_len) & ((gen == ref) | (ref == -1)).all(1)
    return answer_ok, strict_ok


def majority_rate(seqs: SequenceSet) -> float:
    """Accuracy of always giving the most common answer: what "at chance" means here."""
    return float(np.bincount(seqs.answers).max() / len(seqs))


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
    """Train a fresh model on ``data.train``, stop early on ``data.val``, report ``data.test``."""
    model = init_model(model_cfg, cfg.seed)
    if param_count(model_cfg) != model.num_params():
        raise AssertionError("parameter formula and model disagree")
    return continue_training(model, data, cfg, on_progress, progress_every, device)


def continue_training(
    model: RecurrentTransformer,
    data: TaskData,
    cfg: TrainConfig,
    on_progress: Callable[[Progress], None] | None = None,
    progress_every: int = 25,
    device: str | torch.device = "cpu",
) -> TrainResult:
    """Train ``model`` with a fresh optimizer on ``data`` (also the transfer step).

    The model trains on ``device`` and is handed back on the CPU.
    """
    torch.set_num_threads(cfg.threads)
    vocab = data.vocab
    pad_id, eos_id = vocab.pad_id, vocab.eos_id
    measure = data.config.measured_op
    check_context(model.cfg, cfg)
    model.to(device)
    opt = make_optimizer(model, cfg)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_factor(cfg))
    batches = train_batches(data.train, cfg)
    chance = majority_rate(data.val[measure])

    t0 = time.perf_counter()
    train_s, tokens, smooth = 0.0, 0, None
    history: list[dict] = []
    val_acc: dict[str, float] = {}
    stop_reason, step, reported = "max_steps", 0, 0
    budget: list[dict] = []
    model.train()
    while step < cfg.max_steps:
        ts = time.perf_counter()
        drawn = next(batches)
        x, y = drawn_tensors(data.train, drawn, cfg, pad_id)
        value = train_step(model, opt, x.to(device), y.to(device), cfg.grad_clip)
        sched.step()
        step += 1
        tokens += drawn_tokens(data.train, drawn)
        train_s += time.perf_counter() - ts
        smooth = value if smooth is None else 0.95 * smooth + 0.05 * value

        if step in cfg.checkpoint_steps and step < cfg.max_steps:  # the last: the test below
            test = data.test[measure]
            greedy = float(evaluate_greedy(model, test, eos_id, cfg.eval_batch_size)[0].mean())
            sampled = evaluate_decode(model, test, eos_id, cfg.eval_batch_size, cfg.seed)[0]
            budget.append(budget_point(step, tokens, greedy, float(sampled.mean()), True))
        if step % cfg.eval_every == 0 or step == cfg.max_steps:
            val = {
                op: evaluate_teacher_forced(model, s, pad_id, cfg.eval_batch_size)
                for op, s in data.val.items()
            }
            val_acc = {op: acc for op, (acc, _) in val.items()}
            entry = {
                "step": step,
                "loss": smooth,
                "val_tf": val_acc,
                "val_answer_loss": val[measure][1],
            }
            history.append(entry)
            if all(a >= cfg.learned_tf for a in val_acc.values()):
                greedy = {
                    op: float(evaluate_greedy(model, s, eos_id, cfg.eval_batch_size)[0].mean())
                    for op, s in data.val.items()
                }
                entry["val_greedy"] = greedy
                if all(a >= cfg.learned_acc for a in greedy.values()):
                    stop_reason = "learned"
                    break
            if is_stuck(history, cfg, chance, measure):
                stop_reason = "stuck"
                break
        if on_progress is not None and step % progress_every == 0:
            on_progress(Progress(step, cfg.max_steps, smooth, tokens / train_s, dict(val_acc)))
            reported = step
        if cfg.time_limit_s is not None and time.perf_counter() - t0 > cfg.time_limit_s:
            stop_reason = "time_limit"
            break

    if on_progress is not None and reported != step:  # the step the run ended on
        on_progress(Progress(step, cfg.max_steps, smooth, tokens / train_s, dict(val_acc)))
    accuracy, strict, teacher, sampled = {}, {}, {}, {}
    for op, s in data.test.items():
        answer_ok, strict_ok = evaluate_greedy(model, s, eos_id, cfg.eval_batch_size)
        accuracy[op], strict[op] = float(answer_ok.mean()), float(strict_ok.mean())
        teacher[op] = evaluate_teacher_forced(model, s, pad_id, cfg.eval_batch_size)[0]
        draws = evaluate_decode(model, s, eos_id, cfg.eval_batch_size, cfg.seed)[0]
        sampled[op] = float(draws.mean())
    complete_budget(budget, cfg, step, tokens, accuracy[measure], sampled[measure])
    return TrainResult(
        model=model.cpu(),
        steps=step,
        stop_reason=stop_reason,
        wall_s=time.perf_counter() - t0,
        train_s=train_s,
        tokens=tokens,
        accuracy=accuracy,
        strict_accuracy=strict,
        teacher_forced=teacher,
        history=history,
        sampled_accuracy=sampled,
        budget=budget,
    )


def budget_point(step: int, tokens: int, greedy: float, sampled: float, reached: bool) -> dict:
    """One entry of :attr:`TrainResult.budget`."""
    return {
        "step": step,
        "tokens": tokens,
        "accuracy": greedy,
        "sampled_accuracy": sampled,
        "reached": reached,
    }


def complete_budget(
    budget: list[dict], cfg: TrainConfig, steps: int, tokens: int, greedy: float, sampled: float
) -> None:
    """Add the checkpoints at or past ``steps``, where the run ended: the final accuracy, the
    tokens scaled to the checkpoint's step (a run that stopped early is taken to stay put)."""
    done = {b["step"] for b in budget}  # measured during the run
    for at in cfg.checkpoint_steps:
        if at >= steps and at not in done:
            scaled = round(tokens * at / max(steps, 1))
            budget.append(budget_point(at, scaled, greedy, sampled, at == steps))


def train_batches(train_set: SequenceSet, cfg: TrainConfig):
    """The run's endless batches (its order, from its seed): index arrays (B,) of sequences, or
    with ``cfg.batches = "windows"`` token arrays (B, window + 1) of the concatenated stream."""
    if cfg.batches == "windows":
        stream = token_stream(train_set.tokens, train_set.offsets)
        return window_batches(stream, cfg.window, cfg.batch_size, cfg.seed)
    return make_batches(
        train_set.lengths,
        cfg.batch_size,
        cfg.seed,
        cfg.batch_order,
        cfg.length_bins,
        cfg.bucket_chunk,
    )


def check_context(model_cfg: ModelConfig, cfg: TrainConfig) -> None:
    """Refuse a model with fewer positions than the windows it would train on."""
    if cfg.batches == "windows" and model_cfg.n_ctx < cfg.window:
        raise ConfigError(
            f"window {cfg.window} is longer than the model's context (n_ctx {model_cfg.n_ctx}): "
            "build the model with model_config_for(task, d, train) or use a smaller window"
        )


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
