"""One base error for everything the tool rejects; the CLI turns it into one line and exit 2."""

from __future__ import annotations

__all__ = ["CheckpointError", "ConfigError", "ThresholdError"]


class ThresholdError(Exception):
    """Base of every error this package raises on purpose: the message names value, rule and fix."""


class ConfigError(ThresholdError, ValueError):
    """A setting has a value that is not allowed; ``fields`` names the dataclass fields it is
    about, where one check knows them (a suite file puts the error on their key's line)."""

    def __init__(self, message: str = "", *fields: str) -> None:
        super().__init__(message)
        self.fields = fields


class CheckpointError(ThresholdError):
    """A checkpoint cannot be read, or its content does not match its hash."""
