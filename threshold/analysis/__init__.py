"""Analyses of trained models and tasks: arrays in, arrays out; nothing here prints."""

from threshold.analysis.complexity import (
    COMPRESSORS,
    complexity,
    compressed_size,
    evaluator_source,
    program_source,
    solver_source,
)
from threshold.analysis.embedding import (
    PCAResult,
    Score,
    cosine_similarity,
    cyclic,
    embedding_scores,
    listops_labelings,
    ordering,
    pca,
    perm_labelings,
    separation,
)

__all__ = [
    "COMPRESSORS",
    "PCAResult",
    "Score",
    "complexity",
    "compressed_size",
    "cosine_similarity",
    "cyclic",
    "embedding_scores",
    "evaluator_source",
    "listops_labelings",
    "ordering",
    "pca",
    "perm_labelings",
    "program_source",
    "separation",
    "solver_source",
]
