"""`threshold transfer`, `find --pretrain` and `analyze` as a person uses them, on tiny settings."""

from __future__ import annotations

import json
import shutil
import sqlite3
from types import SimpleNamespace

import optuna
import pytest

from threshold.search.results import load_analyses

TINY = ["--mod", "5", "--depth", "1", "--n-train", "1500", "--n-test", "100", "--d-lo", "4",
        "--d-hi", "16", "--budget", "3", "--steps", "60", "--heartbeat", "2"]  # fmt: skip


@pytest.fixture
def run(cli):
    """``run(ARGS, cwd)``: the command in this process (the ``cli`` fixture: an analysis's imports
    alone cost a fresh interpreter about 6 s of CPU), with a process's returncode, stdout, stderr.
    The studies' `find` runs here too; its workers are real processes."""

    def invoke(args, cwd):
        result = cli(args, cwd)
        return SimpleNamespace(returncode=result.exit_code, stdout=result.stdout,
                               stderr=result.stderr)  # fmt: skip

    return invoke


@pytest.fixture(scope="module")
def studies(tmp_path_factory, in_process):
    """Two tiny real studies on one storage: ADD from scratch and ADD pretrained on MAX+MED, each
    made by `find` in this process (its worker in its own)."""
    cwd = tmp_path_factory.mktemp("analysis")
    url = f"sqlite:///{cwd}/s.db"
    names = {}
    for key, extra in (("scratch", []), ("pretrained", ["--pretrain", "max,med"])):
        args = ["find", "--tasks", "add", *TINY, *extra, "--storage", url, "--json"]
        result = in_process(args, cwd)
        assert result.exit_code == 0, (result.stderr, result.exception)
        names[key] = json.loads(result.stdout)["study"]
    return cwd, url, names


def test_find_with_pretraining_records_and_caches_the_source_runs(studies):
    cwd, url, names = studies
    assert "-from-max+med-" in names["pretrained"]
    study = optuna.load_study(study_name=names["pretrained"], storage=url)
    trials = study.get_trials()
    assert len(trials) == 3
    for t in trials:
        source = json.loads(t.user_attrs["pretrain_accuracy"])
        assert set(source) == {"max", "med"}
    assert len(list((cwd / "cache" / "pretrained").glob("*.ckpt"))) == 3
    assert json.loads(study.user_attrs["pretrain"]) == ["max", "med"]


def test_analyze_writes_figures_and_stores_the_summary(studies, run):
    cwd, url, names = studies
    proc = run(["analyze", names["scratch"], "--largest", "--storage", url, "--json"], cwd)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["d_model"] == 16
    for path in report["figures"]:
        assert (cwd / path).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert set(report["embedding"]["separation"]) == {"parity", "random"}  # 5 is prime
    study = optuna.load_study(study_name=names["scratch"], storage=url)
    stored = load_analyses(study)[report["trial"]]
    assert stored["separation"] == report["summary"]["separation"]
    assert stored["cyclic"] == report["embedding"]["cyclic"]["value"]


def test_analyze_compare_at_matched_size(studies, run):
    cwd, url, names = studies
    proc = run(["analyze", "--compare", names["scratch"], names["pretrained"],
                      "--d-model", "4", "--storage", url, "--json"], cwd)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    a, b = json.loads(proc.stdout)
    assert a["d_model"] == b["d_model"] == 4
    assert (a["study"], b["study"]) == (names["scratch"], names["pretrained"])


def test_survey_scores_every_run_above_the_accuracy_and_stores_nothing(studies, run):
    from threshold.analysis.embedding import embedding_scores
    from threshold.analysis.layers import number_embeddings
    from threshold.search.artifacts import trial_checkpoint
    from threshold.tasks import load_task_data

    cwd, url, names = studies
    study = optuna.load_study(study_name=names["scratch"], storage=url)
    before = (study.user_attrs, [t.user_attrs for t in study.get_trials()])
    proc = run(["survey", names["scratch"], "--min-accuracy", "0", "--storage", url,
                      "--json"], cwd)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    (result,) = json.loads(proc.stdout)
    done = study.get_trials(states=[optuna.trial.TrialState.COMPLETE])
    assert [r["trial"] for r in result["runs"]] == [t.number for t in done]
    assert result["summary"]["n_runs"] == len(done) == 3
    # A run's scores are those of its checkpoint's digit embeddings (the same seed of the nulls).
    row = result["runs"][-1]
    ckpt = trial_checkpoint(study, row["trial"], url)
    data = load_task_data(ckpt.task_config, cwd / "cache")
    scores = embedding_scores(number_embeddings(ckpt.build_model(), data.vocab), "listops", 5)
    assert row["cyclic"] == scores["cyclic"]["value"]
    assert row["cyclic_frequency"] == scores["cyclic"]["frequency"] in (1, 2)
    assert row["ordering"] == scores["ordering"]["value"]
    assert row["separation"] == {k: v["vs_p95"] for k, v in scores["separation"].items()}
    assert 0 < row["attn_share"] < 1
    cyclic = result["summary"]["cyclic"]
    assert cyclic["min"] <= cyclic["median"] <= cyclic["max"]
    # Only the runs at or above --min-accuracy are scored.
    middle = sorted(t.value for t in done)[1]
    proc = run(["survey", names["scratch"], "--min-accuracy", str(middle), "--storage",
                      url, "--json"], cwd)  # fmt: skip
    (above,) = json.loads(proc.stdout)
    assert {r["trial"] for r in above["runs"]} == {t.number for t in done if t.value >= middle}
    study = optuna.load_study(study_name=names["scratch"], storage=url)
    assert (study.user_attrs, [t.user_attrs for t in study.get_trials()]) == before


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["analyze", "nope"], "study 'nope' is not in this storage"),
        (["analyze", "{scratch}", "--trial", "99"], "trial 99 is not in study"),
        (["analyze", "{scratch}", "--d-model", "7"], "has no run at d = 7"),
        (["analyze", "{scratch}", "--largest", "--trial", "0"], "choose one of"),
        (["analyze", "{scratch}", "--largest", "--seed", "-5"], "--seed -5 is not allowed"),
        (["analyze", "--compare", "{scratch}"], "--compare takes two"),
        (["analyze", "--compare", "{scratch}", "{pretrained}", "--match", "x"], "--match 'x'"),
        (["survey", "{scratch}", "--min-accuracy", "-0.5"], "--min-accuracy -0.5"),
        (
            ["find", "--tasks", "mul", "--testbed", "perm", "--mod", "3", "--pretrain", "max"],
            "op 'max' does not exist for testbed 'perm'",
        ),
        (["transfer", "--tasks", "add", "--pretrain", "", "--mod", "5"], "pretraining mixture"),
        (["transfer", "--tasks", "add", "--n-seeds", "0"], "--n-seeds 0"),
        (["transfer", "--tasks", "add", "--seeds", "3"], "is now --n-seeds"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(studies, cli, args, message):
    """In this process (the ``cli`` fixture); the test after it refuses a study through a real
    process."""
    cwd, url, names = studies
    args = [a.format(**names) for a in args]
    result = cli([*args, "--storage", url] if args[0] != "transfer" else args, cwd)
    assert result.exit_code == 2, (result.stderr, result.exception)
    assert message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_a_study_name_that_is_a_path_stays_one_folder(studies, run, tmp_path):
    """A study named ``../../etc/passwd`` (a name Optuna takes) has its figures written in one
    folder inside studies/analysis/, nothing outside it (issue 68)."""
    cwd, _, names = studies
    shutil.copytree(cwd, tmp_path / "w", ignore=shutil.ignore_patterns("studies"))
    work = tmp_path / "w"
    with sqlite3.connect(work / "s.db") as con:
        con.execute(
            "UPDATE studies SET study_name = ? WHERE study_name = ?",
            ("../../etc/passwd", names["scratch"]),
        )
    before = {p for p in tmp_path.rglob("*") if "studies" not in p.parts}
    proc = run(
        ["analyze", "../../etc/passwd", "--largest", "--storage", f"sqlite:///{work}/s.db"], work
    )
    assert proc.returncode == 0, proc.stderr
    (folder,) = (work / "studies" / "analysis").iterdir()
    assert folder.name.startswith("-..-etc-passwd-trial") and (folder / "scores.json").is_file()
    after = {p for p in tmp_path.rglob("*") if "studies" not in p.parts}
    assert {p for p in after - before if not p.name.startswith("s.db")} == set()


def test_study_without_checkpoints_is_refused(studies, run):
    """A threshold study whose completed run kept no checkpoint is refused for that reason (not
    for another: issue 62), and an Optuna study that is no threshold study for its own."""
    from threshold.search.sampler import PARAM
    from threshold.search.spec import StudySettings
    from threshold.search.study import create_or_load_study, open_storage

    cwd, url, names = studies
    storage = open_storage(url, create=False)
    source = optuna.load_study(study_name=names["scratch"], storage=storage)
    settings = StudySettings.from_attrs(source.user_attrs)
    study = create_or_load_study(settings, storage, "no-checkpoints")
    done = next(t for t in source.trials if t.state.name == "COMPLETE")
    study.add_trial(
        optuna.trial.create_trial(
            params=done.params, distributions=done.distributions, value=done.value,
            user_attrs={"params_total": done.user_attrs["params_total"], "seed": 0},
        )
    )  # fmt: skip
    assert study.trials[0].params[PARAM] == done.params[PARAM]
    proc = run(["analyze", "no-checkpoints", "--storage", url], cwd)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip() == (
        "error: study 'no-checkpoints' has no completed run with a checkpoint: run `threshold "
        "find` first"
    )
    optuna.create_study(study_name="empty", storage=url)
    proc = run(["analyze", "empty", "--storage", url], cwd)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1
    assert "not a threshold study" in proc.stderr


def test_transfer_reuses_the_pretrained_model(tmp_path, run):
    args = ["transfer", "--pretrain", "max", "--tasks", "add", "--mod", "5", "--d-model", "8",
            "--n-seeds", "1", "--steps", "50", "--pretrain-steps", "50", "--n-train", "1000",
            "--n-test", "50", "--json"]  # fmt: skip
    first = run(args, tmp_path)
    assert first.returncode == 0, first.stderr
    second = run(args, tmp_path)
    one, two = json.loads(first.stdout), json.loads(second.stdout)
    assert [r["source_reused"] for r in (*one["runs"], *two["runs"])] == [False, True]
    assert one["transfer"] == two["transfer"]  # same pretrained weights, same seed
    assert one["scratch"] == two["scratch"]
    assert len(one["runs"][0]["transfer_curve"]) >= 1


def test_analyze_checkpoint_files_without_storage(tmp_path, run):
    train = run(["train", "--tasks", "max", "--mod", "5", "--d-model", "8", "--steps", "50",
                 "--n-train", "500", "--n-test", "50", "--out", "m.ckpt", "--json"],
                tmp_path)  # fmt: skip
    assert train.returncode == 0, train.stderr
    proc = run(["analyze", "--checkpoint", "m.ckpt", "--out", "fig", "--json"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["d_model"] == 8 and report["measure"] == "max"
    assert report["summary"]["accuracy"] == json.loads(train.stdout)["accuracy"]["max"]
    assert sorted(p.name for p in (tmp_path / "fig").iterdir()) == [
        "ablation.png", "embedding.png", "layer_usage.png", "scores.json"]  # fmt: skip
    assert not (tmp_path / "studies").exists()  # no storage touched
    raw = (tmp_path / "m.ckpt").read_bytes()
    (tmp_path / "bad.ckpt").write_bytes(raw[:-10])
    bad = run(["analyze", "--checkpoint", "bad.ckpt"], tmp_path)
    assert bad.returncode == 2 and "does not match its hash" in bad.stderr
