"""Whether a study's runs locate its transition, and what a factor says when they do not.

A fitted 80% point is a posterior median. Where the runs do not reach past it (a baseline none of
whose runs learned), the posterior beyond the largest run is its prior's range, and a factor read
off it (``42x``, 90%: 15 - 85x) states the prior, not the runs. So the report asks the runs first.

A study's transition is *located* when at least :data:`LOCATING_RUNS` runs larger than its fitted
80% point reached the 80% level (the accuracy at the level for the fitted asymptote, as
:func:`threshold.search.posterior.level_target` has it) and at least as many runs smaller than it
stayed under: the runs bracket the point, and neither side rests on one seed (at a size where a
run's seeds split, one learns and one does not, as the posterior's run-outcome model allows; issue
30 asks for two runs above the point). Otherwise the runs only bound it, for the sizes and seeds
run:

- **lower bound**, when fewer than two runs above the point learned: the transition lies above
  the largest size at or below which no run reached the level;
- **upper bound**, when fewer than two runs below the point stayed under: it lies at or below the
  smallest size at and above which every run reached the level;
- **none**, when the runs give neither (too few, or learned and unlearned runs mixed out of order).

Every verdict also names the sizes *out of order*: those larger than the smallest run that reached
the level where a run stayed under it. The posterior assumes accuracy rises with size, so such runs
pull its 80% point up; under the ``small`` recipe at short budgets, large models alone leave the
plateau last (docs/results.md), and the report says so beside a lower bound.

A factor (baseline's 80% point / study's) with a bounded side is a bound too. The bounded side's
value is divided by the other side's 90% interval end on the conservative side (a lower bound on
the factor uses the study's upper end or the baseline's lower end), so the bound holds wherever the
other 80% point lies inside its interval's conservative 95%; the ratio at the other side's median
is kept beside it (``at_median``). Two lower bounds (or two upper) give no factor.

A study's *answer* (:func:`answer`) is the one reading of it that every view shows (``find``'s
last lines and progress, ``status``, the dashboard's note and attribute, ``find_threshold``'s
dict, a suite's progress): its verdict, with ``located`` said outright, and
:func:`answer_words` its line. A bound is given as a bound (``> 4,752 params, not located: no
run reached the level``); the posterior's median and interval follow it only as context.
"""

from __future__ import annotations

from collections.abc import Sequence

from threshold.search.posterior import level_target

__all__ = [
    "LOCATING_RUNS",
    "NEAR_CHANCE",
    "answer",
    "answer_words",
    "factor_bound",
    "locate",
    "near_chance_words",
    "sizes_only",
    "with_size_words",
]

NEAR_CHANCE = 0.1  # the level's accuracy this close above chance: a run at chance nearly meets it
LOCATING_RUNS = 2  # runs on each side of the fitted 80% point that fall on the side the fit says

POINT, LOWER, UPPER, NONE = "point", "lower bound", "upper bound", "none"


def locate(runs: Sequence[tuple[int, float, float]], estimate: dict) -> dict:
    """Whether ``runs`` ((d, params, accuracy) each) locate the 80% point of ``estimate`` (a
    stored estimate: params_p80, asymptote, chance, level, chance_corrected).

    Returns ``kind`` ("point", "lower bound", "upper bound" or "none"), the bound's ``params`` and
    ``d`` (None for a point), the accuracy the level asks (``target``), ``above`` (runs above the
    point that reached it), ``below`` (runs below it that did not), ``n_runs``, ``checked``
    (True: judged on the runs' accuracies), ``first_d`` (the smallest d where a run reached the
    level; None if none did) and ``out_of_order`` (the d larger than ``first_d`` where a run did
    not, ascending).
    """
    target = float(
        level_target(
            estimate["asymptote"],
            float(estimate["chance"]),
            float(estimate["level"]),
            bool(estimate["chance_corrected"]),
        )
    )
    point = float(estimate["params_p80"])
    rows = [(int(d), float(p), float(a) >= target) for d, p, a in runs]
    above = sum(1 for _, p, ok in rows if p > point and ok)
    below = sum(1 for _, p, ok in rows if p < point and not ok)
    first_learned = min((p for _, p, ok in rows if ok), default=float("inf"))
    last_failed = max((p for _, p, ok in rows if not ok), default=float("-inf"))
    # Lower: the largest size with no learned run at or below it; upper: the smallest size with
    # every run at or above it learned.
    lower = max(((p, d) for d, p, ok in rows if not ok and p < first_learned), default=None)
    upper = min(((p, d) for d, p, ok in rows if ok and p > last_failed), default=None)
    first_d = min(((p, d) for d, p, ok in rows if ok), default=(None, None))[1]
    late = sorted({d for d, p, ok in rows if not ok and p > first_learned})
    out = {"target": target, "above": above, "below": below, "n_runs": len(rows), "checked": True,
           "first_d": first_d, "out_of_order": late}  # fmt: skip
    if above >= LOCATING_RUNS and below >= LOCATING_RUNS:
        return out | {"kind": POINT, "params": None, "d": None}
    if above < LOCATING_RUNS and lower is not None:
        return out | {"kind": LOWER, "params": lower[0], "d": lower[1]}
    if below < LOCATING_RUNS and upper is not None:
        return out | {"kind": UPPER, "params": upper[0], "d": upper[1]}
    return out | {"kind": NONE, "params": None, "d": None}


def sizes_only(params: Sequence[float], estimate: dict) -> dict:
    """:func:`locate` where the runs' accuracies are unknown (a checkpoint of a results.json
    written before checkpoints kept them): sizes alone can only say a point is *not* located
    (fewer than two runs on one side of it), with no bound ("none"); else it is taken as a point,
    ``checked`` False."""
    point = float(estimate["params_p80"])
    above = sum(1 for p in params if p > point)
    below = sum(1 for p in params if p < point)
    kind = POINT if above >= LOCATING_RUNS and below >= LOCATING_RUNS else NONE
    return {"kind": kind, "params": None, "d": None, "target": None, "above": None,
            "below": None, "n_runs": len(params), "checked": False, "first_d": None,
            "out_of_order": []}  # fmt: skip


def _side(verdict: dict, estimate: dict, conservative: int) -> tuple[float, float, str]:
    """(value used, value at the median, words) of one side: a bound's size, or a located
    point's interval end (0: lower, 1: upper) with its median."""
    if verdict["kind"] != POINT:
        return verdict["params"], verdict["params"], "bound"
    end = float(estimate["interval_params"][conservative])
    return end, float(estimate["params_p80"]), "lower end" if conservative == 0 else "upper end"


def factor_bound(base: dict, base_estimate: dict, study: dict, study_estimate: dict) -> dict:
    """The factor baseline / study as the two verdicts (:func:`locate`) allow: ``form`` "point"
    (both located: the posterior factor stands), "lower bound", "upper bound" or "none"; a bound
    carries ``value`` (the conservative bound), ``at_median`` (with the other side's median),
    ``base_params``/``study_params`` (the sizes divided) and ``base_side``/``study_side`` (each
    "bound", "lower end" or "upper end" of its 90% interval)."""
    kinds = base["kind"], study["kind"]
    if kinds == (POINT, POINT):
        return {"form": POINT}
    if NONE in kinds or kinds in ((LOWER, LOWER), (UPPER, UPPER)):
        return {"form": NONE}
    # Baseline large or study small: the factor is at least; baseline small or study large: at
    # most. Both bounds point the same way here (a lower and an upper, or one with a point).
    at_least = base["kind"] == LOWER or study["kind"] == UPPER
    b, b_mid, b_side = _side(base, base_estimate, 0 if at_least else 1)
    s, s_mid, s_side = _side(study, study_estimate, 1 if at_least else 0)
    return {
        "form": LOWER if at_least else UPPER,
        "value": b / s,
        "at_median": b_mid / s_mid,
        "base_params": b,
        "study_params": s,
        "base_side": b_side,
        "study_side": s_side,
    }


_ESTIMATE_KEYS = (
    "params_p80", "interval_params", "asymptote", "chance", "level", "chance_corrected"
)  # fmt: skip


def answer(runs: Sequence[tuple[int, float, float]], estimate: dict | None) -> dict | None:
    """A study's answer: :func:`locate` of ``runs`` ((d, params, accuracy) each) against its
    stored ``estimate``, with ``located`` (True only for a point the runs bracket), ``level``,
    and the posterior's ``median`` (params), ``median_d`` and ``interval`` (params) beside it.
    None without an estimate; an estimate stored without its level (older studies) is read on
    the sizes alone (:func:`sizes_only`)."""
    if not estimate or not estimate.get("params_p80"):
        return None
    if all(estimate.get(k) is not None for k in _ESTIMATE_KEYS):
        verdict = locate(runs, estimate)
    else:
        verdict = sizes_only([p for _, p, _ in runs], estimate)
    return verdict | {
        "located": verdict["kind"] == POINT,
        "level": float(estimate.get("level") or 0.8),
        "median": float(estimate["params_p80"]),
        "median_d": None if estimate.get("d_p80") is None else float(estimate["d_p80"]),
        "interval": (
            None
            if estimate.get("interval_params") is None
            else [float(v) for v in estimate["interval_params"]]
        ),
    }


def answer_words(ans: dict | None) -> str:
    """An :func:`answer` in one line: ``80% point 9,120 params (d 24.0), 90% interval 4,031 -
    17,960`` where the runs locate it; else the bound first, ``> 4,752 params (d > 16), not
    located: no run reached the 80% level (accuracy 0.606)``, and the posterior only after it,
    as context; ``no estimate yet`` for None. An answer with ``size_name`` (an objective's
    study: :func:`with_size_words`) names its size so, and where ``counted`` is False (no
    parameter counts given: the size is the axis) says the size alone."""
    if ans is None:
        return "no estimate yet"
    size, counted = ans.get("size_name", "d"), ans.get("counted", True)

    def at(value: float, sign: str = "") -> str:  # params (size), or the size alone
        if counted:
            return f"{sign}{value:,.0f} params"
        return f"{size} {sign}{value:,.1f}" if value < 100 else f"{size} {sign}{value:,.0f}"

    point = f"{ans['level']:.0%} point"
    d = "" if ans["median_d"] is None or not counted else f" ({size} {ans['median_d']:.1f})"
    median = f"{at(ans['median'])}{d}"
    if ans["interval"] is not None:  # an estimate stored without it (older, or by hand)
        median += ", 90% interval {:,.0f} - {:,.0f}".format(*ans["interval"])
    if ans["located"]:
        return f"{point} {median}"
    context = (
        f"; the posterior's median {median}, context only (the curve's guess beyond the runs,"
        " not measured)"
    )
    level = f"the {ans['level']:.0%} level"
    if ans["target"] is not None:
        level += f" (accuracy {ans['target']:.3f})"
    if ans["kind"] in (LOWER, UPPER):
        sign = "> " if ans["kind"] == LOWER else "<= "
        if counted:
            where = f"{at(ans['params'], sign)} ({size} {sign}{ans['d']})"
        else:  # the size alone, as the runs have it
            where = f"{size} {sign}{ans['d']}"
        if ans["kind"] == LOWER:
            reached = "no run" if ans["first_d"] is None else "no run up to that size"
            return f"{where}, not located: {reached} reached {level}{context}"
        return f"{where}, not located: every run from that size up reached {level}{context}"
    if not ans["checked"]:
        why = f"fewer than {LOCATING_RUNS} runs on a side of the posterior's median"
    else:
        why = (
            f"{ans['above']} run(s) above the posterior's median reached {level} and "
            f"{ans['below']} below it stayed under ({LOCATING_RUNS} of each locate it), and no "
            "bound either side"
        )
    return f"{point} not located: {why}{context}"


def with_size_words(ans: dict | None, size_name: str, counted: bool) -> dict | None:
    """``ans`` with the size axis in a user's words: its ``size_name`` and whether the sizes
    have parameter counts of their own (``counted``), as :func:`answer_words` reads them."""
    return None if ans is None else ans | {"size_name": size_name, "counted": counted}


def near_chance_words(estimate: dict | None) -> str | None:
    """Why a study's level measures little, with the remedy, where the accuracy the level asks
    of a perfect model (asymptote 1: the most it can ask) lies less than :data:`NEAR_CHANCE`
    above chance (the majority answer's rate): at ``--mod 3`` MAX's chance is 0.775 against a
    level of 0.8, so a model that learned nothing nearly meets it. A setting, not a fit: read
    off the chance and the level alone. None where the level is well above chance, or the
    estimate does not say."""
    keys = ("chance", "level", "chance_corrected")
    if not estimate or any(estimate.get(k) is None for k in keys):
        return None
    chance = float(estimate["chance"])
    level = float(estimate["level"])
    corrected = bool(estimate["chance_corrected"])
    target = float(level_target(1.0, chance, level, corrected))
    if target - chance >= NEAR_CHANCE:
        return None
    remedy = "a larger --mod" if corrected else "--chance-corrected, or a larger --mod"
    return (
        f"the {level:.0%} level (accuracy {target:.3f}) lies {target - chance:.3f} above chance "
        f"({chance:.3f}, the majority answer), so a model that learned nothing nearly meets it and "
        f"the transition measures little: use {remedy}"
    )
