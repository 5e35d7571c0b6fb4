"""What a study holds for later work: its runs, the trial to analyse, and stored analyses.

Read from the study's record (:mod:`threshold.search.record`). Optuna refuses to change a finished
trial's attributes, so the analysis of trial N is stored on the study under ``analysis:N`` (a small
JSON summary; optuna-dashboard keeps its trial notes on the study for the same reason).
"""

from __future__ import annotations

import math

import optuna

from threshold.errors import ThresholdError
from threshold.search.objective import ObjectiveSettings
from threshold.search.record import RunRecord, StudyView, read_study, write_analysis

__all__ = ["PICKS", "load_analyses", "pick_trial", "runs", "save_analysis"]

PICKS = ("at-transition", "largest")


def runs(study: StudyView) -> list[RunRecord]:
    """Completed runs that kept a checkpoint, in trial order; an objective's study is refused
    in one line (its runs are the user's own: the model analyses do not apply)."""
    if isinstance(study.settings, ObjectiveSettings):
        raise ThresholdError(
            f"study {study.name!r} is an objective's ({study.settings.objective}): the model "
            "analyses (analyze, survey, embeddings and layers) do not apply, as its runs keep "
            "no model of threshold's"
        )
    return study.with_checkpoint


def pick_trial(study: StudyView, how: str = "at-transition", d_model: int | None = None) -> int:
    """The number of the trial to analyse.

    ``at-transition``: the run nearest (in log size) to the fitted 80% point, ties to the better
    accuracy; ``largest``: the largest d, ties to the better accuracy; with ``d_model``: the best
    run at that d.
    """
    done = runs(study)
    if not done:
        raise ThresholdError(
            f"study {study.name!r} has no completed run with a checkpoint: "
            "run `threshold find` first"
        )
    if d_model is not None:
        at = [r for r in done if r.d_model == d_model]
        if not at:
            sizes = sorted({r.d_model for r in done})
            raise ThresholdError(
                f"study {study.name!r} has no run at d = {d_model} (sizes: {sizes})"
            )
        return max(at, key=lambda r: r.value).number
    if how == "largest":
        return max(done, key=lambda r: (r.d_model, r.value)).number
    if how != "at-transition":
        raise ThresholdError(f"trial choice {how!r} is unknown: use one of {', '.join(PICKS)}")
    target = None if study.estimate is None else study.estimate.d_p80
    if target is None or not target > 0:
        raise ThresholdError(
            f"study {study.name!r} has no fitted transition yet: choose --trial N or --largest"
        )
    return min(done, key=lambda r: (abs(math.log(r.d_model / target)), -r.value)).number


def save_analysis(study: StudyView | optuna.Study, number: int, summary: dict) -> None:
    """Store the summary of trial ``number``'s analysis on the study."""
    if isinstance(study, StudyView):
        write_analysis(study.storage, study.name, number, summary)
    else:
        write_analysis(study, study.study_name, number, summary)


def load_analyses(study: StudyView | optuna.Study) -> dict[int, dict]:
    """Every stored analysis summary of the study, by trial number."""
    if not isinstance(study, StudyView):
        study = read_study(study, study.study_name)
    return dict(study.analyses)
