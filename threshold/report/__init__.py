"""Reports: read studies (through :mod:`threshold.search`), write ``reports/NAME/``.

Never trains and never writes to a storage. :func:`collect` (:mod:`threshold.report.reading`)
gathers every study's runs, estimate, posterior band, analyses and transfer results into
:class:`StudyData` (:mod:`threshold.report.data`), with its factor against the baseline of its
testbed and modulus (:mod:`threshold.report.factors`) and its search cost
(:mod:`threshold.report.efficiency`); :func:`load_results` reads the same back from a report's
``results.json`` (no storage needed); :func:`threshold.report.write.write_report` builds the view
model (:mod:`threshold.report.build` into :mod:`threshold.report.view`), draws the figures
(:mod:`threshold.report.figures`) and renders ``index.html``, ``summary.md`` and
``results.json`` from it (:mod:`threshold.report.render`, templates in ``templates/``). The
writer is imported from its module, not from here: it loads matplotlib and plotly, which reading
studies does not need.
"""

from threshold.report.data import Collected, StudyData
from threshold.report.efficiency import dense_grid, step_cost
from threshold.report.reading import collect, read_transfer
from threshold.report.results import load_results

__all__ = [
    "Collected",
    "StudyData",
    "collect",
    "dense_grid",
    "load_results",
    "read_transfer",
    "step_cost",
]
