"""The layers stay apart: tasks without torch, model and train without Optuna."""

import subprocess
import sys

import pytest


@pytest.mark.parametrize(
    ("module", "forbidden"),
    [
        ("threshold.tasks", ["torch", "optuna", "threshold.model", "threshold.train"]),
        ("threshold.model", ["optuna", "threshold.train", "threshold.cli"]),
        ("threshold.train", ["optuna", "threshold.cli", "rich", "typer"]),
        ("threshold.checkpoint", ["optuna", "threshold.cli"]),
        ("threshold.batches", ["torch", "optuna"]),
        ("threshold.batched", ["optuna", "threshold.search", "threshold.cli", "rich", "typer"]),
        ("threshold.memory", ["optuna", "threshold.search", "threshold.cli"]),
        ("threshold.device", ["optuna", "threshold.cli"]),
        ("threshold.search", ["torch", "optuna", "threshold.search.study", "rich"]),
        ("threshold.search.study", ["threshold.cli", "rich", "typer"]),
        ("threshold.search.worker", ["threshold.cli", "rich", "typer"]),
        ("threshold.pretrain", ["optuna", "threshold.search", "threshold.cli", "rich"]),
        # analysis may load rich indirectly (scikit-learn's progress callbacks use it)
        ("threshold.analysis", ["torch", "optuna", "threshold.search", "threshold.cli"]),
        ("threshold.analysis.layers", ["optuna", "threshold.search", "threshold.cli"]),
        ("threshold.analysis.transfer", ["optuna", "threshold.search", "threshold.cli"]),
        ("threshold.analysis.figures", ["torch", "optuna", "matplotlib.pyplot"]),
    ],
)
def test_layer_imports(module, forbidden):
    code = (
        f"import sys, {module}\n"
        f"bad = [m for m in {forbidden!r} if m in sys.modules]\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
