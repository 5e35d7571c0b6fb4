"""Command line: the only package that parses arguments or prints. Nothing imports it."""

from __future__ import annotations

import sys

from threshold.cli import (  # noqa: F401  (importing them registers their commands)
    analysis_cmds,
    bench_gpu_cmd,
    cluster_cmd,
    complexity_cmd,
    dashboard_cmd,
    refit_cmd,
    report_cmd,
    search_cmds,
    suite_cmd,
    train_cmds,
)
from threshold.cli.common import app

__all__ = ["app", "main"]


def main() -> None:
    try:
        app()
    except BrokenPipeError:  # e.g. `threshold data | head`
        sys.stderr.close()
