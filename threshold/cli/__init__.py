"""Command line: the only package that parses arguments or prints. Nothing imports it.

:mod:`threshold.cli.commands` names every command and the module that holds it: ``threshold
--help`` imports none of them, ``threshold X`` imports X's module only.
"""

from __future__ import annotations

import sys

from threshold.cli.commands import app

__all__ = ["app", "main"]


def main() -> None:
    try:
        app()
    except BrokenPipeError:  # e.g. `threshold data | head`
        sys.stderr.close()
