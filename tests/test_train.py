import numpy as np
import pytest
import torch

from threshold import ConfigError
from threshold.tasks import TaskConfig, load_task_data
from threshold.train import (
    TrainConfig,
    evaluate_teacher_forced,
    model_config_for,
    train,
)

TINY = dict(n_train=3000, n_test=300, n_val=100)


@pytest.fixture(scope="module")
def max5(tmp_path_factory):
    return load_task_data(TaskConfig(ops=("max",), n=5, **TINY), tmp_path_factory.mktemp("c"))


@pytest.fixture(scope="module")
def add5(tmp_path_factory):
    """Depth 1 (9-token sequences), for runs that are compared or stuck, not asked to learn:
    an untrained model decodes to the end of its context, 9 tokens against depth 2's 60."""
    task = TaskConfig(ops=("add",), n=5, depth=1, **TINY)
    return load_task_data(task, tmp_path_factory.mktemp("c"))


@pytest.fixture(scope="module")
def learned_max(max5):
    """A tiny run that must really learn MAX mod 5 (about 7 s on one core)."""
    cfg = TrainConfig(max_steps=400, eval_every=100, lr=1e-2, warmup_steps=50, learned_acc=1.01)
    return train(model_config_for(max5.config, 32), max5, cfg)


def test_tiny_run_learns_max(max5, learned_max):
    chance = np.bincount(max5.test["max"].answers).max() / len(max5.test["max"])
    assert chance < 0.6
    assert learned_max.accuracy["max"] >= 0.85
    assert learned_max.strict_accuracy["max"] >= 0.4
    assert learned_max.teacher_forced["max"] >= 0.9
    assert learned_max.stop_reason == "max_steps"
    assert learned_max.steps == 400


def test_untrained_model_is_near_chance(max5):
    cfg = TrainConfig(max_steps=1, eval_every=1, lr=1e-9, warmup_steps=0)
    result = train(model_config_for(max5.config, 32), max5, cfg)
    assert result.accuracy["max"] < 0.6


def test_learned_rule_stops_early(max5):
    cfg = TrainConfig(
        max_steps=2000, eval_every=50, lr=1e-2, warmup_steps=50, learned_tf=0.9, learned_acc=0.9
    )
    result = train(model_config_for(max5.config, 32), max5, cfg)
    assert result.stop_reason == "learned"
    assert result.steps < 2000
    assert result.history[-1]["val_greedy"]["max"] >= 0.9


def test_stuck_rule_stops_a_run_that_cannot_move(add5):
    cfg = TrainConfig(max_steps=200, eval_every=10, lr=1e-9, warmup_steps=0)
    result = train(model_config_for(add5.config, 8), add5, cfg)
    assert result.stop_reason == "stuck"
    assert cfg.stuck_after * cfg.max_steps <= result.steps < 200


def test_stuck_rule_does_not_fire_on_a_learning_run(learned_max):
    assert learned_max.stop_reason != "stuck"


def test_same_seed_same_metrics_and_weights(add5):
    cfg = TrainConfig(max_steps=60, eval_every=30, seed=3)
    a = train(model_config_for(add5.config, 8), add5, cfg)
    b = train(model_config_for(add5.config, 8), add5, cfg)
    assert a.accuracy == b.accuracy and a.history == b.history
    for (name, p), q in zip(
        a.model.state_dict().items(), b.model.state_dict().values(), strict=True
    ):
        assert torch.equal(p, q), name
    c = train(
        model_config_for(add5.config, 8), add5, TrainConfig(max_steps=60, eval_every=30, seed=4)
    )
    assert c.history != a.history


def test_training_does_not_touch_global_rng(max5):
    torch.manual_seed(123)
    before = torch.rand(3)
    torch.manual_seed(123)
    train(model_config_for(max5.config, 8), max5, TrainConfig(max_steps=2, eval_every=2))
    assert torch.equal(torch.rand(3), before)


def test_teacher_forced_accuracy_of_learned_model(max5, learned_max):
    acc, loss = evaluate_teacher_forced(learned_max.model, max5.test["max"], max5.vocab.pad_id)
    assert acc == pytest.approx(learned_max.teacher_forced["max"])
    assert 0 <= loss < 1.0


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"max_steps": -1}, "max_steps -1"),
        ({"max_steps": 0}, "max_steps 0"),
        ({"batch_size": 0}, "batch_size 0"),
        ({"lr": 0.0}, "lr 0.0"),
        ({"loss_on": "prompt"}, "loss_on 'prompt'"),
        ({"warmup_steps": -2}, "warmup_steps -2"),
    ],
)
def test_bad_train_config(kwargs, match):
    with pytest.raises(ConfigError, match=match):
        TrainConfig(**kwargs)


def test_progress_reaches_the_last_step(max5):
    seen = []
    cfg = TrainConfig(max_steps=70, eval_every=30)
    result = train(
        model_config_for(max5.config, 8), max5, cfg, on_progress=seen.append, progress_every=20
    )
    assert [p.step for p in seen] == [20, 40, 60, 70]
    assert seen[-1].step == result.steps
    assert all(p.tokens_per_s > 0 and p.loss > 0 for p in seen)
    assert set(seen[-1].val_accuracy) == {"max"}
