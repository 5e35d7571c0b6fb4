"""Layer usage: how much each sublayer writes into the residual stream, and what it is worth.

The recurrent block applies attention and then the MLP ``n_recur`` times, each adding an update to
the residual stream. Two measurements per recurrence step r:

- **Update norm**: over the non-padding positions of teacher-forced test sequences, the mean L2
  norm of the attention output and of the MLP output that step r adds, beside the mean norm of the
  residual stream they are added to. ``attn_share`` = attention norm / (attention + MLP norm), so
  0.5 means both write equally; the paper reads "ADD-only leans on the MLP, joint models use
  attention more" from such a share.
- **Ablation**: greedy final-answer accuracy (the reported metric) when a sublayer's output is
  replaced by zeros, at one step r or at every step. Zero ablation is the bluntest choice: it also
  removes the sublayer's constant bias, so it bounds the sublayer's importance from above.

The norms come from forward hooks on the shared block of a teacher-forced forward: it is called
``n_recur`` times in order, so the call count modulo ``n_recur`` is the step. The ablation decodes
with the training engine's stacked form of the model (a stack of one), whose forward zeroes the
chosen sublayer's output at the chosen steps.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import torch

from threshold.model import RecurrentTransformer
from threshold.tasks import SequenceSet, Vocabulary
from threshold.train.ensemble import Ensemble
from threshold.train.evaluate import decode

__all__ = ["SUBLAYERS", "ablation", "layer_usage", "number_embeddings"]

SUBLAYERS = ("attn", "mlp")


def number_embeddings(model: RecurrentTransformer, vocab: Vocabulary) -> np.ndarray:
    """The input embeddings of the value tokens, one row per value in order: (n_values, d)."""
    start = vocab.value_offset
    weight = model.tok.weight.detach()[start : start + vocab.n_values]  # (N, D)
    return weight.cpu().numpy().astype(np.float64)


class _StepCounter:
    """Step index of the block call in progress: call count modulo the number of steps."""

    def __init__(self, n_recur: int) -> None:
        self.n_recur = n_recur
        self.calls = 0

    def step(self) -> int:
        return self.calls % self.n_recur


@contextmanager
def _hooks(model: RecurrentTransformer, hook_for) -> Iterator[_StepCounter]:
    """Attach ``hook_for(name, counter)`` to attention and MLP; count block calls."""
    counter = _StepCounter(model.cfg.n_recur)
    block = model.block

    def count(module, args, output):
        counter.calls += 1

    handles = [block.register_forward_hook(count)]
    for name in SUBLAYERS:
        handles.append(getattr(block, name).register_forward_hook(hook_for(name, counter)))
    try:
        yield counter
    finally:
        for handle in handles:
            handle.remove()


def _sample(seqs: SequenceSet, max_sequences: int | None, seed: int) -> SequenceSet:
    if max_sequences is None or len(seqs) <= max_sequences:
        return seqs
    rng = np.random.default_rng(seed)
    return seqs.subset(np.sort(rng.choice(len(seqs), max_sequences, replace=False)))


@torch.no_grad()
def layer_usage(
    model: RecurrentTransformer,
    seqs: SequenceSet,
    pad_id: int,
    batch_size: int = 256,
    max_sequences: int | None = 1000,
    seed: int = 0,
) -> dict:
    """Mean update norms per recurrence step over the non-padding positions of ``seqs``.

    Returns ``{"attn": [R], "mlp": [R], "residual": [R], "attn_share": [R], "attn_share_all":
    float, "n_sequences": int}`` with ``residual`` the stream norm before step r's attention.
    """
    seqs = _sample(seqs, max_sequences, seed)
    n_recur = model.cfg.n_recur
    sums = {name: np.zeros(n_recur) for name in (*SUBLAYERS, "residual")}
    mask: torch.Tensor | None = None  # (B, T): positions that hold a real token

    def hook_for(name, counter):
        def hook(module, args, output):
            norms = output.norm(dim=-1)  # (B, T)
            sums[name][counter.step()] += float(norms[mask].sum())

        return hook

    def residual_hook(module, args, output):  # ln_1's input is the stream before attention
        x = args[0]  # (B, T, D)
        sums["residual"][counter.step()] += float(x.norm(dim=-1)[mask].sum())

    model.eval()
    count = 0
    with _hooks(model, hook_for) as counter:
        handle = model.block.ln_1.register_forward_hook(residual_hook)
        try:
            order = np.argsort(seqs.lengths, kind="stable")
            for start in range(0, len(order), batch_size):
                index = order[start : start + batch_size]
                tokens = torch.from_numpy(seqs.padded(index, pad_id).astype(np.int64))  # (B, L)
                lengths = torch.from_numpy(seqs.lengths[index])  # (B,)
                mask = torch.arange(tokens.shape[1])[None, :] < lengths[:, None]  # (B, L)
                model(tokens)
                count += int(mask.sum())
        finally:
            handle.remove()
    model.train()
    means = {name: (s / count).tolist() for name, s in sums.items()}
    attn, mlp = np.array(means["attn"]), np.array(means["mlp"])
    return {
        "attn": means["attn"],
        "mlp": means["mlp"],
        "residual": means["residual"],
        "attn_share": (attn / (attn + mlp)).tolist(),
        "attn_share_all": float(attn.sum() / (attn.sum() + mlp.sum())),
        "n_sequences": len(seqs),
    }


def ablation(
    model: RecurrentTransformer,
    seqs: SequenceSet,
    eos_id: int,
    batch_size: int = 256,
    max_sequences: int | None = 500,
    seed: int = 0,
) -> dict:
    """Greedy answer accuracy of ``model`` on ``seqs``, intact and with each sublayer zeroed.

    Returns ``{"intact": acc, "attn": {"all": acc, "0": acc, ...}, "mlp": {...}}``; keys of the
    inner dicts are "all" and each recurrence step as a string (JSON keys).
    """
    seqs = _sample(seqs, max_sequences, seed)
    stack = Ensemble.from_models([model], model.head.weight.device)

    def accuracy(zeroed: set[tuple[str, int]]) -> float:
        stack.zeroed = frozenset(zeroed)
        return float(decode(stack, seqs, eos_id, batch_size)[0][0].mean())

    out: dict = {"intact": accuracy(set()), "n_sequences": len(seqs)}
    steps = range(model.cfg.n_recur)
    for name in SUBLAYERS:
        scores = {"all": accuracy({(name, step) for step in steps})}
        for step in steps:
            scores[str(step)] = accuracy({(name, step)})
        out[name] = scores
    return out
