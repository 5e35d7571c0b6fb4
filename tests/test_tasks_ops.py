"""Your own ListOps op (threshold.tasks.ops): registered and checked, given its own token without
moving the built-in ones, and carried by the task's ``ops_module`` through `find` (its worker in
its own process), `train`, `data` and `analyze`, as examples/custom_op.py shows."""

from __future__ import annotations

import importlib
import json
import math
import os
import sys
from pathlib import Path

import pytest

from threshold.errors import ConfigError
from threshold.search.spec import StudySettings
from threshold.suite import parse_suite
from threshold.tasks import TaskConfig, build_task_data, get_testbed, module_ops, register_op
from threshold.tasks.ops import BUILTIN
from threshold.tasks.vocab import SPECIALS
from threshold.train.checkpoint import load_checkpoint

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = "examples.custom_op"
SMALL = {"n": 5, "depth": 1, "n_train": 200, "n_test": 40, "n_val": 10}
TINY = ["--mod", "5", "--depth", "1", "--n-train", "1500", "--n-test", "100"]


@pytest.fixture
def importable(monkeypatch, tmp_path):
    """The repository (examples/) and a folder of the test's own modules on this process's path
    and on its workers' (PYTHONPATH): ``importable(NAME, SOURCE)`` writes module NAME there."""
    mods = tmp_path / "mods"
    mods.mkdir()
    for folder in (REPO, mods):
        monkeypatch.syspath_prepend(str(folder))
    path = os.pathsep.join([str(REPO), str(mods), os.environ.get("PYTHONPATH", "")])
    monkeypatch.setenv("PYTHONPATH", path)

    def write(name: str, source: str) -> None:
        (mods / f"{name}.py").write_text(source)
        importlib.invalidate_caches()
        sys.modules.pop(name, None)

    return write


def gcd(xs, n):
    return math.gcd(*xs) % n


# --- registration -------------------------------------------------------------------------------


def test_the_builtin_names_are_every_testbeds_ops():
    assert set(BUILTIN) == {*get_testbed("listops", 10).ops, *get_testbed("perm", 3).ops}


@pytest.mark.parametrize(
    ("name", "fn", "rank", "message"),
    [
        ("max", gcd, 1, "'max' is a built-in op's"),
        ("Gcd", gcd, 1, "lowercase letters"),
        ("7up", gcd, 1, "starting with a letter"),
        ("gcd2", gcd, -1, "rank -1"),
        ("gcd2", gcd, 1.5, "rank 1.5"),
        ("gcd2", "gcd", 1, "not a function"),
        ("total", lambda xs, n: sum(xs), 1, r"gives \d+ for operands \(.*\) at modulus 2"),
        ("half", lambda xs, n: xs[0] / 2, 1, "an integer in 0..1"),
        ("boom", lambda xs, n: 1 // (xs[0] - xs[0]), 1, "ZeroDivisionError"),
    ],
)
def test_a_bad_op_is_refused_when_registered(name, fn, rank, message):
    with pytest.raises(ConfigError, match=message):
        register_op(name, fn, rank=rank)


def test_a_name_taken_by_another_module_is_refused(importable):
    module_ops(EXAMPLE)  # registers gcd and second from examples/custom_op.py
    with pytest.raises(ConfigError, match=f"'gcd' is already registered by module '{EXAMPLE}'"):
        register_op("gcd", gcd, rank=2)


# --- the vocabulary, the data and the measured op ----------------------------------------------


def test_custom_tokens_follow_the_builtin_ones_and_every_mixture_shares_them(importable):
    plain = TaskConfig(ops=("max",), **SMALL)
    assert plain.vocab.tokens == (*SPECIALS, *BUILTIN[:7], *map(str, range(5)))
    assert "ops_module" not in plain.to_dict()  # a built-in task stores as before (keys, names)
    mixes = [("max",), ("gcd",), ("max", "second", "gcd")]
    tasks = [TaskConfig(ops=m, ops_module=EXAMPLE, **SMALL) for m in mixes]
    first = tasks[0].vocab
    assert first.tokens == (*SPECIALS, *BUILTIN[:7], "gcd", "second", *map(str, range(5)))
    assert all(t.vocab.tokens == first.tokens for t in tasks)  # transfer between them works
    assert first.n_ops == 9 and first.value_offset == len(SPECIALS) + 9
    assert tasks[0].key() != plain.key()  # one more token: other data
    assert TaskConfig.from_dict(tasks[2].to_dict()) == tasks[2]


def test_the_data_applies_the_users_function(importable):
    task = TaskConfig(ops=("max", "gcd"), ops_module=EXAMPLE, **SMALL)
    data = build_task_data(task)
    vocab = task.vocab
    for seqs in data.test.values():
        for i in range(len(seqs)):
            words = vocab.decode(seqs[i]).split()  # depth 1: op ( a b c ) = v <eos>
            operands = [int(w) for w in words[2 : words.index(")")]]
            fn = max if words[0] == "max" else lambda xs: math.gcd(*xs) % 5
            assert int(words[-2]) == fn(operands), words


def test_the_rank_picks_the_measured_op(importable):
    def measured(*ops):
        return TaskConfig(ops=ops, ops_module=EXAMPLE, **SMALL).measured_op

    assert measured("max", "gcd") == "gcd"  # rank 2 over 0
    assert measured("second", "max") == "second"  # rank 1 over 0
    assert measured("gcd", "add") == "add"  # add is 3


def test_an_edited_op_makes_new_data_and_refuses_its_old_study(importable):
    importable("myops", "from threshold.tasks import register_op\n"
               "register_op('twice', lambda xs, n: 2 * xs[0] % n, rank=1)\n")  # fmt: skip
    task = TaskConfig(ops=("twice",), ops_module="myops", **SMALL)
    old = StudySettings.from_options("twice", ops_module="myops", mod=5)
    attrs, key = old.to_attrs(), task.key()
    assert StudySettings.from_attrs(attrs) == old
    importable("myops", "from threshold.tasks import register_op\n"
               "register_op('twice', lambda xs, n: 3 * xs[0] % n, rank=1)\n")  # fmt: skip
    importlib.import_module("myops")
    assert task.key() != key
    with pytest.raises(ConfigError, match="give other values than when this study was made"):
        StudySettings.from_attrs(attrs)


def test_a_missing_module_and_a_module_without_ops_are_one_line(importable):
    with pytest.raises(ConfigError, match="ops module 'nomodule' cannot be imported") as e:
        TaskConfig(ops=("gcd",), ops_module="nomodule")
    assert e.value.fields == ("ops_module",)
    importable("empty", "x = 1\n")
    with pytest.raises(ConfigError, match="ops module 'empty' registers no op"):
        TaskConfig(ops=("gcd",), ops_module="empty")
    with pytest.raises(ConfigError, match="needs --ops-module MODULE"):
        TaskConfig(ops=("gcd",))
    with pytest.raises(ConfigError, match="testbed perm takes no ops module"):
        TaskConfig(testbed="perm", ops=("mul",), n=3, ops_module=EXAMPLE)


def test_an_entry_point_names_the_module(importable, tmp_path, monkeypatch):
    """An installed package declares ``gcd = "examples.custom_op"`` under ``threshold.ops``:
    ``--tasks gcd`` finds the module, and the task stores it."""
    info = tmp_path / "site" / "myops-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: myops\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[threshold.ops]\ngcd = {EXAMPLE}\n")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    task = TaskConfig.from_options("max,gcd", mod=5)
    assert task.ops_module == EXAMPLE and task.measured_op == "gcd"


def test_a_suite_study_takes_its_ops_module(importable):
    suite = parse_suite(
        f'[[study]]\nlabel = "gcd"\ntasks = ["max", "gcd"]\nops_module = "{EXAMPLE}"\nmod = 5\n'
    )
    (study,) = suite.studies
    assert study.settings.task.ops_module == EXAMPLE
    assert study.name.startswith("listops5-max+gcd-gcd-")


# --- through the commands -----------------------------------------------------------------------


def test_a_custom_op_goes_through_find_train_data_and_analyze(importable, tmp_path, cli):
    """The issue's mark, with examples/custom_op.py: `find`'s worker is its own process, so it
    imports the module by the path the study stores."""
    url = f"sqlite:///{tmp_path}/s.db"
    own = ["--tasks", "max,gcd", "--ops-module", EXAMPLE, *TINY]
    found = cli(["find", *own, "--d-lo", "4", "--d-hi", "16", "--budget", "3", "--steps", "40",
                 "--heartbeat", "2", "--storage", url, "--json"])  # fmt: skip
    assert found.exit_code == 0, (found.stderr, found.exception)
    report = json.loads(found.stdout)
    assert report["study"].startswith("listops5-max+gcd-gcd-") and report["n_trials"] == 3

    trained = cli(["train", *own, "--d-model", "8", "--steps", "20", "--out", tmp_path / "m",
                   "--json"])  # fmt: skip
    assert trained.exit_code == 0, trained.stderr
    result = json.loads(trained.stdout)
    assert set(result["accuracy"]) == {"max", "gcd"} and result["measure"] == "gcd"
    assert load_checkpoint(tmp_path / "m").task_config.ops_module == EXAMPLE

    shown = cli(["data", *own, "--split", "test", "--n", "2", "--json"])
    assert shown.exit_code == 0, shown.stderr
    assert [r["op"] for r in json.loads(shown.stdout)] == ["max", "max", "gcd", "gcd"]

    analysed = cli(["analyze", report["study"], "--largest", "--storage", url, "--json"])
    assert analysed.exit_code == 0, analysed.stderr
    scores = json.loads(analysed.stdout)
    assert scores["tasks"] == ["max", "gcd"] and scores["measure"] == "gcd"


def test_a_study_whose_module_is_gone_is_one_line(importable, tmp_path, cli):
    importable("goneops", "from threshold.tasks import register_op\n"
               "register_op('thrice', lambda xs, n: 3 * xs[0] % n, rank=1)\n")  # fmt: skip
    url = f"sqlite:///{tmp_path}/s.db"
    made = cli(["find", "--tasks", "thrice", "--ops-module", "goneops", *TINY, "--storage", url,
                "--study", "gone", "--workers", "0"])  # fmt: skip
    assert made.exit_code == 0, made.stderr
    (tmp_path / "mods" / "goneops.py").unlink()
    sys.modules.pop("goneops")
    for command in (["worker", "--study", "gone"], ["analyze", "gone", "--trial", "0"]):
        refused = cli([*command, "--storage", url])
        assert refused.exit_code == 2, (refused.stderr, refused.exception)
        assert refused.stderr.strip().splitlines() == [
            "error: ops module 'goneops' cannot be imported (ModuleNotFoundError: No module"
            " named 'goneops'): install it or put its folder on PYTHONPATH"
        ]
