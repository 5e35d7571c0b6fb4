"""``threshold bench gpu``: prove and measure the training engine on a GPU in one command."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from threshold.cli.common import CacheDir, Device, int_list, name_list, run_guarded
from threshold.config import make_recipe
from threshold.errors import ConfigError
from threshold.search.bench.gpu import PARTS, SCIENCE_RECIPES, SEEDS, SIZES
from threshold.search.bench.gpu import bench_gpu as run
from threshold.train.device import resolve_device
from threshold.train.graphs import capture_words


def bench_gpu(
    out: Annotated[
        Path, typer.Option(help="Folder for gpu-<date>-<commit>.json and its Markdown summary.")
    ] = Path("reports/gpu"),
    minutes: Annotated[
        float, typer.Option(help="Time for everything; the science pair gets what is left.")
    ] = 8.0,
    device: Device = "auto",
    cache_dir: CacheDir = None,
    parts: Annotated[
        str, typer.Option(help="Which parts to run, comma-separated: checks,throughput,science.")
    ] = "checks,throughput,science",
    sizes: Annotated[
        str,
        typer.Option(
            help="The science pair's d_model sizes, comma-separated; fewer sizes leave more steps"
            " for each run."
        ),
    ] = ",".join(map(str, SIZES)),
    seeds: Annotated[
        int, typer.Option(help="The science pair's runs a size and study (seeds 0, 1, ...).")
    ] = SEEDS,
    recipe: Annotated[
        str,
        typer.Option(
            help="The science pair's recipe: small (the group's init and weight decay) or paper"
            " (the group's code: 128-token windows, sampled accuracy; docs/recipes.md)."
        ),
    ] = SCIENCE_RECIPES[0],
    split: Annotated[
        str | None,
        typer.Option(
            help="The science pair's data split: groups (per op) or triples (the group's, held"
            " out of every op) \\[default: the recipe's; docs/recipes.md]."
        ),
    ] = None,
) -> None:
    """The engine on a GPU against the CPU, its throughput (eager, CUDA graphs, compiled) and a
    science pair (small init, or the paper's recipe) in the minutes left; with --device cpu, tiny
    settings (CI)."""

    def body():
        if not minutes > 0:
            raise ConfigError(f"--minutes {minutes} is not allowed: use a positive number")
        asked = name_list(parts)
        unknown = [p for p in asked if p not in PARTS]
        if unknown or not asked:
            raise ConfigError(
                f"--parts {parts!r} is not allowed: name one or more of {', '.join(PARTS)}"
            )
        ds = sorted(int_list(sizes, "--sizes"))
        if len(ds) < 2 or ds[0] < 1:
            raise ConfigError(f"--sizes {sizes!r} is not allowed: give two or more positive sizes")
        if seeds < 1:
            raise ConfigError(f"--seeds {seeds} is not allowed: give one or more")
        if recipe not in SCIENCE_RECIPES:
            runs = " or ".join(SCIENCE_RECIPES)
            raise ConfigError(
                f"--recipe {recipe!r} is not allowed: the science pair runs {runs} (a schedule"
                " that does not depend on the budget, so checkpoints read smaller budgets)"
            )
        make_recipe(recipe, split=split)  # a bad --split refused before anything runs
        dev = resolve_device(device)
        console = Console(stderr=True)
        logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
        record, json_path, md_path = run(
            out,
            dev,
            minutes,
            cache_dir,
            note=lambda s: console.log(s),
            parts=asked,
            sizes=ds,
            seeds=seeds,
            recipe=recipe,
            split=split,
        )
        typer.echo(md_path.read_text())
        typer.echo(f"written: {json_path}, {md_path}")
        failed = [k for k in PARTS if "error" in record[k]]
        not_run = {"error", "skipped"} & record["checks"].keys()  # else: a result per check
        checks = {} if not_run else record["checks"]
        failed += [f"check {k}" for k, v in checks.items() if not v.get("ok")]
        if record["capture"]["failed"]:  # a pack fell back to eager steps: not the graphed engine
            failed.append(capture_words(record["capture"]))
        if failed:
            raise ConfigError(f"bench gpu: {', '.join(failed)} failed (see {json_path})")

    run_guarded(body)
