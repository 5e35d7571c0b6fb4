"""The settings of a model and of a training run, with the model's closed-form size.

Plain dataclasses, no torch: the storage, the search's bookkeeping and the reports read and
validate settings without loading the training stack. ``threshold.model`` and ``threshold.train``
export the same names.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from threshold.errors import ConfigError

__all__ = ["MAX_D_MODEL", "ModelConfig", "TrainConfig", "param_count"]


MAX_D_MODEL = 4096


@dataclass(frozen=True)
class ModelConfig:
    vocab_size: int  # fixed by the testbed and its size, whatever the mixture
    n_ctx: int  # longest sequence the grammar makes: one learned position each
    d_model: int = 32  # the size being searched; also the Optuna parameter name
    n_recur: int = 4  # times the one block is applied (domain.md: R = 4)
    n_head: int = 1  # domain.md: one head
    mlp_ratio: int = 4  # MLP hidden width = mlp_ratio * d_model (domain.md: 4x)
    tie_embeddings: bool = False  # untied head: the output map is free to differ from the input
    # The recipe's model side (domain.md, Regimes). Defaults are this tool's first recipe, so
    # configs stored before these fields existed read as what they trained.
    block: str = "sequential"  # x += SA(LN x); x += FFN(LN x). "parallel": x + SA(..) + FFN(..)
    activation: str = "gelu"  # of the MLP; "relu" as in the group's ListOps code
    init_std: float | None = None  # None: fan-in scaled (embeddings N(0, 1)); else N(0, std) all

    def __post_init__(self) -> None:
        if not 1 <= self.d_model <= MAX_D_MODEL:
            raise ConfigError(
                f"d_model {self.d_model} is not allowed: use 1 to {MAX_D_MODEL} (this tool looks"
                " for small models; d = 4096 is already about 200M parameters)"
            )
        if self.d_model % self.n_head:
            raise ConfigError(
                f"d_model {self.d_model} is not divisible by n_head {self.n_head}: "
                "choose a d_model that is a multiple of the head count"
            )
        for name in ("vocab_size", "n_ctx", "n_recur", "n_head", "mlp_ratio"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} {getattr(self, name)} is not allowed: use 1 or more")
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
        + 3 * d  # qkv
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


@dataclass(frozen=True)
class TrainConfig:
    seed: int = 0  # model initialisation and batch order; the data split has its own seeds
    max_steps: int = 20_000  # budget; most runs stop earlier by the learned or stuck rule
    batch_size: int = 64  # sequences per step
    lr: float = 3e-3  # peak learning rate (small models tolerate a large one)
    weight_decay: float = 0.1  # on matrices and embeddings only, not on biases or LayerNorm
    betas: tuple[float, float] = (0.9, 0.98)
    warmup_steps: int = 200  # linear warm-up from zero
    min_lr_ratio: float = 0.1  # cosine decay ends at this fraction of lr at max_steps
    grad_clip: float = 1.0  # max global gradient norm
    batch_order: str = "binned"  # binned | bucketed (before 0.2) | random: see threshold.batches
    length_bins: int = 16  # binned: equal-count length bins (tighter lengths, still well mixed)
    bucket_chunk: int = 32  # bucketed: batches per sort chunk
    loss_on: str = "completion"  # "completion": only the chain of thought; "all": prompt too
    eval_every: int = 250  # steps between validation checks
    learned_tf: float = 0.99  # teacher-forced val answer accuracy (every op) that asks for a check
    learned_acc: float = 0.99  # greedy val accuracy (every op) that stops the run as learned
    stuck_after: float = 0.5  # share of max_steps before the stuck rule may fire
    stuck_margin: float = 0.05  # "at chance": measured-op accuracy <= majority rate + margin
    stuck_window: float = 0.25  # answer loss must have moved < 2% over this share of max_steps
    eval_batch_size: int = 256
    threads: int = 1  # torch threads; two single-thread processes beat one two-thread process
    time_limit_s: float | None = None  # wall-clock budget, stop_reason "time_limit" when hit

    def __post_init__(self) -> None:
        object.__setattr__(self, "betas", tuple(self.betas))
        if not 0 <= self.seed < 2**63:
            raise ConfigError(f"seed {self.seed} is not allowed: use 0 to 2**63 - 1")
        names = ("max_steps", "batch_size", "eval_every", "eval_batch_size", "threads")
        for name in (*names, "length_bins", "bucket_chunk"):
            value = getattr(self, name)
            if value < 1:
                raise ConfigError(f"{name} {value} is not allowed: use 1 or more")
        if self.warmup_steps < 0:
            raise ConfigError(f"warmup_steps {self.warmup_steps} is not allowed: use 0 or more")
        if self.batch_order not in ("binned", "bucketed", "random"):
            raise ConfigError(
                f"batch_order {self.batch_order!r} is not allowed: use binned, bucketed or random"
            )
        if self.loss_on not in ("completion", "all"):
            raise ConfigError(f"loss_on {self.loss_on!r} is not allowed: use completion or all")
        if not self.lr > 0:
            raise ConfigError(f"lr {self.lr} is not allowed: use a positive learning rate")
        if self.time_limit_s is not None and not self.time_limit_s > 0:
            raise ConfigError(
                f"time_limit_s {self.time_limit_s} is not allowed: use a positive number of seconds"
            )

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> TrainConfig:
        """A stored config; ones written before ``batch_order`` existed read as what they ran."""
        d = dict(d)
        if "batch_order" not in d:
            d["batch_order"] = "bucketed" if d.pop("bucketing", True) else "random"
        return cls(**d)
