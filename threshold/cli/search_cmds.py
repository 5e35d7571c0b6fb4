"""Commands of the transition search: ``find``, ``worker``, ``status``, ``bench search``."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from threshold.cli.common import (
    Activation,
    Arity,
    Batches,
    BatchSize,
    Betas,
    Block,
    CacheDir,
    Checkpoints,
    DecayAll,
    DecaySteps,
    Decoding,
    Depth,
    Device,
    EarlyStop,
    GradClip,
    Heartbeat,
    InitStd,
    LossOn,
    Lr,
    MatchExposure,
    Measure,
    MinLrRatio,
    Mod,
    NRecur,
    NTest,
    NTrain,
    OldBatch,
    PNest,
    QkvBias,
    Recipe,
    Schedule,
    SplitSeed,
    Steps,
    Storage,
    Tasks,
    Testbed,
    TrialsAtOnce,
    WarmupSteps,
    WeightDecay,
    Weights,
    Window,
    app,
    bench_app,
    estimate_words,
    recipe_overrides,
    refuse_old_batch,
    run_guarded,
    run_words,
    wide_console,
)
from threshold.interrupt import exit_status


@app.command()
def find(
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
    budget: Annotated[int, typer.Option(help="Most training runs.")] = 40,
    precision: Annotated[
        float,
        typer.Option(help="Stop when the 90% interval of the 80% point is this narrow."),
    ] = 2.5,
    d_lo: Annotated[int, typer.Option(help="Smallest d of the initial bracket.")] = 8,
    d_hi: Annotated[int, typer.Option(help="Largest d of the initial bracket.")] = 128,
    level: Annotated[
        float, typer.Option(help="Transition: the curve reaches level x A (the paper's wording).")
    ] = 0.8,
    chance_corrected: Annotated[
        bool,
        typer.Option(
            "--chance-corrected/--paper-level",
            help="Read the level as chance + level x (A - chance), 80% of the way up from chance,"
            " instead of level x A. Stored on the study.",
        ),
    ] = False,
    recipe: Recipe = "fast",
    steps: Steps = None,
    batch_size: BatchSize = None,
    lr: Lr = None,
    weight_decay: WeightDecay = None,
    init_std: InitStd = None,
    schedule: Schedule = None,
    decay_steps: DecaySteps = None,
    loss_on: LossOn = None,
    batches: Batches = None,
    window: Window = None,
    block: Block = None,
    early_stop: EarlyStop = None,
    decoding: Decoding = None,
    checkpoints: Checkpoints = None,
    warmup_steps: WarmupSteps = None,
    min_lr_ratio: MinLrRatio = None,
    grad_clip: GradClip = None,
    betas: Betas = None,
    decay_all: DecayAll = None,
    activation: Activation = None,
    n_recur: NRecur = None,
    qkv_bias: QkvBias = None,
    weights: Weights = None,
    match_exposure: MatchExposure = False,
    seed: Annotated[int, typer.Option(help="Base seed; run seeds derive from it.")] = 0,
    pretrain: Annotated[
        str | None,
        typer.Option(help="Pretrain every run on these ops first, e.g. max,med (transfer)."),
    ] = None,
    workers: Annotated[
        int,
        typer.Option(
            help="Worker processes (one torch thread each); 0 creates the study only, for workers"
            " started elsewhere (threshold worker, threshold cluster slurm)."
        ),
    ] = 1,
    trials_at_once: TrialsAtOnce = 1,
    batch: OldBatch = None,
    device: Device = "auto",
    oversubscribe: Annotated[
        bool, typer.Option(help="Start more workers than cores (CPU) or GPUs (CUDA).")
    ] = False,
    storage: Storage = None,
    study: Annotated[str | None, typer.Option(help="Study name \\[default: derived].")] = None,
    heartbeat: Heartbeat = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
    cache_dir: CacheDir = None,
) -> None:
    """Locate the learning transition of a mixture with an Optuna study."""
    options = dict(locals())  # the recipe options among them: recipe_overrides

    def body():
        from threshold.config import Execution
        from threshold.search.find import Interrupted, run_search
        from threshold.search.spec import StudySettings

        refuse_old_batch(batch)
        execution = Execution(  # checked before the study's settings are built
            storage,
            1 if workers == 0 else workers,  # 0: the study only (run_search's create_only)
            trials_at_once,
            device,
            cache_dir=cache_dir,
            oversubscribe=oversubscribe,
        ).but(heartbeat_s=heartbeat)

        settings = StudySettings.from_options(
            tasks,
            testbed,
            mod,
            depth,
            arity,
            p_nest,
            n_train,
            n_test,
            measure,
            split_seed,
            steps,
            d_lo,
            d_hi,
            precision,
            budget,
            level,
            chance_corrected,
            seed,
            pretrain,
            weights,
            match_exposure,
            recipe,
            batch_size=batch_size,
            **recipe_overrides(options),
        )
        try:
            with _LiveView(enabled=not as_json) as view:
                outcome = run_search(
                    settings, execution, study, on_update=view.update, on_run=view.run_ended,
                    create_only=workers == 0,
                )  # fmt: skip
        except Interrupted as e:
            typer.echo(f"interrupted: run the same command to resume study {e.study!r}", err=True)
            raise typer.Exit(exit_status()) from None
        report = outcome.to_json()
        if as_json:
            typer.echo(json.dumps(report))
        else:
            _print_summary(report)

    run_guarded(body)


@app.command()
def worker(
    study: Annotated[str, typer.Option(help="Name of the study to join.")],
    storage: Storage = None,
    heartbeat: Heartbeat = None,
    max_trials: Annotated[int | None, typer.Option(help="Stop after this many trials.")] = None,
    quiet: Annotated[bool, typer.Option(help="Log warnings only.")] = False,
    trials_at_once: TrialsAtOnce = 1,
    batch: OldBatch = None,
    device: Device = "auto",
    cache_dir: CacheDir = None,
) -> None:
    """Join a study (from this or another machine) and run its trials until it is done."""

    def body():
        import logging

        from threshold.config import Execution
        from threshold.report.notes import NOTE_RENDER
        from threshold.search.find import die_with_parent
        from threshold.search.record import storage_log_level
        from threshold.search.worker import run_worker

        refuse_old_batch(batch)
        die_with_parent()
        level = logging.WARNING if quiet else logging.INFO
        logging.basicConfig(level=level, format="%(asctime)s worker %(process)d %(message)s")
        storage_log_level(level)
        execution = Execution(storage, 1, trials_at_once, device, cache_dir=cache_dir)
        execution = execution.but(heartbeat_s=heartbeat)
        run_worker(study, execution, max_trials, notes=NOTE_RENDER)

    run_guarded(body)


@app.command()
def status(
    storage: Storage = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON list.")] = False,
) -> None:
    """List the studies in a storage with their current transition estimates."""

    def body():
        from threshold.search.record import study_rows
        from threshold.search.study import default_storage_missing, open_storage, storage_url

        if default_storage_missing(storage):
            rows = []
        else:
            rows = study_rows(open_storage(storage_url(storage), create=False))
        if as_json:
            typer.echo(json.dumps(rows))
            return
        if not rows:
            typer.echo(f"no studies yet in {storage_url(storage)}: start one with `threshold find`")
            return
        from rich.table import Table

        table = Table(title="studies")
        table.add_column("study", no_wrap=True)
        for col in ("runs", "running", "80% point (params)", "90% interval", "d"):
            table.add_column(col, justify="right")
        for r in rows:
            est = r["estimate"] or {}
            interval = est.get("interval_params")
            table.add_row(
                r["study"],
                str(r["n_complete"]),
                str(r["n_running"]),
                f"{est['params_p80']:,.0f}" if est.get("params_p80") else "-",
                f"{interval[0]:,.0f} - {interval[1]:,.0f}" if interval else "-",
                f"{est['d_p80']:.1f}" if est.get("d_p80") else "-",
            )
        wide_console(*(r["study"] for r in rows), rest=75).print(table)

    run_guarded(body)


@bench_app.command("search")
def bench_search(
    studies: Annotated[int, typer.Option(help="Simulated studies per family.")] = 100,
    seed: Annotated[int, typer.Option(help="Seed of the simulated truths.")] = 0,
    families: Annotated[
        str,
        typer.Option(help="Truth families: bimodal, graded, shallow, partial, plateau, censored."),
    ] = "bimodal,graded,shallow,partial,plateau,censored",
    runs: Annotated[
        str, typer.Option(help="Run counts at which the sampler, its stop off, is scored.")
    ] = "12,24,48",
    precision: Annotated[
        float,
        typer.Option(help="The stop's precision (hi / lo of the 90% interval), as find's."),
    ] = 2.5,
    methods: Annotated[
        bool,
        typer.Option(
            "--methods",
            help="Instead: our sampler against a dense grid and plain Optuna (bimodal family).",
        ),
    ] = False,
    batches: Annotated[
        bool,
        typer.Option(
            "--batches",
            help="Instead: batch workers of 1, 4, 8 and 16 trials (bimodal family): runs, "
            "compute, rounds (wall-clock in runs), coverage.",
        ),
    ] = False,
    overrides: Annotated[
        list[str] | None,
        typer.Option(
            "--set",
            help="NAME=VALUE: a setting of the search or its posterior changed for this run "
            "(repeatable; VALUE in JSON, e.g. size_sd=0.05 or plateau_lengths=[0.75,1.5]).",
        ),
    ] = None,
    jobs: Annotated[
        int,
        typer.Option(
            help="Processes that share the families table's studies (the same result for any"
            " number; one per free core)."
        ),
    ] = 1,
    rows: Annotated[
        str,
        typer.Option(
            help="Rows of the families table to compute: sampler, grid, spread, oracle,"
            " oracle_fit, and oracle_fit_read (the shape-unknown oracle's runs read by our"
            " posterior; not by default). Each has its own random stream: the same numbers"
            " whichever are chosen."
        ),
    ] = "sampler,grid,spread,oracle,oracle_fit",
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Our sampler on simulated studies with known truth, family by family (see README)."""

    def body():
        from threshold.errors import ConfigError
        from threshold.search.benchmark import bench_families
        from threshold.search.benchmark import bench_search as run_bench
        from threshold.search.families import CHANCE
        from threshold.search.sampler import policy_settings
        from threshold.search.settings import with_overrides
        from threshold.search.simulate import ResponseModel
        from threshold.search.spec import StudySettings
        from threshold.search.study import SearchConfig
        from threshold.tasks import TaskConfig
        from threshold.train import TrainConfig

        if studies < 1:
            raise ConfigError(f"--studies {studies} is not allowed: use 1 or more")
        changed = _parsed_overrides(overrides or [])
        # The tool's own defaults on ListOps mod 10 (vocabulary 22, context 60).
        search = SearchConfig(precision=precision)
        defaults = StudySettings(TaskConfig(ops=("add",)), TrainConfig(), search)
        if methods or batches:
            model = ResponseModel()
            settings = with_overrides(
                policy_settings(defaults, chance=model.unlearned_mean), changed
            )
            chosen = ("policy", "policy_b4", "policy_b8", "policy_b16", "grid")
            result = run_bench(
                n_studies=studies,
                seed=seed,
                settings=settings,
                model=model,
                **({"methods": chosen} if batches else {}),
            )
        else:
            try:
                counts = tuple(int(v) for v in runs.split(",") if v.strip())
            except ValueError:
                raise ConfigError(f"--runs {runs!r}: give run counts such as 12,24,48") from None
            names = tuple(f.strip() for f in families.split(",") if f.strip())
            result = bench_families(
                n_studies=studies,
                seed=seed,
                families=names,
                checkpoints=counts,
                settings=with_overrides(policy_settings(defaults, chance=CHANCE), changed),
                jobs=jobs,
                rows=tuple(r.strip() for r in rows.split(",") if r.strip()),
            )
        result["overrides"] = changed
        if as_json:
            typer.echo(json.dumps(result))
        elif methods or batches:
            _print_bench_search(result)
        else:
            _print_bench_families(result)

    run_guarded(body)


def _parsed_overrides(pairs: list[str]) -> dict:
    """{name: value} from ``--set NAME=VALUE`` options, each VALUE read as JSON."""
    from threshold.errors import ConfigError

    out = {}
    for pair in pairs:
        name, sep, text = pair.partition("=")
        try:
            if not (sep and name.strip()):
                raise ValueError
            out[name.strip()] = json.loads(text)
        except ValueError:
            raise ConfigError(
                f"--set {pair!r}: give NAME=VALUE with VALUE in JSON, e.g. size_sd=0.05"
            ) from None
    if "precision" in out:  # one way to set it, the one find has
        raise ConfigError("--set precision: use --precision, as with find")
    return out


def _overrides_note(result: dict) -> str:
    """The settings a bench run changed, for its table's title ('' when none)."""
    changed = result.get("overrides") or {}
    return "; " + ", ".join(f"{k}={json.dumps(v)}" for k, v in changed.items()) if changed else ""


class _LiveView:
    """A live table of the study's trials and its current estimate on stderr; where stderr is
    not a terminal (a log file, nohup, CI), one plain line per run as it ends instead."""

    def __init__(self, enabled: bool) -> None:
        from rich.console import Console
        from rich.live import Live

        console = Console(stderr=True)
        self.live = Live(console=console, refresh_per_second=2, transient=False)
        self.plain = enabled and not console.is_terminal
        self.enabled = enabled and not self.plain

    def run_ended(self, row: dict, snap: dict) -> None:
        if self.plain:
            typer.echo(
                f"trial {row['number']}: {run_words(row)}; {estimate_words(snap['estimate'])}",
                err=True,
            )

    def __enter__(self):
        if self.enabled:
            self.live.__enter__()
        return self

    def __exit__(self, *exc):
        if self.enabled:
            return self.live.__exit__(*exc)
        return None

    def update(self, snap: dict) -> None:
        if self.enabled:
            self.live.update(_trials_table(snap))


def _trials_table(snap: dict):
    from rich.table import Table

    from threshold.search.fit import strays

    est = snap["estimate"]
    caption = "no estimate yet"
    if est and est.get("params_p80"):
        lo, hi = est["interval_params"]
        caption = (
            f"80% point: {est['params_p80']:,.0f} params (d {est['d_p80']:.1f}), "
            f"90% interval {lo:,.0f} - {hi:,.0f}"
        ) + ("; its sizes stray from any smooth curve" if strays(est) else "")
    if any(r["state"] == "RUNNING" for r in snap["trials"]):
        caption += (
            "; a running trial whose worker died is retried after 3 missed heartbeats"
            " (90 s at the default --heartbeat 30)"
        )
    table = Table(title=f"study {snap['study']}", caption=caption)
    for col in ("trial", "d", "params", "seed", "accuracy", "time", "state"):
        table.add_column(col, justify="right")
    for r in snap["trials"][-20:]:
        if r["accuracy"] is not None:
            acc = f"{r['accuracy']:.3f}"
        elif r["val_accuracy"] is not None:
            acc = f"({r['val_accuracy']:.2f} @ {r['step']})"
        else:
            acc = "-"
        table.add_row(
            str(r["number"]),
            str(r["d_model"] or "-"),
            f"{r['params_total']:,}" if r["params_total"] else "-",
            str(r["seed"] if r["seed"] is not None else "-"),
            acc,
            f"{r['seconds']:.0f}s" if r["seconds"] is not None else "-",
            r["state"].lower() + (f" ({r['stop_reason']})" if r["stop_reason"] else ""),
        )
    return table


def _print_summary(report: dict) -> None:
    from rich.console import Console

    console = Console()
    est = report["transition"]
    if not est or not est.get("params_p80"):
        console.print(
            f"study {report['study']}: {report['n_trials']} runs, no estimate yet", soft_wrap=True
        )
        return
    lo, hi = est["interval_params"]
    n, new = report["n_trials"], report["n_new"]
    if new == n:
        runs = f"{n} runs in {report['wall_s']:.0f} s"
    elif new == 0:
        runs = f"{n} runs, all from before (nothing left to run)"
    else:
        runs = f"{n} runs, {new} of them new, in {report['wall_s']:.0f} s"
    console.print(
        f"study {report['study']}: {runs}\n"
        f"80% point: {est['params_p80']:,.0f} parameters (d = {est['d_p80']:.1f}), "
        f"90% interval {lo:,.0f} - {hi:,.0f}\n"
        f"midpoint: {est['midpoint_params']:,.0f} parameters",
        soft_wrap=True,  # the study's name is copied from here: never broken
    )


def _print_bench_search(result: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(
        title=f"search on {result['n_studies']} simulated studies (known truth)"
        + _overrides_note(result)
    )
    cols = ("method", "median runs", "median rounds", "mean compute", "vs grid", "coverage")
    for col in (*cols, "median width"):
        table.add_column(col, justify="right")
    for name, m in result["methods"].items():
        table.add_row(
            name,
            f"{m['median_runs']:g}",
            f"{m['median_rounds']:g}",
            f"{m['mean_compute']:.0f}",
            f"{result['compute_vs_grid'].get(name, float('nan')):.2f}",
            f"{m['coverage']:.2f}",
            f"{m['median_width_ratio']:.2f}",
        )
    Console().print(table)


def _print_bench_families(result: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(
        title=f"sampler on {result['n_studies']} simulated studies per family (known truth); "
        f"grid: {len(result['grid_sizes'])} sizes x {result['grid_seeds']} seeds"
        + _overrides_note(result)
    )
    cols = ("family", "runs", "median runs", "compute vs grid", "coverage", "median |ln err|")
    for col in (*cols, "within 20%", "median ln err"):
        table.add_column(col, justify="right")
    for family, rows in result["families"].items():
        for key, m in rows.items():
            if key == "seconds":
                continue
            label = {
                "stop": "own stop",
                "grid": "grid (posterior)",
                "spread": "spread, place and slope known",
                "oracle": "oracle, shape known",
                "oracle_stop": "oracle, to the precision",
                "oracle_fit": "oracle, shape unknown (fitted)",
                "oracle_fit_read": "its runs, read by the posterior",
            }.get(key, f"{key}, stop off")
            table.add_row(
                family,
                label,
                f"{m['median_runs']:g}",
                f"{m['compute_vs_grid']:.2f}",
                "-" if m["coverage"] is None else f"{m['coverage']:.2f}",
                f"{m['median_abs_log_error']:.3f}",
                f"{m['within_20']:.2f}",
                f"{m['median_signed_log_error']:+.3f}",
            )
    Console().print(table)
