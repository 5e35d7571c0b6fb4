"""Testbeds: the value tokens and the ops a task mixture draws from.

A testbed fixes the vocabulary for its size whatever the mixture, so embeddings of models trained on
different mixtures are comparable. Two testbeds exist:

- ``listops``: digits ``0..n-1`` and the ops ``max min med add prod nadd sadd``, all mod n.
- ``perm``: the elements of the symmetric group S_k (one token each, in one-line notation) with
  ``mul`` (the product, the hard op) and two easier partners that are functions of the same
  product: ``sgn`` (its sign, as the identity or the transposition (0 1)) and ``img`` (where it
  sends the point 0, as the rotation that does the same).

ListOps also takes ops of the user's own, registered by a module (:mod:`threshold.tasks.ops`):
with ``ops_module`` its ops follow the built-in ones, in name order.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache

import numpy as np

from threshold.errors import ConfigError
from threshold.tasks.ops import check_op, module_ops, on_register

__all__ = ["MAX_MODULUS", "TESTBEDS", "Testbed", "get_testbed"]

OpFn = Callable[[Sequence[int]], int]


@dataclass(frozen=True, eq=False)
class Testbed:
    """Values and ops of one testbed at one size; the op order fixes the vocabulary."""

    name: str
    size: int  # modulus n (listops) or degree k (perm)
    value_tokens: tuple[str, ...]  # token text of value 0, 1, ...
    ops: dict[str, OpFn]  # every op of the testbed, in vocabulary order
    difficulty: dict[str, int]  # higher is harder: picks the default measured op of a mixture

    @property
    def n_values(self) -> int:
        return len(self.value_tokens)

    def hardest(self, ops: Sequence[str]) -> str:
        """The op of ``ops`` measured by default: the hardest, the first listed among equals."""
        return max(ops, key=lambda op: self.difficulty[op])


MAX_MODULUS = 256


def _listops(n: int, sadd_seed: int, ops_module: str | None = None) -> Testbed:
    if not 2 <= n <= MAX_MODULUS:
        raise ConfigError(
            f"modulus {n} is not allowed: ListOps supports 2..{MAX_MODULUS} (the default training"
            f" set is 5,000 x n sequences; the paper's largest modulus is 45)",
            "n",
        )
    # sadd: ADD seen through a fixed random relabelling of the digits, pi(sum(pi^-1(x)) mod n).
    pi = np.random.default_rng(sadd_seed).permutation(n).tolist()
    pi_inv = [0] * n
    for i, p in enumerate(pi):
        pi_inv[p] = i

    def med(xs: Sequence[int]) -> int:
        return sorted(xs)[len(xs) // 2]

    def prod(xs: Sequence[int]) -> int:
        out = 1
        for x in xs:
            out = out * x % n
        return out

    def nadd(xs: Sequence[int]) -> int:
        return (sum(xs[0::2]) - sum(xs[1::2])) % n

    ops: dict[str, OpFn] = {
        "max": max,
        "min": min,
        "med": med,
        "add": lambda xs: sum(xs) % n,
        "prod": prod,
        "nadd": nadd,
        "sadd": lambda xs: pi[sum(pi_inv[x] for x in xs) % n],
    }
    difficulty = {"max": 0, "min": 0, "med": 1, "prod": 2, "add": 3, "nadd": 3, "sadd": 3}
    for op in module_ops(ops_module) if ops_module is not None else ():
        check_op(op, n)  # at this modulus too: refused here, not halfway through the data
        ops[op.name] = op.at(n)
        difficulty[op.name] = op.rank
    return Testbed("listops", n, tuple(str(v) for v in range(n)), ops, difficulty)


def _perm(k: int) -> Testbed:
    if not 3 <= k <= 6:
        raise ConfigError(
            f"degree {k} is not allowed: the perm testbed supports S_k for k = 3..6", "n"
        )
    elements = list(itertools.permutations(range(k)))  # lexicographic: index 0 is the identity
    index = {p: i for i, p in enumerate(elements)}
    # (a * b)(i) = a(b(i)): b acts first.
    table = [[index[tuple(a[b[i]] for i in range(k))] for b in elements] for a in elements]

    def sign(p: tuple[int, ...]) -> int:
        inversions = sum(p[i] > p[j] for i in range(k) for j in range(i + 1, k))
        return inversions % 2

    odd = [sign(p) for p in elements]
    transposition = index[(1, 0, *range(2, k))]
    image_of_zero = [p[0] for p in elements]
    rotation = [index[tuple((i + j) % k for i in range(k))] for j in range(k)]

    def mul(xs: Sequence[int]) -> int:
        out = xs[0]
        for x in xs[1:]:
            out = table[out][x]
        return out

    ops: dict[str, OpFn] = {
        "mul": mul,
        "sgn": lambda xs: transposition if sum(odd[x] for x in xs) % 2 else 0,
        "img": lambda xs: rotation[image_of_zero[mul(xs)]],
    }
    difficulty = {"mul": 2, "img": 1, "sgn": 0}
    tokens = tuple("".join(map(str, p)) for p in elements)
    return Testbed("perm", k, tokens, ops, difficulty)


TESTBEDS = ("listops", "perm")


@cache
def get_testbed(name: str, size: int, sadd_seed: int = 0, ops_module: str | None = None) -> Testbed:
    """The testbed ``name`` at ``size`` (modulus n for listops, degree k for perm), with the ops
    that ``ops_module`` registers (listops only)."""
    if name == "listops":
        return _listops(size, sadd_seed, ops_module)
    if name == "perm":
        if ops_module is not None:
            raise ConfigError(
                f"testbed perm takes no ops module ({ops_module!r}): your own ops are ListOps"
                " ops; use --testbed listops",
                "ops_module",
            )
        return _perm(size)
    raise ConfigError(
        f"testbed {name!r} is unknown: choose one of {', '.join(TESTBEDS)}", "testbed"
    )


on_register(get_testbed.cache_clear)  # a testbed built before an op was (re)registered is stale
