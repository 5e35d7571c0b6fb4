"""Evaluation of every member of an ensemble at once: teacher-forced answers and greedy decoding.

The same measurements as :func:`threshold.train.evaluate_teacher_forced` and
:func:`threshold.train.evaluate_greedy`, for members that share one evaluation set: the set's
batches are fed to every member, and decoding runs until every member has ended every trace. A
CUDA out-of-memory error halves the evaluation batch and tries again (evaluation changes nothing).
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from threshold.ensemble import Ensemble, EnsembleCache
from threshold.tasks import SequenceSet
from threshold.train import pick_tokens, prompt_groups, sampler_for, score_traces

__all__ = ["ensemble_decode", "ensemble_greedy", "ensemble_teacher_forced"]


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
def ensemble_teacher_forced(
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
            nll = F.cross_entropy(
                logits.flatten(0, 1), answers.repeat(m), reduction="none"
            )  # (M * B,)
            loss += nll.view(m, -1).sum(1)
        n = len(seqs)
        return (correct / n).cpu().numpy(), (loss / n).cpu().numpy()

    return _halving(run, batch_size)


def ensemble_greedy(
    ens: Ensemble, seqs: SequenceSet, eos_id: int, batch_size: int = 256
) -> tuple[np.ndarray, np.ndarray]:
    """Greedy chain-of-thought decoding by every member, with a KV cache.

    Returns (M, N) arrays: whether member m got sequence n's final answer, and its whole trace.
    """
    return ensemble_decode(ens, seqs, eos_id, batch_size)


@torch.no_grad()
def ensemble_decode(
    ens: Ensemble,
    seqs: SequenceSet,
    eos_id: int,
    batch_size: int = 256,
    sample_seed: int | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`ensemble_greedy`, or with ``sample_seed`` sampling at temperature 1 (every member
    draws its own tokens from one generator seeded so)."""

    def run(bs: int):
        m, dev, n_ctx = ens.n_members, ens.device, ens.cfg.n_ctx
        gen = sampler_for(dev, sample_seed)
        answer_ok = np.zeros((m, len(seqs)), dtype=bool)
        strict_ok = np.zeros((m, len(seqs)), dtype=bool)
        for p, index in prompt_groups(seqs, bs):
            prompts = torch.from_numpy(seqs.padded(index, 0)[:, :p]).to(dev)  # (B, P)
            cache = EnsembleCache.empty(ens, len(index))
            next_tok = pick_tokens(ens(prompts[None].expand(m, -1, -1), cache)[:, :, -1], gen)
            out = [next_tok]
            done = next_tok == eos_id  # (M, B)
            while not bool(done.all()) and cache.length < n_ctx:
                next_tok = pick_tokens(ens(next_tok[:, :, None], cache)[:, :, -1], gen)  # (M, B)
                out.append(next_tok)
                done |= next_tok == eos_id
            generated = torch.stack(out, 2).cpu().numpy()  # (M, B, G)
            for j in range(m):
                answer_ok[j, index], strict_ok[j, index] = score_traces(
                    generated[j], seqs, index, p, eos_id
                )
        return answer_ok, strict_ok

    return _halving(run, batch_size)
