"""threshold: find the smallest recurrent transformer that learns a task mixture.

From Python::

    import threshold
    estimate = threshold.find_threshold(tasks="max,med,add", measure="add", budget=20)
    estimate["params_p80"], estimate["interval_params"]

    # anyone's experiment: objective(size, seed) -> accuracy
    answer = threshold.find_transition(objective, "4..256", chance=0.1)
"""

from __future__ import annotations

from threshold.errors import CheckpointError, ConfigError, ThresholdError
from threshold.meta import version

__version__ = version()
__all__ = [
    "CheckpointError",
    "ConfigError",
    "ThresholdError",
    "__version__",
    "ask",
    "find_threshold",
    "find_transition",
    "tell",
]
_API = ("ask", "find_threshold", "find_transition", "tell")  # threshold.api's, on first use


def __getattr__(name: str):
    """``find_threshold`` and the others of :mod:`threshold.api`, loaded on first use (PEP
    562): it loads the search (Optuna, scipy: about 1.5 s), and every module of the package
    runs this file first, so importing it here would load the search for ``import
    threshold.tasks`` too. The package's one import inside a function; tests/test_layers.py
    allows this one and no other."""
    if name in _API:
        import threshold.api

        return getattr(threshold.api, name)
    raise AttributeError(f"module 'threshold' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_API])
