"""The report's sentences on transitions and factors: the findings its pages lead with (one a
comparison), and what the runs say where they only bound an 80% point or a factor.

Words only: the numbers come from the view's rows (:mod:`threshold.report.view`), and the
bounds from :mod:`threshold.search.bounds` as :mod:`threshold.report.factors` kept them.
"""

from __future__ import annotations

from threshold.report.view import Group, Ratio, Row

__all__ = [
    "bound_phrase",
    "bound_words",
    "findings",
    "out_of_order_words",
    "transition_text",
    "transition_words",
]


def _finding(row: Row, base: Row) -> str:
    """One sentence: how a study's 80% point compares with its baseline's."""
    r = row.ratio
    care = "; read with care: its 80% point may mark a plateau" if row.warning else ""
    if r is None:
        return f"{row.label}: no factor against {base.label} ({row.no_ratio})."
    if r.form != "point":
        return _bound_finding(row, base, r, care)
    span = f"90%: {r.lo:.2f} - {r.hi:.2f}x, P(smaller) = {r.p_smaller:.2f}"
    if not r.clear:
        change = "size difference" if r.kind == "size ratio" else "change"
        return (
            f"{row.label}: no clear {change} from {base.label} ({r.factor:.2f}x; {span}: the "
            f"interval includes 1){care}."
        )
    times, how = (r.factor, "smaller") if r.factor > 1 else (1 / r.factor, "larger")
    if r.kind == "size ratio":
        what = f"{row.measured_op} needs a {times:.2g}x {how} model than {base.measured_op}"
        return f"{row.label}: {what} ({span}){care}."
    return f"{row.label}: {times:.2g}x {how} than {base.label} ({span}){care}."


def transition_words(t: dict, label: str) -> str:
    """What the runs say of a transition they only bound: ``ADD ... reached its 80% level at no
    size up to 455,810 parameters (d = 190; 6 runs)``, and why, where larger sizes stayed under
    the level after a smaller one reached it (:func:`out_of_order_words`)."""
    n = f"{t['n_runs']} run{'s' if t['n_runs'] != 1 else ''}"
    if t["kind"] == "upper bound":
        return (
            f"{label} reached its 80% level at every size from {t['params']:,.0f} parameters "
            f"(d = {t['d']}) up ({n})"
        )
    if t["kind"] == "lower bound":
        said = (
            f"{label} reached its 80% level at no size up to {t['params']:,.0f} parameters "
            f"(d = {t['d']}; {n})"
        )
    else:
        said = f"{label}'s runs neither locate nor bound its 80% point ({n})"
    why = out_of_order_words(t)
    return f"{said}; {why}" if why else said


def out_of_order_words(t: dict) -> str | None:
    """Why runs that did learn only bound their 80% point: ``a run reached it at d = 40, but runs
    at the larger d = 101, 128 did not (the fit assumes accuracy rises with size; these runs do
    not)``; None where no larger size fell short, or the verdict predates ``out_of_order``."""
    late = t.get("out_of_order") or []
    if not late:
        return None
    sizes = ", ".join(str(d) for d in late)
    return (
        f"a run reached it at d = {t['first_d']}, but runs at the larger d = {sizes} did not "
        "(the fit assumes accuracy rises with size; these runs do not)"
    )


def bound_words(r: Ratio, base_label: str, base_t: dict, t: dict) -> str:
    """Why a factor is a bound and how it was made: each side's reason, and the division."""
    b = r.bound
    words = []
    for side, params, who, trans in (
        (b["base_side"], b["base_params"], base_label, base_t),
        (b["study_side"], b["study_params"], "this study", t),
    ):
        if side == "bound":
            words.append(transition_words(trans, who))
        else:
            most = "most" if side == "upper end" else "least"
            words.append(
                f"{who}'s 80% point is at {most} {params:,.0f}, the {side} of its 90% interval"
            )
    how = f"{b['value']:.3g}x = {b['base_params']:,.0f} / {b['study_params']:,.0f}"
    if b["at_median"] != b["value"]:
        how += f"; {b['at_median']:.3g}x with its median 80% point instead"
    return f"{'; '.join(words)}: {how}"


def bound_phrase(r: Ratio) -> str:
    """``at least 8.09x smaller``, ``at most 2.3x larger``: a factor bound in words."""
    v = r.bound["value"]
    least = (r.form == "lower bound") == (v >= 1)  # at least a reduction, or at least a growth
    times, how = (v, "smaller") if v >= 1 else (1 / v, "larger")
    return f"{'at least' if least else 'at most'} {times:.3g}x {how}"


def _bound_finding(row: Row, base: Row, r: Ratio, care: str) -> str:
    why = bound_words(r, "the baseline", base.transition, row.transition)
    if r.kind == "size ratio":
        what = f"{row.measured_op} needs a model {bound_phrase(r)} than {base.measured_op}"
        return f"{row.label}: {what}, for the sizes and seeds run ({why}){care}."
    return (
        f"{row.label}: {bound_phrase(r)} than {base.label}, for the sizes and seeds run "
        f"({why}){care}."
    )


def findings(groups: tuple[Group, ...]) -> tuple[str, ...]:
    out = []
    for g in groups:
        if g.baseline is None:
            n = len(g.rows)
            out.append(
                f"{n} stud{'y has' if n == 1 else 'ies have'} no baseline of their testbed and "
                "modulus: their 80% points stand alone (no factor)."
            )
            continue
        base = g.rows[0]
        if not base.ok:
            out.append(f"Baseline {base.label}: {base.status_text}; no factors against it.")
            continue
        out.extend(_finding(row, base) for row in g.rows[1:])
    return tuple(out)


def transition_text(row: Row) -> str | None:
    """A study section's sentence on an 80% point its runs do not locate."""
    t = row.transition
    if not row.ok or row.located:
        return None
    fitted = (
        f"the fit's median {row.params_p80:,.0f} (90%: {row.interval_params[0]:,.0f} - "
        f"{row.interval_params[1]:,.0f}) rests on the posterior's prior where the runs do not reach"
    )
    if t["kind"] == "none":
        return f"not located: {transition_words(t, 'this study')}; {fitted}"
    where = "above that" if t["kind"] == "lower bound" else "at or below that"
    return (
        f"not located: {transition_words(t, 'this study')} (the 80% level: accuracy "
        f"{t['target']:.3f}), so its 80% point lies {where}, for the sizes and seeds run; {fitted}"
    )
