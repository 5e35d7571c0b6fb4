"""Synthetic objectives with a known transition, for the objective studies' tests: nothing is
trained, each answer is drawn from the run's seed. Importable by worker processes (the tests
put this folder on PYTHONPATH), as ``synthetic_objectives:bimodal``."""

import math
import os
from pathlib import Path

import numpy as np

CHANCE = 0.1
LEARNED = 0.95  # the asymptote: a seed that learns sits here


def _p_learn(size: int) -> float:
    """Chance a seed learns: a logistic in ln size, midpoint 30, slope 3 (what the posterior
    assumes: each seed at chance or learned)."""
    return 1.0 / (1.0 + math.exp(-3.0 * (math.log(size) - math.log(30))))


# The paper's 80% point, 0.8 x the asymptote: the size where 0.1 + 0.85 p reaches 0.76.
_P80 = (0.8 * LEARNED - CHANCE) / (LEARNED - CHANCE)
BIMODAL_SIZE80 = 30 * math.exp(math.log(_P80 / (1 - _P80)) / 3.0)
# A curve the posterior does not assume: every seed graded, the mean a straight ramp in ln size
# from chance at 8 to the asymptote at 64 (no logistic), each run off it by noise (sd 0.03).
RAMP_SIZE80 = 8 * 8**_P80


def bimodal(size: int, seed: int) -> float:
    rng = np.random.default_rng(seed)
    noise = rng.normal(0, 0.01)
    return float(np.clip((LEARNED if rng.random() < _p_learn(size) else CHANCE) + noise, 0, 1))


def ramp(size: int, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    t = min(max(math.log(size / 8) / math.log(8), 0.0), 1.0)
    acc = float(np.clip(CHANCE + (LEARNED - CHANCE) * t + rng.normal(0, 0.03), 0, 1))
    return {"accuracy": acc, "noise_free": CHANCE + (LEARNED - CHANCE) * t}


def stalling(size: int, seed: int) -> float:
    """:func:`bimodal`, but where ``$SYNTHETIC_STALL`` names a file, it is made and the run
    stalls until the file is gone (a test interrupts it there)."""
    flag = os.environ.get("SYNTHETIC_STALL")
    if flag and not Path(flag).exists() and not Path(flag + ".done").exists():
        Path(flag).touch()
        while Path(flag).exists():
            pass
    return bimodal(size, seed)
