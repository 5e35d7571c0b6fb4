"""Grid posterior over the learning-transition curve, and the look-ahead maths of the search.

The technique is the psi method of psychophysics (Kontsevich and Tyler 1999; QUEST+): keep a
posterior over the parameters of the psychometric curve on a grid, and measure next where one more
observation is expected to shrink the uncertainty of the quantity of interest the most. Here the
stimulus is the model size, x = ln(total parameters). One module a part, each importing only
modules listed before it:

- :mod:`~threshold.search.posterior.hypothesis`: what a hypothesis is (a curve, a ceiling, a
  concentration), what a run scores under it, where it reaches the level (x80);
  :class:`PosteriorSettings`.
- :mod:`~threshold.search.posterior.grid`: :class:`Grid`, the hypotheses of one search range and
  their prior (``make_grid``), cut to the hypotheses left (``restricted``, ``spread_out``).
- :mod:`~threshold.search.posterior.likelihood`: log p(runs | hypothesis), size by size, pruned
  as runs are added (``add_size``); ``normalize``.
- :mod:`~threshold.search.posterior.refine`: the posterior read again on a finer grid where its
  mass lies (``refined``).
- :mod:`~threshold.search.posterior.lookahead`: what one more run is expected to do
  (``expected_variances``, ``fantasy_update``, ``seed_variance``).
- :mod:`~threshold.search.posterior.summaries`: what the posterior says (``summarize``,
  ``curve_quantiles``, ``difference_distribution``).

Callers outside this folder import from this package (``from threshold.search import posterior as
post``): it hands on what the search, the fit and the report use. Each module's ``__all__`` names
its public names, these and what the modules after it build on (the outcome model's tables and
the curve in ``hypothesis``, ``dot`` and ``ceilings_of`` in ``grid``, the per-pair values as
methods of :class:`Grid`); no module takes a private name from another.

Dimension names in shape comments: H hypotheses (midpoint x slope x kappa x asymptote, asymptote
fastest), M midpoints, S slopes, K concentrations, A asymptotes, C = M * S (midpoint, slope)
pairs, Q = C * K, N runs, U distinct run sizes, J candidate sizes, L learned-share nodes, B
accuracy bins, Z tabulated logits.
"""

from threshold.search.posterior.grid import Grid, make_grid, restricted, spread_out
from threshold.search.posterior.hypothesis import (
    PosteriorSettings,
    level_fraction,
    level_target,
)
from threshold.search.posterior.likelihood import (
    add_size,
    log_likelihood,
    normalize,
    offset_sd_posterior,
    pool_offset_sds,
    size_log_likelihood,
    size_log_likelihood_bounds,
    size_sums,
)
from threshold.search.posterior.lookahead import (
    expected_variance,
    expected_variances,
    fantasy_update,
    seed_variance,
)
from threshold.search.posterior.refine import refined
from threshold.search.posterior.summaries import (
    PosteriorSummary,
    curve_quantiles,
    difference_distribution,
    summarize,
    weighted_quantiles,
)

__all__ = [
    "Grid",
    "PosteriorSettings",
    "PosteriorSummary",
    "add_size",
    "curve_quantiles",
    "difference_distribution",
    "expected_variance",
    "expected_variances",
    "fantasy_update",
    "level_fraction",
    "level_target",
    "log_likelihood",
    "make_grid",
    "normalize",
    "offset_sd_posterior",
    "pool_offset_sds",
    "refined",
    "restricted",
    "seed_variance",
    "size_log_likelihood",
    "size_log_likelihood_bounds",
    "size_sums",
    "spread_out",
    "summarize",
    "weighted_quantiles",
]
