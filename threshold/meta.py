"""What this installation is: the package's version (from its metadata) and its git commit."""

from __future__ import annotations

import subprocess
import tomllib
from functools import cache
from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as installed_version
from pathlib import Path

__all__ = ["git_commit", "version"]


@cache
def version() -> str:
    """The installed version; from ``pyproject.toml`` when run from a source tree that is not
    installed (the GPU machine runs the working tree from ``PYTHONPATH``)."""
    try:
        return installed_version("threshold")
    except PackageNotFoundError:
        project = Path(__file__).resolve().parent.parent / "pyproject.toml"
        try:
            return tomllib.loads(project.read_text())["project"]["version"]
        except (OSError, KeyError, tomllib.TOMLDecodeError):
            return "0+unknown"


def git_commit() -> str:
    """The commit of the checkout threshold runs from, or "unknown" (stored on every study,
    report and benchmark record)."""
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            cwd=Path(__file__).resolve().parent,
            capture_output=True,
            text=True,
            timeout=5,
        )
        return out.stdout.strip() if out.returncode == 0 else "unknown"
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
