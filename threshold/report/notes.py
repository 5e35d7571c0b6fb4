"""The optuna-dashboard note of a study: its estimate in words (a template).

Presentation only: :func:`threshold.search.notes.write_note` reads the study record, calls these
and the figure's (:mod:`threshold.report.note_figure`), handed in together by the command line
as :data:`threshold.report.dashboard_note.NOTE_RENDER`, and stores what they return on the study.
The note is a :class:`Note` of numbers and sentences rendered by ``templates/note.md.j2`` (the
renderer of the report pages and the suite README):
the 80% point in parameters and in d with its 90% interval, the midpoint, the least-squares
fit's 80% point, the asymptote, the runs, where the search stands and the study's settings.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from threshold.config import recipe_words
from threshold.report.render import render
from threshold.report.text import near_transition_words, number
from threshold.search.bounds import answer, answer_words, near_chance_words
from threshold.search.fit import MIN_POINTS
from threshold.search.notes import MIN_RUNS, NoteRun
from threshold.search.objective import ObjectiveSettings
from threshold.search.spec import StudySettings

__all__ = [
    "Note",
    "bound_words",
    "near_transition_words",
    "note_markdown",
    "result_words",
    "study_answer",
]


@dataclass(frozen=True)
class Note:
    title: str  # "MAX (listops mod 5)"
    point: str  # "80% point"
    enough: bool  # an estimate to show (the initial bracket is done)
    n_runs: int
    n_running: int
    min_runs: int
    bracket_d: tuple[int, ...]
    params_p80: float | None
    d_p80: float | None
    interval_params: tuple[float, float] | None
    interval_ratio: float | None
    interval_d: tuple[float, float] | None
    midpoint_params: float | None
    midpoint_interval: tuple[float, float] | None
    midpoint_d: float | None
    fit_params_p80: float | None
    fit_d_p80: float | None
    no_fit: str  # why there is no least-squares fit, when there is an estimate but no fit
    asymptote: float | None
    chance: float | None
    near: str | None
    estimate_runs: int | None  # runs the estimate is from, when not the runs done
    status: str
    settings: tuple[str, ...]  # the settings' bullet lines
    located: bool = True  # the runs locate the point (threshold.search.bounds.answer)
    bound: str | None = None  # where they do not: the answer's bound, "> 4,752", or None
    answer: str = ""  # the answer in one line (threshold.search.bounds.answer_words)
    chance_warning: str | None = None  # the level lies near chance: what to do (find says it too)


def _title(settings: StudySettings) -> str:
    if isinstance(settings, ObjectiveSettings):
        return f"{settings.objective} by {settings.size_name}"
    task = settings.task
    where = f"listops mod {task.n}" if task.testbed == "listops" else f"{task.testbed} S_{task.n}"
    recipe = recipe_words(settings.train, dict(settings.model), task)
    where += f", {recipe}" if recipe else ""
    measured = task.measured_op.upper()
    if tuple(task.ops) == (task.measured_op,):
        return f"{measured} ({where})"
    return f"{measured} in {'+'.join(op.upper() for op in task.ops)} ({where})"


def _objective_lines(settings: ObjectiveSettings) -> list[str]:
    """An objective's study: the objective, its sizes, the model analyses not applying."""
    o = settings
    counts = "with their parameter counts" if o.counted else "no parameter counts (the size)"
    return [
        f"- **Objective**: {o.objective}(size, seed), the runs your own; {o.size_name} "
        f"{o.sizes[0]}..{o.sizes[-1]} ({len(o.sizes)} sizes, {counts}); chance {o.chance:g}",
        "- **Analyses**: do not apply (they read threshold's own model checkpoints)",
    ]


def _settings_lines(settings: StudySettings, attrs: dict) -> tuple[str, ...]:
    if isinstance(settings, ObjectiveSettings):
        search = settings.search
        lines = [
            *_objective_lines(settings),
            f"- **Search**: precision {search.precision:g}x, budget {search.budget} runs, first "
            f"bracket {search.d_lo}-{search.d_hi}, level {search.level:g}, base seed "
            f"{search.base_seed}",
        ]
        version, commit = attrs.get("version"), attrs.get("git_commit")
        lines.append(f"- threshold {version or '?'}, commit {str(commit or '?')[:10]}")
        return tuple(lines)
    task, train, search = settings.task, settings.train, settings.search
    n_train = task.n_train if task.n_train is not None else 5000 * task.n
    level = (
        f"chance + {search.level:g} x (asymptote - chance)"
        if search.chance_corrected
        else f"{search.level:g} x asymptote"
    )
    lines = [
        f"- **Task**: {task.testbed} n = {task.n}, ops {', '.join(task.ops)}, measured "
        f"{task.measured_op}; depth {task.depth}, arity {task.arity_min}-{task.arity_max}, "
        f"p_nest {task.p_nest:g}; {n_train:,} training and {task.n_test:,} test sequences "
        f"({'held-out triples, ' if task.split == 'triples' else ''}split seed {task.split_seed})"
        + (f"; weights {', '.join(f'{w:g}' for w in task.weights)}" if task.weights else "")
        + ("; measured op's nodes matched to its own set" if task.match_exposure else ""),
        f"- **Training**: recipe {recipe_words(train, dict(settings.model), task) or 'fast'};"
        f" at most "
        f"{train.max_steps:,} steps a run, batch {train.batch_size}, lr {train.lr:g} "
        f"({train.schedule}), weight decay {train.weight_decay:g}, loss on {train.loss_on}, "
        f"{train.decoding} accuracy"
        + (
            f", checkpoints at {', '.join(f'{c:g}' for c in train.checkpoints)}"
            if train.checkpoints
            else ""
        ),
        f"- **Search**: precision {search.precision:g}x, budget {search.budget} runs, first "
        f"bracket d {search.d_lo}-{search.d_hi} (limits {search.d_min}-{search.d_max}), "
        f"transition at {level}, base seed {search.base_seed}",
    ]
    version, commit = attrs.get("version"), attrs.get("git_commit")
    if version or commit:
        lines.append(f"- threshold {version or '?'}, commit {str(commit or '?')[:10]}")
    return tuple(lines)


def _shares(values) -> str:
    return ", ".join(f"{v:g}" for v in values)


def study_answer(estimate: dict | None, runs: Sequence[NoteRun]) -> dict | None:
    """The study's answer, located or bound, from the note's runs
    (:func:`threshold.search.bounds.answer`): what every other view of the study shows too."""
    return answer([(r.d, r.params, r.accuracy) for r in runs], estimate)


def bound_words(ans: dict | None) -> str | None:
    """``> 4,752``, ``<= 1,200`` or "not located" for an answer that is not a point."""
    if ans is None or ans["located"]:
        return None
    if ans["kind"] == "lower bound":
        return f"> {ans['params']:,.0f}"
    if ans["kind"] == "upper bound":
        return f"<= {ans['params']:,.0f}"
    return "not located"


def _pair(value) -> tuple[float, float] | None:
    return (value[0], value[1]) if value and value[0] is not None else None


def note_markdown(
    settings: StudySettings,
    estimate: dict | None,
    runs: Sequence[NoteRun],
    *,
    n_running: int = 0,
    status: str = "",
    attrs: dict | None = None,
    bracket_d: Sequence[int] = (),
) -> str:
    """The note: estimate table, runs and status, settings. Pure: no storage."""
    n_runs = len(runs)
    est = estimate or {}
    enough = bool(estimate is not None and n_runs >= MIN_RUNS and est.get("params_p80"))
    fit = est.get("fit") if enough else None
    lo_hi = _pair(est.get("interval_params"))
    ratio = est.get("interval_ratio", lo_hi[1] / lo_hi[0] if lo_hi else None)
    from_runs = est.get("n_runs")
    ans = study_answer(estimate, runs) if enough else None
    note = Note(
        title=_title(settings),
        point=f"{settings.search.level:.0%} point",
        enough=enough,
        n_runs=n_runs,
        n_running=n_running,
        min_runs=MIN_RUNS,
        bracket_d=tuple(bracket_d),
        params_p80=est.get("params_p80"),
        d_p80=est.get("d_p80"),
        interval_params=lo_hi,
        interval_ratio=ratio,
        interval_d=_pair(est.get("interval_d")),
        midpoint_params=est.get("midpoint_params") or None,
        midpoint_interval=_pair(est.get("midpoint_interval_params")),
        midpoint_d=est.get("midpoint_d") or None,
        fit_params_p80=fit["params_p80"] if fit else None,
        fit_d_p80=fit["d_p80"] if fit else None,
        no_fit=(
            f"needs {MIN_POINTS} runs at 3 sizes"
            if n_runs < MIN_POINTS
            else "failed, or its curve never reaches the level"
        ),
        asymptote=est.get("asymptote"),
        chance=est.get("chance"),
        near=near_transition_words(est) if enough else None,
        estimate_runs=from_runs if from_runs not in (None, n_runs) else None,
        status=status,
        settings=_settings_lines(settings, attrs or {}),
        located=ans is None or ans["located"],
        bound=bound_words(ans),
        answer=answer_words(ans),
        chance_warning=near_chance_words(estimate),
    )
    return render("note.md.j2", n=note)


def result_words(estimate: dict | None, runs: Sequence[NoteRun]) -> str:
    """The 80% point in a few words: ``2,371 parameters, 90%: 1,506 - 4,975``, or where the runs
    do not locate it the bound they give, ``> 4,752 parameters, not located``."""
    est = estimate or {}
    if not runs:
        return "no runs yet"
    if not (est.get("interval_params") and len(runs) >= MIN_RUNS):
        return f"{len(runs)} runs: too few for an estimate"
    bound = bound_words(study_answer(est, runs))
    if bound == "not located":
        return "not located: the runs neither locate nor bound it"
    if bound is not None:
        return f"{bound} parameters, not located"
    lo, hi = est["interval_params"]
    return f"{number(est['params_p80'])} parameters, 90%: {number(lo)} - {number(hi)}"


# What the workers and `threshold dashboard` write notes with.
