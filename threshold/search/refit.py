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

from threshold.config import TrainConfig
from threshold.errors import ThresholdError
from threshold.search.fit import transition_estimate
from threshold.search.sampler import policy_settings, split_trials
from threshold.search.study import SearchConfig, StudySettings
from threshold.tasks import TaskConfig

__all__ = ["compare", "refit_results", "refit_storage", "refit_study"]

log = logging.getLogger(__name__)

FLAG_GAP = 0.2  # the report flags a study whose asymptote lies this far below its best run


def _top_runs(completed, d_min: float) -> list[float]:
    return [y for d, y in completed if d >= d_min]


def compare(name: str, label: str, old: dict | None, new: dict, completed) -> dict:
    """One study's old and new estimate as a small row (plain numbers)."""
    best = max((y for _, y in completed), default=None)
    d_top = max((d for d, _ in completed), default=None)
    row = {
        "study": name,
        "label": label,
        "n_runs": len(completed),
        "best_run": best,
        "largest_d": d_top,
        "level": new.get("level"),
        "chance_corrected": new.get("chance_corrected"),
        "old": None,
        "new": {
            k: new.get(k)
            for k in ("params_p80", "d_p80", "interval_params", "asymptote", "asymptote_interval")
        },
    }
    if old:
        keys = ("params_p80", "d_p80", "interval_params", "asymptote")
        row["old"] = {k: old.get(k) for k in keys}
    for key in ("old", "new"):
        est = row[key]
        if est and best is not None and est.get("asymptote") is not None:
            est["flagged"] = bool(best - est["asymptote"] > FLAG_GAP)
    return row


def refit_study(
    settings: StudySettings,
    completed,
    chance: float,
    chance_corrected: bool | None = None,
) -> dict:
    """The estimate of one study's completed runs, (d, accuracy) pairs, with today's posterior."""
    if chance_corrected is not None:
        search = dataclasses.replace(settings.search, chance_corrected=chance_corrected)
        settings = dataclasses.replace(settings, search=search)
    return transition_estimate(policy_settings(settings, chance), completed)


def _settings_of(stored: dict) -> StudySettings:
    try:
        return StudySettings(
            TaskConfig.from_dict(stored["task"]),
            TrainConfig.from_dict(stored["train"]),
            SearchConfig(**stored["search"]),
            tuple(stored.get("pretrain", ())),
        )
    except (KeyError, TypeError, ValueError) as e:
        raise ThresholdError(f"study settings cannot be read ({e})") from None


def refit_results(path: str | Path, chance_corrected: bool | None = None) -> list[dict]:
    """Rows for every study in a report's ``results.json``: its recorded runs refitted."""
    path = Path(path)
    try:
        results = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise ThresholdError(f"{path} cannot be read as a report's results.json: {e}") from None
    rows = []
    for entry in results.get("studies", []):
        study = entry.get("data", entry)  # format 2 keeps the study's data beside its page
        old = study.get("estimate") or {}
        if old.get("chance") is None:
            log.info("study %s has no stored chance rate: skipped", study.get("name"))
            continue
        completed = [(int(r["d"]), float(r["accuracy"])) for r in study.get("runs", [])]
        if not completed:
            continue
        settings = _settings_of(study["settings"])
        new = refit_study(settings, completed, float(old["chance"]), chance_corrected)
        rows.append(compare(study["name"], study.get("label", ""), old, new, completed))
    return rows


def refit_storage(url: str | None = None, chance_corrected: bool | None = None) -> list[dict]:
    """Rows for every threshold study in a storage that has completed runs and an estimate."""
    import optuna

    from threshold.search.study import open_storage, storage_url

    storage = open_storage(storage_url(url), create=False)
    rows = []
    for summary in storage.get_all_studies():
        try:
            settings = StudySettings.from_attrs(summary.user_attrs)
        except ThresholdError:
            continue
        raw = summary.user_attrs.get("estimate")
        old = json.loads(raw) if raw else {}
        if old.get("chance") is None:
            log.info("study %s has no stored estimate: skipped", summary.study_name)
            continue
        study = optuna.load_study(study_name=summary.study_name, storage=storage)
        completed, _ = split_trials(study.get_trials(deepcopy=False))
        if not completed:
            continue
        new = refit_study(settings, completed, float(old["chance"]), chance_corrected)
        label = f"{'+'.join(settings.task.ops)} ({settings.task.measured_op})"
        rows.append(compare(summary.study_name, label, old, new, completed))
    return rows
