"""Checkpoints: weights plus every config needed to rebuild the model and its vocabulary.

File layout: one header line ``threshold-checkpoint v1 <sha256>`` followed by a ``torch.save``
payload. The hash covers the payload, so a truncated or edited file is refused on load; writes go
to a temporary file that is renamed into place, so a half-written checkpoint is never seen.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch

from threshold.errors import CheckpointError, ConfigError
from threshold.files import atomic_write
from threshold.model import ModelConfig, RecurrentTransformer
from threshold.tasks import TaskConfig

__all__ = ["Checkpoint", "check_writable", "load_checkpoint", "save_checkpoint"]

MAGIC = b"threshold-checkpoint v1 "


def check_writable(folder: str | os.PathLike, named: str | os.PathLike | None = None) -> None:
    """Refuse a ``folder`` that cannot be made or written, before anything is trained: make it
    (and its missing parents) and a file in it, then remove them again. The error names
    ``named`` (default: the folder) as the option ``--out``."""
    folder = Path(folder)
    missing = []
    for f in [folder, *folder.parents]:
        if f.exists():
            break
        missing.append(f)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder, prefix=".tmp-"):
            pass
    except OSError as e:
        raise ConfigError(
            f"--out {str(named or folder)!r} cannot be written ({e.strerror or e}): give a path"
            " you can create and write"
        ) from None
    finally:
        for f in missing:  # deepest first
            with contextlib.suppress(OSError):
                f.rmdir()


@dataclass
class Checkpoint:
    model_config: ModelConfig
    task_config: TaskConfig
    train_config: dict  # the TrainConfig fields, as saved
    vocab: tuple[str, ...]
    state_dict: dict[str, torch.Tensor]
    metrics: dict  # what the run measured (accuracies, steps, stop reason)

    def build_model(self) -> RecurrentTransformer:
        model = RecurrentTransformer(self.model_config)
        model.load_state_dict(self.state_dict)
        model.eval()
        return model


def save_checkpoint(
    path: str | os.PathLike,
    model: RecurrentTransformer,
    task_config: TaskConfig,
    train_config: dict,
    metrics: dict,
) -> str:
    """Write ``model`` and its configs to ``path`` atomically; return the content hash."""
    payload = {
        "model_config": model.cfg.to_dict(),
        "task_config": task_config.to_dict(),
        "train_config": train_config,
        "vocab": list(task_config.vocab.tokens),
        "state_dict": {k: v.detach().cpu() for k, v in model.state_dict().items()},
        "metrics": metrics,
    }
    buffer = io.BytesIO()
    torch.save(payload, buffer)
    body = buffer.getvalue()
    digest = hashlib.sha256(body).hexdigest()
    try:
        with atomic_write(path) as f:
            f.write(MAGIC + digest.encode() + b"\n")
            f.write(body)
    except OSError as e:  # no space, no permission, a file where a directory should be
        raise CheckpointError(f"checkpoint {str(path)!r} cannot be written: {e}") from None
    return digest


def load_checkpoint(path: str | os.PathLike) -> Checkpoint:
    """Read and verify a checkpoint; :class:`CheckpointError` if unreadable or tampered with."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise CheckpointError(f"checkpoint {str(path)!r} cannot be read: {e.strerror}") from None
    header, _, body = raw.partition(b"\n")
    if not header.startswith(MAGIC):
        raise CheckpointError(f"{str(path)!r} is not a threshold checkpoint (no header)")
    expected = header[len(MAGIC) :].decode(errors="replace")
    if hashlib.sha256(body).hexdigest() != expected:
        raise CheckpointError(
            f"checkpoint {str(path)!r} does not match its hash: the file was changed or truncated"
        )
    try:
        payload = torch.load(io.BytesIO(body), weights_only=True)
        model_config = ModelConfig(**payload["model_config"])
        task_config = TaskConfig.from_dict(payload["task_config"])
    except Exception as e:  # a valid hash over a payload we cannot parse: wrong version
        first = next((line for line in str(e).splitlines() if line.strip()), type(e).__name__)
        raise CheckpointError(f"checkpoint {str(path)!r} cannot be decoded: {first}") from None
    vocab = tuple(payload["vocab"])
    if vocab != task_config.vocab.tokens:
        raise CheckpointError(
            f"checkpoint {str(path)!r} was saved with a vocabulary this version does not rebuild"
        )
    return Checkpoint(
        model_config,
        task_config,
        payload["train_config"],
        vocab,
        payload["state_dict"],
        payload["metrics"],
    )
