"""Stream windows (the paper recipe's batches): random windows of the concatenated training stream,
drawn from the run's seed, alike in single and batched runs; the model's context covers them."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch
from numpy.lib.stride_tricks import sliding_window_view

from threshold import ConfigError
from threshold.config import TrainConfig, make_recipe, param_count
from threshold.search.sampler import policy_settings
from threshold.search.spec import StudySettings
from threshold.tasks import TaskConfig, load_task_data
from threshold.train import (
    Run,
    init_model,
    majority_rate,
    model_config_for,
    train,
    train_batches,
    train_runs,
)
from threshold.train.batches import drawn_spans, token_stream, window_batches
from threshold.train.layout import lay_out

TINY = dict(n_train=3000, n_test=300, n_val=100)
WINDOWS = dict(batches="windows", loss_on="all", window=48, batch_size=32)


@pytest.fixture(scope="module")
def max5(tmp_path_factory):
    return load_task_data(TaskConfig(ops=("max",), n=5, **TINY), tmp_path_factory.mktemp("c"))


def test_the_stream_is_the_training_sequences_end_to_end(max5):
    seqs = max5.train
    stream = token_stream(seqs.tokens, seqs.offsets)
    assert np.array_equal(stream, np.concatenate([seqs[i] for i in range(len(seqs))]))
    ends = seqs.offsets[1:] - 1  # each sequence's last token
    assert (stream[ends] == max5.vocab.eos_id).all()
    assert (stream == max5.vocab.eos_id).sum() == len(seqs)  # no separator, no padding


def test_windows_are_slices_of_the_stream_and_follow_the_seed(max5):
    cfg = TrainConfig(**WINDOWS, seed=7)
    batches, repeat = train_batches(max5.train, cfg), train_batches(max5.train, cfg)
    first = [next(batches) for _ in range(3)]
    again = [next(repeat) for _ in range(3)]
    other = next(train_batches(max5.train, replace(cfg, seed=8)))
    assert all(np.array_equal(a, b) for a, b in zip(first, again, strict=True))
    assert not np.array_equal(first[0], other) and not np.array_equal(first[0], first[1])
    assert first[0].shape == (32,) and first[0].dtype == np.int64  # the windows' starts
    stream = token_stream(max5.train.tokens, max5.train.offsets)
    windows = stream[first[0][:, None] + np.arange(49)]  # (32, 49)
    view = sliding_window_view(stream, 49)  # (N - 48, 49): every window of the stream
    assert all((view == row).all(1).any() for row in windows)
    # laid out on the device: inputs and targets the window shifted by one, all in the loss
    on_device = torch.from_numpy(stream.astype(np.int32))
    spans = torch.from_numpy(drawn_spans(max5.train, first[0], cfg))[:, None]  # (3, 1, 32)
    x, y, rows = lay_out(on_device, spans, 32 * 48, 48, dense=True)
    assert np.array_equal(x.view(32, 48).numpy(), windows[:, :-1])
    assert np.array_equal(y.view(32, 48).numpy(), windows[:, 1:])
    # beside longer rows and rounded up, the same tokens, the rest out of the loss
    x, y, rows = lay_out(on_device, spans, 32 * 48 + 10, 60, dense=False)
    assert np.array_equal(x[0, 0, :1536].numpy(), windows[:, :-1].ravel())
    assert bool((y[0, 0, 1536:] == -100).all()) and bool((y[0, 0, :1536] >= 0).all())
    assert rows.to_rows(y[..., None].float()).shape == (1, 32, 60, 1)
    with pytest.raises(ConfigError, match="window 100 does not fit"):
        next(window_batches(stream[:100], 100, 4, 0))


def _close(a: torch.nn.Module, b: torch.nn.Module, atol: float) -> None:
    mine = b.state_dict()
    for name, p in a.state_dict().items():
        assert torch.allclose(p, mine[name], atol=atol), (name, (p - mine[name]).abs().max())


def test_a_single_run_and_a_shared_pack_member_train_alike_on_windows(max5):
    """Two window runs and a whole-sequence run in one shared pack (one n_ctx: the window fits
    the task's longest sequence, as on a GPU), each against its own single run after 20 steps."""
    base = dict(max_steps=20, eval_every=20, lr=3e-3, warmup_steps=0, schedule="constant")
    cfgs = [
        TrainConfig(**base, **WINDOWS, seed=0),
        TrainConfig(**base, **WINDOWS, seed=1),
        TrainConfig(**base, loss_on="all", seed=2),  # whole sequences, padded beside windows
    ]
    model_cfgs = [model_config_for(max5.config, 16, c, qkv_bias=False) for c in cfgs]
    assert len(set(model_cfgs)) == 1  # one stack
    runs = [Run(m, max5, c) for m, c in zip(model_cfgs, cfgs, strict=True)]
    batched = train_runs(runs, share=True)
    for model_cfg, cfg, result in zip(model_cfgs, cfgs, batched, strict=True):
        single = train(model_cfg, max5, cfg)
        assert result.steps == single.steps == 20 and result.tokens == single.tokens
        _close(result.model, single.model, atol=1e-4)  # measured: 2.4e-7
        start = init_model(model_cfg, cfg.seed).state_dict()
        moved = max(float((p - start[k]).abs().max()) for k, p in single.model.state_dict().items())
        assert moved > 0.01  # 0.07: the 20 steps moved the weights far more than the tolerance
    assert batched[0].tokens == 20 * 32 * 48  # batch x window a step


def test_a_tiny_windows_run_learns_max(max5):
    cfg = TrainConfig(**WINDOWS, max_steps=500, lr=2e-2, warmup_steps=100, eval_every=100)
    result = train(model_config_for(max5.config, 32, cfg), max5, cfg)
    chance = majority_rate(max5.test["max"])  # 0.56 here
    assert result.accuracy["max"] > chance + 0.2, (result.accuracy, chance)  # measured 0.85
    assert result.tokens == 500 * 32 * 48


def test_the_context_covers_the_windows_wherever_a_model_is_sized(max5):
    settings = StudySettings.from_options(
        "max", mod=5, n_train=3000, n_test=300, steps=5, d_lo=4, d_hi=16, budget=4, recipe="paper"
    )
    task = settings.task
    assert task.max_len < 128 and settings.train.window == 128
    cfg = settings.model_config(8)
    assert cfg.n_ctx == 128 == settings.train.context(task.max_len)
    assert cfg == model_config_for(task, 8, settings.train, **dict(settings.model))
    table = dict(policy_settings(settings, 0.5).params_of_d)
    model = init_model(cfg, 0)
    assert table[8] == param_count(cfg)["total"] == model.num_params()["total"]
    run_cfg = replace(settings.train, max_steps=3, eval_every=3, batch_size=4)
    trained = train(cfg, max5, run_cfg).model
    assert trained.cfg == cfg and trained.num_params()["total"] == table[8]
    # a window shorter than the longest sequence leaves the context at the longest sequence
    short = replace(settings, train=replace(settings.train, window=16))
    assert short.model_config(8).n_ctx == task.max_len
    # transfer: the one model of both tasks gets the windows' context too
    transfer = StudySettings.from_options(
        "add", mod=5, steps=5, d_lo=4, d_hi=16, recipe="paper", pretrain="max"
    )
    assert transfer.model_config(8).n_ctx == 128
    # whole sequences (fast) keep the task's length, as before windows existed
    fast = StudySettings.from_options("max", mod=5, steps=5, d_lo=4, d_hi=16)
    assert fast.model_config(8).n_ctx == fast.task.max_len
    # a model too short for its windows is refused before training
    with pytest.raises(ConfigError, match="window 128 is longer than the model's context"):
        train(model_config_for(task, 8, **dict(settings.model)), max5, run_cfg)


def test_old_configs_read_as_whole_sequences():
    stored = TrainConfig().to_dict()
    assert "batches" not in stored and "window" not in stored  # fast studies keep their names
    assert TrainConfig.from_dict(stored).batches == "sequences"
    paper = make_recipe("paper").train
    assert (paper.batches, paper.window, paper.batch_size) == ("windows", 128, 64)
    assert TrainConfig.from_dict(paper.to_dict()) == paper
    assert make_recipe("paper", window=64).train.window == 64


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"window": 0}, "window 0 is not allowed: use 1 or more"),
        ({"batches": "rows"}, "batches 'rows' is not allowed: use sequences or windows"),
        ({"batches": "windows"}, "loss_on 'completion' is not allowed with batches 'windows'"),
    ],
)
def test_bad_window_settings_name_the_field(values, message):
    with pytest.raises(ConfigError) as err:
        TrainConfig(**values)
    assert message in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(ConfigError, match="window 0 is not allowed"):
        make_recipe("paper", window=0)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--batches", "rows"], "batches 'rows' is not allowed"),
        (["--recipe", "paper", "--window", "0"], "window 0 is not allowed"),
        (["--batches", "windows"], "loss_on 'completion' is not allowed with batches 'windows'"),
    ],
)
def test_bad_window_input_on_the_command_line(tmp_path, cli, args, message):
    result = cli(["find", "--tasks", "max", "--storage", f"sqlite:///{tmp_path}/s.db", *args])
    assert result.exit_code == 2, (result.stderr, result.exception)
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("error: ") and message in line
    assert not (tmp_path / "s.db").exists() and not (tmp_path / "cache").exists()
