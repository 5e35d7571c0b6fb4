"""The options every command shares, and one-line error handling.

Every command module imports this one: it loads typer, rich and :mod:`threshold.tasks` (numpy),
never torch, Optuna or SciPy; ``threshold --help`` does not import it (:mod:`.commands`)."""

from __future__ import annotations

import functools
import inspect
import math
import time
from datetime import timedelta
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from threshold.allocator import keep_freed_memory
from threshold.cli.commands import STATE
from threshold.errors import ConfigError, ThresholdError
from threshold.interrupt import exit_status, install, interrupted
from threshold.options import EXECUTION, Option, execution_defaults
from threshold.tasks import TaskConfig

EXIT_USAGE = 2
LINE_EVERY_S = 60.0  # training progress written to a file or pipe: a line a run this often


def option_type(o: Option, default=None, panel: str | None = None):
    """The annotation of a command parameter for option ``o`` (:mod:`threshold.options`): its
    type (text where the command line parses it), its flags, its help, its help panel."""
    kind = str if o.text else o.kind
    kind = kind if default is not None else kind | None
    decls = (o.flag,) if o.flag else ()
    words = o.help.replace("[", "\\[")  # rich markup: "[default: ...]" is text
    info = typer.Option(*decls, help=words, rich_help_panel=panel, show_default=not o.flag)
    return Annotated[kind, info]


# Options of where and how runs execute, for the commands that take one or two of them; the
# settings of a task, a search, a recipe and a whole execution are added by `takes`.
_EXECUTION = {o.name: o for o in EXECUTION}
Storage = option_type(_EXECUTION["storage"])
Device = option_type(_EXECUTION["device"], "auto")
CacheDir = option_type(_EXECUTION["cache_dir"])
# The option's old name, refused: "--batch 32" read as a batch size trained 32 trials at once.
OldBatch = Annotated[int | None, typer.Option("--batch", hidden=True)]


def refuse_old_batch(value: int | None) -> None:
    """``--batch`` (renamed): refused with the two options it could have meant."""
    if value is not None:
        raise ConfigError(
            f"--batch {value}: the option is now --trials-at-once {value} (trials trained"
            f" together); for sequences a step use --batch-size {value}"
        )


def takes(defaults: dict | None = None, **groups: tuple[Option, ...]):
    """Add the options of ``groups`` (``task=TASK``, ...: :mod:`threshold.options`) to a
    command: each group's options follow the command's own, in a help panel of their own, and
    the command's parameter of the group's name receives their values as a dict (None: not
    given). Defaults are the dataclasses' (a task's, an execution's), or ``defaults``' where it
    names them; any other defaults to None."""
    shown = TaskConfig().options() | execution_defaults() | (defaults or {})

    def option(o: Option, panel: str) -> inspect.Parameter:
        default = shown.get(o.name)
        keyword = inspect.Parameter.KEYWORD_ONLY
        return inspect.Parameter(
            o.name, keyword, default=default, annotation=option_type(o, default, panel)
        )

    def wrap(command):
        own = inspect.signature(command, eval_str=True)
        added = [option(o, f"{name.title()} options") for name, os in groups.items() for o in os]
        kept = [p for p in own.parameters.values() if p.name not in groups]

        @functools.wraps(command)
        def run(**values):
            for name, os in groups.items():
                values[name] = {o.name: values.pop(o.name) for o in os}
            return command(**values)

        run.__signature__ = own.replace(parameters=[*kept, *added])
        return run

    return wrap


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


def run_words(row: dict, size_name: str = "d") -> str:
    """``d = 16 (4,816 params) accuracy 0.912 (learned, 21 s)``: one finished run of a study
    (a row of :func:`threshold.search.find.snapshot`), as each command following a study says it;
    an objective's run names its size as the study does, its parameters where it counts them."""
    size = f"{size_name} = {row['d_model']}"
    if row["state"] == "COMPLETE":
        params = row["params_total"] or 0
        counts = "" if params == row["d_model"] else f" ({params:,} params)"
        why = f"{row['stop_reason']}, " if row["stop_reason"] is not None else ""
        return f"{size}{counts} accuracy {row['accuracy']:.3f} ({why}{row['seconds'] or 0:.0f} s)"
    return f"{size} failed (retried if its worker died)"


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
        f"at most {n} run{'s' if n != 1 else ''} to go, about {pace_span(rounds * each)} at "
        f"{pace_span(each)} a run (sooner if it reaches its precision)"
    )


def pace_span(seconds: float) -> str:
    """``45 s``, ``12 min``, ``3.5 h`` (threshold.report.text.duration, without loading the
    report's readers into every command)."""
    if seconds < 120:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.0f} min" if seconds < 7200 else f"{seconds / 3600:.1f} h"


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


def name_list(text: str) -> tuple[str, ...]:
    """The names of a comma-separated option (``--rows a,b``), spaces around them and blank
    items left out."""
    return tuple(name.strip() for name in text.split(",") if name.strip())


def check_worker_studies(studies: list[str], max_trials: int | None) -> None:
    """The ``--study`` options of a worker (``threshold worker``, a SLURM script's): a name given
    twice is refused, and ``--max-trials`` with several studies (a worker of several runs each
    until its policy stops; a count of trials would stop it part way through some of them)."""
    twice = next((s for i, s in enumerate(studies) if s in studies[:i]), None)
    if twice is not None:
        raise ConfigError(f"--study {twice!r} is given twice: name each study once")
    if len(studies) > 1 and max_trials is not None:
        raise ConfigError(
            f"--max-trials {max_trials} is for one --study: a worker of {len(studies)} studies"
            " runs each until its policy stops (give a study a worker of its own to stop it"
            " after some trials)"
        )


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
