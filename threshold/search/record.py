"""The study record: every study and trial attribute threshold stores, read into typed views.

A study's settings, its transition estimate, its chance rate and its analyses are study user
attributes; each run's size, seed, counts, metrics and checkpoint are trial user attributes (small
values, JSON where they are dicts, under RDB's 2 KB limit). This module owns their keys: the worker
and the sampler write through the ``write_*`` functions, and the layers above (report, suite,
analysis, cli, the dashboard notes) read :class:`StudyView` s from :func:`read_study` and
:func:`read_studies`, never a trial or an Optuna import.

Studies written by earlier versions read unchanged: a missing attribute is ``None``, the chance rate
of a study written before it had its own attribute is read from its estimate, and unknown keys of an
estimate are kept (:meth:`Estimate.to_dict` gives back the stored dict).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import optuna
from optuna.storages import BaseStorage
from optuna.trial import FrozenTrial

from threshold.errors import ConfigError, ThresholdError
from threshold.search.bounds import answer, with_size_words
from threshold.search.objective import ObjectiveSettings
from threshold.search.runs import (
    ACCURACY,
    BUDGET,
    CHECKPOINT,
    CHECKPOINT_SHA256,
    CPU_S,
    D_MODEL,
    PARAMS_NON_EMBEDDING,
    PARAMS_TOTAL,
    PRETRAIN_ACCURACY,
    PRETRAIN_STEPS,
    REPLICATE,
    SAMPLED_ACCURACY,
    SEED,
    STEPS,
    STOP_REASON,
    STRICT_ACCURACY,
    TRAIN_S,
    WORKER,
    RunRecord,
    json_attr,
    read_run,
    read_seed,
    split_runs,
    write_cancel,
    write_decision,
    write_seed,
)
from threshold.search.settings import stop_reason
from threshold.search.spec import StudySettings, read_settings
from threshold.search.study import check_study_name, open_storage

__all__ = [
    "ANALYSIS_PREFIX",
    "Estimate",
    "RunRecord",
    "StopStatus",
    "StudyView",
    "imported_attrs",
    "queued_attrs",
    "read_grid",
    "read_run",
    "read_seed",
    "read_studies",
    "read_study",
    "split_runs",
    "stop_status",
    "storage_log_level",
    "study_names",
    "study_rows",
    "write_analysis",
    "write_cancel",
    "write_decision",
    "write_estimate",
    "write_grid",
    "write_pretrain",
    "write_result",
    "write_seed",
    "write_size",
]

log = logging.getLogger(__name__)

# Study user attributes besides the settings, which StudySettings writes and reads whole
# (to_attrs, from_attrs: task, train, search, pretrain) with version and git_commit beside them.
ESTIMATE, CHANCE = "estimate", "chance"
GRID = "grid"  # a dense grid's sizes and seeds (threshold.search.grid): its workers run the queue
ANALYSIS_PREFIX = "analysis:"  # analysis:N holds the summary of trial N's analysis

_STOP_WORDS = {
    "precision": "the 90% interval is within the precision",
    "budget": "the budget of runs is used",
    "above_range": "the transition lies above the largest allowed size",
    "below_range": "the transition lies below the smallest allowed size",
}


@dataclass(frozen=True)
class Estimate:
    """The transition estimate stored on a study (:func:`threshold.search.fit.
    transition_estimate`): its headline numbers typed, the whole dict kept for reports."""

    n_runs: int
    params_p80: float | None  # the 80% point in total parameters (posterior median)
    d_p80: float | None
    interval_params: tuple[float, float] | None  # its 90% credible interval
    interval_ratio: float | None  # hi / lo of that interval: the precision reached
    asymptote: float | None
    chance: float | None
    range_d: tuple[int, int] | None  # the d range the posterior covered
    mass_beyond_range: tuple[float, float] | None  # posterior mass below and above it
    raw: dict = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def from_dict(cls, d: dict) -> Estimate:
        def pair(key, kind=float):
            v = d.get(key)
            return None if v is None else (kind(v[0]), kind(v[1]))

        def num(key):
            v = d.get(key)
            return None if v is None else float(v)

        return cls(
            n_runs=int(d.get("n_runs", 0)),
            params_p80=num("params_p80"),
            d_p80=num("d_p80"),
            interval_params=pair("interval_params"),
            interval_ratio=num("interval_ratio"),
            asymptote=num("asymptote"),
            chance=num("chance"),
            range_d=pair("range_d", int),
            mass_beyond_range=pair("mass_beyond_range"),
            raw=dict(d),
        )

    def to_dict(self) -> dict:
        """The dict as stored (every key, also those this version does not know)."""
        return dict(self.raw)


@dataclass(frozen=True)
class StopStatus:
    reason: str | None  # why the search stops (precision, budget, above_range, below_range)
    text: str  # one sentence on where the search stands

    @property
    def stopped(self) -> bool:
        return self.reason is not None


@dataclass(frozen=True)
class StudyView:
    """A threshold study as stored: settings, runs in trial order, estimate, chance, analyses."""

    name: str
    settings: StudySettings | ObjectiveSettings  # a testbed's study, or an objective's
    runs: tuple[RunRecord, ...]
    estimate: Estimate | None
    chance: float | None  # the measured op's majority rate, which the policy was built with
    attrs: dict  # the other study attributes (version, git_commit, settings as stored, ...)
    analyses: dict[int, dict] = field(default_factory=dict)  # trial number -> summary
    stop: StopStatus = StopStatus(None, "not started: no runs yet")
    storage: Any = field(default=None, compare=False, repr=False)  # where it was read from

    @property
    def completed(self) -> list[RunRecord]:
        return [r for r in self.runs if r.complete]

    @property
    def with_checkpoint(self) -> list[RunRecord]:
        """Completed runs that kept a checkpoint: those an analysis can load."""
        return [r for r in self.completed if r.checkpoint is not None]

    @property
    def n_running(self) -> int:
        return sum(r.state == "RUNNING" for r in self.runs)

    @property
    def n_failed(self) -> int:
        """Failed runs, not counting those the policy cancelled."""
        return sum(r.state == "FAIL" and r.cancelled is None for r in self.runs)

    @property
    def answer(self) -> dict | None:
        """The study's answer, located or bound (:func:`threshold.search.bounds.answer`): what
        every view of it shows; None before an estimate."""
        estimate = self.estimate.raw if self.estimate is not None else None
        return _answer(self.runs, estimate, self.settings)

    def split(self) -> tuple[list[tuple[int, float]], list[int]]:
        """(d, accuracy) of completed runs and sizes of pending ones (:func:`split_runs`)."""
        return split_runs(self.runs)

    def at_checkpoints(self) -> list[tuple[int, int, list[tuple[int, float]]]]:
        """The budget axis: for each checkpoint step that every completed run kept, (step, median
        tokens trained by then, (d, accuracy) of each run there), the accuracy the study's
        decoding scores; [] for a study without checkpoints."""
        runs = self.completed
        if not runs or not all(r.budget for r in runs):
            return []
        key = "sampled_accuracy" if self.settings.train.decoding == "sampled" else "accuracy"
        by_step = [{b["step"]: b for b in r.budget} for r in runs]
        steps = sorted(set.intersection(*(set(b) for b in by_step)))
        out = []
        for step in steps:
            points = [b[step] for b in by_step]
            tokens = int(sorted(p["tokens"] for p in points)[len(points) // 2])
            pairs = [(r.d_model, float(p[key])) for r, p in zip(runs, points, strict=True)]
            out.append((step, tokens, pairs))
        return out

    def run(self, number: int) -> RunRecord:
        for r in self.runs:
            if r.number == number:
                return r
        last = len(self.runs) - 1
        raise ThresholdError(f"trial {number} is not in study {self.name!r} (trials 0..{last})")


def _answer(runs: Iterable[RunRecord], estimate: dict | None, settings=None) -> dict | None:
    rows = [(r.d_model, r.params_total, r.value) for r in runs if r.complete and r.params_total]
    ans = answer(rows, estimate)
    if isinstance(settings, ObjectiveSettings):  # the size axis in the user's words
        ans = with_size_words(ans, settings.size_name, settings.counted)
    return ans


def stop_status(
    settings: StudySettings, estimate: Estimate | None, runs: Sequence[RunRecord]
) -> StopStatus:
    """Whether the search has stopped, from the stored estimate and the run counts alone.

    The same rules as the policy's stop (budget used; the 90% interval within the precision; the
    posterior's mass beyond the allowed d range), read off the estimate the worker stored after its
    last run, without the look-ahead :func:`threshold.search.policy.decide` runs to pick a size.
    An estimate older than the completed runs gives "searching" until the worker refreshes it.
    """
    search = settings.search
    n_done = sum(r.complete for r in runs)
    n_pending = sum(r.pending for r in runs)
    if not n_done and not n_pending:
        return StopStatus(None, "not started: no runs yet")
    reason = None
    if n_done + n_pending >= search.budget:
        reason = "budget"
    elif estimate is None:
        return StopStatus(None, "searching: no estimate stored yet")
    elif estimate.n_runs == n_done and n_done >= 3:  # past the bracket of 3 runs
        beyond = estimate.mass_beyond_range or (0.0, 0.0)
        d_range = estimate.range_d or (search.d_lo, search.d_hi)
        limits = (search.d_min, search.d_max)  # give_up_mass: the policy's default
        reason = stop_reason(search, estimate.interval_ratio, d_range, limits, beyond)
    if reason is None:
        ratio = estimate.interval_ratio if estimate is not None else None
        width = "" if ratio is None else f", 90% interval {ratio:.3g}x wide"
        return StopStatus(
            None,
            f"searching: {n_done + n_pending} of {search.budget} runs{width} "
            f"(stops at {search.precision:g}x)",
        )
    words = _STOP_WORDS[reason]
    if reason == "precision":
        words += f" ({search.precision:g}x)"
    elif reason == "budget":
        words = f"the budget of {search.budget} runs is used"
    if n_pending:
        return StopStatus(reason, f"finishing: {words}; {n_pending} run(s) still running")
    return StopStatus(reason, f"stopped ({reason}): {words}")


# Reading -------------------------------------------------------------------------------------


def _storage(storage_or_url: BaseStorage | optuna.Study | str | None) -> BaseStorage:
    if isinstance(storage_or_url, BaseStorage):
        return storage_or_url
    if isinstance(storage_or_url, optuna.Study):
        return storage_or_url._storage
    return open_storage(storage_or_url, create=False)


def _view(name: str, user_attrs: dict, trials: list[FrozenTrial], storage) -> StudyView:
    settings = read_settings(user_attrs)
    attrs = {k: v for k, v in user_attrs.items() if not k.startswith(ANALYSIS_PREFIX)}
    raw = json_attr(attrs.pop(ESTIMATE, None))
    estimate = Estimate.from_dict(raw) if isinstance(raw, dict) else None
    chance = attrs.pop(CHANCE, None)
    if chance is None and estimate is not None:  # written before the chance had its attribute
        chance = estimate.chance
    analyses = {
        int(k[len(ANALYSIS_PREFIX) :]): json_attr(v)
        for k, v in user_attrs.items()
        if k.startswith(ANALYSIS_PREFIX)
    }
    runs = tuple(read_run(t) for t in sorted(trials, key=lambda t: t.number))
    return StudyView(
        name=name,
        settings=settings,
        runs=runs,
        estimate=estimate,
        chance=None if chance is None else float(chance),
        attrs=attrs,
        analyses=analyses,
        stop=stop_status(settings, estimate, runs),
        storage=storage,
    )


def read_study(storage_or_url: BaseStorage | str | None, name: str) -> StudyView:
    """The study ``name``; :class:`ThresholdError` when it is not there or not a threshold study.

    ``storage_or_url``: an open storage (or an Optuna study, for its storage), a URL, or None for
    ``$THRESHOLD_STORAGE`` or the default.
    """
    check_study_name(name)
    storage = _storage(storage_or_url)
    try:
        study_id = storage.get_study_id_from_name(name)
    except KeyError:
        names = [s.study_name for s in storage.get_all_studies()]
        known = ", ".join(names[:5]) or "none"
        raise ThresholdError(f"study {name!r} is not in this storage (studies: {known})") from None
    attrs = storage.get_study_user_attrs(study_id)
    return _view(name, attrs, storage.get_all_trials(study_id, deepcopy=False), storage)


def read_studies(
    storage_or_url: BaseStorage | str | None, names: Sequence[str] | None = None
) -> list[StudyView]:
    """The studies ``names`` in that order, or (None) every threshold study in the storage; a
    study without threshold settings is left out of the latter, and refused when named."""
    storage = _storage(storage_or_url)
    if names is not None:
        return [read_study(storage, name) for name in names]
    views = []
    for s in storage.get_all_studies():
        trials = storage.get_all_trials(s._study_id, deepcopy=False)
        try:
            views.append(_view(s.study_name, s.user_attrs, trials, storage))
        except ConfigError as e:  # its own ops' module is missing (StudySettings.from_attrs)
            log.warning("study %s is left out: %s", s.study_name, e)
        except ThresholdError:
            log.info("study %s has no threshold settings: left out", s.study_name)
    return views


def study_names(storage_or_url: BaseStorage | str | None) -> list[str]:
    """The names of every study in the storage, threshold's or not."""
    return [s.study_name for s in _storage(storage_or_url).get_all_studies()]


def study_rows(storage_or_url: BaseStorage | str | None) -> list[dict]:
    """Every study, threshold's or not: name, completed and running trials, its stored estimate
    and its answer, located or bound (:attr:`StudyView.answer`): what ``threshold status``
    lists."""
    storage = _storage(storage_or_url)
    rows = []
    for s in storage.get_all_studies():
        runs = [read_run(t) for t in storage.get_all_trials(s._study_id, deepcopy=False)]
        states = [r.state for r in runs]
        estimate = json_attr(s.user_attrs.get(ESTIMATE))
        estimate = estimate if isinstance(estimate, dict) else None
        rows.append(
            {
                "study": s.study_name,
                "n_complete": states.count("COMPLETE"),
                "n_running": states.count("RUNNING"),
                "estimate": estimate,
                "answer": _answer(runs, estimate, _settings_or_none(s.user_attrs)),
            }
        )
    return rows


def _settings_or_none(attrs: dict):
    try:
        return read_settings(attrs)
    except ThresholdError:  # not a threshold study: its answer in the testbed's words
        return None


def storage_log_level(level: int) -> None:
    """Optuna's own log lines (a study created, a trial finished) from ``level`` up only: how the
    CLI sets them without importing Optuna."""
    optuna.logging.set_verbosity(level)


# Writing -------------------------------------------------------------------------------------


def write_size(trial: optuna.Trial, worker: str, counts: dict) -> None:
    """The worker that trains the trial and its model's parameter counts."""
    trial.set_user_attr(WORKER, worker)
    trial.set_user_attr(PARAMS_TOTAL, counts["total"])
    trial.set_user_attr(PARAMS_NON_EMBEDDING, counts["non_embedding"])


def write_pretrain(trial: optuna.Trial, accuracy: dict, steps: int) -> None:
    """How the pretrained model a transfer run starts from did on its own task."""
    trial.set_user_attr(PRETRAIN_ACCURACY, json.dumps(accuracy))
    trial.set_user_attr(PRETRAIN_STEPS, steps)


def write_result(trial: optuna.Trial, artifact_id: str, sha256: str, metrics: dict) -> None:
    """A finished run: its checkpoint and its metrics (``TrainResult.metrics()``)."""
    trial.set_user_attr(CHECKPOINT, artifact_id)
    trial.set_user_attr(CHECKPOINT_SHA256, sha256)
    for key, value in _result_attrs(metrics).items():
        trial.set_user_attr(key, value)


def _result_attrs(metrics: dict) -> dict:
    """A finished run's metrics as its trial's attributes (dicts as sorted JSON)."""
    attrs = {
        ACCURACY: json.dumps(metrics["accuracy"], sort_keys=True),
        STRICT_ACCURACY: json.dumps(metrics["strict_accuracy"], sort_keys=True),
        SAMPLED_ACCURACY: json.dumps(metrics["sampled_accuracy"], sort_keys=True),
        STEPS: metrics["steps"],
        STOP_REASON: metrics["stop_reason"],
        TRAIN_S: metrics["wall_s"],
    }
    if metrics["budget"]:
        attrs[BUDGET] = json.dumps(metrics["budget"], sort_keys=True)
    if metrics.get("cpu_s") is not None:
        attrs[CPU_S] = metrics["cpu_s"]
    return attrs


def queued_attrs(d: int, replicate: int, seed: int) -> dict:
    """The attributes of a trial queued with its size and seed decided (a grid's cell)."""
    return {D_MODEL: d, REPLICATE: replicate, SEED: seed}


def imported_attrs(run: dict) -> dict:
    """The attributes of a completed trial rebuilt from a grid record's run (its checkpoint
    left behind on the machine that trained it)."""
    metrics = {
        "accuracy": run["accuracy"],
        "strict_accuracy": run["strict_accuracy"],
        "sampled_accuracy": run["sampled_accuracy"],
        "budget": run["budget"],
        "steps": run["steps"],
        "stop_reason": run["stop_reason"],
        "wall_s": run["train_s"],
        "cpu_s": run["cpu_s"],
    }
    attrs = queued_attrs(run["d"], run["replicate"], run["seed"]) | _result_attrs(metrics)
    attrs[PARAMS_TOTAL] = run["params_total"]
    attrs[PARAMS_NON_EMBEDDING] = run["params_non_embedding"]
    if run.get("worker"):
        attrs[WORKER] = run["worker"]
    return attrs


def write_grid(study: optuna.Study, grid: dict) -> None:
    """Mark ``study`` a dense grid of these sizes and seeds (``GridSpec.to_dict``)."""
    study.set_user_attr(GRID, json.dumps(grid, sort_keys=True))


def read_grid(attrs: dict) -> dict | None:
    """A study's grid (its user attributes), or None for a study the sampler places."""
    grid = json_attr(attrs.get(GRID))
    return grid if isinstance(grid, dict) else None


def write_estimate(study: optuna.Study, estimate: dict, chance: float) -> None:
    """The study's transition estimate, and the chance rate the policy is built with."""
    study.set_user_attr(ESTIMATE, json.dumps(estimate, sort_keys=True))
    study.set_user_attr(CHANCE, float(chance))


def write_analysis(
    storage_or_url: BaseStorage | str | None, name: str, number: int, summary: dict
) -> None:
    """The summary of trial ``number``'s analysis, on the study (Optuna refuses to change a
    finished trial's attributes; optuna-dashboard keeps its trial notes on the study too)."""
    storage = _storage(storage_or_url)
    study_id = storage.get_study_id_from_name(name)
    value = json.dumps(summary, sort_keys=True)
    storage.set_study_user_attr(study_id, f"{ANALYSIS_PREFIX}{number}", value)
