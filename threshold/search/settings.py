"""Settings of a transition search: allowed sizes, starting range, target, stop rules and costs.

Sizes are embedding sizes d (the Optuna parameter ``d_model``); the maths works in
x = ln(total parameters), read off the ``params_of_d`` table the caller computes with
``param_count``, so this module needs no model code. The cost model prices one run at d as
``cost_a + cost_b * d**2`` (per-step overhead plus the d^2 matrix work), in arbitrary units.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from functools import cached_property

import numpy as np

from threshold.errors import ConfigError
from threshold.fields import check_finite, checked_field
from threshold.meta import stored_dict
from threshold.search.posterior import PosteriorSettings, level_fraction

__all__ = [
    "COST_A",
    "COST_B",
    "GIVE_UP_MASS",
    "STEP_S",
    "SearchConfig",
    "SearchSettings",
    "check_search",
    "run_seed",
    "stop_reason",
    "with_overrides",
]

# Seconds per training step measured by `threshold bench train` on this project's CPU: about
# 8.7 ms + 0.004 ms * d^2 (d = 16: 9.7 ms, d = 128: 74 ms), in units of the 8.7 ms: the one cost
# model of the search, its simulations and its benchmarks.
STEP_S = 8.7e-3  # seconds of one cost unit
COST_A = 1.0
COST_B = 1.0 / 2200


STOP_RULES = ("budget", "precision")  # when a study stops, not what it measures: may change


MAX_BUDGET = 10_000  # runs a study: a transition is located in tens of them


@dataclass(frozen=True)
class SearchConfig:
    """How the transition is searched; with the task and training settings it defines a study."""

    d_lo: int = 8  # initial bracket, smallest d (the range widens if the transition lies below)
    d_hi: int = 128  # initial bracket, largest d: pins the asymptote
    d_min: int = 2  # widening never goes below this d
    d_max: int = 512  # nor above this one
    precision: float = 2.5  # stop when the 90% interval of the 80% point spans <= this factor
    budget: int = 40  # most runs (completed and running)
    level: float = 0.8  # the transition is where the curve reaches level x asymptote
    chance_corrected: bool = False  # True: chance + level x (asymptote - chance) instead
    base_seed: int = 0  # run seeds derive from (base_seed, mixture, d, replicate)

    def __post_init__(self) -> None:
        check_finite(self)
        check_search(self.d_lo, self.d_hi, self.d_min, self.d_max, self)

    def to_dict(self) -> dict:
        """The fields as a dict, any field added after :data:`_STORED_SEARCH` left out at its
        default (:func:`threshold.meta.stored_dict`): a new search option renames no study."""
        return stored_dict(self, _STORED_SEARCH)


def check_search(d_lo: int, d_hi: int, d_min: int, d_max: int, rules) -> None:
    """The rules every search's settings keep, checked in this one place (for
    :class:`SearchConfig`, the stored settings a user sets, and :class:`SearchSettings`, the
    policy's view): a bracket inside the allowed sizes, a precision above 1, a level in (0, 1)
    and a budget of at least the bracket's 3 runs. ``rules`` has ``precision``, ``level`` and
    ``budget``."""
    if not 1 <= d_min <= d_lo < d_hi <= d_max:
        raise ConfigError(
            f"d range {d_lo}..{d_hi} is not allowed: use d_lo (--d-lo) below d_hi "
            f"(--d-hi), both within the limits {d_min}..{d_max}",
            "d_lo",
            "d_hi",
        )
    if not rules.precision > 1:
        raise ConfigError(
            f"precision {rules.precision} is not allowed: use a factor above 1", "precision"
        )
    if not 0 < rules.level < 1:
        raise ConfigError(f"level {rules.level} is not allowed: use a value in (0, 1)", "level")
    if rules.budget < 3:
        raise ConfigError(
            f"budget {rules.budget} is below the initial bracket of 3 runs: use 3 or more",
            "budget",
        )
    if rules.budget > MAX_BUDGET:
        raise ConfigError(
            f"budget {rules.budget:,} runs is not allowed: use 3 to {MAX_BUDGET:,} (a study"
            " locates a transition in 10 to 60)",
            "budget",
        )


def stop_reason(
    rules, ratio: float | None, d_range, d_limits, mass_beyond, give_up_mass: float | None = None
) -> str | None:
    """Why a search whose bracket is run stops on its posterior, or None: ``precision`` (the
    90% interval spans at most ``rules.precision``), ``above_range`` / ``below_range`` (the
    range has reached the largest / smallest allowed size, and at least ``give_up_mass`` of
    the posterior lies beyond it). The one statement of the stop, read by the policy
    (:func:`threshold.search.policy.decide`) and by a study's status
    (:func:`threshold.search.record.stop_status`); the budget's stop, ``budget``, is the
    count of runs reaching ``rules.budget``, checked first by both."""
    give_up = GIVE_UP_MASS if give_up_mass is None else give_up_mass
    below, above = mass_beyond
    if ratio is not None and ratio <= rules.precision:
        return "precision"
    if d_range[1] == d_limits[1] and above >= give_up:
        return "above_range"
    if d_range[0] == d_limits[0] and below >= give_up:
        return "below_range"
    return None


# Stop when the range has reached d_min (d_max) and this much mass lies below (above) it: the
# transition is outside the allowed sizes, and more runs cannot find it.
GIVE_UP_MASS = 0.95


# The fields a search has always stored; a field added to SearchConfig is not named here, and
# stores only away from its default (docs/contributing.md, "A new recipe field").
_STORED_SEARCH = frozenset([
    "d_lo", "d_hi", "d_min", "d_max", "precision", "budget", "level", "chance_corrected",
    "base_seed",
])  # fmt: skip


@dataclass(frozen=True)
class SearchSettings:
    # (d, total parameters) for every allowed d, increasing; no default: it depends on the
    # task's vocabulary and context (compute it with threshold.model.param_count).
    params_of_d: tuple[tuple[int, int], ...]
    # The settings a user sets have SearchConfig's defaults (``of`` derives this view from a
    # study's SearchConfig); the rest tunes the maths.
    d_lo: int = SearchConfig.d_lo
    d_hi: int = SearchConfig.d_hi
    chance: float = 0.1  # accuracy unlearned runs sit at: 1/n, or the majority rate if higher
    level: float = SearchConfig.level
    chance_corrected: bool = SearchConfig.chance_corrected
    # Stop when the 90% interval of x80 spans at most this ratio in parameters. Two studies at
    # 2.5 give their reduction ratio a 90% interval about 2.5^sqrt(2) = 3.7 wide, so a 2x
    # reduction (the smallest the paper reports) is just told from none and 3.6x (ADD+PROD)
    # clearly; 2.0 costs about 1.4x the compute, and the runs needed grow as 1/ln(precision)^2.
    precision: float = SearchConfig.precision
    budget: int = SearchConfig.budget
    base_seed: int = SearchConfig.base_seed  # run seeds derive from it (run_seed)
    cost_a: float = COST_A  # cost units per run at d -> 0: per-step overhead
    cost_b: float = COST_B  # cost units per d^2: the matrix work
    # The look-ahead scores a size by its gain over cost ** cost_power: 1 buys the most sharpness
    # per unit of compute, 0 the most per run (whatever it costs). Compute is always the real cost.
    cost_power: float = 1.0
    # Look-ahead target: variance of x80 + mid_weight * variance of the midpoint. Both are
    # reported, and x80 alone is myopic: it piles runs onto x80 and learns the slope (which x80
    # needs) slowly. 0.5 cut the simulated compute by about a sixth at the same coverage.
    mid_weight: float = 0.5
    # Repeats: runs at one size share that size's departure from any smooth curve (a misfit of
    # about this much accuracy), which more seeds there cannot average away. The (n+1)-th run at
    # a size then adds the information of 1 / ((1 + n r)(1 + (n + 1) r)) independent runs, r =
    # size_sd^2 / seed variance there: where seeds are bimodal (variance about 0.15) repeats pay
    # almost fully; where runs are graded (variance about 0.005) the fourth is worth a fifth.
    size_sd: float = 0.03
    repeat_nats: float = 0.05  # sizes closer than this in ln(parameters) count as the same size
    n_candidates: int = 16  # log-spaced sizes scored per decision (plus the sizes already run)
    widen_mass: float = 0.15  # widen the range when this posterior mass of x80 lies beyond an edge
    widen_factor: float = 2.0  # each widening moves an edge by this factor in d
    give_up_mass: float = GIVE_UP_MASS
    # A settled stop, on trial (bench search --set; 0: off): the precision stops a search only
    # once the median 80% point of the last settle_runs + 1 readings spans at most settle_nats
    # (the reading has settled, not only narrowed). On the dense grids of MAX and MIN, 3 runs
    # and 0.05 nats read as close as the 48-run grid at 13 runs (docs/search-benchmark.md, "When
    # to stop, on the dense grids"); not a default until the pooled families agree.
    settle_runs: int = 0
    settle_nats: float = 0.05
    posterior: PosteriorSettings = field(default_factory=PosteriorSettings)

    def __post_init__(self) -> None:
        try:
            table = tuple((int(d), int(n)) for d, n in self.params_of_d)
        except (TypeError, ValueError) as err:
            raise ConfigError(f"params_of_d must be (d, params) pairs: {err}") from None
        object.__setattr__(self, "params_of_d", table)
        ds = np.array([d for d, _ in table])
        ns = np.array([n for _, n in table])
        if ds.size < 3 or np.any(np.diff(ds) <= 0) or np.any(np.diff(ns) <= 0) or ns[0] < 1:
            raise ConfigError(
                "params_of_d needs at least 3 (d, params) pairs with d and params increasing:"
                " pass param_count(...)['total'] for each allowed d in order"
            )
        for name in ("d_lo", "d_hi"):
            if getattr(self, name) not in set(ds.tolist()):
                raise ConfigError(
                    f"{name} {getattr(self, name)} is not an allowed d ({ds[0]}..{ds[-1]}):"
                    " choose a d listed in params_of_d"
                )
        check_search(self.d_lo, self.d_hi, self.d_min, self.d_max, self)
        if not 0 <= self.chance < 1:
            raise ConfigError(f"chance {self.chance} is not allowed: use a value in [0, 1)")
        asym = self.posterior.asymptotes
        frac = level_fraction(asym, self.chance, self.level, self.chance_corrected)
        if not np.any((frac > 0.01) & (frac < 0.99)) and self.chance_corrected:
            raise ConfigError(
                f"level {self.level} with chance_corrected (--chance-corrected) puts the point"
                " within 1% of the asymptote, where no curve can be told from it: use a level"
                " (--level) from 0.02 to 0.98",
                "level",
            )
        if not np.any((frac > 0.01) & (frac < 0.99)):
            fix = (
                "lower the level (--level)"
                if np.all(np.nan_to_num(frac, nan=1.0) >= 0.99)
                else "raise the level (--level) or use chance_corrected (--chance-corrected)"
            )
            raise ConfigError(
                f"level {self.level} is not between chance {self.chance} and any asymptote: {fix}",
                "level",
            )
        if self.cost_a < 0 or self.cost_b < 0 or self.cost_a + self.cost_b <= 0:
            raise ConfigError("cost_a and cost_b must be 0 or more, and not both 0")
        if self.cost_power < 0:
            raise ConfigError(f"cost_power {self.cost_power} is not allowed: use 0 or more")
        if self.mid_weight < 0:
            raise ConfigError(f"mid_weight {self.mid_weight} is not allowed: use 0 or more")
        if self.settle_runs < 0 or not self.settle_nats > 0:
            raise ConfigError(
                f"settle_runs {self.settle_runs}, settle_nats {self.settle_nats}: use 0 runs or"
                " more (0: off) and nats above 0"
            )
        if self.size_sd < 0 or not self.repeat_nats > 0:
            raise ConfigError("size_sd must be 0 or more and repeat_nats above 0")
        if self.n_candidates < 2:
            raise ConfigError(f"n_candidates {self.n_candidates} is not allowed: use 2 or more")
        if not 0 < self.widen_mass < 1 or not 0 < self.give_up_mass <= 1:
            raise ConfigError("widen_mass must lie in (0, 1) and give_up_mass in (0, 1]")
        if not self.widen_factor > 1:
            raise ConfigError(f"widen_factor {self.widen_factor} is not allowed: use above 1")

    @classmethod
    def of(cls, config: SearchConfig, params_of_d, chance: float, **maths) -> SearchSettings:
        """The policy's view of a study searched as ``config`` says, over the sizes of
        ``params_of_d`` (each allowed size with its parameter count), unlearned runs at
        ``chance``; ``maths``: other fields of this class (the cost model, say)."""
        return cls(
            params_of_d=tuple(params_of_d),
            d_lo=config.d_lo,
            d_hi=config.d_hi,
            chance=chance,
            level=config.level,
            chance_corrected=config.chance_corrected,
            precision=config.precision,
            budget=config.budget,
            base_seed=config.base_seed,
            **maths,
        )

    def run_seed(self, key: tuple, d: int, replicate: int) -> int:
        """The seed of the run ``replicate`` at size ``d`` of the study ``key`` names (its
        mixture's ops, or its objective): :func:`run_seed` of the base seed."""
        return run_seed(self.base_seed, key, d, replicate)

    @cached_property
    def sizes(self) -> np.ndarray:
        """Allowed d, increasing: (D,)."""
        return np.array([d for d, _ in self.params_of_d])

    @cached_property
    def log_params(self) -> np.ndarray:
        """x = ln(total parameters) of each allowed d: (D,)."""
        return np.log(np.array([n for _, n in self.params_of_d], dtype=float))

    @property
    def d_min(self) -> int:
        return int(self.sizes[0])

    @property
    def d_max(self) -> int:
        return int(self.sizes[-1])

    def x_of(self, d) -> np.ndarray:
        """ln(parameters) of allowed sizes d (scalar or array)."""
        d_arr = np.asarray(d)
        idx = np.clip(np.searchsorted(self.sizes, d_arr), 0, self.sizes.size - 1)
        if np.any(self.sizes[idx] != d_arr):
            raise ConfigError(
                f"d {d} is not an allowed size ({self.d_min}..{self.d_max}): use a d in params_of_d"
            )
        return self.log_params[idx]

    def d_of(self, x) -> np.ndarray:
        """Size d (real-valued) at ln(parameters) x: ln d interpolated linearly in x, and
        extrapolated beyond the table along its end segments."""
        xs, ls = self.log_params, np.log(self.sizes)
        x = np.asarray(x, dtype=float)
        inside = np.interp(x, xs, ls)
        below = ls[0] + (x - xs[0]) * (ls[1] - ls[0]) / (xs[1] - xs[0])
        above = ls[-1] + (x - xs[-1]) * (ls[-1] - ls[-2]) / (xs[-1] - xs[-2])
        return np.exp(np.where(x < xs[0], below, np.where(x > xs[-1], above, inside)))

    def nearest(self, d: float) -> int:
        """The allowed size nearest to d in log scale."""
        i = int(np.argmin(np.abs(np.log(self.sizes) - np.log(max(d, 1e-9)))))
        return int(self.sizes[i])

    def cost(self, d) -> np.ndarray:
        """Expected cost of one run at d, in cost units."""
        d = np.asarray(d, dtype=float)
        return self.cost_a + self.cost_b * d**2


def run_seed(base_seed: int, key: tuple, d_model: int, replicate: int) -> int:
    """The training seed of one run, from (base seed, the study's key: its mixture's ops, or
    its objective, d, replicate)."""
    blob = repr((base_seed, tuple(key), d_model, replicate)).encode()
    return int.from_bytes(hashlib.sha256(blob).digest()[:4], "little")


def with_overrides(settings: SearchSettings, overrides: Mapping[str, object]) -> SearchSettings:
    """``settings`` with fields of its own or of its posterior replaced by name, each value's
    kind checked against the field's (``checked_field``: a list becomes a tuple) and its range
    as the settings check themselves; ``params_of_d`` stays. For trying a setting on simulated
    studies (``threshold bench search --set``) before making it a default.
    """
    own = {f.name for f in fields(SearchSettings)} - {"params_of_d", "posterior"}
    inner = {f.name for f in fields(PosteriorSettings)}
    unknown = sorted(set(overrides) - own - inner)
    if unknown:
        raise ConfigError(
            f"unknown setting {', '.join(unknown)}: choose from {', '.join(sorted(own | inner))}"
        )
    values = {
        k: checked_field(SearchSettings if k in own else PosteriorSettings, k, v)
        for k, v in overrides.items()
    }
    posterior = replace(settings.posterior, **{k: values[k] for k in values if k in inner})
    return replace(settings, posterior=posterior, **{k: values[k] for k in values if k in own})
