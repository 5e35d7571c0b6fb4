"""Real-size runs, minutes each: `python -m pytest -m slow`."""

import pytest

from threshold.tasks import TaskConfig, load_task_data
from threshold.train import TrainConfig, model_config_for, train

pytestmark = pytest.mark.slow


def test_max_mod_10_at_d32_is_learned():
    data = load_task_data(TaskConfig(ops=("max",), n=10))
    result = train(model_config_for(data.config, 32), data, TrainConfig())
    assert result.accuracy["max"] >= 0.95
    assert result.stop_reason == "learned"


def test_add_is_harder_than_max_at_the_same_size():
    """At the same size (d 16), budget (5,000 steps) and seed, MAX is learned and ADD is not: the
    claim needs both runs (issue 62: MAX was never trained, so a trainer that learned nothing
    passed). On the CPU: MAX 0.96, ADD 0.061 (stopped as stuck at step 2,500)."""

    def trained(op: str) -> float:
        data = load_task_data(TaskConfig(ops=(op,), n=10))
        result = train(model_config_for(data.config, 16), data, TrainConfig(max_steps=5000))
        return result.accuracy[op]

    assert trained("max") >= 0.9  # first: a trainer that learns nothing fails here
    assert trained("add") < 0.5
