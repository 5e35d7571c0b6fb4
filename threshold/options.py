"""The settings a user names, declared once: each is an option of the commands that take it
(``find``, ``train``, ``worker``, ``cluster slurm``, ``data``, ``transfer``, ...), a key of a
suite and a keyword of :func:`threshold.find_threshold`, with one name, one kind and one help line.

Four groups: the task (:class:`threshold.tasks.TaskConfig`, through its ``from_options``), the
search (:class:`threshold.search.settings.SearchConfig`, with the base seed and pretraining), the
recipe (a named recipe and overrides of its fields: :func:`threshold.config.make_recipe`), and
where runs execute (:class:`threshold.config.Execution`: no study's setting, a suite's top keys).
No defaults here: a task, search or execution option's default is its dataclass field's, a recipe
option's None (the recipe's value). A recipe option is built from its field (its type, and its
line of :data:`threshold.config.RECIPE_HELP`), so a new recipe field is an edit of
:mod:`threshold.config` alone.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path

from threshold.config import (
    DEFAULT_STORAGE,
    MODEL_FIELDS,
    RECIPE_HELP,
    RECIPES,
    TASK_FIELDS,
    TRAIN_FIELDS,
    Execution,
    ModelConfig,
    Recipe,
    TrainConfig,
    field_kind,
    make_recipe,
)
from threshold.errors import ConfigError
from threshold.tasks import TaskConfig

__all__ = [
    "EXAMPLES",
    "EXECUTION",
    "RECIPE",
    "SEARCH",
    "SETTINGS",
    "TASK",
    "Option",
    "execution_defaults",
    "execution_of",
    "only",
    "recipe_of",
]


@dataclass(frozen=True)
class Option:
    name: str  # the keyword, the suite key, and the option with - for _ (--p-nest)
    # int, float, str or bool, or dict (pairs: "add=2" on the command line, a table in a suite)
    kind: type
    help: str
    flag: str | None = None  # a boolean's pair of flags, e.g. "--decay-all/--decay-matrices"
    listed: bool = False  # a list of ``kind``: a comma list on the command line ("max,med")

    @property
    def text(self) -> bool:
        """Whether the command line takes it as text to parse (a list, pairs)."""
        return self.listed or self.kind is dict


_EXPOSURE = "Grow the training set until the measured op has its single-op node count."
TASK = (
    Option("tasks", str, "Comma-separated ops, e.g. max,med,add.", listed=True),
    Option("testbed", str, "listops (digits mod n) or perm (S_k)."),
    Option("mod", int, "Modulus n (listops) or degree k (perm)."),
    Option("depth", int, "Expression depth; 2 is one nesting level."),
    Option("arity", str, "Operands per op, as MIN-MAX."),
    Option("p_nest", float, "Chance an operand is a nested op."),
    Option("n_train", int, "Training sequences [default: 5000 x mod]."),
    Option("n_test", int, "Test sequences per op."),
    Option("measure", str, "Op whose accuracy is the run's number [default: the hardest]."),
    Option("split_seed", int, "Seed of the held-out split and test sets."),
    Option("weights", dict, "Mixture weights per op, e.g. add=2 (others weigh 1)."),
    Option("match_exposure", bool, _EXPOSURE),
    Option("ops_module", str, "Module that registers your own ops (docs/custom-ops.md)."),
)

_CHANCE = (
    "Read the level as chance + level x (A - chance), 80% of the way up from chance, instead of"
    " level x A. Stored on the study."
)
SEARCH = (
    Option("budget", int, "Most training runs."),
    Option(
        "precision",
        float,
        "Stop when the 90% interval of the 80% point is this narrow: its high end over its low"
        " end, a factor in parameters (2.5: 1,000 - 2,500).",
    ),
    Option(
        "d_lo",
        int,
        "Smallest d of the initial bracket; d is the model's width (d_model), the size the search"
        " varies (parameters grow about as d squared).",
    ),
    Option("d_hi", int, "Largest d of the initial bracket (d: the model's width, d_model)."),
    Option("level", float, "Transition: the curve reaches level x A (the paper's wording)."),
    Option("chance_corrected", bool, _CHANCE, flag="--chance-corrected/--paper-level"),
    Option("seed", int, "Base seed; run seeds derive from it."),
    Option("pretrain", str, "Pretrain every run on these ops first, e.g. max,med.", listed=True),
)


# A recipe option is a recipe field's, named as the field (but steps) and typed as it.
def _names(cls) -> list[str]:
    return [f.name for f in fields(cls)]


_NAMES = {"max_steps": "steps"}
_FLAGS = {"decay_all": "--decay-all/--decay-matrices"}
_FIELD_OF = {f: cls for cls in (TrainConfig, ModelConfig, TaskConfig) for f in _names(cls)}


def _recipe_option(field: str) -> Option:
    """The option of recipe field ``field``: its kind the field's (:func:`threshold.config.
    field_kind`: ``int | None`` is int, a tuple of floats a list), its help
    :data:`threshold.config.RECIPE_HELP`'s line."""
    kind, listed = field_kind(_FIELD_OF[field], field)
    words = RECIPE_HELP[field]
    if "[default:" not in words:
        words += " [default: the recipe's]."
    return Option(_NAMES.get(field, field), kind, words, _FLAGS.get(field), listed)


RECIPE = (
    Option("recipe", str, f"Training recipe: {' or '.join(RECIPES)} (docs/recipes.md)."),
    *(_recipe_option(f) for f in (*TRAIN_FIELDS, *MODEL_FIELDS, *TASK_FIELDS)),
)

SETTINGS = {o.name: o for o in (*TASK, *SEARCH, *RECIPE)}  # a study's settings, by name

# Where and how runs execute (threshold.config.Execution): none of it changes a result, so none
# of it is a study's setting; a suite names some of them once, at its top.
EXECUTION = (
    Option("storage", str, f"Database URL [default: $THRESHOLD_STORAGE or {DEFAULT_STORAGE}]."),
    Option(
        "workers",
        int,
        "Worker processes, one torch thread each: one a core, or one a GPU (find: 0 makes the"
        " study only, for workers started elsewhere: threshold worker, threshold cluster slurm).",
    ),
    Option(
        "trials_at_once",
        int,
        "Trials a worker takes at once and trains together as one batched run (the sampler's K;"
        " --batch-size is sequences a step) [default: 1 on the CPU, 8 on a GPU].",
    ),
    Option(
        "device", str, "Where models train: auto (a CUDA GPU if there is one), cpu, cuda, cuda:N."
    ),
    Option("heartbeat", int, "Seconds between heartbeats; a trial silent for 3 is retried."),
    Option("cache_dir", Path, "Data cache [default: $THRESHOLD_CACHE or ~/.cache/threshold]."),
    Option("oversubscribe", bool, "Start more workers than cores (CPU) or GPUs (CUDA)."),
    Option(
        "other_tables",
        bool,
        "Add the study's tables to a SQLite file that holds another application's tables (else"
        " refused).",
    ),
)


def execution_defaults() -> dict:
    """Each :data:`EXECUTION` option's default: :class:`threshold.config.Execution`'s field."""
    made = Execution()
    return {o.name: getattr(made, _EXECUTION_FIELD.get(o.name, o.name)) for o in EXECUTION}


def execution_of(values: dict) -> Execution:
    """The execution the :data:`EXECUTION` options ``values`` say (None: the default)."""
    given = {_EXECUTION_FIELD.get(k, k): v for k, v in values.items() if v is not None}
    return Execution(**given)


_EXECUTION_FIELD = {"heartbeat": "heartbeat_s"}  # named otherwise than the Execution field


def only(group: tuple[Option, ...], *names: str) -> tuple[Option, ...]:
    """The options of ``group`` named ``names``: for a command that takes a few of them."""
    return tuple(o for o in group if o.name in names)


# Recipe options named otherwise than the recipe field they set.
_FIELD = {name: field for field, name in _NAMES.items()}


def recipe_of(values: dict) -> Recipe:
    """The recipe the :data:`RECIPE` options ``values`` mean: ``recipe`` names it (default
    fast), the others override its fields (None: its value); lists as text (``0.25,0.5,1``)
    or sequences."""
    values = {k: v for k, v in values.items() if v is not None}
    named = (values.pop("recipe"),) if "recipe" in values else ()  # else make_recipe's default
    fields_ = {_FIELD.get(k, k): _numbers(SETTINGS[k], v) for k, v in values.items()}
    return make_recipe(*named, **fields_)


# A text option's example, as its errors give it (a two-item example is a pair).
EXAMPLES = {
    "tasks": "max,med",
    "pretrain": "max,med",
    "weights": "add=2",
    "checkpoints": "0.25,0.5,1",
    "betas": "0.9,0.98",
}


def _numbers(option: Option, value):
    """A list of numbers (``checkpoints``, ``betas``: a listed recipe option of a numeric kind)
    as a tuple, from its text (``0.25,0.5,1``) or a sequence; any other value as given."""
    if not option.listed or option.kind not in (int, float):
        return value
    if not isinstance(value, str):
        return tuple(value)
    example = EXAMPLES.get(option.name, "1,2,3")
    noun = "a pair" if example.count(",") == 1 else "a list"
    try:
        return tuple(option.kind(x) for x in value.split(","))
    except ValueError:
        raise ConfigError(f"--{option.name} {value!r} is not {noun} like {example}") from None
