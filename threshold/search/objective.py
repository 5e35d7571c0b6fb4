"""A study of anyone's experiment: an objective ``objective(size, seed)`` that trains a model of
that size with that seed and answers its accuracy (a number, or a dict with ``accuracy`` and any
metrics to record), searched by the same policy, posterior and stop as the ListOps studies.

:class:`ObjectiveSettings` is such a study's settings as stored: the objective's name (its
import path, ``"pkg.module:function"``, which worker processes import), the allowed sizes with
their parameter counts (the size itself where none are given), the chance level unlearned runs
sit at, the size axis's name in the user's words, and the search (:class:`SearchConfig`: the
bracket, level, precision, budget and seed). It knows no task and no training run: the policy's
view of it (:meth:`ObjectiveSettings.policy`) is a :class:`SearchSettings` of those sizes.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import math
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import ClassVar

from threshold.errors import ConfigError, ThresholdError
from threshold.search.settings import SearchConfig, SearchSettings

__all__ = [
    "OBJECTIVE_ATTR",
    "ObjectiveSettings",
    "load_objective",
    "objective_path",
    "parse_sizes",
    "read_result",
]

OBJECTIVE_ATTR = "objective"  # the study user attribute that marks an objective's study
# Every run of an objective costs one: its compute is the user's, and unknown here, so the
# look-ahead buys the most sharpness per run (a cost by size is SearchSettings.cost_b's).
_ONE_RUN = {"cost_a": 1.0, "cost_b": 0.0}


def parse_sizes(sizes: str | Iterable[int]) -> tuple[int, ...]:
    """The allowed sizes, increasing: ``"4..256"`` (every integer from 4 to 256), ``"4,8,16"``,
    or any iterable of integers; at least three, each 1 or more."""
    if isinstance(sizes, str):
        text = sizes.replace(" ", "")
        m = re.fullmatch(r"(\d+)\.\.(\d+)", text)
        try:
            values = (
                range(int(m[1]), int(m[2]) + 1) if m else [int(v) for v in text.split(",") if v]
            )
        except ValueError:
            raise ConfigError(
                f"sizes {sizes!r} is not allowed: give LO..HI (4..256) or a list (4,8,16,32)",
                "sizes",
            ) from None
    else:
        values = list(sizes)
    if any(isinstance(v, bool) or not isinstance(v, int) for v in values):
        raise ConfigError(f"sizes {sizes!r} is not allowed: give whole numbers", "sizes")
    out = tuple(sorted(set(values)))
    if len(out) < 3 or out[0] < 1:
        raise ConfigError(
            f"sizes {sizes!r} is not allowed: give at least 3 sizes, each 1 or more (4..256)",
            "sizes",
        )
    return out


@dataclass(frozen=True)
class ObjectiveSettings:
    """An objective's study, as stored (:meth:`to_attrs`); its default name hashes it."""

    objective: str  # its import path ("pkg.module:function"), or a name where it has none
    sizes: tuple[int, ...]  # the allowed sizes, increasing (the Optuna parameter's values)
    params: tuple[int, ...]  # the parameter count of each size (the size itself if unknown)
    chance: float  # the accuracy a run that learns nothing sits at
    search: SearchConfig  # its d_min and d_max are the smallest and largest size
    size_name: str = "size"  # the size axis in the user's words ("hidden width")
    pretrain: ClassVar[tuple[str, ...]] = ()  # as a testbed study's: no run is pretrained

    def __post_init__(self) -> None:
        object.__setattr__(self, "sizes", tuple(int(s) for s in self.sizes))
        object.__setattr__(self, "params", tuple(int(n) for n in self.params))
        if len(self.params) != len(self.sizes):
            raise ConfigError(
                f"params has {len(self.params)} counts for {len(self.sizes)} sizes: give one "
                "parameter count a size, in the sizes' order",
                "params",
            )
        if (self.search.d_min, self.search.d_max) != (self.sizes[0], self.sizes[-1]):
            raise ConfigError("the search's d_min and d_max must be the smallest and largest size")
        if not (isinstance(self.chance, int | float) and 0 <= self.chance < 1):
            raise ConfigError(
                f"chance {self.chance!r} is not allowed: give the accuracy of a run that learns "
                "nothing, in [0, 1) (1/classes, or the majority class's share)",
                "chance",
            )
        for name in ("d_lo", "d_hi"):
            if getattr(self.search, name) not in self.sizes:
                raise ConfigError(
                    f"bracket end {getattr(self.search, name)} is not one of the sizes: "
                    "choose two of the allowed sizes",
                    "bracket",
                )
        self.policy(self.chance)  # the policy's own rules (parameters increasing, the level)

    @classmethod
    def make(
        cls,
        objective: str,
        sizes: str | Iterable[int],
        params: Iterable[int] | Callable[[int], int] | None = None,
        *,
        chance: float,
        level: float = SearchConfig.level,
        chance_corrected: bool = SearchConfig.chance_corrected,
        precision: float = SearchConfig.precision,
        budget: int = SearchConfig.budget,
        bracket: tuple[int, int] | None = None,
        seed: int = SearchConfig.base_seed,
        size_name: str = "size",
    ) -> ObjectiveSettings:
        """Settings from the user's words: ``params`` a count a size (a list in the sizes'
        order, or a function of the size; None: the size itself), ``bracket`` the first sizes
        run (default: the smallest and largest), the rest as :class:`SearchConfig`'s."""
        allowed = parse_sizes(sizes)
        if params is None:
            counts = allowed
        elif callable(params):
            counts = tuple(params(s) for s in allowed)
        else:
            counts = tuple(params)
        lo, hi = bracket if bracket is not None else (allowed[0], allowed[-1])
        search = SearchConfig(
            d_lo=lo,
            d_hi=hi,
            d_min=allowed[0],
            d_max=allowed[-1],
            precision=precision,
            budget=budget,
            level=level,
            chance_corrected=chance_corrected,
            base_seed=seed,
        )
        if not isinstance(chance, int | float) or isinstance(chance, bool):
            raise ConfigError(f"chance {chance!r} is not allowed: give a number in [0, 1)")
        return cls(objective, allowed, counts, float(chance), search, size_name)

    @property
    def counted(self) -> bool:
        """Whether the sizes have parameter counts of their own (else the size is the axis)."""
        return self.params != self.sizes

    @property
    def seed_key(self) -> tuple[str, ...]:
        """What a run's seed derives from beside the base seed, the size and the replicate."""
        return (self.objective,)

    def policy(self, chance: float | None = None) -> SearchSettings:
        """The policy's view: the sizes with their parameter counts, the search, the chance
        (the stored one unless given), every run costing one."""
        chance = self.chance if chance is None else chance
        table = zip(self.sizes, self.params, strict=True)
        return SearchSettings.of(self.search, table, chance, **_ONE_RUN)

    def value_name(self) -> str:
        """What a trial's value is, as Optuna and optuna-dashboard show it."""
        return f"accuracy of {self.objective}"

    def to_attrs(self) -> dict[str, str]:
        own = {
            "objective": self.objective,
            "sizes": list(self.sizes),
            "params": list(self.params),
            "chance": self.chance,
            "size_name": self.size_name,
        }
        return {
            OBJECTIVE_ATTR: json.dumps(own, sort_keys=True),
            "search": json.dumps(self.search.to_dict(), sort_keys=True),
        }

    @classmethod
    def from_attrs(cls, attrs: dict) -> ObjectiveSettings:
        try:
            own = json.loads(attrs[OBJECTIVE_ATTR])
            search = SearchConfig(**json.loads(attrs["search"]))
            return cls(
                own["objective"],
                tuple(own["sizes"]),
                tuple(own["params"]),
                float(own["chance"]),
                search,
                own.get("size_name", "size"),
            )
        except (KeyError, TypeError, ValueError) as e:
            raise ThresholdError(f"objective study settings cannot be read ({e})") from None

    def default_name(self) -> str:
        """``<function>-<hash>``: the objective's function name, then a hash of every setting."""
        blob = json.dumps(self.to_attrs(), sort_keys=True).encode()
        digest = hashlib.sha256(blob).hexdigest()[:8]
        stem = re.sub(r"[^A-Za-z0-9_.+-]+", "-", self.objective.rsplit(":", 1)[-1]).strip("-")
        return f"{stem or 'objective'}-{digest}"


def objective_path(objective: Callable | str) -> str | None:
    """The import path ``"pkg.module:function"`` of an objective, or None where a worker
    process could not import it (a lambda, a function of ``__main__`` or a notebook)."""
    if isinstance(objective, str):
        load_objective(objective)  # refused here, in one line, if it cannot be imported
        return objective
    module, name = getattr(objective, "__module__", None), getattr(objective, "__qualname__", "")
    if not module or module == "__main__" or "<" in name:
        return None
    path = f"{module}:{name}"
    try:
        return path if load_objective(path) is objective else None
    except ConfigError:
        return None


def load_objective(path: str) -> Callable:
    """The function an import path ``"pkg.module:function"`` names; ConfigError if none."""
    module, _, name = path.partition(":")
    if not module or not name:
        raise ConfigError(
            f"objective {path!r} is not allowed: give its import path, pkg.module:function"
        )
    try:
        found = importlib.import_module(module)
        for part in name.split("."):
            found = getattr(found, part)
    except (ImportError, AttributeError) as e:
        raise ConfigError(
            f"objective {path!r} cannot be imported ({e}): put its module on PYTHONPATH, or "
            "run from the folder that holds it"
        ) from None
    if not callable(found):
        raise ConfigError(f"objective {path!r} is not a function: name a function(size, seed)")
    return found


def read_result(value) -> tuple[float, dict]:
    """An objective's answer as (accuracy, the other metrics): a number, or a dict with
    ``accuracy`` and any JSON-able metrics; ThresholdError naming the value otherwise."""
    metrics = {}
    if isinstance(value, dict):
        metrics = {k: v for k, v in value.items() if k != "accuracy"}
        value = value.get("accuracy")
    try:
        accuracy = float(value)
    except (TypeError, ValueError):
        accuracy = math.nan
    if not 0 <= accuracy <= 1:
        raise ThresholdError(
            f"the objective returned {value!r}: return an accuracy in [0, 1], or a dict with "
            "'accuracy' and other metrics"
        )
    try:
        json.dumps(metrics)
    except (TypeError, ValueError):
        raise ThresholdError(
            f"the objective's metrics {sorted(metrics)} are not JSON-able: return numbers, "
            "strings, lists or dicts"
        ) from None
    return accuracy, metrics
