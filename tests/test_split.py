"""The group's data split and stopping as the `paper` recipe's (issue 59): ordered triples of
distinct digits held out of every op at once, drawn from the split's own seed; `fast` and `small`
keep this tool's per-op split bit for bit; the paper recipe never stops a run early."""

from __future__ import annotations

import hashlib
import json

import pytest

from threshold import ConfigError
from threshold.config import RECIPES, TrainConfig, make_recipe
from threshold.search.spec import StudySettings
from threshold.tasks import SequenceSet, TaskConfig, TaskData, build_task_data
from threshold.tasks.generate import held_out_triples
from threshold.train import is_stuck, model_config_for, train

SMALL = {"n_train": 300, "n_test": 60, "n_val": 20}
ALL_OPS = ("max", "min", "med", "add", "prod", "nadd", "sadd")


def applications(seqs: SequenceSet, cfg: TaskConfig, i: int) -> set[tuple[str, tuple[int, ...]]]:
    """Every op application of sequence ``i``'s chain of thought, read from its tokens alone: an op
    whose operands are all values (``op ( a b c )``) is applied at that step, and every step's
    innermost ops are such, so these are all of them."""
    words = cfg.vocab.decode(seqs[i]).split(" ")
    digits = {str(v) for v in range(cfg.n)}
    out = set()
    for j, w in enumerate(words):
        if w in ALL_OPS:
            end = words.index(")", j)
            args = words[j + 2 : end]
            if all(a in digits for a in args):
                out.add((w, tuple(int(a) for a in args)))
    return out


def triples_of(seqs: SequenceSet, cfg: TaskConfig) -> list[set[tuple[int, ...]]]:
    """Per sequence, the operand triples its chain of thought applies an op to."""
    return [
        {args for _, args in applications(seqs, cfg, i) if len(args) == 3} for i in range(len(seqs))
    ]


def digest(data: TaskData) -> str:
    arrays = data.train.to_arrays("train")
    for op in data.config.ops:
        arrays |= data.val[op].to_arrays(f"val.{op}") | data.test[op].to_arrays(f"test.{op}")
    h = hashlib.sha256()
    for key, a in sorted(arrays.items()):
        h.update(key.encode() + str(a.dtype).encode() + a.tobytes())
    return h.hexdigest()[:16]


# --- The held-out triples ----------------------------------------------------------------------


def test_the_held_out_triples_are_the_groups_share_of_ordered_distinct_triples():
    triples = held_out_triples(TaskConfig(n=10, split="triples"))
    assert len(triples) == 49  # the group's 49 of 720 at mod 10
    assert all(len(set(t)) == 3 and all(0 <= v < 10 for v in t) for t in triples)
    for n, count in ((3, 1), (5, 4), (20, 466), (43, 5_039)):  # round(49/720 * n(n-1)(n-2))
        assert len(held_out_triples(TaskConfig(n=n, split="triples"))) == count
    s3 = TaskConfig(testbed="perm", ops=("mul",), n=3, split="triples")
    assert len(held_out_triples(s3)) == 8  # S_3's 6 values: 8 of 120 ordered distinct triples


def test_the_held_out_triples_come_from_the_split_seed_alone():
    base = held_out_triples(TaskConfig(n=10, split="triples"))
    same = TaskConfig(ops=("max", "add"), n=10, depth=3, data_seed=5, split="triples")
    assert held_out_triples(same) == base  # not the mixture, grammar or data seed
    assert held_out_triples(TaskConfig(n=10, split="triples", split_seed=1)) != base


@pytest.mark.parametrize("split_seed", [0, 1])
def test_no_held_out_triple_is_trained_under_any_op(split_seed):
    """The group's split: a test triple is never an op's operands in a training chain of thought,
    whichever op; every test and validation sequence applies some op to one. Under this tool's
    per-op split, the same triples are trained (so the check is not empty)."""
    grammar = dict(n=10, depth=2, p_nest=0.5, n_train=2000, n_test=60, n_val=20)
    cfg = TaskConfig(ops=ALL_OPS, split="triples", split_seed=split_seed, **grammar)
    held = held_out_triples(cfg)
    data = build_task_data(cfg)
    trained = set().union(*triples_of(data.train, cfg))
    assert not trained & held
    assert len(trained) > 500  # most of the 720 distinct and 280 other triples are trained
    for sets in (data.test, data.val):
        for op, seqs in sets.items():
            assert all(t & held for t in triples_of(seqs, cfg)), op
    per_op = TaskConfig(ops=ALL_OPS, split_seed=split_seed, **grammar)
    assert set().union(*triples_of(build_task_data(per_op).train, per_op)) & held


def test_the_triples_split_is_deterministic_and_its_test_sets_do_not_depend_on_the_mixture():
    cfg = TaskConfig(ops=("max", "med", "add"), n=10, measure="add", split="triples", **SMALL)
    a, b = build_task_data(cfg), build_task_data(cfg)
    assert digest(a) == digest(b)
    alone = build_task_data(TaskConfig(ops=("add",), n=10, split="triples", **SMALL))
    for sets in ("test", "val"):  # the ADD test set is the same whatever mixture ADD is in
        mixed, own = getattr(a, sets)["add"], getattr(alone, sets)["add"]
        assert mixed.tokens.tobytes() == own.tokens.tobytes()
        assert mixed.offsets.tobytes() == own.offsets.tobytes()
    other = build_task_data(TaskConfig(ops=("max", "med", "add"), n=10, split="triples",
                                       split_seed=1, measure="add", **SMALL))  # fmt: skip
    assert digest(other) != digest(a)


def test_two_operand_applications_are_never_held_out_by_themselves():
    """A triple is three operands: with one-level expressions, a 2-operand sequence is always
    training-side, and every test sequence is a 3-operand application of a held-out triple."""
    cfg = TaskConfig(ops=("add",), n=10, depth=1, split="triples", **SMALL)
    data = build_task_data(cfg)
    held = held_out_triples(cfg)
    lengths = {len(next(iter(applications(data.train, cfg, i)))[1]) for i in range(300)}
    assert lengths == {2, 3}
    tests = [applications(data.test["add"], cfg, i) for i in range(60)]
    assert all(len(g) == 1 and next(iter(g))[1] in held for g in tests)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"split": "pairs"}, "split 'pairs' is not allowed: use groups or triples"),
        ({"split": "triples", "arity_min": 2, "arity_max": 2},
         "split triples with arity 2-2 holds out nothing"),
        ({"split": "triples", "arity_min": 4, "arity_max": 5},
         "the arity range must include 3"),
        ({"split": "triples", "n": 2}, "2 values make no triple of distinct values"),
    ],
)  # fmt: skip
def test_bad_splits_name_the_value_and_the_fix(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        TaskConfig(**kwargs)


# --- fast and small keep this tool's split; paper has the group's -----------------------------


def test_fast_and_small_keep_their_data_and_keys_bit_for_bit():
    """Digests and data keys of the per-op split as generated before the split setting existed
    (at 9123c15), so cached data and study names stay."""
    before = {
        TaskConfig(ops=("max", "med", "add"), n=10, measure="add", **SMALL): (
            "848b7115303a0d06", "8e94e1afeea850c0"),
        TaskConfig(testbed="perm", ops=("mul", "sgn", "img"), n=4, **SMALL): (
            "21fc6d4a268d8d8f", "5fb39d04e5171569"),
    }  # fmt: skip
    for task, (key, data_digest) in before.items():
        for recipe in ("fast", "small"):
            mine = make_recipe(recipe).on(task)
            assert mine == task and "split" not in mine.to_dict()
            assert mine.key() == key and digest(build_task_data(mine)) == data_digest
    assert TaskConfig.from_dict(TaskConfig().to_dict()).split == "groups"


def test_the_paper_recipe_has_the_groups_split_and_a_study_records_it():
    assert RECIPES["paper"]["split"] == "triples" and "split" not in RECIPES["small"]
    paper = StudySettings.from_options("max,add", mod=5, steps=200, recipe="paper")
    assert paper.task.split == "triples"
    assert json.loads(paper.to_attrs()["task"])["split"] == "triples"
    assert StudySettings.from_attrs(paper.to_attrs()) == paper
    per_op = StudySettings.from_options("max,add", mod=5, steps=200, recipe="paper", split="groups")
    assert per_op.task.split == "groups" and per_op.default_name() != paper.default_name()
    assert "-paper-" in per_op.default_name()
    fast = StudySettings.from_options("max,add", mod=5, recipe="fast", split="triples")
    assert fast.task.split == "triples"
    # a study stored before the field read as the per-op split it was made with
    attrs = paper.to_attrs()
    task = json.loads(attrs["task"])
    del task["split"]
    assert StudySettings.from_attrs({**attrs, "task": json.dumps(task)}).task.split == "groups"
    with pytest.raises(ConfigError, match="split 'x' is not allowed"):
        make_recipe("paper", split="x")


# --- No early stop ------------------------------------------------------------------------------


def test_the_paper_recipes_early_stop_never_fires():
    """A run that the learned rule would stop at its first check (thresholds 0) trains its whole
    budget under ``early_stop = "never"``, as the paper recipe's runs do; nor is it ever stuck."""
    paper = make_recipe("paper").train
    assert paper.early_stop == "never"
    data = build_task_data(TaskConfig(ops=("max",), n=5, depth=1, n_train=200, n_test=20, n_val=20))
    easy = dict(max_steps=30, eval_every=10, learned_tf=0.0, learned_acc=0.0, warmup_steps=0)
    model = model_config_for(data.config, 8)
    assert train(model, data, TrainConfig(early_stop="learned", **easy)).stop_reason == "learned"
    result = train(model, data, TrainConfig(early_stop="never", **easy))
    assert result.stop_reason == "max_steps"
    flat = [
        {"step": 100 * (i + 1), "val_tf": {"add": 0.2}, "val_answer_loss": 1.6} for i in range(10)
    ]
    cfg = TrainConfig(max_steps=1000)
    assert is_stuck(flat, cfg, 0.2, "add")
    assert not is_stuck(flat, TrainConfig(max_steps=1000, early_stop="never"), 0.2, "add")


def test_early_stop_values_are_checked():
    with pytest.raises(ConfigError, match="early_stop 'no' is not allowed: use learned_or_stuck"):
        TrainConfig(early_stop="no")


def test_a_split_other_than_the_recipes_is_named_in_the_studys_recipe_words():
    from threshold.report.data import recipe_of

    words = {
        (recipe, split): recipe_of(
            StudySettings.from_options("add", mod=5, recipe=recipe, split=split)
        )
        for recipe, split in (("paper", None), ("paper", "groups"), ("small", None),
                              ("small", "triples"), ("fast", "groups"))
    }  # fmt: skip
    assert words == {
        ("paper", None): "paper",
        ("paper", "groups"): "paper + split groups",
        ("small", None): "small",
        ("small", "triples"): "small + split triples",
        ("fast", "groups"): "fast",
    }
