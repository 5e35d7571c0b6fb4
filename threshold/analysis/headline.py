"""The headline numbers of a trained model's analysis: what is stored beside its trial.

:func:`summary` keeps the few numbers of :func:`threshold.analysis.inspect_model.analyze_model`'s
scores small enough to store with the trial (:func:`threshold.search.record.write_analysis`);
:func:`embedding_headline` the few that tables show. Plain dicts in and out, no imports: the
report reads an analysis's ``scores.json`` with them without loading the rest of the analysis
layer (torch, scikit-learn), which the package's face, re-exporting nothing, leaves unloaded.
"""

from __future__ import annotations

__all__ = ["embedding_headline", "summary"]


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
