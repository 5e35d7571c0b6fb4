"""``threshold bench gpu``: one prepared command that proves the engine on a GPU and measures it.

A GPU is lent rarely and briefly (about 15 minutes, at most 10 a command, a bare machine with no
Optuna), so everything runs from the working tree in one process, each part recording its
outcome even when another part fails:

1. the engine against the CPU (:func:`threshold.train.gpu.check_engine`);
2. throughput of packs of 1 to 512 members, graphed and eager, in fp32, TF32 and bf16, on whole
   sequences and the ``paper`` recipe's windows, ``torch.compile``, and beside them PyTorch's
   ensembling recipe and one plain model (:func:`throughput_specs`,
   :func:`threshold.train.gpu.throughput`), each row with the useful share of the positions it
   computes and the host's and the device's ms a step;
3. in the minutes left, a science pair under the ``small`` recipe (or ``paper``: ``--recipe``):
   ADD alone against ADD in MAX+MED+ADD, mod 10, 2 seeds (``--seeds``) at sizes d 16-128
   (``--sizes``), trained together for as many steps as fit, each read by the posterior on the
   recipe's accuracy (greedy, or sampled for ``paper``), with the reduction factor at every budget
   checkpoint;
4. ``gpu-<date>-<commit>.json`` (``-2``, ``-3``, ... for a later call of the same day and commit)
   and a Markdown summary of every number, for ``reports/gpu/``,
   and the science pair's trained models as checkpoints in ``gpu-<date>-<commit>-models.tar.gz``
   (for the embedding and layer analyses on the CPU: ``threshold analyze``).

With ``--device cpu`` it runs on tiny settings, so CI proves the wiring. No Optuna here.
"""

from __future__ import annotations

import json
import platform
import tarfile
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import torch

from threshold.config import make_recipe, model_config_for, param_count
from threshold.files import atomic_write
from threshold.meta import git_commit, version
from threshold.search.bounds import LOWER, POINT, UPPER, factor_bound, locate
from threshold.search.fit import reduction_factor, transition_reading
from threshold.search.settings import SearchSettings
from threshold.tasks import TaskConfig, load_task_data
from threshold.train.bench import timed_steps
from threshold.train.checkpoint import save_checkpoint
from threshold.train.engine import start_pack, train_runs
from threshold.train.evaluate import chance_rate
from threshold.train.gpu import Spec, check_engine, throughput
from threshold.train.graphs import capture_counts, capture_words
from threshold.train.memory import plan_packs
from threshold.train.run import Run

__all__ = ["SEEDS", "SIZES", "bench_gpu", "science_pair", "summary_markdown"]

Note = Callable[[str], None]
MEMBERS = (1, 16, 64, 128, 256, 512)  # the graphed fp32 rows: the table issue 58 compares
PARTS = ("checks", "throughput", "science")
SIZES = (16, 20, 25, 32, 40, 51, 64, 81, 101, 128)  # the science pair's d on a GPU (log-spaced)
SEEDS = 2  # the science pair's runs a size and study
# The science pair's recipes (the command refuses any other before it starts): those whose
# schedule does not depend on the budget, so that a budget checkpoint reads the run a smaller
# budget would have made (TrainConfig refuses fast's cosine decay with checkpoints too)
SCIENCE_RECIPES = ("small", "paper")
EVAL_SHARE = 0.2  # of the science pair's time, planned for evaluations (four checkpoints, the end)
# A run has learned ADD from its first validation at which ADD's teacher-forced answer accuracy
# reaches this (chance: 0.1); the steps to get there are the pair's time to learn
LEARNED_TF = 0.5
NOTE_EVERY_S = 60.0  # the science pair's progress line, so a log shows how far a cut-off run got
PADDED = [16, 24, 32, 40]  # the sizes of the padded packs (issue: 36 members at d 16-40)
# The lend's first pack: the 16 sizes the search asked of ADD alone under `paper` in a lend of
# studies/gpu.toml tried on the CPU (reports/gpu/README.md, "The lend")
LEND_PACK = (16, 32, 40, 49, 49, 58, 58, 58, 58, 58, 70, 70, 70, 70, 84, 256)
WRITE_S = 10.0  # of a call's minutes, kept for writing its record (a GPU's; the CPU's: 2)


def throughput_specs(tiny: bool) -> list[Spec]:
    """The throughput part's rows, in the order they run (a part cut at its deadline keeps the
    first): graphed fp32 packs of 1-512 members at d 16-40 (the table every lend repeats, its
    before in ``reports/gpu/h200-b5f2009``), the two peers right after (PyTorch's ensembling
    recipe at 512 members and one plain model: :mod:`threshold.train.peers`), eager and bf16 at
    512, the ``paper`` recipe's windows (its science pair's sizes), the lend's own pack
    (:data:`LEND_PACK`); then, in the minutes left, one size, eager at 64, TF32, bf16 at 128, the
    peer at d 16 and ``torch.compile`` last (its compile alone takes 30-60 s). On the CPU a few
    tiny ones."""
    if tiny:
        p = (8, 12)
        return [
            Spec("graphs", 1, p),
            Spec("graphs", 4, p),
            Spec("peer vmap", 4, (12,)),
            Spec("peer plain", 1, (12,)),
            Spec("eager", 4, p),
            Spec("graphs", 4, p, precision="bf16"),
            Spec("graphs", 4, p, recipe="paper"),
            Spec("planned", 4, (8, 12), recipe="paper"),
        ]
    p, paper = tuple(PADDED), (16, 24, 32, 48)
    specs = [Spec("graphs", m, p) for m in MEMBERS]
    specs += [Spec("peer vmap", 512, (40,)), Spec("peer plain", 1, (40,))]
    specs += [Spec("eager", 512, p), Spec("graphs", 512, p, precision="bf16")]
    specs += [Spec("graphs", m, paper, "paper", x) for x in ("fp32", "bf16") for m in (16, 64)]
    # the lend's own pack: padded to its widest, and as the engine now packs it (by width)
    specs += [Spec(path, len(LEND_PACK), LEND_PACK, "paper") for path in ("graphs", "planned")]
    specs += [Spec("graphs", 512, (40,)), Spec("eager", 64, p)]
    specs += [Spec("graphs", m, p, precision="tf32") for m in (128, 512)]
    specs += [Spec("graphs", 128, p, precision="bf16"), Spec("peer vmap", 512, (16,))]
    specs += [Spec("compile", 64, p)]
    return specs


def bench_gpu(
    out_dir: Path,
    device: torch.device,
    minutes: float = 8.0,
    cache_dir: Path | None = None,
    note: Note = print,
    parts: tuple[str, ...] = PARTS,
    sizes: tuple[int, ...] | list[int] = SIZES,
    seeds: int = SEEDS,
    recipe: str = SCIENCE_RECIPES[0],
    split: str | None = None,
) -> tuple[dict, Path, Path]:
    """Run each of ``parts`` within about ``minutes``; write the JSON and the Markdown summary
    into ``out_dir``; return the record and both paths. ``sizes``, ``seeds``, ``recipe`` and
    ``split``: the science pair's d on a GPU, runs a size, recipe and data split (None: the
    recipe's). On the CPU every part runs tiny."""
    t0 = time.perf_counter()
    deadline = t0 + 60 * minutes
    tiny = device.type != "cuda"
    captures = capture_counts()
    record: dict = {
        "format": 1,
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "version": version(),
        "commit": git_commit(),
        "device": _device_words(device),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "python": platform.python_version(),
        "tiny": tiny,
        "minutes": minutes,
    }
    small = dict(n=5, n_train=2000, n_test=100, n_val=50) if tiny else dict(n=10)
    data = load_task_data(TaskConfig(ops=("max",), **small), cache_dir)
    with tempfile.TemporaryDirectory() as tmp:
        record["checks"] = _part(
            "checks" in parts, lambda: check_engine(data, device, Path(tmp), tiny, note)
        )
    steps = 5 if tiny else 30
    ends = deadline - (2 if tiny else WRITE_S)  # the part honours --minutes, its record written
    record["throughput"] = _part(
        "throughput" in parts,
        lambda: throughput(data, device, throughput_specs(tiny), steps, note, ends),
    )
    left = deadline - time.perf_counter() - (5 if tiny else 30)  # leave time to write
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = _free_stem(out_dir, f"gpu-{record['created'][:10]}-{record['commit'][:10]}")
    models = out_dir / f"{stem}-models.tar.gz"
    record["science"] = _part(
        "science" in parts,
        lambda: science_pair(
            device, left, tiny, cache_dir, note, models, sizes, seeds, recipe, split
        ),
    )
    now = capture_counts()  # the CUDA graphs of every part, and the captures that failed
    record["capture"] = {key: now[key] - captures[key] for key in now}
    record["wall_s"] = round(time.perf_counter() - t0, 1)
    json_path = out_dir / f"{stem}.json"
    json_path.write_text(json.dumps(record, indent=1, default=_plain) + "\n")
    md_path = out_dir / f"{stem}.md"
    md_path.write_text(summary_markdown(record))
    return record, json_path, md_path


def _free_stem(folder: Path, stem: str) -> str:
    """``stem``, or ``stem-2``, ``stem-3``, ... where a record of that name is in ``folder``
    already (a second call on the same day and commit), so no call overwrites another's."""
    name, n = stem, 1
    while (folder / f"{name}.json").exists():
        n += 1
        name = f"{stem}-{n}"
    return name


def _part(asked: bool, fn: Callable) -> dict | list:
    """A part's result, or what stopped it (so one failure loses no other part)."""
    if not asked:
        return {"skipped": "not asked for (--parts)"}
    try:
        return fn()
    except Exception as e:
        return {"error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()[-2000:]}


def _plain(value):
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"{type(value).__name__} is not JSON")


def _device_words(device: torch.device) -> str:
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        return f"{props.name}, {props.total_memory / 2**30:.0f} GiB"
    return f"CPU ({platform.processor() or platform.machine()}), {torch.get_num_threads()} threads"


def science_pair(
    device: torch.device,
    seconds: float,
    tiny: bool = False,
    cache_dir: Path | None = None,
    note: Note = print,
    models: Path | None = None,
    sizes: tuple[int, ...] | list[int] = SIZES,
    seeds: int = SEEDS,
    recipe: str = SCIENCE_RECIPES[0],
    split: str | None = None,
) -> dict:
    """ADD alone against ADD in MAX+MED+ADD under ``recipe`` (one of :data:`SCIENCE_RECIPES`)
    and its data split (``split``: groups or triples, None the recipe's),
    ``seeds`` a size, all trained together for as many steps as fit in ``seconds``; each study's
    estimate from the posterior on the recipe's accuracy (``decoding``) and the factor with its
    90% interval at every budget checkpoint. ``models``: a ``.tar.gz`` to keep every trained model
    in, as ``<study>-d<d>-seed<s>.pt`` checkpoints; ``sizes``: the d run on a GPU (tiny: 8 and
    16)."""
    mod, sizes = (5, [8, 16]) if tiny else (10, list(sizes))
    # tiny: depth-1 ListOps (9 tokens against depth 2's up to 60): an untrained model under the
    # small recipe's init writes to the end of its context, and decoding is most of the CPU
    extra = dict(depth=1, n_train=2000, n_test=40, n_val=50) if tiny else {}
    made = make_recipe(recipe, split=split)
    tasks = {  # with the recipe's split (paper: the group's triples)
        "add": made.on(TaskConfig(ops=("add",), n=mod, **extra)),
        "max+med+add": made.on(
            TaskConfig(ops=("max", "med", "add"), n=mod, measure="add", **extra)
        ),
    }
    # tiny: two checkpoints, as decoding the test sets at each is most of a tiny run's CPU
    checkpoints = (0.5, 1.0) if tiny else (0.125, 0.25, 0.5, 1.0)
    cfg = replace(made.train, eval_every=500, checkpoints=checkpoints)
    data = {name: load_task_data(task, cache_dir) for name, task in tasks.items()}
    runs, keys = [], []
    for name, task in tasks.items():
        for d in sizes:
            for seed in range(seeds):
                model_cfg = model_config_for(task, d, cfg, **made.model_kwargs)
                runs.append(Run(model_cfg, data[name], replace(cfg, seed=1000 * d + seed)))
                keys.append((name, d, seed))
    if tiny:  # the wiring, not the science: a fixed small budget
        rate, budget = None, 40
    else:
        note(f"science pair: timing a step of {len(runs)} runs")
        rate = _seconds_per_step(runs, device)
        budget = int((1 - EVAL_SHARE) * seconds / rate) // 100 * 100
        if budget < 100:
            return {"skipped": f"{seconds:.0f} s left: fewer than 100 steps fit", "step_s": rate}
    limit = None if tiny else seconds
    runs = [replace(r, cfg=replace(r.cfg, max_steps=budget, time_limit_s=limit)) for r in runs]
    note(f"science pair: {len(runs)} runs, {budget} steps each")
    t0 = time.perf_counter()
    results = train_runs(runs, device, _progress_notes(note, budget, t0))
    out: dict = {
        "recipe": recipe,
        "split": tasks["add"].split,  # which applications the test side holds (docs/recipes.md)
        "decoding": cfg.decoding,  # the accuracy the estimates read: greedy, or sampled
        "mod": mod,
        "sizes": sizes,
        "seeds": seeds,
        "steps": budget,
        "val_every": cfg.eval_every,
        "step_s": rate,
        "train_wall_s": round(time.perf_counter() - t0, 1),
        "runs": [
            {
                "study": name,
                "d": d,
                "seed": seed,
                "steps": r.steps,
                "stop_reason": r.stop_reason,
                "accuracy": r.accuracy[tasks[name].measured_op],
                "sampled_accuracy": r.sampled_accuracy[tasks[name].measured_op],
                # the measured op's test accuracy at each budget checkpoint (the last is the
                # run's end): every checkpoint a grid of real runs (``bench search --replay``)
                "budget": [
                    {
                        "step": b["step"],
                        "accuracy": b["accuracy"],
                        "sampled_accuracy": b["sampled_accuracy"],
                        "reached": b["reached"],
                    }
                    for b in sorted(r.budget, key=lambda b: b["step"])
                ],
                # [step, teacher-forced validation answer accuracy] at each validation
                "val_tf": [
                    [h["step"], round(h["val_tf"][tasks[name].measured_op], 4)] for h in r.history
                ],
            }
            for (name, d, seed), r in zip(keys, results, strict=True)
        ],
    }
    out["budget"] = _estimates(tasks, keys, results, runs, made)
    if models is not None:
        _keep_models(models, tasks, keys, results, runs)
        out["models"] = models.name
    return out


def _progress_notes(note: Note, budget: int, t0: float) -> Callable:
    """An ``on_progress`` that notes the pair's step every :data:`NOTE_EVERY_S` seconds."""
    last = t0

    def on_progress(_: int, p) -> None:
        nonlocal last
        now = time.perf_counter()
        if now - last >= NOTE_EVERY_S:
            last = now
            note(f"science pair: step {p.step:,} of {budget:,}, {now - t0:.0f} s")

    return on_progress


def _keep_models(path: Path, tasks: dict, keys: list, results: list, runs: list[Run]) -> None:
    """Every trained model as a checkpoint, all in one ``.tar.gz`` (a lent GPU returns few
    files)."""
    with (
        tempfile.TemporaryDirectory() as tmp,
        atomic_write(path) as f,
        tarfile.open(fileobj=f, mode="w:gz") as tar,
    ):
        for (name, d, seed), result, run in zip(keys, results, runs, strict=True):
            member = Path(tmp) / f"{name}-d{d}-seed{seed}.pt"
            metrics = {"study": name, **result.metrics()}
            save_checkpoint(member, result.model, tasks[name], run.cfg.to_dict(), metrics)
            tar.add(member, arcname=member.name)


def _seconds_per_step(runs: list[Run], device: torch.device, steps: int = 20) -> float:
    """Seconds a step of all ``runs`` takes on ``device``: the median of ``steps`` steps timed one
    by one after a warm-up, so that a step capturing the CUDA graph of a batch length not seen
    before does not set the plan (the likely reason ten steps timed together read 1.3x the
    training's pace in run13 of reports/gpu)."""
    static = device.type == "cuda"
    total = 0.0
    members = [(r.model_cfg, r.cfg) for r in runs]
    for group in plan_packs(members, device, share=static):  # the packs train_runs trains
        pack = start_pack([(i, runs[i]) for i in group], device, static)
        timed_steps(pack, 0, 5, device)  # the warm-up
        total += float(np.median([timed_steps(pack, 1, 0, device)[0] for _ in range(steps)]))
    return total


def _estimates(tasks, keys, results, runs, made) -> list[dict]:
    """At each checkpoint: each study's 80% point (posterior median, 90% interval), whether its
    runs locate it (:func:`threshold.search.bounds.locate`), and the factor ADD alone / mixture
    with its interval, or the bound the runs allow where a side is not located. The accuracy read
    is the recipe's (``decoding``)."""
    key = "sampled_accuracy" if made.train.decoding == "sampled" else "accuracy"
    rows = []
    steps = sorted({b["step"] for r in results for b in r.budget})
    settings = {  # each study's search settings (a parameter count a d), the same at every step
        name: _search_settings(
            task, next(r for r, (n, _, _) in zip(runs, keys, strict=True) if n == name), made
        )
        for name, task in tasks.items()
    }
    params = {name: dict(s.params_of_d) for name, s in settings.items()}
    for step in steps:
        row: dict = {"step": step}
        posts, verdicts, estimates = {}, {}, {}
        for name in tasks:
            completed = [
                (d, next(b[key] for b in r.budget if b["step"] == step))
                for (n, d, _), r in zip(keys, results, strict=True)
                if n == name
            ]
            estimate, posts[name] = transition_reading(settings[name], completed)
            runs_at = [(d, params[name][d], acc) for d, acc in completed]
            verdicts[name] = locate(runs_at, estimate)
            estimates[name] = estimate
            row[name] = {
                "params_p80": estimate["params_p80"],
                "interval_params": estimate["interval_params"],
                "d_p80": estimate["d_p80"],
                "asymptote": estimate.get("asymptote"),
                "learned_runs": sum(acc > 0.5 for _, acc in completed),
                "located": verdicts[name]["kind"],
                "bound_params": verdicts[name]["params"],  # the runs' bound, where not located
                "bound_d": verdicts[name]["d"],
                "first_d": verdicts[name]["first_d"],  # the smallest d a run learned at
                "out_of_order": verdicts[name]["out_of_order"],  # larger d a run did not
            }
        row["factor"] = reduction_factor(posts["add"], posts["max+med+add"])
        row["factor"]["bound"] = factor_bound(
            verdicts["add"], estimates["add"], verdicts["max+med+add"], estimates["max+med+add"]
        )
        rows.append(row)
    return rows


def _search_settings(task: TaskConfig, run: Run, made) -> SearchSettings:
    chance = chance_rate(run.data.test[task.measured_op], run.cfg.decoding)
    table = tuple(
        (d, param_count(model_config_for(task, d, run.cfg, **made.model_kwargs))["total"])
        for d in range(2, 513)
    )
    return SearchSettings(params_of_d=table, d_lo=16, d_hi=128, chance=chance)


def _cell(value, spec: str) -> str:
    return "" if value is None else format(value, spec)


def summary_markdown(record: dict) -> str:
    """The record in words and tables: what ``reports/gpu/`` keeps beside the JSON."""
    lines = [
        f"# bench gpu, {record['created']}",
        "",
        f"Device: {record['device']}; torch {record['torch']}, CUDA {record['cuda']}, Python "
        f"{record['python']}; threshold {record['version']} at {record['commit'][:10]}; "
        f"{record['wall_s']} s in all{' (tiny settings)' if record['tiny'] else ''}.",
        "",
        # records before issue 69 did not count their captures
        *([f"{capture_words(record['capture'])}.", ""] if "capture" in record else []),
        "## Engine against the CPU",
        "",
    ]
    checks = record.get("checks", {})
    if "error" in checks or "skipped" in checks:
        lines.append(f"Not run: `{checks.get('error') or checks.get('skipped')}`")
    else:
        lines += ["| check | result | ok |", "|---|---|---|"]
        for name, value in checks.items():
            shown = {k: v for k, v in value.items() if k != "ok"}
            lines.append(f"| {name} | {json.dumps(shown, default=_plain)} | {value.get('ok')} |")
    lines += ["", "## Throughput", ""]
    rows = record.get("throughput", [])
    if isinstance(rows, dict):
        lines.append(f"Not run: `{rows.get('error') or rows.get('skipped')}`")
    else:
        lines += [
            "| path | recipe | precision | members | d | model-steps/s | tokens/s | useful share "
            "| own weights | step ms | host ms | device ms | peak MiB |",
            "|---|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for r in rows:
            d = ",".join(map(str, r["d_models"]))
            head = f"| {r['path']} | {r.get('recipe', 'fast')} | {r.get('precision', 'fp32')} "
            members = f"{r['members']}" + (f" in {len(r['packs'])} packs" if "packs" in r else "")
            if "error" in r:
                lines.append(f"{head}| {members} | {d} | {r['error'][:60]} ||||||||")
                continue
            lines.append(
                f"{head}| {members} | {d} | {r['model_steps_per_s']:,.0f} | "
                f"{r['tokens_per_s']:,.0f} | {_cell(r.get('useful_share'), '.0%')} | "
                f"{_cell(r.get('weight_share'), '.0%')} | "
                f"{r['step_ms']:.2f} | {_cell(r.get('host_batch_ms'), '.2f')} | "
                f"{_cell(r.get('device_step_ms'), '.2f')} | "
                f"{_cell((r.get('peak_memory') or 0) / 2**20 or None, ',.0f')} |"
            )
        lines += ["", _timed_captures(rows)]
    sci = record.get("science", {})
    split = f", split {sci['split']}" if "split" in sci else ""  # records before it: groups
    lines += ["", f"## Science pair ({sci.get('recipe', 'small')} recipe{split})", ""]
    if "error" in sci or "skipped" in sci:
        lines.append(f"Not run: `{sci.get('error') or sci.get('skipped')}`")
    else:
        lines.append(
            f"ADD alone against ADD in MAX+MED+ADD, mod {sci['mod']}, d {sci['sizes'][0]}-"
            f"{sci['sizes'][-1]}, {sci['seeds']} seeds, {sci['steps']} steps a run "
            f"({sci['train_wall_s']} s for {len(sci['runs'])} runs); 80% points of"
            f" {sci.get('decoding', 'greedy')} accuracy."
            + (f" The trained models: `{sci['models']}`." if sci.get("models") else "")
            + _time_limited(sci)
        )
        lines += [
            "",
            "| step | ADD alone: 80% point (90%) | learned | mixture: 80% point (90%) | learned "
            "| factor (90%) |",
            "|---:|---|---:|---|---:|---|",
        ]
        for row in sci["budget"]:
            a, m, f = row["add"], row["max+med+add"], row["factor"]
            lines.append(
                f"| {row['step']:,} | {_point(a)} | {a['learned_runs']} | {_point(m)} | "
                f"{m['learned_runs']} | {_factor(f)} |"
            )
        lines += [
            "",
            "A side whose runs do not locate its 80% point (fewer than two runs on either side "
            "of it fall where the fit says) only bounds it, and a factor with such a side is a "
            "bound, for the sizes and seeds run (`threshold/search/bounds.py`).",
            *_steps_to_learn(sci),
        ]
    return "\n".join(lines) + "\n"


def _timed_captures(rows: list[dict]) -> str:
    """Whether any row captured a CUDA graph inside its timed steps (records before issue 69
    kept no count before timing: said so)."""
    counted = [r for r in rows if "graphs_before" in r]
    if not counted:
        return "The rows did not count their graphs before timing."
    timed = [r for r in counted if r["graphs_after"] != r["graphs_before"]]
    if not timed:
        return "No row captured a CUDA graph inside its timed steps."
    which = ", ".join(f"{r['path']} {r['members']}" for r in timed)
    return (
        f"Rows that captured CUDA graphs inside their timed steps (slower than replays): {which}."
    )


def _steps_to_learn(sci: dict) -> list[str]:
    """Each size's steps to learn ADD, alone and in the mixture, seed by seed: the first
    validation at which ADD's teacher-forced answer accuracy reached :data:`LEARNED_TF`. None
    where the record has no validations (reports/gpu up to run13)."""
    if not all(r.get("val_tf") for r in sci["runs"]):
        return []
    cells: dict = {}
    for r in sci["runs"]:
        first = next((step for step, acc in r["val_tf"] if acc >= LEARNED_TF), None)
        cell = f"> {r['val_tf'][-1][0]:,}" if first is None else f"{first:,}"
        cells.setdefault((r["d"], r["study"]), []).append(cell)
    lines = [
        "",
        f"Steps to learn ADD (the first validation, every {sci['val_every']} steps, at which"
        f" ADD's teacher-forced answer accuracy reached {LEARNED_TF}; '>' a run that had not"
        " by its last), seed by seed:",
        "",
        "| d | ADD alone | in MAX+MED+ADD |",
        "|---:|---|---|",
    ]
    for d in sci["sizes"]:
        alone, mixed = cells[(d, "add")], cells[(d, "max+med+add")]
        lines.append(f"| {d} | {' / '.join(alone)} | {' / '.join(mixed)} |")
    return lines


def _time_limited(sci: dict) -> str:
    """Where the time limit ended runs before their planned steps: how many, by which step, and
    that the rows past it read each run's last accuracy (carried forward, as a stopped run's are).
    A record without the runs' stop reasons (reports/gpu up to run13) says so only where no run
    reached the plan, as a run could also stop early by having learned."""
    runs = sci["runs"]
    if all("stop_reason" in r for r in runs):
        short = [r["steps"] for r in runs if r["stop_reason"] == "time_limit"]
    else:
        short = [r["steps"] for r in runs] if all(r["steps"] < sci["steps"] for r in runs) else []
    if not short:
        return ""
    ended = max(short)
    which = "every run" if len(short) == len(runs) else f"{len(short)} of {len(runs)} runs"
    return (
        f" The time limit ended {which} by step {ended:,} (the plan leaves evaluation"
        f" {EVAL_SHARE:.0%} of the time; it took more), so rows past step {ended:,} read the runs"
        " there."
    )


def _point(e: dict) -> str:
    """A study's 80% point: the posterior's, or where its runs do not locate it, the bound they
    give (``> 16,096 (d 32)``, as the report writes it) with the posterior's beside it, and the
    larger sizes that fell short after a smaller one learned (what pulls the posterior up)."""
    lo, hi = e["interval_params"]
    shown = f"{e['params_p80']:,.0f} ({lo:,.0f}-{hi:,.0f})"
    located = e.get("located", POINT)  # records before the verdict was kept were not judged
    if located == POINT:
        return shown
    late = [] if located == UPPER else e.get("out_of_order") or []  # what pulls the point up
    why = f"d {', '.join(map(str, late))} short after d {e['first_d']} learned" if late else ""
    if e.get("bound_params") is None:  # no bound ("none"), or a record from before it was kept
        return f"{shown}, {located}" + (f" ({why})" if why else "")
    sign = ">" if located == LOWER else "<="
    inside = "; ".join(part for part in (f"d {e['bound_d']}", why, f"posterior {shown}") if part)
    return f"{sign} {e['bound_params']:,.0f} ({inside})"


def _factor(f: dict) -> str:
    posterior = f"{f['factor']:.2f}x ({f['interval'][0]:.2f}-{f['interval'][1]:.2f})"
    bound = f.get("bound", {"form": POINT})
    if bound["form"] == POINT:
        return posterior
    if bound["form"] == "none":
        return f"none: the runs bound neither side (posterior {posterior})"
    word = "at least" if bound["form"] == LOWER else "at most"
    return (
        f"{word} {bound['value']:.2f}x ({bound['at_median']:.2f}x at the median; posterior "
        f"{posterior})"
    )
