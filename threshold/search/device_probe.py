"""What torch makes of a ``--device`` on this machine, asked in a process of its own.

``python -m threshold.search.device_probe NAME`` prints one JSON line: ``{"type": "cpu"}``,
``{"type": "cuda", "index": N or null, "count": GPUs}``, or ``{"error": "..."}`` with the one-line
reason a device is refused (:func:`threshold.train.device.resolve_device`: no GPU, no such index,
a GPU that disagrees with the CPU). :func:`threshold.search.find.worker_devices` runs it, so the
process that follows a search neither loads torch nor holds a GPU of its own.
"""

from __future__ import annotations

import json
import sys

import torch

from threshold.errors import ConfigError
from threshold.train.device import resolve_device

__all__ = ["describe"]


def describe(name: str) -> dict:
    """Device ``name`` as torch resolves it here, or why it is refused."""
    try:
        device = resolve_device(name)
    except ConfigError as e:
        return {"error": str(e)}
    count = torch.cuda.device_count() if device.type == "cuda" else 0
    return {"type": device.type, "index": device.index, "count": count}


if __name__ == "__main__":
    print(json.dumps(describe(sys.argv[1])))
