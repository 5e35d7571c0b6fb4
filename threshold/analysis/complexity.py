"""Task complexity: the compressed size of a minimal program that solves a task mixture.

The earlier version of the paper finds that the parameters a model needs grow as a power law
(exponent about 3) of a Kolmogorov-complexity proxy: the compressed size of a minimal program
solving the task. Here that program is Python source in two parts:

- the **evaluator**, shared by every mixture of a testbed: it reads an expression such as
  ``add ( max ( 7 3 6 ) 6 0 )`` and writes the chain of thought after the first ``=``
  (``add ( 7 6 0 ) = 3 <eos>``), reducing the left-most deepest op each step. It is the same text
  for both testbeds apart from a short prelude that maps value tokens to values and back.
- one **solver** per op, a function from a list of operand values to the result value, stored in
  the dict ``F`` under the op's name.

The program of a mixture is the evaluator followed by the solvers of its ops in testbed order (so
the listed order of the ops does not matter); its complexity is the compressed size of that text.
The size parameter (``n`` for listops, ``k`` for perm) is an input of the program, like the
expression, and is not part of the text; the ``sadd`` relabelling is part of the task, so its
table is written out and its size grows with n.

Every text is written in one style so sizes compare across ops: the shortest plain Python
(builtins and the standard library allowed, one-letter names, one-space indents, no comments or
blank lines; a lambda when the op is one expression, else a ``def``). Tests execute every text and
check it against the task generator on random operands and on generated chains of thought, so the
proxy is measured on programs proven to solve the task.

Two compressors, both raw streams at their strongest setting (no container header or checksum,
which are a fixed cost that says nothing about the program): zlib (DEFLATE, level 9) and lzma
(LZMA2, preset 9 extreme). **zlib is primary**: on texts of a few hundred bytes LZMA2's adaptive
range coder has too little data to learn from and costs more bytes than DEFLATE on every program
here, so zlib is the tighter bound on the complexity; lzma is reported as a check that conclusions
do not hang on one compressor.
"""

from __future__ import annotations

import lzma
import zlib
from collections.abc import Sequence

from threshold.errors import ConfigError
from threshold.tasks import get_testbed

__all__ = [
    "COMPRESSORS",
    "complexity",
    "compressed_size",
    "evaluator_source",
    "program_source",
    "solver_source",
]

COMPRESSORS = ("zlib", "lzma")
PRIMARY = "zlib"

# Reads the expression in s, returns the chain of thought after the first "=". j is the "(" at the
# first greatest depth: the left-most deepest op, whose operands are all values.
_EVALUATOR = """F={}
def S(s):
 t=s.split();o=[]
 while len(t)>1:
  d=m=j=0
  for i,w in enumerate(t):
   d+=(w=='(')-(w==')')
   if d>m:m,j=d,i
  e=t.index(')',j)
  t[j-1:e+1]=[W(F[t[j-1]]([R(w)for w in t[j+1:e]]))]
  o+=t+['=']
 o[-1]='<eos>'
 return' '.join(o)
"""

# Value tokens to values (R) and back (W). perm values are indices into the lexicographic list E
# of the elements of S_k, written in one-line notation.
_PRELUDES = {
    "listops": "R,W=int,str\n",
    "perm": """from itertools import permutations
E=list(permutations(range(k)))
V=[''.join(map(str,p))for p in E]
R,W=V.index,V.__getitem__
""",
}

_SOLVERS = {
    "listops": {
        "max": "F['max']=max\n",
        "min": "F['min']=min\n",
        "med": "F['med']=lambda x:sorted(x)[len(x)//2]\n",
        "add": "F['add']=lambda x:sum(x)%n\n",
        "prod": "from math import prod\nF['prod']=lambda x:prod(x)%n\n",
        "nadd": "F['nadd']=lambda x:(sum(x[::2])-sum(x[1::2]))%n\n",
        "sadd": "P={table}\nF['sadd']=lambda x:P[sum(map(P.index,x))%n]\n",
    },
    "perm": {
        "mul": """def M(x):
 p=E[x[0]]
 for v in x[1:]:p=tuple(p[i]for i in E[v])
 return E.index(p)
F['mul']=M
""",
        "sgn": "F['sgn']=lambda x:sum(a>b for v in x for i,a in enumerate(E[v])for b in E[v][i+1:])"
        "%2*E.index((1,0,*E[0][2:]))\n",
        "img": """def G(x):
 j=0
 for v in x[::-1]:j=E[v][j]
 return E.index(tuple((i+j)%k for i in range(k)))
F['img']=G
""",
    },
}


def evaluator_source(testbed: str) -> str:
    """The evaluator of ``testbed``: its value prelude, then the shared chain-of-thought reducer."""
    _check_testbed(testbed)
    return _PRELUDES[testbed] + _EVALUATOR


def solver_source(testbed: str, op: str, size: int = 10, sadd_seed: int = 0) -> str:
    """The solver of ``op``; only ``sadd`` depends on ``size`` and ``sadd_seed`` (its table)."""
    _check_testbed(testbed)
    if op not in _SOLVERS[testbed]:
        raise ConfigError(
            f"op {op!r} does not exist for testbed {testbed!r}: "
            f"choose from {', '.join(_SOLVERS[testbed])}"
        )
    text = _SOLVERS[testbed][op]
    if op == "sadd":
        text = text.format(table=str(_sadd_table(size, sadd_seed)).replace(" ", ""))
    return text


def program_source(testbed: str, ops: Sequence[str], size: int = 10, sadd_seed: int = 0) -> str:
    """The whole program of a mixture: evaluator, then the solvers of ``ops`` in testbed order."""
    ops = _check_ops(testbed, ops)
    ordered = [op for op in _SOLVERS[testbed] if op in ops]
    return evaluator_source(testbed) + "".join(
        solver_source(testbed, op, size, sadd_seed) for op in ordered
    )


def compressed_size(text: str) -> dict[str, int]:
    """Bytes of ``text`` compressed as a raw zlib and a raw lzma stream, and its length."""
    data = text.encode()
    deflate = zlib.compressobj(9, zlib.DEFLATED, -15)  # negative wbits: raw, no header
    # A 64 KiB window holds any program here whole: the same bytes as preset 9's 64 MiB window,
    # without allocating it on every call (100x faster).
    filters = [{"id": lzma.FILTER_LZMA2, "preset": 9 | lzma.PRESET_EXTREME, "dict_size": 1 << 16}]
    return {
        "zlib": len(deflate.compress(data) + deflate.flush()),
        "lzma": len(lzma.compress(data, format=lzma.FORMAT_RAW, filters=filters)),
        "chars": len(data),
    }


def complexity(testbed: str, ops: Sequence[str], size: int = 10, sadd_seed: int = 0) -> dict:
    """Compressed sizes (bytes) of a mixture's program and of its parts, JSON-ready.

    ``mixture``: evaluator and every solver (the complexity of the mixture). ``evaluator``: the
    shared part alone. Per op: ``solver`` (its text alone), ``task`` (evaluator and this solver:
    the op trained alone) and ``marginal`` (``task`` minus ``evaluator``: what the op adds).
    """
    ops = _check_ops(testbed, ops, size)
    evaluator = compressed_size(evaluator_source(testbed))
    per_op = {}
    for op in ops:
        task = compressed_size(program_source(testbed, [op], size, sadd_seed))
        per_op[op] = {
            "solver": compressed_size(solver_source(testbed, op, size, sadd_seed)),
            "task": task,
            "marginal": {key: task[key] - evaluator[key] for key in task},
        }
    return {
        "testbed": testbed,
        "size": size,
        "ops": list(ops),
        "primary": PRIMARY,
        "mixture": compressed_size(program_source(testbed, ops, size, sadd_seed)),
        "evaluator": evaluator,
        "per_op": per_op,
    }


def _check_testbed(testbed: str) -> None:
    if testbed not in _SOLVERS:
        raise ConfigError(f"testbed {testbed!r} is unknown: choose one of {', '.join(_SOLVERS)}")


def _check_ops(testbed: str, ops: Sequence[str], size: int | None = None) -> list[str]:
    _check_testbed(testbed)
    ops = list(ops)
    if not ops:
        raise ConfigError("the task mixture is empty: name at least one op, e.g. --tasks max")
    for op in ops:
        if op not in _SOLVERS[testbed]:
            raise ConfigError(
                f"op {op!r} does not exist for testbed {testbed!r}: "
                f"choose from {', '.join(_SOLVERS[testbed])}"
            )
    if len(set(ops)) != len(ops):
        raise ConfigError(f"ops {','.join(ops)} repeat an op: name each op once")
    if size is not None:
        if testbed == "listops" and size < 2:
            raise ConfigError(
                f"modulus {size} is not allowed: ListOps needs a modulus of at least 2"
            )
        if testbed == "perm" and not 3 <= size <= 6:
            raise ConfigError(
                f"degree {size} is not allowed: the perm testbed supports S_k for k = 3..6"
            )
    return ops


def _sadd_table(n: int, sadd_seed: int) -> list[int]:
    """A table P with sadd(x) = P[sum(P.index(v) for v in x) % n], read off the task's own op.

    sadd is ADD carried over to the labels by a bijection pi, so P[0] is its zero (the one value
    with sadd(z, z) = z) and P[i + 1] = sadd(P[i], g) for a generator g: P equals pi up to an
    automorphism of Z_n, which leaves the op unchanged. The smallest generator makes P unique.
    """
    if n < 2:
        raise ConfigError(f"modulus {n} is not allowed: ListOps needs a modulus of at least 2")
    sadd = get_testbed("listops", n, sadd_seed).ops["sadd"]
    zero = next(v for v in range(n) if sadd([v, v]) == v)
    for g in range(n):
        table = [zero]
        while len(table) < n:
            table.append(sadd([table[-1], g]))
        if len(set(table)) == n:
            return table
    raise AssertionError("sadd is not a relabelled ADD")  # unreachable for a bijection pi
