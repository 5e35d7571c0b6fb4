"""Study notes for optuna-dashboard, on studies built from trials without training."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import optuna
import pytest
from optuna_dashboard import get_note

from threshold.report.dashboard_note import NOTE_RENDER
from threshold.search.fit import logistic
from threshold.search.notes import FIGURE_ID, write_all_notes
from threshold.search.policy import decide
from threshold.search.record import read_study
from threshold.search.sampler import PARAM, TransitionSampler
from threshold.search.spec import StudySettings
from threshold.search.study import (
    RESULT_ATTR,
    SearchConfig,
    create_or_load_study,
    open_storage,
)
from threshold.search.worker import refresh_estimate
from threshold.tasks import TaskConfig
from threshold.train import TrainConfig

CHANCE = 0.2
SETTINGS = StudySettings(
    TaskConfig(ops=("max",), n=5, n_train=2000, n_test=100),
    TrainConfig(max_steps=40, warmup_steps=4),  # the recipe's, fitted to 40 steps
    SearchConfig(d_lo=4, d_hi=16, budget=8),
)
# Runs on a known curve (in ln parameters), with a little seed noise: the fit has what it needs.
SIZES = [16, 4, 8, 6, 11, 5, 12, 8]


def make_study(tmp_path, sizes, settings=SETTINGS):
    """A threshold study with completed trials at ``sizes``, as workers would leave them."""
    storage = open_storage(f"sqlite:///{tmp_path}/s.db")
    study = create_or_load_study(settings, storage)
    sampler = TransitionSampler(settings, CHANCE)
    params = dict(sampler.policy.params_of_d)
    x_mid = np.log(params[7])
    noise = np.random.default_rng(0).normal(0, 0.02, len(sizes))
    for i, d in enumerate(sizes):
        acc = float(np.clip(logistic(np.log(params[d]), CHANCE, 0.97, x_mid, 4.0) + noise[i], 0, 1))
        study.add_trial(
            optuna.trial.create_trial(
                params={PARAM: d},
                distributions={PARAM: sampler.distribution},
                value=acc,
                user_attrs={"params_total": params[d], "seed": i, "stop_reason": "learned"},
            )
        )
    return study, sampler


def system_attrs(study):
    return study._storage.get_study_system_attrs(study._study_id)


def figure_of(study) -> dict:
    prefix = f"dashboard:plot_data:{FIGURE_ID}:"
    attrs = system_attrs(study)
    chunks = sorted((int(k[len(prefix) :]), v) for k, v in attrs.items() if k.startswith(prefix))
    return json.loads("".join(v for _, v in chunks))


def test_note_carries_the_estimate(tmp_path):
    study, sampler = make_study(tmp_path, SIZES)
    estimate = refresh_estimate(study, sampler, NOTE_RENDER)  # the worker's refresh writes the note
    assert estimate["fit"] is not None
    assert study.user_attrs["chance"] == CHANCE  # its own attribute, beside the estimate
    note = get_note(study)
    lo, hi = estimate["interval_params"]
    headline = note.splitlines()[0]
    assert headline == (
        f"## MAX (listops mod 5): 80% point at {estimate['params_p80']:,.0f} parameters "
        f"(90%: {lo:,.0f} - {hi:,.0f}; d = {estimate['d_p80']:.1f})"
    )
    # What the study found, where the dashboard's study page shows it: the first of the study's
    # attributes (their table's first page), and the title of its figure.
    result = f"{estimate['params_p80']:,.0f} parameters, 90%: {lo:,.0f} - {hi:,.0f}"
    assert next(iter(study.user_attrs.items())) == (RESULT_ATTR, result)
    title = figure_of(study)["layout"]["title"]["text"]
    assert f"80% point: {estimate['params_p80']:,.0f} parameters</b><br>90%: {lo:,.0f}" in title
    assert study.metric_names == ["max test accuracy (greedy)"]  # not "Objective 0"
    d_lo, d_hi = estimate["interval_d"]
    assert f"| 90% credible interval | {lo:,.0f} - {hi:,.0f} " in note
    assert f"| {d_lo:.1f} - {d_hi:.1f} |" in note
    assert f"| midpoint (half-way up the curve) | {estimate['midpoint_params']:,.0f}" in note
    fit = estimate["fit"]
    assert f"fit: 80% point | {fit['params_p80']:,.0f} | {fit['d_p80']:.1f} |" in note
    assert f"**Asymptote**: {estimate['asymptote']:.3g} (chance {CHANCE:g})" in note
    assert f"**Runs**: {len(SIZES)} done, 0 running" in note
    assert "**Status**: stopped (budget): the budget of 8 runs is used" in note
    assert "precision 2.5x, budget 8 runs, first bracket d 4-16" in note

    traces = {t["name"]: t for t in figure_of(study)["data"]}
    runs = traces["runs"]
    params = dict(sampler.policy.params_of_d)
    assert runs["x"] == [params[d] for d in SIZES]
    values = [t.value for t in study.get_trials()]
    assert runs["y"] == pytest.approx(values, abs=1e-4)
    # The fit's 80% point is marked on its curve, where the curve is at 80% of its top.
    (marker,) = [t for n, t in traces.items() if n.endswith("(fit)")]
    assert marker["x"] == [fit["params_p80"]]
    assert marker["y"][0] == pytest.approx(0.8 * fit["upper"], abs=2e-3)
    curve = traces["logistic fit"]
    assert np.all(np.diff(curve["y"]) >= 0) and min(curve["x"]) < min(runs["x"])
    (posterior,) = [t for n, t in traces.items() if n.endswith("(posterior)")]
    assert posterior["x"] == [estimate["params_p80"]] * 2


@pytest.mark.parametrize("n_runs", [0, 2, 4])
def test_few_runs_say_so(tmp_path, n_runs):
    study, sampler = make_study(tmp_path, SIZES[:n_runs])
    if n_runs:
        estimate = refresh_estimate(study, sampler, NOTE_RENDER)
        assert estimate["fit"] is None  # fewer than 5 runs
    assert [n for n, _ in write_all_notes(study._storage, NOTE_RENDER)] == [study.study_name]
    note = get_note(study)
    if n_runs < 3:
        assert "too few runs for an estimate" in note.splitlines()[0]
        assert f"{n_runs} completed run(s): the estimate of the 80% point starts once" in note
        assert "80% point at" not in note
    else:
        # Four runs (d 16, 4, 8, 6): only d 16 is above the 80% point and reached its level, so
        # the runs bound it (at the largest size below it that stayed under); the note says the
        # bound first, as every view does, and the posterior's numbers as context only.
        answer = read_study(study._storage, study.study_name).answer
        assert (answer["kind"], answer["d"], answer["above"]) == ("lower bound", 8, 1)
        params = dict(sampler.policy.params_of_d)
        headline = f"## MAX (listops mod 5): 80% point > {params[8]:,} parameters, not located"
        assert note.splitlines()[0] == headline
        assert "| 80% point (posterior median, context only) |" in note
        # the figure marks the bound, and its posterior's line says it is context only
        traces = {t["name"]: t for t in figure_of(study)["data"]}
        bound = traces[f"80% point > {params[8]:,} parameters (the runs' bound)"]
        assert bound["x"] == [params[8]] * 2
        assert [n for n in traces if n.endswith("(posterior, context only)")]
    if n_runs == 0:
        assert "**Status**: not started: no runs yet" in note
    else:
        assert f"**Status**: searching: {n_runs} of 8 runs, 90% interval " in note
    if n_runs == 2:
        assert "initial bracket (d = 16, 4, 8) are done" in note
    assert figure_of(study)["layout"]["xaxis"]["type"] == "log"


@pytest.mark.parametrize("precision", [1.5, 3.0, 6.0])
@pytest.mark.parametrize("n_runs", [3, 5, 8])
def test_stored_stop_status_agrees_with_the_policy(tmp_path, precision, n_runs):
    """The record's stop status, read off the stored estimate, stops where decide() would."""
    settings = StudySettings(
        SETTINGS.task, SETTINGS.train, SearchConfig(d_lo=4, d_hi=16, budget=40, precision=precision)
    )
    study, sampler = make_study(tmp_path, SIZES[:n_runs], settings)
    refresh_estimate(study, sampler, NOTE_RENDER)
    view = read_study(study, study.study_name)
    decision = decide(sampler.policy, *view.split())
    assert view.stop.reason == (decision.reason if decision.stop else None)


def test_unchanged_note_is_left_alone_and_other_studies_too(tmp_path):
    study, sampler = make_study(tmp_path, SIZES[:5])
    refresh_estimate(study, sampler, NOTE_RENDER)
    storage = study._storage
    other = optuna.create_study(study_name="not-ours", storage=storage)
    assert [n for n, _ in write_all_notes(storage, NOTE_RENDER)] == [study.study_name]
    assert system_attrs(study)["dashboard:note_ver"] == 1  # same text: not written again
    assert get_note(other) == "" and not system_attrs(other)
    # A new run changes the note, and its figure gets the new point.
    more, _ = make_study(tmp_path, [9])
    refresh_estimate(more, sampler, NOTE_RENDER)
    assert system_attrs(study)["dashboard:note_ver"] == 2
    assert "**Runs**: 6 done" in get_note(study)
    assert len(figure_of(study)["data"][-1]["x"]) == 6


def test_the_dashboard_names_the_value_of_a_study_made_before(tmp_path):
    """A study made before its value had a name gets one, and its finding as an attribute, when
    the notes are written (what `threshold dashboard` does at start-up)."""
    study, sampler = make_study(tmp_path, SIZES[:5])
    storage = study._storage
    storage.set_study_system_attr(study._study_id, "study:metric_names", None)
    refresh_estimate(study, sampler, NOTE_RENDER)
    assert optuna.load_study(study_name=study.study_name, storage=storage).metric_names is None
    ((name, study_id),) = write_all_notes(storage, NOTE_RENDER)
    again = optuna.load_study(study_name=name, storage=storage)
    assert study_id == again._study_id and again.metric_names == ["max test accuracy (greedy)"]
    lo, hi = json.loads(again.user_attrs["estimate"])["interval_params"]
    assert again.user_attrs[RESULT_ATTR].endswith(f" parameters, 90%: {lo:,.0f} - {hi:,.0f}")


def test_worker_import_stays_light(loaded_by):
    imports = ["threshold.search.worker", "threshold.search.notes"]
    assert loaded_by(imports, ["optuna_dashboard", "plotly", "rich", "threshold.cli"]) == []


def test_notes_and_figures_are_written_as_optuna_dashboard_writes_them(tmp_path):
    """threshold.search.dashboard_attrs writes a note and a figure without importing
    optuna-dashboard (scikit-learn comes with it): optuna-dashboard's own functions read them,
    longer and then shorter (stale pieces emptied), and ours read what it writes."""
    from optuna_dashboard import save_note as dashboard_save_note
    from optuna_dashboard._custom_plot_data import get_plotly_graph_objects

    from threshold.search import dashboard_attrs

    study = optuna.create_study(storage=f"sqlite:///{tmp_path}/s.db", study_name="n")
    for body in ("x" * 5000 + "end", "short", ""):
        dashboard_attrs.save_note(study, body)
        assert get_note(study) == body == dashboard_attrs.get_note(study)
    assert system_attrs(study)["dashboard:note_ver"] == 3
    dashboard_save_note(study, "theirs " * 700)
    assert dashboard_attrs.get_note(study) == "theirs " * 700
    for figure in ('{"data": [' + "1, " * 2000 + "1]}", '{"data": []}'):
        dashboard_attrs.save_figure(study, FIGURE_ID, figure)
        assert get_plotly_graph_objects(system_attrs(study)) == {FIGURE_ID: figure}


def test_a_level_near_chance_is_said_in_the_note():
    """Issue 62: at --mod 3 MAX's majority answer is right 77.5% of the time against a level of
    0.8; the note says the transition measures little and what to do, as find and the report."""
    from threshold.report.notes import note_markdown
    from threshold.search.notes import NoteRun

    runs = [NoteRun(i, d, 100 * d, 0.7, i, "max_steps") for i, d in enumerate((4, 8, 16))]
    estimate = {"params_p80": 900.0, "d_p80": 9.0, "interval_params": [400.0, 2000.0],
                "asymptote": 0.9, "chance": 0.775, "level": 0.8,
                "chance_corrected": False}  # fmt: skip
    note = note_markdown(SETTINGS, estimate, runs)
    (line,) = [x for x in note.splitlines() if x.startswith("- **Read with care**")]
    assert "lies 0.025 above chance (0.775" in line and "--chance-corrected" in line
    far = note_markdown(SETTINGS, estimate | {"chance": 0.2}, runs)
    assert "Read with care" not in far


def test_without_plotly_the_note_is_written_without_its_figure(tmp_path):
    # A lent GPU runs the project without plotly (.ci/wheels): its workers still write the note.
    code = f"""
import sys
sys.modules["plotly"] = None  # as if not installed
sys.path.insert(0, {str(Path(__file__).parent)!r})
from pathlib import Path
from test_search_notes import NOTE_RENDER, SIZES, make_study, refresh_estimate, system_attrs
study, sampler = make_study(Path({str(tmp_path)!r}), SIZES)
refresh_estimate(study, sampler, NOTE_RENDER)
print(sorted(system_attrs(study)))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    study = optuna.load_study(study_name=None, storage=f"sqlite:///{tmp_path}/s.db")
    assert get_note(study).startswith("## MAX (listops mod 5): 80% point at")
    assert RESULT_ATTR in study.user_attrs and "plot_data" not in out.stdout  # no figure
    (tmp_path / "with").mkdir()
    with_plotly, _ = make_study(tmp_path / "with", SIZES)
    refresh_estimate(with_plotly, TransitionSampler(SETTINGS, CHANCE), NOTE_RENDER)
    assert any(k.startswith("dashboard:plot_data:") for k in system_attrs(with_plotly))
