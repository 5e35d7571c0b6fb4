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
    data = load_task_data(TaskConfig(ops=("add",), n=10))
    result = train(model_config_for(data.config, 16), data, TrainConfig(max_steps=5000))
    assert result.accuracy["add"] < 0.5
