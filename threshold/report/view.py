"""The report's view model: what its pages show, built once from the collected studies.

One :class:`Report` of frozen dataclasses holds every number and sentence of a report; the
templates (``templates/``) render it into ``index.html`` and ``summary.md`` and
:meth:`Report.to_json` writes it as ``results.json``, so the three always agree. Numbers stay
numbers here: how they are written (digits, separators) is the templates' business, through the
filters of :mod:`threshold.report.text`. Each study also keeps its data as collected
(``StudyView.data``: settings, runs, the estimate with every key the search stored), which is what
a report rendered again from its ``results.json`` reads (:mod:`threshold.report.results`).

Studies are grouped by baseline: each is compared with the baseline of its own testbed and
modulus (:func:`threshold.report.data.compare`); a group without a baseline shows no factor.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from threshold.config import recipe_fields
from threshold.report.data import (
    Collected,
    StudyData,
    recipe_of,
    recipe_tags,
    study_title,
    where,
)
from threshold.report.results import FORMAT
from threshold.report.text import near_transition_words
from threshold.search.record import Estimate

__all__ = [
    "AnalysisView",
    "EfficiencyRow",
    "Group",
    "Ratio",
    "RecipeView",
    "Report",
    "Row",
    "RunRow",
    "StudyView",
    "TransferView",
    "Warning",
    "build",
]


@dataclass(frozen=True)
class Ratio:
    """Baseline 80% point / study's, with its 90% interval (:func:`reduction_factor`)."""

    kind: str  # "reduction": the baseline's op; "size ratio": another op (how much harder)
    factor: float  # the ratio of the two posterior medians
    lo: float
    hi: float
    p_smaller: float  # posterior probability that the study's 80% point is the smaller
    # "point": both transitions located, the factor and interval above stand; "lower bound" or
    # "upper bound": a side is only bounded by its runs, and ``bound`` (threshold.search.bounds.
    # factor_bound: value, at_median, the sizes divided) is what the report says instead.
    form: str = "point"
    bound: dict | None = None

    @property
    def clear(self) -> bool:
        """The 90% interval (a bound: the bound) lies on one side of 1."""
        if self.form == "lower bound":
            return self.bound["value"] > 1
        if self.form == "upper bound":
            return self.bound["value"] < 1
        return self.lo > 1 or self.hi < 1


@dataclass(frozen=True)
class Row:
    """One study in the transitions table."""

    name: str
    label: str
    anchor: str  # the id of its section on the page
    measured_op: str
    n_runs: int
    status: str  # "ok", "too_few_runs" or "no_runs"
    params_p80: float | None
    interval_params: tuple[float, float] | None
    d_p80: float | None
    interval_d: tuple[float, float] | None
    interval_ratio: float | None  # how wide the 90% interval is (hi / lo)
    precision: float  # the width the study's search aimed for
    is_baseline: bool
    ratio: Ratio | None
    no_ratio: str  # why a study with a baseline has no factor, else ""
    warning: str  # what makes the estimate doubtful, or why there is none, else ""
    status_text: str
    # Whether the runs locate the 80% point (kind "point") or only bound it ("lower bound":
    # above params; "upper bound": at or below it; "none"): threshold.search.bounds.locate.
    transition: dict | None = None

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def located(self) -> bool:
        return self.ok and (self.transition is None or self.transition["kind"] == "point")

    @property
    def wide(self) -> bool:
        return self.interval_ratio is not None and self.interval_ratio > self.precision


@dataclass(frozen=True)
class Group:
    """A baseline and the studies of its testbed and modulus; or the studies without one."""

    title: str  # "ADD alone, mod 10" (the baseline's), or "no baseline"
    baseline: str | None  # the baseline study's name
    baseline_label: str | None
    rows: tuple[Row, ...]


@dataclass(frozen=True)
class Warning:
    label: str
    anchor: str
    text: str


@dataclass(frozen=True)
class RunRow:
    trial: int
    d: int
    params: int | None
    seed: int | None
    accuracy: float
    strict: float | None
    others: tuple[float | None, ...]  # the mixture's other ops, in StudyView.other_ops order
    steps: int | None
    stop: str
    train_s: float | None


@dataclass(frozen=True)
class StudyView:
    """A study's section: its estimate in full, figure, settings and runs."""

    row: Row
    title: str
    search_status: str
    n_running: int
    n_failed: int
    level: float  # the share of the way up the curve that marks the transition (0.8)
    midpoint_params: float | None
    midpoint_interval: tuple[float, float] | None
    midpoint_d: float | None
    asymptote: float | None
    chance: float | None
    fit_params_p80: float | None  # the least-squares logistic's 80% point
    fit_d_p80: float | None
    near: str | None  # the runs near the transition in words
    runs_for_precision: float | None
    recomputed: bool  # the stored estimate predates the last run
    baseline_label: str | None
    figure: str | None
    settings: tuple[tuple[str, str], ...]
    other_ops: tuple[str, ...]
    runs: tuple[RunRow, ...]
    data: dict  # the study as collected (what a re-render reads); its estimate as fit.py wrote it
    # Sentences where the runs only bound a number: the 80% point, and the factor.
    transition_text: str | None = None
    ratio_text: str | None = None


@dataclass(frozen=True)
class AnalysisView:
    study: str
    anchor: str
    trial: int
    d_model: int | None
    params: int | None
    accuracy: float | None
    separation: tuple[tuple[str, float], ...]  # score / its null's 95th percentile
    ordering: float | None
    cyclic: float | None
    cyclic_frequency: int | None
    cyclic_vs_p95: float | None
    attn_share: float | None
    ablation: tuple[float, float, float] | None  # intact, attention zeroed, MLP zeroed
    figures: tuple[tuple[str, str], ...]  # (kind, file beside the page)
    missing_folder: str | None  # where its figures should have been, when they were not


@dataclass(frozen=True)
class TransferView:
    title: str  # "ADD after MAX+MED"
    d_model: int
    params: int | None
    file: str
    figure: str
    measure: str
    seeds: tuple[tuple[int, float, float], ...]  # seed, pretrained, from scratch
    transfer_mean: float
    scratch_mean: float
    gain_mean: float
    data: dict  # as `threshold transfer --json` wrote it, curves included


@dataclass(frozen=True)
class EfficiencyRow:
    label: str
    runs: int
    failed: int
    steps: int
    train_s: float
    cpu_s: float  # of the runs_with_cpu runs that recorded their CPU seconds
    runs_with_cpu: int
    grid_runs: int
    grid_sizes: int
    grid_d: tuple[int, int]
    grid_seeds: int
    grid_steps: int
    grid_s: float
    share_runs: float | None
    share_steps: float | None
    share_s: float | None
    cost_a_ms: float
    cost_b_ms: float
    cost_source: str


@dataclass(frozen=True)
class BudgetRow:
    """A study's estimate at one checkpoint of its budget, and its factor there."""

    label: str
    anchor: str
    step: int
    tokens: int
    n_runs: int
    params_p80: float
    interval_params: tuple[float, float]
    asymptote: float | None
    ratio: Ratio | None  # against the baseline at the same checkpoint
    transition: dict | None = None  # the runs there locate the 80% point, or bound it
    no_ratio: str = ""  # why the factor there is not given, when the study has one elsewhere

    @property
    def located(self) -> bool:
        return self.transition is None or self.transition["kind"] == "point"


@dataclass(frozen=True)
class RecipeView:
    """One recipe of the report's studies, every field of it: what a label's short name means."""

    tag: str  # its short name in the labels ("recipe A", "small"), "" for the report's only one
    words: str  # "fast + init_std 0.02, weight_decay 0.01": its named recipe and the changes
    n_studies: int
    fields: tuple[tuple[str, str], ...]  # (field, value); "varies" where its studies differ


@dataclass(frozen=True)
class Report:
    format: str
    created: str  # when the studies were read
    version: str
    git_commit: str
    rendered: str  # when these pages were written, and from what
    rendered_from: str  # "storage" or the results.json read again
    rendered_commit: str
    storage: str
    analysis_dir: str
    baselines: tuple[str, ...]
    grid_sizes: int
    grid_seeds: int
    groups: tuple[Group, ...]
    findings: tuple[str, ...]  # one sentence a comparison, the headline
    warnings: tuple[Warning, ...]
    figures: dict[str, str]  # "comparison", "curves": files beside the page
    plotly_src: str | None  # where plotly's script is, relative to the page; None: no figure
    studies: tuple[StudyView, ...]
    analyses: tuple[AnalysisView, ...]
    transfer: tuple[TransferView, ...]
    efficiency: tuple[EfficiencyRow, ...]
    pretraining_excluded: bool
    budget: tuple[BudgetRow, ...] = ()  # studies with checkpoints, in page order
    recipes: tuple[RecipeView, ...] = ()  # in the order the labels letter them

    @property
    def recipe_rows(self) -> list[tuple[str, tuple[str, ...], bool]]:
        """(field, value in each recipe, whether they differ): differing fields first."""
        names = [k for k, _ in self.recipes[0].fields] if self.recipes else []
        values = [tuple(dict(r.fields)[k] for r in self.recipes) for k in names]
        rows = [(k, v, len(set(v)) > 1) for k, v in zip(names, values, strict=True)]
        return [r for r in rows if r[2]] + [r for r in rows if not r[2]]

    @property
    def rows(self) -> list[Row]:
        return [row for group in self.groups for row in group.rows]

    @property
    def any_factor(self) -> bool:
        return any(g.baseline for g in self.groups)

    def to_json(self) -> dict:
        """``results.json``: the view as plain JSON, with the transitions table flat as
        ``comparison`` (one object a study, the terminal's and the suite's rows)."""
        out = dataclasses.asdict(self)
        out["comparison"] = [
            dataclasses.asdict(r) | {"baseline": g.baseline, "baseline_label": g.baseline_label}
            for g in self.groups
            for r in g.rows
        ]
        return out


def anchor(name: str) -> str:
    return "study-" + "".join(c if c.isalnum() else "-" for c in name)


def _where_words(s: StudyData) -> str:
    testbed, n = where(s)
    return f"mod {n}" if testbed == "listops" else f"{testbed} S_{n}"


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
    """A factor as data.compare stores it (factor, interval, p_above_1, form, bound)."""
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
        measured_op=s.settings.task.measured_op.upper(),
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
    size up to 455,810 parameters (d = 190; 6 runs)``."""
    n = f"{t['n_runs']} run{'s' if t['n_runs'] != 1 else ''}"
    if t["kind"] == "lower bound":
        return (
            f"{label} reached its 80% level at no size up to {t['params']:,.0f} parameters "
            f"(d = {t['d']}; {n})"
        )
    if t["kind"] == "upper bound":
        return (
            f"{label} reached its 80% level at every size from {t['params']:,.0f} parameters "
            f"(d = {t['d']}) up ({n})"
        )
    return f"{label}'s runs neither locate nor bound its 80% point ({n})"


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


def _findings(groups: tuple[Group, ...]) -> tuple[str, ...]:
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


def _value_words(value) -> str:
    return "none" if value is None else f"{value:g}" if isinstance(value, float) else str(value)


def _recipes(studies: list[StudyData]) -> tuple[RecipeView, ...]:
    """The report's recipes, each with every field's value (a budget field its studies set
    apart, such as their steps, is "varies")."""
    tags = recipe_tags(studies)
    out = []
    for words, tag in tags.items():
        mine = [s for s in studies if recipe_of(s.settings) == words]
        each = [recipe_fields(s.settings.train, dict(s.settings.model)) for s in mine]
        fields = tuple(
            (k, _value_words(each[0][k]) if all(e[k] == each[0][k] for e in each) else "varies")
            for k in each[0]
        )
        out.append(RecipeView(tag, words, len(mine), fields))
    return tuple(out)


def recipe_table_words(train, model: dict) -> str:
    """``fast: lr 0.003, weight_decay 0.1, init_std none, schedule cosine, ...``: the recipe's
    name and every field's value (the training row shows only the budget and the optimizer)."""
    fields = recipe_fields(train, model)
    words = [f"{k} {_value_words(v)}" for k, v in fields.items()]
    return f"{train.recipe}: " + ", ".join(words)


def settings_rows(s: StudyData, chance: float | None) -> tuple[tuple[str, str], ...]:
    """(setting, value) pairs that define a study."""
    task, train, search = s.settings.task, s.settings.train, s.settings.search
    n_train = task.n_train if task.n_train is not None else 5000 * task.n
    level = (
        f"chance + {search.level:g} x (asymptote - chance)"
        if search.chance_corrected
        else f"{search.level:g} x asymptote (the paper's wording)"
    )
    modulus = "modulus" if task.testbed == "listops" else "degree k of S_k"
    return (
        ("study", s.name),
        ("mixture", "+".join(task.ops).upper()),
        ("measured op", task.measured_op.upper()),
        ("testbed", f"{task.testbed}, {modulus} {task.n}"),
        (
            "grammar",
            f"depth {task.depth}, arity {task.arity_min}-{task.arity_max}, p_nest {task.p_nest:g}",
        ),
        (
            "data",
            f"{n_train:,} training sequences, {task.n_test:,} test per op, hold-out "
            f"{task.holdout:g}, split seed {task.split_seed}",
        ),
        ("pretraining", "+".join(s.settings.pretrain).upper() or "none"),
        (
            "training",
            f"at most {train.max_steps:,} steps a run, batch {train.batch_size}, lr {train.lr:g}, "
            f"weight decay {train.weight_decay:g}",
        ),
        ("recipe", recipe_table_words(train, dict(s.settings.model))),
        (
            "search",
            f"precision {search.precision:g}x, budget {search.budget} runs, first bracket d "
            f"{search.d_lo}-{search.d_hi} (limits {search.d_min}-{search.d_max}), base seed "
            f"{search.base_seed}",
        ),
        ("transition", level),
        ("chance", "-" if chance is None else f"{chance:.3f} (majority answer or 1/n)"),
        (
            "threshold",
            f"{s.attrs.get('version') or '?'}, commit {str(s.attrs.get('git_commit') or '?')[:10]}",
        ),
    )


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


def _transition_text(row: Row) -> str | None:
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


def _study(
    s: StudyData, row: Row, rows: dict[str, Row], figure: str | None, data: dict
) -> StudyView:
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
    others = tuple(op for op in s.settings.task.ops if op != s.settings.task.measured_op)
    spread = est.get("seed_spread") or {}
    near = near_transition_words(est) if est else None
    chance = Estimate.from_dict(s.estimate or {}).chance  # also of a study with too few runs
    return StudyView(
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
        transition_text=_transition_text(row),
        ratio_text=ratio_text,
    )


def _analyses(s: StudyData, entry: dict, analysis_dir: str) -> list[AnalysisView]:
    out = []
    for a in entry["analyses"]:
        summ = a["summary"]
        abl = summ.get("ablation") or {}
        missing = None
        if not a["report_figures"] and a.get("folder") is None:
            missing = f"{analysis_dir}/{s.name}-trial{a['trial']}"
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
        findings=_findings(groups),
        warnings=warnings,
        figures=figures,
        plotly_src=plotly_src,
        studies=tuple(views),
        analyses=tuple(analyses),
        transfer=tuple(
            _transfer(t, f) for t, f in zip(collected.transfer, transfer_figures, strict=True)
        ),
        efficiency=tuple(_efficiency(by_name[n][0]) for n in order),
        pretraining_excluded=any(s.settings.pretrain for s in studies),
        budget=tuple(row for n in order for row in _budget_rows(by_name[n][0])),
        recipes=_recipes(studies),
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
