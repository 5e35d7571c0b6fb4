"""The word vocabulary of a testbed: specials, one token per op, one per value."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from threshold.errors import ConfigError
from threshold.tasks.testbeds import Testbed

__all__ = ["EOS", "EQ", "LP", "PAD", "RP", "Vocabulary"]

PAD, EOS, LP, RP, EQ = "<pad>", "<eos>", "(", ")", "="
SPECIALS = (PAD, EOS, LP, RP, EQ)


@dataclass(frozen=True)
class Vocabulary:
    """Token list with fixed ids: specials first, then every op of the testbed, then the values."""

    tokens: tuple[str, ...]

    @classmethod
    def for_testbed(cls, testbed: Testbed) -> Vocabulary:
        return cls(SPECIALS + tuple(testbed.ops) + testbed.value_tokens)

    def __len__(self) -> int:
        return len(self.tokens)

    @property
    def ids(self) -> dict[str, int]:
        return {t: i for i, t in enumerate(self.tokens)}

    @property
    def pad_id(self) -> int:
        return 0

    @property
    def eos_id(self) -> int:
        return 1

    @property
    def eq_id(self) -> int:
        return 4

    @property
    def value_offset(self) -> int:
        """Id of value 0; values follow in order (the embedding analyses rely on it)."""
        return len(self.tokens) - self.n_values

    @property
    def n_values(self) -> int:
        return sum(1 for t in self.tokens if t not in SPECIALS) - self.n_ops

    @property
    def n_ops(self) -> int:
        # Ops sit between the specials and the values; they are the only non-special word tokens
        # that start with a letter.
        return sum(1 for t in self.tokens[len(SPECIALS) :] if t[0].isalpha())

    @property
    def dtype(self) -> np.dtype:
        """The smallest unsigned integer type that holds every id."""
        return np.dtype(np.uint8 if len(self.tokens) <= 256 else np.uint16)

    def encode(self, words: Iterable[str]) -> list[int]:
        ids = self.ids
        try:
            return [ids[w] for w in words]
        except KeyError as e:
            raise ConfigError(f"token {e.args[0]!r} is not in this vocabulary") from None

    def decode(self, ids: Sequence[int]) -> str:
        return " ".join(self.tokens[int(i)] for i in ids)
