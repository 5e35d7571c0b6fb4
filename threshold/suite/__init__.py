"""Suites: many studies, transfer experiments, analyses and reports from one TOML file.

The names exported here read and check suite files (:mod:`threshold.suite.parse`; what a suite
holds, its parts' dataclasses, is :mod:`threshold.suite.spec`; no torch or Optuna at import).
Running a suite is imported by module, as the search's Optuna side is:
``from threshold.suite.run import run_suite`` (it loads the training, analysis and report layers);
its dry run, ``from threshold.suite.plan import plan``, reads the storage only.
"""

from threshold.suite.parse import load_suite, parse_suite
from threshold.suite.spec import ALL_REPORT, Suite, SuiteError
from threshold.suite.toml_lines import key_lines

__all__ = ["ALL_REPORT", "Suite", "SuiteError", "key_lines", "load_suite", "parse_suite"]
