"""Analyses of a study's runs: pick the run, load its checkpoint, score it, draw it, store it.

The glue between the stored studies (through :mod:`threshold.search`, the only layer that touches
storage) and the array-level analyses: ``threshold analyze`` and ``threshold run`` both call these.
Figures and ``scores.json`` go to a folder; the summary of a trial's analysis is stored on its
study (:func:`threshold.search.results.save_analysis`). :func:`survey` scores every learned run of
a study instead of one, and stores nothing: one run can be an accident, a study's runs are a sample.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np

from threshold.analysis.embedding import embedding_scores
from threshold.analysis.figures import ablation_figure, embedding_figure, layer_usage_figure
from threshold.analysis.headline import embedding_headline, summary
from threshold.analysis.inspect_model import analyze_model
from threshold.analysis.layers import layer_usage, number_embeddings
from threshold.errors import ConfigError, ThresholdError
from threshold.model import param_count
from threshold.search.artifacts import load_checkpoint
from threshold.search.record import RunRecord, StudyView
from threshold.search.results import pick_trial, runs, save_analysis
from threshold.tasks import load_task_data
from threshold.train.checkpoint import Checkpoint

__all__ = [
    "SURVEY_FORMAT",
    "analyze_checkpoint",
    "analyze_trial",
    "matched_pair",
    "survey",
    "survey_trials",
]

SURVEY_FORMAT = "threshold-survey/1"  # changes when a survey's scores do: older files are redone


def analyze_checkpoint(
    ckpt: Checkpoint, name: str, out_dir: Path, seed: int = 0, cache_dir: Path | None = None
) -> dict:
    """Scores of one checkpoint, with its figures and ``scores.json`` written under ``out_dir``."""
    model = ckpt.build_model()
    data = load_task_data(ckpt.task_config, cache_dir)
    scores = analyze_model(model, data, seed=seed)
    d = ckpt.model_config.d_model
    title = f"{name} (d={d})"
    vocab = data.vocab
    labels = list(vocab.tokens[vocab.value_offset : vocab.value_offset + vocab.n_values])
    out_dir.mkdir(parents=True, exist_ok=True)
    figures = [
        embedding_figure(number_embeddings(model, vocab), labels, title, out_dir / "embedding.png"),
        layer_usage_figure(scores["layer_usage"], title, out_dir / "layer_usage.png"),
        ablation_figure(scores["ablation"], title, out_dir / "ablation.png"),
    ]
    accuracy = ckpt.metrics.get("accuracy", {})
    report = {
        "name": name,
        "tasks": list(ckpt.task_config.ops),
        "d_model": d,
        "params_total": param_count(ckpt.model_config)["total"],
        "accuracy": accuracy,
        **scores,
        "figures": [str(p) for p in figures],
    }
    report["summary"] = summary(scores) | {
        "d_model": d,
        "accuracy": accuracy.get(scores["measure"]),
    }
    (out_dir / "scores.json").write_text(json.dumps(report, indent=1))
    return report


def analyze_trial(
    study: StudyView,
    number: int,
    url: str | None,
    out_dir: Path,
    seed: int = 0,
    cache_dir: Path | None = None,
) -> dict:
    """Analyse one trial of a study; its summary is stored on the study."""
    ckpt = load_checkpoint(study, number, url)
    name = f"{study.name} trial {number}"
    report = analyze_checkpoint(ckpt, name, out_dir, seed, cache_dir)
    report |= {"study": study.name, "trial": number}
    save_analysis(study, number, report["summary"])
    return report


def matched_pair(
    study_a: StudyView, study_b: StudyView, match: str, d_model: int | None = None
) -> tuple[int, int]:
    """Trials of two studies to compare: same d (``size``) or closest accuracy (``accuracy``)."""

    if match == "size":
        if d_model is None:
            common = {r.d_model for r in runs(study_a)} & {r.d_model for r in runs(study_b)}
            if not common:
                raise ThresholdError(
                    f"studies {study_a.name!r} and {study_b.name!r} share no size: "
                    "use --match accuracy"
                )
            d_model = max(common)
        return pick_trial(study_a, d_model=d_model), pick_trial(study_b, d_model=d_model)
    if match != "accuracy":
        raise ConfigError(f"--match {match!r} is not allowed: use size or accuracy")
    runs_a, runs_b = runs(study_a), runs(study_b)
    if not runs_a or not runs_b:
        raise ThresholdError("both studies need completed runs with checkpoints to compare")
    best_a, best_b = max(t.value for t in runs_a), max(t.value for t in runs_b)
    pairs = [
        (a, b)
        for a in runs_a
        for b in runs_b
        if a.value >= 0.8 * best_a and b.value >= 0.8 * best_b
    ]
    a, b = min(pairs, key=lambda p: (abs(p[0].value - p[1].value), -min(p[0].value, p[1].value)))
    return a.number, b.number


def survey(
    study: StudyView,
    url: str | None,
    min_accuracy: float = 0.7,
    seed: int = 0,
    cache_dir: Path | None = None,
    on_run: Callable[[int, int], None] | None = None,
) -> dict:
    """Embedding scores and attention share of every completed run of ``study`` whose measured
    accuracy is at least ``min_accuracy``, with medians and counts; nothing is stored.

    Each run's scores are :func:`~threshold.analysis.embedding.embedding_scores` (ratios to the
    null's 95th percentile for separation, the values for ordering and cyclic order) and the
    attention share of the residual updates on 500 test sequences of the measured op (no
    ablation, no figures: seconds a run). ``on_run(done, total)`` follows the progress.
    """
    chosen = survey_trials(study, min_accuracy)
    rows, data = [], None
    for i, t in enumerate(chosen):
        ckpt = load_checkpoint(study, t.number, url)
        task = ckpt.task_config
        data = data if data is not None and data.config == task else load_task_data(task, cache_dir)
        model = ckpt.build_model()
        emb = embedding_scores(number_embeddings(model, data.vocab), task.testbed, task.n, seed)
        usage = layer_usage(model, data.test[task.measured_op], data.vocab.pad_id, seed=seed,
                            max_sequences=500)  # fmt: skip
        rows.append(
            {
                "trial": t.number,
                "d_model": t.d_model,
                "accuracy": t.value,
                **embedding_headline(emb),
                "attn_share": usage["attn_share_all"],
            }
        )
        if on_run is not None:
            on_run(i + 1, len(chosen))
    return {
        "format": SURVEY_FORMAT,
        "study": study.name,
        "min_accuracy": min_accuracy,
        "runs": rows,
        "summary": _survey_summary(rows),
    }


def survey_trials(study: StudyView, min_accuracy: float) -> list[RunRecord]:
    """The runs a survey scores: completed, measured accuracy at least ``min_accuracy``."""
    if not 0.0 <= min_accuracy <= 1.0:
        raise ConfigError(f"--min-accuracy {min_accuracy} is not allowed: use 0 to 1")
    return [t for t in runs(study) if t.value >= min_accuracy]


def _survey_summary(rows: list[dict]) -> dict:
    """Median and range of each score, and how many runs lie beyond their null's 95th percentile."""

    def spread(key: str) -> dict | None:
        values = [r[key] for r in rows if r[key] is not None]
        if not values:
            return None
        return {"median": float(np.median(values)), "min": min(values), "max": max(values)}

    def beyond(values: list) -> int:
        return sum(1 for v in values if v is not None and v > 1)

    labels = rows[0]["separation"] if rows else {}
    return {
        "n_runs": len(rows),
        **{key: spread(key) for key in ("ordering", "cyclic", "attn_share")},
        "beyond_null": {
            "ordering": beyond([r["ordering_vs_p95"] for r in rows]),
            "cyclic": beyond([r["cyclic_vs_p95"] for r in rows]),
            **{f"separation {k}": beyond([r["separation"][k] for r in rows]) for k in labels},
        },
        "cyclic_frequencies": sorted(
            r["cyclic_frequency"] for r in rows if r["cyclic_frequency"] is not None
        ),
    }
