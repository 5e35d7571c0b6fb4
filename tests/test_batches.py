"""Batch orders: every sequence is drawn, lengths inside a batch are close, and side-by-side runs
of the binned order get batches of similar length at every step."""

import numpy as np
import pytest

from threshold.tasks import TaskConfig, load_task_data
from threshold.train.batches import SCHEDULE_SEED, make_batches


@pytest.fixture(scope="module")
def lengths(tmp_path_factory):
    cfg = TaskConfig(ops=("max", "add"), n=5, n_train=3000, n_test=100, n_val=50)
    return load_task_data(cfg, tmp_path_factory.mktemp("c")).train.lengths


def _padding(lengths, batches, steps=200):
    total = useful = 0
    for _ in range(steps):
        b = next(batches)
        useful += lengths[b].sum()
        total += len(b) * lengths[b].max()
    return 1 - useful / total


def test_bucketed_epoch_covers_every_sequence_once(lengths):
    n, bs = len(lengths), 64
    batches = make_batches(lengths, bs, seed=0, order="bucketed", chunk=16)
    epoch = [next(batches) for _ in range(-(-n // bs))]
    assert sorted(np.concatenate(epoch).tolist()) == list(range(n))


@pytest.mark.parametrize("order", ["binned", "bucketed"])
def test_ordered_batches_cut_padding(lengths, order):
    random = _padding(lengths, make_batches(lengths, 64, seed=1, order="random"))
    assert _padding(lengths, make_batches(lengths, 64, seed=1, order=order)) < random / 3


def test_binned_draws_every_sequence_about_equally(lengths):
    n, bs = len(lengths), 64
    batches = make_batches(lengths, bs, seed=3, order="binned", length_bins=8)
    counts = np.bincount(np.concatenate([next(batches) for _ in range(40 * n // bs)]), minlength=n)
    assert counts.min() > 0
    # 40 draws each on average; a bin drawn 10% more often than its share would show as >= 44
    per_bin = [counts[b].mean() for b in np.array_split(np.argsort(lengths, kind="stable"), 8)]
    assert max(per_bin) / min(per_bin) < 1.25


def test_binned_runs_side_by_side_share_lengths_but_not_sequences(lengths):
    """Two seeds: the same bin at every step (close lengths), different sequences in it."""
    a = make_batches(lengths, 32, seed=0, order="binned")
    b = make_batches(lengths, 32, seed=1, order="binned")
    joint = mine = 0
    for _ in range(200):
        x, y = next(a), next(b)
        joint += max(lengths[x].max(), lengths[y].max())
        mine += lengths[x].max()
        assert not np.array_equal(x, y)
    assert joint < 1.1 * mine  # padding both to the longer batch costs little
    again = make_batches(lengths, 32, seed=0, order="binned")
    first = make_batches(lengths, 32, seed=0, order="binned")
    assert all(np.array_equal(next(again), next(first)) for _ in range(50))
    assert SCHEDULE_SEED != 0


def test_unknown_order_is_refused(lengths):
    with pytest.raises(ValueError, match="batch order 'sorted'"):
        make_batches(lengths, 32, seed=0, order="sorted")
