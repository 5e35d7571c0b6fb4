"""Refit: existing studies re-read with the current posterior, old and new estimates side by side.

Nothing is trained and nothing is written: a study's completed runs (size and accuracy of the
measured op) go through ``transition_estimate`` again, with the study's stored settings and the
chance rate stored with its old estimate (the worker's majority rate). Two sources: a storage
(every threshold study in it, through :mod:`threshold.search.study`), or the ``results.json`` a
report wrote (its studies' settings, runs and estimates), which is how the committed CPU suite is
refitted without its database. The level definition can be overridden (``chance_corrected``) to
see what the other reading of "80% of the asymptote" gives.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from pathlib import Path

from threshold.errors import ThresholdError
from threshold.search.fit import PLATEAU_GAP, stray_mass, strays, transition_estimate
from threshold.search.record import Estimate, read_studies
from threshold.search.sampler import policy_settings
from threshold.search.spec import StudySettings
from threshold.search.study import open_storage

__all__ = ["compare", "refit_results", "refit_storage", "refit_study"]

log = logging.getLogger(__name__)


def compare(
    name: str,
    label: str,
    settings: StudySettings,
    old: Estimate | None,
    new: Estimate,
    completed: list[tuple[int, float]],
) -> dict:
    """One study's old and new estimate as a small row (plain numbers); ``settings`` are those
    ``new`` was fitted with."""
    best = max((y for _, y in completed), default=None)

    def numbers(est: Estimate) -> dict:
        interval = est.interval_params
        row = {
            "params_p80": est.params_p80,
            "d_p80": est.d_p80,
            "interval_params": None if interval is None else list(interval),
            "asymptote": est.asymptote,
        }
        if best is not None and est.asymptote is not None:
            row["flagged"] = bool(best - est.asymptote > PLATEAU_GAP)
        stray = stray_mass(est.to_dict())
        if stray is not None:  # estimates stored before the offset sd was learned have none
            row["stray_mass"] = stray
            row["strays"] = strays(est.to_dict())
        return row

    new_row = numbers(new)
    new_row["asymptote_interval"] = new.to_dict().get("asymptote_interval")  # not typed
    return {
        "study": name,
        "label": label,
        "n_runs": len(completed),
        "best_run": best,
        "largest_d": max((d for d, _ in completed), default=None),
        "level": settings.search.level,
        "chance_corrected": settings.search.chance_corrected,
        "old": numbers(old) if old is not None else None,
        "new": new_row,
    }


def _refit(
    name: str,
    label: str,
    settings: StudySettings,
    old: Estimate | None,
    chance: float,
    completed: list[tuple[int, float]],
    chance_corrected: bool | None,
) -> dict:
    settings = _reading(settings, chance_corrected)
    return compare(name, label, settings, old, refit_study(settings, completed, chance), completed)


def _reading(settings: StudySettings, chance_corrected: bool | None) -> StudySettings:
    """``settings`` with the level read the other way when ``chance_corrected`` says so."""
    if chance_corrected is None:
        return settings
    search = dataclasses.replace(settings.search, chance_corrected=chance_corrected)
    return dataclasses.replace(settings, search=search)


def refit_study(
    settings: StudySettings,
    completed: list[tuple[int, float]],
    chance: float,
    chance_corrected: bool | None = None,
) -> Estimate:
    """The estimate of one study's completed runs, (d, accuracy) pairs, with today's posterior."""
    settings = _reading(settings, chance_corrected)
    return Estimate.from_dict(transition_estimate(policy_settings(settings, chance), completed))


def refit_results(
    path: str | Path, chance_corrected: bool | None = None, results: dict | None = None
) -> list[dict]:
    """Rows for every study in a report's ``results.json`` (its JSON ``results`` when already
    read and checked: :func:`threshold.report.results.read_results`): its runs refitted."""
    path = Path(path)
    if results is None:
        try:
            results = json.loads(path.read_text())
        except (OSError, ValueError) as e:
            raise ThresholdError(f"{path} cannot be read as a report's results.json: {e}") from None
    try:
        return _refit_entries(results, chance_corrected)
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise ThresholdError(
            f"results file {str(path)!r} does not hold a report's studies ({type(e).__name__}: "
            f"{e}): give the results.json that `threshold report` wrote"
        ) from None


def _refit_entries(results: dict, chance_corrected: bool | None) -> list[dict]:
    rows = []
    for entry in results.get("studies", []):
        study = entry.get("data", entry)  # format 2 keeps the study's data beside its page
        old = Estimate.from_dict(study["estimate"]) if study.get("estimate") else None
        if old is None or old.chance is None:
            log.info("study %s has no stored chance rate: skipped", study.get("name"))
            continue
        completed = [(int(r["d"]), float(r["accuracy"])) for r in study.get("runs", [])]
        if not completed:
            continue
        # The settings as the study stored them (one JSON value each), read as a study reads them.
        stored = {k: json.dumps(v) for k, v in study["settings"].items()}
        settings = StudySettings.from_attrs(stored)
        label = study.get("label", "")
        rows.append(
            _refit(study["name"], label, settings, old, old.chance, completed, chance_corrected)
        )
    return rows


def refit_storage(url: str, chance_corrected: bool | None = None) -> list[dict]:
    """Rows for every threshold study in a storage that has completed runs and an estimate."""
    rows = []
    for view in read_studies(open_storage(url, create=False)):
        if view.estimate is None or view.chance is None:
            log.info("study %s has no stored estimate: skipped", view.name)
            continue
        completed, _ = view.split()
        if not completed:
            continue
        settings = view.settings
        ops, measure = settings.task.ops, settings.task.measured_op
        label = "+".join(ops) + (f" ({measure})" if len(ops) > 1 else "")  # max, not max (max)
        rows.append(
            _refit(
                view.name, label, settings, view.estimate, view.chance, completed, chance_corrected
            )
        )
    return rows
