"""Analyses of trained models and tasks: arrays in, arrays out; nothing here prints.

A package face only: it re-exports nothing but the folder analyses are kept in (``ANALYSIS_DIR``)
and a trial's folder in it (``analysis_folder``), so reading a stored analysis's headline numbers
(:mod:`~.headline`, plain dicts: the report does) loads neither torch nor scikit-learn. Import from
the modules: :mod:`~.embedding` (``embedding_scores``, ``pca``, ``separation``, ...),
:mod:`~.complexity` (``complexity``, ``compressed_size``, the solvers' sources), :mod:`~.layers`
(layer usage, ablation), :mod:`~.inspect_model` (``analyze_model``: every analysis of one model),
:mod:`~.headline` (what is stored beside a trial), :mod:`~.studies` (a study's runs analysed and
stored), :mod:`~.transfer` and :mod:`~.figures`.
"""

import re
from pathlib import Path

__all__ = ["ANALYSIS_DIR", "analysis_folder", "folder_name"]

ANALYSIS_DIR = Path("studies/analysis")  # where `threshold analyze` writes and the report reads


def folder_name(study: str, trial: int) -> str:
    """``<study>-trial<N>``, the study's path separators made dashes and its leading dots
    dropped: a name such as ``../../etc/passwd`` is one folder inside its parent, never a path
    out of it (a plain name, ``listops10-max+add-add-fast-1a2b3c4d``, is kept as it is)."""
    safe = re.sub(r"[/\\\x00]", "-", study).lstrip(".") or "study"
    return f"{safe}-trial{trial}"


def analysis_folder(study: str, trial: int, base: Path = ANALYSIS_DIR) -> Path:
    """Where the analysis of trial ``trial`` of ``study`` is written and read: in ``base``."""
    return Path(base) / folder_name(study, trial)
