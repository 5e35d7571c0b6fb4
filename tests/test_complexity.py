"""The complexity proxy is measured on programs that solve the tasks, and behaves like a size."""

import itertools
import json
import random

import pytest
from typer.testing import CliRunner

from threshold.analysis.complexity import (
    complexity,
    compressed_size,
    evaluator_source,
    program_source,
    solver_source,
)
from threshold.cli import app
from threshold.errors import ConfigError
from threshold.tasks import TaskConfig, build_task_data, get_testbed

LISTOPS = ["max", "min", "med", "add", "prod", "nadd", "sadd"]
PERM = ["mul", "sgn", "img"]


def run_program(testbed, size, ops, sadd_seed=0):
    """Execute the mixture's program in a fresh namespace; the size is its only input."""
    namespace = {"n" if testbed == "listops" else "k": size}
    exec(program_source(testbed, ops, size, sadd_seed), namespace)
    return namespace


def test_solvers_cover_every_op_of_each_testbed():
    assert list(get_testbed("listops", 10).ops) == LISTOPS
    assert list(get_testbed("perm", 3).ops) == PERM


@pytest.mark.parametrize(("n", "sadd_seed"), [(2, 0), (3, 0), (7, 1), (10, 0), (12, 5), (45, 2)])
def test_listops_solvers_match_the_task_ops(n, sadd_seed):
    testbed = get_testbed("listops", n, sadd_seed)
    solvers = run_program("listops", n, LISTOPS, sadd_seed)["F"]
    rng = random.Random(n)
    for _ in range(500):
        xs = [rng.randrange(n) for _ in range(rng.randint(1, 8))]
        for op, fn in testbed.ops.items():
            assert solvers[op](xs) == fn(xs), (op, xs)


@pytest.mark.parametrize("k", [3, 4, 5, 6])
def test_perm_solvers_match_the_task_ops(k):
    testbed = get_testbed("perm", k)
    solvers = run_program("perm", k, PERM)["F"]
    rng = random.Random(k)
    for _ in range(150):
        xs = [rng.randrange(testbed.n_values) for _ in range(rng.randint(1, 4))]
        for op, fn in testbed.ops.items():
            assert solvers[op](xs) == fn(xs), (op, xs)


@pytest.mark.parametrize(
    ("testbed", "n", "ops", "depth"),
    [
        ("listops", 10, LISTOPS, 3),
        ("listops", 5, ["add", "med"], 2),
        ("perm", 3, PERM, 3),
        ("perm", 4, ["mul", "img"], 2),
    ],
)
def test_evaluator_writes_the_generated_chain_of_thought(testbed, n, ops, depth):
    cfg = TaskConfig(
        testbed=testbed, ops=tuple(ops), n=n, depth=depth, p_nest=0.5, n_train=300, n_test=50
    )
    data = build_task_data(cfg)
    evaluate = run_program(testbed, n, ops)["S"]
    seen_nested = False
    for i in range(len(data.train)):
        words = cfg.vocab.decode(data.train[i]).split()
        prompt_len = int(data.train.prompt_len[i])
        expression = " ".join(words[: prompt_len - 1])  # without the first "="
        assert evaluate(expression) == " ".join(words[prompt_len:])
        seen_nested |= words.count("(") > 1
    assert seen_nested


def test_evaluator_example_from_the_domain_brief():
    evaluate = run_program("listops", 10, ["max", "add"])["S"]
    assert evaluate("add ( max ( 7 3 6 ) 6 0 )") == "add ( 7 6 0 ) = 3 <eos>"


def test_evaluator_is_shared_apart_from_the_value_prelude():
    listops, perm = evaluator_source("listops"), evaluator_source("perm")
    shared = listops[listops.index("F={}") :]
    assert perm.endswith(shared) and len(shared) > len(listops) / 2


@pytest.mark.parametrize(("testbed", "ops", "size"), [("listops", LISTOPS, 10), ("perm", PERM, 4)])
def test_mixture_is_at_least_its_largest_op_and_grows_with_ops(testbed, ops, size):
    for r in range(1, len(ops) + 1):
        for mixture in itertools.combinations(ops, r):
            c = complexity(testbed, mixture, size)
            for key in ("zlib", "lzma", "chars"):
                largest = max(c["per_op"][op]["task"][key] for op in mixture)
                assert c["mixture"][key] >= largest, (mixture, key)
                assert c["mixture"][key] >= c["evaluator"][key]
            # Sharing: a mixture costs less than its single-op programs together.
            tasks = sum(c["per_op"][op]["task"]["zlib"] for op in mixture)
            assert r == 1 or c["mixture"]["zlib"] < tasks


def test_sizes_do_not_depend_on_the_order_the_ops_are_named():
    assert (
        complexity("listops", ["add", "max"])["mixture"]
        == complexity("listops", ["max", "add"])["mixture"]
    )


def test_known_orderings_of_ops():
    sizes = {op: complexity("listops", [op])["mixture"]["zlib"] for op in LISTOPS}
    # max and min differ only in a letter: the compressor's noise floor is about a byte.
    assert abs(sizes["max"] - sizes["min"]) <= 1
    assert max(sizes["max"], sizes["min"]) < sizes["add"]  # a builtin beats modular arithmetic
    assert sizes["add"] < sizes["nadd"] and sizes["add"] < sizes["sadd"]  # both extend add
    # Only sadd carries data that grows with n (its relabelling table).
    for op in LISTOPS:
        grows = complexity("listops", [op], 43)["mixture"]["zlib"] > sizes[op]
        assert grows == (op == "sadd"), op


def test_zlib_is_the_tighter_compressor_here():
    """The module docstring's reason to make zlib primary."""
    for testbed, ops, size in (("listops", LISTOPS, 10), ("perm", PERM, 4)):
        for r in range(1, len(ops) + 1):
            for mixture in itertools.combinations(ops, r):
                sizes = compressed_size(program_source(testbed, mixture, size))
                assert sizes["zlib"] < sizes["lzma"] < sizes["chars"] + 64, mixture


def test_compressed_size_is_deterministic_and_grows_with_content():
    text = solver_source("listops", "nadd")
    assert compressed_size(text) == compressed_size(text)
    assert compressed_size(text + text)["zlib"] < 2 * compressed_size(text)["zlib"]
    assert compressed_size(text)["chars"] == len(text)


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (("listops", ["foo"]), "'foo'"),
        (("perm", ["add"], 4), "'add'"),
        (("listops", []), "empty"),
        (("listops", ["add", "add"]), "repeat"),
        (("graph", ["add"]), "'graph'"),
        (("listops", ["add"], 1), "modulus 1"),
        (("perm", ["mul"], 9), "degree 9"),
    ],
)
def test_bad_input_names_the_value(args, named):
    with pytest.raises(ConfigError, match=named):
        complexity(*args)


runner = CliRunner()


def test_cli_json_matches_the_function():
    result = runner.invoke(app, ["complexity", "--tasks", "max,med,add", "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report == complexity("listops", ["max", "med", "add"], 10)
    assert report["primary"] == "zlib" and set(report["per_op"]) == {"max", "med", "add"}


def test_cli_table_names_every_op():
    args = ["complexity", "--testbed", "perm", "--mod", "4", "--tasks", "mul,sgn"]
    result = runner.invoke(app, args, env={"COLUMNS": "120"})
    assert result.exit_code == 0, result.output
    assert "mixture" in result.stdout and "mul" in result.stdout and "sgn" in result.stdout


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--tasks", "max,foo"], "'foo'"),
        (["--testbed", "perm", "--tasks", "add", "--mod", "4"], "'add'"),
        (["--tasks", "max", "--mod", "1"], "modulus 1"),
        (["--tasks", ""], "empty"),
    ],
)
def test_cli_bad_input_is_one_line_exit_2(args, named):
    result = runner.invoke(app, ["complexity", *args])
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and named in lines[0]
