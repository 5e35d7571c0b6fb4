"""The budget axis end to end: two tiny real studies with checkpoints, their report's Budget section
and figure, factors at each checkpoint against a same-recipe baseline only, and the same numbers
from the report's results.json read back."""

from __future__ import annotations

import json

import pytest

from threshold.config import Execution
from threshold.report import collect, load_results
from threshold.report.write import write_report
from threshold.search.spec import StudySettings
from threshold.search.study import create_or_load_study, open_storage
from threshold.search.worker import run_worker

# Depth 1: 9-token sequences (depth 2: 60); decoding them is most of a tiny run's CPU.
OPTIONS = dict(mod=5, depth=1, n_train=2000, n_test=100, steps=80, budget=4, d_lo=4, d_hi=16,
               schedule="constant", checkpoints=(0.5, 1.0))  # fmt: skip


@pytest.fixture(scope="module")
def studies(tmp_path_factory):
    """The three studies as `find --trials-at-once 4` makes and runs them, in this process (its
    worker process would cost a fresh interpreter each)."""
    tmp = tmp_path_factory.mktemp("budget")
    mp = pytest.MonkeyPatch()
    mp.setenv("THRESHOLD_ARTIFACTS", str(tmp / "art"))
    url = f"sqlite:///{tmp}/s.db"
    storage = open_storage(url)
    execution = Execution(url, trials_at_once=4, device="cpu", cache_dir=tmp / "cache")
    names = []
    for tasks, extra in (("med", {}), ("max,med", {}), ("med", {"weight_decay": 0.01})):
        settings = StudySettings.from_options(tasks, measure="med", **OPTIONS, **extra)
        name = create_or_load_study(settings, storage).study_name
        assert run_worker(name, execution) == OPTIONS["budget"]
        names.append(name)
    yield url, names, tmp
    mp.undo()


def test_a_report_shows_the_estimate_and_factor_at_each_checkpoint(studies):
    url, (alone, joint, other_recipe), tmp = studies
    collected = collect(url, [alone, joint, other_recipe], [alone])
    by_name = {s.name: s for s in collected.studies}
    for s in by_name.values():
        assert [b["step"] for b in s.budget] == [40, 80]
        assert all(
            b["n_runs"] == 4 and b["interval_params"][0] <= b["params_p80"] for b in s.budget
        )
        # the last checkpoint is the run's end: the study's own estimate
        assert s.budget[-1]["params_p80"] == pytest.approx(s.estimate["params_p80"], rel=1e-3)
    assert [b["step"] for b in by_name[joint].budget_reduction] == [40, 80]
    assert by_name[joint].budget_reduction[-1]["factor"] == pytest.approx(
        by_name[joint].reduction["factor"], rel=1e-6
    )
    # a study trained with another recipe gets no factor against this baseline
    assert by_name[other_recipe].reduction is None
    assert by_name[other_recipe].budget_reduction == []
    assert "another recipe" in by_name[other_recipe].reduction_note

    out = tmp / "report"
    results = write_report(collected, out)
    assert (out / "budget.png").stat().st_size > 10_000
    assert "## Budget" in (out / "summary.md").read_text()
    assert 'id="budget-table"' in (out / "index.html").read_text()
    assert len(results["budget"]) == 6
    again = {s.name: s for s in load_results(out / "results.json").studies}
    # pytest.approx takes no list of dicts (pytest 9.2 refuses one even when equal): row by row
    read, made = again[joint].budget_reduction, by_name[joint].budget_reduction
    assert [sorted(r) for r in read] == [sorted(m) for m in made]
    for r, m in zip(read, made, strict=True):
        assert {k: pytest.approx(v) for k, v in r.items()} == m
    stored = json.loads((out / "results.json").read_text())
    assert any(s["data"]["budget"] for s in stored["studies"])


UNCHECKED = "the runs' accuracies at that checkpoint are not kept"


def test_the_unchecked_sentence_only_where_a_row_is_unchecked(studies):
    """Read from storage, every checkpoint keeps its runs' accuracies: no row is unchecked and
    the pages do not explain the word. A results.json from before they were kept (no "runs" at
    the half-way checkpoint) marks those rows unchecked, and the pages say what that means."""
    url, (alone, joint, _), tmp = studies
    out = tmp / "unchecked-none"
    results = write_report(collect(url, [alone, joint], [alone]), out)
    assert results["budget"]
    assert UNCHECKED not in (out / "summary.md").read_text()
    assert UNCHECKED not in (out / "index.html").read_text()
    assert "(unchecked)" not in (out / "summary.md").read_text()

    older = json.loads((out / "results.json").read_text())
    for s in older["studies"]:
        for b in s["data"]["budget"]:
            if b["step"] == 40:
                del b["runs"]
    (out / "results.json").write_text(json.dumps(older))
    again = tmp / "unchecked-some"
    write_report(load_results(out / "results.json"), again)
    summary, html = (again / "summary.md").read_text(), (again / "index.html").read_text()
    assert UNCHECKED in summary and UNCHECKED in html
    assert "(unchecked)" in summary and ">unchecked</span>" in html
