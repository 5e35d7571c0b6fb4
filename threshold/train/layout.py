"""A step's batch laid out on the device, with no padding where the work is.

The training tokens of every data set a pack trains on lie on its device once, end to end (one
stream). A member's batch reaches the device as *spans* of that stream (start, tokens, prompt
tokens out of the loss: :func:`threshold.train.batches.drawn_spans`), drawn for many steps at
once by :class:`Feed`; :func:`lay_out` gathers the tokens and lays out the step:

- **flat**: every member's input positions end to end, (M, 1, N). Embeddings, LayerNorm, the
  projections, the MLP, the head and the loss run on these, so they compute useful positions
  only (up to N's rounding to a static size, a few per cent).
- **rows**: the same positions as (M, B, T), one sequence a row at its own positions 0.., for
  causal attention alone (:class:`Rows` moves activations between the two). A row's padding
  comes after its tokens, so causal attention never reads it.

Windows (the ``paper`` recipe's batches) are rows of one length already: their flat layout is
their rows, and no gather is needed (``dense``). The dynamic step (the CPU's) is dense too, its
rows padded to the batch's longest: the padding computed but out of the loss. Everything a step
reads lies in device tensors of fixed shapes for given (N, T), so a CUDA graph replays the whole
step, layout included, and the host sends three numbers a row, once per chunk of steps.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from threshold.train.batches import IGNORE, drawn_spans, drawn_tokens, token_stream

__all__ = [
    "CHUNK",
    "LENGTH_QUANTUM",
    "Batch",
    "Feed",
    "Rows",
    "Stream",
    "flat_size",
    "lay_out",
    "static_length",
]

CHUNK = 64  # steps drawn ahead at once: the host's work and one copy to the device per chunk
LENGTH_QUANTUM = 16  # static row widths are multiples of this: a few graphs cover every batch
FLAT_STEPS = 16  # a static flat size is a multiple of 1/16 of its power of two: <= 6.25% rounding


def static_length(length: int, n_ctx: int) -> int:
    """The static row width of a batch of ``length`` positions: the next multiple of
    :data:`LENGTH_QUANTUM`, at most the context."""
    return min(n_ctx, -(-length // LENGTH_QUANTUM) * LENGTH_QUANTUM)


def flat_size(n: int) -> int:
    """The static flat size of ``n`` positions: rounded up to a sixteenth of its power of two,
    so a few dozen sizes cover every batch and the rounding stays under 1/16."""
    quantum = max(1, 2 ** max(0, (max(n, 1) - 1).bit_length() - 1) // FLAT_STEPS)
    return -(-n // quantum) * quantum


@dataclass
class Rows:
    """How a flat layout (M, 1, N) maps to attention's rows (M, B, T) and back."""

    pos: torch.Tensor  # (M, 1, N) each flat position's place in its row
    to_rows_index: torch.Tensor | None  # (M, B*T) flat position of each row slot (0: padding)
    to_flat_index: torch.Tensor | None  # (M, N) row slot b*T + t of each flat position
    rows: int  # B
    width: int  # T

    def to_rows(self, flat: torch.Tensor) -> torch.Tensor:
        """Activations (M, 1, N, E) as rows (M, B, T, E)."""
        m, _, n, e = flat.shape
        if self.to_rows_index is None:  # dense: the flat layout is the rows
            return flat.view(m, self.rows, self.width, e)
        index = self.to_rows_index[..., None].expand(m, self.rows * self.width, e)
        return flat.view(m, n, e).gather(1, index).view(m, self.rows, self.width, e)

    def to_flat(self, rows: torch.Tensor) -> torch.Tensor:
        """Activations (M, B, T, E) back in the flat layout (M, 1, N, E)."""
        m, b, t, e = rows.shape
        if self.to_flat_index is None:
            return rows.reshape(m, 1, b * t, e)
        n = self.to_flat_index.shape[1]
        index = self.to_flat_index[..., None].expand(m, n, e)
        return rows.reshape(m, b * t, e).gather(1, index).view(m, 1, n, e)


def lay_out(
    stream: torch.Tensor, spans: torch.Tensor, n: int, t: int, dense: bool
) -> tuple[torch.Tensor, torch.Tensor, Rows]:
    """Inputs and targets (M, 1, N) and the rows of a batch whose rows are ``spans`` (3, M, B)
    of ``stream`` (start, tokens, prompt tokens), in ``n`` flat positions and rows of ``t``.

    Every member's useful inputs must fit: ``n`` >= its rows' inputs, ``t`` >= its longest row's.
    Targets outside the loss (beyond a row, inside its prompt, the rounding) are ``IGNORE``."""
    start, length, prompt = spans.unbind(0)  # (M, B) each
    m, b = start.shape
    ahead = torch.arange(t + 1, device=stream.device)  # (T + 1,)
    at = (start[..., None] + ahead).clamp_(max=stream.shape[0] - 1)  # (M, B, T + 1)
    tokens = stream[at].long()  # (M, B, T + 1)
    x_rows, y_rows = tokens[..., :-1], tokens[..., 1:]  # (M, B, T) each
    place = ahead[:t]  # (T,): a row position is its place in its sequence
    inputs = (length - 1).clamp(min=0)  # (M, B)
    valid = place < inputs[..., None]  # (M, B, T)
    in_loss = valid & (place + 1 >= prompt[..., None])  # (M, B, T)
    y_rows = torch.where(in_loss, y_rows, IGNORE)  # (M, B, T)
    if dense:  # every row full: the rows are the flat layout
        pos = place.expand(m, b, t).reshape(m, 1, n)
        return x_rows.reshape(m, 1, n), y_rows.reshape(m, 1, n), Rows(pos, None, None, b, t)
    first = inputs.cumsum(1) - inputs  # (M, B): each row's first flat position
    slot = torch.where(valid, first[..., None] + place, n).view(m, b * t)  # (M, B*T); n: dropped

    def flat(values: torch.Tensor, fill: int) -> torch.Tensor:  # (M, B, T) -> (M, 1, N)
        out = torch.full((m, n + 1), fill, dtype=torch.long, device=stream.device)
        return out.scatter_(1, slot, values.reshape(m, b * t))[:, :n].view(m, 1, n)

    x, y, pos = flat(x_rows, 0), flat(y_rows, IGNORE), flat(place.expand(m, b, t), 0)
    row_slot = torch.arange(b * t, device=stream.device).expand(m, b * t)  # (M, B*T)
    to_flat_index = flat(row_slot, 0).view(m, n)  # (M, N)
    to_rows_index = torch.where(slot < n, slot, 0)  # (M, B*T)
    return x, y, Rows(pos, to_rows_index, to_flat_index, b, t)


@dataclass(frozen=True)
class Stream:
    """Each distinct training set of a pack's members once, end to end, on the device."""

    tokens: torch.Tensor  # (S,) int32
    bases: dict[int, int]  # id of a training set -> where its tokens begin

    @classmethod
    def of(cls, members: list, device: torch.device) -> Stream:
        parts, bases, start = [], {}, 0
        for m in members:
            train = m.data.train
            if id(train) not in bases:
                part = token_stream(train.tokens, train.offsets)
                bases[id(train)] = start
                parts.append(torch.from_numpy(part.astype(np.int32)))
                start += len(part)
        return cls(torch.cat(parts).to(device), bases)


@dataclass
class Batch:
    """One step's batch of a pack: the spans on the device and the static shape to lay them in."""

    spans: torch.Tensor  # (3, M, B) on the device
    n: int  # flat positions
    t: int  # row width
    dense: bool  # the rows are the flat layout (every row full, or padded to the longest)
    useful: int  # input positions in use, over every member (the rest is rounding)
    tokens: np.ndarray  # (M,) tokens each member trains on (TrainResult.tokens)
    lr: torch.Tensor  # (M,) learning rates, on the device


class Feed:
    """A pack's batches: its members' spans drawn :data:`CHUNK` steps ahead from each member's
    own batches (the draws a step at a time would make, in the same order), sent to the device
    once a chunk, with the learning rates of those steps; :meth:`next` hands one step out.

    ``static`` (CUDA graphs) lays a batch out flat, its shape rounded to a few sizes
    (:func:`flat_size`, :func:`static_length`); else as rows padded to the batch's longest (the
    dynamic step: binned batches leave little padding, and it spends nothing on gathers, which
    made a run of one on the CPU 1.14x slower laid out flat). Members keep what was drawn for
    them and not yet trained on (``Member.ahead``), so a repacked pack (:meth:`select`) goes on
    with exactly the batches its members would get.
    """

    def __init__(
        self,
        members: list,
        device: torch.device,
        static: bool,
        n_ctx: int,
        stream: Stream | None = None,
    ) -> None:
        self.members, self.device, self.static, self.n_ctx = members, device, static, n_ctx
        self.stream = Stream.of(members, device) if stream is None else stream
        self.chunk: list[Batch] = []

    def select(self, members: list) -> Feed:
        """The feed of a repacked pack: the same stream, its members' batches drawn so far."""
        return Feed(members, self.device, self.static, self.n_ctx, self.stream)

    def next(self) -> Batch:
        """The next step's batch (drawing a new chunk when the last is spent)."""
        if not self.chunk:
            self.chunk = self._draw()
        for m in self.members:
            m.ahead = m.ahead[:, 1:]
        return self.chunk.pop(0)

    def _draw(self) -> list[Batch]:
        members = self.members
        for m in members:
            if m.ahead.shape[1] == 0:  # (3, K, B): spans of K steps ahead
                drawn = np.stack([next(m.batches) for _ in range(CHUNK)])  # (K, B)
                m.ahead = drawn_spans(m.data.train, drawn, m.cfg)
                m.ahead[0] += self.stream.bases[id(m.data.train)]
        k = members[0].ahead.shape[1]
        assert all(m.ahead.shape[1] == k for m in members), "members of a pack step together"
        rows = max(m.ahead.shape[2] for m in members)
        spans = np.zeros((k, 3, len(members), rows), dtype=np.int64)  # a missing row: 0 tokens
        for j, m in enumerate(members):
            spans[:, :, j, : m.ahead.shape[2]] = m.ahead.transpose(1, 0, 2)
        tokens = np.stack([drawn_tokens(m.ahead, m.cfg) for m in members], 1)  # (K, M)
        lr = [[m.cfg.lr * m.lr_factor(m.step + i) for m in members] for i in range(k)]
        inputs = np.maximum(spans[:, 1] - 1, 0)  # (K, M, B)
        useful = inputs.sum((1, 2))  # (K,)
        n, t = inputs.sum(2).max(1), inputs.max((1, 2))  # (K,) each
        on_device = torch.from_numpy(spans)
        lr_device = torch.tensor(lr, dtype=torch.float32)
        if self.device.type == "cuda":  # pinned, so the copies overlap the device's work
            on_device, lr_device = on_device.pin_memory(), lr_device.pin_memory()
        on_device = on_device.to(self.device, non_blocking=True)
        lr_device = lr_device.to(self.device, non_blocking=True)
        out = []
        for i in range(k):
            ni, ti = max(int(n[i]), 1), max(int(t[i]), 1)
            dense = not self.static or bool((inputs[i] == ti).all())
            if dense:  # every row full, or rows padded to the longest (dynamic shapes)
                ni = ti * rows
            else:
                ti, ni = static_length(ti, self.n_ctx), flat_size(ni)
            out.append(Batch(on_device[i], ni, ti, dense, int(useful[i]), tokens[i], lr_device[i]))
        return out
