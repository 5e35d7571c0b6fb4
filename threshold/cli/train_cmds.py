"""Commands that train or show data: ``train``, ``data``, ``bench train``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from threshold.cli.common import (
    Arity,
    CacheDir,
    Depth,
    Measure,
    Mod,
    NTest,
    NTrain,
    PNest,
    SplitSeed,
    Tasks,
    Testbed,
    TrainingBars,
    app,
    bench_app,
    run_guarded,
    task_config,
    val_accuracy_words,
)


@app.command()
def train(
    tasks: Tasks = "max",
    testbed: Testbed = "listops",
    mod: Mod = 10,
    depth: Depth = 2,
    arity: Arity = "2-3",
    p_nest: PNest = 0.25,
    n_train: NTrain = None,
    n_test: NTest = 2000,
    measure: Measure = None,
    split_seed: SplitSeed = 0,
    d_model: Annotated[int, typer.Option(help="Embedding size d.")] = 32,
    seed: Annotated[int, typer.Option(help="Seed of initialisation and batch order.")] = 0,
    steps: Annotated[int, typer.Option(help="Most training steps.")] = 20_000,
    batch_size: Annotated[int, typer.Option(help="Sequences per step.")] = 64,
    lr: Annotated[float, typer.Option(help="Peak learning rate.")] = 3e-3,
    eval_every: Annotated[int, typer.Option(help="Steps between validation checks.")] = 250,
    threads: Annotated[int, typer.Option(help="Torch threads.")] = 1,
    time_limit: Annotated[float | None, typer.Option(help="Stop after this many seconds.")] = None,
    out: Annotated[Path | None, typer.Option(help="Save the checkpoint here.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
    cache_dir: CacheDir = None,
) -> None:
    """Train one model and report its per-op accuracy."""

    def body():
        from threshold.checkpoint import save_checkpoint
        from threshold.errors import ConfigError
        from threshold.model import param_count
        from threshold.tasks import load_task_data
        from threshold.train import TrainConfig, model_config_for
        from threshold.train import train as train_model

        task_cfg = task_config(
            tasks, testbed, mod, depth, arity, p_nest, n_train, n_test, measure, split_seed
        )
        train_cfg = TrainConfig(
            seed=seed,
            max_steps=steps,
            batch_size=batch_size,
            lr=lr,
            eval_every=eval_every,
            threads=threads,
            time_limit_s=time_limit,
        )
        model_cfg = model_config_for(task_cfg, d_model)  # checked before data is written
        if out is not None and out.is_dir():
            raise ConfigError(f"--out {str(out)!r} is a directory: give a file path")
        if out is not None and not next(p for p in out.parents if p.exists()).is_dir():
            raise ConfigError(f"--out {str(out)!r} cannot be written: a parent is a file")
        data = load_task_data(task_cfg, cache_dir)
        counts = param_count(model_cfg)

        def show(p) -> None:
            info = (
                f"loss {p.loss:.3f}  val acc (tf) {val_accuracy_words(p)}  "
                f"{p.tokens_per_s / 1000:.0f}k tok/s"
            )
            bars.update("train", "train", p, info)

        step_column = "step {task.completed:>6.0f}/{task.total:.0f}"
        with TrainingBars(enabled=not as_json, first_column=step_column) as bars:
            result = train_model(model_cfg, data, train_cfg, on_progress=show)
        report = {
            "tasks": list(task_cfg.ops),
            "measure": task_cfg.measured_op,
            "mod": task_cfg.n,
            "testbed": task_cfg.testbed,
            "d_model": d_model,
            "seed": seed,
            "params_total": counts["total"],
            "params_non_embedding": counts["non_embedding"],
            "accuracy": result.accuracy,
            "strict_accuracy": result.strict_accuracy,
            "teacher_forced_accuracy": result.teacher_forced,
            "steps": result.steps,
            "stop_reason": result.stop_reason,
            "wall_s": round(result.wall_s, 2),
            "tokens_per_s": round(result.tokens_per_s),
        }
        if out is not None:
            metrics = {k: v for k, v in report.items() if k not in ("tasks", "mod", "testbed")}
            report["checkpoint"] = str(out)
            report["checkpoint_sha256"] = save_checkpoint(
                out, result.model, task_cfg, train_cfg.to_dict(), metrics
            )
        if as_json:
            typer.echo(json.dumps(report))
        else:
            _print_train_report(report)

    run_guarded(body)


def _print_train_report(report: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"{','.join(report['tasks'])} mod {report['mod']}, d={report['d_model']}")
    table.add_column("op")
    table.add_column("accuracy (greedy)", justify="right")
    table.add_column("strict (trace)", justify="right")
    table.add_column("teacher-forced", justify="right")
    for op, acc in report["accuracy"].items():
        name = f"{op} (measured)" if op == report["measure"] else op
        table.add_row(
            name,
            f"{acc:.3f}",
            f"{report['strict_accuracy'][op]:.3f}",
            f"{report['teacher_forced_accuracy'][op]:.3f}",
        )
    console = Console()
    console.print(table)
    console.print(
        f"params {report['params_total']:,} total, {report['params_non_embedding']:,} without "
        f"embeddings; {report['steps']} steps, stopped: {report['stop_reason']}; "
        f"{report['wall_s']:.1f} s, {report['tokens_per_s'] / 1000:.0f}k tokens/s"
    )
    if "checkpoint" in report:
        console.print(f"checkpoint: {report['checkpoint']}")


@app.command()
def data(
    tasks: Tasks = "max",
    testbed: Testbed = "listops",
    mod: Mod = 10,
    depth: Depth = 2,
    arity: Arity = "2-3",
    p_nest: PNest = 0.25,
    n_train: NTrain = None,
    n_test: NTest = 2000,
    measure: Measure = None,
    split_seed: SplitSeed = 0,
    n: Annotated[int, typer.Option("--n", help="Sequences to show (per op for val/test).")] = 20,
    split: Annotated[str, typer.Option(help="train, val or test.")] = "train",
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON list.")] = False,
    cache_dir: CacheDir = None,
) -> None:
    """Print example sequences exactly as the model sees them."""

    def body():
        from threshold.errors import ConfigError
        from threshold.tasks import load_task_data

        if split not in ("train", "val", "test"):
            raise ConfigError(f"split {split!r} is not allowed: use train, val or test")
        if n < 0:
            raise ConfigError(f"--n {n} is not allowed: use 0 or more")
        task_cfg = task_config(
            tasks, testbed, mod, depth, arity, p_nest, n_train, n_test, measure, split_seed
        )
        data = load_task_data(task_cfg, cache_dir)
        vocab = task_cfg.vocab
        op_names = list(task_cfg.testbed_obj.ops)
        sets = {"train": data.train} if split == "train" else getattr(data, split)
        rows = []
        for seqs in sets.values():
            for i in range(min(n, len(seqs))):
                tokens = seqs[i]
                p = int(seqs.prompt_len[i])
                rows.append(
                    {
                        "text": vocab.decode(tokens),
                        "op": op_names[int(seqs.op[i])],
                        "prompt": vocab.decode(tokens[:p]),
                        "answer": vocab.tokens[int(seqs.answers[i])],
                    }
                )
        if as_json:
            typer.echo(json.dumps(rows))
        else:
            for row in rows:
                typer.echo(row["text"])

    run_guarded(body)


@bench_app.command("train")
def bench_train(
    tasks: Tasks = "max,med,add",
    mod: Mod = 10,
    depth: Depth = 2,
    d_models: Annotated[str, typer.Option("--d-models", help="Comma-separated sizes.")] = (
        "16,32,64,128"
    ),
    steps: Annotated[int, typer.Option(help="Timed training steps per size.")] = 200,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
    cache_dir: CacheDir = None,
) -> None:
    """Training tokens/s and steps/s at several d (bucketed vs random batches), and decoding."""

    def body():
        from rich.console import Console

        from threshold.bench import run_all
        from threshold.errors import ConfigError
        from threshold.tasks import load_task_data

        try:
            sizes = [int(d) for d in d_models.split(",")]
        except ValueError:
            raise ConfigError(f"--d-models {d_models!r} is not a list of integers") from None
        if min(sizes) < 1 or steps < 1:
            raise ConfigError("--d-models and --steps must be 1 or more")
        task_cfg = task_config(tasks, "listops", mod, depth, "2-3", 0.25, None, 512, None, 0)
        data = load_task_data(task_cfg, cache_dir)
        console = Console(stderr=True)
        with console.status("benchmarking") as status:
            results = run_all(data, sizes, steps, on_item=lambda s: status.update(s))
        results["settings"] = {"tasks": list(task_cfg.ops), "mod": mod, "depth": depth}
        results["mean_length"] = float(data.train.lengths.mean())
        if as_json:
            typer.echo(json.dumps(results))
        else:
            _print_bench(results)

    run_guarded(body)


def _print_bench(results: dict) -> None:
    from rich.console import Console
    from rich.table import Table

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
