"""The smallest hidden width of a scikit-learn MLP that learns the digits, and whether a second
task learned beside it (the digit's parity) makes that width smaller.

Copy this file and change ``digits`` to train your own model: a function of (size, seed) that
returns the test accuracy (or a dict with ``accuracy`` and any metrics to record). Run it from
the checkout::

    python examples/digits.py

Each study is kept in the storage (``$THRESHOLD_STORAGE``, else ``studies/threshold.db``), so
the same command again resumes it, and ``threshold status``, ``threshold report`` and
``threshold dashboard`` show it. scikit-learn's bundled digits (1,797 8x8 images, ten classes):
nothing is downloaded.
"""

from __future__ import annotations

import warnings

import numpy as np
from sklearn.datasets import load_digits
from sklearn.exceptions import ConvergenceWarning
from sklearn.model_selection import train_test_split
from sklearn.neural_network import MLPClassifier

import threshold

SIZES = "1..64"  # hidden widths allowed
CHANCE = 0.1  # ten balanced classes: a model that learns nothing is right one time in ten
X, Y = load_digits(return_X_y=True)
# One split for every run (its own seed): a run's seed changes the model, not the test set.
X_TRAIN, X_TEST, Y_TRAIN, Y_TEST = train_test_split(
    X / 16.0, Y, test_size=0.3, random_state=0, stratify=Y
)


def _fit(width: int, seed: int, targets: np.ndarray) -> MLPClassifier:
    model = MLPClassifier(hidden_layer_sizes=(width,), max_iter=200, random_state=seed)
    with warnings.catch_warnings():  # small widths stop at max_iter, unconverged: that is fine
        warnings.simplefilter("ignore", ConvergenceWarning)
        return model.fit(X_TRAIN, targets)


def digits(width: int, seed: int) -> dict:
    """The digits alone: test accuracy of an MLP with one hidden layer of ``width`` units."""
    model = _fit(width, seed, Y_TRAIN)
    return {"accuracy": model.score(X_TEST, Y_TEST), "iterations": model.n_iter_}


def digits_with_parity(width: int, seed: int) -> dict:
    """The digits with a second task: the same MLP also answers the digit's parity (one more
    output, trained together); the accuracy measured is the digits' alone."""
    both = np.column_stack([np.eye(10)[Y_TRAIN], Y_TRAIN % 2])  # (N, 11) multi-label targets
    model = _fit(width, seed, both)
    scores = model.predict_proba(X_TEST)  # (N, 11)
    parity = ((scores[:, 10] > 0.5) == (Y_TEST % 2)).mean()
    return {"accuracy": (scores[:, :10].argmax(1) == Y_TEST).mean(), "parity": parity}


def params_alone(width: int) -> int:
    return 64 * width + width + 10 * width + 10  # weights and biases, 64 -> width -> 10


def params_with_parity(width: int) -> int:
    return 64 * width + width + 11 * width + 11  # one output more


if __name__ == "__main__":
    found = {}
    for name, objective, params in [
        ("digits alone", digits, params_alone),
        ("digits with parity", digits_with_parity, params_with_parity),
    ]:
        answer = threshold.find_transition(
            objective,
            SIZES,
            params=params,
            chance=CHANCE,
            budget=24,
            size_name="hidden width",
        )
        found[name] = answer
        print(f"{name}: {answer['answer']} ({answer['n_runs']} runs, study {answer['study']})")
    alone, both = found["digits alone"], found["digits with parity"]
    print(f"a second task changes the width by {both['d_p80'] / alone['d_p80']:.2f}x")
