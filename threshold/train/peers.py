"""The engine's peers, timed the way ``bench gpu`` times the engine, so its figures are ratios.

- ``vmap``: PyTorch's model-ensembling recipe over the model of record: ``torch.func.
  stack_module_state`` of M :class:`~threshold.model.RecurrentTransformer` of one size,
  ``functional_call`` under ``torch.vmap``, one AdamW over the stacked weights (fused on a GPU),
  each member's loss its own mean; batches one sequence a row, padded to the longest of the
  batch, drawn by each member's own generator and already on the device before the clock starts.
- ``plain``: one model trained alone with ``torch.optim.AdamW``, what one process a run does.

Neither draws batches nor evaluates while timed: they are the device's side of a step only.
"""

from __future__ import annotations

import copy
import time

import numpy as np
import torch
import torch.nn.functional as F
from torch.func import functional_call, stack_module_state

from threshold.config import TrainConfig, model_config_for
from threshold.tasks import TaskData
from threshold.train.batches import IGNORE, batch_arrays, train_batches
from threshold.train.engine import init_model

__all__ = ["peer_row"]

BATCHES = 8  # distinct batches cycled through while timed (already on the device)


def _batches(data: TaskData, members: int, device: torch.device) -> list[tuple]:
    """``BATCHES`` batches (M, B, T) of inputs and targets, each member's own draws, and the
    tokens of each (its sequences' lengths, as the engine counts them)."""
    cfg = TrainConfig()
    draws = [train_batches(data.train, TrainConfig(seed=i)) for i in range(members)]
    out = []
    for _ in range(BATCHES):
        index = [next(d) for d in draws]
        length = max(int(data.train.lengths[i].max()) for i in index) - 1
        pairs = [
            batch_arrays(data.train, i, data.vocab.pad_id, cfg.loss_on == "completion", length)
            for i in index
        ]
        x = torch.from_numpy(np.stack([p[0] for p in pairs]).astype(np.int64)).to(device)
        y = torch.from_numpy(np.stack([p[1] for p in pairs]).astype(np.int64)).to(device)
        out.append((x, y, sum(int(data.train.lengths[i].sum()) for i in index)))
    return out


def _loss(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """The sum over members of each member's mean loss: logits (M, B, T, V), targets (M, B, T)."""
    m = y.shape[0]
    nll = F.cross_entropy(logits.flatten(0, 2), y.flatten(), ignore_index=IGNORE, reduction="none")
    counts = (y != IGNORE).flatten(1).sum(1).clamp(min=1)  # (M,)
    return (nll.view(m, -1).sum(1) / counts).sum()


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def peer_row(
    data: TaskData, device: torch.device, kind: str, d_model: int, members: int, steps: int
) -> dict:
    """Model-steps/s and useful tokens/s of ``kind`` (``vmap`` or ``plain``, one member) at
    ``d_model``, timed over ``steps`` after 3 untimed ones."""
    members = 1 if kind == "plain" else members
    model_cfg = model_config_for(data.config, d_model)
    models = [init_model(model_cfg, seed).to(device) for seed in range(members)]
    batches = _batches(data, members, device)
    fused = device.type == "cuda"
    if kind == "plain":
        model = models[0]
        opt = torch.optim.AdamW(model.parameters(), lr=3e-3, fused=fused)

        def step(x: torch.Tensor, y: torch.Tensor) -> None:
            _loss(model(x[0])[None], y).backward()
            opt.step()
            opt.zero_grad(set_to_none=True)

    else:
        params, buffers = stack_module_state(models)  # (M, ...) leaves each
        base = copy.deepcopy(models[0]).to("meta")

        def one(p: dict, b: dict, x: torch.Tensor) -> torch.Tensor:
            return functional_call(base, (p, b), (x,))

        stacked = torch.vmap(one)
        opt = torch.optim.AdamW(params.values(), lr=3e-3, fused=fused)

        def step(x: torch.Tensor, y: torch.Tensor) -> None:
            _loss(stacked(params, buffers, x), y).backward()
            opt.step()
            opt.zero_grad(set_to_none=True)

    for i in range(3):
        step(*batches[i % BATCHES][:2])
    _sync(device)
    tokens = 0
    t0 = time.perf_counter()
    for i in range(steps):
        x, y, n = batches[i % BATCHES]
        step(x, y)
        tokens += n
    _sync(device)
    elapsed = time.perf_counter() - t0
    return {
        "path": f"peer {kind}",
        "members": members,
        "d_models": [d_model],
        "steps": steps,
        "step_ms": 1000 * elapsed / steps,
        "model_steps_per_s": members * steps / elapsed,
        "tokens_per_s": tokens / elapsed,
    }
