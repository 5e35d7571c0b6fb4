"""`threshold report` on real (tiny) studies: its numbers, its files, and bad input.

The studies and the report are built once per session (``report_studies`` and ``built_report``
in conftest.py, shared with the browser test).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import optuna
import pytest

from threshold.report import dense_grid, step_cost


def invoke(args, cwd, monkeypatch):
    """`threshold ARGS` in this process (as the console script runs it; no new interpreter)."""
    from typer.testing import CliRunner

    from threshold.cli import app

    monkeypatch.chdir(cwd)
    return CliRunner().invoke(app, args)


def stored(report_studies, name: str) -> tuple[dict, optuna.Study]:
    study = optuna.load_study(study_name=name, storage=report_studies["url"])
    return json.loads(study.user_attrs["estimate"]), study


def studies_of(results: dict) -> dict[str, dict]:
    """Each study's data in a results.json, by name."""
    return {s["data"]["name"]: s["data"] for s in results["studies"]}


def test_numbers_are_the_stored_estimates(report_studies, built_report):
    out, results, printed = built_report
    by_name = studies_of(results)
    # No study named: every study of the storage, the baseline first.
    assert results["studies"][0]["row"]["name"] == report_studies["a"]
    assert set(by_name) == {report_studies[k] for k in ("a", "b", "few")}
    for key in ("a", "b"):
        estimate, study = stored(report_studies, report_studies[key])
        s = by_name[report_studies[key]]
        assert s["status"] == "ok" and s["estimate_source"] == "stored"
        assert s["estimate"] == estimate
        row = next(r for r in results["comparison"] if r["name"] == s["name"])
        for field in ("params_p80", "interval_params", "d_p80", "interval_d"):
            assert row[field] == estimate[field]
        view = next(v for v in results["studies"] if v["row"]["name"] == s["name"])
        assert view["midpoint_params"] == estimate["midpoint_params"]
        done = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
        assert s["n_runs"] == len(done) == len(s["runs"]) == row["n_runs"]
        assert s["efficiency"]["runs"] == len(done)
        assert s["efficiency"]["train_s"] == pytest.approx(
            sum(t.user_attrs["train_s"] for t in done), abs=0.1
        )
        assert s["efficiency"]["steps"] == sum(t.user_attrs["steps"] for t in done)
        cpu = [t.user_attrs["cpu_s"] for t in done]  # every run recorded its CPU seconds
        assert s["efficiency"]["runs_with_cpu"] == len(done) and min(cpu) > 0
        assert s["efficiency"]["cpu_s"] == pytest.approx(sum(cpu), abs=0.1)
        lo, mid, hi = (s["band"][k] for k in ("lo", "median", "hi"))
        assert all(a <= b <= c for a, b, c in zip(lo, mid, hi, strict=True))
    assert printed["comparison"] == results["comparison"]
    assert set(results["files"]) == {p.name for p in out.iterdir()}
    html = (out / "index.html").read_text()
    assert 'id="transitions"' in html and "https://" not in html.split("<body>")[0]
    for field in ("schedule cosine", "init_std none", "early_stop learned_or_stuck"):
        assert field in html, field  # the settings table lists every recipe field
    summary = (out / "summary.md").read_text()
    a = by_name[report_studies["a"]]
    assert f"{a['estimate']['params_p80']:,.0f}" in summary


def test_reduction_factor_and_its_interval(report_studies, built_report):
    _, results, _ = built_report
    by_name = studies_of(results)
    base, b = by_name[report_studies["a"]], by_name[report_studies["b"]]
    assert results["baselines"] == [report_studies["a"]] and base["reduction"] is None
    assert b["baseline"] == base["name"]
    # These tiny studies learn at none of their sizes (threshold.search.bounds): the factor is
    # kept as the posteriors' ratio, marked as saying nothing, and the page says why instead.
    assert (base["transition"]["kind"], b["transition"]["kind"]) == ("lower bound",) * 2
    assert b["reduction"]["form"] == "none" and b["reduction"]["bound"] is None
    assert "neither transition is located" in b["reduction"]["note"]
    bounds = ("form", "bound", "note")
    r = {k: v for k, v in b["reduction"].items() if k not in bounds}  # a copy: shared results
    lo, hi = r["interval"]
    assert lo <= r["factor"] <= hi and lo <= r["median"] <= hi
    expected = base["estimate"]["params_p80"] / b["estimate"]["params_p80"]
    assert r["factor"] == pytest.approx(expected, rel=2e-3)  # stored p80s have 4 digits
    assert (r["p_above_1"] > 0.5) == (r["factor"] > 1)
    # The ratio of two uncertain numbers is less certain than either.
    assert hi / lo > max(base["estimate"]["interval_ratio"], b["estimate"]["interval_ratio"])
    # The same numbers as the search's own maths on the two full posteriors: the lattice
    # marginals kept in results.json lose nothing.
    from threshold.report import collect
    from threshold.search.fit import reduction_factor

    a_data, b_data = collect(report_studies["url"], [base["name"], b["name"]]).studies
    full = reduction_factor(a_data.posterior, b_data.posterior)
    assert r["interval"] == pytest.approx(full.pop("interval"), rel=1e-6)
    # P(smaller) halves the mass at zero always; fit's exact test for zero does so when rounding
    # lands the lattice point on it: they differ by at most half a 0.01-nat point's mass.
    assert r.pop("p_above_1") == pytest.approx(full.pop("p_above_1"), abs=0.01)
    assert {k: v for k, v in r.items() if k != "interval"} == pytest.approx(full, rel=1e-6)
    # The sentence the page leads with says there is none, and why.
    finding = next(f for f in results["findings"] if f.startswith(b["label"] + ":"))
    assert "no factor" in finding and "neither transition is located" in finding
    assert f"{lo:.2f} - {hi:.2f}x" not in finding


def test_each_study_is_compared_with_the_baseline_of_its_testbed(report_studies):
    """Another op on the baseline's testbed and modulus: the same ratio as a size ratio; another
    modulus with no baseline of its own: no factor and no note; with one: that one."""
    from dataclasses import replace

    from threshold.report import collect
    from threshold.report.factors import compare

    a, b = report_studies["a"], report_studies["b"]
    studies = collect(report_studies["url"], [a, b], [a]).studies
    base, other = studies
    same_op = other.reduction
    task = other.settings.task
    other.settings = replace(other.settings, task=replace(task, measure="min"))
    compare(studies, [a])
    assert other.reduction is None and other.reduction_note == ""
    assert other.size_ratio == same_op  # the same maths, under its own name

    other.settings = replace(other.settings, task=replace(task, measure="min", n=7))
    compare(studies, [a])
    assert other.baseline is None and other.reduction is None and other.size_ratio is None
    assert other.reduction_note == ""
    # Two baselines, one each: b is its own group's baseline, compared with nothing.
    compare(studies, [a, b])
    assert (base.baseline, other.baseline) == (a, b)
    assert other.reduction is None and other.size_ratio is None


def test_a_study_with_too_few_runs_is_reported(report_studies, built_report):
    out, results, _ = built_report
    few = studies_of(results)[report_studies["few"]]
    assert few["status"] == "too_few_runs" and few["n_runs"] == 1
    assert few["status_text"].startswith("too few runs to fit")
    assert few["band"] is None and few["reduction"] is None and few["x80"] is None
    assert "too few runs" in few["reduction_note"]
    row = next(r for r in results["comparison"] if r["name"] == report_studies["few"])
    assert row["params_p80"] is None and row["ratio"] is None
    assert few["figure"] and (out / few["figure"]).is_file()  # its one run is still drawn
    for page in ("index.html", "summary.md"):
        assert "too few runs to fit: 1 completed" in (out / page).read_text()
    (warning,) = results["warnings"]
    assert warning["label"] == few["label"]


def test_analyses_transfer_and_efficiency_are_in_the_report(report_studies, built_report):
    out, results, _ = built_report
    a = studies_of(results)[report_studies["a"]]
    (analysis,) = a["analyses"]
    assert analysis["trial"] == 0 and analysis["summary"]["attn_share"] == 0.45
    assert set(analysis["report_figures"]) == {"embedding", "layer_usage", "ablation"}
    (transfer,) = results["transfer"]
    assert transfer["seeds"] == [[0, 0.6, 0.2], [1, 0.5, 0.2]]
    assert (out / transfer["figure"]).is_file()
    html = (out / "index.html").read_text()
    for name in (*analysis["report_figures"].values(), transfer["figure"]):
        assert f'src="{name}"' in html
    grid = a["efficiency"]["grid"]
    assert grid["runs"] == len(grid["sizes"]) * 3 and grid["steps"] == grid["runs"] * 40
    assert "Dense grid (the papers" in html


def test_a_report_renders_again_from_its_results_alone(built_report, tmp_path, monkeypatch):
    """`threshold report --from results.json`: no storage (a URL that cannot be opened), the same
    numbers, figures and analyses; in place with --force too."""
    import shutil

    out, results, _ = built_report
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    monkeypatch.setenv("THRESHOLD_STORAGE", "sqlite:///no/such/folder/x.db")
    again = invoke(
        ["report", "--from", str(copy / "results.json"), "-o", "new", "--json"],
        tmp_path,
        monkeypatch,
    )
    assert again.exit_code == 0, again.output
    new = json.loads((tmp_path / "new" / "results.json").read_text())
    assert new["comparison"] == results["comparison"]
    assert new["findings"] == results["findings"]
    assert [s["data"] for s in new["studies"]] == [s["data"] for s in results["studies"]]
    assert new["created"] == results["created"]
    assert new["rendered_from"] == str(copy / "results.json")
    assert set(new["files"]) == {p.name for p in (tmp_path / "new").iterdir()}
    for name in new["files"]:
        if name.startswith("analysis-"):
            assert (tmp_path / "new" / name).read_bytes() == (out / name).read_bytes()
    # In place: the earlier report's files are replaced, the analysis figures survive.
    inplace = invoke(
        ["report", "--from", str(copy / "results.json"), "-o", str(copy), "--force"],
        tmp_path,
        monkeypatch,
    )
    assert inplace.exit_code == 0, inplace.output
    kept = json.loads((copy / "results.json").read_text())
    assert kept["comparison"] == results["comparison"]
    assert all((copy / name).stat().st_size > 0 for name in kept["files"])
    assert not (tmp_path / "no").exists()


def test_an_older_results_file_is_checked_against_the_maths(built_report, tmp_path):
    """A results.json without the posterior (format 1) is rebuilt from its runs, and refused when
    the runs no longer give the stored estimate."""
    from threshold.errors import ConfigError
    from threshold.report import load_results

    out, results, _ = built_report
    old = json.loads((out / "results.json").read_text())
    old["format"] = "threshold-report/1"
    for s in old["studies"]:
        s["data"].pop("x80")
    path = tmp_path / "results.json"
    path.write_text(json.dumps(old))
    loaded = {s.name: s for s in load_results(path).studies}
    for s in results["studies"]:
        data = s["data"]
        if data["reduction"]:
            got = dict(loaded[data["name"]].reduction)
            want = dict(data["reduction"])
            for key in ("form", "bound", "note"):  # what the runs say, not the maths
                assert got.pop(key, None) == want.pop(key, None)
            assert got.pop("interval") == pytest.approx(want.pop("interval"), rel=1e-6)
            assert got == pytest.approx(want, rel=1e-6)
    first = old["studies"][0]["data"]
    first["estimate"]["params_p80"] *= 1.1
    path.write_text(json.dumps(old))
    with pytest.raises(ConfigError, match="the posterior's maths changed") as info:
        load_results(path)
    assert first["name"] in str(info.value)


def test_refuses_a_used_folder_unless_forced(report_studies, tmp_path, monkeypatch):
    s = report_studies
    out = tmp_path / "rep"
    out.mkdir()
    (out / "mine.txt").write_text("keep me")
    args = ["report", s["a"], "--storage", s["url"], "-o", str(out)]
    refused = invoke(args, s["cwd"], monkeypatch)
    assert refused.exit_code == 2
    assert refused.stderr.strip().count("\n") == 0 and "--force" in refused.stderr
    assert sorted(p.name for p in out.iterdir()) == ["mine.txt"]
    first = invoke([*args, "--force", "--json"], s["cwd"], monkeypatch)
    assert first.exit_code == 0, first.output
    files = json.loads(first.stdout)["files"]
    assert (out / "mine.txt").read_text() == "keep me"
    # Again with --force over its own earlier report, for another study: the earlier report's
    # study figure goes, other files stay.
    again = invoke(
        ["report", s["b"], "--storage", s["url"], "-o", str(out), "--force", "--json"],
        s["cwd"],
        monkeypatch,
    )
    assert again.exit_code == 0, again.output
    now = {p.name for p in out.iterdir()}
    gone = {f for f in files if f.startswith("study-")}
    assert gone and not gone & now and "mine.txt" in now
    results = json.loads((out / "results.json").read_text())
    assert [st["data"]["name"] for st in results["studies"]] == [s["b"]]


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        (["no-such-study"], "'no-such-study' is not in this storage"),
        (["--baseline", "nope"], "baseline study 'nope' is not in this storage"),
        (["--transfer", "missing.json"], "transfer file 'missing.json' cannot be read"),
        (["--transfer", "s.db"], "is not `threshold transfer --json` output"),
        (["--storage", "sqlite:///nowhere/x.db"], "does not exist"),
        (["-o", "/proc/x"], "output folder '/proc/x' cannot be written"),
        (["-o", "/proc/x/y/z"], "output folder '/proc/x/y/z' cannot be written"),
        (["--from", "s.db"], "is not JSON"),
        (["--from", "missing.json"], "results file 'missing.json' cannot be read"),
        (["--from", "reports/all/results.json", "--baseline", "nope"], "'nope' is not in"),
        (["--from", "reports/all/results.json", "--storage", "x"], "--from renders the studies"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    report_studies, built_report, tmp_path, monkeypatch, extra, words
):
    s = report_studies
    out = tmp_path / "rep"
    if "-o" in extra:
        out = Path(extra[extra.index("-o") + 1])
    else:
        extra = [*extra, "-o", str(out)]
    args = (
        ["report"]
        if any(a in extra for a in ("--storage", "--from"))
        else ["report", "--storage", s["url"]]
    )
    result = invoke([*args, *extra], s["cwd"], monkeypatch)
    assert result.exit_code == 2, (result.output, result.exception)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and words in lines[0], lines
    assert not out.exists()


def test_report_never_writes_to_the_storage(report_studies, built_report, monkeypatch):
    """The studies' attributes (notes included) and trials are as they were."""
    s = report_studies
    storage = optuna.storages.RDBStorage(s["url"])

    def state(name):
        study = optuna.load_study(study_name=name, storage=storage)
        system = storage.get_study_system_attrs(study._study_id)
        return study.user_attrs, system, [t.user_attrs for t in study.trials]

    before = {name: state(name) for name in (s["a"], s["b"], s["few"])}
    result = invoke(
        ["report", "--storage", s["url"], "-o", str(s["cwd"] / "again")], s["cwd"], monkeypatch
    )
    assert result.exit_code == 0, result.output
    for name, was in before.items():
        assert state(name) == was


def test_dense_grid_cost():
    # Runs timed at 2 ms + 1e-4 ms d^2 per step are read back exactly.
    ds = [4, 8, 16, 32]
    a, b = 2e-3, 1e-7
    seconds = [100 * (a + b * d * d) for d in ds]
    fitted = step_cost(ds, seconds, [100] * 4)
    assert fitted == pytest.approx((a, b), rel=1e-6)
    assert step_cost([8, 8], [1.0, 1.1], [100, 100]) is None  # one size: no slope
    grid = dense_grid([4, 64], 1000, (a, b))
    assert grid["sizes"][0] == 4 and grid["sizes"][-1] == 64 and len(grid["sizes"]) == 16
    assert grid["runs"] == 48 and grid["steps"] == 48_000
    assert grid["train_s"] == pytest.approx(3 * sum(1000 * (a + b * d * d) for d in grid["sizes"]))


# MUL in S_3 trained with SGN and IMG (the CPU suite): runs crowd at d 18-26 on a plateau near
# 0.5, one d = 48 run learns (0.894), and the posterior takes the plateau for the asymptote.
PLATEAU_RUNS = [
    (48, 0.894),
    (8, 0.133),
    (8, 0.114),
    (11, 0.278),
    (15, 0.434),
    (18, 0.463),
    (18, 0.531),
    (18, 0.419),
    (18, 0.415),
    (21, 0.731),
    (21, 0.390),
    (23, 0.588),
    (23, 0.591),
    (23, 0.534),
    (26, 0.594),
    (26, 0.808),
]

# Runs whose d = 8 run sits above the next sizes' runs: no smooth curve passes near them all.
STRAY_RUNS = [
    (48, 0.864),
    (8, 0.55),
    (15, 0.34),
    (15, 0.37),
    (15, 0.38),
    (16, 0.35),
    (16, 0.37),
    (21, 0.38),
    (23, 0.8),
    (23, 0.82),
    (26, 0.78),
    (26, 0.79),
    (26, 0.81),
]


def test_doubtful_estimates_are_flagged(tmp_path):
    import json

    from threshold.report.reading import collect
    from threshold.search.fit import STRAY_MASS, transition_estimate
    from threshold.search.sampler import PARAM, policy_settings
    from threshold.search.spec import StudySettings
    from threshold.search.study import SearchConfig, create_or_load_study, open_storage
    from threshold.tasks import TaskConfig
    from threshold.train import TrainConfig

    url = f"sqlite:///{tmp_path}/s.db"
    storage = open_storage(url)
    names = {}
    # The same sizes on a curve that rises to 0.9: its asymptote is its best run's.
    learned = [(d, round(0.3 + 0.6 / (1 + (20 / d) ** 6), 3)) for d, _ in PLATEAU_RUNS]
    studies = (("plateau", PLATEAU_RUNS, 1), ("learned", learned, 2), ("strays", STRAY_RUNS, 3))
    for key, done, seed in studies:
        task = TaskConfig(ops=("max",), n=5, n_train=2000, n_test=100, split_seed=seed)
        settings = StudySettings(task, TrainConfig(max_steps=40), SearchConfig(d_lo=8, d_hi=48))
        study = create_or_load_study(settings, storage)
        policy = policy_settings(settings, 0.32)
        for i, (d, acc) in enumerate(done):
            study.add_trial(
                optuna.trial.create_trial(
                    params={PARAM: d},
                    distributions={PARAM: optuna.distributions.IntDistribution(2, 512)},
                    value=acc,
                    user_attrs={
                        "params_total": dict(policy.params_of_d)[d],
                        "seed": i,
                        "steps": 40,
                        "train_s": 1.0,
                        "stop_reason": "max_steps",
                        "accuracy": json.dumps({"max": acc}),
                    },
                )
            )
        estimate = transition_estimate(policy, done)
        if key == "plateau":
            # The asymptote the posterior of 6479aa0 fitted to these runs (later posteriors bound
            # it by the largest runs): the flag reads the stored estimate, whatever made it.
            estimate["asymptote"] = 0.60
        study.set_user_attr("estimate", json.dumps(estimate))
        names[study.study_name] = key
    text = {names[s.name]: s.warning for s in collect(url, list(names)).studies}
    assert "may mark a plateau, not the transition" in text["plateau"]
    assert "0.60 lies 0.29 below its best run (0.894)" in text["plateau"]
    assert "stray" not in text["plateau"]
    assert text["learned"] == ""
    # A d = 8 run above the d = 15-21 ones (as ADD in the CPU suite's ADD+PROD mod 7).
    stray = re.search(r"its sizes stray from any smooth curve \(P = (0\.\d+)", text["strays"])
    assert stray and STRAY_MASS <= float(stray.group(1)) < 0.9  # 0.81 with the default posterior
    assert "plateau" not in text["strays"]


def test_studies_past_ten_keep_a_style_of_their_own():
    # tab10 has ten colours: the eleventh study shares the first's colour, not its line.
    from threshold.report.figures import study_style

    styles = [study_style(i) for i in range(30)]
    assert len(set(styles)) == 30
    assert styles[10][0] == styles[0][0] and styles[10][1] != styles[0][1]


def test_report_layer_stays_apart(loaded_by):
    watched = ["threshold.cli", "typer", "matplotlib", "plotly", "rich.progress", "torch"]
    assert loaded_by(["threshold.report"], watched) == []


def test_without_plotly_the_report_leaves_out_only_its_interactive_figure(
    report_studies, built_report, tmp_path
):
    # A lent GPU runs the project without plotly (.ci/wheels): a suite there still writes its
    # reports, without the interactive figure (and the dashboard notes: test_search_notes).
    s = report_studies
    out = tmp_path / "report"
    code = f"""
import sys
sys.modules["plotly"] = None  # as if not installed
from typer.testing import CliRunner
from threshold.cli import app
result = CliRunner().invoke(app, ["report", "--storage", {s["url"]!r}, "-o", {str(out)!r}])
assert result.exit_code == 0, (result.output, result.exception)
"""
    subprocess.run([sys.executable, "-c", code], cwd=s["cwd"], check=True)
    page = (out / "index.html").read_text()
    assert 'id="comparison-plot"' in (built_report[0] / "index.html").read_text()
    assert 'id="comparison-plot"' not in page and "plotly" not in page
    assert not (out / "plotly.min.js").exists()
    names = [v["row"]["name"] for v in json.loads((out / "results.json").read_text())["studies"]]
    assert names == [v["row"]["name"] for v in built_report[1]["studies"]]  # the rest as ever
