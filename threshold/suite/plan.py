"""A suite's state and its dry run, read without writing: where each study stands, which
transfer experiments are done, and what :func:`threshold.suite.run.run_suite` would do.

Reads the storage through :mod:`threshold.search.record` (Optuna and SQLAlchemy); no torch, no
analysis and no report here, so ``threshold run --dry-run`` loads none of them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy.engine import make_url

from threshold.search.record import read_study, stop_status, study_names
from threshold.search.study import open_storage, sqlite_missing
from threshold.suite.spec import Suite, SuiteError, SuiteStudy, TransferSpec

__all__ = [
    "SUITE_JSON",
    "SURVEY_DIR",
    "TRANSFER_DIR",
    "StudyState",
    "check_reports_folder",
    "plan",
    "public_url",
    "study_state",
    "study_states",
    "transfer_file",
]

TRANSFER_DIR = Path("studies/transfer")  # one JSON per transfer experiment (its settings' hash)
SUITE_JSON = "suite.json"  # the record of a suite's last run, in its reports folder
SURVEY_DIR = "surveys"  # in the reports folder: one JSON per [[survey]], every scored run


@dataclass(frozen=True)
class StudyState:
    """Where a suite study stands in the storage."""

    label: str
    name: str
    exists: bool
    n_complete: int = 0
    n_pending: int = 0  # running or waiting trials
    done: bool = False  # the policy stops: nothing left to run
    reason: str | None = None  # why it stopped (precision, budget, ...)
    estimate: dict | None = None
    answer: dict | None = None  # located or bound (threshold.search.bounds.answer)

    @property
    def status(self) -> str:
        if not self.exists:
            return "new"
        if self.done:
            return f"done ({self.reason})"
        return "to continue"

    def to_json(self) -> dict:
        return {
            "label": self.label,
            "study": self.name,
            "status": self.status,
            "exists": self.exists,
            "done": self.done,
            "stop_reason": self.reason,
            "n_runs": self.n_complete,
            "n_pending": self.n_pending,
            "estimate": self.estimate,
            "answer": self.answer,
        }


def transfer_file(suite: Suite, spec: TransferSpec) -> Path:
    """Where a transfer experiment's result goes: named by the suite, its label and settings."""
    return TRANSFER_DIR / f"{suite.name}-{spec.label}-{spec.key()}.json"


def check_reports_folder(suite: Suite) -> None:
    """Refuse a reports folder that holds something other than this suite's reports."""
    out = suite.reports_dir
    where = f"{suite.path}:{suite.line_of('reports')}"
    if out.exists() and not out.is_dir():
        raise SuiteError(f"{where}: reports folder {str(out)!r} is a file: set reports to a folder")
    if not out.is_dir() or not any(out.iterdir()):
        return
    record = out / SUITE_JSON
    try:
        owner = json.loads(record.read_text()).get("name") if record.is_file() else None
    except (OSError, ValueError, AttributeError):
        owner = None
    if owner != suite.name:
        raise SuiteError(
            f"{where}: reports folder {str(out)!r} is not empty and holds no report of suite "
            f"{suite.name!r}: set reports to a new folder, or empty that one"
        )


def study_state(db, study: SuiteStudy, known: set[str]) -> StudyState:
    """The study's runs and whether its search stopped, read from the storage (no writes).

    Stopped is the stop status under the file's stopping rules (the policy's rules read off the
    estimate the worker stored after its last run: a budget raised in the file makes a stopped
    study go on); a study with running or waiting trials is not done.
    """
    name = study.name
    if name not in known:
        return StudyState(study.label, name, exists=False)
    view = read_study(db, name)
    completed, pending = view.split()
    estimate = view.estimate.to_dict() if view.estimate is not None else None
    stop = stop_status(study.settings, view.estimate, view.runs)
    done = not pending and stop.stopped
    reason = stop.reason if done else None
    return StudyState(
        study.label, name, True, len(completed), len(pending), done, reason, estimate, view.answer
    )


def study_states(suite: Suite) -> list[StudyState]:
    """Every study of the suite with its state; a storage that does not exist is not created."""
    url = suite.execution.storage_url  # --storage, else its key, else resolve_storage's choice
    if sqlite_missing(url):
        return [StudyState(s.label, s.name, exists=False) for s in suite.studies]
    db = open_storage(url, create=False)
    known = set(study_names(db))
    return [study_state(db, s, known) for s in suite.studies]


def plan(suite: Suite, only: list[str] | None = None) -> dict:
    """What ``run_suite`` would do, read without writing anything: the dry run."""
    selected = suite.select(only)
    url = suite.execution.storage_url
    check_reports_folder(suite)
    return {
        "suite": str(suite.path),
        "name": suite.name,
        "storage": public_url(url),
        "storage_exists": not sqlite_missing(url),
        "studies": [s.to_json() for s in study_states(selected)],
        "transfers": [
            {
                "label": t.label,
                "file": str(transfer_file(suite, t)),
                "done": transfer_file(suite, t).is_file(),
            }
            for t in selected.transfers
        ],
        "analyses": [{"study": a.study, "pick": a.pick, "d": a.d} for a in selected.analyses],
        "comparisons": [
            {"studies": list(c.studies), "match": c.match, "d": c.d} for c in selected.comparisons
        ],
        "surveys": [{"study": v.study, "min_accuracy": v.min_accuracy} for v in selected.surveys],
        "reports": [
            {
                "name": r.name,
                "folder": str(suite.reports_dir / r.name),
                "baseline": r.baseline,
                "studies": list(r.studies),
                "transfers": list(r.transfers),
            }
            for r in suite.reports
        ],
    }


def public_url(url: str) -> str:
    """The storage URL with any password hidden."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # not a URL sqlalchemy reads: nothing to hide
        return url
