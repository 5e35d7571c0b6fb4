"""A compact, ragged set of token sequences: one flat array plus offsets."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["SequenceSet", "chance_rate", "majority_rate"]


@dataclass(frozen=True)
class SequenceSet:
    """``n`` sequences; sequence i is ``tokens[offsets[i]:offsets[i + 1]]``.

    ``prompt_len[i]`` counts the tokens up to and including the first ``=``: what a model is given
    before it writes the chain of thought. ``op[i]`` is the index (testbed order) of the root op.
    """

    tokens: np.ndarray  # (total,) uint8 or uint16
    offsets: np.ndarray  # (n + 1,) int64
    prompt_len: np.ndarray  # (n,) uint16
    op: np.ndarray  # (n,) uint8

    @classmethod
    def from_lists(
        cls, seqs: Sequence[Sequence[int]], prompt_len: Sequence[int], op: Sequence[int], dtype
    ) -> SequenceSet:
        offsets = np.zeros(len(seqs) + 1, dtype=np.int64)
        np.cumsum([len(s) for s in seqs], out=offsets[1:])
        flat = np.fromiter((t for s in seqs for t in s), dtype=dtype, count=int(offsets[-1]))
        return cls(
            flat, offsets, np.asarray(prompt_len, dtype=np.uint16), np.asarray(op, dtype=np.uint8)
        )

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, i: int) -> np.ndarray:
        return self.tokens[self.offsets[i] : self.offsets[i + 1]]

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    @property
    def answers(self) -> np.ndarray:
        """The final answer of each sequence: the token just before its end token."""
        return self.tokens[self.offsets[1:] - 2]

    def subset(self, index: np.ndarray) -> SequenceSet:
        index = np.asarray(index, dtype=np.int64)
        lengths = self.lengths[index]
        offsets = np.zeros(len(index) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        tokens = self.tokens[_ranges(self.offsets[index], lengths)]
        return SequenceSet(tokens, offsets, self.prompt_len[index], self.op[index])

    def padded(self, index: np.ndarray, pad_id: int) -> np.ndarray:
        """Sequences ``index``, right-padded with ``pad_id`` to the longest: (batch, time)."""
        index = np.asarray(index, dtype=np.int64)
        lengths = self.lengths[index]
        out = np.full((len(index), int(lengths.max(initial=0))), pad_id, dtype=np.int64)
        out[np.arange(out.shape[1])[None, :] < lengths[:, None]] = self.tokens[
            _ranges(self.offsets[index], lengths)
        ]
        return out

    def to_arrays(self, prefix: str) -> dict[str, np.ndarray]:
        return {
            f"{prefix}.tokens": self.tokens,
            f"{prefix}.offsets": self.offsets,
            f"{prefix}.prompt_len": self.prompt_len,
            f"{prefix}.op": self.op,
        }

    @classmethod
    def from_arrays(cls, arrays, prefix: str) -> SequenceSet:
        return cls(*(arrays[f"{prefix}.{f}"] for f in ("tokens", "offsets", "prompt_len", "op")))


def _ranges(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Concatenation of ``arange(s, s + n)`` for each start s and length n, without a loop."""
    firsts = np.cumsum(lengths) - lengths  # where each range begins in the output
    return np.repeat(starts - firsts, lengths) + np.arange(int(lengths.sum()))


def majority_rate(seqs: SequenceSet) -> float:
    """Accuracy of always giving the most common answer: what "at chance" means here."""
    return float(np.bincount(seqs.answers).max() / len(seqs))


def chance_rate(seqs: SequenceSet, decoding: str) -> float:
    """Where runs that did not learn sit on ``seqs``: the majority answer's rate for greedy
    decoding (a model that always gives the commonest answer), and for sampled decoding the rate
    at which an answer drawn from the answer distribution is right (sum of squared shares)."""
    if decoding != "sampled":
        return majority_rate(seqs)
    shares = np.bincount(seqs.answers) / len(seqs)
    return float((shares**2).sum())
