"""One trained model, every analysis: embedding structure, layer usage and ablation.

:func:`analyze_model` gathers the scores of :mod:`threshold.analysis.embedding` and
:mod:`threshold.analysis.layers` for a model and its task data into one JSON-ready dict;
:func:`~threshold.analysis.headline.summary` keeps the few numbers small enough to store beside
the trial.
"""

from __future__ import annotations

from threshold.analysis.embedding import embedding_scores
from threshold.analysis.layers import ablation, layer_usage, number_embeddings
from threshold.errors import ConfigError
from threshold.model import RecurrentTransformer
from threshold.tasks import TaskData

__all__ = ["analyze_model"]


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
