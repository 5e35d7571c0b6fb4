"""Your own ListOps ops: a function of the operands and the modulus, registered by name.

A module registers its ops when it is imported::

    import math
    from threshold.tasks import register_op

    def gcd(xs, n):
        return math.gcd(*xs) % n

    register_op("gcd", gcd, rank=2)

``rank`` places the op among the built-in ones for the default measured op of a mixture (the
hardest: max and min are 0, med 1, prod 2, add, nadd and sadd 3). A task names the module
(``ops_module``, ``--ops-module mypkg.ops``), or an installed package declares it under the entry
point group ``threshold.ops`` (``gcd = "mypkg.ops"``) and ``--tasks gcd`` finds it there. The
task stores the module's path, so whoever reads the study or the checkpoint (a worker process, a
report, an analysis) imports it again.

Every op a module registers has a token, after the built-in ops and in name order, so a
module's mixtures share one vocabulary at a modulus (transfer between them works) and a task
without a module keeps the vocabulary, data and study name it had.
"""

from __future__ import annotations

import hashlib
import importlib
import itertools
import operator
import random
import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib.metadata import entry_points

from threshold.errors import ConfigError

__all__ = [
    "ENTRY_POINTS",
    "CustomOp",
    "module_ops",
    "on_register",
    "ops_fingerprint",
    "ops_module_of",
    "register_op",
]

ENTRY_POINTS = "threshold.ops"  # the entry point group: an op's name = the module registering it
NAME = re.compile(r"^[a-z][a-z0-9_]*$")  # an op token: the vocabulary tells ops by a first letter
# The built-in ops of every testbed (threshold.tasks.testbeds): no custom op takes their names.
BUILTIN = ("max", "min", "med", "add", "prod", "nadd", "sadd", "mul", "sgn", "img")
# Moduli and operand counts an op is tried on when registered (and at each modulus it is used).
_CHECK_MODULI = (2, 3, 5, 10)
_CHECK_ARITIES = (2, 3, 4)
_CHECK_SAMPLES = 16  # operand tuples per arity


@dataclass(frozen=True)
class CustomOp:
    """One registered op: ``fn(operands, n)`` gives a value in ``0..n-1``."""

    name: str
    fn: Callable[[Sequence[int], int], int]
    rank: int  # difficulty among the mixture's ops: the hardest is measured by default
    module: str  # the module that registered it: what a task stores to import it again

    def at(self, n: int) -> Callable[[Sequence[int]], int]:
        """The op at modulus ``n`` as the generator calls it, each value checked."""

        def op(xs: Sequence[int]) -> int:
            return _value(self, xs, n)

        return op


_REGISTRY: dict[str, CustomOp] = {}
_listeners: list[Callable[[], None]] = []  # caches to clear when an op is (re)registered


def on_register(clear: Callable[[], None]) -> None:
    """Call ``clear`` whenever an op is registered (a cache of testbeds built from the registry)."""
    _listeners.append(clear)


def register_op(name: str, fn: Callable[[Sequence[int], int], int], *, rank: int) -> Callable:
    """Register ``fn(operands, n) -> value`` as the ListOps op ``name`` with difficulty ``rank``,
    from the calling module; tries it on sample operands first. Returns ``fn``."""
    caller = sys._getframe(1).f_globals.get("__name__", "__main__")
    if not isinstance(name, str) or not NAME.match(name):
        raise ConfigError(
            f"op name {name!r} is not allowed: use lowercase letters, digits and _, starting with"
            " a letter (e.g. gcd)"
        )
    if name in BUILTIN:
        raise ConfigError(f"op name {name!r} is a built-in op's: choose another name")
    if not callable(fn):
        raise ConfigError(f"op {name!r} is given {fn!r}, not a function of (operands, n)")
    if isinstance(rank, bool) or not isinstance(rank, int) or rank < 0:
        raise ConfigError(
            f"op {name!r} has rank {rank!r}: give an integer >= 0 (max 0, med 1, prod 2, add 3)"
        )
    op = CustomOp(name, fn, rank, caller)
    earlier = _REGISTRY.get(name)
    if earlier is not None and earlier.module != caller and not _same_code(earlier.fn, fn):
        raise ConfigError(
            f"op {name!r} is already registered by module {earlier.module!r}: choose another name"
        )
    for n in _CHECK_MODULI:
        check_op(op, n)
    _REGISTRY[name] = op
    for clear in _listeners:
        clear()
    return fn


def check_op(op: CustomOp, n: int) -> None:
    """Try ``op`` at modulus ``n`` on a fixed sample of operands: a ConfigError unless every value
    is an integer in ``0..n-1``."""
    rng = random.Random(n)
    for arity in _CHECK_ARITIES:
        for _ in range(_CHECK_SAMPLES):
            _value(op, tuple(rng.randrange(n) for _ in range(arity)), n)


def _value(op: CustomOp, xs: Sequence[int], n: int) -> int:
    try:
        value = op.fn(xs, n)
    except Exception as e:  # the user's code: any failure is named with its operands
        raise ConfigError(
            f"op {op.name!r} (module {op.module}) fails on operands {tuple(xs)} at modulus {n}:"
            f" {type(e).__name__}: {e}"
        ) from None
    try:
        value = operator.index(value)
    except TypeError:
        value = None
    if value is None or not 0 <= value < n:
        raise ConfigError(
            f"op {op.name!r} (module {op.module}) gives {value!r} for operands {tuple(xs)} at"
            f" modulus {n}: an op's value must be an integer in 0..{n - 1} (reduce it mod n)"
        )
    return value


def _same_code(a: Callable, b: Callable) -> bool:
    """One function imported twice (as ``__main__`` and by its module path, or reloaded)."""
    code_a, code_b = getattr(a, "__code__", None), getattr(b, "__code__", None)
    return (
        code_a is not None
        and code_b is not None
        and code_a.co_filename == code_b.co_filename
        and getattr(a, "__qualname__", None) == getattr(b, "__qualname__", None)
    )


def module_ops(module: str) -> tuple[CustomOp, ...]:
    """The ops ``module`` registers, in name order, importing it first where needed."""
    try:
        importlib.import_module(module)
    except ConfigError as e:  # a register_op call in it refused its op
        raise ConfigError(f"ops module {module!r}: {e}", "ops_module") from None
    except Exception as e:  # the user's module: any failure to import it is one line
        raise ConfigError(
            f"ops module {module!r} cannot be imported ({type(e).__name__}: {e}): install it or"
            " put its folder on PYTHONPATH",
            "ops_module",
        ) from None
    ops = sorted((op for op in _REGISTRY.values() if op.module == module), key=lambda o: o.name)
    if not ops:
        raise ConfigError(
            f"ops module {module!r} registers no op: call threshold.tasks.register_op in it",
            "ops_module",
        )
    return tuple(ops)


def ops_module_of(names: Sequence[str]) -> str | None:
    """The module that the entry points of group ``threshold.ops`` give for the ops ``names``
    (None where none names them); a ConfigError where two modules do."""
    found = {ep.name: ep.value.partition(":")[0].strip() for ep in entry_points(group=ENTRY_POINTS)}
    modules = sorted({found[name] for name in names if name in found})
    if len(modules) > 1:
        raise ConfigError(
            f"ops {', '.join(names)} come from the modules {', '.join(modules)} (entry points"
            f" {ENTRY_POINTS}): a task takes one ops module",
            "ops_module",
        )
    return modules[0] if modules else None


def ops_fingerprint(ops: Sequence[CustomOp], n: int, arities: Sequence[int]) -> str:
    """A hash of the ops' values at modulus ``n`` on a fixed sample of operands: changes when an
    op's function does, so data made by the old function is not reused."""
    h = hashlib.sha256()
    rng = random.Random(0)
    for op, arity in itertools.product(ops, arities):
        for _ in range(64):
            xs = tuple(rng.randrange(n) for _ in range(arity))
            h.update(f"{op.name}{xs}{_value(op, xs, n)};".encode())
    return h.hexdigest()[:16]
