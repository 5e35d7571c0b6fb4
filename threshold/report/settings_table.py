"""The settings a report lists: each study's settings table (:func:`settings_rows`) and the
report's recipe table (:func:`recipes`), every field of each recipe its labels name.
"""

from __future__ import annotations

from threshold.config import recipe_fields
from threshold.report.data import StudyData, recipe_of, recipe_tags
from threshold.report.view import RecipeView
from threshold.search.objective import ObjectiveSettings

__all__ = ["recipe_table_words", "recipes", "settings_rows"]


def _value_words(value) -> str:
    return "none" if value is None else f"{value:g}" if isinstance(value, float) else str(value)


def recipes(studies: list[StudyData]) -> tuple[RecipeView, ...]:
    """The report's recipes, each with every field's value (a budget field its studies set
    apart, such as their steps, is "varies")."""
    tags = recipe_tags(studies)
    out = []
    for words, tag in tags.items():
        mine = [s for s in studies if recipe_of(s.settings) == words]
        if isinstance(mine[0].settings, ObjectiveSettings):  # the user's own runs: no recipe
            continue
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
    if isinstance(s.settings, ObjectiveSettings):
        return _objective_rows(s, chance)
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


def _objective_rows(s: StudyData, chance: float | None) -> tuple[tuple[str, str], ...]:
    """An objective's study: its objective, its sizes, and the search; the model analyses
    (embeddings, layer usage) do not apply, its runs keeping no model of ours."""
    o, search = s.settings, s.settings.search
    counts = "its parameter counts given" if o.counted else "no parameter counts: the size itself"
    level = (
        f"chance + {search.level:g} x (asymptote - chance)"
        if search.chance_corrected
        else f"{search.level:g} x asymptote (the paper's wording)"
    )
    return (
        ("study", s.name),
        ("objective", f"{o.objective}(size, seed), its runs your own"),
        ("size", f"{o.size_name}: {len(o.sizes)} sizes {o.sizes[0]}..{o.sizes[-1]}, {counts}"),
        (
            "search",
            f"precision {search.precision:g}x, budget {search.budget} runs, first bracket "
            f"{search.d_lo}-{search.d_hi}, base seed {search.base_seed}, each run costing one",
        ),
        ("transition", level),
        ("chance", "-" if chance is None else f"{chance:.3f} (as given)"),
        ("analyses", "do not apply: the model analyses read threshold's own checkpoints"),
        (
            "threshold",
            f"{s.attrs.get('version') or '?'}, commit {str(s.attrs.get('git_commit') or '?')[:10]}",
        ),
    )
