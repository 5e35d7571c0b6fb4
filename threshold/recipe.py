"""Named training recipes: how a run is initialised, optimised, batched, stopped and scored.

A recipe is a set of values for fields of :class:`~threshold.config.TrainConfig` (optimizer,
schedule, loss, budget, stopping rules, decoding) and of :class:`~threshold.config.ModelConfig`
(init, block, activation, recurrence, q/k/v bias). Those classes own the fields and check them;
this module only names value sets and splits a user's overrides between the two. Torch-free.

- ``fast`` is this tool's first recipe: the classes' defaults (20,000 steps of 64 whole sequences,
  loss on the completion, AdamW 3e-3 with warm-up and cosine decay, weight decay 0.1, large init,
  sequential GELU block, early stops).
- ``paper`` is the group's public ListOps code (domain.md, "Regimes"): 100,000 steps of 64 random
  128-token windows of the concatenated training stream (8,192 tokens a step, every one in the
  loss; the model gets at least 128 positions), AdamW 5e-4 decaying exponentially to 2e-5 with
  betas (0.9, 0.999), weight decay 0.01 on all parameters, no warm-up, init N(0, 0.02), a parallel
  ReLU block without q/k/v bias, no early stop but the learned one, accuracy sampled at
  temperature 1 (evaluation decodes whole sequences from position 0). It keeps the paper's text's
  4 recurrence steps (the code uses 5).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from threshold.config import ModelConfig, TrainConfig, checked_field
from threshold.errors import ConfigError

__all__ = [
    "MODEL_FIELDS",
    "RECIPES",
    "TRAIN_FIELDS",
    "Recipe",
    "make_recipe",
    "recipe_fields",
    "recipe_words",
]

# Fields that set the budget or where it is read, not how a model learns: left out of titles.
_BUDGET_FIELDS = ("max_steps", "checkpoints", "decay_steps", "min_lr_ratio")

MODEL_FIELDS = ("init_std", "block", "activation", "n_recur", "qkv_bias")
TRAIN_FIELDS = (
    "max_steps",
    "batch_size",
    "lr",
    "weight_decay",
    "decay_all",
    "betas",
    "warmup_steps",
    "schedule",
    "min_lr_ratio",
    "decay_steps",
    "grad_clip",
    "loss_on",
    "batches",
    "window",
    "early_stop",
    "decoding",
    "checkpoints",
)

RECIPES: dict[str, dict] = {
    "fast": {},
    "paper": {
        "max_steps": 100_000,
        "lr": 5e-4,
        "schedule": "exponential",
        "min_lr_ratio": 2e-5 / 5e-4,
        "decay_steps": 100_000,  # a fixed decay, so a run cut short is a run of a smaller budget
        "warmup_steps": 0,
        "betas": (0.9, 0.999),
        "weight_decay": 0.01,
        "decay_all": True,
        "loss_on": "all",
        "batches": "windows",
        "window": 128,
        "early_stop": "learned",
        "decoding": "sampled",
        "init_std": 0.02,
        "block": "parallel",
        "activation": "relu",
        "qkv_bias": False,
        "n_recur": 4,
    },
}


@dataclass(frozen=True)
class Recipe:
    """A recipe's training settings (``train.recipe`` is its name) and model-side values."""

    train: TrainConfig
    model: tuple[tuple[str, object], ...] = ()  # ModelConfig fields it sets, in MODEL_FIELDS order

    @property
    def name(self) -> str:
        return self.train.recipe

    @property
    def model_kwargs(self) -> dict:
        return dict(self.model)


def make_recipe(name: str = "fast", **overrides) -> Recipe:
    """The recipe ``name`` with ``overrides`` (field=value, ``None`` values ignored), checked.

    Raises :class:`ConfigError` naming the recipe or field for an unknown name, an unknown field
    or a value out of range.
    """
    if name not in RECIPES:
        raise ConfigError(f"recipe {name!r} does not exist: choose from {', '.join(RECIPES)}")
    values = dict(RECIPES[name])
    for key, value in overrides.items():
        if key not in MODEL_FIELDS and key not in TRAIN_FIELDS:
            raise ConfigError(
                f"recipe field {key!r} does not exist: choose from "
                f"{', '.join(TRAIN_FIELDS + MODEL_FIELDS)}"
            )
        if value is not None:
            cls = ModelConfig if key in MODEL_FIELDS else TrainConfig
            values[key] = checked_field(cls, key, value)
    model = tuple((k, values[k]) for k in MODEL_FIELDS if k in values)
    ModelConfig(vocab_size=1, n_ctx=1, d_model=8, **dict(model))  # checks the model side
    train = TrainConfig(recipe=name, **{k: v for k, v in values.items() if k in TRAIN_FIELDS})
    return Recipe(train, model)


def recipe_fields(train: TrainConfig, model: dict) -> dict:
    """Every recipe field's value in ``train`` and the model-side ``model`` values (defaults
    filled in): what a report or note lists."""
    fields = dataclasses.fields(ModelConfig)
    defaults = {f.name: f.default for f in fields if f.name in MODEL_FIELDS}
    out = {k: getattr(train, k) for k in TRAIN_FIELDS}
    return out | defaults | dict(model)


def recipe_words(train: TrainConfig, model: dict) -> str:
    """``paper``, or ``fast + init_std 0.02, weight_decay 0.01``: the recipe's name and how the
    values depart from it (budget fields left out); "" for the plain ``fast`` recipe."""
    base = make_recipe(train.recipe)
    mine, theirs = recipe_fields(train, model), recipe_fields(base.train, base.model_kwargs)
    changed = [
        f"{k} {_word(mine[k])}" for k in mine if k not in _BUDGET_FIELDS and mine[k] != theirs[k]
    ]
    if not changed:
        return "" if train.recipe == "fast" else train.recipe
    return f"{train.recipe} + {', '.join(changed)}"


def _word(value) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)
