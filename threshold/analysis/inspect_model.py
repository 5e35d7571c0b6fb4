"""One trained model, every analysis: embedding structure, layer usage and ablation.

:func:`analyze_model` gathers the scores of :mod:`threshold.analysis.embedding` and
:mod:`threshold.analysis.layers` for a model and its task data into one JSON-ready dict;
:func:`summary` keeps the few numbers small enough to store beside the trial.
"""

from __future__ import annotations

from threshold.analysis.embedding import embedding_scores
from threshold.analysis.layers import ablation, layer_usage, number_embeddings
from threshold.errors import ConfigError
from threshold.model import RecurrentTransformer
from threshold.tasks import TaskData

__all__ = ["analyze_model", "embedding_headline", "summary"]


def analyze_model(
    model: RecurrentTransformer,
    data: TaskData,
    seed: int = 0,
    n_null: int = 1000,
    max_sequences: int = 500,
) -> dict:
    """Embedding scores, layer usage and ablation of ``model`` on the measured op's test set."""
    task = data.config
    if model.cfg.vocab_size != len(data.vocab):
        raise ConfigError(
            f"the model has {model.cfg.vocab_size} tokens but {task.testbed} {task.n} has "
            f"{len(data.vocab)}: analyse it with the task it was trained on"
        )
    measure = task.measured_op
    test = data.test[measure]
    emb = number_embeddings(model, data.vocab)  # (N, D)
    return {
        "measure": measure,
        "embedding": embedding_scores(emb, task.testbed, task.n, seed=seed, n_null=n_null),
        "layer_usage": layer_usage(model, test, data.vocab.pad_id, max_sequences=max_sequences),
        "ablation": ablation(model, test, data.vocab.eos_id, max_sequences=max_sequences),
    }


def embedding_headline(emb: dict) -> dict:
    """The few numbers of :func:`~threshold.analysis.embedding.embedding_scores` that tables show:
    separation ratios to the null's 95th percentile, ordering and cyclic order (value, ratio to
    the null's 95th percentile) and the cyclic frequency; None where a score is absent (ordering
    and cyclic order for perm, cyclic order in analyses older than the score)."""
    ordering, cyclic = emb["ordering"] or {}, emb.get("cyclic") or {}
    return {
        "separation": {k: v["vs_p95"] for k, v in emb["separation"].items()},
        "ordering": ordering.get("value"),
        "ordering_vs_p95": ordering.get("vs_p95"),
        "cyclic": cyclic.get("value"),
        "cyclic_vs_p95": cyclic.get("vs_p95"),
        "cyclic_frequency": cyclic.get("frequency"),
    }


def summary(scores: dict) -> dict:
    """The headline numbers stored with an analysis: :func:`embedding_headline` (separation and
    ordering to 3 decimals, no ordering ratio), attention share and ablation."""
    head = embedding_headline(scores["embedding"])
    out = {
        "separation": {k: round(v, 3) for k, v in head["separation"].items()},
        "ordering": None if head["ordering"] is None else round(head["ordering"], 3),
        "cyclic": head["cyclic"],
        "cyclic_vs_p95": head["cyclic_vs_p95"],
        "cyclic_frequency": head["cyclic_frequency"],
        "attn_share": round(scores["layer_usage"]["attn_share_all"], 3),
        "ablation": {
            "intact": scores["ablation"]["intact"],
            "attn": scores["ablation"]["attn"]["all"],
            "mlp": scores["ablation"]["mlp"]["all"],
        },
    }
    return out
