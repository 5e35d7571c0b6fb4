"""Stop rules judged after the fact on dense grids (threshold/search/bench/stops.py)."""

import numpy as np
import pytest
from test_search_replay import _dense_record

from threshold.search.bench.recorded import load_grids
from threshold.search.bench.replay import replay_grid
from threshold.search.bench.stops import RULES, Rule, bench_stops, isotonic_x80, rule_stop


def test_the_model_free_point_is_where_the_monotone_curve_reaches_the_level(tmp_path):
    grid = next(g for g in load_grids([_dense_record(tmp_path)]) if g.name.endswith("@100"))
    s = grid.settings
    sizes = grid.sizes
    # a clean step from chance to 0.9 between two neighbouring sizes: the level (0.72) is
    # reached between them, 0.62 / 0.8 of the way in ln(params)
    lo, hi = sizes[5], sizes[6]
    runs = [(d, 0.1 if d <= lo else 0.9) for d in sizes for _ in range(2)]
    x_lo, x_hi = s.x_of(np.array([lo, hi]))
    assert isotonic_x80(s, runs) == pytest.approx(x_lo + (0.72 - 0.1) / 0.8 * (x_hi - x_lo))


def test_a_settled_rule_waits_for_its_medians():
    path = [{"x": x, "runs": n} for n, x in enumerate((1.0, 1.3, 1.0, 1.02, 1.01, 1.0), 3)]
    stopped = [False, True, True, True, True, True]  # the width holds from the second reading
    assert rule_stop(Rule("width"), path, stopped) == 1
    assert rule_stop(Rule("s", 2, 0.05), path, stopped) == 4  # 1.0, 1.02, 1.01
    assert rule_stop(Rule("s", 5, 0.01), path, stopped) == 5  # never: the last reading
    assert rule_stop(Rule("f", floor=6), path, stopped) == 3  # the first of 6 runs or more
    assert rule_stop(Rule("f", floor=6), path, [True, True, True, False, True, True]) == 4


def test_the_stops_table_agrees_with_the_replays_own_stop(tmp_path):
    record = _dense_record(tmp_path)
    result = bench_stops([record], orders=1, n_max=12)
    (name,) = result["grids"]  # the located grid; the bound at step 50 is left out
    (replay,) = result["replays"]
    (grid,) = [g for g in load_grids([record]) if g.name == name]
    own = replay_grid(grid, methods=("sampler",), counts=(12,), orders=1)
    width = replay["path"][rule_stop(RULES[0], replay["path"], replay["stopped"])]
    assert width["runs"] == own["methods"]["sampler"][0]["stop"]["runs"]  # the tool's own rule
    for rule in RULES[1:]:  # a settled or floored rule never stops before the width does
        assert result["rules"][rule.name]["median_runs"] >= result["rules"]["width"]["median_runs"]
    assert result["rules"]["grid48"]["median_runs"] == 48


def test_a_settled_stop_in_the_policy_waits_for_the_reading_to_settle(tmp_path):
    from dataclasses import replace

    from threshold.search.bench.replay import sampler_path, stops
    from threshold.search.policy import decide

    grid = next(g for g in load_grids([_dense_record(tmp_path)]) if g.name.endswith("@100"))
    runs = sampler_path(grid, 0, 14)
    patient = replace(grid.settings, settle_runs=3, settle_nats=0.02)
    width = [stops(grid.settings, runs[:n]) for n in range(3, len(runs) + 1)]
    settled = [stops(patient, runs[:n]) for n in range(3, len(runs) + 1)]
    assert all(w for w, s in zip(width, settled, strict=True) if s)  # never before the width
    assert width.index(True) < (settled.index(True) if True in settled else len(settled))
    n = 3 + width.index(True)  # the width holds, the reading has not settled: the policy runs on
    assert decide(grid.settings, runs[:n], []).stop
    assert not decide(patient, runs[:n], []).stop
