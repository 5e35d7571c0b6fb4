"""threshold: find the smallest recurrent transformer that learns a task mixture."""

from threshold.errors import CheckpointError, ConfigError, ThresholdError

__version__ = "0.1.0"
__all__ = ["CheckpointError", "ConfigError", "ThresholdError", "__version__"]
