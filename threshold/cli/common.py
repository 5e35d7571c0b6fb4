"""The options every command shares, and one-line error handling.

Every command module imports this one: it loads typer, rich and :mod:`threshold.tasks` (numpy),
never torch, Optuna or SciPy; ``threshold --help`` does not import it (:mod:`.commands`)."""

from __future__ import annotations

import math
import time
from datetime import timedelta
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from threshold.allocator import keep_freed_memory
from threshold.cli.commands import STATE
from threshold.errors import ConfigError, ThresholdError
from threshold.interrupt import exit_status, install, interrupted
from threshold.tasks import TaskConfig

EXIT_USAGE = 2
LINE_EVERY_S = 60.0  # training progress written to a file or pipe: a line a run this often


# Task options shared by every command that makes data.
Tasks = Annotated[str, typer.Option("--tasks", help="Comma-separated ops, e.g. max,med,add.")]
Testbed = Annotated[str, typer.Option(help="listops (digits mod n) or perm (S_k).")]
Mod = Annotated[int, typer.Option("--mod", help="Modulus n (listops) or degree k (perm).")]
Depth = Annotated[int, typer.Option(help="Expression depth; 2 is one nesting level.")]
Arity = Annotated[str, typer.Option(help="Operands per op, as MIN-MAX.")]
PNest = Annotated[float, typer.Option(help="Chance an operand is a nested op.")]
NTrain = Annotated[int | None, typer.Option(help="Training sequences \\[default: 5000 x mod].")]
NTest = Annotated[int, typer.Option(help="Test sequences per op.")]
Measure = Annotated[str | None, typer.Option(help="Op whose accuracy is the run's number.")]
SplitSeed = Annotated[int, typer.Option(help="Seed of the held-out split and test sets.")]
Storage = Annotated[
    str | None,
    typer.Option(
        help="Database URL \\[default: $THRESHOLD_STORAGE or sqlite:///studies/threshold.db]."
    ),
]
Heartbeat = Annotated[
    int | None,
    typer.Option(
        help="Seconds between heartbeats; a trial silent for 3 of them is retried "
        "\\[default: 30, threshold.config.Execution].",
        show_default=False,
    ),
]
Device = Annotated[
    str,
    typer.Option(help="Where models train: auto (a CUDA GPU if there is one), cpu, cuda, cuda:N."),
]
CacheDir = Annotated[
    Path | None,
    typer.Option(help="Data cache \\[default: $THRESHOLD_CACHE or ~/.cache/threshold]."),
]


# Recipe options (threshold.config): None keeps the recipe's value.
Recipe = Annotated[
    str, typer.Option(help="Training recipe: fast (this tool's) or paper (the group's code).")
]
Steps = Annotated[
    int | None, typer.Option(help="Most training steps per run \\[default: the recipe's].")
]
Lr = Annotated[float | None, typer.Option(help="Peak learning rate \\[default: the recipe's].")]
WeightDecay = Annotated[
    float | None, typer.Option(help="AdamW weight decay \\[default: the recipe's].")
]
InitStd = Annotated[
    float | None,
    typer.Option(
        help="Init every weight N(0, std) instead of fan-in scaled \\[default: the recipe's]."
    ),
]
Schedule = Annotated[
    str | None,
    typer.Option(
        help="Learning-rate schedule: cosine, exponential or constant \\[default: the recipe's]."
    ),
]
DecaySteps = Annotated[
    int | None,
    typer.Option(
        help="Steps the decay spans (fixed: needed for --checkpoints) \\[default: budget]."
    ),
]
LossOn = Annotated[
    str | None,
    typer.Option(help="Loss on the completion or on all tokens \\[default: the recipe's]."),
]
Batches = Annotated[
    str | None,
    typer.Option(
        help="Batches of whole sequences, or windows of the concatenated stream (--loss-on all)"
        " \\[default: the recipe's]."
    ),
]
Window = Annotated[
    int | None,
    typer.Option(help="Tokens a stream window (--batches windows) \\[default: the recipe's]."),
]
Block = Annotated[
    str | None, typer.Option(help="Block: sequential or parallel \\[default: the recipe's].")
]
EarlyStop = Annotated[
    str | None,
    typer.Option(
        help="learned_or_stuck, learned (no stuck rule) or never (the whole budget)"
        " \\[default: the recipe's]."
    ),
]
Split = Annotated[
    str | None,
    typer.Option(
        help="Held-out split: groups (a share of each op's applications) or triples (the"
        " group's digit triples, held out of every op) \\[default: the recipe's]."
    ),
]
Decoding = Annotated[
    str | None,
    typer.Option(
        help="Accuracy the transition uses: greedy or sampled (T = 1) \\[default: the recipe's]."
    ),
]
Checkpoints = Annotated[
    str | None,
    typer.Option(
        help="Shares of the budget where accuracy is kept, e.g. 0.125,0.25,0.5,1 \\[default: none]."
    ),
]
Weights = Annotated[
    str | None, typer.Option(help="Mixture weights per op, e.g. add=2 (others weigh 1).")
]
BatchSize = Annotated[
    int | None,
    typer.Option(help="Sequences (or stream windows) per step \\[default: the recipe's]."),
]
WarmupSteps = Annotated[
    int | None, typer.Option(help="Steps of linear warm-up \\[default: the recipe's].")
]
MinLrRatio = Annotated[
    float | None,
    typer.Option(help="Fraction of --lr the decay ends at \\[default: the recipe's]."),
]
GradClip = Annotated[
    float | None, typer.Option(help="Largest gradient norm \\[default: the recipe's].")
]
Betas = Annotated[
    str | None, typer.Option(help="AdamW betas, e.g. 0.9,0.98 \\[default: the recipe's].")
]
DecayAll = Annotated[
    bool | None,
    typer.Option(
        "--decay-all/--decay-matrices",
        help="Weight decay on every parameter, or on matrices and embeddings only"
        " \\[default: the recipe's].",
        show_default=False,
    ),
]
Activation = Annotated[
    str | None, typer.Option(help="MLP activation: gelu or relu \\[default: the recipe's].")
]
NRecur = Annotated[
    int | None,
    typer.Option(help="Times the one block is applied \\[default: the recipe's]."),
]
QkvBias = Annotated[
    bool | None,
    typer.Option(
        "--qkv-bias/--no-qkv-bias",
        help="Biases on queries, keys and values \\[default: the recipe's].",
        show_default=False,
    ),
]
TrialsAtOnce = Annotated[
    int | None,
    typer.Option(
        "--trials-at-once",
        help="Trials a worker takes at once and trains together as one batched run (the"
        " sampler's K; --batch-size is sequences a step) \\[default: 1 on the CPU, 8 on a GPU].",
        show_default=False,
    ),
]
# The option's old name, refused: "--batch 32" read as a batch size trained 32 trials at once.
OldBatch = Annotated[int | None, typer.Option("--batch", hidden=True)]


def refuse_old_batch(value: int | None) -> None:
    """``--batch`` (renamed): refused with the two options it could have meant."""
    if value is not None:
        raise ConfigError(
            f"--batch {value}: the option is now --trials-at-once {value} (trials trained"
            f" together); for sequences a step use --batch-size {value}"
        )


MatchExposure = Annotated[
    bool,
    typer.Option(help="Grow the training set until the measured op has its single-op node count."),
]


# The recipe options a command takes beside --recipe, named as the recipe fields they set.
RECIPE_OPTIONS = (
    "lr",
    "weight_decay",
    "init_std",
    "schedule",
    "decay_steps",
    "loss_on",
    "batches",
    "window",
    "block",
    "early_stop",
    "decoding",
    "checkpoints",
    "warmup_steps",
    "min_lr_ratio",
    "grad_clip",
    "betas",
    "decay_all",
    "activation",
    "n_recur",
    "qkv_bias",
    "split",  # the task's, which a recipe may set (threshold.config.TASK_FIELDS)
)


def recipe_overrides(options: dict) -> dict:
    """The recipe fields that a command's options set: ``options`` is the command's ``locals()``
    (``None``: not set); ``checkpoints`` as text ``0.25,0.5,1`` becomes shares."""
    out = {k: options[k] for k in RECIPE_OPTIONS if options.get(k) is not None}
    if "checkpoints" in out:
        try:
            out["checkpoints"] = tuple(float(x) for x in out["checkpoints"].split(","))
        except ValueError:
            raise ConfigError(
                f"--checkpoints {options['checkpoints']!r} is not a list like 0.25,0.5,1"
            ) from None
    if "betas" in out:
        try:
            out["betas"] = tuple(float(x) for x in out["betas"].split(","))
        except ValueError:
            raise ConfigError(f"--betas {options['betas']!r} is not a pair like 0.9,0.98") from None
    return out


class TrainingBars:
    """Training progress on stderr (stdout stays clean, for ``--json`` too), fed by training
    callbacks, one entry per key: rich progress bars on a terminal; where stderr is a file or a
    pipe (a run in the background, its log), a plain line per key at most every
    :data:`LINE_EVERY_S` seconds, and at its last step, ending with the time since the start.

    ``first_column`` is the bar's leading text column, a rich format over ``task`` (e.g. its
    description, or the step count).
    """

    def __init__(self, first_column: str = "{task.description}") -> None:
        self.console = Console(stderr=True)
        self.lines = not self.console.is_terminal
        self.progress = Progress(
            TextColumn(first_column),
            BarColumn(),
            TextColumn("{task.fields[info]}"),
            TimeElapsedColumn(),
            console=self.console,
            disable=self.lines,
        )
        self.bars: dict = {}
        self.said: dict = {}  # key: when its last line was written (lines only)
        self.start = time.monotonic()

    def __enter__(self):
        self.progress.__enter__()
        return self

    def __exit__(self, *exc):
        return self.progress.__exit__(*exc)

    def update(self, key, description: str, p=None, info: str = "") -> None:
        """Start the bar ``key`` if new; with a training ``Progress`` ``p``, move it on."""
        if self.lines:
            self._line(key, description, p, info)
            return
        if key not in self.bars:
            total = None if p is None else p.max_steps
            self.bars[key] = self.progress.add_task(description, total=total, info=info)
        if p is not None:
            self.progress.update(self.bars[key], total=p.max_steps, completed=p.step, info=info)

    def say(self, words: str) -> None:
        """One plain line on stderr, above the bars."""
        self.console.print(words, highlight=False, soft_wrap=True)

    def _line(self, key, description: str, p, info: str) -> None:
        now = time.monotonic()
        last = p is not None and p.step >= p.max_steps
        if not last and now - self.said.get(key, -math.inf) < LINE_EVERY_S:
            return
        self.said[key] = now
        step = "" if p is None else f" step {p.step:,}/{p.max_steps:,}"
        elapsed = timedelta(seconds=round(now - self.start))  # as the bars' column shows it
        self.say(f"{description}{step}  {info}  {elapsed}")


def val_accuracy_words(p) -> str:
    """``max 0.93 add 0.41``: the latest teacher-forced validation accuracy per op."""
    return " ".join(f"{op} {a:.2f}" for op, a in p.val_accuracy.items()) or "-"


def wide_console(*texts: str, rest: int = 60):
    """A rich Console for a table whose first column holds ``texts`` whole (study names, which
    users copy): as wide as the terminal, or wider where a name and ``rest`` columns need it
    (piped output is 80 columns otherwise, and a name would wrap)."""
    console = Console()
    need = max((len(t) for t in texts), default=0) + rest
    return console if console.width >= need else Console(width=need)


def run_words(row: dict) -> str:
    """``d = 16 (4,816 params) accuracy 0.912 (learned, 21 s)``: one finished run of a study
    (a row of :func:`threshold.search.find.snapshot`), as each command following a study says it."""
    if row["state"] == "COMPLETE":
        return (
            f"d = {row['d_model']} ({row['params_total'] or 0:,} params) accuracy "
            f"{row['accuracy']:.3f} ({row['stop_reason']}, {row['seconds'] or 0:.0f} s)"
        )
    return f"d = {row['d_model']} failed (retried if its worker died)"


def pace_words(snap: dict, slots: int) -> str | None:
    """``at most 37 runs to go, about 12 min at 19 s a run``: how long the study has left were it
    to use its whole budget, from its completed runs' mean time (a resumed study's stored runs
    too) and the trials that train at once (``slots``); None before a run completed, or once
    the budget is used. The search stops sooner where its interval reaches its precision."""
    rows = snap["trials"]
    seconds = [r["seconds"] for r in rows if r["state"] == "COMPLETE" and r["seconds"]]
    running = sum(r["state"] == "RUNNING" for r in rows)
    left = snap["budget"] - snap["n_trials"] - running
    if not seconds or left + running <= 0:
        return None
    each = sum(seconds) / len(seconds)
    rounds = -(-(left + running) // max(slots, 1))  # runs one slot trains in turn, rounded up
    n = left + running
    return (
        f"at most {n} run{'s' if n != 1 else ''} to go, about {_span(rounds * each)} at "
        f"{_span(each)} a run (sooner if it reaches its precision)"
    )


def _span(seconds: float) -> str:
    """``45 s``, ``12 min``, ``3.5 h`` (threshold.report.text.duration, without loading the
    report's readers into every command)."""
    if seconds < 120:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.0f} min" if seconds < 7200 else f"{seconds / 3600:.1f} h"


def task_config(tasks, testbed, mod, depth, arity, p_nest, n_train, n_test, measure, split_seed):
    return TaskConfig.from_options(
        tasks, testbed, mod, depth, arity, p_nest, n_train, n_test, measure, split_seed
    )


def int_list(text: str, option: str, example: str = "16,24,32") -> list[int]:
    """``16,24,32`` as integers; a repeat or a non-integer is refused, naming the option and an
    ``example`` of its own."""
    if not text.strip():
        raise ConfigError(f"{option} is empty: give an integer or a list like {example}")
    try:
        values = [int(x) for x in text.split(",")]  # an empty item ("8,,16") is refused too
    except ValueError:
        raise ConfigError(f"{option} {text!r} is not an integer or a list like {example}") from None
    if len(set(values)) != len(values):
        raise ConfigError(f"{option} {text!r} repeats a value: name each once")
    return values


def _fail(message: str) -> typer.Exit:
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(EXIT_USAGE)


def run_guarded(body):
    """Run ``body``; a ThresholdError becomes one line on stderr and exit status 2.

    SIGINT and SIGTERM both raise KeyboardInterrupt (also in a process started with SIGINT
    ignored, as background jobs are), so a running trial is marked failed, never left running;
    any error raised after one ends the command as interrupted too (exit status 130 or 143).
    The C allocator keeps freed memory for the next array (:mod:`threshold.allocator`).
    """
    install()
    keep_freed_memory()
    try:
        return body()
    except typer.Exit:  # the command's own ending, its words said
        raise
    except (KeyboardInterrupt, Exception) as e:
        if interrupted(e):  # a signal can surface as a library's own error (interrupt.py)
            if STATE.debug and not isinstance(e, KeyboardInterrupt):
                raise
            typer.echo("interrupted", err=True)
            raise typer.Exit(exit_status()) from None
        if isinstance(e, ThresholdError) and not STATE.debug:
            raise _fail(str(e)) from None
        raise
