"""Refitting stored studies with the current posterior: from a storage and from a report's
results.json, through the library and the ``threshold refit`` command."""

import json
from pathlib import Path

import optuna
import pytest

from threshold.search.fit import transition_estimate
from threshold.search.refit import refit_results, refit_storage
from threshold.search.sampler import PARAM, policy_settings
from threshold.search.spec import StudySettings
from threshold.search.study import SearchConfig, create_or_load_study, open_storage
from threshold.tasks import TaskConfig
from threshold.train import TrainConfig

# ADD mod 10 in the CPU suite (d, accuracy): graded runs cut by the step budget near the
# transition, one fully learned run at d = 64 that the old posterior took for an outlier.
ADD10 = [(64, 0.987), (8, 0.0705), (16, 0.524), (18, 0.646), (18, 0.728), (21, 0.692),
         (21, 0.867), (24, 0.473), (24, 0.571), (24, 0.649), (24, 0.825), (24, 0.863),
         (24, 0.921), (28, 0.783), (28, 0.816), (28, 0.861)]  # fmt: skip
CHANCE = 0.1475
SETTINGS = StudySettings(
    TaskConfig(ops=("add",)), TrainConfig(), SearchConfig(d_lo=8, d_hi=64, budget=16, precision=3)
)
REPO = Path(__file__).resolve().parent.parent
OLD = {"params_p80": 11060.0, "d_p80": 25.8, "asymptote": 0.849, "chance": CHANCE}


def results_file(tmp_path):
    study = {
        "name": "listops10-add-add-test",
        "label": "ADD, mod 10",
        "settings": {
            "task": SETTINGS.task.to_dict(),
            "train": SETTINGS.train.to_dict(),
            "search": json.loads(SETTINGS.to_attrs()["search"]),
            "pretrain": [],
        },
        "estimate": OLD,
        "runs": [{"d": d, "accuracy": y} for d, y in ADD10],
    }
    path = tmp_path / "results.json"
    path.write_text(json.dumps({"format": "threshold-report/2", "studies": [study]}))
    return path


def test_refit_from_results_lifts_the_asymptote_to_the_largest_run(tmp_path):
    (row,) = refit_results(results_file(tmp_path))
    assert row["old"]["asymptote"] == 0.849 and row["old"]["flagged"] is False
    assert abs(row["new"]["asymptote"] - 0.987) <= 0.05  # the d = 64 run pins it
    lo, hi = row["new"]["interval_params"]
    assert lo < row["new"]["params_p80"] < hi
    assert row["n_runs"] == len(ADD10) and row["best_run"] == 0.987
    corrected = refit_results(results_file(tmp_path), chance_corrected=True)[0]
    assert corrected["chance_corrected"] is True
    assert corrected["new"]["params_p80"] > row["new"]["params_p80"]


def test_refit_from_storage_matches_the_results_route(tmp_path):
    storage = open_storage(f"sqlite:///{tmp_path}/s.db")
    study = create_or_load_study(SETTINGS, storage)
    dist = optuna.distributions.IntDistribution(2, 512)
    for d, y in ADD10:
        study.add_trial(optuna.trial.create_trial(params={PARAM: d}, distributions={PARAM: dist},
                                                  value=y))  # fmt: skip
    policy = policy_settings(SETTINGS, CHANCE)
    study.set_user_attr("estimate", json.dumps(transition_estimate(policy, ADD10)))
    (row,) = refit_storage(f"sqlite:///{tmp_path}/s.db")
    (from_file,) = refit_results(results_file(tmp_path))
    assert row["new"] == from_file["new"]
    assert row["old"]["params_p80"] == row["new"]["params_p80"]  # stored by today's posterior


def test_refit_command_prints_json(tmp_path, cli):
    out = cli(["refit", "--results", results_file(tmp_path), "--json"])
    assert out.exit_code == 0, out.stderr
    (row,) = json.loads(out.stdout)
    assert row["label"] == "ADD, mod 10" and row["new"]["flagged"] is False
    assert row["new"]["strays"] is False and 0 < row["new"]["stray_mass"] < 0.6
    assert "stray_mass" not in row["old"]  # stored before the offset sd was learned
    bad = cli(["refit", "--results", tmp_path / "none.json"])
    assert bad.exit_code != 0 and "cannot be read" in bad.stderr


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("[1, 2]", "format None"),
        ("{}", "format None"),
        ('{"format": 99}', "format 99"),
        ('{"format": "threshold-report/2", "studies": [1]}', "does not hold a report's studies"),
        ("not json", "is not JSON"),
    ],
)
def test_refit_of_a_file_that_is_no_report_is_one_line_exit_2(tmp_path, text, named):
    """As `report --from` refuses it: one line naming the file, exit 2, no traceback."""
    from typer.testing import CliRunner

    from threshold.cli import app

    path = tmp_path / "results.json"
    path.write_text(text)
    result = CliRunner().invoke(app, ["refit", "--results", str(path)])
    assert result.exit_code == 2, (result.output, result.exception)
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith(f"error: results file {str(path)!r}") and named in line, line


def test_the_showcase_joint_mul_study_is_no_longer_flagged(tmp_path):
    """MUL in MUL+SGN+IMG (the committed CPU report): the stored posterior put the asymptote at
    0.60 and took the one d = 48 run (0.894) for an outlier; the current one reads it as the top."""
    results = json.loads((REPO / "reports/cpu/all/results.json").read_text())
    (entry,) = [
        e for e in results["studies"] if e.get("data", e).get("label", "").startswith("MUL in")
    ]
    path = tmp_path / "results.json"
    path.write_text(json.dumps({"studies": [entry]}))
    (row,) = refit_results(path)
    assert row["old"]["flagged"] is True and row["old"]["asymptote"] < 0.65
    assert row["new"]["flagged"] is False
    assert abs(row["new"]["asymptote"] - row["best_run"]) <= 0.05


def test_the_showcase_study_whose_sizes_stray_is_told(tmp_path):
    """ADD in ADD+PROD mod 7 (the committed CPU report): its d = 8 run (0.45) sits above its six
    runs at d = 15-21 (0.26-0.38), so the posterior favours the largest size offset sd."""
    results = json.loads((REPO / "reports/cpu/all/results.json").read_text())
    labels = ("ADD in ADD+PROD, mod 7", "ADD, mod 7")  # ADD alone: its sizes on one curve
    entries = [e for e in results["studies"] if e.get("data", e).get("label") in labels]
    path = tmp_path / "results.json"
    path.write_text(json.dumps({"studies": entries}))
    rows = {row["label"]: row["new"] for row in refit_results(path)}
    assert rows[labels[0]]["strays"] is True and rows[labels[0]]["stray_mass"] > 0.7
    assert rows[labels[1]]["strays"] is False and rows[labels[1]]["stray_mass"] < 0.4
