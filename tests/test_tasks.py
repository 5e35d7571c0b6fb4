"""Tests of ``threshold.tasks``: chain of thought, split, vocabulary, settings, cache.

The chain of thought is checked against a reference written here from the definitions in
``docs/science.md``, "The tasks" (parser, op semantics, left-most deepest reduction): nothing of
the generator is reused but the public API and the data it returns.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import itertools
import logging
import math
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import threshold
from threshold import ConfigError
from threshold.tasks import (
    TESTBEDS,
    SequenceSet,
    TaskConfig,
    TaskData,
    Vocabulary,
    build_task_data,
    default_cache_dir,
    generate,
    get_testbed,
    load_task_data,
)
from threshold.tasks.generate import build_test_set

LISTOPS_OPS = ("max", "min", "med", "add", "prod", "nadd", "sadd")
PERM_OPS = ("mul", "sgn", "img")
SPECIALS = ("<pad>", "<eos>", "(", ")", "=")
SMALL = {"n_train": 300, "n_test": 60, "n_val": 20}  # enough for every invariant, fast


# --- Reference semantics (independent of the generator) -------------------------------------


@dataclass(frozen=True)
class Node:
    """An op applied to operands; a leaf is a plain value (int for listops, tuple for perm)."""

    op: str
    args: tuple


class Reference:
    """Values and ops of one testbed, from their definitions."""

    def __init__(self, testbed: str, size: int, sadd_seed: int = 0) -> None:
        self.testbed, self.size = testbed, size
        self.ops = LISTOPS_OPS if testbed == "listops" else PERM_OPS
        if testbed == "listops":
            # sadd's fixed digit relabelling pi: the permutation its seed draws.
            self.pi = [int(x) for x in np.random.default_rng(sadd_seed).permutation(size)]
            self.pi_inv = [self.pi.index(v) for v in range(size)]

    def value(self, word: str):
        if self.testbed == "listops":
            v = int(word)
            assert 0 <= v < self.size and word == str(v), word
            return v
        p = tuple(int(c) for c in word)
        assert sorted(p) == list(range(self.size)), word
        return p

    def word(self, v) -> str:
        return str(v) if self.testbed == "listops" else "".join(map(str, v))

    def apply(self, op: str, xs: tuple):
        n = self.size
        if op == "max":
            return max(xs)
        if op == "min":
            return min(xs)
        if op == "med":  # sorted(x)[k // 2]: the upper median of two
            return sorted(xs)[len(xs) // 2]
        if op == "add":
            return sum(xs) % n
        if op == "prod":
            return math.prod(xs) % n
        if op == "nadd":  # x1 - x2 + x3 - ...
            return sum(x if i % 2 == 0 else -x for i, x in enumerate(xs)) % n
        if op == "sadd":
            return self.pi[sum(self.pi_inv[x] for x in xs) % n]
        product = functools.reduce(compose, xs)
        if op == "mul":
            return product
        if op == "sgn":  # identity if the product is even, else the transposition (0 1)
            odd = (self.size - n_cycles(product)) % 2
            return (1, 0, *range(2, self.size)) if odd else tuple(range(self.size))
        if op == "img":  # the rotation i -> i + j, where j is the image of 0
            return tuple((i + product[0]) % self.size for i in range(self.size))
        raise AssertionError(op)


def compose(a: tuple, b: tuple) -> tuple:
    """(a * b)(i) = a(b(i)): b acts first."""
    return tuple(a[b[i]] for i in range(len(a)))


def n_cycles(p: tuple) -> int:
    seen, cycles = set(), 0
    for start in range(len(p)):
        if start not in seen:
            cycles += 1
            i = start
            while i not in seen:
                seen.add(i)
                i = p[i]
    return cycles


def parse(words: list[str], ref: Reference):
    """One expression in words -> tree of Node and values."""
    pos = 0

    def node():
        nonlocal pos
        word = words[pos]
        pos += 1
        if word not in ref.ops:
            return ref.value(word)
        assert words[pos] == "(", words
        pos += 1
        args = []
        while words[pos] != ")":
            args.append(node())
        pos += 1
        return Node(word, tuple(args))

    tree = node()
    assert pos == len(words), f"trailing words in {words}"
    return tree


def evaluate(tree, ref: Reference, groups: list | None = None):
    """Value of ``tree``; appends each group (op, operand values) it evaluates to ``groups``."""
    if not isinstance(tree, Node):
        return tree
    values = tuple(evaluate(a, ref, groups) for a in tree.args)
    if groups is not None:
        groups.append((tree.op, values))
    return ref.apply(tree.op, values)


def reduce_leftmost_deepest(tree, ref: Reference):
    """``tree`` with its left-most deepest op replaced by its value."""
    found = []  # (depth, path) of every op node, in left-to-right pre-order

    def walk(t, depth, path):
        if isinstance(t, Node):
            found.append((depth, path))
            for i, a in enumerate(t.args):
                walk(a, depth + 1, (*path, i))

    walk(tree, 0, ())
    deepest = max(d for d, _ in found)
    path = next(p for d, p in found if d == deepest)

    def replace(t, path):
        if not path:
            assert all(not isinstance(a, Node) for a in t.args), "deepest op is not innermost"
            return ref.apply(t.op, t.args)
        args = list(t.args)
        args[path[0]] = replace(args[path[0]], path[1:])
        return Node(t.op, tuple(args))

    return replace(tree, path)


def render(tree, ref: Reference) -> list[str]:
    if not isinstance(tree, Node):
        return [ref.word(tree)]
    return [tree.op, "(", *(w for a in tree.args for w in render(a, ref)), ")"]


def count_ops(tree) -> int:
    return 1 + sum(count_ops(a) for a in tree.args) if isinstance(tree, Node) else 0


_CHECKED: dict[tuple, list[frozenset]] = {}  # test sets recur across mixtures: check each once


def check_sequences(seqs: SequenceSet, cfg: TaskConfig, ops: tuple[str, ...]) -> list[frozenset]:
    """Assert the chain of thought of every sequence; return the groups each one evaluates."""
    arrays = (seqs.tokens, seqs.offsets, seqs.prompt_len, seqs.op)
    key = (cfg.testbed, cfg.n, cfg.sadd_seed, ops, *((a.dtype.str, a.tobytes()) for a in arrays))
    if key not in _CHECKED:
        _CHECKED[key] = _check_sequences(seqs, cfg, ops)
    return _CHECKED[key]


def _check_sequences(seqs: SequenceSet, cfg: TaskConfig, ops: tuple[str, ...]) -> list[frozenset]:
    ref = Reference(cfg.testbed, cfg.n, cfg.sadd_seed)
    vocab = cfg.vocab
    op_order = list(get_testbed(cfg.testbed, cfg.n, cfg.sadd_seed).ops)
    assert seqs.tokens.dtype == vocab.dtype
    assert seqs.offsets[0] == 0 and np.all(np.diff(seqs.offsets) > 0)
    assert int(seqs.tokens.max()) < len(vocab)
    answers = seqs.answers
    out = []
    for i in range(len(seqs)):
        words = vocab.decode(seqs[i]).split(" ")
        assert words[-1] == "<eos>" and words.count("<eos>") == 1, words
        assert "<pad>" not in words
        plen = int(seqs.prompt_len[i])
        assert words[plen - 1] == "=" and "=" not in words[: plen - 1], (plen, words)
        steps, start = [], 0
        for j, w in enumerate(words):
            if w in ("=", "<eos>"):
                steps.append(words[start:j])
                start = j + 1
        trees = [parse(s, ref) for s in steps]
        assert len(steps) >= 2 and len(steps[-1]) == 1, words  # the end: one value, then <eos>
        assert not isinstance(trees[-1], Node)
        assert all(isinstance(t, Node) for t in trees[:-1]), words
        groups: list = []
        value = evaluate(trees[0], ref, groups)
        assert len(trees) == count_ops(trees[0]) + 1  # one op reduced per step
        for prev, step, cur in zip(trees[:-1], steps[1:], trees[1:], strict=True):
            assert evaluate(cur, ref) == value, f"value changes at {step} in {words}"
            expected = reduce_leftmost_deepest(prev, ref)
            assert cur == expected, f"{render(expected, ref)} expected, got {step} in {words}"
        # The answer is the value token before <eos>, and the root op is recorded in testbed order.
        assert 0 <= int(answers[i]) - vocab.value_offset < vocab.n_values
        assert vocab.tokens[int(answers[i])] == ref.word(value)
        assert op_order[int(seqs.op[i])] == trees[0].op
        assert {g[0] for g in groups} <= set(ops), (ops, words)
        out.append(frozenset(groups))
    return out


def prompts(seqs: SequenceSet) -> set[bytes]:
    return {seqs[i][: seqs.prompt_len[i]].tobytes() for i in range(len(seqs))}


def check_split(data: TaskData, checked: dict[str, list[frozenset]]) -> None:
    """No test or val question is a training question; each evaluates a group training never does.

    By design (docs/science.md, "The tasks": hold out a share of the groups, send every sequence
    containing one to the test side) a test sequence may also evaluate groups that training
    sequences evaluate; what it must contain is at least one group no training sequence evaluates.
    """
    train_prompts = prompts(data.train)
    train_groups = frozenset().union(*checked["train"])
    for name, sets in (("test", data.test), ("val", data.val)):
        for op, seqs in sets.items():
            assert not prompts(seqs) & train_prompts, f"{name} {op} prompt among training prompts"
            for groups in checked[f"{name}.{op}"]:
                assert groups - train_groups, f"every group of a {name} {op} sequence is trained"


def check_all(data: TaskData) -> dict[str, list[frozenset]]:
    cfg = data.config
    assert len(data.train) == cfg.train_size
    assert set(data.test) == set(data.val) == set(cfg.ops)
    checked = {"train": check_sequences(data.train, cfg, cfg.ops)}
    for op in cfg.ops:
        assert len(data.test[op]) == cfg.n_test and len(data.val[op]) == cfg.n_val
        checked[f"test.{op}"] = check_sequences(data.test[op], cfg, (op,))
        checked[f"val.{op}"] = check_sequences(data.val[op], cfg, (op,))
    check_split(data, checked)
    return checked


@functools.cache
def data_for(cfg: TaskConfig) -> TaskData:
    return build_task_data(cfg)


def arrays_of(data: TaskData) -> dict[str, np.ndarray]:
    arrays = data.train.to_arrays("train")
    for op in data.config.ops:
        arrays |= data.val[op].to_arrays(f"val.{op}") | data.test[op].to_arrays(f"test.{op}")
    return arrays


def assert_same(a: SequenceSet, b: SequenceSet) -> None:
    for field in ("tokens", "offsets", "prompt_len", "op"):
        x, y = getattr(a, field), getattr(b, field)
        assert x.dtype == y.dtype and np.array_equal(x, y), field


def differ(a: SequenceSet, b: SequenceSet) -> bool:
    return a.tokens.shape != b.tokens.shape or not np.array_equal(a.tokens, b.tokens)


# --- The reference itself ---------------------------------------------------------------------


def test_reference_reproduces_the_domain_example() -> None:
    ref = Reference("listops", 10)
    example = "add ( max ( 7 3 6 ) 6 0 )"
    tree = parse(example.split(" "), ref)
    assert " ".join(render(reduce_leftmost_deepest(tree, ref), ref)) == "add ( 7 6 0 )"
    assert evaluate(tree, ref) == 3
    assert ref.apply("med", (4, 1)) == 4 and ref.apply("nadd", (1, 5, 2)) == 8
    perm = Reference("perm", 3)
    a, b = perm.value("102"), perm.value("021")  # (0 1) and (1 2)
    assert perm.apply("mul", (a, b)) == (1, 2, 0)  # b first: 0 -> 0 -> 1, 1 -> 2 -> 2, 2 -> 1 -> 0
    assert perm.apply("sgn", (a, b)) == (0, 1, 2) and perm.apply("sgn", (a,)) == (1, 0, 2)
    assert perm.apply("img", (a, b)) == (1, 2, 0)  # 0 -> 1: rotation by one


# --- 1. Chain of thought ---------------------------------------------------------------------

LISTOPS_MIXTURES = [(op,) for op in LISTOPS_OPS] + [("max", "med", "add"), LISTOPS_OPS]
PERM_MIXTURES = [(op,) for op in PERM_OPS] + [PERM_OPS, ("sgn", "mul")]
GRAMMARS = [(2, 0.25), (3, 0.5)]  # (depth, p_nest): the domain's two settings


@pytest.mark.parametrize("depth,p_nest", GRAMMARS)
@pytest.mark.parametrize("n", [2, 5, 10, 20, 97])
@pytest.mark.parametrize("ops", LISTOPS_MIXTURES, ids=",".join)
def test_listops_chain_of_thought_and_split(ops, n, depth, p_nest) -> None:
    check_all(data_for(TaskConfig(ops=ops, n=n, depth=depth, p_nest=p_nest, **SMALL)))


@pytest.mark.parametrize("depth,p_nest", GRAMMARS)
@pytest.mark.parametrize("k", [3, 4, 5])
@pytest.mark.parametrize("ops", PERM_MIXTURES, ids=",".join)
def test_perm_chain_of_thought_and_split(ops, k, depth, p_nest) -> None:
    check_all(
        data_for(TaskConfig(testbed="perm", ops=ops, n=k, depth=depth, p_nest=p_nest, **SMALL))
    )


def test_chain_of_thought_goes_deep() -> None:
    """Depth 3, full nesting: every trace reduces 13 ops (the checks above see few deep trees)."""
    cfg = TaskConfig(ops=LISTOPS_OPS, n=7, depth=3, arity_min=3, p_nest=1.0, **SMALL)
    data = data_for(cfg)
    check_all(data)
    assert np.all(data.train.lengths == cfg.max_len)


def test_sadd_is_a_relabelled_add() -> None:
    """sadd is not add itself and depends on its seed (else it would test nothing new)."""
    tables = {}
    for seed in (0, 1):
        cfg = TaskConfig(ops=("sadd",), n=10, sadd_seed=seed, depth=1, **SMALL)
        check_all(build_task_data(cfg))
        ref = Reference("listops", 10, seed)
        tables[seed] = [ref.apply("sadd", (x, y)) for x in range(10) for y in range(10)]
    add = [(x + y) % 10 for x in range(10) for y in range(10)]
    assert tables[0] != add and tables[1] != add and tables[0] != tables[1]


# --- 2. Split ---------------------------------------------------------------------------------


def test_depth_one_test_groups_are_never_trained() -> None:
    """With one group per sequence, test and training groups are disjoint outright."""
    for testbed, ops, n in (("listops", LISTOPS_OPS, 10), ("perm", PERM_OPS, 4)):
        cfg = TaskConfig(testbed=testbed, ops=ops, n=n, depth=1, **SMALL)
        checked = check_all(data_for(cfg))
        train = frozenset().union(*checked["train"])
        for key, sets in checked.items():
            if key != "train":
                assert not frozenset().union(*sets) & train, key


def test_held_out_groups_are_held_out_of_every_mixture() -> None:
    """The split is one set of groups: no mixture's training covers an ``add`` test sequence."""
    grammar = {"n": 10, "depth": 2, "p_nest": 0.5, **SMALL}
    trained: frozenset = frozenset()
    for ops in (("add",), ("max", "med", "add"), ("prod", "add"), ("add", "nadd", "sadd")):
        trained |= frozenset().union(*check_all(data_for(TaskConfig(ops=ops, **grammar)))["train"])
    cfg = TaskConfig(ops=("add",), **grammar)
    for groups in check_all(data_for(cfg))["test.add"]:
        assert groups - trained


@pytest.mark.parametrize("arity", [(2, 2), (2, 3), (3, 3)])
@pytest.mark.parametrize("n", [2, 3])
def test_tiny_moduli_give_every_op_both_sides_whatever_the_split_seed(n, arity) -> None:
    for split_seed, op in itertools.product(range(8), LISTOPS_OPS):
        cfg = TaskConfig(
            ops=(op,), n=n, depth=1, arity_min=arity[0], arity_max=arity[1],
            split_seed=split_seed, n_train=40, n_test=10, n_val=5,
        )  # fmt: skip
        data = build_task_data(cfg)  # raised "could not draw" when an op had no side
        assert len(data.train) == 40 and len(data.test[op]) == 10


# --- 3. Test sets do not depend on the mixture or the data seed -------------------------------


@pytest.mark.parametrize(
    "testbed,n,op,mixture",
    [("listops", 10, "add", ("max", "med", "add")), ("perm", 4, "mul", ("sgn", "mul", "img"))],
)
def test_test_sets_do_not_depend_on_the_mixture(testbed, n, op, mixture) -> None:
    alone = data_for(TaskConfig(testbed=testbed, ops=(op,), n=n, **SMALL))
    mixed = data_for(TaskConfig(testbed=testbed, ops=mixture, n=n, **SMALL))
    assert_same(alone.test[op], mixed.test[op])
    assert_same(alone.val[op], mixed.val[op])
    assert differ(alone.train, mixed.train)


def test_data_seed_changes_training_only_and_split_seed_changes_test() -> None:
    base = TaskConfig(ops=("max", "add"), n=10, **SMALL)
    other_data = build_task_data(TaskConfig(ops=("max", "add"), n=10, data_seed=1, **SMALL))
    other_split = build_task_data(TaskConfig(ops=("max", "add"), n=10, split_seed=1, **SMALL))
    ref = data_for(base)
    assert differ(ref.train, other_data.train)
    for op in base.ops:
        assert_same(ref.test[op], other_data.test[op])
        assert_same(ref.val[op], other_data.val[op])
        assert differ(ref.test[op], other_split.test[op])
        assert differ(ref.val[op], other_split.val[op])


# --- 4. Determinism ---------------------------------------------------------------------------


def digest(data: TaskData) -> str:
    h = hashlib.sha256()
    for key, a in sorted(arrays_of(data).items()):
        h.update(key.encode() + str(a.dtype).encode() + a.tobytes())
    return h.hexdigest()


def test_same_config_gives_identical_arrays() -> None:
    for testbed, ops, n in (("listops", ("max", "med", "add"), 10), ("perm", PERM_OPS, 4)):
        cfg = TaskConfig(testbed=testbed, ops=ops, n=n, depth=3, p_nest=0.5, **SMALL)
        a, b = build_task_data(cfg), build_task_data(cfg)
        assert_same(a.train, b.train)
        for op in ops:
            assert_same(a.test[op], b.test[op])
            assert_same(a.val[op], b.val[op])


def test_data_do_not_depend_on_the_process() -> None:
    """Same arrays in a fresh interpreter with another string-hash seed (the cache relies on it)."""
    cfg = TaskConfig(ops=("max", "med", "add"), n=10, depth=3, p_nest=0.5, **SMALL)
    code = (
        "from threshold.tasks import TaskConfig, build_task_data\n"
        f"cfg = TaskConfig.from_dict({cfg.to_dict()!r})\n"
        "print(build_task_data(cfg).train.tokens.tobytes().hex())\n"
    )
    root = str(Path(threshold.__file__).resolve().parent.parent)
    env = {**os.environ, "PYTHONHASHSEED": "12345", "PYTHONPATH": root}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    assert bytes.fromhex(out.stdout.strip()) == build_task_data(cfg).train.tokens.tobytes()


# --- 5. Vocabulary ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "testbed,size,mixtures",
    [
        ("listops", 10, [("max",), ("add", "prod"), LISTOPS_OPS]),
        ("listops", 97, [("sadd",), ("max", "med", "add")]),
        ("perm", 3, [("mul",), ("img", "sgn")]),
        ("perm", 5, [("sgn",), PERM_OPS]),
    ],
)
def test_vocabulary_is_fixed_per_testbed_and_size(testbed, size, mixtures) -> None:
    vocabs = [TaskConfig(testbed=testbed, ops=ops, n=size).vocab for ops in mixtures]
    assert all(v == vocabs[0] for v in vocabs)
    vocab = vocabs[0]
    ref = Reference(testbed, size)
    values = (
        list(range(size))
        if testbed == "listops"
        else sorted(itertools.permutations(range(size)))  # lexicographic: identity first
    )
    assert vocab.tokens[:5] == SPECIALS
    assert vocab.tokens[5 : vocab.value_offset] == ref.ops
    assert vocab.n_ops == len(ref.ops) and vocab.n_values == len(values)
    assert vocab.value_offset + vocab.n_values == len(vocab) == 5 + len(ref.ops) + len(values)
    for i, v in enumerate(values):  # value tokens are contiguous from value_offset, in order
        assert vocab.tokens[vocab.value_offset + i] == ref.word(v)
    assert len(set(vocab.tokens)) == len(vocab)
    ids = vocab.ids
    assert (vocab.pad_id, vocab.eos_id, vocab.eq_id) == (ids["<pad>"], ids["<eos>"], ids["="])
    assert vocab == Vocabulary.for_testbed(get_testbed(testbed, size))


def test_vocabulary_encodes_and_decodes() -> None:
    vocab = TaskConfig(n=10).vocab
    words = "add ( max ( 7 3 6 ) 6 0 ) = add ( 7 6 0 ) = 3 <eos>"
    assert vocab.decode(vocab.encode(words.split())) == words
    with pytest.raises(ConfigError, match="'11'"):
        vocab.encode(["11"])


@pytest.mark.parametrize(
    "testbed,size,dtype",
    [
        ("listops", 10, np.uint8),
        ("listops", 244, np.uint8),  # 256 tokens: the largest id is 255
        ("listops", 245, np.uint16),
        ("listops", 256, np.uint16),  # the largest modulus allowed
        ("perm", 5, np.uint8),
        ("perm", 6, np.uint16),
    ],
)
def test_token_dtype_is_the_smallest_that_holds_every_id(testbed, size, dtype) -> None:
    ops = ("max", "add") if testbed == "listops" else ("mul",)
    cfg = TaskConfig(testbed=testbed, ops=ops, n=size, n_train=50, n_test=10, n_val=5)
    assert cfg.vocab.dtype == np.dtype(dtype)
    assert (len(cfg.vocab) - 1 <= 255) == (dtype == np.uint8)
    data = build_task_data(cfg)
    check_all(data)
    for seqs in (data.train, *data.test.values(), *data.val.values()):
        assert seqs.tokens.dtype == np.dtype(dtype)


# --- 6. Bad settings --------------------------------------------------------------------------

BAD_SETTINGS = [
    ({"ops": ("foo",)}, "'foo'"),
    ({"ops": ("mul",)}, "'mul'"),  # an op of the other testbed
    ({"testbed": "perm", "n": 4, "ops": ("max",)}, "'max'"),
    ({"ops": ("Max",)}, "'Max'"),
    ({"ops": ()}, "empty"),
    ({"ops": ("max", "add", "max")}, "max,add,max"),
    ({"ops": ("max",), "measure": "add"}, "'add'"),
    ({"n": 1}, "modulus 1 "),
    ({"n": 0}, "modulus 0 "),
    ({"n": -3}, "modulus -3 "),
    ({"testbed": "perm", "ops": ("mul",), "n": 2}, "degree 2 "),
    ({"testbed": "perm", "ops": ("mul",), "n": 7}, "degree 7 "),
    ({"testbed": "graphs"}, "'graphs'"),
    ({"depth": 0}, "depth 0 "),
    ({"arity_min": 1}, "arity 1-3 "),
    ({"arity_min": 4}, "arity 4-3 "),
    ({"arity_max": 9}, "arity 2-9 "),
    ({"p_nest": -0.1}, "p_nest -0.1 "),
    ({"p_nest": 1.5}, "p_nest 1.5 "),
    ({"p_nest": float("nan")}, "p_nest nan "),
    ({"holdout": 0.0}, "holdout 0.0 "),
    ({"holdout": 0.6}, "holdout 0.6 "),
    ({"n_train": 0}, "n_train 0 "),
    ({"n_test": 0}, "n_test 0 "),
    ({"n_val": -1}, "n_val -1 "),
]


@pytest.mark.parametrize("kwargs,names", BAD_SETTINGS, ids=[repr(k) for k, _ in BAD_SETTINGS])
def test_bad_settings_raise_a_config_error_naming_the_value(kwargs, names) -> None:
    with pytest.raises(ConfigError) as info:
        TaskConfig(**kwargs)
    assert isinstance(info.value, ValueError) and isinstance(info.value, threshold.ThresholdError)
    assert names in str(info.value)


def test_unknown_testbed_is_rejected_by_get_testbed_too() -> None:
    with pytest.raises(ConfigError, match="'graphs'"):
        get_testbed("graphs", 10)
    assert TESTBEDS == ("listops", "perm")


# --- 7. Measured op ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "testbed,ops,measure,expected",
    [
        ("listops", ("max", "med", "add"), None, "add"),
        ("listops", ("add", "max", "med"), None, "add"),
        ("listops", ("max", "med"), None, "med"),
        ("listops", ("prod", "add"), None, "add"),
        ("listops", ("add", "nadd"), None, "add"),  # ties: the first listed
        ("listops", ("max", "prod"), None, "prod"),
        ("listops", ("max", "min"), None, "max"),
        ("listops", ("max",), None, "max"),
        ("listops", ("max", "med", "add"), "med", "med"),
        ("perm", ("sgn", "img", "mul"), None, "mul"),
        ("perm", ("sgn", "img"), None, "img"),
        ("perm", ("mul", "sgn"), "sgn", "sgn"),
    ],
)
def test_measured_op_defaults_to_the_hardest(testbed, ops, measure, expected) -> None:
    n = 10 if testbed == "listops" else 4
    assert TaskConfig(testbed=testbed, ops=ops, n=n, measure=measure).measured_op == expected


# --- 8. Context size --------------------------------------------------------------------------


def full_trace_length(testbed: str, size: int, depth: int, arity: int) -> int:
    """Words in the chain of thought of the tree with every operand nested, maximal arity."""
    ref = Reference(testbed, size)
    zero = ref.value("0" if testbed == "listops" else "".join(map(str, range(size))))

    def full(level):
        args = (full(level + 1) if level < depth else zero for _ in range(arity))
        return Node(ref.ops[0], tuple(args))

    tree, total = full(1), 0
    while isinstance(tree, Node):
        total += len(render(tree, ref)) + 1
        tree = reduce_leftmost_deepest(tree, ref)
    return total + 2  # the last value and <eos>


@pytest.mark.parametrize("testbed,size", [("listops", 10), ("perm", 4)])
@pytest.mark.parametrize("depth", [1, 2, 3])
def test_max_len_bounds_every_sequence_and_is_attained(testbed, size, depth) -> None:
    ops = LISTOPS_OPS if testbed == "listops" else PERM_OPS
    cfg = TaskConfig(testbed=testbed, ops=ops, n=size, depth=depth, p_nest=0.5, **SMALL)
    assert cfg.max_len == full_trace_length(testbed, size, depth, cfg.arity_max)
    data = data_for(cfg)
    for seqs in (data.train, *data.test.values(), *data.val.values()):
        assert int(seqs.lengths.max()) <= cfg.max_len
    full = TaskConfig(
        testbed=testbed, ops=ops, n=size, depth=depth, p_nest=1.0, arity_min=3, **SMALL
    )
    assert full.max_len == cfg.max_len
    assert np.all(data_for(full).train.lengths == cfg.max_len)


@pytest.mark.parametrize("testbed,size", [("listops", 10), ("perm", 4)])
def test_a_test_set_alone_is_the_one_the_whole_data_holds(testbed, size) -> None:
    """build_test_set draws an op's test set without the rest (find reads its chance rate before
    it writes a study): the same sequences as build_task_data's, for every op of the mixture."""
    ops = LISTOPS_OPS[:3] if testbed == "listops" else PERM_OPS[:2]
    cfg = TaskConfig(testbed=testbed, ops=ops, n=size, **SMALL)
    data = build_task_data(cfg)
    for op in ops:
        alone = build_test_set(cfg, op)
        assert np.array_equal(alone.tokens, data.test[op].tokens), op
        assert np.array_equal(alone.answers, data.test[op].answers), op
    assert np.array_equal(build_test_set(cfg).answers, data.test[cfg.measured_op].answers)


# --- 9. Size ----------------------------------------------------------------------------------


def test_default_training_set_has_5000_sequences_a_residue() -> None:
    """The default training set's size (how fast it is built is a benchmark's, not a test's)."""
    cfg = TaskConfig(ops=("max", "med", "add"), n=10, n_test=200, n_val=50)
    data = build_task_data(cfg)
    assert len(data.train) == 50_000 == 5000 * cfg.n


# --- 10. Cache --------------------------------------------------------------------------------


def test_cache_writes_once_and_reloads(tmp_path) -> None:
    cfg = TaskConfig(ops=("max", "add"), n=10, **SMALL)
    first = load_task_data(cfg, cache_dir=tmp_path)
    files = sorted(tmp_path.rglob("*.npz"))
    assert len(files) == 1 and files[0].parent == tmp_path / "data"
    assert set(tmp_path.rglob("*")) == {tmp_path / "data", files[0]}  # no temporary left
    before = files[0].stat()
    second = load_task_data(cfg, cache_dir=tmp_path)
    after = files[0].stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)  # not rewritten
    assert second.config == cfg
    fresh = arrays_of(build_task_data(cfg))
    for arrays in (arrays_of(first), arrays_of(second)):
        assert arrays.keys() == fresh.keys()
        for key, a in arrays.items():
            assert a.dtype == fresh[key].dtype and np.array_equal(a, fresh[key]), key
    load_task_data(TaskConfig(ops=("max", "add"), n=10, data_seed=1, **SMALL), cache_dir=tmp_path)
    assert len(list(tmp_path.rglob("*.npz"))) == 2


def corruptions(good: bytes) -> dict[str, bytes]:
    flipped = bytearray(good)
    flipped[len(good) // 2] ^= 0xFF
    return {
        "empty": b"",
        "truncated": good[: len(good) // 2],
        "tail cut": good[:-20],
        "flipped byte": bytes(flipped),
        "text": b"not a cache file\n" * 10,
    }


def test_corrupt_cache_is_regenerated(tmp_path, caplog) -> None:
    cfg = TaskConfig(ops=("add",), n=5, **SMALL)
    load_task_data(cfg, cache_dir=tmp_path)
    (path,) = tmp_path.rglob("*.npz")
    good = path.read_bytes()
    expected = digest(build_task_data(cfg))
    for name, bad in corruptions(good).items():
        path.write_bytes(bad)
        with caplog.at_level(logging.WARNING, logger="threshold"):
            caplog.clear()
            data = load_task_data(cfg, cache_dir=tmp_path)
        assert digest(data) == expected, name
        assert "regenerating" in caplog.text, name
        assert digest(load_task_data(cfg, cache_dir=tmp_path)) == expected, name  # now readable


def test_a_cache_on_a_full_disk_or_a_file_is_one_clean_outcome(tmp_path, monkeypatch, caplog):
    """A cache folder that is a file is refused naming it; a full disk (the kernel's own ENOSPC,
    from /dev/full) leaves the data generated and uncached, with a warning (issue 68)."""
    cfg = TaskConfig(ops=("max",), n=5, **SMALL)
    (tmp_path / "afile").write_text("x")
    for folder in (tmp_path / "afile", tmp_path / "afile" / "deeper"):
        with pytest.raises(ConfigError, match=r"afile' is a file; name a folder"):
            load_task_data(cfg, cache_dir=folder)
    assert (tmp_path / "afile").read_text() == "x"

    @contextlib.contextmanager
    def full_disk(path, text=False):
        with open("/dev/full", "wb", buffering=0) as f:
            yield f

    monkeypatch.setattr(generate, "atomic_write", full_disk)
    with caplog.at_level(logging.WARNING, logger="threshold"):
        data = load_task_data(cfg, cache_dir=tmp_path / "cache")
    assert digest(data) == digest(build_task_data(cfg))
    assert "data not cached" in caplog.text and "No space left" in caplog.text
    assert not list((tmp_path / "cache").rglob("*.npz"))


def test_default_cache_dir_follows_the_environment(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("THRESHOLD_CACHE", str(tmp_path))
    assert default_cache_dir() == tmp_path
    load_task_data(TaskConfig(n=5, n_train=50, n_test=10, n_val=5))
    assert len(list((tmp_path / "data").glob("*.npz"))) == 1


# --- 11. Properties over random small settings ------------------------------------------------


@st.composite
def small_configs(draw) -> TaskConfig:
    testbed = draw(st.sampled_from(TESTBEDS))
    n = draw(st.integers(2, 12) if testbed == "listops" else st.integers(3, 5))
    pool = LISTOPS_OPS if testbed == "listops" else PERM_OPS
    ops = draw(st.lists(st.sampled_from(pool), min_size=1, max_size=len(pool), unique=True))
    arity_min = draw(st.integers(2, 3))
    return TaskConfig(
        testbed=testbed,
        ops=tuple(ops),
        n=n,
        depth=draw(st.integers(1, 3)),
        arity_min=arity_min,
        arity_max=draw(st.integers(arity_min, 4)),
        p_nest=draw(st.sampled_from([0.0, 0.25, 0.5])),
        split_seed=draw(st.integers(0, 2**32)),
        data_seed=draw(st.integers(0, 2**32)),
        n_train=200,
        n_test=30,
        n_val=10,
    )


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cfg=small_configs())
def test_random_settings_keep_the_chain_of_thought_and_the_split(cfg) -> None:
    data = build_task_data(cfg)
    check_all(data)
    assert int(data.train.lengths.max()) <= cfg.max_len


# --- 12. SequenceSet --------------------------------------------------------------------------


def test_subset_and_padded_agree_with_indexing() -> None:
    cfg = TaskConfig(ops=("max", "add"), n=10, depth=3, p_nest=0.5, **SMALL)
    seqs = data_for(cfg).train
    rng = np.random.default_rng(0)
    pad = cfg.vocab.pad_id
    for index in (rng.integers(0, len(seqs), 37), np.array([5, 5, 0]), np.arange(len(seqs))[::-1]):
        sub = seqs.subset(index)
        assert len(sub) == len(index)
        assert np.array_equal(sub.prompt_len, seqs.prompt_len[index])
        assert np.array_equal(sub.op, seqs.op[index])
        assert np.array_equal(sub.lengths, seqs.lengths[index])
        assert np.array_equal(sub.answers, seqs.answers[index])
        assert sub.tokens.dtype == seqs.tokens.dtype
        batch = seqs.padded(index, pad)
        assert batch.shape == (len(index), int(seqs.lengths[index].max()))
        for row, i in enumerate(index):
            assert np.array_equal(sub[row], seqs[i])
            n = len(seqs[i])
            assert np.array_equal(batch[row, :n], seqs[i]) and np.all(batch[row, n:] == pad)
    for i in (0, len(seqs) - 1):
        assert len(seqs[i]) == seqs.lengths[i] and seqs[i][-1] == cfg.vocab.eos_id


def test_subset_and_padded_of_nothing_are_empty() -> None:
    seqs = data_for(TaskConfig(ops=("max", "add"), n=10, depth=3, p_nest=0.5, **SMALL)).train
    empty = np.array([], dtype=np.int64)
    assert len(seqs.subset(empty)) == 0
    assert seqs.padded(empty, 0).shape == (0, 0)


def test_sequence_set_round_trips_through_arrays() -> None:
    seqs = data_for(TaskConfig(ops=("max", "add"), n=10, **SMALL)).train
    assert_same(SequenceSet.from_arrays(seqs.to_arrays("x"), "x"), seqs)
