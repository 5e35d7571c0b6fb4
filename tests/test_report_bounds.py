"""Bounds said as bounds (issue 30): a baseline none of whose runs learned gives a factor "at least
Nx, for the sizes and seeds run", not a point with the prior's interval; located studies give a
point with its interval; at a budget checkpoint where neither is located there is no factor; and
the ``small`` recipe's name survives a study, a report and a report rendered again.

The studies are real Optuna studies in a real SQLite storage, their trials written as the worker
leaves them (the measured op's value, the size's parameter count, the accuracies at checkpoints)
and their estimate by the search's own maths (as test_report.py's doubtful-estimate test does):
no training, so the runs can be made to learn or not.
"""

from __future__ import annotations

import json

import optuna
import pytest

from threshold.report import collect, load_results
from threshold.report.sentences import transition_words
from threshold.report.write import write_report
from threshold.search.bounds import LOCATING_RUNS, factor_bound, locate
from threshold.search.fit import transition_estimate
from threshold.search.sampler import PARAM, policy_settings
from threshold.search.spec import StudySettings
from threshold.search.study import create_or_load_study, open_storage

CHANCE = 0.32
STEPS = 40  # each run's budget; checkpoints at 20 and 40
SIZES = (8, 10, 12, 14, 16, 18, 20, 22, 24, 28, 32, 40, 48)


def rising(d: int, at: float) -> float:
    """A curve from chance to 0.9, half way up at d = ``at``."""
    return round(CHANCE + (0.9 - CHANCE) / (1 + (at / d) ** 6), 3)


def never(d: int) -> float:
    """A run that sits at chance whatever its size (ADD alone under small init)."""
    return round(CHANCE - 0.02 + 0.01 * (d % 3), 3)


def _store(storage, tasks: str, mod: int, final, early, **options) -> str:
    """A study of ``tasks`` (measuring MAX) whose run at each size ends at ``final(d)`` and stood
    at ``early(d)`` half way; its estimate as the worker stores it. Returns its name."""
    settings = StudySettings.from_options(
        tasks, mod=mod, measure="max", n_train=2000, n_test=100, steps=STEPS, d_lo=8, d_hi=48,
        checkpoints=(0.5, 1.0), **options,
    )  # fmt: skip
    study = create_or_load_study(settings, storage)
    policy = policy_settings(settings, CHANCE)
    params = dict(policy.params_of_d)
    done = []
    for i, d in enumerate(SIZES):
        acc = final(d)
        budget = [
            {"step": s, "tokens": 2560 * s, "accuracy": a, "sampled_accuracy": a, "reached": True}
            for s, a in ((STEPS // 2, early(d)), (STEPS, acc))
        ]
        study.add_trial(
            optuna.trial.create_trial(
                params={PARAM: d},
                distributions={PARAM: optuna.distributions.IntDistribution(2, 512)},
                value=acc,
                user_attrs={
                    "params_total": params[d], "seed": i, "steps": STEPS, "train_s": 1.0,
                    "stop_reason": "max_steps", "accuracy": json.dumps({"max": acc}),
                    "budget": json.dumps(budget),
                },
            )
        )  # fmt: skip
        done.append((d, acc))
    study.set_user_attr("estimate", json.dumps(transition_estimate(policy, done)))
    return study.study_name


@pytest.fixture(scope="module")
def studies(tmp_path_factory):
    """mod 5: MAX alone never learns, MAX in MAX+MED does (located, and at chance half way);
    mod 7: both learn, MAX alone at larger sizes; mod 5 under the ``small`` recipe: MAX alone."""
    tmp = tmp_path_factory.mktemp("bounds")
    url = f"sqlite:///{tmp}/s.db"
    storage = open_storage(url)
    joint = lambda d: rising(d, 20)  # noqa: E731
    fast = {"schedule": "constant"}  # checkpoints need a schedule that does not see the budget
    names = {
        "never": _store(storage, "max", 5, never, never, **fast),
        "joint": _store(storage, "max,med", 5, joint, never, **fast),
        "base7": _store(storage, "max", 7, lambda d: rising(d, 28), never, **fast),
        "joint7": _store(storage, "max,med", 7, joint, never, **fast),
        "small": _store(storage, "max", 5, joint, never, recipe="small"),
    }
    return url, names, tmp


def test_located_needs_runs_on_both_sides_of_the_point():
    est = {"params_p80": 1000.0, "asymptote": 0.9, "chance": 0.3, "level": 0.8,
           "chance_corrected": False}  # fmt: skip
    target = 0.72
    two_each = [(8, 400, 0.3), (9, 700, 0.5), (12, 1400, 0.8), (14, 2000, 0.85)]
    assert locate(two_each, est)["kind"] == "point"
    assert locate(two_each, est)["target"] == pytest.approx(target)
    # one learned run above the point: its seeds may split there; a lower bound, the largest
    # size at or below which nothing learned
    one_above = [(8, 400, 0.3), (9, 700, 0.5), (12, 1400, 0.5), (14, 2000, 0.85)]
    assert LOCATING_RUNS == 2
    got = locate(one_above, est)
    assert (got["kind"], got["params"], got["d"]) == ("lower bound", 1400, 12)
    # every run learned: at most the smallest size from which every run learned
    every = [(8, 400, 0.75), (9, 700, 0.8), (12, 1400, 0.8), (14, 2000, 0.85)]
    got = locate(every, est)
    assert (got["kind"], got["params"]) == ("upper bound", 400)
    assert (got["first_d"], got["out_of_order"]) == (8, [])  # every run learned: none short
    # larger sizes under the level after a smaller one reached it: the fit's point is pulled
    # up past the run that learned, and the words say why the runs only bound it
    late = [(8, 400, 0.3), (9, 700, 0.5), (12, 1400, 0.8), (14, 2000, 0.3), (16, 2600, 0.2)]
    got = locate(late, est | {"params_p80": 1800.0})
    assert (got["kind"], got["d"], got["first_d"], got["out_of_order"]) == (
        "lower bound",
        9,
        12,
        [14, 16],
    )
    words = transition_words(got, "ADD")
    assert words.startswith("ADD reached its 80% level at no size up to 700 parameters (d = 9")
    assert "reached it at d = 12, but runs at the larger d = 14, 16 did not" in words
    assert "but runs" not in transition_words(locate(one_above, est), "ADD")
    # a bound against a located point divides by the point's interval end on the safe side
    point = {"kind": "point"}
    located = {"params_p80": 100.0, "interval_params": [50.0, 200.0]}
    lower = {"kind": "lower bound", "params": 1000.0}
    b = factor_bound(lower, {}, point, located)
    assert (b["form"], b["value"], b["at_median"]) == ("lower bound", 5.0, 10.0)
    b = factor_bound(point, located, lower, {})
    assert (b["form"], b["value"]) == ("upper bound", 0.2)  # the baseline's upper end / bound
    assert factor_bound(lower, {}, lower, {})["form"] == "none"
    assert factor_bound(point, located, point, located)["form"] == "point"


def test_a_baseline_that_never_learns_gives_a_bound(studies):
    url, names, tmp = studies
    collected = collect(url, [names["never"], names["joint"]], [names["never"]])
    base, joint = collected.studies
    assert max(r["accuracy"] for r in base.runs) < 0.4  # it never learned
    largest = max(r["params"] for r in base.runs)
    assert base.transition["kind"] == "lower bound" and base.transition["params"] == largest
    assert base.transition["d"] == max(SIZES)
    assert joint.transition["kind"] == "point"
    r = joint.reduction
    assert r["form"] == "lower bound"
    hi = joint.estimate["interval_params"][1]
    assert r["bound"]["value"] == pytest.approx(largest / hi)
    assert r["bound"]["at_median"] == pytest.approx(largest / joint.estimate["params_p80"])
    # At the half-way checkpoint the joint runs sat at chance too: no factor there, not even a
    # bound; at the end, the same bound as the study's.
    forms = [b["form"] for b in joint.budget_reduction]
    assert forms == ["none", "lower bound"]
    assert "neither transition is located" in joint.budget_reduction[0]["note"]
    assert joint.budget_reduction[1]["bound"]["value"] == pytest.approx(r["bound"]["value"])

    out = tmp / "never"
    results = write_report(collected, out)
    value = f"{r['bound']['value']:.3g}x"
    finding = next(f for f in results["findings"] if f.startswith(joint.label + ":"))
    assert f"at least {value} smaller than" in finding
    assert "for the sizes and seeds run" in finding and f"{largest:,.0f} parameters" in finding
    assert f"{r['factor']:.2f}x" not in finding  # the prior's factor is not the headline
    row = next(c for c in results["comparison"] if c["name"] == joint.name)
    assert row["ratio"]["form"] == "lower bound"
    assert row["ratio"]["bound"]["value"] == pytest.approx(r["bound"]["value"])
    summary = (out / "summary.md").read_text()
    html = (out / "index.html").read_text()
    assert f">= {r['bound']['value']:.2f}x (bound)" in summary
    assert f"> {largest:,.0f}" in summary and "not located" in summary
    assert f"at least {value} smaller" in html and f"&gt; {largest:,.0f}" in html
    data = {s["data"]["name"]: s["data"] for s in results["studies"]}
    assert data[base.name]["transition"]["kind"] == "lower bound"

    # Rendered again from its results.json alone: the same bounds.
    again = {s.name: s for s in load_results(out / "results.json").studies}
    read = again[joint.name].reduction
    assert read["bound"] == pytest.approx(r["bound"]) and read["form"] == r["form"]
    assert read["factor"] == pytest.approx(r["factor"])
    assert again[base.name].transition == base.transition
    assert [b["form"] for b in again[joint.name].budget_reduction] == forms


def test_located_studies_give_a_point_with_its_interval(studies):
    url, names, tmp = studies
    collected = collect(url, [names["base7"], names["joint7"]], [names["base7"]])
    base, joint = collected.studies
    assert base.transition["kind"] == joint.transition["kind"] == "point"
    assert base.transition["above"] >= 2 and base.transition["below"] >= 2
    r = joint.reduction
    assert r["form"] == "point" and r["bound"] is None
    lo, hi = r["interval"]
    assert 1 < lo <= r["factor"] <= hi  # MAX alone needs the larger model
    results = write_report(collected, tmp / "located")
    finding = next(f for f in results["findings"] if f.startswith(joint.label + ":"))
    assert f"90%: {lo:.2f} - {hi:.2f}x" in finding and "at least" not in finding
    # the budget's half-way checkpoint: all at chance, no factor; the end: the point
    assert [b["form"] for b in joint.budget_reduction] == ["none", "point"]


def test_the_small_recipe_round_trips_through_a_study_and_a_report(studies):
    url, names, tmp = studies
    name = names["small"]
    assert "-small-" in name
    collected = collect(url, [name])
    (s,) = collected.studies
    assert s.settings.recipe == "small" and s.settings.model_config(8).init_std == 0.02
    assert s.label.startswith("MAX, mod 5 (small")
    out = tmp / "small"
    results = write_report(collected, out)
    assert results["comparison"][0]["label"] == s.label
    data = results["studies"][0]["data"]
    assert data["title"] == s.label and data["settings"]["train"]["recipe"] == "small"
    assert f"### {s.label}" in (out / "summary.md").read_text()
    assert s.label in (out / "index.html").read_text()
    (again,) = load_results(out / "results.json").studies
    assert again.settings == s.settings and again.label == s.label


# The never-learning study's settings as `threshold find` takes them (_store's, with "fast").
NEVER_FIND = ["--tasks", "max", "--mod", "5", "--measure", "max", "--n-train", "2000",
              "--n-test", "100", "--steps", STEPS, "--d-lo", "8", "--d-hi", "48",
              "--checkpoints", "0.5,1", "--schedule", "constant"]  # fmt: skip


def test_every_view_of_a_bound_study_says_it_is_a_bound(studies, cli):
    """Issue 62: a study whose runs only bound its 80% point is shown as a bound by every view,
    not only by the report: find's last lines (and --json), status, the dashboard's note and
    attribute, and find_threshold's dict; the posterior's median only after it, as context."""
    from threshold import find_threshold
    from threshold.report.dashboard_note import NOTE_RENDER
    from threshold.search.find import snapshot
    from threshold.search.notes import write_all_notes
    from threshold.search.study import RESULT_ATTR

    url, names, _ = studies
    never, joint = names["never"], names["joint"]
    snap = snapshot(url, never)
    largest = max(r["params_total"] for r in snap["trials"])
    ans = snap["answer"]
    assert (ans["kind"], ans["params"], ans["d"], ans["located"]) == (
        "lower bound", largest, max(SIZES), False,
    )  # fmt: skip
    bound = f"> {largest:,} params (d > {max(SIZES)}), not located: no run reached the 80% level"
    median = f"{snap['estimate']['params_p80']:,.0f}"
    assert snapshot(url, joint)["answer"]["located"]  # the located one stays a point

    # find: a study already run (--workers 0 starts none), its last line the bound, then the
    # median as context only
    found = cli(["find", *NEVER_FIND, "--storage", url, "--workers", "0"])
    assert found.exit_code == 0, (found.stderr, found.exception)
    last = found.stdout.strip().splitlines()[-1]
    assert last.startswith(bound) and last.endswith(
        "context only (the curve's guess beyond the runs, not measured)"
    ), found.stdout
    assert f"median {median} params" in last and "80% point:" not in found.stdout
    found = cli(["find", *NEVER_FIND, "--storage", url, "--workers", "0", "--json"])
    report = json.loads(found.stdout)
    assert report["located"] is False and report["answer"]["kind"] == "lower bound"

    # status: the bound in the 80% point column, "not located" in the interval's
    status = cli(["status", "--storage", url])
    line = next(x for x in status.stdout.splitlines() if never in x)
    assert f"> {largest:,}" in line and "not located" in line and median not in line
    assert "not located: the runs only bound the 80% point" in status.stdout
    (row,) = [r for r in json.loads(cli(["status", "--storage", url, "--json"]).stdout)
              if r["study"] == never]  # fmt: skip
    assert row["answer"]["kind"] == "lower bound"

    # the dashboard: the note's headline, the study's attribute and the figure's title
    storage = open_storage(url)
    write_all_notes(storage, NOTE_RENDER)
    study = optuna.load_study(study_name=never, storage=storage)
    from threshold.search.dashboard_attrs import get_note

    note = get_note(study)
    assert note.splitlines()[0].endswith(f"80% point > {largest:,} parameters, not located")
    assert "posterior median, context only" in note
    assert study.user_attrs[RESULT_ATTR] == f"> {largest:,} parameters, not located"
    joint_study = optuna.load_study(study_name=joint, storage=storage)
    assert "not located" not in joint_study.user_attrs[RESULT_ATTR]

    # find_threshold: an explicit key (its budget used up: no run to train)
    options = dict(mod=5, measure="max", n_train=2000, n_test=100, steps=STEPS, d_lo=8, d_hi=48,
                   checkpoints=(0.5, 1.0), schedule="constant", budget=len(SIZES))  # fmt: skip
    got = find_threshold("max", storage=url, study=never, device="cpu", **options)
    assert got["located"] is False
    assert got["bound"] == {"kind": "lower bound", "params": largest, "d": max(SIZES)}
    assert got["answer"].startswith(bound)
