"""The posterior's curve form: its link (logistic, probit or cloglog)."""

import numpy as np
import pytest
from scipy.special import expit, ndtr

from threshold.errors import ConfigError
from threshold.search import posterior as post
from threshold.search.posterior.hypothesis import (
    _Z_GRID,
    LINKS,
    _mean_curve,
    _share_at,
)

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
    mid, slope = post.grid._pairs(grid)
    want = SHARES[link](slope[:, None] * (x[None, :] - mid[:, None]))
    np.testing.assert_allclose(post.grid._learn_prob(grid, x), want, atol=1e-12)
    asym = grid.asymptotes[grid.asym_index]
    gaps, lengths = grid.gaps[grid.asym_index], grid.lengths[grid.asym_index]
    mean = _mean_curve(grid.mid, grid.slope, asym, gaps, lengths, CHANCE, grid.x80, link)
    np.testing.assert_allclose(mean, 0.8 * asym, atol=1e-6)
    u = np.linspace(0.0, 1.0, cfg.n_nodes)
    table_mean = grid.share_table @ u  # (K, Z): E[node share] at each tabulated z
    inner = np.abs(_Z_GRID) < 4
    want = np.broadcast_to(_share_at(_Z_GRID[inner], link), table_mean[:, inner].shape)
    np.testing.assert_allclose(table_mean[:, inner], want, atol=0.02)


def test_an_unknown_link_is_refused():
    with pytest.raises(ConfigError, match="link"):
        post.PosteriorSettings(link="tanh")
