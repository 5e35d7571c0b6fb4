"""Which training sequences go into each step's batch (numpy only).

Three orders, named by ``TrainConfig.batch_order``:

- ``binned`` (the default): the sequences are cut into ``length_bins`` bins of equal count by
  length; every step draws one bin from a schedule that is the same for every run (a fixed seed,
  not the run's), and the run takes its next batch from its own shuffled queue of that bin. Each
  batch holds sequences of similar length, every sequence is drawn as often as any other in the
  long run, and runs trained side by side in one batched pass (``threshold.train``) get batches
  of similar length at every step, so padding them to one length costs little.
- ``bucketed`` (before 0.2): every epoch shuffles, sorts each run of ``chunk`` batches by length,
  cuts it into batches and shuffles the batch order. Runs side by side get unrelated lengths.
- ``random``: plain shuffled batches (for benchmarks of what bucketing saves).

The run's own generator (from its seed) fixes its bins' tie-breaks and queue orders, so a run's
batches depend on its seed and data only, whichever runs it is trained beside.

``TrainConfig.batches = "windows"`` draws no sequences but windows (the group's ListOps code): the
training sequences, each ending in its end token, concatenated into one stream (built once, a view
of the set's tokens), and every step ``batch_size`` windows of ``window`` + 1 tokens at uniformly
random starts from the run's own generator, so a run trained alone and the same run as a member of
a batched pass draw the same windows.

Either way a drawn batch is, to the engine, a set of *spans* of that stream (:func:`drawn_spans`):
where each row starts, how many tokens it has, and how many of its first targets stay out of the
loss. The engine gathers the tokens on its device (:mod:`threshold.train.layout`), so the host
sends three numbers a row, drawn many steps ahead.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from threshold.config import TrainConfig
from threshold.errors import ConfigError
from threshold.tasks import SequenceSet

__all__ = [
    "BATCH_ORDERS",
    "IGNORE",
    "SCHEDULE_SEED",
    "batch_arrays",
    "binned_batches",
    "bucket_batches",
    "drawn_spans",
    "drawn_tokens",
    "make_batches",
    "token_stream",
    "train_batches",
    "window_batches",
]

IGNORE = -100  # target id that the loss skips

BATCH_ORDERS = ("binned", "bucketed", "random")
SCHEDULE_SEED = 20_261_123  # the bin schedule shared by every run: fixed, never the run's seed


def binned_batches(
    lengths: np.ndarray, batch_size: int, rng: np.random.Generator, n_bins: int
) -> Iterator[np.ndarray]:
    """Endless batches of indices from length bins drawn on the shared schedule."""
    n = len(lengths)
    n_bins = max(1, min(n_bins, n // batch_size))  # every bin must fill a batch
    order = np.lexsort((rng.random(n), lengths))  # by length, ties broken by the run's seed
    bins = np.array_split(order, n_bins)
    queues = [rng.permutation(b) for b in bins]
    heads = [0] * n_bins
    schedule = np.random.default_rng(SCHEDULE_SEED)
    while True:
        b = int(schedule.integers(n_bins))
        if heads[b] + batch_size > len(queues[b]):
            queues[b] = rng.permutation(bins[b])
            heads[b] = 0
        yield queues[b][heads[b] : heads[b] + batch_size]
        heads[b] += batch_size


def bucket_batches(
    lengths: np.ndarray, batch_size: int, rng: np.random.Generator, chunk: int, bucketing: bool
) -> Iterator[np.ndarray]:
    """Endless batches of indices; with ``bucketing``, each batch holds sequences of similar length.

    Every epoch shuffles, sorts each run of ``chunk`` batches by length, cuts it into batches and
    shuffles the batch order, so lengths inside a batch are close while the order stays random.
    """
    n = len(lengths)
    while True:
        order = rng.permutation(n)
        batches = []
        span = batch_size * chunk
        for start in range(0, n, span):
            part = order[start : start + span]
            if bucketing:
                part = part[np.argsort(lengths[part], kind="stable")]
            batches.extend(part[i : i + batch_size] for i in range(0, len(part), batch_size))
        for b in rng.permutation(len(batches)):
            yield batches[b]


def make_batches(
    lengths: np.ndarray,
    batch_size: int,
    seed: int,
    order: str = "binned",
    length_bins: int = 16,
    chunk: int = 32,
) -> Iterator[np.ndarray]:
    """A run's batches: ``order`` is one of :data:`BATCH_ORDERS`, its generator from ``seed``."""
    rng = np.random.default_rng(seed)
    if order == "binned":
        return binned_batches(lengths, batch_size, rng, length_bins)
    if order in ("bucketed", "random"):
        return bucket_batches(lengths, batch_size, rng, chunk, bucketing=order == "bucketed")
    raise ValueError(f"batch order {order!r} is not one of {', '.join(BATCH_ORDERS)}")


def token_stream(tokens: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """The sequences ``tokens[offsets[i]:offsets[i + 1]]`` concatenated in order: (total,), a view
    of ``tokens`` (the sequences of a set lie end to end, each with its end token)."""
    return tokens[int(offsets[0]) : int(offsets[-1])]


def window_batches(
    stream: np.ndarray, window: int, batch_size: int, seed: int
) -> Iterator[np.ndarray]:
    """Endless batches of ``batch_size`` windows of ``stream`` at random starts drawn from
    ``seed``: the starts, int64 (batch_size,); window i is ``stream[s_i : s_i + window + 1]``,
    inputs its first ``window`` tokens and targets its last."""
    starts_span = len(stream) - window  # starts 0 .. len - window - 1 keep window + 1 tokens
    if starts_span < 1:
        raise ConfigError(
            f"window {window} does not fit in a training stream of {len(stream)} tokens: "
            "use a smaller window or more training sequences"
        )
    rng = np.random.default_rng(seed)
    while True:
        yield rng.integers(0, starts_span, size=batch_size)  # (B,)


def train_batches(train_set: SequenceSet, cfg: TrainConfig) -> Iterator[np.ndarray]:
    """The run's endless batches (its order, from its seed): index arrays (B,) of sequences, or
    with ``cfg.batches = "windows"`` the starts (B,) of windows of the concatenated stream."""
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


def batch_arrays(
    seqs: SequenceSet, index: np.ndarray, pad_id: int, completion_only: bool, length: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """Inputs and targets (B, T) of sequences ``index``, right-padded to at least ``length`` + 1
    tokens; targets outside the loss are :data:`IGNORE`."""
    tokens = seqs.padded(index, pad_id)  # (B, L)
    if tokens.shape[1] < length + 1:
        extra = np.full((len(index), length + 1 - tokens.shape[1]), pad_id, dtype=tokens.dtype)
        tokens = np.concatenate([tokens, extra], axis=1)
    x = np.ascontiguousarray(tokens[:, :-1])  # (B, T)
    y = tokens[:, 1:].copy()  # (B, T): y[:, t] is token t + 1
    y[y == pad_id] = IGNORE
    if completion_only:
        t = np.arange(y.shape[1])[None, :]
        y[t + 1 < seqs.prompt_len[index].astype(np.int64)[:, None]] = IGNORE
    return x, y


def drawn_spans(seqs: SequenceSet, drawn: np.ndarray, cfg: TrainConfig) -> np.ndarray:
    """Where batches from :func:`train_batches` lie in the stream of ``seqs``: int64 (3, ...) of
    each row's start, its tokens, and the prompt tokens whose targets stay out of the loss (0:
    every target in the loss), for ``drawn`` of any shape (a batch (B,), or many (K, B)).

    A row of ``n`` tokens trains on ``n - 1`` inputs; input t's target is token t + 1, in the
    loss where t + 1 >= the row's prompt tokens (:func:`batch_arrays`' rule)."""
    if cfg.batches == "windows":
        return np.stack([drawn, np.full_like(drawn, cfg.window + 1), np.zeros_like(drawn)]).astype(
            np.int64
        )
    starts = seqs.offsets[drawn]
    lengths = seqs.offsets[drawn + 1] - starts
    prompt = seqs.prompt_len[drawn] if cfg.loss_on == "completion" else np.zeros_like(drawn)
    return np.stack([starts - seqs.offsets[0], lengths, prompt]).astype(np.int64)


def drawn_tokens(spans: np.ndarray, cfg: TrainConfig) -> np.ndarray:
    """Tokens that batches of ``spans`` (3, ..., B) train on, one count a batch: the sequences'
    lengths, or batch x window."""
    per_row = spans[1] - 1 if cfg.batches == "windows" else spans[1]
    return per_row.sum(-1)
