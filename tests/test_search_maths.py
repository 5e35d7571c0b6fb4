"""The transition-search maths: posterior, policy, fit, estimate and the simulated benchmark."""

import dataclasses
import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hyp_settings
from hypothesis import strategies as st

from threshold.errors import ConfigError
from threshold.search.bench import families
from threshold.search.bench.benchmark import bench_search
from threshold.search.bench.simulate import (
    ResponseModel,
    listops_params,
    listops_table,
    make_truth,
    sample_accuracy,
)
from threshold.search.fit import fit_logistic, transition_estimate
from threshold.search.policy import bracket, decide, posterior_summary, search_range
from threshold.search.posterior import level_fraction
from threshold.search.settings import SearchSettings

TABLE = listops_table(4, 512)
MODEL = ResponseModel()
CHANCE = MODEL.unlearned_mean


def make_settings(**kwargs) -> SearchSettings:
    return SearchSettings(TABLE, chance=CHANCE, **kwargs)


def runs_at(settings, truth, sizes, seeds, rng):
    """(d, accuracy) for every size x seeds, drawn from the simulated truth."""
    return [
        (int(d), sample_accuracy(rng, MODEL, truth, float(settings.x_of(d))))
        for d in sizes
        for _ in range(seeds)
    ]


def drive(settings, truth, rng, max_runs=60):
    """decide() in a loop with one worker; returns the runs and the final decision."""
    completed = []
    for _ in range(max_runs):
        decision = decide(settings, completed, [])
        if decision.stop:
            return completed, decision
        completed.append(
            (decision.d, sample_accuracy(rng, MODEL, truth, float(settings.x_of(decision.d))))
        )
    return completed, decide(settings, completed, [])


def test_param_table_matches_the_model():
    from threshold.model import ModelConfig, param_count

    for d in (4, 10, 33, 128, 512):
        assert listops_params(d) == param_count(ModelConfig(22, 60, d))["total"]
    assert dict(TABLE)[64] == param_count(ModelConfig(22, 60, 64))["total"]


@pytest.mark.parametrize(("d80", "slope"), [(20.0, 3.0), (60.0, 2.0), (150.0, 5.0)])
def test_planted_curve_recovered_and_interval_narrows(d80, slope):
    s = make_settings()
    truth = make_truth(MODEL, d80, slope)
    sizes = sorted({s.nearest(v) for v in np.geomspace(8, 400, 12)})
    few, _ = posterior_summary(s, runs_at(s, truth, sizes, 2, np.random.default_rng(1)))
    many, _ = posterior_summary(s, runs_at(s, truth, sizes, 8, np.random.default_rng(2)))
    for summary in (few, many):
        assert summary.x80_lo <= truth.x80 <= summary.x80_hi
        assert summary.mid_lo <= truth.mid <= summary.mid_hi
    assert many.ratio < few.ratio
    assert abs(many.asymptote_mean - truth.asymptote) < 0.03


def test_bimodal_seeds_keep_the_asymptote_and_centre():
    """Half the seeds at the transition learn, half stay at chance, one ends half-learned."""
    s = make_settings()
    truth = make_truth(MODEL, 48.0, 3.0)
    mid_d = float(s.d_of(truth.mid))
    runs = [(16, 0.15), (20, 0.14), (24, 0.17), (128, 0.98), (160, 0.97), (200, 0.99)]
    near = s.nearest(mid_d)
    runs += [(near, 0.97), (near, 0.15), (near, 0.98), (near, 0.16), (near, 0.55)]
    summary, _ = posterior_summary(s, runs)
    assert abs(summary.asymptote_mean - 0.975) < 0.03  # unlearned seeds do not drag A down
    assert summary.mid_lo <= float(s.x_of(near)) <= summary.mid_hi
    assert summary.x80_lo <= truth.x80 <= summary.x80_hi


def test_runs_on_a_plateau_do_not_set_the_asymptote():
    """Learners near the transition stall at 0.85, the largest reach 0.98 (ADD mod 10): the
    asymptote is the top, and the 80% point where the mean curve reaches 0.8 of it. Read
    without plateaus, the stalled runs are partly learned ones and the interval misses."""
    from threshold.search.bench.families import draw_family_truth
    from threshold.search.posterior import PosteriorSettings

    s = make_settings()
    truth = draw_family_truth(np.random.default_rng(5), "plateau", d80_range=(30.0, 30.0))
    rng = np.random.default_rng(6)
    sizes = sorted({s.nearest(v) for v in np.geomspace(8, 256, 12)})
    runs = [(d, truth.sample(rng, float(s.x_of(d)))) for d in sizes for _ in range(4)]
    assert len([y for _, y in runs if 0.8 < y < 0.9]) >= 6
    summary, _ = posterior_summary(s, runs)
    without, _ = posterior_summary(
        make_settings(posterior=PosteriorSettings(plateau_gaps=())), runs
    )
    assert summary.asymptote_mean > 0.93
    assert summary.x80_lo <= truth.x80 <= summary.x80_hi
    assert not without.x80_lo <= truth.x80 <= without.x80_hi
    assert abs(summary.x80_median - truth.x80) < 0.25 < abs(without.x80_median - truth.x80)


def test_initial_bracket_is_fixed_and_shared_by_workers():
    s = make_settings()
    hi, lo, mid = bracket(s)
    assert (hi, lo) == (s.d_hi, s.d_lo)
    assert abs(float(s.x_of(mid)) - 0.5 * float(s.x_of(lo) + s.x_of(hi))) < 0.1
    first = decide(s, [], [])
    assert (first.d, first.replicate, first.reason) == (hi, 0, "bracket")
    assert decide(s, [(hi, 0.97)], []).d == lo
    assert decide(s, [], [hi]).d == lo  # a second worker takes the next bracket size
    assert decide(s, [(hi, 0.97)], [lo]).d == mid
    assert decide(s, [(hi, 0.97), (lo, 0.15)], []).d == mid


def test_repeats_happen_with_replicate_index():
    s = make_settings()
    completed, _ = drive(s, make_truth(MODEL, 50.0, 3.0), np.random.default_rng(3))
    sizes = [d for d, _ in completed]
    assert max(sizes.count(d) for d in set(sizes)) >= 3
    # the replicate index is the number of earlier runs at that size
    decision = decide(s, completed, [])
    if not decision.stop:
        assert decision.replicate == sizes.count(decision.d)


@pytest.mark.parametrize(("d80", "side"), [(7.0, "low"), (330.0, "high")])
def test_widening_beyond_the_initial_range(d80, side):
    s = make_settings(d_lo=16)  # 7 lies below this range, 330 above it
    truth = make_truth(MODEL, d80, 3.0)
    completed, _ = drive(s, truth, np.random.default_rng(4))
    sizes = [d for d, _ in completed]
    if side == "low":
        assert min(sizes) < s.d_lo
    else:
        assert max(sizes) > s.d_hi
    assert s.d_min <= min(sizes) and max(sizes) <= s.d_max
    summary, d_range = posterior_summary(s, completed)
    assert d_range == search_range(s, sizes)
    # the estimate lies beyond the initial edge, near the truth (one trajectory: a 90% interval
    # may miss it, as it does here by 0.13 nats after an unlearned run at d = 8 against d80 = 7)
    edge = float(s.x_of(s.d_lo if side == "low" else s.d_hi))
    assert (summary.x80_median < edge) if side == "low" else (summary.x80_median > edge)
    assert abs(summary.x80_median - truth.x80) < 0.5


def test_pending_trials_spread_parallel_workers():
    s = make_settings()
    truth = make_truth(MODEL, 60.0, 3.0)
    completed = runs_at(s, truth, bracket(s), 1, np.random.default_rng(5))
    completed += runs_at(s, truth, [40, 60, 80], 1, np.random.default_rng(6))
    alone = decide(s, completed, [])
    crowded = decide(s, completed, [alone.d] * 3)
    assert crowded.d != alone.d
    assert crowded.replicate == [d for d, _ in completed].count(crowded.d)
    # the order pending trials come in does not matter
    assert decide(s, completed, [alone.d, 30, 90]).d == decide(s, completed, [90, alone.d, 30]).d


def test_stop_on_precision_and_on_budget():
    s = make_settings(budget=80)
    truth = make_truth(MODEL, 40.0, 4.0)
    _, final = drive(s, truth, np.random.default_rng(7), max_runs=80)
    assert final.stop and final.reason == "precision"
    assert final.estimate["ratio"] <= s.precision
    lo, hi = np.log(final.estimate["interval_params"])
    assert lo <= truth.x80 <= hi

    small = make_settings(budget=5)
    runs = runs_at(small, truth, [128, 16, 47], 1, np.random.default_rng(8))
    assert not decide(small, runs, [30]).stop
    stopped = decide(small, runs, [30, 40])
    assert stopped.stop and stopped.reason == "budget" and stopped.d is None


def test_decisions_are_deterministic():
    s = make_settings()
    truth = make_truth(MODEL, 80.0, 2.5)
    completed = runs_at(s, truth, [16, 47, 70, 100, 128], 2, np.random.default_rng(9))
    first = decide(s, completed, [64])
    assert decide(s, list(completed), [64]) == first
    assert decide(s, completed[::-1], [64]).d == first.d
    json.dumps(first.to_dict())


def test_level_definition_switch():
    assert level_fraction(1.0, 0.15, 0.8, True) == pytest.approx(0.8)
    assert level_fraction(1.0, 0.15, 0.8, False) == pytest.approx((0.8 - 0.15) / 0.85)
    truth = make_truth(MODEL, 60.0, 3.0)
    paper, corrected = make_settings(), make_settings(chance_corrected=True)
    runs = runs_at(paper, truth, [16, 32, 47, 64, 90, 128], 3, np.random.default_rng(10))
    x_paper = posterior_summary(paper, runs)[0].x80_median
    x_corrected = posterior_summary(corrected, runs)[0].x80_median
    assert x_corrected > x_paper  # c + 0.8 (A - c) sits above 0.8 A
    est = transition_estimate(corrected, runs)
    assert est["chance_corrected"] is True
    assert est["params_p80"] > transition_estimate(paper, runs)["params_p80"]


def test_fit_logistic_recovers_clean_curve():
    x = np.repeat(np.linspace(7.0, 13.0, 15), 2)  # (30,)
    rng = np.random.default_rng(11)
    lower, upper, mid, slope = 0.12, 0.96, 10.0, 2.5
    y = lower + (upper - lower) / (1 + np.exp(-slope * (x - mid))) + rng.normal(0, 0.005, x.size)
    fit = fit_logistic(x, y, chance=0.12)
    assert fit is not None
    assert fit.lower == pytest.approx(lower, abs=0.02)
    assert fit.upper == pytest.approx(upper, abs=0.02)
    assert fit.midpoint == pytest.approx(mid, abs=0.05)
    assert fit.slope == pytest.approx(slope, rel=0.1)
    frac = (0.8 * fit.upper - fit.lower) / (fit.upper - fit.lower)
    assert fit.x80 == pytest.approx(fit.midpoint + np.log(frac / (1 - frac)) / fit.slope)
    corrected = fit_logistic(x, y, chance=0.12, chance_corrected=True)
    assert corrected.x80 > fit.x80
    assert fit_logistic(x[:4], y[:4], chance=0.12) is None  # too few runs
    with pytest.raises(ConfigError):
        fit_logistic(x, y[:-1], chance=0.12)


def test_transition_estimate_is_small_json():
    s = make_settings()
    truth = make_truth(MODEL, 70.0, 3.0)
    completed, _ = drive(s, truth, np.random.default_rng(12))
    est = transition_estimate(s, completed)
    text = json.dumps(est)
    assert len(text) < 2000
    for key in ("params_p80", "d_p80", "midpoint_params", "midpoint_d", "asymptote"):
        assert type(est[key]) is float
    for key in ("interval_params", "interval_d", "midpoint_interval_params"):
        lo, hi = est[key]
        assert type(lo) is float and lo < hi
    assert est["interval_d"][0] <= est["d_p80"] <= est["interval_d"][1]
    assert est["n_runs"] == len(completed)
    spread = est["seed_spread"]
    assert spread["n_near"] >= 1 and 0 <= spread["learned_share"] <= 1
    assert spread["runs_for_precision"] >= len(completed)


def test_cost_power_trades_compute_for_sharpness_per_run():
    """The look-ahead scores a size by gain / cost ** cost_power: at 1 (the default) gain per
    unit of compute, at 0 gain per run, so the size it picks then gains at least as much."""
    hi, lo, mid = bracket(make_settings())
    completed = [(hi, 0.97), (lo, 0.11), (mid, 0.12), (hi, 0.96), (mid, 0.95)]
    per_cost = decide(make_settings(), completed, [])
    per_run = decide(make_settings(cost_power=0.0), completed, [])
    for decision in (per_cost, per_run):
        assert decision.reason == "psi" and decision.info["cost"] > 0
    assert per_cost.info["score"] == pytest.approx(
        per_cost.info["gain"] / per_cost.info["cost"], rel=2e-3
    )
    assert per_run.info["score"] == pytest.approx(per_run.info["gain"], rel=2e-3)
    assert per_run.info["gain"] >= per_cost.info["gain"] * (1 - 1e-3)
    assert per_run.d >= per_cost.d  # the larger run is the dearer one


def test_bad_settings_are_refused():
    from threshold.search.posterior import PosteriorSettings

    with pytest.raises(ConfigError, match="budget"):
        make_settings(budget=2)
    with pytest.raises(ConfigError, match="d_lo"):
        make_settings(d_lo=600)
    with pytest.raises(ConfigError):
        make_settings(d_lo=128, d_hi=16)
    with pytest.raises(ConfigError, match="precision"):
        make_settings(precision=1.0)
    with pytest.raises(ConfigError, match="cost_power"):
        make_settings(cost_power=-0.5)
    s = make_settings()
    with pytest.raises(ConfigError, match="not an allowed size"):
        decide(s, [(1000, 0.5)], [])
    with pytest.raises(ConfigError, match="accuracies"):
        decide(s, [(16, 1.5)], [])
    with pytest.raises(ConfigError, match="plateau_prior"):
        PosteriorSettings(plateau_prior=1.0)
    with pytest.raises(ConfigError, match="plateau_gaps"):
        PosteriorSettings(plateau_gaps=(0.1, -0.1))


def test_a_decision_at_48_runs_adds_one_run_and_its_cache_is_bounded(monkeypatch):
    """The next decision of a 48-run study (its first 47 runs decided before, the last one in
    the middle of the sizes) sums only the new run's size, once (the look-ahead reads the
    reading's posterior), and the same decision from an empty cache is the same (what makes it
    fast, about 0.05 s against 1 s on a quiet core: the timing is a benchmark's, not a test's);
    the state cache stays within its 100 MB, however many studies it has seen."""
    from threshold.search import policy

    s = make_settings(budget=100, precision=1.01)
    truth = make_truth(MODEL, 60.0, 3.0)
    sizes = [12, 16, 24, 32, 47, 56, 64, 80, 100, 128, 200, 256]
    completed = runs_at(s, truth, sizes, 4, np.random.default_rng(13))  # 48 runs
    completed.append(completed.pop(27))  # the last run at d = 64
    decide(s, completed[:-1], [64, 80])  # the decision before: caches warm
    added, real = [], policy._added
    monkeypatch.setattr(policy, "_added", lambda *a: added.append(len(a[2]) - a[3]) or real(*a))
    decision = decide(s, completed, [64, 80])
    assert added == [1]  # one group: the new run, on the state of the 47 before
    policy._STATES.clear()
    assert decide(s, completed, [64, 80]) == decision
    assert not decision.stop
    for seed in range(3):  # other studies fill the cache; it drops the oldest
        decide(s, runs_at(s, truth, sizes[seed::3], 2, np.random.default_rng(seed)), [])
    assert 0 < policy._STATES.nbytes <= policy._STATES.max_bytes <= 100 * 2**20


def test_the_likelihood_bounds_hold_and_a_subset_gets_the_same_terms():
    """``size_log_likelihood_bounds`` bracket the exact terms on a grid with plateaus (whose
    split between plateau and top the bounds leave open), and the exact terms of a subset of
    hypotheses are those of the whole grid."""
    from threshold.search import posterior as post

    grid = post.make_grid(post.PosteriorSettings(), CHANCE, 0.8, False, 8.0, 12.0)
    rows = np.arange(0, grid.mid.size, 5)
    for x, y in [(10.0, [0.15, 0.97, 0.5, 0.86]), (11.5, [0.98, 0.9, 0.85, 0.1]), (8.5, [0.13])]:
        exact = post.size_log_likelihood(grid, x, y)
        np.testing.assert_array_equal(post.size_log_likelihood(grid, x, y, rows), exact[:, rows])
        lo, hi = post.size_log_likelihood_bounds(grid, x, y, rows)
        assert np.all(lo <= exact[:, rows] + 1e-9) and np.all(exact[:, rows] <= hi + 1e-9)


def test_pruning_changes_no_estimate():
    """Hypotheses pruned after each group of runs (30 nats below the likeliest) carry no mass
    a summary can see: the same medians and intervals as the whole grid, to 1e-4 nats (quantiles are
    interpolated between hypotheses, and the pruned grid has fewer to interpolate between)."""
    from threshold.search.settings import with_overrides

    s = make_settings()
    truth = make_truth(MODEL, 40.0, 2.5)
    runs = runs_at(s, truth, [8, 16, 24, 32, 48, 64, 128], 2, np.random.default_rng(4))
    pruned, _ = posterior_summary(s, runs)
    whole, _ = posterior_summary(with_overrides(s, {"prune_nats": 1e9}), runs)
    shuffled, _ = posterior_summary(s, [runs[i] for i in np.random.default_rng(5).permutation(14)])
    for name in ("x80_median", "x80_lo", "x80_hi", "mid_median", "asymptote_mean"):
        assert getattr(pruned, name) == pytest.approx(getattr(whole, name), abs=1e-4)
        # runs are added in the order they came, pruned after each: another order drops
        # other hypotheses on the way, none with mass a summary can see
        assert getattr(shuffled, name) == pytest.approx(getattr(whole, name), abs=1e-4)


_ANY_TRIALS = (
    st.lists(st.tuples(st.integers(4, 512), st.floats(0.0, 1.0)), min_size=3, max_size=12),
    st.lists(st.integers(4, 512), max_size=3),
)


def _an_allowed_size(completed, pending):
    s = make_settings()
    decision = decide(s, completed, pending)
    if not decision.stop:
        assert s.d_min <= decision.d <= s.d_max
        used = [d for d, _ in completed] + pending
        assert decision.replicate == used.count(decision.d)
    json.dumps(decision.to_dict())


# Each example sums its runs on a grid of its own (a cold decision): 6 here, 30 in the long form.
@hyp_settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(*_ANY_TRIALS)
def test_any_trials_give_an_allowed_size(completed, pending):
    _an_allowed_size(completed, pending)


@pytest.mark.slow
@hyp_settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(*_ANY_TRIALS)
def test_any_trials_give_an_allowed_size_long(completed, pending):
    _an_allowed_size(completed, pending)


@pytest.mark.parametrize("n_studies", [5, pytest.param(8, marks=pytest.mark.slow)])
def test_bench_search_small(n_studies):
    # 5 studies: compute 0.16 (0.15 median) of the grid's, coverage 1.0, width 2.44x
    result = bench_search(n_studies=n_studies, seed=1, methods=("policy", "grid"), n_boot=30)
    ours, grid = result["methods"]["policy"], result["methods"]["grid"]
    assert ours["mean_compute"] < 0.5 * grid["mean_compute"]
    assert ours["median_compute"] < 0.3 * grid["median_compute"]
    assert ours["coverage"] >= 0.75
    assert ours["median_width_ratio"] < 3.5
    assert "grid_posterior" in result["methods"]
    assert result["compute_vs_grid"]["grid"] == 1.0
    assert result["median_compute_vs_grid"]["policy"] < 0.3


@pytest.mark.parametrize(
    ("accuracy", "reason", "edge"), [(0.15, "above_range", 256), (0.975, "below_range", 4)]
)
def test_gives_up_when_the_transition_is_outside_the_allowed_sizes(accuracy, reason, edge):
    # sizes up to d = 256, one widening above the initial range: the same claim as with 512,
    # with fewer runs (every run at chance prunes nothing, so each costs the whole grid)
    s = SearchSettings(listops_table(4, 256), chance=CHANCE)
    completed, final = [], decide(s, [], [])
    while not final.stop:
        completed.append((final.d, accuracy))
        final = decide(s, completed, [])
    assert final.reason == reason
    assert edge in [d for d, _ in completed]
    assert len(completed) < s.budget


def test_graded_runs_are_read_as_graded_and_located():
    """Runs near a smooth curve (no bimodal seeds): the posterior picks a graded seed model and
    puts the 80% point near the curve's, not near its midpoint; a decision on these runs
    carries the same estimate, read on the reading's finer slope grid."""
    from threshold.search.bench.families import draw_family_truth

    s = make_settings()
    rng = np.random.default_rng(20)
    truth = draw_family_truth(rng, "graded")
    sizes = sorted({s.nearest(v) for v in np.geomspace(8, 256, 12)})
    runs = [(d, truth.sample(rng, float(s.x_of(d)))) for d in sizes for _ in range(3)]
    est = transition_estimate(s, runs)
    assert est["bimodal_share"] < 0.5
    lo, hi = np.log(est["interval_params"])
    assert lo <= truth.x80 <= hi
    assert abs(np.log(est["params_p80"]) - truth.x80) < 0.3
    # a decision reads the runs as the estimate does, but for the estimate's finer grid where
    # the mass lies (``refine_split``; the look-ahead's grid: 5% off)
    decision = decide(s, runs, [])
    coarse = transition_estimate(
        dataclasses.replace(s, posterior=dataclasses.replace(s.posterior, refine_split=1)), runs
    )
    for key in ("params_p80", "interval_params", "asymptote"):
        assert decision.estimate[key] == coarse[key]


def test_the_largest_runs_bound_the_asymptote():
    """MUL in MUL+SGN+IMG (S_3, CPU suite): runs climb slowly through 0.4-0.6 and one d = 48 run
    reaches 0.894; that run is no outlier, so the asymptote sits near it, not at the plateau."""
    s = make_settings(d_lo=8, d_hi=48)
    runs = [(8, 0.114), (8, 0.133), (11, 0.278), (15, 0.434), (18, 0.415), (18, 0.419),
            (18, 0.463), (18, 0.531), (21, 0.39), (21, 0.731), (23, 0.534), (23, 0.588),
            (23, 0.591), (26, 0.594), (26, 0.808), (48, 0.894)]  # fmt: skip
    est = transition_estimate(s, runs)
    assert est["asymptote"] > 0.85
    assert est["asymptote_interval"][0] >= 0.8


def test_plateau_maths_agree_with_the_outcome_model():
    """On a small grid with plateaus: each hypothesis's x80 is where its mean curve reaches the
    level, and the look-ahead's expected variance is the one summed bin by bin over the
    predicted outcomes of ``outcome_bins`` (the learned node split between plateau and top)."""
    from threshold.search import posterior as post

    cfg = post.PosteriorSettings(
        slopes=(1.5, 4.0),
        asymptotes=(0.8, 0.9, 1.0),
        concentrations=(0.02, 5.0),
        partial_shares=(0.1, 0.0),
        plateau_gaps=(0.15,),
        plateau_lengths=(1.0,),
    )
    grid = post.make_grid(cfg, CHANCE, 0.8, False, 8.0, 11.0)
    assert set(grid.gaps) == {0.0, 0.15}
    mean = post.hypothesis.mean_curve(
        grid.mid, grid.slope, *(v[grid.asym_index] for v in (grid.asymptotes, grid.gaps)),
        grid.lengths[grid.asym_index], CHANCE, grid.x80, cfg.link,
    )  # fmt: skip
    np.testing.assert_allclose(mean, 0.8 * grid.asymptotes[grid.asym_index], atol=1e-6)
    runs_x, runs_y = np.array([8.5, 9.5, 9.5, 10.5]), np.array([0.15, 0.84, 0.16, 0.98])
    w = post.normalize(post.log_likelihood(grid, runs_x, runs_y))
    x = np.array([9.0, 10.0])
    fast = post.expected_variance(grid, w, x)
    for j, xj in enumerate(x):
        bins = post.lookahead.outcome_bins(grid, float(xj)).reshape(w.size, -1)  # (H, B)
        s0, s1 = w @ bins, (w * grid.x80) @ bins
        s2 = (w * grid.x80**2) @ bins
        assert fast[j] == pytest.approx(float(np.sum(s2 - s1**2 / s0)), rel=1e-6)


def test_the_size_offset_sd_is_learned_from_the_runs():
    """Several offset sds: runs whose sizes stray from every smooth curve (20 seeds each, the
    middle size far below its neighbours) make the larger sd the likelier and widen the 80%
    point's interval; runs on a smooth curve favour the smaller one. One sd gives the single-sd
    likelihood exactly."""
    from threshold.search import posterior as post

    one = post.PosteriorSettings(size_logit_sds=(0.3,))
    pooled = post.PosteriorSettings(size_logit_sds=(0.3, 1.2), size_logit_weights=(0.9, 0.1))
    grids = [post.make_grid(cfg, CHANCE, 0.8, False, 8.0, 12.0) for cfg in (one, pooled)]
    x = np.repeat([9.6, 10.0, 10.4], 20)
    seed_rank = np.tile(np.arange(20) / 20, 3)
    favoured, ratios = [], []
    for shares in ([0.35, 0.15, 0.9], [0.2, 0.5, 0.8]):  # learned share of seeds at each size
        y = np.where(seed_rank < np.repeat(shares, 20), 0.97, CHANCE)
        terms = sum(post.size_log_likelihood(grids[1], xu, y[x == xu]) for xu in np.unique(x))
        assert terms.shape == (2, grids[1].mid.size)
        np.testing.assert_array_equal(post.size_sums(grids[1], x, y), terms)
        p_sd = post.offset_sd_posterior(pooled, grids[1].log_prior + terms)
        assert p_sd.sum() == pytest.approx(1.0)
        favoured.append(np.log(p_sd[1] / p_sd[0]) - np.log(0.1 / 0.9))  # the runs' log odds
        np.testing.assert_array_equal(post.log_likelihood(grids[0], x, y), terms[0])
        ratios.append(
            [
                post.summarize(
                    g, post.normalize(g.log_prior + post.log_likelihood(g, x, y)), 8.0, 12.0
                ).ratio
                for g in grids
            ]
        )
    assert favoured[0] > 2.0 and favoured[1] < 0.0  # e^2 for the large sd, then against it
    assert ratios[0][1] > 1.5 * ratios[0][0]  # the stray runs widen the interval
    assert ratios[1][1] < 1.5 * ratios[1][0]  # the smooth ones, less
    with pytest.raises(ConfigError, match="size_logit_sds"):
        post.PosteriorSettings(size_logit_sds=())
    with pytest.raises(ConfigError, match="size_logit_weights"):
        post.PosteriorSettings(size_logit_sds=(0.3, 1.2), size_logit_weights=(1.0,))


def test_slope_weights_set_the_slope_prior():
    """Slope weights give each slope its share of the prior (even weights: the default exactly),
    and runs near the 80% point, which tell the slope poorly, leave a narrower interval when the
    prior leans to steep slopes."""
    from threshold.search import posterior as post

    even = post.make_grid(post.PosteriorSettings(), CHANCE, 0.8, False, 8.0, 12.0)
    same = post.make_grid(
        post.PosteriorSettings(slope_weights=(2.0,) * 8), CHANCE, 0.8, False, 8.0, 12.0
    )
    np.testing.assert_array_equal(even.log_prior, same.log_prior)
    weights = (0.1, 0.3, 1, 1, 1, 1, 1, 1)
    steep = post.make_grid(
        post.PosteriorSettings(slope_weights=weights), CHANCE, 0.8, False, 8.0, 12.0
    )
    mass = [np.exp(steep.log_prior[steep.slope == s]).sum() for s in steep.slopes]
    np.testing.assert_allclose(mass, np.asarray(weights) / sum(weights))
    x = np.repeat([9.8, 10.2], 12)
    y = np.where(np.tile(np.arange(12) / 12, 2) < np.repeat([0.3, 0.8], 12), 0.97, CHANCE)
    ratios = [
        post.summarize(
            g, post.normalize(g.log_prior + post.log_likelihood(g, x, y)), 8.0, 12.0
        ).ratio
        for g in (even, steep)
    ]
    assert ratios[1] < 0.95 * ratios[0]
    with pytest.raises(ConfigError, match="slope_weights"):
        post.PosteriorSettings(slope_weights=(1.0, 2.0))


def test_repeats_pay_for_bimodal_seeds_not_for_graded_runs():
    from threshold.search.policy import posterior_of, repeat_discount
    from threshold.search.posterior import normalize

    s = make_settings()
    x = float(s.x_of(40))
    bimodal = [(128, 0.98), (16, 0.15), (40, 0.15), (40, 0.97), (40, 0.16), (40, 0.98)]
    graded = [(128, 0.98), (16, 0.15), (40, 0.55), (40, 0.57), (40, 0.56), (40, 0.54)]
    shares = []
    for runs in (bimodal, graded):
        grid, log_w, _ = posterior_of(s, runs)
        used = s.x_of(np.array([d for d, _ in runs]))
        shares.append(repeat_discount(s, grid, normalize(log_w), np.array([x]), used)[0])
    assert shares[0] > 0.8  # seeds that disagree: the fifth run at d = 40 still pays
    assert shares[1] < 0.6  # seeds that agree: it is mostly a repeat


@pytest.mark.parametrize("family", ["bimodal", "graded", "shallow", "partial", "plateau"])
def test_family_truth_is_where_the_mean_curve_reaches_the_level(family):
    from threshold.search.bench.families import draw_family_truth

    rng = np.random.default_rng(21)
    truth = draw_family_truth(rng, family)
    assert float(truth.mean(truth.x80)) == pytest.approx(0.8 * truth.asymptote, abs=1e-4)
    draws = [truth.sample(rng, truth.x80) for _ in range(3000)]
    assert np.mean(draws) == pytest.approx(0.8 * truth.asymptote, abs=0.03)
    corrected = draw_family_truth(np.random.default_rng(21), family, chance_corrected=True)
    lift = corrected.chance + 0.8 * (corrected.asymptote - corrected.chance)
    assert float(corrected.mean(corrected.x80)) == pytest.approx(lift, abs=1e-4)


def test_the_spread_design_runs_the_bracket_then_around_the_true_80_point():
    """The benchmark's place-known design: the bracket first, then its runs taken in turn from
    sizes within 1 / slope of x80 (nearest allowed d), on both sides of it."""
    from threshold.search.bench.benchmark import _spread_runs
    from threshold.search.bench.families import draw_family_truth
    from threshold.search.policy import bracket

    s = make_settings()
    truth = draw_family_truth(np.random.default_rng(5), "partial", d80_range=(40.0, 40.0))
    runs = _spread_runs(s, truth, np.random.default_rng(0), 21)
    ds = [d for d, _ in runs]
    assert len(runs) == 21 and tuple(ds[:3]) == bracket(s)
    rel = (s.x_of(np.array(ds[3:])) - truth.x80) * truth.slope
    assert rel.min() < -0.7 and rel.max() > 0.7 and np.all(np.abs(rel) <= 1.2)
    assert ds[3:12] == ds[12:21]  # nine sizes, each in turn
    assert all(0 <= y <= 1 for _, y in runs)


def test_the_oracle_runs_where_runs_tell_most_and_needs_runs_as_seeds_spread():
    """Learn-or-not seeds are most telling near the midpoint, not at the 80% point, and need many
    runs to pin x80; graded runs that agree need one or two. Halving the interval's log width
    takes four times the runs, and the oracle's error shrinks as runs grow."""
    from threshold.search.bench.benchmark import _Oracle
    from threshold.search.bench.families import draw_family_truth

    s = make_settings()
    bimodal = draw_family_truth(np.random.default_rng(4), "bimodal", d80_range=(40.0, 40.0))
    graded = draw_family_truth(np.random.default_rng(4), "graded", d80_range=(40.0, 40.0))
    oracle = _Oracle.of(bimodal, np.random.default_rng(0))
    assert oracle.x < bimodal.x80
    n = oracle.runs_to(s.precision)
    assert _Oracle.of(graded, np.random.default_rng(0)).runs_to(s.precision) <= 2 < n
    assert oracle.runs_to(float(np.sqrt(s.precision))) == pytest.approx(4 * n, rel=0.1)
    errors = {
        k: np.median(
            [
                abs(oracle.scored(s, bimodal, np.random.default_rng(i), k)["error"])
                for i in range(40)
            ]
        )
        for k in (4, 64)
    }
    assert errors[64] < 0.5 * errors[4]


@pytest.mark.parametrize(
    "family", ["bimodal", "graded", "shallow", "partial", "plateau", "censored"]
)
def test_a_family_likelihood_is_its_sampler_s_and_places_the_truth(family):
    """The shape-unknown oracle's seed models: each family's likelihood is a distribution (its
    density and the clipped mass at 0 and 1 sum to 1) with the sampler's mean and share of runs
    above 0.5, and the mean curve's where censoring does not hide learners; the curve's 80%
    point, as a function of (place, slope, ceiling), is the truth's at the true parameters."""
    from threshold.search.bench.families import (
        ceiling_of,
        curve_x80,
        draw_family_truth,
        log_likelihood,
    )

    truth = draw_family_truth(np.random.default_rng(7), family, d80_range=(40.0, 40.0))
    ceiling = ceiling_of(truth)
    assert curve_x80(family, truth.mid, truth.slope, ceiling, 0.8, False) == pytest.approx(
        truth.x80, abs=1e-9
    )
    ys = np.linspace(0.0, 1.0, 5001)[1:-1]
    step, rng = ys[1] - ys[0], np.random.default_rng(1)
    for z in np.array([-1.0, 0.0, 1.0]) / truth.slope:
        lik = np.exp(log_likelihood(family, np.full(ys.size, z), ys, truth.slope, ceiling))
        ends = np.exp(
            log_likelihood(family, np.full(2, z), np.array([0.0, 1.0]), truth.slope, ceiling)
        )
        mean = (lik * ys).sum() * step + ends[1]
        draws = np.array([truth.sample(rng, truth.mid + z) for _ in range(4000)])
        assert lik.sum() * step + ends.sum() == pytest.approx(1.0, abs=0.01)
        assert mean == pytest.approx(np.mean(draws), abs=0.02)
        if family != "censored":
            assert mean == pytest.approx(float(truth.mean(truth.mid + z)), abs=0.01)
        above = lik[ys > 0.5].sum() * step + ends[1]
        assert above == pytest.approx(np.mean(draws > 0.5), abs=0.03)


@pytest.mark.slow  # a minute of CPU; the default suite keeps test_bench_search_small
def test_bench_families_small():
    from threshold.search.bench.benchmark import bench_families

    result = bench_families(n_studies=2, seed=3, families=("graded", "plateau"), checkpoints=(6, 9))
    for family in ("graded", "plateau"):
        rows = result["families"][family]
        keys = {
            "6",
            "9",
            "stop",
            "grid",
            "spread",
            "oracle",
            "oracle_stop",
            "oracle_6",
            "oracle_fit",
            "seconds",
        }
        assert set(rows) == keys
        ratios = {k: m["x_oracle"] for k, m in rows.items() if k != "seconds" and "x_oracle" in m}
        against = {k: ratio["against"] for k, ratio in ratios.items()}
        assert against == {
            "6": "oracle_6",
            "9": "oracle",
            "stop": "oracle_stop",
            "spread": "oracle",
            "oracle_fit": "oracle",
        }
        assert rows["6"]["median_runs"] == 6 and rows["9"]["median_runs"] == 9
        assert rows["grid"]["compute_vs_grid"] == pytest.approx(1.0)
        assert rows["spread"]["median_runs"] == 9
        for key in ("6", "9", "stop", "spread"):
            assert 0 <= rows[key]["coverage"] <= 1 and 0 <= rows[key]["within_20"] <= 1
        assert rows["oracle"]["coverage"] is None and rows["oracle"]["median_runs"] == 9
        assert rows["oracle_stop"]["coverage"] is None and rows["oracle_stop"]["median_runs"] >= 1
        assert rows["oracle_fit"]["coverage"] is None and rows["oracle_fit"]["median_runs"] == 9
    with pytest.raises(ConfigError, match="families"):
        bench_families(n_studies=1, families=("smooth",))


def test_bench_families_rows_are_computed_alone_with_the_same_numbers():
    """``rows`` computes only the rows asked for, each from its own stream: the oracles' rows
    alone are those of a study that also ran the grid, and a row not known is refused."""
    from threshold.search.bench.benchmark import bench_families

    kw = {"n_studies": 1, "seed": 2, "families": ("graded",), "checkpoints": (6,)}
    alone = bench_families(rows=("oracle", "oracle_fit"), **kw)["families"]["graded"]
    assert set(alone) == {"oracle", "oracle_stop", "oracle_fit", "seconds"}
    read = bench_families(rows=("oracle_fit_read",), **kw)["families"]["graded"]
    assert (
        set(read) == {"oracle_fit_read", "seconds"} and read["oracle_fit_read"]["median_runs"] == 6
    )
    assert 0 <= read["oracle_fit_read"]["coverage"] <= 1
    wide = bench_families(rows=("oracle_fit_wide",), **kw)["families"]["graded"]
    assert set(wide) == {"oracle_fit_wide", "seconds"}
    assert wide["oracle_fit_wide"]["coverage"] is None
    assert wide["oracle_fit_wide"]["median_runs"] == 6
    adaptive = bench_families(rows=("oracle_fit_adaptive",), **kw)["families"]["graded"]
    assert set(adaptive) == {"oracle_fit_adaptive_6", "seconds"}
    assert adaptive["oracle_fit_adaptive_6"]["median_runs"] == 6
    cost = bench_families(rows=("oracle_fit_adaptive_cost",), **kw)["families"]["graded"]
    assert set(cost) == {"oracle_fit_adaptive_cost_6", "oracle_fit_adaptive_cost_read_6", "seconds"}
    fitted, read = cost["oracle_fit_adaptive_cost_6"], cost["oracle_fit_adaptive_cost_read_6"]
    assert fitted["compute_vs_grid"] == read["compute_vs_grid"]  # the same runs, read two ways
    assert fitted["coverage"] is None and 0 <= read["coverage"] <= 1
    # the form-picking fit reads our sampler's runs (and, with the cost fit, that fit's runs)
    sampler = bench_families(rows=("sampler",), **kw)["families"]["graded"]
    rows = ("oracle_fit_pick", "oracle_fit_adaptive_cost")
    pick = bench_families(rows=rows, **kw)["families"]["graded"]
    assert {"oracle_fit_pick_6", "oracle_fit_adaptive_cost_pick_6"} <= set(pick)
    ours = pick["oracle_fit_pick_6"]
    assert ours["compute_vs_grid"] == sampler["6"]["compute_vs_grid"]  # our runs, read by a fit
    assert ours["coverage"] is None and 0 <= ours["picked_true_form"] <= 1
    assert pick["oracle_fit_adaptive_cost_pick_6"]["compute_vs_grid"] == read["compute_vs_grid"]
    # read_settings reads the sampler's runs again: under the sampler's own settings, its row
    same = SearchSettings(listops_table(), chance=families.CHANCE)  # bench_families' default
    again = bench_families(rows=("oracle",), read_settings=same, **kw)["families"]["graded"]
    assert again["sampler_read_6"].pop("x_oracle")["against"] == "oracle"  # with the oracle row
    assert again["sampler_read_6"] == sampler["6"]
    other = SearchSettings(listops_table(4, 256), chance=families.CHANCE)
    with pytest.raises(ConfigError, match="size table"):
        bench_families(rows=("sampler",), read_settings=other, **kw)
    more = bench_families(rows=("grid", "oracle", "oracle_fit"), **kw)["families"]["graded"]
    for key in ("oracle", "oracle_stop", "oracle_fit"):
        assert alone[key] == more[key]
    with pytest.raises(ConfigError, match="rows"):
        bench_families(rows=("truths",), **kw)


def test_a_bench_study_reads_its_own_stop_and_checkpoints_off_one_trajectory():
    """The own stop's runs are the stop-off trajectory's first ones, whichever ends first: here
    the own budget (5) lies beyond the last checkpoint (4), so the trajectory goes on to it."""

    from threshold.search.bench.benchmark import trajectory
    from threshold.search.bench.families import CHANCE as FAMILY_CHANCE
    from threshold.search.bench.families import draw_family_truth

    settings = SearchSettings(TABLE, chance=FAMILY_CHANCE, precision=1.0 + 1e-9, budget=5)
    off = dataclasses.replace(settings, budget=4)
    truth = draw_family_truth(np.random.default_rng(0), "plateau", 0.8, False)
    rng = np.random.default_rng(1)

    def draw(d: int) -> tuple[int, float]:
        return d, truth.sample(rng, float(settings.x_of(d)))

    own, at, path = trajectory(settings, off, draw, (3, 4))
    assert len(own) == 5 and [len(at[n]) for n in (3, 4)] == [3, 4]
    runs, again = [], np.random.default_rng(1)  # the same draws, by hand
    for _ in range(3):
        d = decide(settings, runs, []).d
        runs.append((d, truth.sample(again, float(settings.x_of(d)))))
    assert at[3] == runs and own[:3] == runs  # the own stop's runs are the trajectory's first
    assert path[:3] == runs and len(path) == len(own)  # the trajectory's runs come back


def test_overrides_change_the_named_settings_and_are_checked():
    from threshold.search.settings import with_overrides

    base = make_settings()
    assert with_overrides(base, {}) == base
    changed = with_overrides(base, {"size_sd": 0.05, "plateau_lengths": [0.75, 1.5], "budget": 3})
    assert changed.size_sd == 0.05 and changed.budget == 3
    assert changed.posterior.plateau_lengths == (0.75, 1.5)
    assert changed.params_of_d == base.params_of_d and changed.precision == base.precision
    assert changed.posterior.slopes == base.posterior.slopes
    truth = make_truth(MODEL, 40.0, 3.0)
    runs, decision = drive(changed, truth, np.random.default_rng(0))
    assert len(runs) == 3 and decision.reason == "budget"  # the bracket, then the new budget
    with pytest.raises(ConfigError, match="unknown setting params_of_d, slope:"):
        with_overrides(base, {"params_of_d": [], "slope": 1.0})
    with pytest.raises(ConfigError, match="budget 2"):
        with_overrides(base, {"budget": 2})
    with pytest.raises(ConfigError, match="size_sd"):
        with_overrides(base, {"size_sd": "x"})
    with pytest.raises(ConfigError, match=r"n_candidates 2\.5 .* type int"):
        with_overrides(base, {"n_candidates": 2.5})


def test_a_batched_search_spreads_its_rounds_and_keeps_its_budget():
    """Batch rounds (find --trials-at-once K, simulated): every round holds at most K runs,
    there are fewer rounds than runs, and the budget holds."""
    from threshold.search.bench.simulate import (
        ResponseModel,
        draw_truth,
        listops_table,
        run_policy_batched,
    )
    from threshold.search.settings import SearchSettings

    model = ResponseModel()
    settings = SearchSettings(listops_table(), chance=model.unlearned_mean, budget=24)
    truth = draw_truth(np.random.default_rng(3), model)
    row = run_policy_batched(settings, model, truth, np.random.default_rng(4), batch=8)
    assert row["runs"] <= 24
    assert row["rounds"] * 8 >= row["runs"] > row["rounds"]
