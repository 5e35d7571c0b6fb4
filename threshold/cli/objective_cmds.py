"""Anyone's experiment from the shell: ``threshold find --objective pkg.module:function`` (its
options and settings here), and ``threshold ask`` / ``threshold tell`` for runs launched
elsewhere (a SLURM array, W&B, a notebook): ask for the next sizes and seeds, tell each result.

A module in the working folder is found as ``python -m`` finds it (the folder goes first on
the import path), in this process and in the workers it starts.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Annotated

import typer

from threshold.api import ask as ask_runs
from threshold.api import tell as tell_run
from threshold.cli.common import Storage, run_guarded
from threshold.errors import ConfigError
from threshold.search.objective import ObjectiveSettings, load_objective
from threshold.search.settings import SearchConfig

__all__ = ["ask", "objective_settings", "tell"]

# find's options for an objective, beside the search's (budget, precision, level, seed)
Objective = Annotated[
    str | None,
    typer.Option(
        help="Your experiment instead of a testbed: pkg.module:function, called as "
        "function(size, seed) -> accuracy (docs/your-own-experiment.md).",
        rich_help_panel="Objective options",
    ),
]
Sizes = Annotated[
    str | None,
    typer.Option(help="Allowed sizes: LO..HI or a list.", rich_help_panel="Objective options"),
]
Params = Annotated[
    str | None,
    typer.Option(
        help="Parameter count of each size: a list in the sizes' order, or pkg.module:function "
        "of the size [default: the size].",
        rich_help_panel="Objective options",
    ),
]
Chance = Annotated[
    float | None,
    typer.Option(
        help="Accuracy of a run that learns nothing.", rich_help_panel="Objective options"
    ),
]
SizeName = Annotated[
    str,
    typer.Option(help="The size axis in your words.", rich_help_panel="Objective options"),
]
Bracket = Annotated[
    str | None,
    typer.Option(
        help="First sizes run, LO,HI [default: the smallest and largest].",
        rich_help_panel="Objective options",
    ),
]


def import_here() -> None:
    """The working folder first on the import path, as ``python -m`` has it, so that
    ``--objective mymodule:f`` finds ``./mymodule.py`` here and in the workers."""
    here = os.getcwd()
    if here not in sys.path:
        sys.path.insert(0, here)
    path = os.environ.get("PYTHONPATH", "")
    if here not in path.split(os.pathsep):
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (here, path) if p)


def objective_settings(
    values: dict, search: dict, given: list[str], create_only: bool = False
) -> ObjectiveSettings:
    """The study of ``find --objective``'s options (``values``: objective, sizes, params,
    chance, size_name, bracket), with the search's budget, precision, level and seed;
    ``given``: the testbed's and recipe's options set, refused. ``create_only`` (``--workers
    0``): the objective may be a plain name, for runs launched elsewhere."""
    if given or search.get("pretrain"):
        names = ", ".join(f"--{g.replace('_', '-')}" for g in [*given, "pretrain"][:3])
        raise ConfigError(
            f"--objective runs your function: the testbed's and recipe's options ({names}) "
            "do not apply; leave them out"
        )
    if (search["d_lo"], search["d_hi"]) != (SearchConfig.d_lo, SearchConfig.d_hi):
        raise ConfigError("--d-lo and --d-hi are a testbed's: use --bracket LO,HI with --objective")
    if values["sizes"] is None or values["chance"] is None:
        raise ConfigError(
            "--objective needs --sizes (4..256) and --chance (the accuracy of a run that "
            "learns nothing, e.g. 0.1 for ten classes)"
        )
    import_here()
    params = values["params"]
    if params is not None:
        params = load_objective(params) if ":" in params else _numbers(params, "params")
    bracket = None if values["bracket"] is None else tuple(_numbers(values["bracket"], "bracket"))
    if bracket is not None and len(bracket) != 2:
        raise ConfigError(f"bracket {values['bracket']!r} is not allowed: give LO,HI (8,64)")
    if not create_only or ":" in values["objective"]:
        load_objective(values["objective"])  # refused here, before the study is written
    return ObjectiveSettings.make(
        values["objective"],
        values["sizes"],
        params,
        chance=values["chance"],
        level=search["level"],
        chance_corrected=search["chance_corrected"],
        precision=search["precision"],
        budget=search["budget"],
        bracket=bracket,
        seed=search["seed"],
        size_name=values["size_name"],
    )


def _numbers(text: str, name: str) -> list[int]:
    try:
        return [int(v) for v in text.replace(" ", "").split(",") if v]
    except ValueError:
        raise ConfigError(f"{name} {text!r} is not allowed: give whole numbers, 1,2,3") from None


def ask(
    study: Annotated[str, typer.Option(help="The objective's study.")],
    n: Annotated[int, typer.Option("--n", help="Runs to ask for at once (a cluster's).")] = 1,
    storage: Storage = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Print the next sizes and seeds to train in an objective's study.

    Each a trial left running until `threshold tell` records it: runs launched elsewhere."""

    def body():
        out = ask_runs(study, storage, n)
        if as_json:
            typer.echo(json.dumps(out))
            return
        for run in out["runs"]:  # one line a run: trial, size, seed (a shell's `read`)
            typer.echo(f"{run['trial']} {run['size']} {run['seed']}")
        if out["stop"] is not None:
            typer.echo(f"no more runs: {out['stop']}", err=True)

    run_guarded(body)


def tell(
    study: Annotated[str, typer.Option(help="The objective's study.")],
    trial: Annotated[int, typer.Option(help="The trial, as ask printed it.")],
    accuracy: Annotated[float | None, typer.Option(help="The run's accuracy.")] = None,
    metrics: Annotated[
        str | None, typer.Option(help="Other metrics to record, a JSON object.")
    ] = None,
    failed: Annotated[
        bool, typer.Option("--failed", help="The run failed: free its slot.")
    ] = False,
    storage: Storage = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Record a run's accuracy in an objective's study, and print the answer so far."""

    def body():
        value = accuracy
        if metrics is not None:
            try:
                extra = json.loads(metrics)
            except ValueError:
                raise ConfigError(f"metrics {metrics!r} is not a JSON object") from None
            if not isinstance(extra, dict):
                raise ConfigError(f"metrics {metrics!r} is not a JSON object: give {{...}}")
            value = extra | {"accuracy": accuracy}
        out = tell_run(study, trial, value, storage, failed)
        if as_json:
            typer.echo(json.dumps(out))
            return
        typer.echo(f"study {study}: {out['answer_words']}; {out['status']}")

    run_guarded(body)
