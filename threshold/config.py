"""The settings of a model and of a training run, the named recipes, and the model's size.

Plain dataclasses, no torch: the storage, the search's bookkeeping and the reports read and
validate settings without loading the training stack (computing a model's config or size never
imports torch). ``threshold.model`` and ``threshold.train`` export the same names.

Recipes are named sets of values for fields of :class:`TrainConfig` (optimizer, schedule, loss,
budget, stopping rules, decoding) and of :class:`ModelConfig` (init, block, activation,
recurrence, q/k/v bias). Those classes own the fields and check them; a recipe only names value
sets, and :func:`make_recipe` splits a user's overrides between the two.

- ``fast`` is this tool's first recipe: the classes' defaults (20,000 steps of 64 whole
  sequences, loss on the completion, AdamW 3e-3 with warm-up and cosine decay, weight decay 0.1,
  large init, sequential GELU block, early stops).
- ``small`` is ``fast`` in the regime where joint training helps (docs/science.md, "Regimes"): the
  group's init N(0, 0.02) and weight decay 0.01, an exponential decay over a fixed span (so a
  run read at a checkpoint is the run a smaller budget would have made), and no stuck rule
  (ADD-alone runs sit at chance for thousands of steps before they take off).
- ``paper`` is the group's public ListOps code: 100,000 steps of 64 random 128-token windows of
  the concatenated training stream (8,192 tokens a step, every one in the loss; the model gets
  at least 128 positions), AdamW 5e-4 decaying exponentially to 2e-5 with betas (0.9, 0.999),
  weight decay 0.01 on all parameters, no warm-up, init N(0, 0.02), a parallel ReLU block
  without q/k/v bias, no early stop but the learned one, accuracy sampled at temperature 1
  (evaluation decodes whole sequences from position 0). It keeps the paper's text's 4
  recurrence steps (the code uses 5). Its data split is the group's too (``split = "triples"``:
  ordered triples of distinct digits held out of every op at once), and no run stops early.
  The split is the one task-side value a recipe may set (:data:`TASK_FIELDS`): ``fast`` and
  ``small`` keep the task's default, this tool's per-op split.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import asdict, dataclass, field, fields, replace
from functools import cached_property
from pathlib import Path

from threshold.errors import ConfigError
from threshold.fields import check_finite, checked_field, field_kind
from threshold.files import not_a_folder
from threshold.meta import stored_dict
from threshold.tasks import TaskConfig

__all__ = [
    "DEFAULT_STORAGE",
    "GPU_TRIALS_AT_ONCE",
    "MAX_D_MODEL",
    "MODEL_FIELDS",
    "RECIPES",
    "RECIPE_HELP",
    "TASK_FIELDS",
    "TRAIN_FIELDS",
    "Execution",
    "ModelConfig",
    "Recipe",
    "TrainConfig",
    "check_finite",
    "checked_field",
    "field_kind",
    "fitted_words",
    "make_recipe",
    "model_config_for",
    "param_count",
    "pretrain_task",
    "recipe_fields",
    "recipe_words",
    "resolve_storage",
    "transfer_model_config",
]


MAX_D_MODEL = 4096
MAX_STEPS = 10_000_000  # steps a run: days of a GPU; the paper's longest runs are 100,000


# Trials a worker trains at once on a GPU unless told: a pack of 8 steps about as fast as one
# (a GPU step of tiny models is launch-bound: 400 model-steps/s for one, ~4,000 at 64), and the
# sampler's cost (bench search --batches, 10 bimodal studies): 36 runs to its stop at K = 8
# against 18.5 at K = 1, 0.40 of a dense grid's compute against 0.35, in a quarter of the rounds
# (4.5 against 18.5); K = 16 takes 40 runs and 0.71 of the grid's compute.
GPU_TRIALS_AT_ONCE = 8

# The studies' database when none is named: one SQLite file in the working folder (git-ignored).
DEFAULT_STORAGE = "sqlite:///studies/threshold.db"


def resolve_storage(named: str | None) -> str:
    """The storage URL a command uses: ``named`` (``--storage``, a suite's key), else
    ``$THRESHOLD_STORAGE``, else :data:`DEFAULT_STORAGE`. The one place the default is chosen:
    :class:`Execution` calls it when it is made, and the commands that read a storage without
    running anything (status, dashboard, report, refit) call it on their ``--storage``."""
    return named or os.environ.get("THRESHOLD_STORAGE") or DEFAULT_STORAGE


@dataclass(frozen=True)
class Execution:
    """Where and how a study's runs execute: ``find``, ``worker``, ``run`` and
    :func:`threshold.find_threshold` build one and pass it down. None of it changes a run's
    result (a run trains the same alone or beside others, in one worker or many), so none of it
    is stored on the study."""

    storage: str | None = None  # the database as named (--storage); None: not named
    # the database the runs use: storage, else $THRESHOLD_STORAGE, else DEFAULT_STORAGE, resolved
    # once, when the settings are made (resolve_storage); storage None says it was not named
    storage_url: str = field(init=False)
    workers: int = 1  # worker processes, one torch thread each: one a core, or one a GPU
    # trials a worker trains together as one batched run; None: 1 on the CPU, GPU_TRIALS_AT_ONCE
    # on a GPU (trials_on)
    trials_at_once: int | None = None
    device: str = "auto"  # auto: the GPU when there is one, else the CPU
    heartbeat_s: int = 30  # a running trial's beat; one silent for several beats is retried
    cache_dir: Path | None = None  # task data (None: $THRESHOLD_CACHE, else ~/.cache/threshold)
    oversubscribe: bool = False  # start more workers than cores (CPU) or GPUs (CUDA)
    # add the study's tables to a SQLite file that holds another application's tables; else such
    # a file is refused, as a mistyped --storage would write into another program's data
    other_tables: bool = False
    save_every_s: float = 60.0  # a running trial's training state is saved this often, for a retry

    def __post_init__(self) -> None:
        for name, option in (
            ("workers", "--workers"),
            ("trials_at_once", "--trials-at-once"),
            ("heartbeat_s", "--heartbeat"),
        ):
            value = getattr(self, name)
            if value is None and name == "trials_at_once":  # by the device (trials_on)
                continue
            if isinstance(value, bool) or not isinstance(value, int):
                raise ConfigError(f"{option} {value!r} is not allowed: use a whole number")
            if value < 1:
                raise ConfigError(f"{option} {value} is not allowed: use 1 or more")
        if not isinstance(self.save_every_s, int | float) or not self.save_every_s >= 0:
            raise ConfigError(f"save_every_s {self.save_every_s!r} is not allowed: use 0 or more")
        if self.cache_dir is not None and not isinstance(self.cache_dir, Path):
            object.__setattr__(self, "cache_dir", Path(self.cache_dir))
        blocked = None if self.cache_dir is None else not_a_folder(self.cache_dir)
        if blocked is not None:
            raise ConfigError(
                f"--cache-dir {str(self.cache_dir)!r} cannot be a folder: {str(blocked)!r} is a"
                " file; name a folder (or leave it out: $THRESHOLD_CACHE, else ~/.cache/threshold)",
                "cache_dir",
            )
        object.__setattr__(self, "storage_url", resolve_storage(self.storage))

    def trials_on(self, device_type: str) -> int:
        """Trials a worker on a ``device_type`` device trains at once: as set, else one on the
        CPU (a step costs its arithmetic there) and :data:`GPU_TRIALS_AT_ONCE` on a GPU."""
        if self.trials_at_once is not None:
            return self.trials_at_once
        return GPU_TRIALS_AT_ONCE if device_type == "cuda" else 1

    def but(self, **changes) -> Execution:
        """A copy with ``changes`` applied, skipping ``None`` values (an option left unset)."""
        return replace(self, **{k: v for k, v in changes.items() if v is not None})

    def to_json(self) -> dict:
        """The settings as JSON values: how a worker process receives them, with the storage
        resolved here (a worker started with another environment still joins this storage)."""
        given = {f.name: getattr(self, f.name) for f in fields(self) if f.init}
        cache_dir = None if self.cache_dir is None else str(self.cache_dir)
        return given | {"storage": self.storage_url, "cache_dir": cache_dir}


@dataclass(frozen=True)
class ModelConfig:
    vocab_size: int  # fixed by the testbed and its size, whatever the mixture
    n_ctx: int  # longest sequence the grammar makes: one learned position each
    d_model: int = 32  # the size being searched; also the Optuna parameter name
    n_recur: int = 4  # times the one block is applied (docs/science.md, "The model": 4)
    n_head: int = 1  # one head (docs/science.md, "The model")
    mlp_ratio: int = 4  # MLP hidden width = mlp_ratio * d_model (docs/science.md, "The model": 4x)
    tie_embeddings: bool = False  # untied head: the output map is free to differ from the input
    # The recipe's model side (docs/science.md, "Regimes"). Defaults are this tool's first recipe,
    # so configs stored before these fields existed read as what they trained.
    block: str = "sequential"  # x += SA(LN x); x += FFN(LN x). "parallel": x + SA(..) + FFN(..)
    activation: str = "gelu"  # of the MLP; "relu" as in the group's ListOps code
    init_std: float | None = None  # None: fan-in scaled (embeddings N(0, 1)); else N(0, std) all
    qkv_bias: bool = True  # the group's code has none (3 d parameters fewer)

    def __post_init__(self) -> None:
        check_finite(self)
        if not 1 <= self.d_model <= MAX_D_MODEL:
            raise ConfigError(
                f"d_model {self.d_model} is not allowed: use 1 to {MAX_D_MODEL} (this tool looks"
                " for small models; d = 4096 is already about 200M parameters)",
                "d_model",
            )
        if self.d_model % self.n_head:
            raise ConfigError(
                f"d_model {self.d_model} is not divisible by n_head {self.n_head}: "
                "choose a d_model that is a multiple of the head count"
            )
        for name in ("vocab_size", "n_ctx", "n_recur", "n_head", "mlp_ratio"):
            if getattr(self, name) < 1:
                raise ConfigError(
                    f"{name} {getattr(self, name)} is not allowed: use 1 or more", name
                )
        if self.block not in ("sequential", "parallel"):
            raise ConfigError(f"block {self.block!r} is not allowed: use sequential or parallel")
        if self.activation not in ("gelu", "relu"):
            raise ConfigError(f"activation {self.activation!r} is not allowed: use gelu or relu")
        if self.init_std is not None and not self.init_std > 0:
            raise ConfigError(
                f"init_std {self.init_std} is not allowed: use a positive standard deviation, "
                "or none for the fan-in scaled init"
            )

    def to_dict(self) -> dict:
        return asdict(self)


def param_count(cfg: ModelConfig) -> dict[str, int]:
    """Closed-form parameter count: ``total`` and ``non_embedding``.

    ``non_embedding`` leaves out the token and position embeddings and the output head (the maps
    that scale with vocabulary or context, not with the computation).
    """
    d, v, c, m = cfg.d_model, cfg.vocab_size, cfg.n_ctx, cfg.mlp_ratio
    block = (
        2 * d  # ln_1
        + 3 * d * d
        + (3 * d if cfg.qkv_bias else 0)  # qkv
        + d * d
        + d  # attention output
        + 2 * d  # ln_2
        + m * d * d
        + m * d  # mlp in
        + m * d * d
        + d  # mlp out
    )
    head = 0 if cfg.tie_embeddings else v * d
    non_embedding = block + 2 * d  # + ln_f
    return {"total": v * d + c * d + head + non_embedding, "non_embedding": non_embedding}


_DEFAULT_WINDOW = 128


@dataclass(frozen=True)
class TrainConfig:
    seed: int = 0  # model initialisation and batch order; the data split has its own seeds
    max_steps: int = 20_000  # budget; most runs stop earlier by the learned or stuck rule
    batch_size: int = 64  # sequences (or stream windows) per step
    recipe: str = "fast"  # the named recipe these values came from (threshold.config)
    lr: float = 3e-3  # peak learning rate (small models tolerate a large one)
    weight_decay: float = 0.1  # on matrices and embeddings only, unless decay_all
    decay_all: bool = False  # True: weight decay on every parameter (the group's code)
    betas: tuple[float, float] = (0.9, 0.98)
    warmup_steps: int = 200  # linear warm-up from zero
    schedule: str = "cosine"  # after warm-up: cosine | exponential (to min_lr_ratio) | constant
    min_lr_ratio: float = 0.1  # the decay ends at this fraction of lr, decay_steps after warm-up
    decay_steps: int | None = None  # None: the decay spans the budget (max_steps - warmup_steps)
    grad_clip: float = 1.0  # max global gradient norm
    batch_order: str = (
        "binned"  # binned | bucketed (before 0.2) | random: see threshold.train.batches
    )
    length_bins: int = 16  # binned: equal-count length bins (tighter lengths, still well mixed)
    bucket_chunk: int = 32  # bucketed: batches per sort chunk
    loss_on: str = "completion"  # "completion": only the chain of thought; "all": prompt too
    # "sequences": whole sequences from position 0; "windows": random ``window``-token windows of
    # the training sequences concatenated (the group's code), every token in the loss
    batches: str = "sequences"
    window: int = (
        _DEFAULT_WINDOW  # tokens a window (the group's code); the model needs n_ctx >= window
    )
    eval_every: int = 250  # steps between validation checks
    learned_tf: float = 0.99  # teacher-forced val answer accuracy (every op) that asks for a check
    learned_acc: float = 0.99  # greedy val accuracy (every op) that stops the run as learned
    # "learned": only the learned rule stops a run early; "never": no rule does (the group's
    # code), the run trains its whole budget and validation is only recorded
    early_stop: str = "learned_or_stuck"
    stuck_after: float = 0.5  # share of max_steps before the stuck rule may fire
    stuck_margin: float = 0.05  # "at chance": measured-op accuracy <= majority rate + margin
    stuck_window: float = 0.25  # answer loss must have moved < 2% over this share of max_steps
    eval_batch_size: int = 256
    decoding: str = "greedy"  # the accuracy the transition uses: greedy, or sampled (temperature 1)
    checkpoints: tuple[float, ...] = ()  # shares of max_steps where the measured accuracy is kept
    threads: int = 1  # torch threads; two single-thread processes beat one two-thread process
    # fp32; tf32: a GPU's fp32 matmuls in TF32; bf16: the step's arithmetic in bfloat16 (autocast),
    # weights and optimizer state fp32. fp32 until a lend shows another keeps a run's accuracy
    # within fp32's seed-to-seed spread (docs/engine.md)
    precision: str = "fp32"
    time_limit_s: float | None = None  # wall-clock budget, stop_reason "time_limit" when hit

    def __post_init__(self) -> None:
        object.__setattr__(self, "betas", tuple(self.betas))
        object.__setattr__(self, "checkpoints", tuple(float(c) for c in self.checkpoints))
        check_finite(self)
        if not 0 <= self.seed < 2**63:
            raise ConfigError(f"seed {self.seed} is not allowed: use 0 to 2**63 - 1")
        names = ("max_steps", "batch_size", "eval_every", "eval_batch_size", "threads")
        for name in (*names, "length_bins", "bucket_chunk", "window"):
            value = getattr(self, name)
            if value < 1:
                raise ConfigError(f"{name} {value} is not allowed: use 1 or more", name)
        if self.warmup_steps < 0:
            raise ConfigError(f"warmup_steps {self.warmup_steps} is not allowed: use 0 or more")
        if self.batch_order not in ("binned", "bucketed", "random"):
            raise ConfigError(
                f"batch_order {self.batch_order!r} is not allowed: use binned, bucketed or random"
            )
        self._check_choices()
        self._check_ranges()
        if self.checkpoints and self.budget_dependent:
            raise ConfigError(
                f"checkpoints need a schedule that does not depend on the budget, but schedule "
                f"{self.schedule!r} decays over max_steps: set decay_steps, or schedule constant"
            )
        if not self.lr > 0:
            raise ConfigError(f"lr {self.lr} is not allowed: use a positive learning rate")
        if self.time_limit_s is not None and not self.time_limit_s > 0:
            raise ConfigError(
                f"time_limit_s {self.time_limit_s} is not allowed: use a positive number of seconds"
            )

    def _check_choices(self) -> None:
        choices = {
            "loss_on": ("completion", "all"),
            "schedule": ("cosine", "exponential", "constant"),
            "early_stop": ("learned_or_stuck", "learned", "never"),
            "decoding": ("greedy", "sampled"),
            "batches": ("sequences", "windows"),
            "precision": ("fp32", "tf32", "bf16"),
        }
        for name, allowed in choices.items():
            if getattr(self, name) not in allowed:
                raise ConfigError(
                    f"{name} {getattr(self, name)!r} is not allowed: use {' or '.join(allowed)}"
                )
        if self.batches == "windows" and self.loss_on != "all":
            raise ConfigError(
                f"loss_on {self.loss_on!r} is not allowed with batches 'windows': a window starts"
                " mid-sequence and every token of it is in the loss; use loss_on all"
            )

    def _check_ranges(self) -> None:
        if self.max_steps > MAX_STEPS:
            raise ConfigError(
                f"max_steps {self.max_steps:,} is not allowed: use 1 to {MAX_STEPS:,} (a GPU at"
                " ~100 steps/s takes a day for 10 million)",
                "max_steps",
            )
        if not 0 <= self.weight_decay < 1:
            raise ConfigError(f"weight_decay {self.weight_decay} is not allowed: use 0 to below 1")
        if not (len(self.betas) == 2 and all(0 <= b < 1 for b in self.betas)):
            raise ConfigError(f"betas {self.betas} are not allowed: use two values in [0, 1)")
        if not 0 < self.min_lr_ratio <= 1:
            raise ConfigError(f"min_lr_ratio {self.min_lr_ratio} is not allowed: use (0, 1]")
        if self.decay_steps is not None and self.decay_steps < 1:
            raise ConfigError(f"decay_steps {self.decay_steps} is not allowed: use 1 or more")
        if not self.grad_clip > 0:
            raise ConfigError(f"grad_clip {self.grad_clip} is not allowed: use a positive norm")
        if not all(0 < c <= 1 for c in self.checkpoints):
            raise ConfigError(
                f"checkpoints {list(self.checkpoints)} are not allowed: use shares of the budget"
                " in (0, 1], e.g. 0.125,0.25,0.5,1"
            )
        if list(self.checkpoints) != sorted(set(self.checkpoints)):
            raise ConfigError(
                f"checkpoints {list(self.checkpoints)} repeat a share or are out of order: name"
                " each once, increasing, e.g. 0.125,0.25,0.5,1"
            )

    @property
    def budget_dependent(self) -> bool:
        """Whether the learning rate at a step depends on max_steps (so a run cut short is not
        the run a smaller budget would have made)."""
        return self.schedule != "constant" and self.decay_steps is None

    @cached_property  # read every training step: computed once (the config is frozen)
    def checkpoint_steps(self) -> tuple[int, ...]:
        """The steps where the measured op's accuracy is kept, increasing, without repeats."""
        return tuple(sorted({max(1, round(c * self.max_steps)) for c in self.checkpoints}))

    def context(self, longest: int) -> int:
        """The positions a model needs for sequences of up to ``longest`` tokens trained with
        these batches: ``longest``, or at least ``window`` with stream windows."""
        return max(longest, self.window) if self.batches == "windows" else longest

    def to_dict(self) -> dict:
        """The fields as a dict; ``batches``, ``window`` and ``precision`` left out at their
        defaults, and so is any field added after :data:`_STORED_TRAIN`
        (:func:`threshold.meta.stored_dict`), so a config stores (and names its study) as before
        they existed."""
        d = stored_dict(self, _STORED_TRAIN)
        if d["batches"] == "sequences" and d["window"] == _DEFAULT_WINDOW:
            del d["batches"], d["window"]
        if d["precision"] == "fp32":
            del d["precision"]
        return d

    @classmethod
    def from_dict(cls, d: dict) -> TrainConfig:
        """A stored config; ones written before ``batch_order`` existed read as what they ran."""
        d = dict(d)
        if "batch_order" not in d:
            d["batch_order"] = "bucketed" if d.pop("bucketing", True) else "random"
        return cls(**d)


# The fields a training config has always stored; a field added to TrainConfig is not named here,
# and stores only away from its default (docs/contributing.md, "A new recipe field").
_STORED_TRAIN = frozenset([
    "seed", "max_steps", "batch_size", "recipe", "lr", "weight_decay", "decay_all", "betas",
    "warmup_steps", "schedule", "min_lr_ratio", "decay_steps", "grad_clip", "batch_order",
    "length_bins", "bucket_chunk", "loss_on", "batches", "window", "eval_every", "learned_tf",
    "learned_acc", "early_stop", "stuck_after", "stuck_margin", "stuck_window", "eval_batch_size",
    "decoding", "checkpoints", "threads", "precision", "time_limit_s",
])  # fmt: skip


def model_config_for(
    task: TaskConfig, d_model: int, train: TrainConfig | None = None, **kwargs
) -> ModelConfig:
    """The model config that fits the vocabulary and longest sequence of ``task`` (and the
    windows of ``train``, when it trains on stream windows: see :meth:`TrainConfig.context`).

    Needs no generated data, so settings can be checked before anything is written.
    """
    n_ctx = task.max_len if train is None else train.context(task.max_len)
    return ModelConfig(vocab_size=len(task.vocab), n_ctx=n_ctx, d_model=d_model, **kwargs)


def pretrain_task(target: TaskConfig, ops: tuple[str, ...]) -> TaskConfig:
    """The source task of transfer: ``target`` with the ops ``ops`` (measured on its hardest
    op), the same testbed, modulus, grammar and split seeds, so both share the vocabulary."""
    if not ops:
        raise ConfigError("the pretraining mixture is empty: name at least one op, e.g. max,med")
    return replace(target, ops=tuple(ops), measure=None, weights=None, match_exposure=False)


def transfer_model_config(
    source: TaskConfig, target: TaskConfig, d_model: int, **kwargs
) -> ModelConfig:
    """One model config that fits both tasks (``kwargs``: the recipe's model-side values);
    refuses tasks with different vocabularies."""
    if source.vocab.tokens != target.vocab.tokens:
        raise ConfigError(
            f"transfer from {source.testbed} {source.n} to {target.testbed} {target.n} is not "
            "possible: their vocabularies differ; use the same testbed and modulus"
        )
    n_ctx = max(source.max_len, target.max_len)
    return ModelConfig(vocab_size=len(target.vocab), n_ctx=n_ctx, d_model=d_model, **kwargs)


# Fields that set the budget or where it is read, not how a model learns: left out of titles.
_BUDGET_FIELDS = ("max_steps", "checkpoints", "decay_steps", "min_lr_ratio")

MODEL_FIELDS = ("init_std", "block", "activation", "n_recur", "qkv_bias")
# TaskConfig fields a recipe may set: the data split, which the group's code fixes with its
# training (threshold.tasks.generate); every other task setting is the study's own.
TASK_FIELDS = ("split",)
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

# What each recipe field does, in a line: the help of its option in `find` and `train`
# (threshold.options builds the option from it and the field's type). A new recipe field is its
# dataclass field, its name in one of the lists above and its line here; a test holds them equal.
RECIPE_HELP = {
    "max_steps": "Most training steps per run",
    "batch_size": "Sequences (or stream windows) per step",
    "lr": "Peak learning rate",
    "weight_decay": "AdamW weight decay",
    "decay_all": "Weight decay on every parameter, or on matrices and embeddings only",
    "betas": "AdamW betas, e.g. 0.9,0.98",
    "warmup_steps": "Steps of linear warm-up",
    "schedule": "Learning-rate schedule: cosine, exponential or constant",
    "min_lr_ratio": "Fraction of --lr the decay ends at",
    "decay_steps": "Training steps the decay spans (fixed: needed for --checkpoints) [default:"
    " --steps less the warm-up].",
    "grad_clip": "Largest gradient norm",
    "loss_on": "Loss on the completion or on all tokens",
    "batches": "Batches of whole sequences, or windows of the concatenated stream (--loss-on all)",
    "window": "Tokens a stream window (--batches windows)",
    "early_stop": "learned_or_stuck, learned (no stuck rule) or never (the whole budget)",
    "decoding": "Accuracy the transition uses: greedy or sampled (T = 1)",
    "checkpoints": (
        "Shares of the budget where accuracy is kept, e.g. 0.125,0.25,0.5,1 [default: none]."
    ),
    "init_std": "Init every weight N(0, std) instead of fan-in scaled",
    "block": "Block: sequential or parallel",
    "activation": "MLP activation: gelu or relu",
    "n_recur": "Times the one block is applied",
    "qkv_bias": "Biases on queries, keys and values",
    "split": (
        "Held-out split: groups (a share of each op's applications) or triples (the group's"
        " digit triples, held out of every op)"
    ),
}

RECIPES: dict[str, dict] = {
    "fast": {},
    "small": {
        "max_steps": 30_000,  # ADD alone takes off near step 13,000 at d = 64 (its pilot)
        "init_std": 0.02,  # the group's init: every matrix and embedding N(0, 0.02)
        "weight_decay": 0.01,  # the group's weight decay (fast: 0.1)
        "schedule": "exponential",  # 3e-3 to 3e-4 (fast's min_lr_ratio) over decay_steps
        "decay_steps": 40_000,  # fixed (the pilot's), so checkpoints read smaller budgets
        "early_stop": "learned",  # no stuck rule: ADD alone sits at chance before it takes off
    },
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
        "early_stop": "never",  # the group's code trains every run its whole budget
        "split": "triples",  # the group's: 49 digit triples held out of every op (issue 59)
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
    task: tuple[tuple[str, object], ...] = ()  # TaskConfig fields it sets, in TASK_FIELDS order

    @property
    def name(self) -> str:
        return self.train.recipe

    @property
    def model_kwargs(self) -> dict:
        return dict(self.model)

    def on(self, task: TaskConfig) -> TaskConfig:
        """``task`` with the recipe's task-side values (its split); ``task`` itself when it sets
        none, so a ``fast`` or ``small`` task is the one given."""
        return replace(task, **dict(self.task)) if self.task else task


def make_recipe(name: str = "fast", **overrides) -> Recipe:
    """The recipe ``name`` with ``overrides`` (field=value, ``None`` values ignored), checked.

    Raises :class:`ConfigError` naming the recipe or field for an unknown name, an unknown field
    or a value out of range.
    """
    if name not in RECIPES:
        raise ConfigError(f"recipe {name!r} does not exist: choose from {', '.join(RECIPES)}")
    values = dict(RECIPES[name])
    for key, value in overrides.items():
        if key not in MODEL_FIELDS and key not in TRAIN_FIELDS and key not in TASK_FIELDS:
            raise ConfigError(
                f"recipe field {key!r} does not exist: choose from "
                f"{', '.join(TRAIN_FIELDS + MODEL_FIELDS + TASK_FIELDS)}"
            )
        if value is not None:
            cls = ModelConfig if key in MODEL_FIELDS else TrainConfig
            cls = TaskConfig if key in TASK_FIELDS else cls
            values[key] = checked_field(cls, key, value)
    if overrides.get("window") is not None and values.get("batches", "sequences") != "windows":
        raise ConfigError(
            f"window {overrides['window']} is set but batches are whole sequences (recipe "
            f"{name!r}), so it would do nothing: add batches windows (and loss_on all), or leave"
            " out window"
        )
    given = {k for k, v in overrides.items() if v is not None}
    _refuse_idle(name, values, given)
    if "warmup_steps" not in given:  # the recipe's warm-up, fitted to the run (fitted_words)
        steps = values.get("max_steps", TrainConfig.max_steps)
        if values.get("warmup_steps", TrainConfig.warmup_steps) >= steps:
            values["warmup_steps"] = steps // WARMUP_SHARE
    model = tuple((k, values[k]) for k in MODEL_FIELDS if k in values)
    ModelConfig(vocab_size=1, n_ctx=1, d_model=8, **dict(model))  # checks the model side
    task = tuple((k, values[k]) for k in TASK_FIELDS if k in values)
    TaskConfig(**dict(task))  # checks the task side's values (a task's grammar is checked later)
    train = TrainConfig(recipe=name, **{k: v for k, v in values.items() if k in TRAIN_FIELDS})
    return Recipe(train, model, task)


# A recipe's warm-up that is not below the run's steps (fast's 200 under --steps 100: the rate
# would never reach its peak) is cut to this share of the steps; a typed one is refused instead.
WARMUP_SHARE = 10


def fitted_words(train: TrainConfig, given: set[str] = frozenset()) -> list[str]:
    """What :func:`make_recipe` changed in recipe ``train.recipe`` to fit the run ``train`` is,
    as lines a command shows (``given``: the fields the user set, which it never changes)."""
    if "warmup_steps" in given or train.recipe not in RECIPES:
        return []
    theirs = RECIPES[train.recipe].get("warmup_steps", TrainConfig.warmup_steps)
    if theirs < train.max_steps or train.warmup_steps == theirs:
        return []
    return [
        f"warm-up {train.warmup_steps} step{'s' if train.warmup_steps != 1 else ''} (a tenth of"
        f" --steps {train.max_steps}): recipe {train.recipe}'s {theirs} is not below the steps,"
        " so its learning rate would never reach its peak; --warmup-steps sets it"
    ]


def _refuse_idle(name: str, values: dict, given: set[str]) -> None:
    """Refuse a value set by hand (``given``) that the recipe's other values make do nothing or
    contradict, naming both: a decay under schedule constant, a warm-up as long as the budget."""
    schedule = values.get("schedule", TrainConfig.schedule)
    for key in ("decay_steps", "min_lr_ratio"):
        if key in given and schedule == "constant":
            raise ConfigError(
                f"{key} {values[key]} is set but schedule is 'constant' (recipe {name!r}), which "
                f"does not decay, so it would do nothing: set schedule exponential or cosine, or "
                f"leave out {key}"
            )
    warmup = values.get("warmup_steps", TrainConfig.warmup_steps)
    steps = values.get("max_steps", TrainConfig.max_steps)
    if "warmup_steps" in given and warmup >= steps:
        raise ConfigError(
            f"warmup_steps {warmup} is not below max_steps {steps}: the learning rate would still "
            f"be warming up when training ends; set warmup_steps below {steps}, or more steps"
        )


def recipe_fields(train: TrainConfig, model: dict, task: TaskConfig | None = None) -> dict:
    """Every recipe field's value in ``train`` and the model-side ``model`` values (defaults
    filled in), and with ``task`` its task-side values (the split): what a report or note lists."""
    fields = dataclasses.fields(ModelConfig)
    defaults = {f.name: f.default for f in fields if f.name in MODEL_FIELDS}
    out = {k: getattr(train, k) for k in TRAIN_FIELDS}
    out = out | defaults | dict(model)
    return out if task is None else out | {k: getattr(task, k) for k in TASK_FIELDS}


def recipe_words(train: TrainConfig, model: dict, task: TaskConfig | None = None) -> str:
    """``paper``, or ``fast + init_std 0.02, weight_decay 0.01``: the recipe's name and how the
    values depart from it (budget fields left out; with ``task``, its split too: ``paper + split
    groups``); "" for the plain ``fast`` recipe."""
    base = make_recipe(train.recipe, max_steps=train.max_steps)  # its warm-up fitted as the run's
    mine = recipe_fields(train, model, task)
    base_task = None if task is None else base.on(TaskConfig())  # only its TASK_FIELDS are read
    theirs = recipe_fields(base.train, base.model_kwargs, base_task)
    changed = [
        f"{k} {_word(mine[k])}" for k in mine if k not in _BUDGET_FIELDS and mine[k] != theirs[k]
    ]
    if not changed:
        return "" if train.recipe == "fast" else train.recipe
    return f"{train.recipe} + {', '.join(changed)}"


def _word(value) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)
