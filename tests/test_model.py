import itertools

import pytest
import torch

from threshold import ConfigError
from threshold.model import ModelConfig, RecurrentTransformer, param_count


@pytest.mark.parametrize(
    ("d_model", "vocab_size", "n_ctx", "tie", "n_head", "mlp_ratio"),
    [
        (d, v, c, tie, h, m)
        for d, v, c, tie in itertools.product(
            (1, 3, 8, 32, 100), (5, 22, 300), (7, 60), (False, True)
        )
        for h, m in ((1, 4), (1, 2))
    ]
    + [(64, 22, 60, False, 4, 4), (48, 133, 200, True, 3, 4)],
)
def test_param_formula_matches_module(d_model, vocab_size, n_ctx, tie, n_head, mlp_ratio):
    cfg = ModelConfig(
        vocab_size, n_ctx, d_model, n_head=n_head, mlp_ratio=mlp_ratio, tie_embeddings=tie
    )
    model = RecurrentTransformer(cfg)
    assert param_count(cfg) == model.num_params()
    assert param_count(cfg)["total"] == sum(p.numel() for p in model.parameters())


@torch.no_grad()
def test_block_is_shared_across_recurrence_steps():
    """The recurrence reuses one block: a model of 8 steps has the parameters (names and count)
    of a model of 1, its block runs 8 times on each forward pass, and the same weights give
    another output (so the steps do run). The formula of the count is tested above."""
    torch.manual_seed(0)
    one = RecurrentTransformer(ModelConfig(22, 60, 32, n_recur=1)).eval()
    eight = RecurrentTransformer(ModelConfig(22, 60, 32, n_recur=8)).eval()
    assert [n for n, _ in one.named_parameters()] == [n for n, _ in eight.named_parameters()]
    total = sum(p.numel() for p in eight.parameters())
    assert total == sum(p.numel() for p in one.parameters()) == param_count(eight.cfg)["total"]
    eight.load_state_dict(one.state_dict())  # the same weights: nothing is left over
    calls = []
    eight.block.register_forward_hook(lambda module, args, out: calls.append(module))
    idx = torch.randint(0, 22, (2, 10))  # (B, T)
    out = eight(idx)  # (B, T, vocab)
    assert len(calls) == 8 and all(m is eight.block for m in calls)
    assert not torch.allclose(out, one(idx))


def test_param_count_grows_quadratically_in_d():
    counts = [param_count(ModelConfig(22, 60, d))["non_embedding"] for d in (16, 32, 64)]
    assert 3.5 < counts[1] / counts[0] < 4.1
    assert 3.5 < counts[2] / counts[1] < 4.1


def _model(seed=0, **kw):
    torch.manual_seed(seed)
    return RecurrentTransformer(ModelConfig(vocab_size=17, n_ctx=24, d_model=16, **kw)).eval()


@torch.no_grad()
def test_attention_is_causal():
    model = _model()
    idx = torch.randint(0, 17, (2, 12))
    changed = idx.clone()
    changed[:, 8:] = (changed[:, 8:] + 1) % 17
    torch.testing.assert_close(model(idx)[:, :8], model(changed)[:, :8])
    assert not torch.allclose(model(idx)[:, 8:], model(changed)[:, 8:])


def test_too_long_input_is_refused():
    model = _model()
    with pytest.raises(ValueError, match="n_ctx"):
        model(torch.zeros(1, 25, dtype=torch.long))


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"d_model": 0}, "d_model 0"),
        ({"d_model": -3}, "d_model -3"),
        ({"d_model": 10, "n_head": 3}, "not divisible"),
        ({"n_recur": 0}, "n_recur 0"),
    ],
)
def test_bad_model_config(kwargs, match):
    with pytest.raises(ConfigError, match=match):
        ModelConfig(vocab_size=22, n_ctx=60, **kwargs)


@pytest.mark.parametrize(
    "shape",
    [{"block": "parallel"}, {"activation": "relu"}, {"init_std": 0.02}],
)
def test_recipe_shapes_keep_the_parameter_count_and_differ_in_output(shape):
    base = ModelConfig(vocab_size=20, n_ctx=30, d_model=16)
    other = ModelConfig(vocab_size=20, n_ctx=30, d_model=16, **shape)
    torch.manual_seed(0)
    a = RecurrentTransformer(base)
    torch.manual_seed(0)
    b = RecurrentTransformer(other)
    assert param_count(other) == b.num_params() == a.num_params()
    x = torch.randint(0, 20, (2, 12))
    assert not torch.allclose(a(x), b(x))
    if "init_std" in shape:
        weights = torch.cat([p.flatten() for n, p in b.named_parameters() if p.dim() == 2])
        assert abs(weights.std().item() - 0.02) < 0.002


def test_parallel_block_reads_the_same_stream_twice():
    cfg = ModelConfig(vocab_size=20, n_ctx=30, d_model=8, block="parallel", n_recur=1)
    model = RecurrentTransformer(cfg)
    x = torch.randn(2, 5, 8)
    block = model.block
    expected = x + block.attn(block.ln_1(x)) + block.mlp(block.ln_2(x))
    assert torch.allclose(block(x), expected)


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        ({"block": "serial"}, "block 'serial'"),
        ({"activation": "tanh"}, "activation 'tanh'"),
        ({"init_std": 0.0}, "init_std 0.0"),
    ],
)
def test_bad_recipe_shape(kwargs, named):
    with pytest.raises(ConfigError, match=named):
        ModelConfig(vocab_size=20, n_ctx=30, d_model=8, **kwargs)
