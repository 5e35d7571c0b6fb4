"""Commands that study trained models: ``transfer`` and ``analyze``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import torch
import typer
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from threshold.analysis import ANALYSIS_DIR, analysis_folder
from threshold.analysis.studies import analyze_checkpoint, analyze_trial, matched_pair
from threshold.analysis.studies import survey as survey_study
from threshold.analysis.transfer import summarize, transfer_experiment
from threshold.cli.common import (
    CacheDir,
    Device,
    Storage,
    TrainingBars,
    name_list,
    run_guarded,
    takes,
    val_accuracy_words,
)
from threshold.config import pretrain_task, resolve_storage, transfer_model_config
from threshold.errors import ConfigError
from threshold.model import param_count
from threshold.options import TASK
from threshold.report.text import cyclic_words, spread_words
from threshold.search.record import read_study
from threshold.search.results import pick_trial
from threshold.search.study import open_storage
from threshold.tasks import TaskConfig
from threshold.train import TrainConfig
from threshold.train.checkpoint import load_checkpoint
from threshold.train.device import resolve_device

Pretrain = Annotated[str, typer.Option(help="Comma-separated ops to pretrain on, e.g. max,med.")]


@takes(TaskConfig(ops=("add",)).options(), task=TASK)  # the target: add unless told
def transfer(
    task: dict,
    pretrain: Pretrain = "max,med",
    d_model: Annotated[int, typer.Option(help="Embedding size d of every model.")] = 48,
    n_seeds: Annotated[
        int, typer.Option("--n-seeds", help="How many seeds to run: --seed, --seed + 1, ...")
    ] = 3,
    seed: Annotated[int, typer.Option(help="First seed.")] = 0,
    seeds: Annotated[str | None, typer.Option("--seeds", hidden=True)] = None,  # renamed
    steps: Annotated[int, typer.Option(help="Most training steps on the target.")] = 20_000,
    pretrain_steps: Annotated[int, typer.Option(help="Most pretraining steps.")] = 20_000,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
    device: Device = "auto",
    cache_dir: CacheDir = None,
) -> None:
    """Target accuracy after pretraining on other ops vs from scratch, same size and seeds."""

    def body():
        if seeds is not None:  # a count here, a list in train: one name, two meanings
            raise ConfigError(
                f"--seeds {seeds}: transfer's count of seeds is now --n-seeds (seeds --seed,"
                " --seed + 1, ...); a list of seeds is train's --seeds"
            )
        if n_seeds < 1:
            raise ConfigError(f"--n-seeds {n_seeds} is not allowed: use 1 or more")
        if seed < 0:
            raise ConfigError(f"--seed {seed} is not allowed: use 0 or more")
        dev = resolve_device(device)
        target = TaskConfig.from_options(**task)
        source_ops = name_list(pretrain)
        source = pretrain_task(target, source_ops)  # validates the ops
        model_cfg = transfer_model_config(source, target, d_model)  # checks the vocabularies
        cfg = TrainConfig(max_steps=steps)
        pretrain_cfg = TrainConfig(max_steps=pretrain_steps)

        def show(phase: str, run_seed: int, p) -> None:
            info = "" if p is None else f"val acc (tf) {val_accuracy_words(p)}"
            bars.update((phase, run_seed), f"seed {run_seed} {phase}", p, info)

        with TrainingBars(first_column="{task.description:<18}") as bars:
            runs = transfer_experiment(
                source_ops, target, d_model, list(range(seed, seed + n_seeds)), cfg, pretrain_cfg,
                cache_dir, on_event=show, device=dev,
            )  # fmt: skip
        report = {
            "pretrain": list(source_ops),
            "tasks": list(target.ops),
            "mod": target.n,
            "testbed": target.testbed,
            "d_model": d_model,
            "params_total": param_count(model_cfg)["total"],
            **summarize(runs, target.measured_op),
        }
        if as_json:
            typer.echo(json.dumps(report))
        else:
            _print_transfer(report)

    run_guarded(body)


def _print_transfer(report: dict) -> None:
    title = (
        f"{report['measure']} at d={report['d_model']} ({report['params_total']:,} params): "
        f"pretrained on {'+'.join(report['pretrain'])} vs from scratch"
    )
    table = Table(title=title)
    for column in ("seed", "pretrained -> target", "from scratch", "gain"):
        table.add_column(column, justify="right")
    for s, moved, scratch in zip(
        report["seeds"], report["transfer"], report["scratch"], strict=True
    ):
        table.add_row(str(s), f"{moved:.3f}", f"{scratch:.3f}", f"{moved - scratch:+.3f}")
    table.add_row(
        "mean",
        f"{report['transfer_mean']:.3f}",
        f"{report['scratch_mean']:.3f}",
        f"{report['gain_mean']:+.3f}",
    )
    Console().print(table)


def analyze(
    studies: Annotated[
        list[str] | None, typer.Argument(help="Study name (two with --compare).")
    ] = None,
    checkpoint: Annotated[
        list[Path] | None,
        typer.Option(help="Analyse this checkpoint file instead (repeat to compare)."),
    ] = None,
    trial: Annotated[int | None, typer.Option(help="Analyse this trial number.")] = None,
    at_transition: Annotated[
        bool, typer.Option("--at-transition", help="The run nearest the 80% point [default].")
    ] = False,
    largest: Annotated[bool, typer.Option("--largest", help="The run with the largest d.")] = False,
    d_model: Annotated[int | None, typer.Option(help="The best run at this d.")] = None,
    compare: Annotated[
        bool, typer.Option("--compare", help="Compare two studies at matched size.")
    ] = False,
    match: Annotated[
        str, typer.Option(help="With --compare: size (same d) or accuracy (closest accuracy).")
    ] = "size",
    out: Annotated[
        Path | None,
        typer.Option(help=f"Figure folder \\[default: {ANALYSIS_DIR.as_posix()}/STUDY-trialN]."),
    ] = None,
    seed: Annotated[int, typer.Option(help="Seed of the permutation nulls.")] = 0,
    threads: Annotated[int, typer.Option(help="Torch threads.")] = 1,
    storage: Storage = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
    cache_dir: CacheDir = None,
) -> None:
    """Embedding structure and layer usage of a study's model; scores stored on the study."""

    def body():
        if threads < 1:
            raise ConfigError(f"--threads {threads} is not allowed: use 1 or more")
        if not 0 <= seed < 2**32:  # numpy's SeedSequence takes no negative seed
            raise ConfigError(f"--seed {seed} is not allowed: use 0 to 2**32 - 1")
        torch.set_num_threads(threads)  # one thread: several threads spin on a busy machine

        console = Console(stderr=True, quiet=as_json)
        base = out or ANALYSIS_DIR
        reports = []
        if checkpoint:
            if studies or compare or trial is not None or at_transition or largest:
                raise ConfigError("--checkpoint takes no study, --compare or trial choice")
            for path in checkpoint:
                ckpt = load_checkpoint(path)  # refused here if tampered with
                folder = out if out is not None and len(checkpoint) == 1 else base / path.stem
                with console.status(f"analysing {path}"):
                    reports.append(analyze_checkpoint(ckpt, str(path), folder, seed, cache_dir))
        else:
            studies_ = studies or []
            wanted = 2 if compare else 1
            if len(studies_) != wanted:
                raise ConfigError(
                    f"{len(studies_)} studies given: name {wanted} "
                    + ("(--compare takes two)" if compare else "(or use --compare A B)")
                )
            picks = [trial is not None, at_transition, largest, d_model is not None and not compare]
            if sum(picks) > 1:
                raise ConfigError("choose one of --trial, --at-transition, --largest, --d-model")
            if compare and (trial is not None or at_transition or largest):
                raise ConfigError("--compare picks its trials by --match (and --d-model)")
            url = resolve_storage(storage)
            storage_obj = open_storage(url, create=False)
            loaded = [read_study(storage_obj, name) for name in studies_]
            if compare:
                numbers = matched_pair(loaded[0], loaded[1], match, d_model)
            elif trial is not None:
                numbers = (trial,)
            else:
                how = "largest" if largest else "at-transition"
                numbers = (pick_trial(loaded[0], how, d_model),)
            for study, number in zip(loaded, numbers, strict=True):
                folder = analysis_folder(study.name, number, base)
                if out is not None and not compare:
                    folder = out
                with console.status(f"analysing {study.name} trial {number}"):
                    reports.append(analyze_trial(study, number, url, folder, seed, cache_dir))
        if as_json:
            typer.echo(json.dumps(reports if len(reports) > 1 else reports[0]))
        else:
            _print_analyses(reports)

    run_guarded(body)


def _print_analyses(reports: list[dict]) -> None:
    table = Table(title="separation: score / null 95th percentile (> 1: beyond chance)")
    table.add_column("")
    for r in reports:
        table.add_column(f"{r['name']}\n{'+'.join(r['tasks'])}, d={r['d_model']}", justify="right")
    heads = [r["summary"] for r in reports]
    table.add_row("params", *[f"{r['params_total']:,}" for r in reports])
    accuracies = ["-" if h["accuracy"] is None else f"{h['accuracy']:.3f}" for h in heads]
    table.add_row(f"{reports[0]['measure']} accuracy", *accuracies)
    for name in heads[0]["separation"]:
        table.add_row(name, *[f"{h['separation'].get(name, float('nan')):.2f}" for h in heads])
    if heads[0]["ordering"] is not None:
        table.add_row("ordering |rho|", *[f"{h['ordering']:.2f}" for h in heads])
    if heads[0].get("cyclic") is not None:
        table.add_row("cyclic share (k; / null)", *[cyclic_words(h) for h in heads])
    table.add_row("attention share", *[f"{h['attn_share']:.2f}" for h in heads])
    table.add_row("acc, attention zeroed", *[f"{h['ablation']['attn']:.2f}" for h in heads])
    table.add_row("acc, MLP zeroed", *[f"{h['ablation']['mlp']:.2f}" for h in heads])
    console = Console()
    console.print(table)
    for r in reports:
        console.print(f"figures: {', '.join(r['figures'])}")


def survey(
    studies: Annotated[list[str], typer.Argument(help="Study names.")],
    min_accuracy: Annotated[
        float, typer.Option(help="Score the runs whose measured accuracy is at least this.")
    ] = 0.7,
    seed: Annotated[int, typer.Option(help="Seed of the permutation nulls.")] = 0,
    threads: Annotated[int, typer.Option(help="Torch threads.")] = 1,
    storage: Storage = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON list.")] = False,
    cache_dir: CacheDir = None,
) -> None:
    """Embedding structure and attention share of every learned run of studies; stores nothing."""

    def body():
        if threads < 1:
            raise ConfigError(f"--threads {threads} is not allowed: use 1 or more")
        torch.set_num_threads(threads)
        url = resolve_storage(storage)
        storage_obj = open_storage(url, create=False)
        loaded = [read_study(storage_obj, name) for name in studies]  # all checked first
        results = []
        with Progress(disable=as_json, transient=True) as progress:
            for study in loaded:
                bar = progress.add_task(f"scoring {study.name}", total=None)

                def advance(done: int, total: int, bar=bar) -> None:
                    progress.update(bar, completed=done, total=total)

                results.append(
                    survey_study(study, url, min_accuracy, seed, cache_dir, on_run=advance)
                )
        if as_json:
            typer.echo(json.dumps(results))
        else:
            for result in results:
                _print_survey(result)

    run_guarded(body)


def _print_survey(result: dict) -> None:
    rows, summ = result["runs"], result["summary"]
    table = Table(
        title=f"{result['study']}: {summ['n_runs']} runs with accuracy >= "
        f"{result['min_accuracy']:g} (separation: score / null 95th percentile; cyclic: "
        "variance share on frequency k)"
    )
    labels = list(rows[0]["separation"]) if rows else []
    for column in ("trial", "d", "acc", *labels, "order", "cyclic", "k", "attn"):
        table.add_column(column, justify="right")
    for r in rows:
        ordering, cyclic = (
            "-" if r[key] is None else f"{r[key]:.2f}" for key in ("ordering", "cyclic")
        )
        table.add_row(
            str(r["trial"]), str(r["d_model"]), f"{r['accuracy']:.3f}",
            *[f"{r['separation'][k]:.2f}" for k in labels], ordering, cyclic,
            str(r["cyclic_frequency"] or "-"),
            f"{r['attn_share']:.2f}",
        )  # fmt: skip
    console = Console()
    console.print(table)
    words = [
        f"{name} median {spread_words(summ[key])}"
        for key, name in (("ordering", "ordering"), ("cyclic", "cyclic share"),
                          ("attn_share", "attention share"))
        if summ[key] is not None
    ]  # fmt: skip
    beyond = ", ".join(f"{k} {v}" for k, v in summ["beyond_null"].items())
    if rows:
        console.print("; ".join(words))
        console.print(f"runs beyond their null's 95th percentile: {beyond}")
