"""Factors between studies: each study's baseline, the reduction factor or size ratio against
it, at the end and at each budget checkpoint, and whether the runs locate or only bound each 80%
point (:mod:`threshold.search.bounds`).

The posterior of ln x80 is kept as a lattice marginal (:func:`x80_marginal`), so a report read
back from its ``results.json`` gives the same factors as one collected from the storage
(:func:`factor`; the maths is :func:`threshold.search.fit.reduction_factor`).
"""

from __future__ import annotations

from collections.abc import Sequence
from types import SimpleNamespace

import numpy as np

from threshold.report.data import StudyData, measured_words
from threshold.search.bounds import LOCATING_RUNS, NONE, POINT, factor_bound, locate, sizes_only
from threshold.search.fit import reduction_factor
from threshold.search.objective import ObjectiveSettings
from threshold.search.posterior import difference_distribution, weighted_quantiles

__all__ = [
    "compare",
    "factor",
    "locate_transitions",
    "unbounded_words",
    "where",
    "x80_marginal",
]

X80_STEP = 0.01  # nats: the lattice of the x80 posteriors kept (reduction_factor's default)


def x80_marginal(posterior) -> dict:
    """The posterior of ln x80 (grid, weights) as ``results.json`` keeps it: its median and its
    masses on the lattice ``start + k step`` (0.01 nats from the grid's smallest x80, as
    :func:`reduction_factor` convolves them), empty ends cut. Factors from two of these equal those
    from the full posteriors (:func:`factor`), so a report read back from its file gives the same
    factors whatever the search's maths is by then.
    """
    grid, w = posterior
    values, probs = difference_distribution(grid.x80, w, [0.0], [1.0], step=X80_STEP)  # A - 0
    keep = np.flatnonzero(probs > 1e-12)
    lo, hi = int(keep[0]), int(keep[-1]) + 1
    return {
        "median": float(weighted_quantiles(grid.x80, w, [0.5])[0]),
        "start": float(values[lo]),
        "step": X80_STEP,
        "probs": [float(p) for p in probs[lo:hi]],
    }


def factor(base: dict, study: dict) -> dict:
    """:func:`reduction_factor` of two :func:`x80_marginal` s: baseline x80 / study's.

    ``factor`` is the ratio of the two stored medians; ``p_above_1`` counts half the mass of the
    lattice point at zero as the full posteriors' convolution does, that point found within half a
    step (cut ends shift the lattice by rounding, and an exact test would miss it).
    """

    def lattice(m: dict):
        values = m["start"] + m["step"] * np.arange(len(m["probs"]))  # (K,)
        return values, np.asarray(m["probs"], dtype=float)

    (a, pa), (b, pb) = lattice(base), lattice(study)
    out = reduction_factor((SimpleNamespace(x80=a), pa), (SimpleNamespace(x80=b), pb))
    values, probs = difference_distribution(a, pa, b, pb, step=X80_STEP)  # (K,) each
    zero = np.abs(values) < X80_STEP / 2
    above = float(probs[(values > 0) & ~zero].sum() + 0.5 * probs[zero].sum())
    return out | {"factor": float(np.exp(base["median"] - study["median"])), "p_above_1": above}


def where(s: StudyData) -> tuple[str, int]:
    """A study's testbed and modulus (degree for permutations): what a baseline must share;
    an objective's study shares with every other objective's (their sizes are the user's)."""
    if isinstance(s.settings, ObjectiveSettings):
        return "objective", 0
    return s.settings.task.testbed, s.settings.task.n


def compare(studies: list[StudyData], baselines: Sequence[str]) -> None:
    """Give each study the baseline of its testbed and modulus, and its factor against it.

    Of several baselines on one testbed and modulus, a study takes the one measuring its own op
    (else the first named). A study of the baseline's op gets a reduction factor (baseline 80%
    point / study's); one of another op the same ratio as a size ratio; a study with no baseline
    of its testbed and modulus gets neither, and no note.
    """
    by_name = {s.name: s for s in studies}
    bases = [by_name[name] for name in baselines]
    for s in studies:
        locate_transitions(s)
    for s in studies:
        s.baseline, s.reduction, s.size_ratio, s.reduction_note = None, None, None, ""
        if s.name in baselines:
            s.baseline = s.name
            continue
        mine = [b for b in bases if where(b) == where(s)]
        if not mine:
            continue
        same_op = [b for b in mine if _measured(b) == _measured(s)]
        same_recipe = [b for b in same_op if _recipe(b) == _recipe(s)]
        base = (same_recipe or same_op or mine)[0]
        s.baseline = base.name
        s.budget_reduction = []
        if same_op and not same_recipe:
            s.reduction_note = "none: the baseline trains with another recipe or budget"
        elif not base.ok:
            s.reduction_note = f"none: the baseline has {base.status.replace('_', ' ')}"
        elif not s.ok:
            s.reduction_note = f"none: {s.status.replace('_', ' ')}"
        elif s.settings.search.level != base.settings.search.level or (
            s.settings.search.chance_corrected != base.settings.search.chance_corrected
        ):
            s.reduction_note = "none: the two studies define the transition differently"
        else:
            # A factor neither side of which is located ("form" "none") is kept, as the record
            # of the posteriors' ratio, with a note; the pages give the note instead.
            ratio = factor(base.x80, s.x80) | _bounded(base, s)
            if _measured(s) != _measured(base):
                s.size_ratio = ratio
            else:
                s.reduction = ratio
                theirs = {b["step"]: b for b in base.budget}
                s.budget_reduction = [
                    {"step": b["step"], "tokens": b["tokens"]}
                    | factor(theirs[b["step"]]["x80"], b["x80"])
                    | _bounded(base, s, theirs[b["step"]], b)
                    for b in s.budget
                    if b["step"] in theirs
                ]


def _fitted(s: StudyData, budget: dict | None = None) -> dict:
    """The study's estimate, or its estimate at a budget checkpoint (that entry's point,
    interval and asymptote with the study's level and chance)."""
    if budget is None:
        return s.estimate
    keys = ("params_p80", "interval_params", "asymptote")
    return s.estimate | {k: budget[k] for k in keys}


def _bounded(base: StudyData, s: StudyData, base_at=None, s_at=None) -> dict:
    """``form`` and ``bound`` of a factor, from the two transitions (at a checkpoint when given):
    ``bound`` None for a point (:func:`threshold.search.bounds.factor_bound`)."""
    theirs = base.transition if base_at is None else base_at["transition"]
    mine = s.transition if s_at is None else s_at["transition"]
    out = factor_bound(theirs, _fitted(base, base_at), mine, _fitted(s, s_at))
    bound = out if out["form"] not in (POINT, NONE) else None
    note = unbounded_words(theirs, mine) if out["form"] == NONE else None
    return {"form": out["form"], "bound": bound} | ({"note": note} if note else {})


def unbounded_words(theirs: dict, mine: dict) -> str:
    """Why two transitions (the baseline's, a study's) give no factor, not even a bound."""
    kinds = {theirs["kind"], mine["kind"]}
    if kinds == {"lower bound"}:
        return "neither transition is located: both lie above the sizes run"
    if kinds == {"upper bound"}:
        return "neither transition is located: both lie below the sizes run"
    sides = (("the baseline's", theirs), ("this study's", mine))
    names = [w for w, t in sides if t["kind"] == NONE]
    who = " and ".join(names)
    if not all(t["checked"] for t in (theirs, mine) if t["kind"] == NONE):
        points = "80% points lie" if len(names) > 1 else "80% point lies"
        return (
            f"{who} {points} where fewer than {LOCATING_RUNS} runs are on a side, and this "
            "results.json keeps no accuracies at checkpoints to bound them"
        )
    return f"{who} runs neither locate nor bound the 80% point"


def locate_transitions(s: StudyData) -> None:
    """Set ``s.transition`` and each budget entry's ``transition`` (:func:`locate`): from the
    runs' accuracies, or at a checkpoint an older results.json kept none for, from the final
    runs when it is the budget's end, else from the sizes alone (:func:`sizes_only`)."""
    if not s.ok:
        s.transition = None
        return
    runs = [
        (r["d"], r["params"], r["accuracy"])
        for r in s.runs
        if r["params"] is not None and r["accuracy"] is not None
    ]
    s.transition = locate(runs, s.estimate)
    params_of = {r[0]: r[1] for r in runs}
    for b in s.budget:
        est = _fitted(s, b)
        if "runs" in b:
            at = [(d, params_of[d], a) for d, a in b["runs"] if d in params_of]
            b["transition"] = locate(at, est)
        elif b["step"] == s.settings.train.max_steps:
            b["transition"] = locate(runs, est)
        else:
            b["transition"] = sizes_only([p for _, p, _ in runs], est)


def _measured(s: StudyData) -> str:
    return measured_words(s.settings)


def _recipe(s: StudyData) -> tuple:
    """What a study's runs train with: its training settings and model side, seed aside (an
    objective's: the user's, not known here)."""
    if isinstance(s.settings, ObjectiveSettings):
        return ("objective",)
    return s.settings.train.to_dict(), s.settings.model
