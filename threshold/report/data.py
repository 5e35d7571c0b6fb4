"""What a report shows of a study, as collected: :class:`StudyData`, :class:`Collected`, and what
is said of them (titles, short labels, the status sentence and warning).

The data is gathered from a storage by :mod:`threshold.report.reading` or read back from a
report's ``results.json`` by :mod:`threshold.report.results`; its search cost is
:mod:`threshold.report.efficiency`'s, its factors against a baseline
:mod:`threshold.report.factors`'. This module knows no storage and writes nothing.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from threshold.config import recipe_words
from threshold.search.bounds import near_chance_words
from threshold.search.fit import PLATEAU_GAP, stray_mass, strays
from threshold.search.notes import MIN_RUNS
from threshold.search.objective import ObjectiveSettings
from threshold.search.settings import SearchSettings
from threshold.search.spec import StudySettings

__all__ = [
    "Collected",
    "Progress",
    "StudyData",
    "judge",
    "label",
    "recipe_of",
    "recipe_tags",
    "study_title",
]

Progress = Callable[[str, int, int], None]  # (stage, done, total)


@dataclass
class StudyData:
    """One study as the report shows it."""

    name: str
    settings: StudySettings
    attrs: dict  # the study's user attributes other than analyses (version, git commit, ...)
    status: str  # "ok", "too_few_runs" or "no_runs"
    status_text: str  # one sentence: why a study has no estimate, or how precise it is
    search_status: str  # where the search stands (stopped, searching, finishing)
    runs: list[dict]  # completed runs, trial order
    n_running: int
    n_failed: int
    estimate: dict | None  # the stored estimate (or one recomputed from the runs)
    estimate_source: str | None  # "stored" or "recomputed"
    policy: SearchSettings | None = None
    posterior: tuple | None = None  # (grid, weights) behind the estimate
    band: dict | None = None  # credible band of the mean curve: params, lo, median, hi
    x80: dict | None = None  # the posterior of ln x80 on a lattice (x80_marginal): for factors
    # As a results.json read back holds them: written again unchanged, not in today's terms.
    stored_settings: dict | None = None
    efficiency: dict = field(default_factory=dict)
    analyses: list[dict] = field(default_factory=list)
    warning: str = ""  # what makes the estimate doubtful (a plateau), or why there is none
    baseline: str | None = None  # the study this one is compared with: same testbed and modulus
    reduction: dict | None = None  # against its baseline; None without one
    reduction_note: str = ""  # why there is no factor, when there is a baseline
    # A study of another op on the baseline's testbed and modulus gets no reduction factor but the
    # same ratio under its own name: baseline 80% point / this one's, how much larger a model the
    # baseline's op needs (ADD against MAX: how much harder ADD is), not an effect of a mixture.
    size_ratio: dict | None = None
    label: str = ""  # short and unique among the report's studies, for legends and tables
    # The budget axis: the estimate at each checkpoint step every run kept (step, tokens,
    # params_p80, interval_params, asymptote, n_runs, x80), and its factors against the baseline's
    # at the same steps (step, tokens, and factor's keys).
    budget: list[dict] = field(default_factory=list)
    budget_reduction: list[dict] = field(default_factory=list)
    # Whether the runs locate the 80% point or only bound it (threshold.search.bounds.locate);
    # None without an estimate. Each budget entry carries its own under "transition".
    transition: dict | None = None

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def to_json(self) -> dict:
        s = self.settings
        return {
            "name": self.name,
            "label": self.label,
            "title": study_title(s),
            "status": self.status,
            "status_text": self.status_text,
            "warning": self.warning or None,
            "search_status": self.search_status,
            "settings": self.stored_settings
            or _objective_json(s)
            or {
                "task": s.task.to_dict(),
                "train": s.train.to_dict(),
                "search": json.loads(s.to_attrs()["search"]),
                "pretrain": list(s.pretrain),
                "model": dict(s.model),
                "measured_op": s.task.measured_op,
            },
            "version": self.attrs.get("version"),
            "git_commit": self.attrs.get("git_commit"),
            "n_runs": len(self.runs),
            "n_running": self.n_running,
            "n_failed": self.n_failed,
            "estimate": self.estimate,
            "estimate_source": self.estimate_source,
            "transition": self.transition,
            "band": self.band,
            "x80": self.x80,
            "baseline": self.baseline,
            "reduction": self.reduction,
            "reduction_note": self.reduction_note or None,
            "size_ratio": self.size_ratio,
            "efficiency": self.efficiency,
            "budget": self.budget,
            "budget_reduction": self.budget_reduction,
            # Without where a report read back from its folder copies the figures from.
            "analyses": [{k: v for k, v in a.items() if k != "copy_from"} for a in self.analyses],
            "runs": self.runs,
        }


@dataclass
class Collected:
    storage: str  # the URL, password hidden
    studies: list[StudyData]
    baselines: list[str]  # study names; each study is compared with the one of its testbed
    transfer: list[dict]
    analysis_dir: str
    created: str = ""  # when the studies were read (a re-rendered report keeps the original's)
    version: str = ""  # threshold's version and commit that read them
    git_commit: str = ""


def _objective_json(settings) -> dict | None:
    """An objective study's settings as results.json holds them; None for a testbed's."""
    if not isinstance(settings, ObjectiveSettings):
        return None
    return {k: json.loads(v) for k, v in settings.to_attrs().items()}


def measured_words(settings) -> str:
    """What a study's value measures: its op (``ADD``), or an objective's ``accuracy``."""
    if isinstance(settings, ObjectiveSettings):
        return "accuracy"
    return settings.task.measured_op.upper()


def other_ops(settings) -> tuple[str, ...]:
    """The ops of a study's mixture besides the one measured (none for an objective's)."""
    if isinstance(settings, ObjectiveSettings):
        return ()
    return tuple(op for op in settings.task.ops if op != settings.task.measured_op)


def study_title(settings: StudySettings, recipe: str | None = None) -> str:
    """``ADD in MAX+MED+ADD, mod 10``; ``ADD after MAX+MED, mod 10`` with pretraining; the recipe
    (``recipe``, default: its words, nothing for plain ``fast``), weights and exposure control in
    brackets. An objective's study: its objective, by the size axis's name."""
    if isinstance(settings, ObjectiveSettings):
        return f"{settings.objective} by {settings.size_name}"
    task = settings.task
    measured = task.measured_op.upper()
    where = f"mod {task.n}" if task.testbed == "listops" else f"{task.testbed} S_{task.n}"
    mix = "" if tuple(task.ops) == (task.measured_op,) else f" in {'+'.join(task.ops).upper()}"
    before = f" after {'+'.join(settings.pretrain).upper()}" if settings.pretrain else ""
    extra = [recipe_words(settings.train, dict(settings.model), task) if recipe is None else recipe]
    if task.weights is not None:
        pairs = zip(task.ops, task.weights, strict=True)
        extra.append("weights " + ",".join(f"{o}={w:g}" for o, w in pairs))
    if task.match_exposure:
        extra.append(f"{task.measured_op.upper()} nodes matched")
    words = "; ".join(e for e in extra if e)
    return f"{measured}{mix}{before}, {where}" + (f" ({words})" if words else "")


def recipe_of(settings: StudySettings) -> str:
    """The recipe in words: ``fast``, or ``fast + init_std 0.02, weight_decay 0.01`` (``paper +
    split groups``: a split other than the recipe's); ``objective``: the user's own runs."""
    if isinstance(settings, ObjectiveSettings):
        return "objective"
    return recipe_words(settings.train, dict(settings.model), settings.task) or "fast"


def recipe_tags(studies: Sequence[StudyData]) -> dict[str, str]:
    """A short name for each recipe of the report (its words: :func:`recipe_of`), for labels.

    Recipes that are all named ones unchanged (``fast``, ``small``) keep their names, and a
    report of plain ``fast`` alone needs none; otherwise, several recipes are ``recipe A``,
    ``recipe B``, ... in the order of the studies, and a report of one recipe needs none. The
    report's recipe table gives each in full.
    """
    recipes = list(dict.fromkeys(recipe_of(s.settings) for s in studies))
    if all(" + " not in r for r in recipes):
        return {r: "" if recipes == ["fast"] else r for r in recipes}
    if len(recipes) == 1:
        return {recipes[0]: ""}
    return {r: f"recipe {chr(ord('A') + i)}" for i, r in enumerate(recipes)}


def label(studies: list[StudyData]) -> None:
    """Short labels for legends and tables: the study's title with its recipe's short name
    (:func:`recipe_tags`), and the name's hash where two studies share one."""
    tags = recipe_tags(studies)
    titles = [study_title(s.settings, tags[recipe_of(s.settings)]) for s in studies]
    for s, title in zip(studies, titles, strict=True):
        shared = titles.count(title) > 1
        s.label = f"{title} [{s.name.rsplit('-', 1)[-1]}]" if shared else title


def judge(data: StudyData, n_completed: int) -> None:
    """Set a study's status, its one-sentence status text and its warning from its runs and
    estimate (with the study's stored data, or again when a report is re-rendered)."""
    estimate, runs = data.estimate, data.runs
    data.status, data.warning = "ok", ""
    if not runs:
        data.status, data.status_text = "no_runs", "no completed runs yet: nothing to fit"
    elif n_completed < MIN_RUNS or data.policy is None or not estimate.get("params_p80"):
        data.status = "too_few_runs"
        data.status_text = (
            f"too few runs to fit: {n_completed} completed, the estimate needs the "
            f"{MIN_RUNS} runs of the initial bracket"
        )
    if not data.ok:
        data.warning = data.status_text
        return
    ratio, precision = estimate["interval_ratio"], data.settings.search.precision
    data.status_text = f"90% interval {ratio:.2f}x wide" + (
        f", within the study's precision of {precision:g}x"
        if ratio <= precision
        else f", wider than the study's precision of {precision:g}x"
    )
    best = max((r["accuracy"] for r in runs if r["accuracy"] is not None), default=None)
    asymptote = estimate.get("asymptote")
    doubts = []
    if best is not None and asymptote is not None and best - asymptote > PLATEAU_GAP:
        doubts.append(
            f"its asymptote {asymptote:.2f} lies {best - asymptote:.2f} below its best run "
            f"({best:.3f}): the 80% point may mark a plateau, not the transition"
        )
    if strays(estimate):
        sd = max(sd for sd, _ in estimate["offset_sd_posterior"])
        doubts.append(
            f"its sizes stray from any smooth curve (P = {stray_mass(estimate):.2f} that the "
            f"runs at each size share a logit offset of sd {sd:g} from it): the interval is "
            "widened to match, and more seeds at the sizes run narrow it less than runs at new "
            "sizes"
        )
    chance = near_chance_words(estimate)
    if chance:
        doubts.append(chance)
    data.warning = "; ".join(doubts)
