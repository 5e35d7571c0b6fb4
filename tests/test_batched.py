"""The batched engine: each member computes, trains and decodes as its own model would."""

import numpy as np
import pytest
import torch

from threshold.batched import Member, StackedAdamW, ensemble_step, train_batched
from threshold.batched_eval import ensemble_greedy, ensemble_teacher_forced
from threshold.checkpoint import load_checkpoint, save_checkpoint
from threshold.ensemble import _LAYOUT, Ensemble, EnsembleCache, _slots
from threshold.errors import ConfigError
from threshold.memory import pack_bytes, plan_packs, plan_waves
from threshold.tasks import TaskConfig, load_task_data
from threshold.train import (
    TrainConfig,
    batch_tensors,
    evaluate_greedy,
    evaluate_teacher_forced,
    init_model,
    lr_factor,
    make_optimizer,
    model_config_for,
    train,
    train_batches,
    train_step,
)

TINY = dict(n=5, n_train=3000, n_test=300, n_val=100)
SIZES = [8, 12, 16, 5]  # mixed widths: the padded path, with a member that is not the widest


@pytest.fixture(scope="module")
def max5(tmp_path_factory):
    return load_task_data(TaskConfig(ops=("max",), **TINY), tmp_path_factory.mktemp("c"))


@pytest.fixture(scope="module")
def max_add5(tmp_path_factory):
    return load_task_data(TaskConfig(ops=("max", "add"), **TINY), tmp_path_factory.mktemp("c"))


# The paper recipe's model side (the group's code): parallel ReLU block, init 0.02, no q/k/v bias.
PAPER_BLOCK = {"block": "parallel", "activation": "relu", "init_std": 0.02, "qkv_bias": False}
# Its optimizer side: weight decay on every weight, exponential decay without warm-up.
PAPER_TRAIN = {"lr": 5e-4, "warmup_steps": 0, "decay_all": True, "weight_decay": 0.01,
               "schedule": "exponential", "decay_steps": 40, "min_lr_ratio": 0.04}  # fmt: skip


def _models(data, sizes, **shape):
    cfgs = [model_config_for(data.config, d, **shape) for d in sizes]
    return [init_model(cfg, seed) for seed, cfg in enumerate(cfgs)]


def _padding_is_zero(ens: Ensemble) -> bool:
    for name, p in ens.params.items():
        for i, d in enumerate(ens.d_models):
            rest = p[i].detach().clone()
            for where in _slots(_LAYOUT[name][2], d, ens.width, ens.cfg.mlp_ratio):
                rest[where] = 0
            if rest.abs().max() > 0:
                return False
    return True


@pytest.mark.parametrize(
    ("sizes", "shape"), [(SIZES, {}), ([16, 16, 16], {}), (SIZES, PAPER_BLOCK)]
)
def test_logits_at_init_equal_each_members_own(max5, sizes, shape):
    models = _models(max5, sizes, **shape)
    ens = Ensemble.from_models(models)
    x = torch.randint(0, len(max5.vocab), (len(sizes), 3, 20))
    with torch.no_grad():
        logits = ens(x)  # (M, B, T, V)
        for i, model in enumerate(models):
            assert torch.allclose(logits[i], model(x[i]), atol=1e-5)
        # decoding with the cache gives the same logits as the whole sequence
        cache = EnsembleCache.empty(ens, 3)
        parts = [ens(x[:, :, :12], cache)] + [ens(x[:, :, t : t + 1], cache) for t in range(12, 20)]
        assert torch.allclose(torch.cat(parts, 2), logits, atol=1e-5)
    for i, model in enumerate(models):
        mine = model.state_dict()
        for (name, p), q in zip(mine.items(), ens.member(i).state_dict().values(), strict=True):
            assert torch.equal(p, q), name


# The group code's block (parallel, ReLU, init 0.02) at its own learning rate (5e-4): at lr 1e-2
# its single and batched runs drifted apart by up to 1e-2 in the logits within 50 steps (measured;
# the drift depends on the thread count, so rounding differences get amplified, probably at ReLU's
# kink), this tool's block by 4e-6.
@pytest.mark.parametrize(
    ("shape", "train"), [({}, {"lr": 1e-2, "warmup_steps": 10}), (PAPER_BLOCK, PAPER_TRAIN)]
)
def test_fifty_steps_on_the_same_batches_give_the_same_weights(max5, shape, train):
    weights_atol = logits_atol = 1e-4
    cfg = TrainConfig(**train)
    models = _models(max5, SIZES, **shape)
    ens = Ensemble.from_models(models)
    opt = StackedAdamW(ens, [cfg] * len(models))
    singles = [make_optimizer(m, cfg) for m in models]
    scheds = [torch.optim.lr_scheduler.LambdaLR(o, lr_factor(cfg)) for o in singles]
    batches = train_batches(max5.train, cfg)
    m = len(models)
    for step in range(50):
        x, y = batch_tensors(max5.train, next(batches), max5.vocab.pad_id, True)
        for model, o, s in zip(models, singles, scheds, strict=True):
            train_step(model, o, x, y, cfg.grad_clip)
            s.step()
        lr = torch.full((m,), cfg.lr * lr_factor(cfg)(step))
        ensemble_step(ens, opt, x.expand(m, -1, -1), y.expand(m, -1, -1), lr)
    assert _padding_is_zero(ens)
    probe = torch.from_numpy(max5.test["max"].padded(np.arange(32), max5.vocab.pad_id))
    for i, (model, d) in enumerate(zip(models, SIZES, strict=True)):
        mine = ens.member(i).state_dict()
        for name, p in model.state_dict().items():
            q = mine[name]
            if name == "block.attn.qkv.bias":
                # The key bias has a true gradient of zero (softmax ignores a shift shared by
                # every key), so AdamW walks it on rounding noise and it differs by up to
                # 50 x lr; it changes no output, which the logits below check.
                p, q = torch.cat([p[:d], p[2 * d :]]), torch.cat([q[:d], q[2 * d :]])
            assert torch.allclose(p, q, atol=weights_atol), (d, name, (p - q).abs().max())
        with torch.no_grad():
            assert torch.allclose(ens.member(i)(probe), model(probe), atol=logits_atol)


def test_greedy_and_teacher_forced_evaluation_match_each_member(max5):
    seqs = max5.test["max"].subset(np.arange(120))
    models = _models(max5, SIZES)
    ens = Ensemble.from_models(models)
    answer_ok, strict_ok = ensemble_greedy(ens, seqs, max5.vocab.eos_id, batch_size=50)
    acc, loss = ensemble_teacher_forced(ens, seqs, max5.vocab.pad_id, batch_size=50)
    for i, model in enumerate(models):
        ref_answer, ref_strict = evaluate_greedy(model, seqs, max5.vocab.eos_id)
        assert np.array_equal(answer_ok[i], ref_answer) and np.array_equal(strict_ok[i], ref_strict)
        ref_acc, ref_loss = evaluate_teacher_forced(model, seqs, max5.vocab.pad_id)
        assert acc[i] == pytest.approx(ref_acc) and loss[i] == pytest.approx(ref_loss, rel=1e-4)


@pytest.fixture(scope="module")
def batch_run(max5, max_add5):
    """Four members: two mixtures, three sizes, two budgets, trained as one batch."""
    cfg = TrainConfig(
        max_steps=400, eval_every=100, lr=1e-2, warmup_steps=50, learned_acc=1.01, stuck_after=1.0
    )
    short = TrainConfig(max_steps=100, eval_every=50, lr=1e-2, warmup_steps=50, seed=3)
    members = [
        Member(model_config_for(max5.config, 32), max5, cfg),
        Member(
            model_config_for(max_add5.config, 16),
            max_add5,
            TrainConfig(**{**cfg.to_dict(), "seed": 1}),
        ),
        Member(model_config_for(max5.config, 8), max5, short),
        Member(
            model_config_for(max_add5.config, 32),
            max_add5,
            TrainConfig(**{**cfg.to_dict(), "seed": 2}),
        ),
    ]
    order = []
    results = train_batched(members, on_done=lambda i, r: order.append((i, r.steps)))
    return members, results, order


def test_a_batched_member_learns_as_its_single_run_does(max5, batch_run):
    members, results, _ = batch_run
    single = train(members[0].model_cfg, max5, members[0].cfg)
    assert results[0].accuracy["max"] >= 0.85
    assert results[0].accuracy["max"] == pytest.approx(single.accuracy["max"], abs=0.02)
    losses = [h["loss"] for h in results[0].history]
    assert losses == pytest.approx([h["loss"] for h in single.history], rel=0.05)


def test_members_keep_their_own_budget_data_and_fields(batch_run):
    members, results, order = batch_run
    assert order[0] == (2, 100)  # the short member is handed over first, before the others end
    assert [r.steps for r in results] == [400, 400, 100, 400]
    assert set(results[1].accuracy) == {"max", "add"} and set(results[0].accuracy) == {"max"}
    for m, r in zip(members, results, strict=True):
        assert r.model.cfg == m.model_cfg
        assert r.stop_reason in ("max_steps", "stuck") and r.tokens > 0 and r.train_s > 0
        assert set(r.strict_accuracy) == set(r.teacher_forced) == set(r.accuracy)
        assert [h["step"] for h in r.history][-1] == r.steps


def test_a_members_checkpoint_loads_in_the_single_model_path(max5, batch_run, tmp_path):
    _, results, _ = batch_run
    r = results[0]
    path = tmp_path / "member.ckpt"
    save_checkpoint(path, r.model, max5.config, TrainConfig().to_dict(), {"accuracy": r.accuracy})
    model = load_checkpoint(path).build_model()
    answer_ok, _ = evaluate_greedy(model, max5.test["max"], max5.vocab.eos_id)
    assert float(answer_ok.mean()) == pytest.approx(r.accuracy["max"])


def test_packs_are_split_to_fit_memory(max5):
    cfg = TrainConfig()
    members = [(model_config_for(max5.config, d), cfg) for d in (8, 16, 32, 16)]
    one = pack_bytes([members[2]])
    two = pack_bytes([members[2]] * 2)
    assert one < two
    cpu = torch.device("cpu")
    assert plan_packs(members, cpu, 10 * two, by_d=False) == [[2, 1, 3, 0]]  # widest first
    assert plan_packs(members, cpu, 10 * two) == [[0], [1, 3], [2]]  # on the CPU, one d a pack
    packs = plan_packs(members, cpu, one, by_d=False)
    assert sorted(i for p in packs for i in p) == [0, 1, 2, 3] and len(packs) >= 2
    waves = plan_waves(members, cpu, one, by_d=False)
    assert [p for wave in waves for p in wave] == packs
    for wave in waves:  # the packs of a wave train side by side: together they must fit
        assert sum(pack_bytes([members[i] for i in p]) for p in wave) <= one
    assert plan_waves(members, cpu, 10 * two) == [[[0], [1, 3], [2]]]  # all side by side
    with pytest.raises(ConfigError, match=r"needs about .*, more than"):
        plan_packs(members, cpu, one // 2)


def test_out_of_memory_halves_the_pack_and_loses_no_member(max5, monkeypatch):
    import threshold.batched as batched

    real, calls = batched.ensemble_step, []

    def flaky(ens, *args):
        calls.append(ens.n_members)
        if len(calls) == 5:  # a CUDA allocator failure in the middle of training
            raise torch.OutOfMemoryError("CUDA out of memory (injected)")
        return real(ens, *args)

    monkeypatch.setattr(batched, "ensemble_step", flaky)
    cfg = TrainConfig(max_steps=20, eval_every=10)
    members = [Member(model_config_for(max5.config, 8), max5, cfg) for _ in range(4)]
    results = train_batched(members)
    assert [r.steps for r in results] == [20] * 4
    assert calls[:5] == [4] * 5 and set(calls[5:]) == {2}  # went on in two halves


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU on this machine")
def test_on_a_gpu_members_compute_and_train_as_on_the_cpu(max5):
    models = _models(max5, SIZES)
    ens = Ensemble.from_models(models, "cuda")
    x = torch.randint(0, len(max5.vocab), (len(SIZES), 3, 20))
    with torch.no_grad():
        logits = ens(x.cuda()).cpu()
        for i, model in enumerate(models):
            assert torch.allclose(logits[i], model(x[i]), atol=1e-4)
    cfg = TrainConfig(max_steps=60, eval_every=30)
    members = [
        Member(m.cfg, max5, TrainConfig(**{**cfg.to_dict(), "seed": i}))
        for i, m in enumerate(models)
    ]
    on_gpu = train_batched(members, "cuda")
    on_cpu = train_batched(members, "cpu")
    for a, b in zip(on_gpu, on_cpu, strict=True):
        assert a.steps == b.steps == 60
        assert a.accuracy["max"] == pytest.approx(b.accuracy["max"], abs=0.05)
