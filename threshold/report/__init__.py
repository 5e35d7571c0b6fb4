"""Reports: read studies (through :mod:`threshold.search`), write ``reports/NAME/``.

Never trains and never writes to a storage. :func:`collect` gathers every study's runs, estimate,
posterior band, reduction factor against a baseline, analyses and search cost, and reads transfer
results; :func:`write_report` draws the figures and writes ``index.html``, ``summary.md`` and
``results.json``.
"""

from threshold.report.data import (
    Collected,
    StudyData,
    collect,
    dense_grid,
    read_transfer,
    step_cost,
)
from threshold.report.write import check_output, write_report

__all__ = [
    "Collected",
    "StudyData",
    "check_output",
    "collect",
    "dense_grid",
    "read_transfer",
    "step_cost",
    "write_report",
]
