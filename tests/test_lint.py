"""The tests' own rules, read from their source (an AST walk): no default test asserts wall time.
The machine CI runs on is shared and noisy, so a timed assertion fails at random; a default test
asserts what was done (no run trained, a file untouched), and speed goes to a benchmark."""

import ast
import re
from pathlib import Path

import pytest

TESTS = Path(__file__).parent
# A name that holds a duration: elapsed, wall, seconds, duration, time, or one ending in _s.
TIMED = re.compile(r"(^|_)(elapsed|wall|walls|seconds|secs|duration|time|times)($|_)|_s$")
CLOCKS = {"perf_counter", "monotonic", "time", "process_time", "perf_counter_ns", "monotonic_ns"}
ORDERS = (ast.Lt, ast.LtE, ast.Gt, ast.GtE)


def _is_clock(node: ast.AST) -> bool:
    """``time.perf_counter()`` and its kin, called."""
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in CLOCKS
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == "time"
    )


def _names(node: ast.AST) -> set[str]:
    """The names and attribute names read in ``node``."""
    found = set()
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name):
            found.add(sub.id)
        elif isinstance(sub, ast.Attribute):
            found.add(sub.attr)
    return found


def _clocked(tree: ast.AST) -> set[str]:
    """Names given a value read off a clock anywhere in the module (``wall = perf_counter() -
    t0``, ``walls.append(perf_counter() - t0)``)."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign | ast.AugAssign | ast.AnnAssign):
            value = node.value
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if value is not None and any(_is_clock(s) for s in ast.walk(value)):
                found |= {t.id for t in targets if isinstance(t, ast.Name)}
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "append"
            and isinstance(node.func.value, ast.Name)
            and any(_is_clock(s) for a in node.args for s in ast.walk(a))
        ):
            found.add(node.func.value.id)
    return found


def _slow(decorators: list[ast.expr]) -> bool:
    return any("slow" in _names(d) for d in decorators)


def timed_assertions(source: str, filename: str = "<test>") -> list[int]:
    """The lines of ``source`` where a test that is not marked slow asserts an ordering on a
    duration: a comparison (<, <=, >, >=) of a clock's reading, or of a name that holds one
    (by its name or by its value), against a number or another duration."""
    tree = ast.parse(source, filename)
    module_slow = any(
        isinstance(n, ast.Assign)
        and any(isinstance(t, ast.Name) and t.id == "pytestmark" for t in n.targets)
        and "slow" in _names(n.value)
        for n in tree.body
    )
    if module_slow:
        return []
    clocked = _clocked(tree)

    def timed(side: ast.expr) -> bool:
        if any(_is_clock(s) for s in ast.walk(side)):
            return True
        return any(n in clocked or TIMED.search(n) for n in _names(side))

    def numeric(side: ast.expr) -> bool:
        """A number other than zero (``train_s > 0`` says a time was recorded, not how long)."""
        return isinstance(side, ast.Constant | ast.UnaryOp) and all(
            isinstance(s.value, int | float) and not isinstance(s.value, bool) and s.value != 0
            for s in ast.walk(side)
            if isinstance(s, ast.Constant)
        )

    def scaled(side: ast.expr) -> bool:
        """A duration times or over a number (``first_s / 2``): a speed ratio, where two
        durations compared as they are (``wall_s > train_s``) are a record's consistency."""
        return timed(side) and any(
            isinstance(s, ast.BinOp) and (numeric(s.left) or numeric(s.right))
            for s in ast.walk(side)
        )

    functions = []
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and not _slow(node.decorator_list):
            functions += [n for n in node.body if isinstance(n, ast.FunctionDef)]
        elif isinstance(node, ast.FunctionDef):
            functions.append(node)
    lines = []
    for function in functions:
        if _slow(function.decorator_list):
            continue
        for node in ast.walk(function):
            if not isinstance(node, ast.Assert):
                continue
            for cmp in (n for n in ast.walk(node.test) if isinstance(n, ast.Compare)):
                sides = [cmp.left, *cmp.comparators]
                for op, a, b in zip(cmp.ops, sides, sides[1:], strict=False):
                    if not isinstance(op, ORDERS):
                        continue
                    if (
                        (timed(a) and numeric(b))
                        or (timed(b) and numeric(a))
                        or (timed(a) and timed(b) and (scaled(a) or scaled(b)))
                    ):
                        lines.append(node.lineno)
    return sorted(set(lines))


def test_no_default_test_asserts_wall_time():
    found = {
        str(path.relative_to(TESTS)): lines
        for path in sorted(TESTS.rglob("*.py"))
        if (lines := timed_assertions(path.read_text(), str(path)))
    }
    assert not found, f"wall time asserted (assert what was done, or mark the test slow): {found}"


@pytest.mark.parametrize(
    "source",
    [
        "def test_a():\n    t0 = time.perf_counter()\n    run()\n"
        "    elapsed = time.perf_counter() - t0\n    assert elapsed < 10.0\n",
        "def test_a(runs):\n    first_s, second_s = runs\n    assert second_s < first_s / 2\n",
        "def test_a(lends):\n    root, wall = lends\n    assert wall < 300, wall\n",
        "def test_a():\n    t0 = time.monotonic()\n    assert time.monotonic() - t0 <= 5\n",
        "def fixture():\n    walls = []\n    walls.append(time.perf_counter() - t0)\n"
        "def test_a(w):\n    assert len(w) == 2 and walls[1] < 9\n",
        "def test_a():\n    t = time.process_time()\n    assert time.process_time() - t < 1\n",
    ],
)
def test_the_lint_finds_a_timed_assertion(source):
    assert timed_assertions(source)


@pytest.mark.parametrize(
    "source",
    [
        "def test_a():\n    assert len(data.train) == 50_000\n",
        "def test_a():\n    assert steps < 100 and after == before\n",
        "def test_a():\n    assert record['elapsed_s'] == 3.0\n",  # equal: a value, not a speed
        "def test_a(r):\n    assert r.wall_s > r.train_s > 0\n",  # a record's consistency
        "@pytest.mark.slow\ndef test_a():\n    assert elapsed < 10.0\n",
        "pytestmark = pytest.mark.slow\ndef test_a():\n    assert elapsed < 10.0\n",
    ],
)
def test_the_lint_passes_what_is_not_a_timed_assertion(source):
    assert not timed_assertions(source)
