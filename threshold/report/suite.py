"""A suite's ``README.md``: its reports, each one's transitions, and its surveys.

Built from the suite's record (what ``threshold run`` writes as ``suite.json``) into frozen
dataclasses and rendered by ``templates/suite.md.j2``, the renderer of the report pages. The
transitions are the reports' own ``comparison`` rows, so README and report pages agree.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from threshold.report.render import render
from threshold.report.text import factor, interval, point, point_d, spread_words

__all__ = ["ReportLine", "SuiteReadme", "SurveyRow", "TransitionLine", "suite_readme"]


@dataclass(frozen=True)
class TransitionLine:
    study: str  # the suite's label
    measured_op: str
    runs: int
    p80: str  # cells, written as the report's table writes them
    interval: str
    d: str
    against: str  # the baseline's suite label, "baseline", or "" without one
    factor: str
    width: str


@dataclass(frozen=True)
class ReportLine:
    name: str
    status: str  # "written" or why not
    n_studies: int
    baselines: tuple[tuple[str, str], ...]  # (suite label, study name)
    rows: tuple[TransitionLine, ...]


@dataclass(frozen=True)
class SurveyRow:
    study: str
    min_accuracy: float
    runs: int
    ordering: str
    cyclic: str
    attn_share: str
    separation: str


@dataclass(frozen=True)
class SuiteReadme:
    name: str
    path: str
    sha256: str
    git_commit: str
    dirty: bool
    storage: str
    finished: str
    reports: tuple[ReportLine, ...]
    surveys: tuple[SurveyRow, ...]
    rendered_again: str  # when and how the pages were rendered again from results.json, or ""


def _line(row: dict, labels: dict[str, str]) -> TransitionLine:
    ok = row["status"] == "ok"
    located = ok and (row.get("transition") or {}).get("kind", "point") == "point"
    ratio = row["ratio"]
    if row["is_baseline"]:
        against = "baseline"
    else:
        against = labels.get(row.get("baseline"), "") if row.get("baseline") else ""
    cell = factor(ratio) if ratio else (row["no_ratio"] if row.get("baseline") else "")
    if ratio and ratio["kind"] == "size ratio":
        cell += ", another op"
    if ok and not located:
        width = "not located"
    elif ok:
        width = f"{row['interval_ratio']:.2f}x" + (
            f" > {row['precision']:g}x" if row["interval_ratio"] > row["precision"] else ""
        )
        width += ", plateau?" if row["warning"] else ""
    else:
        width = row["status"].replace("_", " ")
    return TransitionLine(
        study=row.get("suite_label") or row["label"],
        measured_op=row["measured_op"],
        runs=row["n_runs"],
        p80=point(row) if ok else "-",
        interval=interval(row["interval_params"]) if located else "not located" if ok else "-",
        d=point_d(row) if ok else "-",
        against="" if row["is_baseline"] else against,
        factor="baseline" if row["is_baseline"] else cell,
        width=width,
    )


def _report(r: dict) -> ReportLine:
    if r["status"] != "written":
        return ReportLine(r["name"], r["status"], len(r["studies"]), (), ())
    labels = {row["name"]: row.get("suite_label") or row["label"] for row in r["comparison"]}
    baselines = tuple((labels.get(name, name), name) for name in r.get("baselines") or [])
    rows = tuple(_line(row, labels) for row in r["comparison"])
    return ReportLine(r["name"], "written", len(r["studies"]), baselines, rows)


def _survey(v: dict) -> SurveyRow:
    summ = v["summary"]
    beyond = summ["beyond_null"]
    ks = Counter(summ["cyclic_frequencies"])
    k_words = ", ".join(f"{k} ({n})" for k, n in sorted(ks.items())) or "-"
    separation = ", ".join(
        f"{key.removeprefix('separation ')} {n}"
        for key, n in beyond.items()
        if key.startswith("separation ")
    )
    return SurveyRow(
        study=v["study"],
        min_accuracy=v["min_accuracy"],
        runs=summ["n_runs"],
        ordering=f"{spread_words(summ['ordering'])}; {beyond['ordering']} beyond",
        cyclic=f"{spread_words(summ['cyclic'])}; {beyond['cyclic']} beyond; k: {k_words}",
        attn_share=spread_words(summ["attn_share"]),
        separation=separation,
    )


def suite_readme(record: dict) -> str:
    """The README of a suite's reports folder, from its record."""
    view = SuiteReadme(
        name=record["name"],
        path=record["suite"],
        sha256=record["suite_sha256"],
        git_commit=record["git_commit"],
        dirty=record["git_dirty"],
        storage=record["storage"],
        finished=record["finished"],
        reports=tuple(_report(r) for r in record["reports"]),
        surveys=tuple(_survey(v) for v in record.get("surveys", []) if v["status"] == "done"),
        rendered_again=record.get("rendered_again", ""),
    )
    return render("suite.md.j2", s=view)
