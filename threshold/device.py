"""Which device trains: ``auto`` (a CUDA GPU if torch sees one, else the CPU), ``cpu``, ``cuda``."""

from __future__ import annotations

import torch

from threshold.errors import ConfigError

__all__ = ["DEVICES", "resolve_device"]

DEVICES = "auto, cpu, cuda or cuda:N"


def resolve_device(name: str) -> torch.device:
    """The torch device ``name`` means here; a GPU asked for where there is none is refused."""
    name = name.strip().lower()
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
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
        return torch.device(name)
    raise ConfigError(f"device {name!r} is not allowed: use {DEVICES}")
