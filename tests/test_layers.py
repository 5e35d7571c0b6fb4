"""The layers stay apart: tasks without torch, model and train without Optuna, and report,
suite, analysis and cli reading studies through threshold.search alone."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

import threshold


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


UPPER = ("report", "suite", "analysis", "cli")  # read studies through threshold.search only
_OPTUNA_IMPORT = re.compile(r"^\s*(?:import|from)\s+optuna(?:[.\s,]|$)", re.MULTILINE)


def test_upper_layers_do_not_import_optuna():
    """No ``import optuna`` (nor ``from optuna...``) in report/, suite/, analysis/, cli/, at the
    top of a file or inside a function: they read :mod:`threshold.search.record` views."""
    root = Path(threshold.__file__).parent
    found = []
    for layer in UPPER:
        for path in sorted((root / layer).rglob("*.py")):
            text = path.read_text()
            for match in _OPTUNA_IMPORT.finditer(text):
                line = text.count("\n", 0, match.start()) + 1
                found.append(f"{path.relative_to(root.parent)}:{line}: {match.group().strip()}")
    assert not found, found


def test_upper_layers_hold_no_optuna_object():
    """Imported, no module of those layers holds Optuna (a module, a class or a function)."""
    code = (
        "import importlib, pkgutil, threshold\n"
        f"layers = {UPPER!r}\n"
        "bad = []\n"
        "for layer in layers:\n"
        "    pkg = importlib.import_module(f'threshold.{layer}')\n"
        "    names = [pkg.__name__] + [m.name for m in pkgutil.walk_packages(\n"
        "        pkg.__path__, pkg.__name__ + '.')]\n"
        "    for name in names:\n"
        "        module = importlib.import_module(name)\n"
        "        for key, value in vars(module).items():\n"
        "            owner = value.__name__ if isinstance(value, type(threshold)) else \\\n"
        "                getattr(value, '__module__', None) or ''\n"
        "            if owner.split('.')[0] == 'optuna':\n"
        "                bad.append(f'{name}.{key}')\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
