"""A run's checkpoint, read back from the artifact store beside its study's storage.

Apart from :mod:`threshold.search.record` because reading a checkpoint loads torch
(:mod:`threshold.train.checkpoint`), which the record's readers (the process that follows a
search, the report, the suite's plan) do not need: analyses and tests import this module.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import optuna
from optuna.artifacts import download_artifact
from optuna.artifacts.exceptions import ArtifactNotFound

from threshold.errors import ThresholdError
from threshold.search.record import StudyView, read_study
from threshold.search.study import artifact_store
from threshold.train.checkpoint import Checkpoint
from threshold.train.checkpoint import load_checkpoint as read_checkpoint_file

__all__ = ["load_checkpoint", "trial_checkpoint"]


def load_checkpoint(view: StudyView, number: int, url: str | None = None) -> Checkpoint:
    """The checkpoint of run ``number`` of ``view``, from the artifact store beside ``url``."""
    artifact_id = view.run(number).checkpoint
    if artifact_id is None:
        raise ThresholdError(f"trial {number} of {view.name!r} has no checkpoint")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "model.ckpt"
        store = artifact_store(url)
        try:
            download_artifact(artifact_store=store, file_path=str(path), artifact_id=artifact_id)
        except ArtifactNotFound:
            raise ThresholdError(
                f"checkpoint {artifact_id} of trial {number} is not in the artifact store "
                f"{str(store._base_path)!r}: point $THRESHOLD_ARTIFACTS at the study's artifacts"
            ) from None
        return read_checkpoint_file(path)


def trial_checkpoint(study: optuna.Study, number: int, url: str | None = None) -> Checkpoint:
    """The checkpoint of trial ``number``, read from the artifact store beside ``url``."""
    return load_checkpoint(read_study(study, study.study_name), number, url)
