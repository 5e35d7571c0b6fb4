"""Objective studies: anyone's ``objective(size, seed)`` searched by the same policy, posterior
and stop as the testbeds' studies, in this process or in workers that import it by its path,
from Python, from the shell and from the user's own ask-and-tell or Optuna loop."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
import synthetic_objectives as synth
from typer.testing import CliRunner

import threshold
from threshold.cli import app
from threshold.errors import ConfigError
from threshold.search.objective import ObjectiveSettings, parse_sizes
from threshold.search.record import read_study
from threshold.search.sampler import TransitionSampler

HERE = Path(__file__).parent
BIMODAL, RAMP = "synthetic_objectives:bimodal", "synthetic_objectives:ramp"


@pytest.fixture(autouse=True)
def importable(monkeypatch):
    """Worker processes import the synthetic objectives from this folder."""
    path = os.environ.get("PYTHONPATH", "")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (str(HERE), path) if p))


def _url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'studies.db'}"


def test_sizes_and_settings_are_checked_once():
    assert parse_sizes("4..8") == (4, 5, 6, 7, 8)
    assert parse_sizes("8, 4,16") == (4, 8, 16)
    for bad in ("4..5", "a..b", "0,1,2"):
        with pytest.raises(ConfigError):
            parse_sizes(bad)
    with pytest.raises(ConfigError, match="chance"):
        ObjectiveSettings.make(BIMODAL, "4..64", chance=1.5)
    with pytest.raises(ConfigError, match="bracket"):
        ObjectiveSettings.make(BIMODAL, "4,8,16,32", chance=0.1, bracket=(5, 16))
    with pytest.raises(ConfigError, match="budget"):  # SearchConfig's rule, not a copy of it
        ObjectiveSettings.make(BIMODAL, "4..64", chance=0.1, budget=2)
    with pytest.raises(ConfigError, match="params"):
        ObjectiveSettings.make(BIMODAL, "4..6", [10, 20], chance=0.1)


def test_find_transition_locates_a_known_transition_and_resumes(tmp_path):
    """In this process, by function: located, its interval around the truth; the same call
    again runs nothing and gives the same answer; status and the record read it."""
    url = _url(tmp_path)
    first = threshold.find_transition(
        synth.bimodal, "4..256", chance=synth.CHANCE, storage=url, budget=12, seed=2
    )
    assert first["located"]
    lo, hi = first["interval_params"]
    assert lo <= synth.BIMODAL_SIZE80 <= hi
    again = threshold.find_transition(
        synth.bimodal, "4..256", chance=synth.CHANCE, storage=url, budget=12, seed=2
    )
    assert again["study"] == first["study"] and again["n_runs"] == first["n_runs"]
    assert again["interval_params"] == first["interval_params"]
    view = read_study(url, first["study"])
    assert isinstance(view.settings, ObjectiveSettings) and view.settings.objective == BIMODAL
    assert len(view.completed) == first["n_runs"]  # nothing ran twice
    assert len({(r.d_model, r.seed) for r in view.completed}) == len(view.completed)

    out = CliRunner().invoke(app, ["status", "--storage", url])
    assert out.exit_code == 0, out.output
    assert first["study"] in out.output and "size" in out.output


def test_metrics_are_recorded_and_a_bad_answer_is_one_line(tmp_path):
    url = _url(tmp_path)
    found = threshold.find_transition(RAMP, "4..128", chance=0.1, storage=url, budget=5)
    runs = read_study(url, found["study"]).completed
    assert runs and all("noise_free" in r.metrics for r in runs)
    said = CliRunner().invoke(app, ["analyze", found["study"], "--storage", url])
    assert said.exit_code == 2 and "do not apply" in said.output  # one line, not a traceback

    def broken(size, seed):
        return {"acc": 0.5}

    with pytest.raises(threshold.ThresholdError, match="return an accuracy"):
        threshold.find_transition(broken, "4..128", chance=0.1, storage=url)


def _shell_loop(study: str, url: str, tmp_path: Path) -> None:
    """The user's own launcher: ask, run the objective from its own process, tell."""
    script = tmp_path / "loop.sh"
    script.write_text(
        "set -e\n"
        "while true; do\n"
        f"  next=$(threshold ask --study {study} --storage {url})\n"
        '  [ -z "$next" ] && break\n'
        '  read trial size seed <<< "$next"\n'
        '  acc=$(python -c "import synthetic_objectives as s; '
        'print(s.bimodal($size, $seed))")\n'
        f'  threshold tell --study {study} --storage {url} --trial "$trial" --accuracy "$acc"\n'
        "done\n"
    )
    subprocess.run(["bash", str(script)], check=True, capture_output=True, env=os.environ)


@pytest.mark.slow  # 12 runs of two command lines each: 3-4 minutes on a loaded 2-core machine
def test_an_ask_and_tell_loop_from_the_shell_gives_finds_answer(tmp_path):
    """A study made with --workers 0, run by a shell script's ask/run/tell loop, reaches the
    answer `find` reaches on the same objective and seeds, run for run."""
    by_find = _url(tmp_path)
    common = ["--objective", BIMODAL, "--sizes", "4..256", "--chance", "0.1", "--budget", "12"]
    found = CliRunner().invoke(app, ["find", *common, "--storage", by_find, "--json"])
    assert found.exit_code == 0, found.output
    want = json.loads(found.output.strip().splitlines()[-1])

    by_hand = f"sqlite:///{tmp_path / 'by_hand.db'}"
    made = CliRunner().invoke(app, ["find", *common, "--storage", by_hand, "--workers", "0"])
    assert made.exit_code == 0, made.output
    _shell_loop(want["study"], by_hand, tmp_path)
    got = read_study(by_hand, want["study"])
    ran = read_study(by_find, want["study"])
    assert [(r.d_model, r.seed, r.value) for r in got.completed] == [
        (r.d_model, r.seed, r.value) for r in ran.completed
    ]
    assert got.estimate.to_dict() == ran.estimate.to_dict()
    assert got.stop.stopped and not got.n_running


def test_ask_several_at_once_spreads_them_and_tell_frees_a_failed_slot(tmp_path):
    url = _url(tmp_path)
    made = threshold.find_transition(BIMODAL, "4..256", chance=0.1, storage=url, workers=0)
    asked = threshold.ask(made["study"], url, n=3)["runs"]
    assert [r["size"] for r in asked] == [256, 4, 32]  # the bracket, as find runs it
    threshold.tell(made["study"], asked[0]["trial"], failed=True, storage=url)
    with pytest.raises(threshold.ThresholdError, match="not running"):
        threshold.tell(made["study"], asked[0]["trial"], 0.5, storage=url)
    for run in asked[1:]:
        threshold.tell(made["study"], run["trial"], synth.bimodal(run["size"], run["seed"]), url)
    again = threshold.ask(made["study"], url)["runs"]
    assert again[0]["size"] == 256  # the failed one's size comes again


def test_our_sampler_in_a_plain_optuna_study():
    """The user's own Optuna loop (docs/your-own-experiment.md): suggest, optimize, stop."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    sampler = TransitionSampler.for_objective("bimodal", "4..256", chance=0.1, budget=12)
    study = optuna.create_study(sampler=sampler, direction="maximize")

    def objective(trial):
        size, seed = sampler.suggest(trial)
        return synth.bimodal(size, seed)

    study.optimize(objective, n_trials=100, callbacks=[sampler.stop])
    assert len(study.trials) <= 12  # stopped by the policy, not by n_trials
    answer = sampler.answer(study)
    assert answer["n_runs"] == sum(t.value is not None for t in study.trials)
    assert answer["answer"].startswith(("80% point size", "size >", "size <="))


def _wait_for(flag: Path, proc: subprocess.Popen, limit_s: float = 300) -> None:
    """Until the objective stalls at ``flag`` (the study made, its first run begun)."""
    deadline = time.monotonic() + limit_s  # imports and the study's creation, on a busy machine
    while not flag.exists():
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.1)


def test_interrupted_run_is_run_again_on_resume(tmp_path, monkeypatch):
    """Ctrl-C while the objective runs: the trial fails and is put back with its size and
    seed; the same call again finishes the study with nothing left running."""
    flag = tmp_path / "stall"
    monkeypatch.setenv("SYNTHETIC_STALL", str(flag))
    url = _url(tmp_path)
    code = (
        "import threshold\n"
        f"threshold.find_transition('synthetic_objectives:stalling', '4..256', chance=0.1, "
        f"storage={url!r}, budget=6)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], env=os.environ)
    _wait_for(flag, proc)
    proc.send_signal(2)
    proc.wait(timeout=60)
    (tmp_path / "stall.done").touch()
    flag.unlink()
    views = threshold.find_transition(
        "synthetic_objectives:stalling", "4..256", chance=0.1, storage=url, budget=6
    )
    view = read_study(url, views["study"])
    assert not view.n_running and len(view.completed) == 6
    failed = [r for r in view.runs if r.state == "FAIL"]
    assert len(failed) == 1 and (failed[0].d_model, failed[0].seed) == (
        view.completed[0].d_model,
        view.completed[0].seed,
    )


@pytest.mark.slow  # the stale heartbeat and the retry: half a minute
def test_a_killed_run_is_retried_with_its_size_and_seed(tmp_path, monkeypatch):
    """A worker killed outright (SIGKILL) mid-run leaves its trial running; its heartbeats stop,
    and the next search fails it and runs it again, with the same size and seed."""
    flag = tmp_path / "stall"
    monkeypatch.setenv("SYNTHETIC_STALL", str(flag))
    url = _url(tmp_path)
    args = {"chance": 0.1, "storage": url, "budget": 6, "heartbeat_s": 1}
    call = f"threshold.find_transition('synthetic_objectives:stalling', '4..256', **{args!r})"
    proc = subprocess.Popen([sys.executable, "-c", f"import threshold\n{call}"], env=os.environ)
    _wait_for(flag, proc)
    proc.kill()
    proc.wait(timeout=60)
    (tmp_path / "stall.done").touch()
    flag.unlink()
    time.sleep(4)  # three missed heartbeats of 1 s: the trial is stale
    found = threshold.find_transition("synthetic_objectives:stalling", "4..256", **args)
    view = read_study(url, found["study"])
    assert not view.n_running and len(view.completed) == 6
    (failed,) = [r for r in view.runs if r.state == "FAIL"]
    first = view.completed[0]
    assert (failed.d_model, failed.seed) == (first.d_model, first.seed)


def test_two_workers_on_postgresql_finish_without_duplicates(postgres_url):
    """Two worker processes importing the objective by its path share one PostgreSQL study:
    every replicate at a size has its own seed, and the study stops once."""
    found = threshold.find_transition(
        BIMODAL, "4..256", chance=0.1, storage=postgres_url, workers=2, budget=8, seed=7,
        oversubscribe=True,
    )  # fmt: skip
    view = read_study(postgres_url, found["study"])
    done = view.completed
    assert len(done) == found["n_runs"] and not view.n_running
    assert len({(r.d_model, r.seed) for r in done}) == len(done)
    assert len({(r.d_model, r.replicate) for r in done}) == len(done)
    assert len(done) <= 8


def _coverage(objective: str, truth: float, seeds: int, tmp_path: Path) -> float:
    url = _url(tmp_path)
    covered = 0
    for seed in range(seeds):
        found = threshold.find_transition(
            objective, "4..256", chance=0.1, storage=url, budget=20, seed=seed
        )
        lo, hi = found["interval_params"]
        covered += lo <= truth <= hi
    return covered / seeds


@pytest.mark.slow
@pytest.mark.parametrize(
    ("objective", "truth"), [(BIMODAL, synth.BIMODAL_SIZE80), (RAMP, synth.RAMP_SIZE80)]
)
def test_coverage_of_the_90_interval_over_20_studies(objective, truth, tmp_path):
    """The 90% interval holds the known 80% point in at least 85% of 20 studies: bimodal
    seeds (as the posterior assumes) and a graded ramp it does not assume."""
    assert _coverage(objective, truth, 20, tmp_path) >= 0.85


@pytest.mark.slow  # two reports drawn: about a minute on a loaded 2-core machine
def test_report_reads_an_objective_study_and_renders_it_again(tmp_path):
    """`threshold report`: the objective by its size axis, its settings, the analyses said not
    to apply; `--from` its results.json renders the same studies again without the storage."""
    url = _url(tmp_path)
    found = threshold.find_transition(
        BIMODAL, "4..256", chance=0.1, storage=url, budget=6, size_name="hidden width"
    )
    out = tmp_path / "report"
    done = CliRunner().invoke(app, ["report", "--storage", url, "-o", str(out)])
    assert done.exit_code == 0, done.output
    summary = (out / "summary.md").read_text()
    assert f"{BIMODAL} by hidden width" in summary and "do not apply" in summary
    (study,) = json.loads((out / "results.json").read_text())["studies"]
    assert study["row"]["name"] == found["study"]
    again = tmp_path / "again"
    done = CliRunner().invoke(
        app, ["report", "--from", str(out / "results.json"), "-o", str(again)]
    )
    assert done.exit_code == 0, done.output
    (study_again,) = json.loads((again / "results.json").read_text())["studies"]
    assert study_again == study
