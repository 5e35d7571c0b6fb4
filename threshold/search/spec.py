"""The settings of a study: its task, training recipe, search and pretraining, as stored.

A study's settings are written once, as JSON user attributes of the study
(:meth:`StudySettings.to_attrs`), and every worker, report and analysis reads them back
(:meth:`StudySettings.from_attrs`); the study's default name hashes them. No storage here: the
storage module (:mod:`threshold.search.study`) and the record (:mod:`threshold.search.record`)
both build on this one.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass

from threshold.config import (
    ModelConfig,
    Recipe,
    TrainConfig,
    param_count,
    pretrain_task,
    transfer_model_config,
)
from threshold.errors import ConfigError, ThresholdError
from threshold.options import RECIPE, SEARCH, SETTINGS, TASK, recipe_of
from threshold.search.objective import OBJECTIVE_ATTR, ObjectiveSettings
from threshold.search.settings import SearchConfig, SearchSettings
from threshold.tasks import TaskConfig
from threshold.tasks.generate import split_ops

__all__ = ["StudySettings", "read_settings"]

_SEARCH_FIELD = {"seed": "base_seed"}  # search options named otherwise than their field


@dataclass(frozen=True)
class StudySettings:
    task: TaskConfig
    train: TrainConfig  # its ``recipe`` names the recipe its values came from
    search: SearchConfig
    pretrain: tuple[str, ...] = ()  # ops every run is first trained on (transfer); () for none
    model: tuple[tuple[str, object], ...] = ()  # the recipe's model-side values, sorted by name

    def __post_init__(self) -> None:
        object.__setattr__(self, "pretrain", tuple(self.pretrain))
        object.__setattr__(self, "model", tuple(sorted(dict(self.model).items())))

    @property
    def recipe(self) -> str:
        return self.train.recipe

    def model_config(self, d_model: int) -> ModelConfig:
        """The model every run at ``d_model`` trains (sized for the pretraining task too, and
        for the training windows: ``n_ctx`` is at least ``train.window`` with stream windows)."""
        if self.pretrain:
            source = pretrain_task(self.task, self.pretrain)
            cfg = transfer_model_config(source, self.task, d_model, **dict(self.model))
            return dataclasses.replace(cfg, n_ctx=self.train.context(cfg.n_ctx))
        task = self.task
        n_ctx = self.train.context(task.max_len)
        return ModelConfig(len(task.vocab), n_ctx, d_model, **dict(self.model))

    @property
    def seed_key(self) -> tuple[str, ...]:
        """What a run's seed derives from beside the base seed, d and replicate: the mixture."""
        return self.task.ops

    def policy(self, chance: float) -> SearchSettings:
        """The policy's view of the study: each allowed d with its model's parameter count, the
        search as stored, unlearned runs at ``chance``."""
        search = self.search
        table = (
            (d, param_count(self.model_config(d))["total"])
            for d in range(search.d_min, search.d_max + 1)
        )
        return SearchSettings.of(search, table, chance)

    def value_name(self) -> str:
        """What a trial's value is, as Optuna and optuna-dashboard show it."""
        return f"{self.task.measured_op} test accuracy ({self.train.decoding})"

    @classmethod
    def build(
        cls,
        task: TaskConfig,
        recipe: Recipe,
        search: SearchConfig,
        pretrain: tuple[str, ...] = (),
    ) -> StudySettings:
        """A study of ``task`` trained by ``recipe`` (which may set the task's split), searched
        as ``search`` says, each run first trained on the ops ``pretrain`` (checked: a source
        mixture that exists and shares the task's vocabulary)."""
        task = recipe.on(task)
        _check_source(task, recipe, tuple(pretrain), search.d_lo)
        return cls(task, recipe.train, search, tuple(pretrain), recipe.model)

    @classmethod
    def from_options(cls, tasks: str | tuple[str, ...] | None = None, **options) -> StudySettings:
        """The settings that ``threshold find``'s options, a suite's ``[[study]]`` keys and
        :func:`threshold.find_threshold`'s keywords mean: the names of
        :data:`threshold.options.SETTINGS` (None, or left out: the default). Every value is
        checked here, before anything is written: the task, the recipe, the pretraining, then
        the search."""
        options["tasks"] = tasks
        unknown = sorted(set(options) - set(SETTINGS))
        if unknown:
            raise ConfigError(f"no setting {unknown[0]!r}: use one of {', '.join(SETTINGS)}")

        def given(group) -> dict:
            return {o.name: options[o.name] for o in group if options.get(o.name) is not None}

        task, recipe = TaskConfig.from_options(**given(TASK)), recipe_of(given(RECIPE))
        task = recipe.on(task)  # the recipe's split, as build sets it
        search = {_SEARCH_FIELD.get(k, k): v for k, v in given(SEARCH).items()}
        pretrain = split_ops(search.pop("pretrain")) if "pretrain" in search else ()
        _check_source(task, recipe, pretrain, search.get("d_lo", SearchConfig.d_lo))
        # build's study, its pretraining checked once and before the search
        return cls(task, recipe.train, SearchConfig(**search), pretrain, recipe.model)

    @staticmethod
    def defaults() -> dict:
        """Each setting's default by name (:data:`threshold.options.SETTINGS`), as the command
        line shows it: the task's and the search's dataclass fields; None for a recipe option
        (the recipe's value) and for pretraining; the recipe, the training config's."""
        search = dataclasses.asdict(SearchConfig())
        out = {o.name: search.get(_SEARCH_FIELD.get(o.name, o.name)) for o in SEARCH}
        return (
            out
            | TaskConfig().options()
            | {o.name: None for o in RECIPE}
            | {"recipe": TrainConfig().recipe}
        )

    def to_attrs(self) -> dict[str, str]:
        attrs = {
            "task": json.dumps(self.task.to_dict(), sort_keys=True),
            "train": json.dumps(self.train.to_dict(), sort_keys=True),
            "search": json.dumps(self.search.to_dict(), sort_keys=True),
        }
        if self.pretrain:  # only when set, so studies without pretraining keep their names
            attrs["pretrain"] = json.dumps(list(self.pretrain))
        if self.model:  # as pretrain: only a recipe with model-side values writes it
            attrs["model"] = json.dumps(dict(self.model), sort_keys=True)
        if self.task.ops_module is not None:  # your own ops: an edited op names a new study
            attrs["ops_values"] = self.task.ops_values
        return attrs

    @classmethod
    def from_attrs(cls, attrs: dict) -> StudySettings:
        try:
            settings = cls(
                TaskConfig.from_dict(json.loads(attrs["task"])),
                TrainConfig.from_dict(json.loads(attrs["train"])),
                SearchConfig(**json.loads(attrs["search"])),
                tuple(json.loads(attrs.get("pretrain", "[]"))),
                tuple(json.loads(attrs.get("model", "{}")).items()),
            )
        except (KeyError, TypeError, ValueError) as e:
            if "ops_module" in getattr(e, "fields", ()):  # its own ops' module, as it says
                raise
            raise ThresholdError(
                f"study settings cannot be read ({e}): not a threshold study?"
            ) from None
        task = settings.task
        if attrs.get("ops_values") not in (None, task.ops_values):
            raise ConfigError(
                f"the ops of module {task.ops_module!r} give other values than when this study"
                " was made: restore the module, or give the changed op a new name (a new study)",
                "ops_module",
            )
        return settings

    def default_name(self) -> str:
        """``listops10-max+med+add-add-fast-<hash>``; ``...-add-from-max+med-fast-<hash>`` with
        pretraining; the recipe's name before the hash.

        The hash covers every setting.
        """
        task = self.task
        blob = json.dumps(self.to_attrs(), sort_keys=True).encode()
        digest = hashlib.sha256(blob).hexdigest()[:8]
        source = f"from-{'+'.join(self.pretrain)}-" if self.pretrain else ""
        mix = "+".join(task.ops)
        return f"{task.testbed}{task.n}-{mix}-{task.measured_op}-{source}{self.recipe}-{digest}"


def read_settings(attrs: dict) -> StudySettings | ObjectiveSettings:
    """A study's settings from its user attributes: an objective's study
    (:class:`~threshold.search.objective.ObjectiveSettings`) or a testbed's."""
    if OBJECTIVE_ATTR in attrs:
        return ObjectiveSettings.from_attrs(attrs)
    return StudySettings.from_attrs(attrs)


def _check_source(task: TaskConfig, recipe: Recipe, pretrain: tuple[str, ...], d: int) -> None:
    """Refuse pretraining ops that make no source mixture of ``task``'s testbed, or whose
    vocabulary differs from the task's (a model of size ``d`` could not carry over)."""
    if pretrain:
        transfer_model_config(pretrain_task(task, pretrain), task, d, **recipe.model_kwargs)
