"""Build the report's view model (:mod:`threshold.report.view`) once from the collected studies.

Studies are grouped by baseline: each is compared with the baseline of its own testbed and
modulus (:func:`threshold.report.factors.compare`); a group without a baseline shows no factor.
The page lists the studies in the order of the transitions table, and every list of the view
(sections, analyses, search cost, budget) follows it.
"""

from __future__ import annotations

from threshold.analysis import folder_name
from threshold.report.data import Collected, StudyData, measured_words, other_ops, study_title
from threshold.report.results import FORMAT
from threshold.report.sentences import bound_phrase, bound_words, findings, transition_text
from threshold.report.settings_table import recipes, settings_rows
from threshold.report.text import near_transition_words
from threshold.report.view import (
    AnalysisView,
    BudgetRow,
    EfficiencyRow,
    Group,
    Ratio,
    Report,
    Row,
    RunRow,
    StudySection,
    TransferView,
    Warning,
)
from threshold.search.record import Estimate

__all__ = ["anchor", "build"]


def anchor(name: str) -> str:
    return "study-" + "".join(c if c.isalnum() else "-" for c in name)


def _ratio(s: StudyData) -> Ratio | None:
    r = s.reduction or s.size_ratio
    if r is None:
        return None
    if r.get("form") == "none":  # no factor, not even a bound: Row.no_ratio says why
        return None
    kind = "reduction" if s.reduction is not None else "size ratio"
    return _ratio_of(r, kind)


def _no_ratio(s: StudyData) -> str:
    """Why a study with a baseline shows no factor ("" when it shows one)."""
    r = s.reduction or s.size_ratio
    if r is not None and r.get("form") == "none":
        return r["note"]
    return s.reduction_note.removeprefix("none: ")


def _ratio_of(r: dict, kind: str) -> Ratio:
    """A factor as factors.compare stores it (factor, interval, p_above_1, form, bound)."""
    lo, hi = r["interval"]
    return Ratio(kind, r["factor"], lo, hi, r["p_above_1"], r.get("form", "point"), r.get("bound"))


def _pair(value) -> tuple[float, float] | None:
    return (float(value[0]), float(value[1])) if value else None


def _estimate(s: StudyData) -> Estimate:
    """The study's estimate, typed (every field None when it has none or too few runs)."""
    return Estimate.from_dict(s.estimate if s.ok and s.estimate else {})


def _row(s: StudyData) -> Row:
    est = _estimate(s)
    return Row(
        name=s.name,
        label=s.label,
        anchor=anchor(s.name),
        measured_op=measured_words(s.settings),
        n_runs=len(s.runs),
        status=s.status,
        params_p80=est.params_p80,
        interval_params=est.interval_params,
        d_p80=est.d_p80,
        interval_d=_pair(est.to_dict().get("interval_d")),  # not a typed field
        interval_ratio=est.interval_ratio,
        precision=s.settings.search.precision,
        is_baseline=s.baseline == s.name,
        ratio=_ratio(s),
        no_ratio=_no_ratio(s),
        warning=s.warning,
        status_text=s.status_text,
        transition=s.transition,
    )


def _groups(studies: list[StudyData], rows: dict[str, Row]) -> tuple[Group, ...]:
    by_name = {s.name: s for s in studies}
    bases = list(dict.fromkeys(s.baseline for s in studies if s.baseline is not None))
    groups = []
    for name in bases:
        base = by_name[name]
        members = [base, *(s for s in studies if s.baseline == name and s.name != name)]
        title = f"{study_title(base.settings)}"
        groups.append(Group(title, name, base.label, tuple(rows[s.name] for s in members)))
    alone = [s for s in studies if s.baseline is None]
    if alone:
        groups.append(Group("no baseline", None, None, tuple(rows[s.name] for s in alone)))
    return tuple(groups)


def _runs(s: StudyData, others: tuple[str, ...]) -> tuple[RunRow, ...]:
    return tuple(
        RunRow(
            trial=r["trial"],
            d=r["d"],
            params=r["params"],
            seed=r["seed"],
            accuracy=r["accuracy"],
            strict=r["strict"],
            others=tuple(r["accuracy_ops"].get(op) for op in others),
            steps=r["steps"],
            stop=r["stop_reason"] or "-",
            train_s=r["train_s"],
        )
        for r in s.runs
    )


def _study(
    s: StudyData, row: Row, rows: dict[str, Row], figure: str | None, data: dict
) -> StudySection:
    labels = {name: r.label for name, r in rows.items()}
    base = rows.get(s.baseline) if s.baseline not in (None, s.name) else None
    ratio_text = None
    if base is not None and row.ratio is not None and row.ratio.form != "point":
        what = bound_phrase(row.ratio)
        ratio_text = (
            f"{what}, for the sizes and seeds run ("
            f"{bound_words(row.ratio, 'the baseline', base.transition, row.transition)}); the "
            f"posteriors' ratio ({row.ratio.factor:.2f}x, 90%: {row.ratio.lo:.2f} - "
            f"{row.ratio.hi:.2f}) is no result: on its bounded side it is the prior's range"
        )
    typed = _estimate(s)
    est = typed.to_dict()  # the keys the record does not type: midpoint, fit, seed spread
    fit = est.get("fit") or {}
    others = other_ops(s.settings)
    spread = est.get("seed_spread") or {}
    near = near_transition_words(est) if est else None
    chance = Estimate.from_dict(s.estimate or {}).chance  # also of a study with too few runs
    return StudySection(
        row=row,
        title=study_title(s.settings),
        search_status=s.search_status,
        n_running=s.n_running,
        n_failed=s.n_failed,
        level=s.settings.search.level,
        midpoint_params=est.get("midpoint_params"),
        midpoint_interval=_pair(est.get("midpoint_interval_params")),
        midpoint_d=est.get("midpoint_d"),
        asymptote=typed.asymptote,
        chance=chance,
        fit_params_p80=fit.get("params_p80"),
        fit_d_p80=fit.get("d_p80"),
        near=near,
        runs_for_precision=spread.get("runs_for_precision") if near else None,
        recomputed=s.estimate_source == "recomputed",
        baseline_label=labels.get(s.baseline) if s.baseline != s.name else None,
        figure=figure,
        settings=settings_rows(s, chance),
        other_ops=others,
        runs=_runs(s, others),
        data=data,
        transition_text=transition_text(row),
        ratio_text=ratio_text,
    )


def _analyses(s: StudyData, entry: dict, analysis_dir: str) -> list[AnalysisView]:
    out = []
    for a in entry["analyses"]:
        summ = a["summary"]
        abl = summ.get("ablation") or {}
        missing = None
        if not a["report_figures"] and a.get("folder") is None:
            missing = f"{analysis_dir}/{folder_name(s.name, a['trial'])}"
        out.append(
            AnalysisView(
                study=s.label,
                anchor=anchor(s.name),
                trial=a["trial"],
                d_model=a["d_model"],
                params=a["params"],
                accuracy=a["accuracy"],
                separation=tuple((k, float(v)) for k, v in (summ.get("separation") or {}).items()),
                ordering=summ.get("ordering"),
                cyclic=summ.get("cyclic"),
                cyclic_frequency=summ.get("cyclic_frequency"),
                cyclic_vs_p95=summ.get("cyclic_vs_p95"),
                attn_share=summ.get("attn_share"),
                ablation=(
                    (abl.get("intact", 0.0), abl.get("attn", 0.0), abl.get("mlp", 0.0))
                    if abl
                    else None
                ),
                figures=tuple(a["report_figures"].items()),
                missing_folder=missing,
            )
        )
    return out


def _transfer(t: dict, figure: str) -> TransferView:
    return TransferView(
        title=f"{'+'.join(t['tasks']).upper()} after {'+'.join(t['pretrain']).upper()}",
        d_model=t["d_model"],
        params=t["params_total"],
        file=t["file"],
        figure=figure,
        measure=t["measure"].upper(),
        seeds=tuple(zip(t["seeds"], t["transfer"], t["scratch"], strict=True)),
        transfer_mean=t["transfer_mean"],
        scratch_mean=t["scratch_mean"],
        gain_mean=t["gain_mean"],
        data=t | {"figure": figure},
    )


def _efficiency(s: StudyData) -> EfficiencyRow:
    e = s.efficiency
    g, c = e["grid"], e["cost_model"]
    return EfficiencyRow(
        label=s.label,
        runs=e["runs"],
        failed=e["failed"],
        steps=e["steps"],
        train_s=e["train_s"],
        cpu_s=e.get("cpu_s", 0.0),
        runs_with_cpu=e.get("runs_with_cpu", 0),
        grid_runs=g["runs"],
        grid_sizes=len(g["sizes"]),
        grid_d=(g["sizes"][0], g["sizes"][-1]),
        grid_seeds=g["seeds"],
        grid_steps=g["steps"],
        grid_s=g["train_s"],
        share_runs=e["share_runs"],
        share_steps=e["share_steps"],
        share_s=e["share_s"],
        cost_a_ms=c["a_s"] * 1e3,
        cost_b_ms=c["b_s"] * 1e3,
        cost_source=c["source"],
    )


def build(
    collected: Collected,
    entries: list[dict],
    transfer_figures: list[str],
    figures: dict[str, str],
    plotly_src: str | None,
    rendered: tuple[str, str, str],
    grid: tuple[int, int],
) -> Report:
    """The report of ``collected``. ``entries``: each study's data as ``results.json`` keeps it
    (figure names included); ``rendered``: (when, from what, commit) of this rendering."""
    studies = collected.studies
    rows = {s.name: _row(s) for s in studies}
    groups = _groups(studies, rows)
    order = [r.name for g in groups for r in g.rows]  # the page lists studies as the table does
    by_name = {s.name: (s, e) for s, e in zip(studies, entries, strict=True)}
    views = [
        _study(by_name[n][0], rows[n], rows, by_name[n][1]["figure"], by_name[n][1]) for n in order
    ]
    warnings = tuple(
        Warning(v.row.label, v.row.anchor, v.row.warning) for v in views if v.row.warning
    )
    analyses = [
        a for n in order for a in _analyses(by_name[n][0], by_name[n][1], collected.analysis_dir)
    ]
    when, source, commit = rendered
    return Report(
        format=FORMAT,
        created=collected.created,
        version=collected.version,
        git_commit=collected.git_commit,
        rendered=when,
        rendered_from=source,
        rendered_commit=commit,
        storage=collected.storage,
        analysis_dir=collected.analysis_dir,
        baselines=tuple(collected.baselines),
        grid_sizes=grid[0],
        grid_seeds=grid[1],
        groups=groups,
        findings=findings(groups),
        warnings=warnings,
        figures=figures,
        plotly_src=plotly_src,
        studies=tuple(views),
        analyses=tuple(analyses),
        transfer=tuple(
            _transfer(t, f) for t, f in zip(collected.transfer, transfer_figures, strict=True)
        ),
        efficiency=tuple(  # an objective's study: its compute is the user's, not known here
            _efficiency(by_name[n][0]) for n in order if by_name[n][0].efficiency
        ),
        pretraining_excluded=any(s.settings.pretrain for s in studies),
        budget=tuple(row for n in order for row in _budget_rows(by_name[n][0])),
        recipes=recipes(studies),
    )


def _budget_rows(s: StudyData) -> list[BudgetRow]:
    factors = {b["step"]: b for b in s.budget_reduction}
    rows = []
    for b in s.budget:
        f = factors.get(b["step"])
        ratio, no_ratio = None, ""
        if f is not None and f.get("form") == "none":
            no_ratio = f"none: {f['note']}"
        elif f is not None:
            ratio = _ratio_of(f, "reduction")
        rows.append(
            BudgetRow(
                s.label,
                anchor(s.name),
                b["step"],
                b["tokens"],
                b["n_runs"],
                b["params_p80"],
                tuple(b["interval_params"]),
                b["asymptote"],
                ratio,
                b.get("transition"),
                no_ratio,
            )
        )
    return rows
