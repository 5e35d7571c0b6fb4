"""The report's view model: what its pages show, as frozen dataclasses.

One :class:`Report` holds every number and sentence of a report; the templates (``templates/``)
render it into ``index.html`` and ``summary.md`` and :meth:`Report.to_json` writes it as
``results.json``, so the three always agree. Numbers stay numbers here: how they are written
(digits, separators) is the templates' business, through the filters of
:mod:`threshold.report.text`. Each study also keeps its data as collected (``StudySection.data``:
settings, runs, the estimate with every key the search stored), which is what a report rendered
again from its ``results.json`` reads (:mod:`threshold.report.results`).

:func:`threshold.report.build.build` makes the view from the collected studies; its sentences
come from :mod:`threshold.report.sentences`, its settings tables from
:mod:`threshold.report.settings_table`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

__all__ = [
    "AnalysisView",
    "BudgetRow",
    "EfficiencyRow",
    "Group",
    "Ratio",
    "RecipeView",
    "Report",
    "Row",
    "RunRow",
    "StudySection",
    "TransferView",
    "Warning",
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
    others: tuple[float | None, ...]  # the mixture's other ops, in StudySection.other_ops order
    steps: int | None
    stop: str
    train_s: float | None


@dataclass(frozen=True)
class StudySection:
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

    @property
    def unchecked(self) -> bool:
        """The runs' accuracies at this checkpoint are not kept (a results.json from before
        they were): only the sizes were checked (threshold.search.bounds.sizes_only)."""
        return self.transition is not None and not self.transition["checked"]


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
    studies: tuple[StudySection, ...]
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

    @property
    def any_unchecked(self) -> bool:
        """Some budget row was checked by its sizes alone: the pages say what that means."""
        return any(b.unchecked for b in self.budget)

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
