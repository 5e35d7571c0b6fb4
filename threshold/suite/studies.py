"""A suite's studies: searched together by shared workers (the default), or one after the other.

Each study is created (or found again: its name is derived from its settings); a study whose
policy has stopped is skipped without starting a worker, so running a suite again continues where
it was interrupted. Shared (:func:`~threshold.search.find_many.run_searches`), every study left to
run is searched at once by ``workers`` processes of the shared worker
(:mod:`threshold.search.shared`): the runnable trials of all of them train in shared packs, each
study deciding its own sizes, and a study ends (``study_end``) when its last run does. One at a
time, each is searched by workers of its own (:func:`~threshold.search.find.run_search`), as
``threshold find`` does it. Each study's runs, seeds and estimates are the same either way.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from threshold.config import Execution
from threshold.errors import ThresholdError
from threshold.search.find import Interrupted, run_search
from threshold.search.find_many import run_searches
from threshold.search.record import study_names
from threshold.search.study import create_or_load_study
from threshold.suite.plan import study_state

__all__ = ["Event", "SuiteRunError", "make_studies", "run_studies"]


class SuiteRunError(ThresholdError):
    """A step of a suite failed (a study's workers exited with an error)."""


@dataclass(frozen=True)
class Event:
    """Progress of a suite run.

    ``kind``: ``study_start`` / ``study_skip`` / ``trial`` / ``study_end``, ``transfer_start`` /
    ``transfer_phase`` / ``transfer_skip`` / ``transfer_end``, ``analysis_start`` /
    ``analysis_skip`` / ``analysis_end`` / ``analysis_failed``, ``report``; ``label``: the study,
    transfer or report it is about; ``info``: the details (the study name, a trial row of
    :func:`threshold.search.find.snapshot`, the estimate, ...).
    """

    kind: str
    label: str = ""
    info: dict = field(default_factory=dict)


def _run_study(study, db, execution: Execution, emit, poll_s, info) -> dict:
    # A study found again must have the same settings, but for its budget and precision
    create_or_load_study(study.settings, db, study.name)
    known = set(study_names(db))
    state = study_state(db, study, known)
    info = info | {"study": study.name, "n_runs": state.n_complete}
    if state.done:
        emit(
            Event(
                "study_skip",
                study.label,
                info | {"reason": state.reason, "estimate": state.estimate, "answer": state.answer},
            )
        )
        return state.to_json() | {"ran": False}
    pool = {"workers": execution.workers, "trials_at_once": execution.trials_at_once}
    emit(Event("study_start", study.label, info | pool))
    t0 = time.perf_counter()
    try:
        run_search(
            study.settings,
            execution,
            study.name,
            poll_s=poll_s,
            on_run=lambda row, snap: emit(
                Event(
                    "trial",
                    study.label,
                    {
                        "study": study.name,
                        "trial": row,
                        "estimate": snap["estimate"],
                        "answer": snap["answer"],
                    },
                )
            ),
        )
    except Interrupted:
        raise KeyboardInterrupt from None
    except ThresholdError as e:
        raise SuiteRunError(f"{study.label!r}: {e}") from None
    state = study_state(db, study, known | {study.name})
    emit(
        Event(
            "study_end",
            study.label,
            info
            | {
                "n_runs": state.n_complete,
                "reason": state.reason,
                "estimate": state.estimate,
                "answer": state.answer,
                "wall_s": round(time.perf_counter() - t0, 1),
            },
        )
    )
    return state.to_json() | {"ran": True}


def make_studies(studies: list, db) -> list:
    """Each study of ``studies`` created, or found again (with the same settings, but for its
    budget and precision), and nothing trained: its state, in order."""
    for study in studies:
        create_or_load_study(study.settings, db, study.name)
    known = set(study_names(db))
    return [study_state(db, study, known) for study in studies]


def run_studies(studies: list, db, execution: Execution, emit, poll_s: float, shared: bool) -> list:
    """Each study of ``studies`` searched until its policy stops (or skipped, done before): its
    row of the suite's record, in order. ``shared``: all at once, by shared workers."""
    if not shared:
        total = len(studies)
        return [
            _run_study(study, db, execution, emit, poll_s, {"index": i + 1, "total": total})
            for i, study in enumerate(studies)
        ]
    states = make_studies(studies, db)
    known = set(study_names(db))
    rows: dict[str, dict] = {}
    left: dict[str, tuple] = {}  # by study name: (the suite's study, its event info)
    for i, (study, state) in enumerate(zip(studies, states, strict=True)):
        info = {"index": i + 1, "total": len(studies), "study": study.name}
        info |= {"n_runs": state.n_complete}
        if state.done:
            emit(Event("study_skip", study.label, info | _ended(state)))
            rows[study.name] = state.to_json() | {"ran": False}
            continue
        pool = {"workers": execution.workers, "trials_at_once": execution.trials_at_once}
        emit(Event("study_start", study.label, info | pool | {"shared": True}))
        left[study.name] = (study, info)
    if not left:
        return [rows[s.name] for s in studies]
    t0 = time.perf_counter()

    def end(name: str, final: bool = False) -> None:  # final: its workers have ended
        study, info = left[name]
        state = study_state(db, study, known)
        if state.done or final:
            rows[name] = state.to_json() | {"ran": True}
            wall = {"wall_s": round(time.perf_counter() - t0, 1), "n_runs": state.n_complete}
            emit(Event("study_end", study.label, info | _ended(state) | wall))

    def on_run(name: str, row: dict, snap: dict) -> None:
        study, _ = left[name]
        emit(Event("trial", study.label, {"study": name, "trial": row} | _answer(snap)))
        if name not in rows:
            end(name)

    try:
        run_searches([(s.settings, s.name) for s, _ in left.values()], execution, on_run, poll_s)
    except Interrupted:
        raise KeyboardInterrupt from None
    except ThresholdError as e:
        labels = ", ".join(repr(s.label) for s, _ in left.values())
        raise SuiteRunError(f"{labels}: {e}") from None
    for name in left:
        if name not in rows:
            end(name, final=True)
    return [rows[s.name] for s in studies]


def _ended(state) -> dict:
    return {"reason": state.reason, "estimate": state.estimate, "answer": state.answer}


def _answer(snap: dict) -> dict:
    return {"estimate": snap["estimate"], "answer": snap["answer"]}
