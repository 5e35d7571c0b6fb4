"""Commands that train: ``train`` and ``bench train``."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from threshold.cli.common import (
    CacheDir,
    Device,
    TrainingBars,
    int_list,
    run_guarded,
    takes,
    val_accuracy_words,
)
from threshold.config import TrainConfig, fitted_words, model_config_for, param_count
from threshold.errors import ConfigError
from threshold.interrupt import exit_status, interrupted
from threshold.options import RECIPE, TASK, only, recipe_of
from threshold.tasks import TaskConfig, load_task_data
from threshold.train import Run, train_runs
from threshold.train.bench import run_all, run_batched
from threshold.train.checkpoint import check_writable, save_checkpoint
from threshold.train.device import resolve_device
from threshold.train.memory import plan_packs

# train's own options: the models it trains, and where their checkpoints go.
DModels = Annotated[
    str, typer.Option(help="Embedding size d, or a list (16,24,32) trained as one batch.")
]
Seed = Annotated[
    str | None,
    typer.Option(
        help="Seed of initialisation and batch order, or a list (0,1,2) \\[default: 0].",
        show_default=False,
    ),
]
Seeds = Annotated[
    str | None, typer.Option(help="The same as --seed, for a list (0,1,2): give one of them.")
]
EvalEvery = Annotated[int, typer.Option(help="Steps between validation checks.")]
Threads = Annotated[int, typer.Option(help="Torch threads.")]
TimeLimit = Annotated[float | None, typer.Option(help="Stop after this many seconds.")]
MemoryGb = Annotated[
    float | None,
    typer.Option(help="Memory a batch may use \\[default: 90% of free GPU, 80% of host]."),
]
Out = Annotated[
    Path | None,
    typer.Option(help="Save the checkpoint here (a folder when several models train)."),
]
Force = Annotated[
    bool, typer.Option("--force", help="Write over an existing --out file or folder.")
]
JsonLines = Annotated[
    bool, typer.Option("--json", help="Print one JSON object (one line per model).")
]


@takes(task=TASK, recipe=RECIPE)
def train(
    task: dict,
    recipe: dict,
    d_model: DModels = "32",
    seed: Seed = None,
    seeds: Seeds = None,
    eval_every: EvalEvery = 250,
    threads: Threads = 1,
    time_limit: TimeLimit = None,
    device: Device = "auto",
    memory_gb: MemoryGb = None,
    out: Out = None,
    force: Force = False,
    as_json: JsonLines = False,
    cache_dir: CacheDir = None,
) -> None:
    """Train one model, or every size x seed of the lists as one batch; report per-op accuracy."""

    def body():
        task_cfg, runs = _planned(task, recipe, d_model, _seeds(seed, seeds), eval_every,
                                  threads, time_limit)  # fmt: skip
        dev, memory = resolve_device(device), _memory_bytes(memory_gb)
        plan_packs(runs, dev, memory)  # a model too large for memory is refused here
        paths = _checkpoint_paths(out, runs, force)  # before training
        data = load_task_data(task_cfg, cache_dir)
        for words in fitted_words(runs[0][1], {k for k, v in recipe.items() if v is not None}):
            typer.echo(f"note: {words}", err=True)  # once the command is known to run
        members = [
            Run(model_cfg, data, cfg, state=None if path is None else _state_path(path))
            for (model_cfg, cfg), path in zip(runs, paths, strict=True)
        ]
        results = _train_shown(members, dev, memory, out)
        _say_reports(
            [
                _train_report(task_cfg, run, result, path, dev)
                for run, result, path in zip(runs, results, paths, strict=True)
            ],
            as_json,
        )

    run_guarded(body)


def _memory_bytes(memory_gb: float | None) -> int | None:
    """``--memory-gb`` in bytes; None: the engine's share of what is free."""
    if memory_gb is not None and not memory_gb > 0:
        raise ConfigError(f"--memory-gb {memory_gb} is not allowed: use a positive number")
    return None if memory_gb is None else int(memory_gb * 2**30)


def _say_reports(reports: list[dict], as_json: bool) -> None:
    """One JSON line a model, or a table: of one model's ops, or of the models."""
    if as_json:
        for report in reports:
            typer.echo(json.dumps(report))
    elif len(reports) == 1:
        _print_train_report(reports[0])
    else:
        _print_batch_report(reports)


def _planned(task: dict, recipe: dict, d_model: str, seeds: list[int], eval_every: int,
             threads: int, time_limit: float | None):  # fmt: skip
    """The task, and a (model, training) config for every size x seed, as the options say."""
    made = recipe_of(recipe)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    if threads > (cores or 1):
        raise ConfigError(
            f"--threads {threads} is more than this machine's {cores} cores: use 1 to {cores}"
            " (threads beyond the cores only wait for each other)"
        )
    task_cfg = made.on(TaskConfig.from_options(**task))  # the recipe's split (paper: the group's)
    base = made.train.to_dict() | {
        "eval_every": eval_every,
        "threads": threads,
        "time_limit_s": time_limit,
    }
    runs = [
        (
            model_config_for(task_cfg, d, made.train, **made.model_kwargs),
            TrainConfig(**base | {"seed": s}),
        )
        for d in int_list(d_model, "--d-model")
        for s in seeds
    ]
    return task_cfg, runs


def _train_shown(members: list[Run], device, memory: int | None, out: Path | None) -> list:
    """Train ``members`` with their progress shown; on an interrupt, say whether the same
    command continues from saved training states (``out`` given), and exit as interrupted."""

    def show(i: int, p) -> None:
        model_cfg, cfg = members[i].model_cfg, members[i].cfg
        if p.resumed:
            bars.say(
                f"d={model_cfg.d_model} seed {cfg.seed} continues from step "
                f"{p.step:,}, its training state in {members[i].state}"
            )
        info = (
            f"loss {p.loss:.3f}  val acc (tf) {val_accuracy_words(p)}  "
            f"{p.tokens_per_s / 1000:.0f}k tok/s"
        )
        bars.update(i, f"d={model_cfg.d_model} seed {cfg.seed}", p, info)

    first = (
        "{task.description}" if len(members) > 1 else "step {task.completed:>6.0f}/{task.total:.0f}"
    )
    try:
        with TrainingBars(first_column=first) as bars:
            return train_runs(members, device, show, memory_bytes=memory)
    except (KeyboardInterrupt, Exception) as e:
        if out is None or not interrupted(e):
            raise
        saved = [m.state for m in members if m.state is not None and m.state.exists()]
        if saved:
            typer.echo(
                f"interrupted: run the same command to continue from the training states "
                f"saved beside {out} ({len(saved)} of {len(members)}; each is saved each "
                "minute)",
                err=True,
            )
        else:  # stopped before its first save: nothing to continue from
            typer.echo(
                "interrupted before any training state was saved (the first is saved after a"
                " minute): the same command starts again from step 0",
                err=True,
            )
        raise typer.Exit(exit_status()) from None


def _state_path(checkpoint: Path) -> Path:
    """Where a run saving its checkpoint at ``checkpoint`` keeps its training state while it
    trains (each minute; removed once it ends): the same command run again continues from it."""
    return checkpoint.with_name(checkpoint.name + ".state")


def _seeds(seed: str | None, seeds: str | None) -> list[int]:
    """The run seeds of ``--seed`` or ``--seeds`` (the same option, one of them: both given
    would leave one unused); default 0."""
    if seed is not None and seeds is not None:
        raise ConfigError(
            f"--seed {seed} and --seeds {seeds} both give the run seeds, and one would be "
            "ignored: give one of them, e.g. --seeds 0,1,2"
        )
    option, text = ("--seeds", seeds) if seeds is not None else ("--seed", seed or "0")
    return int_list(text, option, example="0,1,2")


def _checkpoint_paths(out: Path | None, runs, force: bool = False) -> list[Path | None]:
    """Each run's checkpoint path: ``out`` itself for one run, else files in folder ``out``.
    Refused before training: a path that cannot be written, or (unless ``force``) an existing
    file or a folder holding more than training states (an interrupted call's, to continue),
    whose earlier checkpoints would be replaced."""

    if out is None:
        return [None] * len(runs)
    existing = next(p for p in (out, *out.parents) if p.exists())
    again = "choose another --out, or pass --force to write over it"
    if len(runs) == 1:
        if out.is_dir():
            raise ConfigError(f"--out {str(out)!r} is a directory: give a file path")
        if existing != out and not existing.is_dir():
            raise ConfigError(f"--out {str(out)!r} cannot be written: a parent is a file")
        if out.exists() and not force:
            raise ConfigError(f"--out {str(out)!r} exists: {again}")
        check_writable(out.parent, out)
        return [out]
    if not existing.is_dir():
        raise ConfigError(f"--out {str(out)!r} is a file: give a folder for several checkpoints")
    kept = [p for p in out.iterdir() if not p.name.endswith(".state")] if out.is_dir() else []
    if kept and not force:
        raise ConfigError(f"--out folder {str(out)!r} exists and is not empty: {again}")
    check_writable(out)
    return [out / f"d{m.d_model}-seed{c.seed}.ckpt" for m, c in runs]


def _train_report(task_cfg, run, result, path, device) -> dict:
    model_cfg, cfg = run
    counts = param_count(model_cfg)
    report = {
        "tasks": list(task_cfg.ops),
        "measure": task_cfg.measured_op,
        "mod": task_cfg.n,
        "testbed": task_cfg.testbed,
        "d_model": model_cfg.d_model,
        "seed": cfg.seed,
        "params_total": counts["total"],
        "params_non_embedding": counts["non_embedding"],
        "recipe": cfg.recipe,
        **result.metrics(),
        "device": str(device),
        # each validation: step, smoothed loss, teacher-forced accuracy per op: the learning curve
        "history": result.history,
    }
    if path is not None:
        metrics = {k: v for k, v in report.items() if k not in ("tasks", "mod", "testbed")}
        report["checkpoint"] = str(path)
        report["checkpoint_sha256"] = save_checkpoint(
            path, result.model, task_cfg, cfg.to_dict(), metrics
        )
    return report


def _print_batch_report(reports: list[dict]) -> None:
    first = reports[0]
    measure = first["measure"]
    table = Table(title=f"{','.join(first['tasks'])} mod {first['mod']}, {len(reports)} models")
    for col in ("d", "seed", "params", f"{measure} (greedy)", "strict", "steps", "stopped", "s"):
        table.add_column(col, justify="left" if col == "stopped" else "right")
    for r in reports:
        table.add_row(
            str(r["d_model"]),
            str(r["seed"]),
            f"{r['params_total']:,}",
            f"{r['accuracy'][measure]:.3f}",
            f"{r['strict_accuracy'][measure]:.3f}",
            str(r["steps"]),
            r["stop_reason"],
            f"{r['wall_s']:.0f}",
        )
    console = Console()
    console.print(table)
    others = [op for op in first["accuracy"] if op != measure]
    if others:
        console.print(
            "other ops (greedy): "
            + "; ".join(
                f"d={r['d_model']} seed {r['seed']}: "
                + " ".join(f"{op} {r['accuracy'][op]:.3f}" for op in others)
                for r in reports
            )
        )
    saved = [r["checkpoint"] for r in reports if "checkpoint" in r]
    if saved:
        console.print(f"checkpoints: {len(saved)} in {Path(saved[0]).parent}")


def _print_train_report(report: dict) -> None:
    table = Table(title=f"{','.join(report['tasks'])} mod {report['mod']}, d={report['d_model']}")
    table.add_column("op")
    table.add_column("accuracy (greedy)", justify="right")
    table.add_column("strict (trace)", justify="right")
    table.add_column("teacher-forced", justify="right")
    table.add_column("sampled (T = 1)", justify="right")
    for op, acc in report["accuracy"].items():
        name = f"{op} (measured)" if op == report["measure"] else op
        table.add_row(
            name,
            f"{acc:.3f}",
            f"{report['strict_accuracy'][op]:.3f}",
            f"{report['teacher_forced_accuracy'][op]:.3f}",
            f"{report['sampled_accuracy'][op]:.3f}",
        )
    console = Console()
    console.print(table)
    if report["budget"]:
        points = ", ".join(f"{b['step']:,}: {b['accuracy']:.3f}" for b in report["budget"])
        console.print(f"{report['measure']} accuracy at checkpoints (step: greedy): {points}")
    console.print(
        f"params {report['params_total']:,} total, {report['params_non_embedding']:,} without "
        f"embeddings; {report['steps']} steps, stopped: {report['stop_reason']}; "
        f"{report['wall_s']:.1f} s, {report['tokens_per_s'] / 1000:.0f}k tokens/s"
    )
    if "checkpoint" in report:
        console.print(f"checkpoint: {report['checkpoint']}")


# The benchmark's task: a three-op mixture, 512 test sequences an op (it times, and scores none).
_BENCH_TASK = TaskConfig(ops=("max", "med", "add"), n_test=512)


# bench train's own options: the sizes and steps it times, and the batched engine's packs.
Sizes = Annotated[str, typer.Option("--d-models", help="Comma-separated sizes.")]
TimedSteps = Annotated[int, typer.Option(help="Timed training steps per size.")]
Batched = Annotated[
    bool, typer.Option("--batched", help="The batched engine against one model per process.")
]
Members = Annotated[
    str, typer.Option(help="With --batched: member counts to time, e.g. 1,4,16,64.")
]
JsonOne = Annotated[bool, typer.Option("--json", help="Print one JSON object.")]


@takes(_BENCH_TASK.options(), task=only(TASK, "tasks", "mod", "depth"))
def bench_train(
    task: dict,
    d_models: Sizes = "16,32,64,128",
    steps: TimedSteps = 200,
    batched: Batched = False,
    members: Members = "1,4,16,64",
    device: Device = "auto",
    as_json: JsonOne = False,
    cache_dir: CacheDir = None,
) -> None:
    """Training tokens/s and steps/s at several d (bucketed vs random batches), and decoding;
    with --batched, model-steps/s of many models trained as one batch."""

    def body():
        sizes = int_list(d_models, "--d-models")
        counts = int_list(members, "--members")
        if min(sizes) < 1 or steps < 1 or min(counts) < 1:
            raise ConfigError("--d-models, --members and --steps must be 1 or more")
        dev = resolve_device(device)
        task_cfg = TaskConfig.from_options(**_BENCH_TASK.options() | task)
        data = load_task_data(task_cfg, cache_dir)
        console = Console(stderr=True)
        with console.status("benchmarking") as status:
            if batched:
                results = run_batched(data, sizes, counts, steps, dev, lambda s: status.update(s))
            else:
                results = run_all(data, sizes, steps, on_item=lambda s: status.update(s))
        results["settings"] = {
            "tasks": list(task_cfg.ops),
            "mod": task_cfg.n,
            "depth": task_cfg.depth,
        }
        results["mean_length"] = float(data.train.lengths.mean())
        if as_json:
            typer.echo(json.dumps(results))
        elif batched:
            _print_bench_batched(results)
        else:
            _print_bench(results)

    run_guarded(body)


def _print_bench_batched(results: dict) -> None:
    single = Table(title="one model (one process, one thread on CPU), median of its timings")
    for col in ("d", "steps/s"):
        single.add_column(col, justify="right")
    for r in results["single"]:
        single.add_row(str(r["d_model"]), f"{r['steps_per_s']:.1f}")
    table = Table(title="batched engine")
    cols = ("d", "members", "model-steps/s", "vs one model", "tokens/s", "memory est.", "peak")
    for col in cols:
        table.add_column(col, justify="right")
    for r in results["batched"]:
        d = ",".join(map(str, r["d_models"]))
        grouped = r.get("grouped_step_s")
        if grouped is not None:
            d += f" (by d: {r['members'] / grouped:,.0f}/s)"
        peak = r.get("peak_memory")
        table.add_row(
            d,
            str(r["members"]),
            f"{r['model_steps_per_s']:,.1f}",
            f"{r['speedup']:.2f}x",
            f"{r['tokens_per_s']:,.0f}",
            f"{r['memory_estimate'] / 2**20:,.0f} MiB",
            "-" if peak is None else f"{peak / 2**20:,.0f} MiB",
        )
    console = Console()
    console.print(single)
    console.print(table)


def _print_bench(results: dict) -> None:
    table = Table(title="training (one thread)")
    for col in ("d", "params", "batches", "steps/s", "tokens/s", "padding"):
        table.add_column(col, justify="right")
    for r in results["train"]:
        table.add_row(
            str(r["d_model"]),
            f"{r['params_total']:,}",
            r["batch_order"],
            f"{r['steps_per_s']:.1f}",
            f"{r['tokens_per_s']:,.0f}",
            f"{r['padding_share']:.0%}",
        )
    decode = Table(title="greedy decoding (untrained model, runs to the context cap)")
    for col in ("d", "sequences", "sequences/s"):
        decode.add_column(col, justify="right")
    for r in results["decode"]:
        decode.add_row(str(r["d_model"]), str(r["sequences"]), f"{r['sequences_per_s']:,.0f}")
    console = Console()
    console.print(table)
    console.print(decode)
