"""A run that keeps its training state continues an interruption as if it had never stopped."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from threshold.config import make_recipe, model_config_for
from threshold.tasks import TaskConfig, load_task_data
from threshold.train import Run, train_runs
from threshold.train.state import load_state

# Depth 1 (9-token sequences): the runs are compared bit for bit, not for what they learn.
TINY = dict(n=5, depth=1, n_train=3000, n_test=300, n_val=100)


@pytest.fixture(scope="module")
def max5(tmp_path_factory):
    return load_task_data(TaskConfig(ops=("max",), **TINY), tmp_path_factory.mktemp("c"))


def _run(data, recipe: str, d: int = 12, seed: int = 7, **train) -> Run:
    # the whole budget trained (paper never stops early; fast's 6-step warm-up at 60 steps learns
    # before its end), so that a continued run has steps left to continue
    extra = {"window": 32} if recipe == "paper" else {"early_stop": "never"}
    made = make_recipe(recipe, max_steps=60, decay_steps=60, **extra, **train)
    cfg = replace(made.train, eval_every=10, checkpoints=(0.25, 0.5, 1.0), seed=seed)
    return Run(model_config_for(data.config, d, cfg, **made.model_kwargs), data, cfg)


def _interrupt_at(step: int):
    def progress(_, p) -> None:
        if p.step == step:
            raise KeyboardInterrupt

    return progress


@pytest.mark.parametrize("recipe", ["fast", "paper"])
def test_an_interrupted_run_continues_bit_for_bit(max5, tmp_path, recipe):
    """Stopped at step 40 (its state saved every step), then started again beside a new run:
    weights, every accuracy, history and budget equal those of the run that never stopped."""
    run = _run(max5, recipe)
    straight = train_runs([run])[0]
    kept = replace(run, state=tmp_path / "run.state")
    with pytest.raises(KeyboardInterrupt):
        train_runs([kept], on_progress=_interrupt_at(40), progress_every=10, save_every_s=0)
    saved = load_state(kept.state, kept.state_key())
    assert saved is not None and saved.step == 39  # the step before the interrupted one

    other = _run(max5, recipe, d=8, seed=3)  # a fresh run in the same call: step 0 beside 39
    said = []
    resumed = train_runs([other, kept], on_progress=lambda i, p: said.append((i, p)))[1]
    assert [(i, p.step) for i, p in said if p.resumed] == [(1, 39)]  # once, before its steps
    assert said.index(next(s for s in said if s[1].resumed)) == 0
    a, b = straight.model.state_dict(), resumed.model.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
    for field in ("accuracy", "strict_accuracy", "sampled_accuracy", "teacher_forced", "budget"):
        assert getattr(straight, field) == getattr(resumed, field), field
    assert straight.history == resumed.history
    assert resumed.steps == straight.steps == 60 and resumed.tokens == straight.tokens
    assert resumed.wall_s > resumed.train_s > 0
    assert resumed.cpu_s > saved.cpu_s > 0  # the CPU before the stop is counted once, kept
    assert not kept.state.exists()  # handed on: the state is spent


def test_a_state_saved_without_cpu_seconds_continues_with_them_unknown(max5, tmp_path):
    """A state written before runs kept their CPU seconds still continues; the run's CPU is
    then unknown (None), not the part after the restart passed off as the whole."""
    kept = replace(_run(max5, "fast"), state=tmp_path / "run.state")
    with pytest.raises(KeyboardInterrupt):
        train_runs([kept], on_progress=_interrupt_at(40), progress_every=10, save_every_s=0)
    old = torch.load(kept.state, weights_only=True)
    del old["cpu_s"]
    torch.save(old, kept.state)
    resumed = train_runs([kept])[0]
    assert resumed.steps == 60 and resumed.cpu_s is None and resumed.metrics()["cpu_s"] is None


def test_a_state_for_other_settings_is_set_aside(max5, tmp_path):
    """A state written by another recipe is not continued: it is kept as *.stale and the run
    starts from step 0, ending as the same run without any state."""
    path = tmp_path / "run.state"
    first = replace(_run(max5, "fast"), state=path)
    with pytest.raises(KeyboardInterrupt):
        train_runs([first], on_progress=_interrupt_at(20), progress_every=10, save_every_s=0)
    other = _run(max5, "fast", lr=2e-3)
    fresh = train_runs([replace(other, state=path)])[0]
    assert path.with_name("run.state.stale").exists() and not path.exists()
    assert fresh.history == train_runs([other])[0].history


def test_a_torn_state_file_is_set_aside(max5, tmp_path):
    path = tmp_path / "run.state"
    path.write_bytes(b"not a state")
    run = _run(max5, "fast")
    assert load_state(path, run.state_key()) is None
    assert path.with_name("run.state.stale").read_bytes() == b"not a state"
