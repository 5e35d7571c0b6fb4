"""Properties (hypothesis) of the task generator's cache contract and of the settings parsers.

Generator: data are a function of the settings alone (no global random state leaks in), the cache
returns exactly what generation gives, and the cache key changes with every setting that changes
the data (and only those). Parsers: whatever text or values come in, the result is valid settings
or a ConfigError (a ThresholdError for stored settings), never another exception; settings survive
their round trip through the study's attributes.
"""

from __future__ import annotations

import dataclasses
import json
import random
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from test_tasks import digest, small_configs

from threshold import ConfigError, ThresholdError
from threshold.search.spec import StudySettings
from threshold.search.study import SearchConfig, StorageError, check_study_name, open_storage
from threshold.tasks import TaskConfig, build_task_data, load_task_data
from threshold.train import TrainConfig

FEW = settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
MANY = settings(max_examples=200, deadline=None)


@FEW
@given(cfg=small_configs(), noise=st.integers(0, 2**32 - 1))
def test_data_depend_on_the_settings_alone_and_the_cache_returns_them(cfg, noise):
    want = digest(build_task_data(cfg))
    np.random.seed(noise)  # global generators in any state: none of them may matter
    random.seed(noise)
    np.random.random(noise % 7)
    with tempfile.TemporaryDirectory() as cache:
        assert digest(load_task_data(cfg, Path(cache))) == want  # generated and written
        assert digest(load_task_data(cfg, Path(cache))) == want  # read back
        assert len(list(Path(cache, "data").iterdir())) == 1


# Another value for each setting (drawn from these), to see what the cache key follows.
OTHER = {
    "testbed": st.sampled_from(["listops", "perm"]),
    "n": st.integers(2, 12),
    "depth": st.integers(1, 3),
    "arity_min": st.integers(2, 3),
    "arity_max": st.integers(3, 4),
    "p_nest": st.sampled_from([0.0, 0.25, 0.5, 1.0]),
    "n_train": st.integers(1, 500),
    "n_test": st.integers(1, 100),
    "n_val": st.integers(1, 50),
    "holdout": st.sampled_from([0.05, 0.1, 0.5]),
    "split_seed": st.integers(0, 2**32),
    "data_seed": st.integers(0, 2**32),
    "sadd_seed": st.integers(0, 2**32),
}


@MANY
@given(cfg=small_configs(), data=st.data())
def test_cache_key_follows_every_data_setting_and_only_those(cfg, data):
    assert TaskConfig.from_dict(json.loads(json.dumps(cfg.to_dict()))) == cfg
    field = data.draw(st.sampled_from([*OTHER, "measure"]))
    value = data.draw(st.sampled_from(cfg.ops) if field == "measure" else OTHER[field])
    try:
        other = dataclasses.replace(cfg, **{field: value})
    except ConfigError:
        assume(False)
    if other == cfg:
        assert other.key() == cfg.key()
    elif field == "measure":
        assert other.key() == cfg.key()  # which op is measured does not change the data
    else:
        assert other.key() != cfg.key(), field


LISTOPS_OPS = tuple(TaskConfig().testbed_obj.ops)  # max, min, med, add, prod, nadd, sadd


@st.composite
def task_options(draw) -> tuple[bool, str, str, int]:
    """(valid, tasks, arity, mod): half valid by construction (known ops, each once, with
    blanks around the commas; an arity and a modulus inside their limits), half any text and
    numbers, so that both the checks on what is taken and the refusals run (issue 62: a draw of
    any text alone was valid 0-1 times in 200)."""
    if draw(st.booleans()):
        ops = draw(st.lists(st.sampled_from(LISTOPS_OPS), min_size=1, max_size=4, unique=True))
        tasks = draw(st.sampled_from([",", ", ", " , "])).join(ops)
        lo = draw(st.integers(2, 8))
        hi = draw(st.integers(lo, 8))
        arity = draw(st.sampled_from([f"{lo}-{hi}", f" {lo}-{hi}"] if lo < hi else [str(lo)]))
        return True, tasks, arity, draw(st.integers(2, 20))
    tasks = draw(st.text(alphabet="maxdinpro ,sgulMAX", max_size=16))
    arity = draw(st.text(alphabet="0123456789- x", max_size=5))
    return False, tasks, arity, draw(st.integers(-3, 20))


@MANY
@given(options=task_options())
def test_cli_task_parser_gives_valid_settings_or_a_config_error(options):
    valid, tasks, arity, mod = options
    try:
        cfg = TaskConfig.from_options(  # what the command line's task options are given to
            tasks=tasks, testbed="listops", mod=mod, depth=2, arity=arity, n_train=100, n_test=10
        )
    except ConfigError as e:
        assert not valid, f"valid settings refused: {e}"
        assert "\n" not in str(e)
        return
    assert cfg.ops == tuple(op.strip() for op in tasks.split(",") if op.strip())
    assert 2 <= cfg.arity_min <= cfg.arity_max <= 8 and cfg.n == mod >= 2
    if valid:
        lo, _, hi = arity.strip().partition("-")
        assert (cfg.arity_min, cfg.arity_max) == (int(lo), int(hi or lo))


@st.composite
def search_options(draw) -> tuple[bool, list[int], int, float, float]:
    """(valid, [d_lo, d_hi, d_min, d_max], budget, precision, level): half inside every limit,
    half any numbers (NaN and infinities too)."""
    if draw(st.booleans()):
        d_min = draw(st.integers(1, 16))
        d_lo = draw(st.integers(d_min, 256))
        d_hi = draw(st.integers(d_lo + 1, 512))
        d_max = draw(st.integers(d_hi, 600))
        precision = draw(st.floats(1.01, 100))
        level = draw(st.floats(0.01, 0.99))
        return True, [d_lo, d_hi, d_min, d_max], draw(st.integers(3, 50)), precision, level
    return (
        False,
        draw(st.lists(st.integers(-2, 600), min_size=4, max_size=4)),
        draw(st.integers(-1, 50)),
        draw(st.floats(allow_nan=True, allow_infinity=True)),
        draw(st.floats(allow_nan=True, allow_infinity=True)),
    )


@MANY
@given(options=search_options())
def test_search_settings_are_valid_or_refused(options):
    valid, d, budget, precision, level = options
    try:
        s = SearchConfig(*d, precision=precision, budget=budget, level=level)
    except ConfigError as e:
        assert not valid, f"valid settings refused: {e}"
        return
    assert 1 <= s.d_min <= s.d_lo < s.d_hi <= s.d_max and s.budget >= 3
    assert s.precision > 1 and 0 < s.level < 1
    assert (s.d_lo, s.d_hi, s.d_min, s.d_max, s.budget) == (*d, budget)


@MANY
@given(
    ints=st.lists(st.integers(-3, 100), min_size=5, max_size=5),
    lr=st.floats(allow_nan=True, allow_infinity=True),
    time_limit=st.none() | st.floats(allow_nan=True, allow_infinity=True),
)
def test_train_settings_are_valid_or_refused(ints, lr, time_limit):
    steps, batch, warmup, every, threads = ints
    try:
        t = TrainConfig(max_steps=steps, batch_size=batch, warmup_steps=warmup, eval_every=every,
                        threads=threads, lr=lr, time_limit_s=time_limit)  # fmt: skip
    except ConfigError:
        return
    assert min(t.max_steps, t.batch_size, t.eval_every, t.threads) >= 1 and t.warmup_steps >= 0
    assert t.lr > 0 and (t.time_limit_s is None or t.time_limit_s > 0)


@st.composite
def study_settings(draw) -> StudySettings:
    d_lo = draw(st.integers(2, 64))
    search = SearchConfig(
        d_lo=d_lo,
        d_hi=draw(st.integers(d_lo + 1, 512)),
        budget=draw(st.integers(3, 100)),
        precision=draw(st.floats(1.01, 10)),
        level=draw(st.floats(0.05, 0.95)),
        chance_corrected=draw(st.booleans()),
        base_seed=draw(st.integers(0, 2**32)),
    )
    train = TrainConfig(seed=draw(st.integers(0, 2**32)), max_steps=draw(st.integers(1, 10**6)),
                        lr=draw(st.floats(1e-5, 1.0)))  # fmt: skip
    return StudySettings(draw(small_configs()), train, search)


@MANY
@given(s=study_settings())
def test_study_settings_round_trip_through_the_study_attributes(s):
    attrs = s.to_attrs()
    assert all(len(v) < 2000 for v in attrs.values())  # RDB attribute values are capped
    assert StudySettings.from_attrs(json.loads(json.dumps(attrs))) == s
    assert check_study_name(s.default_name()) == s.default_name()


JUNK = st.none() | st.booleans() | st.integers(-5, 50) | st.floats() | st.text(max_size=4)
FIELDS = [f.name for c in (TaskConfig, TrainConfig, SearchConfig) for f in dataclasses.fields(c)]


@MANY
@given(
    parts=st.dictionaries(
        st.sampled_from(["task", "train", "search", "other"]),
        st.dictionaries(st.sampled_from(FIELDS), JUNK | st.lists(JUNK, max_size=3), max_size=6)
        | JUNK,
        max_size=4,
    )
)
def test_stored_settings_in_any_shape_load_or_raise_a_threshold_error(parts):
    attrs = {k: json.dumps(v) for k, v in parts.items()}
    try:
        StudySettings.from_attrs(attrs)
    except ThresholdError as e:
        assert "\n" not in str(e)


@MANY
@given(name=st.text(max_size=600))
def test_study_names_are_kept_or_refused_in_one_line(name):
    try:
        assert check_study_name(name) == name
    except ConfigError as e:
        assert "\n" not in str(e) and "study name" in str(e)
        return
    assert name.strip() and len(name) <= 512 and name.isprintable()


@settings(max_examples=50, deadline=None)
@given(url=st.text(max_size=40).filter(lambda u: "://" not in u))
def test_anything_but_a_url_is_refused_and_nothing_is_created(url, tmp_path_factory):
    cwd = tmp_path_factory.mktemp("urls")
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(cwd)
        mp.delenv("THRESHOLD_STORAGE", raising=False)
        if not url:  # empty means the default storage; that one is fine
            return
        with pytest.raises(StorageError, match="is not a database URL"):
            open_storage(url)
    assert not list(cwd.iterdir())
