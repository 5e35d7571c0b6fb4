"""`threshold cluster slurm`: the job array's script, and that script run by a real one-node
SLURM cluster whose workers share a PostgreSQL study (docs/cluster.md)."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys

import optuna
import pytest
from optuna.trial import TrialState
from typer import Context
from typer.main import get_command

from threshold.cli import app
from threshold.config import GPU_TRIALS_AT_ONCE

PG = "postgresql+psycopg://me@db.example.org:5432/threshold"


def script(cli, *args: str) -> str:
    result = cli(["cluster", "slurm", *args])
    assert result.exit_code == 0, result.output
    return result.stdout


def directives(text: str) -> dict[str, str]:
    pairs = [line.removeprefix("#SBATCH --").split("=", 1) for line in text.splitlines()
             if line.startswith("#SBATCH")]  # fmt: skip
    return dict(pairs)


def test_the_script_is_a_job_array_of_one_gpu_worker_each(cli):
    text = script(cli, "--study", "s 1", "--storage", PG, "--workers", "8",
                  "--trials-at-once", "16", "--partition", "gpu", "--setup", "module load python",
                  "--setup", "source ~/venv/bin/activate")  # fmt: skip
    assert text.startswith("#!/bin/bash\n")
    got = directives(text)
    assert got["array"] == "0-7" and got["ntasks"] == "1" and got["gres"] == "gpu:1"
    assert got["partition"] == "gpu" and got["job-name"] == "threshold-s_1"
    assert "account" not in got
    lines = text.splitlines()
    assert lines.index("module load python") < lines.index("source ~/venv/bin/activate")
    assert lines[-1].startswith("exec ")
    worker = shlex.split(lines[-1])[1:]
    assert worker[:4] == ["threshold", "worker", "--study", "s 1"]
    options = dict(zip(worker[2::2], worker[3::2], strict=True))
    assert options["--storage"] == PG and options["--device"] == "cuda"
    assert options["--trials-at-once"] == "16"
    # Every option the script passes is one `threshold worker` has (a renamed option fails here).
    group = get_command(app)
    group.get_command(Context(group), "worker").make_context("worker", worker[2:])


def test_a_script_of_several_studies_starts_one_worker_of_all_of_them(cli):
    """Issue 69: a suite's studies on a cluster. Each array task's worker joins every study, to
    train their runnable trials together; the job's name is the first study and how many more,
    within SLURM's 64 characters."""
    first = "a" * 70
    text = script(cli, "--study", first, "--study", "b 2", "--storage", PG, "--workers", "3")
    worker = shlex.split(text.splitlines()[-1])[1:]
    assert worker[:6] == ["threshold", "worker", "--study", first, "--study", "b 2"]
    assert directives(text)["job-name"] == f"threshold-{first}"[:62] + "+1"
    assert f"# threshold: 3 identical workers on 2 studies ({first!r} and 1 more)," in text
    group = get_command(app)  # every option passed is still one `threshold worker` has
    context = group.get_command(Context(group), "worker").make_context("worker", worker[2:])
    assert context.params["study"] == [first, "b 2"]


def test_trials_at_once_left_out_is_each_workers_devices_default(cli):
    """A GPU worker fills its card by default (GPU_TRIALS_AT_ONCE trials at once), so a script
    that was not told passes no --trials-at-once and says what the worker will take."""
    text = script(cli, "--study", "s", "--storage", PG, "--workers", "2")
    assert "--trials-at-once" not in text.splitlines()[-1]
    assert f"# {GPU_TRIALS_AT_ONCE} trial(s) at once each" in text


def test_a_cpu_array_asks_no_gpu_and_storage_may_come_from_the_environment(cli):
    text = script(cli, "--study", "s", "--device", "cpu", "--workers", "1", "--max-trials", "3")
    got = directives(text)
    assert got["array"] == "0-0" and "gres" not in got
    worker = shlex.split(text.splitlines()[-1])
    assert "--storage" not in worker and "$THRESHOLD_STORAGE" in text
    assert worker[worker.index("--device") + 1] == "cpu"
    assert worker[worker.index("--max-trials") + 1] == "3"


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--storage", "sqlite:///studies/threshold.db"], "SQLite cannot be shared"),
        (["--workers", "0"], "--workers 0"),
        (["--trials-at-once", "0"], "--trials-at-once 0"),
        (["--study", " "], "study name ' ' is empty"),
    ],
)
def test_bad_settings_are_one_line(tmp_path, cli, args, named):
    base = {"--study": "s", "--storage": PG}
    for flag, value in zip(args[::2], args[1::2], strict=True):
        base[flag] = value
    out = tmp_path / "job.sh"
    result = cli(["cluster", "slurm", *[x for kv in base.items() for x in kv], "-o", out])
    assert result.exit_code == 2
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("error: ") and named in line
    assert not out.exists()


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--study", "s", "--study", "t", "--study", "s"], "--study 's' is given twice: name"),
        (["--study", "s", "--study", "t", "--max-trials", "3"], "--max-trials 3 is for one"),
    ],
)
def test_studies_a_worker_would_refuse_are_refused_in_the_script(tmp_path, cli, args, named):
    """What each array task's worker would refuse, refused before a script is written."""
    out = tmp_path / "job.sh"
    result = cli(["cluster", "slurm", *args, "--storage", PG, "-o", out])
    assert result.exit_code == 2
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("error: ") and named in line
    assert not out.exists()


def test_a_password_in_the_storage_url_is_never_written(tmp_path, cli):
    """Issue 62: a script (and SLURM's records of it) would keep the password in plain text; the
    URL is refused, its password hidden in the line too, with where a password belongs."""
    out = tmp_path / "job.sh"
    url = "postgresql+psycopg://u:s3cret@db.example.org:5432/thr"
    result = cli(["cluster", "slurm", "--study", "s1", "--storage", url, "--workers", "8",
                  "-o", out])  # fmt: skip
    assert result.exit_code == 2 and not out.exists()
    (line,) = result.stderr.strip().splitlines()
    assert "s3cret" not in line and "postgresql+psycopg://u:***@db.example.org:5432/thr" in line
    assert "~/.pgpass" in line and "THRESHOLD_STORAGE" in line
    assert "--storage postgresql+psycopg://u@db.example.org:5432/thr" in line
    # without the password (it lives in ~/.pgpass), the same URL is written as given
    assert "--storage postgresql+psycopg://u@db.example.org:5432/thr" in script(
        cli, "--study", "s1", "--storage", url.replace(":s3cret", "")
    )


def test_a_slurm_array_runs_a_postgres_study(slurm_cluster, postgres_url, tmp_path, cli):
    """The recipe end to end: the study made with `find --workers 0` (nothing trains), the script
    written, `sbatch --wait`: two array tasks, one worker each, finish the budget."""
    env = dict(slurm_cluster, THRESHOLD_CACHE=str(tmp_path / "cache"),
               THRESHOLD_ARTIFACTS=str(tmp_path / "art"))  # fmt: skip
    name, budget = "slurm-array", 4
    made = cli(["find", "--tasks", "max", "--mod", "5", "--n-train", "2000", "--n-test", "100",
                "--d-lo", "4", "--d-hi", "16", "--steps", "40", "--budget", budget,
                "--heartbeat", "2", "--storage", postgres_url, "--study", name, "--workers", "0",
                "--json"])  # fmt: skip
    assert made.exit_code == 0, made.stderr
    assert json.loads(made.stdout)["n_trials"] == 0
    job = tmp_path / "job.sh"
    written = cli(["cluster", "slurm", "--study", name, "--storage", postgres_url, "--workers", "2",
                   "--device", "cpu", "--cpus", "1", "--mem", "500M", "--time", "10",
                   "--heartbeat", "2", "--command", f"{shlex.quote(sys.executable)} -m threshold",
                   "-o", job])  # fmt: skip
    assert written.exit_code == 0, written.stderr
    run = subprocess.run(["sbatch", "--wait", str(job)], capture_output=True, text=True,
                         env=env, cwd=tmp_path, timeout=300)  # fmt: skip
    logs = sorted(tmp_path.glob(f"threshold-{name}-*_*.out"))
    assert run.returncode == 0, run.stderr + "".join(p.read_text() for p in logs)
    assert [p.name.rsplit("_", 1)[1] for p in logs] == ["0.out", "1.out"]
    trials = optuna.load_study(study_name=name, storage=postgres_url).get_trials()
    done = [t for t in trials if t.state == TrialState.COMPLETE]
    assert len(done) == budget
    assert {t.user_attrs["worker"].split(":")[0] for t in done} == {os.uname().nodename}
