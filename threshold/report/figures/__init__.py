"""The report's figures: static PNGs with matplotlib's object API, one interactive plotly figure.

Each PNG function takes collected data and a path, writes one file and returns the path; each
family has its module: a study's own (:mod:`.study`), the studies side by side
(:mod:`.comparison`), the budget axis (:mod:`.budget`), a transfer file (:mod:`.transfer`), the
interactive figure (:mod:`.interactive`, not handed on here: the writer imports it where plotly
is installed), and what they share (:mod:`.common`: colours, the PNG
writer and its layout record, log axes). The curves drawn are the posterior's (median and 90%
credible band of the mean accuracy, from :mod:`threshold.search.posterior`) and the
least-squares logistic stored with the estimate.
"""

from threshold.report.figures.budget import budget_figure
from threshold.report.figures.common import (
    COLORS,
    LAYOUT_KEY,
    layout,
    level_accuracy,
    study_style,
)
from threshold.report.figures.comparison import comparison_figure, curves_figure
from threshold.report.figures.replay import replay_figure
from threshold.report.figures.study import study_figure
from threshold.report.figures.transfer import transfer_figure

__all__ = [
    "COLORS",
    "LAYOUT_KEY",
    "budget_figure",
    "comparison_figure",
    "curves_figure",
    "layout",
    "level_accuracy",
    "replay_figure",
    "study_figure",
    "study_style",
    "transfer_figure",
]
