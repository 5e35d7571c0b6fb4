"""What this installation is: the package's version (from its metadata) and its git commit; and
what a stored settings object writes (:func:`stored_dict`), so that a field added later leaves
the stored form, and the study names hashed from it, as they were."""

from __future__ import annotations

import dataclasses
import subprocess
import tomllib
from functools import cache
from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as installed_version
from pathlib import Path

__all__ = ["git_commit", "stored_dict", "version"]


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


def stored_dict(settings, always: frozenset[str]) -> dict:
    """``settings`` (a dataclass) as a dict, each field not in ``always`` left out while it is
    at its default. ``always`` is the literal list of the fields its class had when names were
    first held still (issue 68): a field added since, with a default, stores (keys its data,
    names its study) as the class did before it existed, and only a value away from its
    default is written and changes a name. A field with no default is always written."""
    d = dataclasses.asdict(settings)
    for f in dataclasses.fields(settings):
        if f.name in always or f.name not in d:
            continue
        if f.default is not dataclasses.MISSING:
            default = f.default
        elif f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        else:
            continue
        if getattr(settings, f.name) == default:
            del d[f.name]
    return d
