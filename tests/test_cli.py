import json
import os
import re
import subprocess
import sys

import pytest

from threshold.cli import train_cmds
from threshold.train.checkpoint import load_checkpoint


def run(args, cache, check=False):
    env = {**os.environ, "THRESHOLD_CACHE": str(cache), "COLUMNS": "120"}
    proc = subprocess.run(
        [sys.executable, "-m", "threshold", *args], capture_output=True, text=True, env=env
    )
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc


TINY = ["--mod", "5", "--n-train", "2000", "--n-test", "100"]


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["train", "--tasks", "max,foo"], "'foo'"),
        (["train", "--tasks", "max", "--mod", "1"], "modulus 1"),
        (["train", "--tasks", "max", "--mod", "-4"], "modulus -4"),
        (["train", "--tasks", "mul", "--mod", "10"], "'mul'"),
        (["train", "--testbed", "perm", "--tasks", "add", "--mod", "4"], "'add'"),
        (["train", "--testbed", "perm", "--tasks", "mul", "--mod", "9"], "degree 9"),
        (["train", "--testbed", "graph"], "'graph'"),
        (["train", "--d-model", "0"], "d_model 0"),
        (["train", "--steps", "-5"], "max_steps -5"),
        (["train", "--arity", "3-2"], "arity 3-2"),
        (["train", "--tasks", "max,add", "--measure", "med"], "'med'"),
        (["train", "--tasks", "max,max"], "repeat"),
        (["train", "--tasks", ""], "empty"),
        (["data", "--split", "dev"], "'dev'"),
        (["bench", "train", "--d-models", "16,x"], "'16,x'"),
        (["bench", "search", "--precision", "1"], "precision 1.0"),
        (["bench", "search", "--set", "nope=1"], "unknown setting nope"),
        (["bench", "search", "--set", "size_sd"], "NAME=VALUE"),
        (["bench", "search", "--read-set", "size_sd"], "--read-set 'size_sd'"),
        (["bench", "search", "--methods", "--read-set", "size_sd=0"], "leave out --methods"),
        # The parser's own errors (issue 68): one line too, not a boxed panel.
        (["train", "--steps", "1e30"], "Invalid value for '--steps'"),
        (["train", "--nope"], "No such option: --nope"),
        (["data", "--n"], "Option '--n' requires an argument"),
        (["worker"], "Missing option '--study'"),
        (["cluster", "slurm"], "Missing option '--study'"),
        (["nope"], "No such command 'nope'"),
        (["bench", "nope"], "No such command 'nope'. (see `threshold bench --help`)"),
        (["train", "--no-decay-all"], "No such option"),
        (["find", "--workers", "two"], "Invalid value for '--workers'"),
        (["data", "extra"], "unexpected extra argument(s) (extra) (see `threshold data --help`)"),
    ],
)
def test_bad_input_is_one_line_exit_2_nothing_written(tmp_path, cli, args, named):
    """In this process (the ``cli`` fixture); the test after it checks the same contract through
    a real process."""
    out = tmp_path / "out.ckpt"
    extra = ["--out", str(out)] if args[0] == "train" else []
    result = cli([*args, *extra], COLUMNS="120")
    assert result.exit_code == 2, (result.output, result.exception)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert named in lines[0]
    assert not out.exists()
    assert not (tmp_path / "cache").exists()


def test_bad_checkpoint_path_is_refused(tmp_path):
    proc = run(["train", *TINY, "--out", str(tmp_path)], tmp_path / "cache")
    assert proc.returncode == 2 and "is a directory" in proc.stderr
    (line,) = proc.stderr.strip().splitlines()  # one line from a real process, too
    assert line.startswith("error: ")
    assert not (tmp_path / "cache").exists()


def test_out_onto_earlier_checkpoints_is_refused_before_training_unless_forced(tmp_path, cli):
    out = tmp_path / "models"
    out.mkdir()
    (out / "d8-seed0.ckpt").write_bytes(b"an earlier, longer run")
    args = ["train", *TINY, "--d-model", "8,12", "--steps", "4", "--eval-every", "2"]
    proc = run([*args, "--out", str(out)], tmp_path / "cache")
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        f"error: --out folder {str(out)!r} exists and is not empty: choose another --out, or pass"
        " --force to write over it"
    ]
    assert (out / "d8-seed0.ckpt").read_bytes() == b"an earlier, longer run"
    assert not (tmp_path / "cache").exists()  # refused before the data was made
    forced = cli([*args, "--out", out, "--force"])  # in this process: the refusal was a real one
    assert forced.exit_code == 0, forced.stderr
    assert load_checkpoint(out / "d8-seed0.ckpt").model_config.d_model == 8


def test_train_json_and_checkpoint(tmp_path, cli):
    out = tmp_path / "m.ckpt"
    proc = cli(
        [
            "train",
            "--tasks",
            "max,add",
            *TINY,
            "--d-model",
            "8",
            "--steps",
            "30",
            "--eval-every",
            "15",
            "--out",
            str(out),
            "--json",
        ]
    )
    assert proc.exit_code == 0, proc.stderr
    report = json.loads(proc.stdout)
    for key in (
        "params_total",
        "params_non_embedding",
        "accuracy",
        "strict_accuracy",
        "steps",
        "stop_reason",
        "wall_s",
    ):
        assert key in report
    assert set(report["accuracy"]) == {"max", "add"}
    assert report["measure"] == "add"
    assert report["steps"] == 30 and report["stop_reason"] == "max_steps"
    ckpt = load_checkpoint(out)
    assert ckpt.model_config.d_model == 8
    assert ckpt.metrics["accuracy"] == report["accuracy"]
    assert report["params_total"] == sum(v.numel() for v in ckpt.state_dict.values())


def test_train_lists_as_one_batch_one_object_per_model(tmp_path, cli):
    """`--d-model 8,16 --seeds 0,1`: four models in one batched run, one JSON line each, and a
    checkpoint each that `threshold analyze --checkpoint` reads like any other."""
    out = tmp_path / "models"
    args = ["train", *TINY, "--d-model", "8,16", "--seeds", "0,1", "--steps", "40"]
    args += ["--eval-every", "20", "--device", "cpu", "--out", str(out), "--json"]
    proc = run(args, tmp_path / "cache", check=True)
    reports = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [(r["d_model"], r["seed"]) for r in reports] == [(8, 0), (8, 1), (16, 0), (16, 1)]
    assert all(r["steps"] == 40 and r["device"] == "cpu" for r in reports)
    assert all([h["step"] for h in r["history"]] == [20, 40] for r in reports)  # its curve
    assert reports[0]["params_total"] < reports[2]["params_total"]
    # progress goes to stderr, --json or not; to a pipe as lines, each run's last step among them
    done = [line for line in proc.stderr.splitlines() if " step 40/40 " in line]
    assert sorted(line.split(" step")[0] for line in done) == [
        "d=16 seed 0",
        "d=16 seed 1",
        "d=8 seed 0",
        "d=8 seed 1",
    ], proc.stderr
    for r in reports:
        ckpt = load_checkpoint(r["checkpoint"])
        assert ckpt.model_config.d_model == r["d_model"]
        assert ckpt.train_config["seed"] == r["seed"]
        assert ckpt.metrics["accuracy"] == r["accuracy"]
    args = ["analyze", "--checkpoint", reports[3]["checkpoint"], "--out", str(tmp_path / "fig")]
    analysis = cli([*args, "--json"])  # in this process: the checkpoint came from a real one
    assert analysis.exit_code == 0, analysis.stderr
    assert json.loads(analysis.stdout)


def test_train_prints_a_table(cli):
    proc = cli(["train", *TINY, "--d-model", "8", "--steps", "20", "--eval-every", "10"],
               COLUMNS="120")  # fmt: skip
    assert proc.exit_code == 0, proc.stderr
    assert "accuracy (greedy)" in proc.stdout
    assert "max (measured)" in proc.stdout
    assert "params" in proc.stdout


def test_data_shows_sequences(cli):
    proc = cli(["data", "--tasks", "max,med,add", "--mod", "10", "--n", "5", "--n-train", "500"])
    assert proc.exit_code == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 5
    assert all(line.endswith("<eos>") and "=" in line for line in lines)
    proc = cli(["data", "--tasks", "max,add", *TINY, "--n", "3", "--split", "test", "--json"])
    assert proc.exit_code == 0, proc.stderr
    rows = json.loads(proc.stdout)
    assert [r["op"] for r in rows] == ["max"] * 3 + ["add"] * 3
    for r in rows:
        assert r["text"].startswith(r["prompt"])
        assert r["text"].endswith(f"= {r['answer']} <eos>")


def test_bench_train_json(cli):
    proc = cli(["bench", "train", "--d-models", "8", "--steps", "3", "--mod", "5", "--json"])
    assert proc.exit_code == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert [r["batch_order"] for r in result["train"]] == ["binned", "random"]
    assert all(r["tokens_per_s"] > 0 and r["steps_per_s"] > 0 for r in result["train"])
    assert result["decode"][0]["sequences_per_s"] > 0


def test_bench_train_batched_json(cli):
    args = ["bench", "train", "--batched", "--d-models", "8,16", "--members", "1,2"]
    proc = cli([*args, "--steps", "2", "--mod", "5", "--device", "cpu", "--json"])
    assert proc.exit_code == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert [r["d_model"] for r in result["single"]] == [8, 16]
    rows = [(r["d_models"], r["members"]) for r in result["batched"]]
    assert rows == [([8], 1), ([8], 2), ([16], 1), ([16], 2), ([8, 16], 2)]
    for r in result["batched"]:
        assert r["model_steps_per_s"] > 0 and r["speedup"] > 0 and len(r["ratios"]) == 3
        assert r["memory_estimate"] > 0
    assert "grouped_step_s" in result["batched"][-1]


def _command(name: str):
    """The command ``threshold NAME`` runs (``bench train``: gpu of the group bench), its module
    imported as running it would."""
    import typer
    import typer.main

    from threshold.cli import app

    command = typer.main.get_command(app)
    for word in name.split():
        command = command.get_command(typer.Context(command), word)
    return command


@pytest.mark.parametrize("command", ["train", "find"])
def test_every_recipe_field_is_an_option_that_says_its_default(command):
    """The README's promise: every recipe field can be set where runs are made; an option whose
    default is the recipe's says so in --help (none shows no value)."""
    from threshold.config import MODEL_FIELDS, TRAIN_FIELDS

    params = {p.name: p for p in _command(command).params}
    fields = {"steps" if f == "max_steps" else f for f in (*TRAIN_FIELDS, *MODEL_FIELDS)}
    assert fields <= set(params), sorted(fields - set(params))
    for name in fields:
        assert "default" in params[name].help or params[name].show_default, name


def test_every_registered_command_resolves():
    """Each name of the registry imports its module and finds its function there, and the line
    the listing shows is its docstring's first paragraph: a typo in the registry fails here."""
    from threshold.cli.commands import COMMANDS

    for name, entry in COMMANDS.items():
        command = _command(name)
        assert command.name == name.split()[-1], name
        assert command.params and command.callback is not None, name  # the command, not its line
        first = command.help.split("\n\n")[0]
        assert " ".join(first.split()) == entry.help, name


@pytest.mark.parametrize("args", [["--help"], ["bench", "--help"], ["cluster", "--help"]])
def test_help_lists_the_commands_and_imports_none(args):
    """`threshold --help` is instant: it lists the registry's commands without importing their
    modules, nor torch, Optuna, SciPy or NumPy (read from the process's own -X importtime)."""
    from threshold.cli.commands import COMMANDS

    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "threshold", *args],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "COLUMNS": "200"},
    )
    loaded = {
        line.rsplit("|", 1)[-1].strip()
        for line in proc.stderr.splitlines()
        if line.startswith("import time:")
    }
    heavy = {"torch", "optuna", "scipy", "numpy"} & loaded
    commands = {entry.target.split(":")[0] for entry in COMMANDS.values()} & loaded
    assert not heavy and not commands, (heavy, commands)
    prefix = "" if args == ["--help"] else args[0] + " "
    listed = {n.removeprefix(prefix).split()[0] for n in COMMANDS if n.startswith(prefix)}
    assert listed and all(f" {name} " in proc.stdout for name in listed), proc.stdout
    if args == ["--help"]:  # a newcomer's command first (issue 62: it was eighth)
        first = proc.stdout.split("Commands")[1].splitlines()[1]
        assert first.split()[1] == "find", proc.stdout


def test_bench_search_with_a_changed_setting(cli):
    proc = cli(
        [
            "bench",
            "search",
            *("--studies", "1", "--families", "graded", "--runs", "3"),
            *("--set", "budget=5", "--set", "plateau_lengths=[0.75, 1.5]", "--json"),
            *("--read-set", "plateau_gaps=[]"),
        ]
    )
    assert proc.exit_code == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["overrides"] == {"budget": 5, "plateau_lengths": [0.75, 1.5]}
    assert result["read_overrides"] == {"plateau_gaps": []}
    graded = result["families"]["graded"]
    assert graded["stop"]["median_runs"] <= 5  # the changed budget holds
    # the sampler's three runs, read again by a posterior without plateaus: the same runs
    assert graded["sampler_read_3"]["compute_vs_grid"] == graded["3"]["compute_vs_grid"]
    twice = cli(["bench", "search", "--set", "precision=2.0"])
    assert twice.exit_code != 0 and "use --precision" in twice.stderr


def test_bench_search_states_each_row_against_the_oracle(cli):
    """The families table gives each row's error as a ratio to the shape-known oracle's with as
    many runs, with its interval, and its compute as a ratio."""
    args = ["bench", "search", "--studies", "1", "--families", "graded", "--runs", "3"]
    proc = cli([*args, "--rows", "sampler,oracle", "--set", "budget=4"], COLUMNS="200")
    assert proc.exit_code == 0, proc.stderr
    assert "vs oracle" in proc.stdout and "oracle, shape known" in proc.stdout
    row = next(line for line in proc.stdout.splitlines() if "3, stop off" in line)
    assert re.search(r"\d+\.\d \(\d+\.\d-\d+\.\d\), \d+\.\d", row), row


def test_train_interrupted_continues_from_its_training_state(tmp_path, cli, monkeypatch):
    """With --out each run keeps its training state beside its checkpoint while it trains;
    stopped by an interrupt, the same command again continues from it; the states go once done."""
    real = train_cmds.train_runs

    def stopped_at_25(runs, device, on_progress, **kw):  # the engine, saving at every step
        def progress(i, p):
            on_progress(i, p)
            if p.step >= 25:  # what the SIGINT handler raises (a real signal would leave
                raise KeyboardInterrupt  # this process's interrupt flag set for later tests)

        return real(runs, device, progress, save_every_s=0, **kw)

    out = tmp_path / "models"
    args = ["train", *TINY, "--d-model", "8,12", "--steps", "60", "--eval-every", "20"]
    args += ["--out", out, "--json", "--early-stop", "never"]  # both train on past the cut
    monkeypatch.setattr(train_cmds, "train_runs", stopped_at_25)
    first = cli(args)
    assert first.exit_code == 130, first.stderr
    assert "interrupted: run the same command to continue" in first.stderr
    states = sorted(p.name for p in out.iterdir())
    assert states == ["d12-seed0.ckpt.state", "d8-seed0.ckpt.state"], states
    monkeypatch.setattr(train_cmds, "train_runs", real)
    again = cli(args)  # the folder holds only training states: no --force needed
    assert again.exit_code == 0, again.stderr
    steps = re.findall(r"d=(\d+) seed 0 continues from step (\d+)", again.stderr)
    assert sorted(d for d, _ in steps) == ["12", "8"], again.stderr
    assert all(0 < int(s) < 60 for _, s in steps)
    reports = [json.loads(line) for line in again.stdout.splitlines()]
    assert [r["steps"] for r in reports] == [60, 60]
    assert sorted(p.name for p in out.iterdir()) == ["d12-seed0.ckpt", "d8-seed0.ckpt"]


def test_train_interrupted_before_its_first_save_offers_no_state(tmp_path, cli, monkeypatch):
    """Issue 62: stopped before any training state was saved (the first a minute in), train
    does not offer to continue from one: it says the same command starts again from step 0."""
    real = train_cmds.train_runs

    def stopped_at_5(runs, device, on_progress, **kw):  # the engine, saving once an hour
        def progress(i, p):
            on_progress(i, p)
            if p.step >= 5:
                raise KeyboardInterrupt

        return real(runs, device, progress, save_every_s=3600, **kw)

    out = tmp_path / "models"
    monkeypatch.setattr(train_cmds, "train_runs", stopped_at_5)
    first = cli(["train", *TINY, "--d-model", "8", "--steps", "60", "--eval-every", "5",
                 "--out", out / "m.ckpt"])  # fmt: skip
    assert first.exit_code == 130, first.stderr
    assert "continue from" not in first.stderr
    assert "interrupted before any training state was saved" in first.stderr
    assert "the same command starts again from step 0" in first.stderr
    assert not (out / "m.ckpt.state").exists()
