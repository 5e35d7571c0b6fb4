"""The examples in examples/ run as written: a newcomer copies them."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent
sys.path.insert(0, str(ROOT / "examples"))

import digits  # noqa: E402  (examples/ is not a package: its files are copied, not imported)


def test_the_digits_objectives_answer_an_accuracy():
    """One run of each objective: an accuracy in [0, 1] and its metrics; a wide MLP learns."""
    alone, both = digits.digits(16, 0), digits.digits_with_parity(16, 0)
    assert 0.9 <= alone["accuracy"] <= 1 and 0.9 <= both["accuracy"] <= 1
    assert 0.5 <= both["parity"] <= 1
    assert digits.params_alone(4) == 64 * 4 + 4 + 10 * 4 + 10


@pytest.mark.slow  # two studies of real scikit-learn fits: about a minute
def test_the_digits_example_locates_both_transitions_and_resumes(tmp_path):
    env = dict(os.environ, THRESHOLD_STORAGE=f"sqlite:///{tmp_path / 's.db'}")
    command = [sys.executable, str(ROOT / "examples" / "digits.py")]
    first = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
    lines = first.stdout.splitlines()
    assert lines[0].startswith("digits alone: 80% point") and "90% interval" in lines[0]
    assert lines[1].startswith("digits with parity: 80% point")
    again = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
    assert again.stdout == first.stdout  # resumed: the same studies, nothing run again
