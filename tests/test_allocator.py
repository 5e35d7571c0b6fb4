"""The C allocator keeps freed memory: arrays of a decision's sizes, made and dropped again,
touch pages the process already holds (threshold/allocator.py)."""

from __future__ import annotations

import subprocess
import sys

import pytest

# Arrays of 1-32 MB made and dropped as a decision makes them, twice; the page faults of the
# second round, in a fresh interpreter (this one has the setting from conftest.py).
_ROUNDS = """
import resource, sys
import numpy as np
from threshold.allocator import keep_freed_memory
if sys.argv[1] == "keep" and not keep_freed_memory():
    sys.exit("keep_freed_memory() could not set the thresholds")
rng = np.random.default_rng(0)
sizes = rng.integers(2**17, 2**22, 40)
def round_():
    for n in sizes:
        a = np.ones(n); b = a * 2.0; c = np.exp(b[: n // 2]); del a, b, c
round_()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
round_()
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def _second_round_faults(mode: str) -> int:
    done = subprocess.run(
        [sys.executable, "-c", _ROUNDS, mode], capture_output=True, text=True, check=True
    )
    return int(done.stdout)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt: Linux only")
def test_freed_arrays_are_kept_for_the_next_ones():
    default, kept = _second_round_faults("default"), _second_round_faults("keep")
    # 40 arrays of 8 MB on average, each new to the process by default: thousands of faults
    assert default > 5_000
    assert kept < default / 10
