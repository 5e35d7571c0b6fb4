"""The posterior's curve form: its link (logistic, probit or cloglog), a size offset that keeps
each size's mean share on the smooth curve (``offset_keeps_mean``), and the finer slope grid the
runs are read with (``PosteriorSettings.reading``)."""

import dataclasses

import numpy as np
import pytest
from scipy.special import betaincinv, expit, ndtr

from threshold.errors import ConfigError
from threshold.search import posterior as post
from threshold.search.bench.simulate import listops_table
from threshold.search.policy import _look_ahead, posterior_of
from threshold.search.posterior.hypothesis import (
    LINKS,
    Z_GRID,
    mean_curve,
    mean_keeping_z,
    share_at,
)
from threshold.search.settings import SearchSettings

CHANCE = 0.15
SHARES = {
    "logistic": expit,
    "probit": ndtr,
    "cloglog": lambda z: 1.0 - np.exp(-np.exp(z)),
}


@pytest.mark.parametrize("link", LINKS)
def test_a_link_sets_the_curve_s_form_its_80_point_and_its_share_table(link):
    """Each hypothesis learns with share F(slope (x - mid)) of its link, its x80 is where that
    mean curve reaches the level, and the share table's mean share at each z is F(z)."""
    cfg = post.PosteriorSettings(link=link, slopes=(1.0, 3.0), asymptotes=(0.9, 1.0))
    grid = post.make_grid(cfg, CHANCE, 0.8, False, 8.0, 12.0)
    x = np.array([9.0, 10.5])
    mid, slope = grid.pairs()
    want = SHARES[link](slope[:, None] * (x[None, :] - mid[:, None]))
    np.testing.assert_allclose(grid.learn_prob(x), want, atol=1e-12)
    asym = grid.asymptotes[grid.asym_index]
    gaps, lengths = grid.gaps[grid.asym_index], grid.lengths[grid.asym_index]
    mean = mean_curve(grid.mid, grid.slope, asym, gaps, lengths, CHANCE, grid.x80, link)
    np.testing.assert_allclose(mean, 0.8 * asym, atol=1e-6)
    u = np.linspace(0.0, 1.0, cfg.n_nodes)
    table_mean = grid.share_table @ u  # (K, Z): E[node share] at each tabulated z
    inner = np.abs(Z_GRID) < 4
    want = np.broadcast_to(share_at(Z_GRID[inner], link), table_mean[:, inner].shape)
    np.testing.assert_allclose(table_mean[:, inner], want, atol=0.02)


def test_an_unknown_link_is_refused():
    with pytest.raises(ConfigError, match="link"):
        post.PosteriorSettings(link="tanh")


@pytest.mark.parametrize("link", LINKS)
@pytest.mark.parametrize("sd", [0.3, 1.2])
def test_the_mean_keeping_offset_averages_to_the_smooth_curve(link, sd):
    """Averaged over the likelihood's own offset nodes, F(h(z) + offset) is F(z), and h moves
    z away from the curve's flat ends (where the offset pulls the average back)."""
    cfg = post.PosteriorSettings()
    h = mean_keeping_z(sd, cfg.size_nodes, link)
    nodes, weights = np.polynomial.hermite_e.hermegauss(cfg.size_nodes)
    averaged = share_at(h[:, None] + sd * nodes[None, :], link) @ (weights / weights.sum())
    np.testing.assert_allclose(averaged, share_at(Z_GRID, link), atol=1e-5)
    f = share_at(Z_GRID, link)
    upper, lower = f > 0.75, f < 0.25
    assert np.all(h[upper] > Z_GRID[upper]) and np.all(h[lower] < Z_GRID[lower])


def test_single_runs_along_a_partly_learned_curve_keep_their_slope_with_the_mean_kept():
    """One run at each of 48 sizes along a logistic curve (slope 2), learned shares spread as a
    beta of concentration 5: a plain size offset (sd 1.2) averages to a flatter curve than its
    smooth one, so the posterior reads the smooth curve steeper than the runs' own and its 80%
    point low; with the mean kept it reads their slope, and x80 higher."""
    slope, asym, mid = 2.0, 0.95, 10.0
    x = np.linspace(8.5, 11.8, 48)
    p = expit(slope * (x - mid))
    q = (np.arange(x.size) * 0.618034 + 0.31) % 1  # quantiles spread over (0, 1)
    y = CHANCE + (asym - CHANCE) * betaincinv(5 * p, 5 * (1 - p), q)
    slopes, x80 = [], []
    for keep in (False, True):
        cfg = post.PosteriorSettings(
            slopes=(1.0, 1.5, 2.0, 3.0, 4.5),
            asymptotes=(asym,),
            concentrations=(5.0,),
            partial_shares=(0.0,),
            plateau_gaps=(),
            size_logit_sds=(1.2,),
            offset_keeps_mean=keep,
        )
        grid = post.make_grid(cfg, CHANCE, 0.8, False, 8.0, 12.0)
        w = post.normalize(grid.log_prior + post.log_likelihood(grid, x, y))
        slopes.append(float(np.exp(w @ np.log(grid.slope))))
        x80.append(post.summarize(grid, w, 8.0, 12.0).x80_median)
    assert slopes[0] > 2.2
    assert slopes[1] == pytest.approx(slope, rel=0.1)
    assert x80[1] > x80[0] + 0.05


def test_the_reading_splits_the_slope_grid_and_its_prior():
    """``reading`` splits each gap between slopes (sorted) into ``read_slope_split`` log-even
    ones, the slope prior interpolated in ln slope; a split of 1 reads with the slopes as they
    are, and one below 1 is refused."""
    cfg = post.PosteriorSettings(slopes=(4.0, 1.0), slope_weights=(4.0, 1.0), read_slope_split=2)
    fine = cfg.reading()
    np.testing.assert_allclose(fine.slopes, (1.0, 2.0, 4.0))
    np.testing.assert_allclose(fine.slope_weights, (1.0, 2.0, 4.0))
    assert fine.reading() is fine
    assert len(post.PosteriorSettings().reading().slopes) == 15
    assert len(post.PosteriorSettings(read_slope_split=3).reading().slopes) == 22
    with pytest.raises(ConfigError, match="read_slope_split"):
        post.PosteriorSettings(read_slope_split=0)


@pytest.mark.parametrize("slope", [1.8, 2.9, 4.3])
def test_graded_runs_below_the_80_point_read_closer_on_the_finer_slope_grid(slope):
    """Graded runs that lie mostly below the 80% point, on a curve whose slope falls between
    two of the look-ahead's slopes, put x80 where the curve drawn through them crosses the
    level: the reading's finer slope grid reads it closer to the truth than the coarse one."""
    x80, top = 10.0, 0.98
    share = (0.8 * top - CHANCE) / (top - CHANCE)
    mid = x80 - np.log(share / (1.0 - share)) / slope
    x = np.append(np.repeat(np.linspace(x80 - 3.0 / slope, x80 + 0.3, 6), 4), [12.5, 12.5])
    noise = np.random.default_rng(0).normal(0.0, 0.01, x.size)
    y = np.clip(CHANCE + (top - CHANCE) * expit(slope * (x - mid)) + noise, 0.0, 1.0)
    errors = []
    for split in (1, 2):
        cfg = dataclasses.replace(post.PosteriorSettings(), read_slope_split=split).reading()
        grid = post.make_grid(cfg, CHANCE, 0.8, False, 8.0, 13.0)
        w = post.normalize(grid.log_prior + post.log_likelihood(grid, x, y))
        errors.append(abs(post.summarize(grid, w, 8.0, 13.0).x80_median - x80))
    assert errors[1] < 0.7 * errors[0]


def test_the_look_ahead_reads_the_reading_s_hypotheses_on_its_own_slopes():
    """The look-ahead's posterior is the reading's restricted to the posterior's own slopes
    (``reading`` keeps them exactly), weights and all; where pruning left none of those, it is
    the reading's whole."""
    settings = SearchSettings(listops_table(4, 512), chance=CHANCE)
    runs = [(128, 0.98), (8, 0.12), (32, 0.6), (24, 0.4), (48, 0.9)]
    read, log_w, _ = posterior_of(settings, runs)
    grid, coarse = _look_ahead(settings, read, log_w)
    assert set(np.unique(grid.slope)) == set(settings.posterior.slopes)
    assert set(np.unique(read.slope)) > set(settings.posterior.slopes)
    kept = np.isin(read.slope, settings.posterior.slopes)
    np.testing.assert_array_equal(grid.x80, read.x80[kept])
    np.testing.assert_array_equal(coarse, log_w[kept])
    block = read.kappas.size * read.asymptotes.size
    between = np.flatnonzero(~np.isin(read.slope[::block], settings.posterior.slopes))
    only = post.restricted(read, between)
    rows = (between[:, None] * block + np.arange(block)).ravel()
    assert _look_ahead(settings, only, log_w[rows])[0] is only
