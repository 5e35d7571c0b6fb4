"""threshold: find the smallest recurrent transformer that learns a task mixture.

From Python::

    import threshold
    estimate = threshold.find_threshold(tasks="max,med,add", measure="add", budget=20)
    estimate["params_p80"], estimate["interval_params"]
"""

from __future__ import annotations

from threshold.errors import CheckpointError, ConfigError, ThresholdError
from threshold.meta import version

__version__ = version()
__all__ = ["CheckpointError", "ConfigError", "ThresholdError", "__version__", "find_threshold"]


def __getattr__(name: str):
    """``find_threshold`` (:mod:`threshold.api`), loaded on first use (PEP 562): it loads the
    search (Optuna, scipy: about 1.5 s), and every module of the package runs this file first, so
    importing it here would load the search for ``import threshold.tasks`` too. The package's one
    import inside a function; tests/test_layers.py allows this one and no other."""
    if name == "find_threshold":
        from threshold.api import find_threshold

        return find_threshold
    raise AttributeError(f"module 'threshold' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), "find_threshold"])
