"""``threshold bench search``: the sampler on simulated studies with known truth.

(The search's own commands are in find_cmd.py, worker_cmd.py and status_cmd.py.)
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Annotated

import numpy as np
import typer
from rich.console import Console
from rich.table import Table

from threshold.cli.common import name_list, run_guarded
from threshold.config import TrainConfig
from threshold.errors import ConfigError
from threshold.report.figures import replay_figure
from threshold.report.text import duration
from threshold.search.bench.benchmark import bench_families
from threshold.search.bench.benchmark import bench_search as run_bench
from threshold.search.bench.families import CHANCE
from threshold.search.bench.replay import METHODS, bench_replay
from threshold.search.bench.simulate import ResponseModel
from threshold.search.bench.stops import bench_stops
from threshold.search.grid import records_table
from threshold.search.sampler import policy_settings
from threshold.search.settings import with_overrides
from threshold.search.spec import StudySettings
from threshold.search.study import SearchConfig
from threshold.tasks import TaskConfig

# The families table's rows computed unless --rows says others (with --replay: every method).
FAMILY_ROWS = "sampler,grid,spread,oracle,oracle_fit"


def _grid_lines(what: str):
    """A line on stderr as each recorded grid begins (minutes each on a dense grid), with the
    time since the first."""
    t0 = time.monotonic()

    def begun(i: int, n: int, grid) -> None:
        typer.echo(f"{what}: grid {i + 1} of {n}, {grid.name} ({len(grid.runs)} runs), "
                   f"{duration(time.monotonic() - t0)} so far", err=True)  # fmt: skip

    return begun


# The search's settings changed for one benchmark: for its runs, or for their reading alone.
Sets = Annotated[
    list[str] | None,
    typer.Option(
        "--set",
        help="NAME=VALUE: a setting of the search or its posterior changed for this run "
        "(repeatable; VALUE in JSON, e.g. size_sd=0.05 or plateau_lengths=[0.75,1.5]).",
    ),
]
ReadSets = Annotated[
    list[str] | None,
    typer.Option(
        "--read-set",
        help="NAME=VALUE: the sampler's runs (placed with the --set settings) also read by a"
        " posterior with this setting changed as well (repeatable; rows 'our runs, read"
        " with --read-set'): a setting's effect on the reading alone, on the same runs.",
    ),
]


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
    overrides: Sets = None,
    read_overrides: ReadSets = None,
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
            " oracle_fit, and, not by default, oracle_fit_read (the shape-unknown oracle's runs"
            " read by our posterior), oracle_fit_wide (its runs fitted with the slope free"
            " over every family's range), oracle_fit_adaptive (the fit placing its own runs"
            " as it learns, read at each checkpoint), oracle_fit_adaptive_cost (the same,"
            " placing per compute as our sampler does, its runs also read by our posterior)"
            " and oracle_fit_pick (our sampler's runs read by a fit that picks the likeliest"
            " family's form; with oracle_fit_adaptive_cost, that fit's runs too), and psi (a"
            " plain Ψ-method, Kontsevich & Tyler 1999: threshold/search/bench/psi.py; psi_read: its"
            " runs read by our posterior)."
            " Each has its own random stream: the same numbers whichever are chosen."
            " With --replay: the methods replayed (sampler, psi, bisection, random, oracle,"
            " oracle_spread, grid48; default all)."
        ),
    ] = FAMILY_ROWS,
    replay: Annotated[
        list[Path] | None,
        typer.Option(
            "--replay",
            help="Instead: replay recorded grids of real runs (bench gpu science records,"
            " reports' results.json, or folders of them; repeatable): the sampler, the"
            " Ψ-method, a bisection and random order each pick among a grid's sizes and are"
            " answered by its recorded runs, scored against the full grid's reading at their"
            " own stop and at the --runs counts (6,9,12 unless given).",
        ),
    ] = None,
    orders: Annotated[
        int, typer.Option(help="With --replay: random orders of each grid's runs.")
    ] = 5,
    peer: Annotated[
        bool,
        typer.Option(
            "--peer",
            help="With --replay: psignifit's reading beside each dense grid's (the whole grid,"
            " and the sampler's runs at 12 and 24 beside ours): pip install -e '.[bench]'.",
        ),
    ] = False,
    figure: Annotated[
        Path | None,
        typer.Option(
            help="With --replay: a PNG of each located dense grid's reference, the sampler at"
            " its own stop and the 48-run grid, on one log axis."
        ),
    ] = None,
    stop_rules: Annotated[
        bool,
        typer.Option(
            "--stops",
            help="With --replay: instead, stop rules judged on the dense grids after the fact"
            " (the sampler's runs with its stop off, read after each run to the largest --runs"
            " count, once a seed order), against our reading and a model-free one of each grid.",
        ),
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Our sampler on simulated studies with known truth, family by family (see README)."""

    def body():
        if replay and stop_rules:
            n_max = max(int(v) for v in runs.split(",") if v.strip())
            result = bench_stops(replay, orders, n_max, precision, on_grid=_grid_lines("stops"))
            if as_json:
                typer.echo(json.dumps(result))
            else:
                _print_stops(result)
            return
        if replay:
            try:
                counts = tuple(int(v) for v in runs.split(",") if v.strip())
            except ValueError:
                raise ConfigError(f"--runs {runs!r}: give run counts such as 6,9,12") from None
            if runs == "12,24,48":  # the families' default: a grid holds 4-20 runs
                counts = (6, 9, 12)
            chosen = METHODS if rows == FAMILY_ROWS else name_list(rows)
            result = bench_replay(
                replay, chosen, counts, precision=precision, orders=orders, peer=peer,
                on_grid=_grid_lines("replay"),
            )  # fmt: skip
            if figure is not None and replay_figure(result, figure, _grid_words(replay)) is None:
                typer.echo("no located dense grid in the replay: no figure written", err=True)
            if as_json:
                typer.echo(json.dumps(result))
            else:
                _print_bench_replay(result)
            return
        if studies < 1:
            raise ConfigError(f"--studies {studies} is not allowed: use 1 or more")
        changed = _parsed_overrides(overrides or [])
        read_changed = _parsed_overrides(read_overrides or [], "--read-set")
        if read_changed and (methods or batches):
            raise ConfigError(
                "--read-set reads the families table's runs: leave out --methods and --batches"
            )
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
            names = name_list(families)
            settings = with_overrides(policy_settings(defaults, chance=CHANCE), changed)
            result = bench_families(
                n_studies=studies,
                seed=seed,
                families=names,
                checkpoints=counts,
                settings=settings,
                jobs=jobs,
                rows=name_list(rows),
                read_settings=with_overrides(settings, read_changed) if read_changed else None,
            )
            result["read_overrides"] = read_changed
        result["overrides"] = changed
        if as_json:
            typer.echo(json.dumps(result))
        elif methods or batches:
            _print_bench_search(result)
        else:
            _print_bench_families(result)

    run_guarded(body)


def _parsed_overrides(pairs: list[str], option: str = "--set") -> dict:
    """{name: value} from ``--set NAME=VALUE`` (or ``option``'s) options, each VALUE read as
    JSON."""
    out = {}
    for pair in pairs:
        name, sep, text = pair.partition("=")
        try:
            if not (sep and name.strip()):
                raise ValueError
            out[name.strip()] = json.loads(text)
        except ValueError:
            raise ConfigError(
                f"{option} {pair!r}: give NAME=VALUE with VALUE in JSON, e.g. size_sd=0.05"
            ) from None
    if "precision" in out:  # one way to set it, the one find has
        raise ConfigError(f"{option} precision: use --precision, as with find")
    return out


def _overrides_note(result: dict) -> str:
    """The settings a bench run changed, for its table's title ('' when none)."""
    parts = [
        f"{prefix}{k}={json.dumps(v)}"
        for key, prefix in (("overrides", ""), ("read_overrides", "read with "))
        for k, v in (result.get(key) or {}).items()
    ]
    return "; " + ", ".join(parts) if parts else ""


def _print_bench_search(result: dict) -> None:
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
    table = Table(
        title=f"sampler on {result['n_studies']} simulated studies per family (known truth); "
        f"grid: {len(result['grid_sizes'])} sizes x {result['grid_seeds']} seeds"
        + _overrides_note(result)
    )
    cols = ("family", "runs", "median runs", "compute vs grid", "coverage", "median |ln err|")
    for col in (*cols, "within 20%", "median ln err", "vs oracle: |ln err| (90%), compute"):
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
                "oracle_fit_wide": "its runs, fitted with any slope",
                "psi_stop": "Ψ-method, own stop",
                "psi_read_stop": "Ψ's runs to its stop, read by the posterior",
            }.get(key) or _adaptive_label(key)
            table.add_row(
                family,
                label,
                f"{m['median_runs']:g}",
                f"{m['compute_vs_grid']:.2f}",
                "-" if m["coverage"] is None else f"{m['coverage']:.2f}",
                f"{m['median_abs_log_error']:.3f}",
                f"{m['within_20']:.2f}",
                f"{m['median_signed_log_error']:+.3f}",
                _vs_oracle_cell(m.get("x_oracle")),
            )
    Console().print(table)


def _vs_oracle_cell(ratio: dict | None) -> str:
    """A families row's error and compute as ratios to the shape-known oracle's."""
    if ratio is None:
        return "-"
    lo, hi = ratio["error_90"]
    return f"{ratio['error']:.1f} ({lo:.1f}-{hi:.1f}), {ratio['compute']:.1f}"


def _adaptive_label(key: str) -> str:
    """The families table's label of a checkpoint row: the sampler's, an oracle's or a fit's."""
    for prefix, words in (
        ("oracle_fit_adaptive_cost_pick_", "its runs, read by the form-picking fit"),
        ("oracle_fit_pick_", "our runs, read by the form-picking fit"),
        ("sampler_read_", "our runs, read with --read-set"),
        ("oracle_fit_adaptive_cost_read_", "its runs, read by the posterior"),
        ("oracle_fit_adaptive_cost_", "fit placing per compute as it learns"),
        ("oracle_fit_adaptive_", "fit placing as it learns"),
        ("oracle_", "oracle, shape known"),
        ("psi_read_", "Ψ's runs, read by the posterior"),
        ("psi_", "Ψ-method, stop off"),
    ):
        if key.startswith(prefix):
            return f"{words}, {key[len(prefix) :]} runs"
    return f"{key}, stop off"


def _grid_words(paths: list[Path]) -> dict[str, str]:
    """The task words of each dense grid record among ``paths`` (files, or folders of them), by
    its resolved path, for the replay's figure."""
    folders = {p if p.is_dir() else p.parent for p in map(Path, paths)}
    rows = [row for folder in sorted(folders) for row in records_table(folder)]
    return {str(Path(r["record"]).resolve()): f"{r['task']} ({r['measure']})" for r in rows}


def _print_bench_replay(result: dict) -> None:
    """The replay's grids (the reference and each method at its own stop), then each method's
    columns over the grids."""
    table = Table(title=f"replays of {len(result['grids'])} recorded grids (own stop)")
    for col in ("grid", "sizes", "runs", "reference"):
        table.add_column(col)
    methods = list(result["summary"])
    for m in methods:
        table.add_column(m, justify="right")
    for g in result["grids"]:
        ref = g["reference"]
        words = (
            f"d {ref['d']:.1f} ({np.exp(ref['hi'] - ref['lo']):.1f}x)"
            if ref["kind"] == "point"
            else f"{ref['kind']} ({ref['bound']:,.0f} params)"
            if ref["bound"]
            else ref["kind"]
        )
        cells = []
        for m in methods:
            trials = [t["stop"] for t in g["methods"].get(m, [])]
            if not trials:  # grid48: dense grids only
                cells.append("-")
                continue
            runs = np.mean([t["runs"] for t in trials])
            if ref["kind"] == "point":
                cov = np.mean([t["covered"] for t in trials])
                err = np.median([abs(t["error"]) for t in trials])
                cells.append(f"{runs:.0f} runs, {cov:.0%}, {err:.2f}")
            else:
                ok = np.mean([t["bound_ok"] for t in trials])
                cells.append(f"{runs:.0f} runs, bound {ok:.0%}")
        table.add_row(g["name"], f"{g['sizes'][0]}-{g['sizes'][-1]} ({len(g['sizes'])})",
                      str(g["runs"]), words, *cells)  # fmt: skip
    Console().print(table)
    summary = Table(
        title="per method, over the grids (reference: d of the 80% point, its 90% interval's width)"
    )
    for col in ("method", "column", "located grids (replays)", "coverage", "median |ln err|",
                "held out", "median runs", "runs vs grid (max)", "read located",
                "within precision: grids, coverage, runs vs grid, <= 60%", "bound grids (replays)",
                "bound right side",
                "bound read located"):  # fmt: skip
        summary.add_column(col, justify="right")
    for m, columns in result["summary"].items():
        for c, s in columns.items():
            summary.add_row(
                m,
                "own stop" if c == "stop" else f"{c} runs",
                f"{s['grids_located']} ({s['replays_located']})",
                f"{s['coverage']:.2f}" if "coverage" in s else "-",
                f"{s['median_abs_log_error']:.3f}" if "coverage" in s else "-",
                f"{s['median_abs_heldout_error']:.3f}" if "median_abs_heldout_error" in s else "-",
                f"{s['median_runs']:.0f}" if "coverage" in s else "-",
                f"{s['median_share']:.2f} ({s['max_share']:.2f})" if "coverage" in s else "-",
                f"{s['read_located']:.2f}" if "coverage" in s else "-",
                f"{s['precise_grids']}, {s['precise_coverage']:.2f}, "
                f"{s['precise_median_share']:.2f}, {s['precise_within_60']:.2f}"
                if "precise_grids" in s
                else "-",
                f"{s['grids_bound']} ({s['replays_bound']})",
                f"{s['bound_ok']:.2f}" if "bound_ok" in s else "-",
                f"{s['bound_read_located']:.2f}" if "bound_ok" in s else "-",
            )
    Console().print(summary)
    if result.get("calibration"):
        _print_calibration(result["calibration"])


def _print_calibration(calibration: dict) -> None:
    """Ours and psignifit's 90% intervals on the sampler's runs, against the dense references."""
    table = Table(title="calibration on the dense grids: the sampler's runs read by each")
    for col in ("runs", "grids (replays)", "coverage: ours", "psignifit", "median width (ln): ours",
                "psignifit", "ours / psignifit", "width needed (90%): ours",
                "psignifit"):  # fmt: skip
        table.add_column(col, justify="right")
    for k, c in calibration.items():
        table.add_row(
            k, f"{c['grids']} ({c['replays']})", f"{c['ours_coverage']:.2f}",
            f"{c['psignifit_coverage']:.2f}", f"{c['ours_width']:.2f}",
            f"{c['psignifit_width']:.2f}", f"{c['width_ratio']:.2f}",
            f"{c['ours_scale']:.2f}", f"{c['psignifit_scale']:.2f}",
        )  # fmt: skip
    Console().print(table)


def _print_stops(result: dict) -> None:
    """Each stop rule over the dense grids' replays: runs at its stop, and its reading against
    our reading of the whole grid and the model-free one."""
    table = Table(
        title=f"stop rules on {len(result['grids'])} located dense grids, {result['orders']} seed"
        " orders each (against our reading of each whole grid, and the model-free one)"
    )
    for col in ("rule", "replays", "median runs (max)", "coverage: ours", "isotonic",
                "median |ln err|: ours", "isotonic"):  # fmt: skip
        table.add_column(col, justify="right")
    for name, r in result["rules"].items():
        table.add_row(
            name, str(r["replays"]), f"{r['median_runs']:.1f} ({r['max_runs']})",
            f"{r['coverage_ours']:.2f}", f"{r['coverage_isotonic']:.2f}",
            f"{r['abs_error_ours']:.3f}", f"{r['abs_error_isotonic']:.3f}",
        )  # fmt: skip
    Console().print(table)
