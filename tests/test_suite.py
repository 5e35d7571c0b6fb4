"""Suite files and `threshold run`: the real suites parse, bad input is one line naming the file,
line and key with nothing written, and a tiny real suite runs, resumes and re-runs for free."""

from __future__ import annotations

import json
import os
import shlex
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState
from reliability.support import hold_env, wait_for_hold
from typer.testing import CliRunner

from threshold.cli import app
from threshold.config import GPU_TRIALS_AT_ONCE
from threshold.suite import ALL_REPORT, SuiteError, key_lines, load_suite, parse_suite

ROOT = Path(__file__).resolve().parent.parent
REAL = [ROOT / "studies" / "cpu.toml", ROOT / "studies" / "paper.toml"]

# A suite small enough to run for real: ListOps mod 5 of depth 1 (9 tokens), models of d 4..16,
# 60 steps, 3 runs each.
TINY = """\
name = "tiny"
storage = "sqlite:///s.db"
workers = 1
heartbeat = 2
baseline = "a"

[defaults]
mod = 5
depth = 1
n_train = 1500
n_test = 100
d_lo = 4
d_hi = 16
budget = 3
steps = 60

[[study]]
label = "a"
tasks = ["max"]

[[study]]
label = "b"
tasks = ["max", "min"]
measure = "max"

[[transfer]]
label = "t"
pretrain = ["max"]
tasks = ["min"]
d = 4
seeds = [0]
steps = 40

[[analysis]]
study = "a"
pick = "largest"

[[survey]]
study = "b"
min_accuracy = 0.0

[[report]]
name = "b-vs-a"
baseline = "b"
studies = ["a"]
"""


def trial_counts(url: str) -> dict[str, dict[str, int]]:
    counts = {}
    for summary in optuna.get_all_study_summaries(url):
        study = optuna.load_study(study_name=summary.study_name, storage=url)
        states = [t.state.name for t in study.trials]
        counts[summary.study_name] = {s: states.count(s) for s in set(states)}
    return counts


# The real suites ------------------------------------------------------------------------------


@pytest.mark.parametrize("path", REAL, ids=lambda p: p.name)
def test_real_suites_parse_and_every_study_builds(path):
    suite = load_suite(path)
    assert len(suite.studies) >= 12
    names = [s.name for s in suite.studies]
    assert len(set(names)) == len(names)
    assert suite.reports[0].name == ALL_REPORT and suite.baseline == "add"
    measured = {s.label: s.settings.task.measured_op for s in suite.studies}
    assert measured["max-med-add"] == "add" and measured["max-med-sadd"] == "sadd"
    assert measured["perm-mul-sgn-img"] == "mul"
    transfer = suite.study("add-after-max-med").settings
    assert transfer.pretrain == ("max", "med")
    # The transfer study differs from the ADD baseline only by its pretraining.
    base = suite.study("add").settings
    assert (transfer.task, transfer.train, transfer.search) == (base.task, base.train, base.search)
    # The paper's pairings are there: a composite and a prime modulus for ADD+PROD, NADD, perm.
    prod = [s.settings.task.n for s in suite.studies if s.settings.task.ops == ("add", "prod")]
    assert len(prod) == 2 and any(_prime(n) for n in prod) and not all(_prime(n) for n in prod)
    for n in prod:
        assert any(
            s.settings.task.ops == ("add",) and s.settings.task.n == n for s in suite.studies
        )
    assert any(
        s.settings.task.testbed == "perm" and s.settings.task.ops == ("mul",) for s in suite.studies
    )


def _prime(n: int) -> bool:
    return n > 1 and all(n % k for k in range(2, int(n**0.5) + 1))


@pytest.mark.parametrize("path", [*REAL, ROOT / "studies" / "gpu.toml"], ids=lambda p: p.name)
def test_every_non_default_value_in_the_real_suites_says_why(path):
    """Each setting in [defaults], [[study]] and [[transfer]] (its label and ops aside), and the
    top-level run settings, carry a comment on their line."""
    text = path.read_text()
    rows = text.splitlines()
    lines = key_lines(text)
    checked = 0
    for (table, _, key), line in lines.items():
        explained = table in ("defaults", "study", "transfer") and key not in (
            None,
            "label",
            "tasks",
        )
        explained |= table == "" and key in (
            "workers",
            "trials_at_once",
            "storage",
            "heartbeat",
            "baseline",
        )
        if explained:
            checked += 1
            assert "#" in rows[line - 1], f"{path.name}:{line}: {rows[line - 1]!r} has no comment"
    assert checked >= 15


def test_cpu_suite_names_match_the_find_commands():
    """`threshold find --tasks max` (defaults) and `find --tasks add --budget 16 --precision 3
    --d-hi 64` (cpu.toml's [defaults]) derive cpu.toml's study names: each continues the other."""
    from threshold.search.spec import StudySettings
    from threshold.search.study import SearchConfig
    from threshold.tasks import TaskConfig
    from threshold.train import TrainConfig

    suite = load_suite(REAL[0])
    small = {"budget": 16, "precision": 3.0, "d_hi": 64}
    for label, tasks, measure, search in (
        ("add", "add", None, small),
        ("max", "max", None, {}),
        ("max-med-add", "max,med,add", "add", small),
    ):
        task = TaskConfig.from_options(tasks=tasks, measure=measure)  # find's task options
        find = StudySettings(task, TrainConfig(max_steps=20_000), SearchConfig(**search))
        assert suite.study(label).name == find.default_name(), label


def test_picks_are_the_analyze_commands():
    from threshold.search.results import PICKS
    from threshold.suite.spec import PICKS as SUITE_PICKS

    assert SUITE_PICKS == PICKS


def test_spec_loads_neither_torch_nor_optuna(loaded_by):
    assert loaded_by(["threshold.suite"], ["torch", "optuna", "threshold.cli"]) == []


# Line numbers ---------------------------------------------------------------------------------


def test_key_lines_skip_multiline_values_and_count_array_tables():
    text = '''\
name = "x"   # a comment with label = "no"
description = """
label = "inside a string"
[[study]]
"""
[defaults]
tasks = [
  "max",  # [[study]] in a comment
  "med",
]
mod = 5

[[study]]
label = 'a'
"budget" = 3

[[ study ]]
label = "b"
seeds = [[1, 2],
         [3]]
d_hi = 8
'''
    lines = key_lines(text)
    assert lines[("", None, "name")] == 1 and lines[("", None, "description")] == 2
    assert lines[("defaults", None, None)] == 6 and lines[("defaults", None, "tasks")] == 7
    assert lines[("defaults", None, "mod")] == 11
    assert lines[("study", 0, None)] == 13 and lines[("study", 0, "label")] == 14
    assert lines[("study", 0, "budget")] == 15
    assert lines[("study", 1, None)] == 17 and lines[("study", 1, "d_hi")] == 21
    assert ("", None, "label") not in lines and ("study", 2, None) not in lines


# Bad input ------------------------------------------------------------------------------------

GOOD = """\
name = "s"
baseline = "a"

[defaults]
mod = 5

[[study]]
label = "a"
tasks = ["max"]

[[study]]
label = "b"
tasks = ["max", "min"]
"""

# name: (suite text, line the message names, words it must contain)
BAD = {
    "trials at once 0": (GOOD.replace('name = "s"', 'name = "s"\ntrials_at_once = 0'), 2,
                         ["'trials_at_once' = 0", "1 or more"]),
    "unknown key at top level": (GOOD.replace('name = "s"', 'name = "s"\nworkerz = 2'), 2,
                                 ["'workerz'", "did you mean 'workers'"]),
    "unknown key in a study": (GOOD.replace('label = "b"', 'label = "b"\nbudgett = 3'), 13,
                               ["'budgett'", "[[study]] 'b'", "'budget'"]),
    "unknown key in defaults": (GOOD.replace("mod = 5", "mod = 5\nmodd = 7"), 6,
                                ["'modd'", "[defaults]"]),
    "duplicate label": (GOOD.replace('label = "b"', 'label = "a"'), 12,
                        ["'a' is used twice", "first at line 8"]),
    "wrong type: a string for a number": (GOOD.replace('label = "b"', 'label = "b"\nbudget = "3"'),
                                          13, ["'budget'", "is not an integer", "budget = 3"]),
    "wrong type: one op as a string": (GOOD.replace('tasks = ["max"]', 'tasks = "max"'), 9,
                                       ["'tasks'", "not a list of strings"]),
    "wrong type: a number for a flag": (GOOD.replace("mod = 5", "chance_corrected = 1"), 5,
                                        ["'chance_corrected'", "not true or false"]),
    "unknown baseline": (GOOD.replace('baseline = "a"', 'baseline = "c"'), 2,
                         ["'baseline'", "'c'", "use one of a, b"]),
    "analysis of an unknown study": (GOOD + '\n[[analysis]]\nstudy = "zz"\n', 16,
                                     ["'study'", "'zz'"]),
    "survey of an unknown study": (GOOD + '\n[[survey]]\nstudy = "zz"\n', 16,
                                   ["'study'", "'zz'"]),
    "survey accuracy above 1": (GOOD + '\n[[survey]]\nstudy = "a"\nmin_accuracy = 80\n', 17,
                                ["'min_accuracy'", "= 80", "use 0 to 1"]),
    "comparison with an unknown study": (
        GOOD + '\n[[comparison]]\nstudies = ["a", "zz"]\nmatch = "size"\n', 16,
        ["'studies'", "'zz'"]),
    "report with an unknown baseline": (
        GOOD + '\n[[report]]\nname = "r"\nbaseline = "zz"\n', 17, ["'baseline'", "'zz'"]),
    "unknown op": (GOOD.replace('tasks = ["max", "min"]', 'tasks = ["max", "sum"]'), 13,
                   ["'tasks'", "[[study]] 'b'", "'sum'", "choose from"]),
    "a bad default names the defaults line": (GOOD.replace("mod = 5", "mod = 1"), 5,
                                              ["'mod'", "modulus 1"]),
    "measured op not in the mixture": (GOOD.replace('tasks = ["max"]', 'tasks = ["max"]\n'
                                                    'measure = "add"'), 10, ["'measure'", "'add'"]),
    "d range upside down": (GOOD.replace('tasks = ["max"]', 'tasks = ["max"]\nd_hi = 4'), 10,
                            ["'d_hi'", "d range 8..4"]),
    "unknown pretraining op": (GOOD.replace('tasks = ["max"]', 'tasks = ["max"]\npretrain = '
                                            '["nope"]'), 10, ["'pretrain'", "'nope'"]),
    "workers in a study": (GOOD.replace('label = "b"', 'label = "b"\nworkers = 0'), 13,
                           ["'workers'", "[[study]] 'b'", "suite-level setting"]),
    "infinite learning rate": (GOOD.replace("mod = 5", "lr = inf"), 5, ["'lr'", "finite"]),
    "10^20 steps": (GOOD.replace("mod = 5", "steps = 100000000000000000000"), 5,
                    ["'steps'", "use 1 to 10,000,000"]),
    "10^20 steps as a float": (GOOD.replace("mod = 5", "steps = 1e20"), 5,
                               ["'steps'", "is not an integer"]),
    "infinite precision": (GOOD.replace('label = "b"', 'label = "b"\nprecision = inf'), 13,
                           ["'precision'", "finite"]),
    "arity not MIN-MAX": (GOOD.replace("mod = 5", 'arity = "2/3"'), 5, ["'arity'", "MIN-MAX"]),
    "missing tasks": (GOOD.replace('tasks = ["max"]\n', ""), 7, ["'tasks' is missing"]),
    "the same settings twice": (GOOD.replace('tasks = ["max", "min"]', 'tasks = ["max"]'), 11,
                                ["same settings as 'a'"]),
    "bad TOML syntax": (GOOD.replace("mod = 5", "mod = = 5"), 5, ["key 'mod'", "not valid TOML"]),
    "unclosed table header": (GOOD + "[[study]\n", 14, ["not valid TOML", "`[[study]`"]),
    "value left open at the end": (GOOD + "budget = [3,\n", 14,
                                   ["key 'budget'", "end of the file"]),
}  # fmt: skip


def invoke(args, tmp_path):
    env = {"THRESHOLD_CACHE": str(tmp_path / "cache"), "THRESHOLD_STORAGE": None}
    return CliRunner().invoke(app, args, env=env)


def test_at_least_eight_bad_inputs():
    assert len(BAD) >= 8


@pytest.mark.parametrize("case", list(BAD))
def test_bad_suite_is_one_line_with_file_line_and_key_exit_2_nothing_written(
    case, tmp_path, monkeypatch, restore_signals
):
    text, line, words = BAD[case]
    path = tmp_path / "bad.toml"
    path.write_text(text)
    monkeypatch.chdir(tmp_path)
    for extra in ([], ["--dry-run"]):
        result = invoke(
            ["run", str(path), "--storage", f"sqlite:///{tmp_path}/s.db", *extra], tmp_path
        )
        assert result.exit_code == 2, (result.output, result.exception)
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1, result.stderr
        assert lines[0].startswith(f"error: {path}:{line}: "), lines[0]
        for word in words:
            assert word in lines[0], (word, lines[0])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.toml"]  # no storage, cache, report
    with pytest.raises(SuiteError):
        parse_suite(text, path)


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["run", "{tmp}/missing.toml"], "no such suite file"),
        (["run", "{tmp}"], "is a directory"),
        (["run", "{tmp}/good.toml", "--only", "a,zz"], "--only zz"),
        (["run", "{tmp}/good.toml", "--workers", "-1"], "--workers -1"),
        (["run", "{tmp}/good.toml", "--trials-at-once", "0"], "--trials-at-once 0"),
        (["run", "{tmp}/good.toml", "--batch", "2"], "now --trials-at-once 2"),
        (["run", "{tmp}/good.toml", "--workers", "100000"], "--workers 100000 is more than"),
    ],
)
def test_bad_command_line_is_one_line_exit_2(args, named, tmp_path, monkeypatch, restore_signals):
    (tmp_path / "good.toml").write_text(GOOD)
    monkeypatch.chdir(tmp_path)
    args = [a.format(tmp=tmp_path) for a in args] + ["--storage", f"sqlite:///{tmp_path}/s.db"]
    result = invoke(args, tmp_path)
    assert result.exit_code == 2, (result.output, result.exception)
    (line,) = result.stderr.strip().splitlines()
    assert named in line, line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["good.toml"]


def test_a_reports_folder_with_other_content_is_refused_before_anything_runs(
    tmp_path, monkeypatch, restore_signals
):
    text = GOOD.replace('name = "s"', 'name = "s"\nreports = "out"')
    (tmp_path / "good.toml").write_text(text)
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "mine.txt").write_text("keep")
    monkeypatch.chdir(tmp_path)
    result = invoke(["run", "good.toml", "--storage", f"sqlite:///{tmp_path}/s.db"], tmp_path)
    assert result.exit_code == 2
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("error: good.toml:2: reports folder 'out'"), line
    assert not (tmp_path / "s.db").exists()


# A tiny real suite ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_runs(tmp_path_factory, in_process):
    """The tiny suite, run twice in a fresh folder: (cwd, first record, second record, the
    folder's files after each run, trial counts after each run).
    `threshold run` runs in this process (its workers in their own): the real process, its exit
    code and signals are test_sigterm_stops_workers_and_the_next_run_continues's."""
    cwd = tmp_path_factory.mktemp("suite")
    (cwd / "tiny.toml").write_text(TINY)
    records, files, counts = [], [], []
    for _ in range(2):
        result = in_process(["run", "tiny.toml", "--json"], cwd)
        assert result.exit_code == 0, (result.stderr, result.exception)
        records.append(json.loads(result.stdout))
        files.append(file_stamps(cwd))
        counts.append(trial_counts(f"sqlite:///{cwd}/s.db"))
    return cwd, records, files, counts


def file_stamps(root):
    """Each file under ``root`` (by its path there) with its inode, size and modification time:
    equal stamps mean the file was neither rewritten nor replaced."""
    return {
        str(p.relative_to(root)): (p.stat().st_ino, p.stat().st_size, p.stat().st_mtime_ns)
        for p in root.rglob("*")
        if p.is_file()
    }


def test_tiny_suite_runs_every_step(tiny_runs):
    cwd, (first, _), _, (counts, _) = tiny_runs
    assert [s["label"] for s in first["studies"]] == ["a", "b"]
    for s in first["studies"]:
        assert s["ran"] and s["done"] and s["stop_reason"] == "budget" and s["n_runs"] == 3
        assert counts[s["study"]] == {"COMPLETE": 3}
    (transfer,) = first["transfers"]
    result = json.loads((cwd / transfer["file"]).read_text())
    assert transfer["ran"] and result["seeds"] == [0] and result["pretrain"] == ["max"]
    (analysis,) = first["analyses"]
    assert analysis["status"] == "done"
    (trial,) = analysis["trials"]
    assert trial["ran"] and (cwd / trial["folder"] / "scores.json").is_file()
    reports = {r["name"]: r for r in first["reports"]}
    assert set(reports) == {"all", "b-vs-a"}
    everything = reports["all"]
    assert (
        everything["status"] == "written" and everything["baseline"] == first["studies"][0]["study"]
    )
    assert [r["suite_label"] for r in everything["comparison"]] == ["a", "b"]
    assert everything["transfers"] == [transfer["file"]]
    assert reports["b-vs-a"]["baseline"] == first["studies"][1]["study"]
    out = cwd / "reports" / "tiny"
    for name in ("all", "b-vs-a"):
        assert (out / name / "index.html").is_file() and (out / name / "results.json").is_file()
        # Each report folder is whole: plotly's script beside its page, nothing linked outside.
        assert (out / name / "plotly.min.js").stat().st_size > 1_000_000
        assert '<script src="plotly.min.js">' in (out / name / "index.html").read_text()
    assert not (out / "plotly.min.js").exists()
    results = json.loads((out / "all" / "results.json").read_text())
    (entry,) = [
        s["data"] for s in results["studies"] if s["row"]["name"] == first["studies"][0]["study"]
    ]
    assert [a["trial"] for a in entry["analyses"]] == [trial["trial"]]  # the analysis is in it
    (survey,) = first["surveys"]
    scored = json.loads((cwd / survey["file"]).read_text())
    assert survey["status"] == "done" and survey["study"] == "b" and survey["ran"]
    assert scored["study"] == first["studies"][1]["study"] and len(scored["runs"]) == 3
    assert survey["summary"] == scored["summary"]
    assert len(results["transfer"]) == 1


def test_the_report_records_the_suite_file_and_commit(tiny_runs):
    cwd, (_, second), _, _ = tiny_runs
    out = cwd / "reports" / "tiny"
    record = json.loads((out / "suite.json").read_text())
    assert record == second
    assert record["suite"] == "tiny.toml" and record["name"] == "tiny"
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    assert record["git_commit"] == head.stdout.strip()
    assert (out / "suite.toml").read_text() == TINY
    readme = (out / "README.md").read_text()
    assert "tiny.toml" in readme
    # Each report's transitions, as the report's own comparison rows have them.
    (survey,) = record["surveys"]
    row = next(x for x in readme.split("### Surveys")[1].splitlines() if x.startswith("| b |"))
    assert f"| {survey['summary']['n_runs']} |" in row
    # Written atomically, yet readable as the report's pages are (not a temporary file's 0600).
    mode = (out / "all" / "index.html").stat().st_mode & 0o777
    for path in (out / "README.md", out / "suite.json", out / "suite.toml", cwd / survey["file"]):
        assert path.stat().st_mode & 0o777 == mode, path
    for report in record["reports"]:
        assert f"### {report['name']} (baseline " in readme
        for row in report["comparison"]:
            line = next(x for x in readme.splitlines() if x.startswith(f"| {row['suite_label']} |"))
            located = (row.get("transition") or {}).get("kind", "point") == "point"
            if row["status"] == "ok" and located:
                assert f"{row['params_p80']:,.0f}" in line
            elif row["status"] == "ok":  # a transition the runs do not locate is said as a bound
                assert "not located" in line


def test_git_state_ignores_the_suites_own_reports_folder(tmp_path):
    # A committed report (reports/cpu/) is rewritten by every run: that alone is not "dirty".
    from threshold.suite.run import git_state

    def git(*args):
        subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True)

    (tmp_path / "pkg").mkdir()
    (tmp_path / "reports" / "cpu").mkdir(parents=True)
    (tmp_path / "pkg" / "code.py").write_text("x = 1\n")
    (tmp_path / "reports" / "cpu" / "README.md").write_text("old\n")
    git("init", "-q")
    git("add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "one")
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=tmp_path, capture_output=True,
                          text=True).stdout.strip()  # fmt: skip
    reports = tmp_path / "reports" / "cpu"
    (reports / "README.md").write_text("new\n")
    assert git_state(tmp_path / "pkg", ignore=reports) == (head, False)
    assert git_state(tmp_path / "pkg") == (head, True)
    (tmp_path / "pkg" / "code.py").write_text("x = 2\n")
    assert git_state(tmp_path / "pkg", ignore=reports) == (head, True)
    assert git_state(tmp_path.parent) == ("unknown", False)  # not a checkout


def test_second_run_trains_nothing_and_rewrites_no_result(tiny_runs):
    """The second run of a finished suite does nothing it did before: no trial, no run, and the
    files of its transfers, analyses and surveys kept as the first run left them (how fast it
    is, is not this test's: the machine may be loaded)."""
    _, (_, second), (files_1, files_2), (before, after) = tiny_runs
    assert after == before  # no trial added, retried or failed
    assert not any(s["ran"] for s in second["studies"])
    assert all(s["status"] == "done (budget)" for s in second["studies"])
    assert not second["transfers"][0]["ran"]
    assert not any(t["ran"] for a in second["analyses"] for t in a["trials"])
    assert [v["ran"] for v in second["surveys"]] == [False]  # the same runs: the file is kept
    # Checkpoints, data cache, transfer, analysis and survey files: kept, none added (the
    # reports are written again from the same studies; SQLite's journal is its own).
    kept = [k for k in files_1 if not k.startswith(("reports/", "s.db"))]
    kept += [k for k in files_1 if k.startswith("reports/tiny/surveys/")]
    assert any(k.startswith("artifacts/") for k in kept) and "reports/tiny/surveys/b.json" in kept
    assert {k: files_2.get(k) for k in kept} == {k: files_1[k] for k in kept}
    assert sorted(files_2) == sorted(files_1)


def test_dry_run_writes_nothing(tiny_runs, tmp_path, cli):
    cwd, _, _, (_, counts) = tiny_runs
    # On the finished suite: the plan says done, and the storage is left as it was.
    with sqlite3.connect(cwd / "s.db") as con:
        rows = list(con.iterdump())
    before = sorted(p.name for p in cwd.rglob("*") if ".tmp" not in p.name)
    proc = cli(["run", "tiny.toml", "--dry-run", "--json"], cwd)  # in this process: no workers
    assert proc.exit_code == 0, proc.stderr
    planned = json.loads(proc.stdout)
    assert [s["status"] for s in planned["studies"]] == ["done (budget)"] * 2
    assert planned["transfers"][0]["done"] and planned["storage_exists"]
    with sqlite3.connect(cwd / "s.db") as con:
        assert list(con.iterdump()) == rows
    assert sorted(p.name for p in cwd.rglob("*") if ".tmp" not in p.name) == before
    assert trial_counts(f"sqlite:///{cwd}/s.db") == counts
    # In a fresh folder: no storage, cache, report or study folder appears.
    (tmp_path / "tiny.toml").write_text(TINY)
    proc = cli(["run", "tiny.toml", "--dry-run"], tmp_path, COLUMNS="200")
    assert proc.exit_code == 0, proc.stderr
    assert "new" in proc.stdout and "does not exist yet" in proc.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tiny.toml"]


def test_workers_0_makes_the_studies_and_names_the_worker_that_trains_them(tmp_path, cli):
    """Issue 69, a suite on a cluster: `run --workers 0` writes the suite's studies and runs
    nothing else (no training, transfer, analysis or report); the one worker command it names,
    run as said, trains both studies to their budget."""
    (tmp_path / "tiny.toml").write_text(TINY.replace("steps = 60", "steps = 20"))
    made = cli(["run", "tiny.toml", "--workers", "0"])
    assert made.exit_code == 0, made.stderr
    names = [line.split()[2].rstrip(",") for line in made.stdout.strip().splitlines()]
    assert made.stdout.splitlines() == [
        f"a: study {names[0]}, to continue, 0 runs",
        f"b: study {names[1]}, to continue, 0 runs",
    ]
    files = sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith("s.db-"))
    assert files == ["s.db", "tiny.toml"]  # and SQLite's journal: no cache, transfer or report
    assert {s.study_name for s in optuna.get_all_study_summaries("sqlite:///s.db")} == set(names)
    (line,) = made.stderr.strip().splitlines()
    command = shlex.split(line.split("`")[1])
    assert command == ["threshold", "worker", "--study", names[0], "--study", names[1],
                       "--storage", "sqlite:///s.db"]  # fmt: skip
    ran = cli([*command[1:], "--device", "cpu", "--heartbeat", "2"])
    assert ran.exit_code == 0, ran.stderr
    assert trial_counts("sqlite:///s.db") == {name: {"COMPLETE": 3} for name in names}


def test_a_pinned_name_gives_a_stopped_study_more_runs(tiny_runs, tmp_path, cli):
    """A [[study]]'s ``name`` keeps it on its stored study when its budget is raised (the name
    derived from the settings would change with it): the plan says it goes on."""
    cwd, (first, _), _, _ = tiny_runs
    with sqlite3.connect(cwd / "s.db") as src, sqlite3.connect(tmp_path / "s.db") as copy:
        src.backup(copy)
    a = first["studies"][0]["study"]
    for pin, study, status in (("", None, "new"), (f'name = "{a}"\n', a, "to continue")):
        text = TINY.replace('label = "a"\n', f'label = "a"\n{pin}budget = 4\n', 1)
        (tmp_path / "tiny.toml").write_text(text)
        proc = cli(["run", "tiny.toml", "--dry-run", "--json"], tmp_path)
        assert proc.exit_code == 0, proc.stderr
        planned = json.loads(proc.stdout)["studies"]
        assert planned[0]["status"] == status and planned[1]["status"] == "done (budget)"
        assert study is None or planned[0]["study"] == study


def test_sigterm_stops_workers_and_the_next_run_continues(tmp_path, in_process):
    """SIGTERM mid-study: exit 143 and the workers stop; run again and the study finishes its
    budget, nothing left running."""
    text = TINY.replace("steps = 60", "steps = 150").replace("d_hi = 16", "d_hi = 8")
    text = text.split('[[study]]\nlabel = "b"')[0].split("[[transfer]]")[0]
    text = text.replace('baseline = "a"\n', "")
    (tmp_path / "one.toml").write_text(text)
    url = f"sqlite:///{tmp_path}/s.db"
    held = tmp_path / "held"  # the worker stops mid-run in its second trial: see hold_env
    env = dict(os.environ, THRESHOLD_CACHE=str(tmp_path / "cache"), **hold_env(held))
    proc = subprocess.Popen(
        [sys.executable, "-m", "threshold", "run", "one.toml"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for_hold(held, proc, timeout=300)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 143, err  # 128 + SIGTERM
    assert "run `threshold run one.toml` again to resume" in err
    (counts,) = trial_counts(url).values()
    # The interrupted trial is marked failed; only when SIGTERM lands while its worker is still
    # creating it (Optuna's ask, before the objective runs) is it left running, without a
    # heartbeat, to be found stale and retried by the next run.
    assert counts.get("FAIL", 0) + counts.get("RUNNING", 0) >= 1 and counts.get("RUNNING", 0) <= 1
    again = in_process(["run", "one.toml", "--json"], tmp_path)  # its workers in their own
    assert again.exit_code == 0, (again.stderr, again.exception)
    (study,) = json.loads(again.stdout)["studies"]
    assert study["ran"] and study["n_runs"] >= 3 and study["done"]
    study_obj = optuna.load_study(study_name=study["study"], storage=url)
    states = [t.state for t in study_obj.trials]
    assert TrialState.RUNNING not in states and TrialState.WAITING not in states


def test_trials_at_once_key_sets_the_trials_a_worker_trains_at_once(tmp_path):
    path = tmp_path / "s.toml"
    unset = parse_suite(GOOD, path).execution  # by the device: one on the CPU, 8 on a GPU
    assert unset.trials_at_once is None and unset.trials_on("cpu") == 1
    assert unset.trials_on("cuda") == GPU_TRIALS_AT_ONCE
    batched = parse_suite(GOOD.replace('name = "s"', 'name = "s"\ntrials_at_once = 8'), path)
    assert batched.execution.trials_at_once == 8
    plain = parse_suite(GOOD, path)
    assert [s.name for s in batched.studies] == [s.name for s in plain.studies]  # not a setting
