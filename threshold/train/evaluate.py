"""Evaluation of the members of a stack: teacher-forced answers, and greedy or sampled decoding.

Every measurement takes an :class:`~threshold.train.ensemble.Ensemble` whose members share one
evaluation set and gives one number (or row) per member; a single model is a stack of one
(:func:`evaluate_greedy` and friends wrap it). Decoding writes the chain of thought from the
prompt with one KV cache and stops at the end token or the context cap, so an untrained model
cannot run away; the answer is the token before the end token.

Sampled decoding (temperature 1) draws with the Gumbel-max trick from counter-based noise: the
noise of a token is a hash of (the member's seed, the sequence's index in its set, the position,
the token id). So a member's draws depend on its own seed alone, never on its pack-mates, the
batch size or the device's random generator, and a run samples the same traces alone or batched.
A CUDA out-of-memory error halves the evaluation batch and tries again (evaluation changes
nothing).
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from threshold.model import RecurrentTransformer
from threshold.tasks import SequenceSet
from threshold.tasks.sequences import chance_rate, majority_rate
from threshold.train.ensemble import Ensemble, EnsembleCache

__all__ = [
    "chance_rate",
    "decode",
    "decode_greedy_and_sampled",
    "evaluate_decode",
    "evaluate_greedy",
    "evaluate_teacher_forced",
    "gumbel_noise",
    "majority_rate",
    "prompt_groups",
    "score_traces",
    "teacher_forced",
]

_MASK = 0xFFFFFFFF


def _halving(fn, batch_size: int):
    while True:
        try:
            return fn(batch_size)
        except torch.OutOfMemoryError:
            if batch_size == 1:
                raise
            batch_size //= 2
            torch.cuda.empty_cache()


@torch.no_grad()
def teacher_forced(
    ens: Ensemble, seqs: SequenceSet, pad_id: int, batch_size: int = 256
) -> tuple[np.ndarray, np.ndarray]:
    """Teacher-forced answer accuracy and mean answer loss of each member: (M,) each."""

    def run(bs: int):
        m, dev = ens.n_members, ens.device
        order = np.argsort(seqs.lengths, kind="stable")
        correct = torch.zeros(m, device=dev)
        loss = torch.zeros(m, device=dev)
        for start in range(0, len(order), bs):
            index = order[start : start + bs]
            tokens = torch.from_numpy(seqs.padded(index, pad_id)).to(dev)  # (B, L)
            x = tokens[None, :, :-1].expand(m, -1, -1)  # (M, B, T)
            where = torch.from_numpy(seqs.lengths[index] - 3).to(dev)  # (B,): answer positions
            logits = ens(x)[:, torch.arange(len(index), device=dev), where]  # (M, B, V)
            answers = torch.from_numpy(seqs.answers[index].astype(np.int64)).to(dev)  # (B,)
            correct += (logits.argmax(-1) == answers).sum(1)
            nll = F.cross_entropy(logits.flatten(0, 1), answers.repeat(m), reduction="none")
            loss += nll.view(m, -1).sum(1)  # nll: (M * B,)
        n = len(seqs)
        return (correct / n).cpu().numpy(), (loss / n).cpu().numpy()

    return _halving(run, batch_size)


def _mul32(x: torch.Tensor, c: int) -> torch.Tensor:
    """``x * c`` modulo 2**32 for int64 ``x`` in [0, 2**32), without overflowing int64."""
    lo = x * (c & 0xFFFF)
    hi = ((x * (c >> 16)) & 0xFFFF) << 16
    return (lo + hi) & _MASK


def _mix32(x: torch.Tensor) -> torch.Tensor:
    """A 32-bit integer hash (lowbias32) of int64 ``x`` in [0, 2**32)."""
    x = x ^ (x >> 16)
    x = _mul32(x, 0x7FEB352D)
    x = x ^ (x >> 15)
    x = _mul32(x, 0x846CA68B)
    return x ^ (x >> 16)


def gumbel_noise(
    seeds: torch.Tensor, sequences: torch.Tensor, position: int, vocab: int
) -> torch.Tensor:
    """Gumbel(0, 1) noise (M, B, V) for members with ``seeds`` (M,) int64, sequences with set
    indices ``sequences`` (B,) int64, at ``position``, over ``vocab`` token ids: a pure function
    of the four, so a member's draws are its own."""
    dev = seeds.device
    lo, hi = seeds & _MASK, (seeds >> 32) & _MASK  # (M,)
    key = _mix32(lo ^ _mix32(hi ^ 0x9E3779B9))[:, None, None]  # (M, 1, 1)
    seq = _mix32((sequences & _MASK) ^ 0x85EBCA6B)[None, :, None]  # (1, B, 1)
    pos = _mix32(torch.tensor(position, device=dev) ^ 0xC2B2AE35)
    tok = torch.arange(vocab, device=dev, dtype=torch.int64)[None, None, :]  # (1, 1, V)
    h = _mix32(_mix32(_mix32(key ^ seq) ^ pos) ^ tok)  # (M, B, V)
    u = ((h >> 8).float() + 0.5) / 2.0**24  # (M, B, V), in (0, 1)
    return -torch.log(-torch.log(u))


def _pick(logits: torch.Tensor, modes: list, sequences, position: int) -> torch.Tensor:
    """Next tokens (M, B) from ``logits`` (M, B, V), whose batch is ``len(modes)`` equal parts,
    one per mode: a mode None takes the argmax, a mode of member seeds (M,) draws at temperature
    1 (Gumbel-max)."""
    picked = []
    for seeds, part in zip(modes, logits.chunk(len(modes), 1), strict=True):
        if seeds is None:
            picked.append(part.argmax(-1))
        else:
            noise = gumbel_noise(seeds, sequences, position, part.shape[-1])
            picked.append((part.float() + noise).argmax(-1))
    return picked[0] if len(picked) == 1 else torch.cat(picked, 1)


@torch.no_grad()
def decode(
    ens: Ensemble,
    seqs: SequenceSet,
    eos_id: int,
    batch_size: int = 256,
    seeds: list[int] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Chain-of-thought decoding by every member from each prompt, with a KV cache: greedy, or
    with ``seeds`` (one per member) sampled at temperature 1.

    Returns (M, N) arrays: whether member m got sequence n's final answer, and its whole trace.
    """
    return _decode(ens, seqs, eos_id, batch_size, [seeds])[0]


@torch.no_grad()
def decode_greedy_and_sampled(
    ens: Ensemble, seqs: SequenceSet, eos_id: int, batch_size: int, seeds: list[int]
) -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]:
    """:func:`decode` greedy and :func:`decode` with ``seeds``, in one pass: each batch of prompts
    twice over, so the two cost about one on small models (a decoding step is mostly overhead).
    Returns (greedy, sampled), each what :func:`decode` returns."""
    greedy, sampled = _decode(ens, seqs, eos_id, batch_size, [None, seeds])
    return greedy, sampled


def _decode(ens: Ensemble, seqs: SequenceSet, eos_id: int, batch_size: int, modes: list) -> list:
    """One (answer_ok, strict_ok) pair of (M, N) arrays per mode (None: greedy; member seeds:
    sampled), every mode's copy of a batch of prompts decoded together."""

    def run(bs: int):
        m, dev, n_ctx, k = ens.n_members, ens.device, ens.cfg.n_ctx, len(modes)
        member_modes = [
            None if s is None else torch.tensor([x % 2**63 for x in s], device=dev)  # (M,)
            for s in modes
        ]
        out_ok = [
            (np.zeros((m, len(seqs)), dtype=bool), np.zeros((m, len(seqs)), dtype=bool))
            for _ in modes
        ]
        for p, index in prompt_groups(seqs, bs):
            b = len(index)
            sequences = torch.from_numpy(index.astype(np.int64)).to(dev)  # (B,)
            prompts = torch.from_numpy(seqs.padded(index, 0)[:, :p]).to(dev)  # (B, P)
            prompts = prompts.repeat(k, 1)  # (K * B, P): one copy per mode
            cache = EnsembleCache.empty(ens, k * b)
            logits = ens(prompts[None].expand(m, -1, -1), cache)[:, :, -1]  # (M, K * B, V)
            next_tok = _pick(logits, member_modes, sequences, cache.length)  # (M, K * B)
            out = [next_tok]
            done = next_tok == eos_id  # (M, K * B)
            while not bool(done.all()) and cache.length < n_ctx:
                logits = ens(next_tok[:, :, None], cache)[:, :, -1]  # (M, K * B, V)
                next_tok = _pick(logits, member_modes, sequences, cache.length)  # (M, K * B)
                out.append(next_tok)
                done |= next_tok == eos_id
            generated = torch.stack(out, 2).cpu().numpy()  # (M, K * B, G)
            for i, (answer_ok, strict_ok) in enumerate(out_ok):  # every member at once
                answer_ok[:, index], strict_ok[:, index] = score_traces(
                    generated[:, i * b : (i + 1) * b], seqs, index, p, eos_id
                )
        return out_ok

    return _halving(run, batch_size)


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
    """Whether each decoded trace ``generated`` (..., B, G) has the right answer, and is right
    whole: (..., B) each, every member and mode at once.

    Row b continues the prompt (``p`` tokens) of sequence ``index[b]``; the answer is the token
    before the first end token, and no end token (or one at the start) is a wrong answer.
    """
    reference = seqs.padded(index, -1)[:, p:]  # (B, Lr): the completion, -1 beyond its end
    ref_len = seqs.lengths[index] - p  # (B,)
    width = max(generated.shape[-1], reference.shape[1])
    gen = np.full((*generated.shape[:-1], width), -2, dtype=np.int64)  # (..., B, W)
    gen[..., : generated.shape[-1]] = generated
    ref = np.full((len(index), width), -1, dtype=np.int64)  # (B, W)
    ref[:, : reference.shape[1]] = reference
    is_end = gen == eos_id  # (..., B, W)
    first = is_end.argmax(-1)  # (..., B): the first end token (0 when there is none)
    found = is_end.any(-1) & (first > 0)
    answer = np.take_along_axis(gen, np.maximum(first - 1, 0)[..., None], -1)[..., 0]  # (..., B)
    answer_ok = found & (answer == ref[np.arange(len(index)), ref_len - 2])
    strict_ok = found & (first + 1 == ref_len) & ((gen == ref) | (ref == -1)).all(-1)
    return answer_ok, strict_ok


def _stack(model: RecurrentTransformer) -> Ensemble:
    return Ensemble.from_models([model], model.head.weight.device)


def evaluate_teacher_forced(
    model: RecurrentTransformer, seqs: SequenceSet, pad_id: int, batch_size: int = 256
) -> tuple[float, float]:
    """Teacher-forced answer accuracy and mean answer loss of one model (a stack of one)."""
    acc, loss = teacher_forced(_stack(model), seqs, pad_id, batch_size)
    return float(acc[0]), float(loss[0])


def evaluate_decode(
    model: RecurrentTransformer,
    seqs: SequenceSet,
    eos_id: int,
    batch_size: int = 256,
    sample_seed: int | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Per sequence, whether one model's decoded answer and whole trace are right: greedy, or
    with ``sample_seed`` sampled at temperature 1 (as a run with that seed samples)."""
    seeds = None if sample_seed is None else [sample_seed]
    answer_ok, strict_ok = decode(_stack(model), seqs, eos_id, batch_size, seeds)
    return answer_ok[0], strict_ok[0]


def evaluate_greedy(
    model: RecurrentTransformer, seqs: SequenceSet, eos_id: int, batch_size: int = 256
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`evaluate_decode` with greedy decoding."""
    return evaluate_decode(model, seqs, eos_id, batch_size)
