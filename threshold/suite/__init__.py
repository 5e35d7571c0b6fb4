"""Suites: many studies, transfer experiments, analyses and reports from one TOML file.

The names exported here parse and check suite files (:mod:`threshold.suite.spec`; no torch or
Optuna at import). Running a suite is imported by module, as the search's Optuna side is:
``from threshold.suite.run import run_suite``.
"""

from threshold.suite.spec import (
    ALL_REPORT,
    Analysis,
    Comparison,
    ReportSpec,
    Suite,
    SuiteError,
    SuiteStudy,
    TransferSpec,
    key_lines,
    load_suite,
    parse_suite,
)

__all__ = [
    "ALL_REPORT",
    "Analysis",
    "Comparison",
    "ReportSpec",
    "Suite",
    "SuiteError",
    "SuiteStudy",
    "TransferSpec",
    "key_lines",
    "load_suite",
    "parse_suite",
]
