"""Which training sequences go into each step's batch (numpy only).

Three orders, named by ``TrainConfig.batch_order``:

- ``binned`` (the default): the sequences are cut into ``length_bins`` bins of equal count by
  length; every step draws one bin from a schedule that is the same for every run (a fixed seed,
  not the run's), and the run takes its next batch from its own shuffled queue of that bin. Each
  batch holds sequences of similar length, every sequence is drawn as often as any other in the
  long run, and runs trained side by side in one batched pass (``threshold.batched``) get batches
  of similar length at every step, so padding them to one length costs little.
- ``bucketed`` (before 0.2): every epoch shuffles, sorts each run of ``chunk`` batches by length,
  cuts it into batches and shuffles the batch order. Runs side by side get unrelated lengths.
- ``random``: plain shuffled batches (for benchmarks of what bucketing saves).

The run's own generator (from its seed) fixes its bins' tie-breaks and queue orders, so a run's
batches depend on its seed and data only, whichever runs it is trained beside.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

__all__ = ["BATCH_ORDERS", "SCHEDULE_SEED", "binned_batches", "bucket_batches", "make_batches"]

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
