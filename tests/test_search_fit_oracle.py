"""The benchmark's shape-unknown bounds (``search.bench.fit_oracle``): the fit placed by the
truth, and the fit that places its runs as it learns."""

import numpy as np
import pytest

from threshold.search.bench.families import CHANCE, FAMILIES, draw_family_truth, fit_bounds
from threshold.search.bench.fit_oracle import FitOracle
from threshold.search.bench.simulate import listops_table
from threshold.search.settings import SearchSettings

TABLE = listops_table(4, 512)


def make_settings(**kwargs) -> SearchSettings:
    return SearchSettings(TABLE, chance=CHANCE, **kwargs)


def test_the_shape_unknown_oracle_places_few_sizes_and_its_fit_sharpens_with_runs():
    """The oracle that must learn the slope and ceiling: its design puts the runs on two to four
    sizes within 3 / slope of x80; its fitted x80 lands within three asymptotic sds of the truth
    with many runs (the sd shrinking as 1 / sqrt(n)), and its median error over studies shrinks
    as runs grow: it is a fit, not the truth read back."""
    s = make_settings()
    truth = draw_family_truth(np.random.default_rng(4), "graded", d80_range=(40.0, 40.0))
    ds, sd, _ = FitOracle.design(s, truth, np.random.default_rng(0), 48)
    assert len(ds) == 48 and 2 <= len(set(ds)) <= 4
    assert np.all(np.abs(s.x_of(np.array(ds)) - truth.x80) * truth.slope <= 3.2)
    big = FitOracle.scored(s, truth, *FitOracle.runs(s, truth, np.random.default_rng(1), 768))
    assert big["sd_asymptotic"] == pytest.approx(sd / 4, rel=0.2)
    assert 0 < abs(big["error"]) < 3 * big["sd_asymptotic"]
    errors = {
        n: np.median(
            [
                abs(
                    FitOracle.scored(s, t, *FitOracle.runs(s, t, np.random.default_rng(i), n))[
                        "error"
                    ]
                )
                for i, t in enumerate(
                    draw_family_truth(np.random.default_rng(10 + i), "plateau") for i in range(8)
                )
            ]
        )
        for n in (6, 96)
    }
    assert errors[96] < 0.5 * errors[6]


def test_the_wide_fit_allows_every_family_s_slopes_and_the_posterior_s():
    """``oracle_fit_wide`` fits the slope over the union of every family's range and the
    posterior's grid (shallow's 0.5 to the grid's 12 by default), not the family's own."""
    lo, hi = FitOracle.any_slope(make_settings())
    assert (lo, hi) == (0.5, 12.0)
    for family in FAMILIES:
        own_lo, own_hi = fit_bounds(family)[0]
        assert lo <= own_lo and own_hi <= hi


def test_the_fit_that_places_as_it_learns_reads_each_checkpoint_and_sharpens():
    """The adaptive fit knows the family's form but none of the truth's parameters: it scores
    every checkpoint with that many runs, its compute grows with them, and over graded studies
    its median error at 48 runs is well below that at 8 (the bracket and one batch). Placing
    per compute (``cost_power`` 1) spends less on the same studies."""
    s = make_settings()
    errors, compute = {8: [], 48: []}, {0.0: 0.0, 1.0: 0.0}
    for i in range(6):
        truth = draw_family_truth(np.random.default_rng(30 + i), "graded")
        rngs = (np.random.default_rng(100 + i), np.random.default_rng(200 + i))
        scores, placed = FitOracle.adaptive(s, truth, rngs, (8, 48))
        assert sorted(scores) == sorted(placed) == [8, 48]
        assert [scores[k]["runs"] for k in (8, 48)] == [8, 48]
        assert placed[48][:8] == placed[8]  # the runs so far, at each checkpoint
        assert scores[48]["compute"] > scores[8]["compute"] and scores[48]["covered"] is None
        for k in errors:
            errors[k].append(abs(scores[k]["error"]))
        if i < 3:
            rngs = (np.random.default_rng(100 + i), np.random.default_rng(200 + i))
            per_compute, _ = FitOracle.adaptive(s, truth, rngs, (48,), cost_power=1.0)
            compute[0.0] += scores[48]["compute"]
            compute[1.0] += per_compute[48]["compute"]
    assert np.median(errors[48]) < 0.5 * np.median(errors[8])
    assert compute[1.0] < 0.8 * compute[0.0]


def test_the_form_picking_fit_tells_the_forms_apart_and_reads_as_the_true_form_does():
    """``pick`` is not told the form: on a study's designed runs it picks the truth's family
    from the five (graded and bimodal here), and then reads x80 as the fit told the form."""
    s = make_settings()
    for family, seed in (("graded", 4), ("bimodal", 5)):
        truth = draw_family_truth(np.random.default_rng(seed), family, d80_range=(40.0, 40.0))
        runs, sd, cov = FitOracle.runs(s, truth, np.random.default_rng(seed), 48)
        picked = FitOracle.pick(s, truth, runs)
        assert picked["picked_true"] and picked["runs"] == 48 and picked["covered"] is None
        told = FitOracle.scored(s, truth, runs, sd, cov)
        assert abs(picked["error"] - told["error"]) < 0.05
