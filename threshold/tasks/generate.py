"""Expression trees, their chain of thought, the train/test split, and the on-disk cache.

An expression is a tree: the root is an op with ``arity_min..arity_max`` operands; an operand is a
nested op with probability ``p_nest`` while the depth limit allows, else a value. The chain of
thought rewrites the left-most deepest op into its value, one ``=`` per step, until one value is
left, then the end token: ``add ( max ( 7 3 6 ) 6 0 ) = add ( 7 6 0 ) = 3 <eos>``.

Split: every op application on values that a sequence evaluates (a "group", such as ``max 7 3 6``)
is held out with probability ``holdout``, decided by a hash of the group and ``split_seed``. A
sequence that evaluates any held-out group goes to the test side, every other one to training, so
every test sequence evaluates a group that no training sequence evaluates and no test question is
ever a training question (the steps of a test trace after its held-out groups are reduced may be:
only the held-out groups are new). That is ``split = "groups"``, per op: ``max 7 3 6`` may be held
out while ``add 7 3 6`` is trained. ``split = "triples"`` is the group's (the `paper` recipe's): a
fixed set of ordered triples of distinct values, drawn from ``split_seed`` (49 of the 720 at mod
10, the same share at other sizes, at least one), is held out of every op at once, so a sequence
whose chain of thought applies any op to a held-out triple is on the test side and no test triple
is ever trained under any op. A triple is three operands: applications of two (or four and more)
operands are never held out by themselves. Per-op test and
validation sets are drawn from single-op expressions on the test side, with seeds that depend on the
op and ``split_seed`` only: the ADD test set is the same whatever mixture ADD is trained in.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import itertools
import json
import logging
import math
import os
import random
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from threshold.errors import ConfigError
from threshold.files import UNWRITABLE, atomic_write, not_a_folder
from threshold.meta import stored_dict
from threshold.tasks.ops import BUILTIN, module_ops, ops_fingerprint, ops_module_of
from threshold.tasks.sequences import SequenceSet
from threshold.tasks.testbeds import Testbed, get_testbed
from threshold.tasks.vocab import Vocabulary

__all__ = [
    "TaskConfig",
    "TaskData",
    "build_task_data",
    "default_cache_dir",
    "held_out_triples",
    "load_task_data",
    "op_nodes",
    "parse_weights",
]

log = logging.getLogger(__name__)

GENERATOR_VERSION = 2  # bump when generated sequences change, so old caches are not reused
_MASK64 = (1 << 64) - 1
# Up to this many groups per op, the held-out count is fixed by ranking every group's hash; above
# it a share of at least 5% holds out 50 or more on average and the chance of fewer than 3 is nil.
_EXACT_SPLIT_GROUPS = 1000
# The group's split holds out 49 of the 720 ordered triples of distinct digits at mod 10; other
# sizes hold out the same share of theirs (at least one).
_TRIPLES_HELD, _TRIPLES_OF = 49, 720
SPLITS = ("groups", "triples")


@dataclass(frozen=True)
class TaskConfig:
    """Everything that defines a task's data; recorded on every run and checkpoint."""

    testbed: str = "listops"  # value set and ops: "listops" (digits mod n) or "perm" (S_k)
    ops: tuple[str, ...] = ("max",)  # the mixture: each node of an expression draws its op here
    n: int = 10  # modulus n for listops, degree k of S_k for perm
    depth: int = 2  # levels, root included: 2 is one nesting level (docs/science.md, "The tasks")
    arity_min: int = 2  # operands per op, drawn uniformly in [arity_min, arity_max] (paper: 2-3)
    arity_max: int = 3
    p_nest: float = 0.25  # chance an operand above the depth limit is a nested op (paper 0.25-0.5)
    n_train: int | None = None  # None: 5000 * n sequences (docs/science.md, "The tasks")
    n_test: int = 2000  # test sequences per op (docs/science.md, "The tasks")
    n_val: int = 500  # validation sequences per op, test-side, used only for early stopping
    holdout: float = 0.05  # share of op applications held out of training (raised for tiny n)
    # Which applications are held out (module docstring): "groups", a `holdout` share of each op's
    # (op, operands) groups, per op (this tool's first split); "triples", the group's: ordered
    # triples of distinct values held out of every op at once, so a mixture never trains on a
    # test triple under another op (issue 59). Left out of to_dict at "groups", so data and
    # studies made before it keep their keys and names.
    split: str = "groups"
    split_seed: int = 0  # fixes the held-out groups and test sets, whatever the run seed
    data_seed: int = 0  # draws the training sequences
    sadd_seed: int = 0  # the fixed digit relabelling that defines sadd
    measure: str | None = None  # op whose test accuracy is the run's number; None: the hardest
    # Exposure control (docs/science.md, "Regimes"): each node draws its op with these weights
    # (one per op, in ops order; None: uniform), and with match_exposure the training set grows
    # until the measured op has as many nodes as in its single-op training set (so "joint helps"
    # is told from "joint sees less of the measured op").
    weights: tuple[float, ...] | None = None
    match_exposure: bool = False
    # The module that registers the user's own ops of the mixture (threshold.tasks.ops), stored
    # so that whoever reads the task imports it again; None: the built-in ops alone. Filled in
    # from the entry points of group threshold.ops where the mixture names an op they give. Left
    # out of to_dict at None, as split is.
    ops_module: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "ops", tuple(self.ops))
        if self.weights is not None:
            object.__setattr__(self, "weights", tuple(float(w) for w in self.weights))
        if self.ops_module is None and self.testbed == "listops":
            unknown = [op for op in self.ops if op not in BUILTIN]
            if unknown:  # an installed package's op, named by its entry point
                object.__setattr__(self, "ops_module", ops_module_of(unknown))
        testbed = self.testbed_obj  # validates testbed and n (and imports the ops module)
        if not self.ops:
            raise ConfigError(
                "the task mixture is empty: name at least one op, e.g. --tasks max", "ops"
            )
        for op in self.ops:
            if op not in testbed.ops:
                own = ""
                if self.testbed == "listops" and self.ops_module is None:
                    own = "; an op of your own needs --ops-module MODULE (docs/custom-ops.md)"
                raise ConfigError(
                    f"op {op!r} does not exist for testbed {self.testbed!r}: "
                    f"choose from {', '.join(testbed.ops)}{own}",
                    "ops",
                )
        if len(set(self.ops)) != len(self.ops):
            raise ConfigError(f"ops {','.join(self.ops)} repeat an op: name each op once", "ops")
        if self.measure is not None and self.measure not in self.ops:
            raise ConfigError(
                f"measured op {self.measure!r} is not in the mixture {','.join(self.ops)}",
                "measure",
            )
        _check(self.depth >= 1, f"depth {self.depth} is not allowed: use 1 or more", "depth")
        _check(
            2 <= self.arity_min <= self.arity_max <= 8,
            f"arity {self.arity_min}-{self.arity_max} is not allowed: use 2 <= min <= max <= 8",
            "arity_min",
        )
        _check(0.0 <= self.p_nest <= 1.0, f"p_nest {self.p_nest} is not in [0, 1]", "p_nest")
        _check(0.0 < self.holdout <= 0.5, f"holdout {self.holdout} is not in (0, 0.5]", "holdout")
        _check(
            self.split in SPLITS,
            f"split {self.split!r} is not allowed: use {' or '.join(SPLITS)}",
            "split",
        )
        if self.split == "triples":
            _check(
                self.arity_min <= 3 <= self.arity_max,
                f"split triples with arity {self.arity_min}-{self.arity_max} holds out nothing:"
                " it holds out operand triples, so the arity range must include 3 (e.g. 2-3),"
                " or use split groups",
                "split",
                "arity_min",
            )
            _check(
                testbed.n_values >= 3,
                f"split triples at size {self.n} holds out nothing: {testbed.n_values} values"
                " make no triple of distinct values; use a size with 3 or more values, or split"
                " groups",
                "split",
                "n",
            )
        for name in ("split_seed", "data_seed", "sadd_seed"):
            seed = getattr(self, name)
            _check(
                0 <= seed < 2**63,
                f"{name} {seed} is not allowed: use 0 to 2**63 - 1, as a run's seed",
                name,
            )
        n_train = self.n_train
        _check(n_train is None or n_train >= 1, f"n_train {n_train} must be >= 1", "n_train")
        _check(self.n_test >= 1, f"n_test {self.n_test} must be >= 1", "n_test")
        _check(self.n_val >= 1, f"n_val {self.n_val} must be >= 1", "n_val")
        if self.weights is not None:
            _check(
                len(self.weights) == len(self.ops) and all(0 < w < math.inf for w in self.weights),
                f"weights {list(self.weights)} are not allowed: give one positive finite weight per"
                f" op of {','.join(self.ops)}",
                "weights",
            )
        _check(
            not self.match_exposure or len(self.ops) > 1,
            "match_exposure needs a mixture: a single op already has its own node count",
            "match_exposure",
        )

    @classmethod
    def from_options(cls, tasks: str | tuple[str, ...] | None = None, **options) -> TaskConfig:
        """The task the command line's options mean (the keys of :meth:`options`): ``tasks`` as
        ``max,med`` (or a tuple), ``arity`` as MIN-MAX, ``mod`` the modulus (or degree),
        ``weights`` as ``add=2`` (ops not named weigh 1) or a dict; an option left out or None
        keeps the field's default."""
        values = cls().options()
        unknown = sorted(set(options) - set(values))
        if unknown:
            raise ConfigError(f"no task option {unknown[0]!r}: use {', '.join(values)}")
        values |= {k: v for k, v in (options | {"tasks": tasks}).items() if v is not None}
        arity = values["arity"]
        try:
            lo, _, hi = str(arity).partition("-")
            arity_min, arity_max = int(lo), int(hi or lo)
        except ValueError:
            raise ConfigError(
                f"arity {arity!r} is not allowed: write MIN-MAX, e.g. 2-3", "arity_min"
            ) from None
        ops = split_ops(values["tasks"])
        return cls(
            testbed=values["testbed"],
            ops=ops,
            weights=parse_weights(values["weights"], ops),
            match_exposure=values["match_exposure"],
            n=values["mod"],
            depth=values["depth"],
            arity_min=arity_min,
            arity_max=arity_max,
            p_nest=values["p_nest"],
            n_train=values["n_train"],
            n_test=values["n_test"],
            measure=values["measure"],
            split_seed=values["split_seed"],
            ops_module=values["ops_module"],
        )

    def options(self) -> dict:
        """This task as :meth:`from_options`' keywords (the command line's options): the one
        mapping back, so an option's default is the field's default, written once."""
        weights = None
        if self.weights is not None:
            weights = ",".join(f"{op}={w:g}" for op, w in zip(self.ops, self.weights, strict=True))
        return {
            "tasks": ",".join(self.ops),
            "testbed": self.testbed,
            "mod": self.n,
            "depth": self.depth,
            "arity": f"{self.arity_min}-{self.arity_max}",
            "p_nest": self.p_nest,
            "n_train": self.n_train,
            "n_test": self.n_test,
            "measure": self.measure,
            "split_seed": self.split_seed,
            "weights": weights,
            "match_exposure": self.match_exposure,
            "ops_module": self.ops_module,
        }

    @property
    def testbed_obj(self) -> Testbed:
        return get_testbed(self.testbed, self.n, self.sadd_seed, self.ops_module)

    @property
    def ops_values(self) -> str | None:
        """A fingerprint of the values of the ops module's ops at this modulus and arity (None
        without a module): keys the data and names the study, so an edited op is made anew."""
        if self.ops_module is None:
            return None
        arities = range(self.arity_min, self.arity_max + 1)
        return ops_fingerprint(module_ops(self.ops_module), self.n, arities)

    @property
    def vocab(self) -> Vocabulary:
        return Vocabulary.for_testbed(self.testbed_obj)

    @property
    def measured_op(self) -> str:
        return self.measure or self.testbed_obj.hardest(self.ops)

    @property
    def train_size(self) -> int:
        return self.n_train if self.n_train is not None else 5000 * self.n

    @functools.cached_property
    def max_len(self) -> int:
        """Longest sequence the grammar can make: the context size a model needs. Cached: a
        generator's exact held-out split costs milliseconds, and a study sizes ~500 models."""
        gen = _Generator(self)
        return len(gen.render(gen.full_tree(1))[0])

    def to_dict(self) -> dict:
        """The fields as a dict; ``split`` left out at "groups", and any field added after
        :data:`_STORED` at its default (:func:`threshold.meta.stored_dict`), so a task stores
        (keys its data, names its study) as before the field existed."""
        d = stored_dict(self, _STORED)  # ops_module, added since, is written only when set
        if d["split"] == "groups":
            del d["split"]
        return d

    @classmethod
    def from_dict(cls, d: dict) -> TaskConfig:
        d = dict(d)
        d["ops"] = tuple(d["ops"])
        return cls(**d)

    def key(self) -> str:
        """Content key of the generated data: settings and generator version."""
        settings = {k: v for k, v in self.to_dict().items() if k != "measure"}  # data unchanged
        if self.ops_module is not None:
            settings["ops_values"] = self.ops_values
        blob = json.dumps([GENERATOR_VERSION, settings], sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


# The fields a task has always stored; a field added to TaskConfig is not named here, and stores
# only away from its default (docs/contributing.md, "A new recipe field").
_STORED = frozenset([
    "testbed", "ops", "n", "depth", "arity_min", "arity_max", "p_nest", "n_train", "n_test",
    "n_val", "holdout", "split", "split_seed", "data_seed", "sadd_seed", "measure", "weights",
    "match_exposure",
])  # fmt: skip


def split_ops(ops: str | tuple[str, ...]) -> tuple[str, ...]:
    """``"max, med"`` or ``("max", "med")`` as a tuple of op names (blanks dropped)."""
    items = ops.split(",") if isinstance(ops, str) else ops
    return tuple(op.strip() for op in items if op.strip())


def parse_weights(weights: str | dict | None, ops: tuple[str, ...]) -> tuple[float, ...] | None:
    """``add=2,max=0.5`` (or a dict) as one weight per op of ``ops``, unnamed ops 1; None stays."""
    if weights is None or weights == "" or weights == {}:
        return None
    if isinstance(weights, str):
        pairs = {}
        for part in weights.split(","):
            op, eq, value = part.partition("=")
            if eq and op.strip() in pairs:
                raise ConfigError(
                    f"weights {weights!r} name op {op.strip()!r} twice ({op.strip()}="
                    f"{pairs[op.strip()]:g} and {part.strip()}): name each op once",
                    "weights",
                )
            try:
                pairs[op.strip()] = float(value)
            except ValueError:
                eq = ""
            if not eq:
                raise ConfigError(
                    f"weights {weights!r} are not allowed: write OP=W,..., e.g. add=2", "weights"
                )
        weights = pairs
    for op in weights:
        if op not in ops:
            raise ConfigError(
                f"weights name op {op!r}, which is not in the mixture {','.join(ops)}", "weights"
            )
    return tuple(float(weights.get(op, 1.0)) for op in ops)


def op_nodes(seqs: SequenceSet, cfg: TaskConfig, op: str) -> int:
    """How many applications of ``op`` the prompts of ``seqs`` hold (each node's op token is
    written once in its prompt)."""
    op_id = cfg.vocab.ids[op]
    count = 0
    for i in range(len(seqs)):
        count += int((seqs[i][: seqs.prompt_len[i]] == op_id).sum())
    return count


def _check(ok: bool, message: str, *fields: str) -> None:
    if not ok:
        raise ConfigError(message, *fields)


@dataclass(frozen=True)
class TaskData:
    """Training sequences of the mixture and per-op validation and test sets."""

    config: TaskConfig
    train: SequenceSet
    val: dict[str, SequenceSet]
    test: dict[str, SequenceSet]

    @property
    def vocab(self) -> Vocabulary:
        return self.config.vocab


def _seed(*parts: object) -> int:
    return int.from_bytes(hashlib.sha256(repr(parts).encode()).digest()[:8], "little")


def _splitmix64(x: int) -> int:
    x = (x + 0x9E3779B97F4A7C15) & _MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK64
    return x ^ (x >> 31)


class _Generator:
    """Draws trees, decides the split and renders chains of thought for one TaskConfig.

    A tree node is ``[op_index, children]`` (op index in testbed order); a leaf is a value index.
    """

    def __init__(self, cfg: TaskConfig) -> None:
        self.cfg = cfg
        testbed = cfg.testbed_obj
        vocab = cfg.vocab
        self.fns = list(testbed.ops.values())
        self.op_names = list(testbed.ops)
        ids = vocab.ids
        self.op_ids = [ids[op] for op in testbed.ops]
        self.value_ids = [ids[t] for t in testbed.value_tokens]
        self.lp, self.rp, self.eq, self.eos = ids["("], ids[")"], ids["="], ids["<eos>"]
        self.n_values = testbed.n_values
        self.salt = _splitmix64(cfg.split_seed & _MASK64)
        self.held: dict[tuple[int, tuple[int, ...]], bool] = {}
        self.triples = held_out_triples(cfg) if cfg.split == "triples" else frozenset()
        if cfg.split == "triples":
            return  # the per-op share below is the groups split's
        # Tiny moduli have few groups; hold out at least 3 per op so every op has a test side.
        arities = range(cfg.arity_min, cfg.arity_max + 1)
        groups_per_op = sum(self.n_values**a for a in arities)
        share = min(0.5, max(cfg.holdout, 3 / groups_per_op))
        self.threshold = [int(share * 2**64)] * len(self.fns)  # per op: held out if hash is below
        if groups_per_op <= _EXACT_SPLIT_GROUPS:
            # A share alone is a binomial draw: with few groups it can hold out none of an op (no
            # test side) or most of it (no training side). Clamp it to at least min(3, half) and
            # at most half of the op's groups, whatever the split seed.
            values = range(self.n_values)
            for o in range(len(self.fns)):
                ranked = sorted(
                    self._hash((o, vs))
                    for a in arities
                    for vs in itertools.product(values, repeat=a)
                )
                least = ranked[min(3, groups_per_op // 2) - 1] + 1
                most = ranked[groups_per_op // 2]
                self.threshold[o] = min(max(self.threshold[o], least), most)

    def tree(self, rng: random.Random, ops: list[int], level: int = 1, weights=None) -> list:
        cfg = self.cfg
        children: list = []
        for _ in range(rng.randint(cfg.arity_min, cfg.arity_max)):
            if level < cfg.depth and rng.random() < cfg.p_nest:
                children.append(self.tree(rng, ops, level + 1, weights))
            else:
                children.append(rng.randrange(self.n_values))
        if weights is None:
            return [ops[rng.randrange(len(ops))], children]
        return [rng.choices(ops, weights)[0], children]

    def full_tree(self, level: int) -> list:
        """The largest tree the grammar allows (every operand nested, maximal arity)."""
        nest = level < self.cfg.depth
        return [0, [self.full_tree(level + 1) if nest else 0 for _ in range(self.cfg.arity_max)]]

    def _hash(self, group: tuple[int, tuple[int, ...]]) -> int:
        key = group[0] + 1
        for v in group[1]:
            key = (key * (self.n_values + 1) + v + 1) & _MASK64
        return _splitmix64(key ^ self.salt)

    def is_held_out(self, group: tuple[int, tuple[int, ...]]) -> bool:
        held = self.held.get(group)
        if held is None and self.cfg.split == "triples":
            held = group[1] in self.triples  # whatever the op: a pair or a 4-tuple never is
            self.held[group] = held
        elif held is None:
            held = self._hash(group) < self.threshold[group[0]]
            self.held[group] = held
        return held

    def evaluate(self, node: list | int, groups: list) -> int:
        """Value of ``node``; appends every group it evaluates to ``groups``."""
        if isinstance(node, int):
            return node
        values = tuple(self.evaluate(c, groups) for c in node[1])
        groups.append((node[0], values))
        return self.fns[node[0]](values)

    def on_test_side(self, tree: list) -> bool:
        groups: list = []
        self.evaluate(tree, groups)
        return any(self.is_held_out(g) for g in groups)

    def _tokens(self, node: list | int, out: list[int]) -> None:
        if isinstance(node, int):
            out.append(self.value_ids[node])
            return
        out.append(self.op_ids[node[0]])
        out.append(self.lp)
        for c in node[1]:
            self._tokens(c, out)
        out.append(self.rp)

    def render(self, tree: list) -> tuple[list[int], int]:
        """Token ids of the chain of thought, and the prompt length (through the first ``=``)."""
        tree = _copy(tree)
        out: list[int] = []
        self._tokens(tree, out)
        out.append(self.eq)
        prompt_len = len(out)
        while not isinstance(tree, int):
            tree = self._reduce_once(tree)
            self._tokens(tree, out)
            out.append(self.eq if not isinstance(tree, int) else self.eos)
        return out, prompt_len

    def _reduce_once(self, tree: list) -> list | int:
        """Replace the left-most deepest op (its operands are all values) by its value."""
        best: tuple[int, list | None, int] = (-1, None, -1)  # (depth, parent, child index)
        stack: list[tuple[list, int, list | None, int]] = [(tree, 0, None, -1)]
        while stack:
            node, depth, parent, i = stack.pop()
            if depth > best[0]:
                best = (depth, parent, i)
            # Push right to left so the left-most node is visited first among equals.
            for j in range(len(node[1]) - 1, -1, -1):
                child = node[1][j]
                if not isinstance(child, int):
                    stack.append((child, depth + 1, node, j))
        _, parent, i = best
        target = tree if parent is None else parent[1][i]
        value = self.fns[target[0]](tuple(target[1]))
        if parent is None:
            return value
        parent[1][i] = value
        return tree

    def draw(
        self,
        ops: list[int],
        n: int,
        seed: int,
        test_side: bool,
        weights: tuple[float, ...] | None = None,
        nodes_of: tuple[int, int] | None = None,
    ) -> SequenceSet:
        """``n`` sequences whose trees fall on the requested side of the split; with ``nodes_of``
        (op index, count), as many as it takes for that op to have ``count`` nodes instead."""
        rng = random.Random(seed)
        seqs, prompts, roots = [], [], []
        tries, limit = 0, 200 * n + 10_000
        nodes = 0

        def more() -> bool:
            return len(seqs) < n if nodes_of is None else nodes < nodes_of[1]

        while more():
            tries += 1
            if tries > limit:
                side = "test" if test_side else "training"
                raise ConfigError(
                    f"could not draw {n} {side} sequences for ops "
                    f"{','.join(self.op_names[o] for o in ops)} in {limit} tries: "
                    "raise holdout or the modulus, or lower the set size"
                )
            tree = self.tree(rng, ops, weights=weights)
            if self.on_test_side(tree) != test_side:
                continue
            ids, prompt_len = self.render(tree)
            if nodes_of is not None:
                nodes += sum(t == self.op_ids[nodes_of[0]] for t in ids[:prompt_len])
            seqs.append(ids)
            prompts.append(prompt_len)
            roots.append(tree[0])
        return SequenceSet.from_lists(seqs, prompts, roots, self.cfg.vocab.dtype)


def held_out_triples(cfg: TaskConfig) -> frozenset[tuple[int, int, int]]:
    """The ordered triples of distinct value indices (digits for listops) that ``split =
    "triples"`` holds out of every op: 49 of the 720 at mod 10, else that share of the
    ``V (V-1) (V-2)`` triples of ``V`` values rounded (at least one), drawn without replacement
    from ``split_seed`` alone (so the same for every mixture, grammar and data seed)."""
    v = cfg.testbed_obj.n_values
    total = v * (v - 1) * (v - 2)
    if total == 0:
        return frozenset()
    count = max(1, round(_TRIPLES_HELD * total / _TRIPLES_OF))
    rng = random.Random(_seed("triples", cfg.split_seed))
    out = set()
    for i in rng.sample(range(total), count):  # index i in lexicographic order of the triples
        a, rest = divmod(i, (v - 1) * (v - 2))
        b, c = divmod(rest, v - 2)
        b += b >= a  # skip a
        for x in sorted((a, b)):  # skip a and b, smaller first
            c += c >= x
        out.add((a, b, c))
    return frozenset(out)


def _copy(node: list | int) -> list | int:
    return node if isinstance(node, int) else [node[0], [_copy(c) for c in node[1]]]


def build_task_data(cfg: TaskConfig) -> TaskData:
    """Generate the training set of the mixture and per-op validation and test sets."""
    gen = _Generator(cfg)
    index = {op: i for i, op in enumerate(gen.op_names)}
    mixture = [index[op] for op in cfg.ops]
    grammar = (cfg.testbed, cfg.n, cfg.depth, cfg.arity_min, cfg.arity_max, cfg.p_nest)
    nodes_of = None
    if cfg.match_exposure:  # the measured op's node count in its own single-op training set
        alone = dataclasses.replace(cfg, ops=(cfg.measured_op,), weights=None, match_exposure=False)
        single = build_task_data(alone).train
        nodes_of = (index[cfg.measured_op], op_nodes(single, alone, cfg.measured_op))
    seed = _seed("train", cfg.data_seed, cfg.ops, grammar)
    if cfg.weights is not None or cfg.match_exposure:  # else the seed of the plain mixture
        seed = _seed("train", cfg.data_seed, cfg.ops, grammar, cfg.weights, cfg.match_exposure)
    train = gen.draw(mixture, cfg.train_size, seed, False, cfg.weights, nodes_of)
    val, test = {}, {}
    for op in cfg.ops:
        val[op] = gen.draw([index[op]], cfg.n_val, _seed("val", cfg.split_seed, op, grammar), True)
        test[op] = _test_set(gen, cfg, op)
    return TaskData(cfg, train, val, test)


def build_test_set(cfg: TaskConfig, op: str | None = None) -> SequenceSet:
    """The test set of ``op`` (default: the measured op), the same sequences
    :func:`build_task_data` draws, without the rest: what a study's chance rate is read from
    before anything is written or cached."""
    return _test_set(_Generator(cfg), cfg, cfg.measured_op if op is None else op)


def _test_set(gen: _Generator, cfg: TaskConfig, op: str) -> SequenceSet:
    grammar = (cfg.testbed, cfg.n, cfg.depth, cfg.arity_min, cfg.arity_max, cfg.p_nest)
    index = gen.op_names.index(op)
    return gen.draw([index], cfg.n_test, _seed("test", cfg.split_seed, op, grammar), True)


def default_cache_dir() -> Path:
    """``$THRESHOLD_CACHE`` or ``~/.cache/threshold``: generated data, keyed by settings."""
    return Path(os.environ.get("THRESHOLD_CACHE", Path.home() / ".cache" / "threshold"))


def load_task_data(cfg: TaskConfig, cache_dir: Path | None = None) -> TaskData:
    """The task data of ``cfg``, from the cache when present, else generated and cached."""
    cache_dir = default_cache_dir() if cache_dir is None else Path(cache_dir)
    path = cache_dir / "data" / f"{cfg.key()}.npz"
    if path.exists():
        try:
            with np.load(path) as arrays:
                return _from_arrays(cfg, dict(arrays))
        except (OSError, EOFError, ValueError, KeyError, zipfile.BadZipFile) as e:
            log.warning("regenerating %s: cached file is unreadable (%s)", path, e)
    blocked = not_a_folder(path.parent)
    if blocked is not None:
        raise ConfigError(
            f"data cache {str(cache_dir)!r} cannot be a folder: {str(blocked)!r} is a file; name"
            " a folder with --cache-dir (or $THRESHOLD_CACHE)",
            "cache_dir",
        )
    data = build_task_data(cfg)
    arrays = data.train.to_arrays("train")
    for op in cfg.ops:
        arrays |= data.val[op].to_arrays(f"val.{op}") | data.test[op].to_arrays(f"test.{op}")
    try:
        with atomic_write(path) as f:
            np.savez(f, **arrays)
    except OSError as e:
        if e.errno not in UNWRITABLE:
            raise
        log.warning("data not cached in %s (%s): generated again next time", cache_dir, e.strerror)
    return data


def _from_arrays(cfg: TaskConfig, arrays: dict[str, np.ndarray]) -> TaskData:
    val = {op: SequenceSet.from_arrays(arrays, f"val.{op}") for op in cfg.ops}
    test = {op: SequenceSet.from_arrays(arrays, f"test.{op}") for op in cfg.ops}
    return TaskData(cfg, SequenceSet.from_arrays(arrays, "train"), val, test)
