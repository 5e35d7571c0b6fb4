"""How many members fit in one batched pass: a peak-memory estimate and the packs it implies.

The estimate counts the stacked weights with their gradients and two AdamW moments, the
activations a training step keeps for its backward pass at the longest sequence, and the larger
of the two evaluations (teacher-forced logits, or a decoding cache), with a margin. It errs high:
a pack that is planned to fit should fit, and a CUDA out-of-memory error that happens anyway is
handled by the trainer (it halves the pack).
"""

from __future__ import annotations

import os
from dataclasses import replace

import torch

from threshold.config import ModelConfig, TrainConfig, param_count
from threshold.errors import ConfigError
from threshold.train.ensemble import shape_key

__all__ = [
    "WIDTH_RATIO",
    "available_bytes",
    "pack_bytes",
    "plan_packs",
    "plan_waves",
    "weight_share",
]

FLOAT = 4  # bytes: everything trains in float32
MARGIN = 1.5  # allocator slack, temporaries of the optimizer step, the batch tensors
# A shared pack's width (its widest member's d) is at most this times a member's own d: one d 256
# run padded a lend's pack of 16 to 256, its weights then 80% padding (issue 69). The issue's
# guess; a lend's throughput rows ("planned" against one padded pack) are to measure a better one
WIDTH_RATIO = 1.3


def pack_bytes(members: list[tuple[ModelConfig, TrainConfig]]) -> int:
    """Peak bytes of training ``members`` (model and train config each) as one padded stack."""
    m = len(members)
    cfg = replace(members[0][0], d_model=max(c.d_model for c, _ in members))
    d, v, t, r = cfg.d_model, cfg.vocab_size, cfg.n_ctx, cfg.n_recur
    f = cfg.mlp_ratio * d
    weights = 4 * m * param_count(cfg)["total"]  # weights, gradients, two moments
    per_token = r * (12 * d + 3 * f + t) + 4 * v  # kept for backward, per recurrence step, + loss
    batch = max(c.batch_size for _, c in members)
    train = m * batch * t * per_token
    evaluation = max(c.eval_batch_size for _, c in members) * m
    teacher = evaluation * t * (4 * d + f + t + 2 * v)
    decode = evaluation * (2 * r * t * d + t * (4 * d + f + v))
    return int(MARGIN * FLOAT * (weights + max(train, teacher, decode)))


def available_bytes(device: torch.device) -> int:
    """Memory a pack may use on ``device``: 90% of the GPU's free memory, 80% of the host's."""
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return int(0.9 * free)
    try:
        with open("/proc/meminfo") as f:
            info = dict(line.split(":", 1) for line in f)
        free = int(info["MemAvailable"].split()[0]) * 1024
    except (OSError, KeyError, ValueError):
        free = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    return int(0.8 * free)


def plan_packs(
    members: list[tuple[ModelConfig, TrainConfig]],
    device: torch.device,
    memory_bytes: int | None = None,
    share: bool | None = None,
    width_ratio: float | None = WIDTH_RATIO,
) -> list[list[int]]:
    """Positions of ``members`` (model and train config each) grouped into packs that stack
    together and fit in memory.

    Members of a pack share their model's shape (but d) and their precision. ``share``
    (default: on a GPU) lets members of other sizes and runs share a padded pack; on
    the CPU every member gets a pack of its own. Two reasons: on the CPU a step costs its
    arithmetic, not its calls (a pack of 16 at d = 8 ran 1.6x, at d >= 32 1.0-1.2x the
    model-steps/s of one model), and a shared pack pads each member's batch to the longest of
    the pack and its width to the widest, which moves the rounding of the matmul and LayerNorm
    reductions (about 1e-8 in a step's gradients), so a run's weights would depend on its
    pack-mates. Alone, a member's arithmetic is that of a run trained alone, bit for bit. Within
    a shared pack larger d go first, and a member joins a pack only where the pack's width is at
    most ``width_ratio`` times its own d (:data:`WIDTH_RATIO`; None: any width), so a pack's
    weights are mostly its members' own (:func:`weight_share`). A member that alone would not
    fit is refused before anything trains.
    """
    if share is None:
        share = device.type == "cuda"
    budget = available_bytes(device) if memory_bytes is None else memory_bytes
    groups: dict[tuple, list[int]] = {}
    for i, (model_cfg, cfg) in enumerate(members):
        key = (shape_key(model_cfg), cfg.precision, None if share else i)
        groups.setdefault(key, []).append(i)
    packs = []
    for positions in groups.values():
        positions.sort(key=lambda i: -members[i][0].d_model)
        pack: list[int] = []
        for i in positions:
            wide = members[pack[0]][0].d_model if pack else 0  # the pack's width: its first
            near = width_ratio is None or wide <= width_ratio * members[i][0].d_model
            if pack and near and _need(members, [*pack, i]) <= budget:
                pack.append(i)
                continue
            if pack:
                packs.append(pack)
            need = _need(members, [i])
            if need > budget:
                model_cfg, cfg = members[i]
                raise ConfigError(
                    f"one model of d_model {model_cfg.d_model} at batch size "
                    f"{cfg.batch_size} needs about {_words(need)}, more than the "
                    f"{_words(budget)} this {device.type} allows: lower --batch-size or "
                    "the sizes, or raise --memory-gb"
                )
            pack = [i]
        packs.append(pack)
    return packs


def plan_waves(
    members: list[tuple[ModelConfig, TrainConfig]],
    device: torch.device,
    memory_bytes: int | None = None,
    share: bool | None = None,
) -> list[list[list[int]]]:
    """The packs of :func:`plan_packs` in waves: the packs of a wave fit in memory together and
    train side by side; the waves train one after the other."""
    budget = available_bytes(device) if memory_bytes is None else memory_bytes
    waves: list[list[list[int]]] = []
    used = budget + 1
    for pack in plan_packs(members, device, budget, share):
        need = _need(members, pack)
        if used + need > budget:
            waves.append([])
            used = 0
        waves[-1].append(pack)
        used += need
    return waves


def weight_share(members: list[tuple[ModelConfig, TrainConfig]], packs: list[list[int]]) -> float:
    """The share of the packs' stacked weights that are their members' own, not padding: each
    member's parameters over its pack's width's, summed over every member."""
    own = padded = 0
    for pack in packs:
        cfg = replace(members[pack[0]][0], d_model=max(members[i][0].d_model for i in pack))
        padded += len(pack) * param_count(cfg)["total"]
        own += sum(param_count(members[i][0])["total"] for i in pack)
    return own / padded if padded else 1.0


def _words(n: int) -> str:
    return f"{n / 2**30:.2f} GiB" if n >= 2**28 else f"{n / 2**20:.1f} MiB"


def _need(members, positions: list[int]) -> int:
    return pack_bytes([members[j] for j in positions])
