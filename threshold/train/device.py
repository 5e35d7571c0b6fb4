"""Which device trains: ``auto`` (a CUDA GPU if torch sees one, else the CPU), ``cpu``, ``cuda``.

A GPU is checked before it trains anything: one tiny forward and backward of a two-member stack
on it and on the CPU must agree, else the device is refused with one line naming it and the
difference, so ``--device auto`` never sends a run into an untried path.
"""

from __future__ import annotations

import warnings
from functools import cache

import torch
import torch.nn.functional as F

from threshold.config import ModelConfig
from threshold.errors import ConfigError
from threshold.model import RecurrentTransformer
from threshold.train.ensemble import Ensemble

__all__ = ["DEVICES", "check_device", "resolve_device"]

DEVICES = "auto, cpu, cuda or cuda:N"
AGREE = 1e-3  # largest difference of logits or gradients between the GPU and the CPU allowed


def resolve_device(name: str) -> torch.device:
    """The torch device ``name`` means here; a GPU asked for where there is none, or one that
    disagrees with the CPU (:func:`check_device`), is refused."""
    name = name.strip().lower()
    if name == "auto":
        if not torch.cuda.is_available():
            return torch.device("cpu")
        name = "cuda"
    if name == "cpu":
        return torch.device("cpu")
    if name == "cuda" or name.startswith("cuda:"):
        if not torch.cuda.is_available():
            build = "a CPU-only build" if torch.version.cuda is None else "no GPU visible"
            raise ConfigError(
                f"device {name!r} is not available: torch {torch.__version__} sees no CUDA GPU "
                f"here ({build}); use --device cpu or auto"
            )
        index, count = name.partition(":")[2], torch.cuda.device_count()
        if index and (not index.isdigit() or int(index) >= count):
            raise ConfigError(
                f"device {name!r} does not exist: this machine has {count} GPU(s), "
                f"cuda:0 to cuda:{count - 1}"
            )
        device = torch.device(name)
        check_device(device)
        return device
    raise ConfigError(f"device {name!r} is not allowed: use {DEVICES}")


@cache
def check_device(device: torch.device) -> float:
    """The largest difference of logits and gradients between ``device`` and the CPU on a tiny
    two-member stack (one forward and backward); :class:`ConfigError` above :data:`AGREE`."""
    cfg = ModelConfig(vocab_size=11, n_ctx=16, d_model=12)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        models = [RecurrentTransformer(cfg), RecurrentTransformer(ModelConfig(11, 16, 8))]
        x = torch.randint(0, 11, (2, 3, 15))

    def run(dev: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        ens = Ensemble.from_models(models, dev)
        logits = ens(x.to(dev))  # (M, B, T, V)
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="grad and param do not obey the gradient")
            F.cross_entropy(logits.flatten(0, 2), x.to(dev).flatten()).backward()
        return logits.detach().cpu(), ens.grad.cpu()

    (a, ga), (b, gb) = run(torch.device("cpu")), run(device)
    diff = max(float((a - b).abs().max()), float((ga - gb).abs().max()))
    if not diff <= AGREE:
        name = torch.cuda.get_device_name(device) if device.type == "cuda" else str(device)
        raise ConfigError(
            f"device {device} ({name}) disagrees with the CPU on a tiny forward and backward "
            f"(largest difference {diff:.2e}, allowed {AGREE:g}): use --device cpu"
        )
    return diff
