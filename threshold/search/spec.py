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
    TrainConfig,
    make_recipe,
    pretrain_task,
    transfer_model_config,
)
from threshold.errors import ThresholdError
from threshold.search.settings import SearchConfig
from threshold.tasks import TaskConfig
from threshold.tasks.generate import split_ops

__all__ = ["StudySettings"]


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

    @classmethod
    def from_options(
        cls,
        tasks: str | tuple[str, ...] = "max",
        testbed: str = "listops",
        mod: int = 10,
        depth: int = 2,
        arity: str = "2-3",
        p_nest: float = 0.25,
        n_train: int | None = None,
        n_test: int = 2000,
        measure: str | None = None,
        split_seed: int = 0,
        steps: int | None = None,
        d_lo: int = 8,
        d_hi: int = 128,
        precision: float = 2.5,
        budget: int = 40,
        level: float = 0.8,
        chance_corrected: bool = False,
        seed: int = 0,
        pretrain: str | tuple[str, ...] | None = None,
        weights: str | dict | None = None,
        match_exposure: bool = False,
        recipe: str = "fast",
        **overrides,
    ) -> StudySettings:
        """The settings ``threshold find``'s options (and :func:`threshold.find_threshold`'s
        arguments) mean: ``tasks`` and ``pretrain`` as ``max,med`` or a tuple, ``arity`` as MIN-MAX,
        ``weights`` as ``add=2``; ``recipe`` names a training recipe and ``overrides`` set its
        fields (``weight_decay=0.01``, ``checkpoints=(0.25, 0.5, 1)``, the task's ``split``; see
        threshold.config; ``steps`` is ``max_steps``, and ``None`` keeps the recipe's value).
        Every value is checked here, before anything is written."""
        task = TaskConfig.from_options(
            tasks,
            testbed,
            mod,
            depth,
            arity,
            p_nest,
            n_train,
            n_test,
            measure,
            split_seed,
            weights,
            match_exposure,
        )
        made = make_recipe(recipe, max_steps=steps, **overrides)
        task = made.on(task)  # the recipe's split (paper: the group's), or one set by hand
        source = split_ops(pretrain) if pretrain is not None else ()
        if pretrain is not None:
            transfer_model_config(pretrain_task(task, source), task, d_lo, **made.model_kwargs)
        search = SearchConfig(
            d_lo=d_lo,
            d_hi=d_hi,
            precision=precision,
            budget=budget,
            level=level,
            chance_corrected=chance_corrected,
            base_seed=seed,
        )
        return cls(task, made.train, search, source, made.model)

    def to_attrs(self) -> dict[str, str]:
        attrs = {
            "task": json.dumps(self.task.to_dict(), sort_keys=True),
            "train": json.dumps(self.train.to_dict(), sort_keys=True),
            "search": json.dumps(dataclasses.asdict(self.search), sort_keys=True),
        }
        if self.pretrain:  # only when set, so studies without pretraining keep their names
            attrs["pretrain"] = json.dumps(list(self.pretrain))
        if self.model:  # as pretrain: only a recipe with model-side values writes it
            attrs["model"] = json.dumps(dict(self.model), sort_keys=True)
        return attrs

    @classmethod
    def from_attrs(cls, attrs: dict) -> StudySettings:
        try:
            return cls(
                TaskConfig.from_dict(json.loads(attrs["task"])),
                TrainConfig.from_dict(json.loads(attrs["train"])),
                SearchConfig(**json.loads(attrs["search"])),
                tuple(json.loads(attrs.get("pretrain", "[]"))),
                tuple(json.loads(attrs.get("model", "{}")).items()),
            )
        except (KeyError, TypeError, ValueError) as e:
            raise ThresholdError(
                f"study settings cannot be read ({e}): not a threshold study?"
            ) from None

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
