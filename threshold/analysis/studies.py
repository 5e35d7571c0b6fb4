"""Analyses of a study's runs: pick the run, load its checkpoint, score it, draw it, store it.

The glue between the stored studies (through :mod:`threshold.search`, the only layer that touches
storage) and the array-level analyses: ``threshold analyze`` and ``threshold run`` both call these.
Figures and ``scores.json`` go to a folder; the summary of a trial's analysis is stored on its
study (:func:`threshold.search.results.save_analysis`).
"""

from __future__ import annotations

import json
from pathlib import Path

import optuna

from threshold.analysis.figures import ablation_figure, embedding_figure, layer_usage_figure
from threshold.analysis.inspect_model import analyze_model, summary
from threshold.analysis.layers import number_embeddings
from threshold.checkpoint import Checkpoint
from threshold.errors import ConfigError, ThresholdError
from threshold.model import param_count
from threshold.search.results import pick_trial, runs, save_analysis
from threshold.search.sampler import PARAM
from threshold.search.study import trial_checkpoint
from threshold.tasks import load_task_data

__all__ = ["analyze_checkpoint", "analyze_trial", "matched_pair"]


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
    study: optuna.Study,
    number: int,
    url: str | None,
    out_dir: Path,
    seed: int = 0,
    cache_dir: Path | None = None,
) -> dict:
    """Analyse one trial of a study; its summary is stored on the study."""
    ckpt = trial_checkpoint(study, number, url)
    name = f"{study.study_name} trial {number}"
    report = analyze_checkpoint(ckpt, name, out_dir, seed, cache_dir)
    report |= {"study": study.study_name, "trial": number}
    save_analysis(study, number, report["summary"])
    return report


def matched_pair(
    study_a: optuna.Study, study_b: optuna.Study, match: str, d_model: int | None = None
) -> tuple[int, int]:
    """Trials of two studies to compare: same d (``size``) or closest accuracy (``accuracy``)."""

    if match == "size":
        if d_model is None:
            common = {t.params[PARAM] for t in runs(study_a)} & {
                t.params[PARAM] for t in runs(study_b)
            }
            if not common:
                raise ThresholdError(
                    f"studies {study_a.study_name!r} and {study_b.study_name!r} share no size: "
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
