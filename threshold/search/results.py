"""What a study holds for later work: its runs, the trial to analyse, and stored analyses.

Optuna refuses to change a finished trial's attributes, so the analysis of trial N is stored on the
study under the key ``analysis:N`` (a small JSON summary; optuna-dashboard keeps its trial notes on
the study for the same reason), and figures go to the artifact store attached to the study.
"""

from __future__ import annotations

import json
import math

import optuna
from optuna.trial import FrozenTrial, TrialState

from threshold.errors import ThresholdError
from threshold.search.sampler import PARAM

__all__ = ["PICKS", "load_analyses", "pick_trial", "runs", "save_analysis"]

PICKS = ("at-transition", "largest")
_PREFIX = "analysis:"


def runs(study: optuna.Study) -> list[FrozenTrial]:
    """Completed trials that kept a checkpoint, in trial order."""
    return [
        t
        for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
        if "checkpoint_artifact" in t.user_attrs
    ]


def pick_trial(study: optuna.Study, how: str = "at-transition", d_model: int | None = None) -> int:
    """The number of the trial to analyse.

    ``at-transition``: the run nearest (in log size) to the fitted 80% point, ties to the better
    accuracy; ``largest``: the largest d, ties to the better accuracy; with ``d_model``: the best
    run at that d.
    """
    done = runs(study)
    if not done:
        raise ThresholdError(
            f"study {study.study_name!r} has no completed run with a checkpoint: "
            "run `threshold find` first"
        )
    if d_model is not None:
        at = [t for t in done if t.params.get(PARAM) == d_model]
        if not at:
            sizes = sorted({t.params[PARAM] for t in done})
            raise ThresholdError(
                f"study {study.study_name!r} has no run at d = {d_model} (sizes: {sizes})"
            )
        return max(at, key=lambda t: t.value).number
    if how == "largest":
        return max(done, key=lambda t: (t.params[PARAM], t.value)).number
    if how != "at-transition":
        raise ThresholdError(f"trial choice {how!r} is unknown: use one of {', '.join(PICKS)}")
    estimate = json.loads(study.user_attrs.get("estimate") or "null")
    target = None if estimate is None else estimate.get("d_p80")
    if target is None or not target > 0:
        raise ThresholdError(
            f"study {study.study_name!r} has no fitted transition yet: "
            "choose --trial N or --largest"
        )
    return min(done, key=lambda t: (abs(math.log(t.params[PARAM] / target)), -t.value)).number


def save_analysis(study: optuna.Study, number: int, summary: dict) -> None:
    """Store the summary of trial ``number``'s analysis on the study."""
    study.set_user_attr(f"{_PREFIX}{number}", json.dumps(summary, sort_keys=True))


def load_analyses(study: optuna.Study) -> dict[int, dict]:
    """Every stored analysis summary of the study, by trial number."""
    return {
        int(key[len(_PREFIX) :]): json.loads(value)
        for key, value in study.user_attrs.items()
        if key.startswith(_PREFIX)
    }
