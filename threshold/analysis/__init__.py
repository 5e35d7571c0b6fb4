"""Analyses of trained models and tasks: arrays in, arrays out; nothing here prints.

A package face only: it re-exports nothing but the folder analyses are kept in
(``ANALYSIS_DIR``), so reading a stored analysis's headline numbers (:mod:`~.headline`, plain
dicts: the report does) loads neither torch nor scikit-learn. Import
from the modules: :mod:`~.embedding` (``embedding_scores``, ``pca``, ``separation``, ...),
:mod:`~.complexity` (``complexity``, ``compressed_size``, the solvers' sources), :mod:`~.layers`
(layer usage, ablation), :mod:`~.inspect_model` (``analyze_model``: every analysis of one
model), :mod:`~.headline` (what is stored beside a trial), :mod:`~.studies` (a study's runs
analysed and stored), :mod:`~.transfer` and :mod:`~.figures`.
"""

from pathlib import Path

__all__ = ["ANALYSIS_DIR"]

ANALYSIS_DIR = Path("studies/analysis")  # where `threshold analyze` writes and the report reads
