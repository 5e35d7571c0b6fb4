"""The engine on a GPU, checked against the CPU and timed: the training half of ``bench gpu``.

:func:`check_engine` trains and evaluates the same runs on the device and on the CPU and gives
the distances (logits at init, weights after 50 steps on the same batches, greedy and sampled
accuracy of a trained member, its checkpoint reloaded on the CPU) and provokes a real CUDA
out-of-memory error to see a pack halved with no run lost. :func:`throughput` times the rows it
is given (:class:`Spec`: packs of many members, eager, graphed or compiled, in a precision, on a
recipe's batches, and the peers of :mod:`threshold.train.peers`). Both run on the CPU too, on
tiny settings, so CI proves the wiring.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from threshold.config import TrainConfig, make_recipe, model_config_for
from threshold.interrupt import Cut, cut_at
from threshold.tasks import TaskData
from threshold.train.bench import sync, timed_steps, warm_up
from threshold.train.checkpoint import load_checkpoint, save_checkpoint
from threshold.train.engine import init_model, start_pack, step_pack, train_runs
from threshold.train.ensemble import Ensemble
from threshold.train.evaluate import evaluate_decode, evaluate_greedy
from threshold.train.layout import CHUNK
from threshold.train.memory import pack_bytes, plan_packs, weight_share
from threshold.train.peers import peer_row
from threshold.train.run import Run

__all__ = ["Spec", "check_engine", "device_seconds", "host_seconds", "throughput"]

Note = Callable[[str], None]


def _max_diff(a: dict, b: dict) -> float:
    return max(float((a[k].float() - b[k].float()).abs().max()) for k in a)


def check_engine(
    data: TaskData, device: torch.device, tmp: Path, tiny: bool = False, note: Note = print
) -> dict:
    """The engine on ``device`` against the CPU: distances, and whether each is within bounds."""
    out: dict = {}
    sizes = [8, 12] if tiny else [16, 24, 32, 40]
    models = [init_model(model_config_for(data.config, d), seed) for seed, d in enumerate(sizes)]
    note("logits at init")
    x = torch.randint(0, len(data.vocab), (len(sizes), 4, 24))
    with torch.no_grad():
        logits = Ensemble.from_models(models, device)(x.to(device)).cpu()
        diff = max(float((logits[i] - m(x[i])).abs().max()) for i, m in enumerate(models))
    out["logits_at_init"] = {"max_abs_diff": diff, "ok": diff < 1e-4}

    note("weights after 50 steps on the same batches")
    cfg = TrainConfig(max_steps=20 if tiny else 50, eval_every=1000, lr=3e-3)
    runs = [Run(m.cfg, data, replace(cfg, seed=i)) for i, m in enumerate(models)]
    on_device = train_runs(runs, device)
    on_cpu = train_runs(runs, "cpu")
    diffs = [
        _max_diff(a.model.state_dict(), b.model.state_dict())
        for a, b in zip(on_device, on_cpu, strict=True)
    ]
    out["weights_after_steps"] = {"steps": cfg.max_steps, "max_abs_diff": max(diffs)}
    out["weights_after_steps"]["ok"] = max(diffs) < 1e-3

    note("a trained member: greedy and sampled accuracy, and its checkpoint on the CPU")
    learn = TrainConfig(max_steps=100 if tiny else 400, eval_every=100, lr=1e-2, warmup_steps=50)
    learn = replace(learn, learned_acc=1.01, seed=3)
    d = 12 if tiny else 32
    result = train_runs([Run(model_config_for(data.config, d), data, learn)], device)[0]
    op, eos = data.config.measured_op, data.vocab.eos_id
    test = data.test[op]
    path = tmp / "member.ckpt"
    save_checkpoint(path, result.model, data.config, learn.to_dict(), result.metrics())
    reloaded = load_checkpoint(path).build_model()
    cpu_greedy = float(evaluate_greedy(reloaded, test, eos)[0].mean())
    cpu_sampled = float(evaluate_decode(reloaded, test, eos, sample_seed=learn.seed)[0].mean())
    out["trained_member"] = {
        "d": d,
        "steps": result.steps,
        "device_greedy": result.accuracy[op],
        "cpu_greedy": cpu_greedy,
        "device_sampled": result.sampled_accuracy[op],
        "cpu_sampled": cpu_sampled,
        "ok": abs(cpu_greedy - result.accuracy[op]) <= 0.01
        and abs(cpu_sampled - result.sampled_accuracy[op]) <= 0.02,
    }
    if device.type == "cuda":
        note("a real CUDA out-of-memory error halves a pack")
        out["out_of_memory"] = _out_of_memory(data, device)
    return out


def _out_of_memory(data: TaskData, device: torch.device) -> dict:
    """Cap this process's GPU memory below what one planned pack needs and train it: the
    allocator's error must halve the pack until it fits, and every run must end."""
    cfg = TrainConfig(max_steps=10, eval_every=1000, batch_size=256, eval_batch_size=64)
    runs = [Run(model_config_for(data.config, 128), data, replace(cfg, seed=i)) for i in range(16)]
    need = pack_bytes([(r.model_cfg, r.cfg) for r in runs])
    total = torch.cuda.get_device_properties(device).total_memory
    fraction = min(0.9, max(0.01, 0.3 * need / total))
    torch.cuda.empty_cache()
    index = device.index if device.index is not None else torch.cuda.current_device()
    torch.cuda.set_per_process_memory_fraction(fraction, index)  # wants an index, not "cuda"
    halvings: list[str] = []

    class Catch(logging.Handler):
        def emit(self, record):
            halvings.append(record.getMessage())

    handler, engine_log = Catch(), logging.getLogger("threshold.train.engine")
    engine_log.addHandler(handler)
    try:
        results = train_runs(runs, device, memory_bytes=10 * need, share=True)
        ended = [r.steps for r in results]
    except torch.OutOfMemoryError as e:
        error = str(e).splitlines()[0]
        return {"ok": False, "error": error, "fraction": fraction, "halvings": halvings}
    finally:
        engine_log.removeHandler(handler)
        torch.cuda.set_per_process_memory_fraction(1.0, index)
        torch.cuda.empty_cache()
    return {
        "fraction": fraction,
        "planned_bytes": need,
        "halvings": halvings,
        "runs_ended": len(ended),
        "ok": bool(halvings) and ended == [cfg.max_steps] * len(runs),
    }


@dataclass(frozen=True)
class Spec:
    """One row of :func:`throughput`: a pack of ``members`` runs whose sizes cycle through
    ``sizes``, trained by ``path`` on the batches of ``recipe`` in ``precision``.

    ``path``: ``eager``; ``graphs`` (static shapes, CUDA graphs); ``compile`` (``torch.compile``
    of the step, default mode: reduce-overhead's own CUDA graphs reuse output buffers that the
    step still reads, and skip the optimizer's in-place updates); or a peer (``peer vmap``,
    ``peer plain``: :mod:`threshold.train.peers`, at the first size)."""

    path: str
    members: int
    sizes: tuple[int, ...]
    recipe: str = "fast"  # fast: whole sequences; paper: 128-token stream windows
    precision: str = "fp32"


def throughput(
    data: TaskData,
    device: torch.device,
    specs: list[Spec],
    steps: int,
    note: Note = print,
    deadline: float | None = None,
) -> list[dict]:
    """Model-steps/s, tokens/s, the useful share of the positions computed, the host's and the
    device's ms a step, and peak memory of each row of ``specs``, in their order; a row that
    fails records its error and the next runs. ``deadline`` (a ``perf_counter`` time) bounds
    the part: the row in flight at it is cut (:func:`threshold.interrupt.cut_at`) and recorded
    as cut, with its seconds, and the rows after it as skipped."""
    rows = []
    for spec in specs:
        sizes = ",".join(map(str, spec.sizes))
        head = {"path": spec.path, "members": spec.members, "d_models": list(spec.sizes)}
        if deadline is not None and time.perf_counter() > deadline:
            rows.append(head | {"recipe": spec.recipe, "precision": spec.precision,
                                "error": "skipped: the part's minutes were spent"})  # fmt: skip
            continue
        note(f"{spec.path}: {spec.members} members at d {sizes}, {spec.recipe}, {spec.precision}")
        t0 = time.perf_counter()
        try:
            with cut_at(deadline):
                row = _row(data, device, spec, steps)
        except Cut:
            row = head | {
                "error": f"cut at the part's deadline after {time.perf_counter() - t0:.1f} s"
            }
        except (RuntimeError, torch.OutOfMemoryError) as e:
            first = str(e).splitlines()[0] if str(e) else type(e).__name__
            row = head | {"error": first[:300]}
        row["wall_s"] = round(time.perf_counter() - t0, 2)
        rows.append(row | {"recipe": spec.recipe, "precision": spec.precision})
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return rows


def _row(data: TaskData, device: torch.device, spec: Spec, steps: int) -> dict:
    if spec.path.startswith("peer "):
        kind = spec.path.split()[1]
        return peer_row(data, device, kind, spec.sizes[0], spec.members, steps)
    if spec.path == "planned":
        return _time_planned(data, device, spec, steps)
    return _time_pack(data, device, spec, steps)


def _runs(data: TaskData, spec: Spec) -> list[Run]:
    recipe = make_recipe(spec.recipe)
    model_kw = dict(recipe.model)
    runs = []
    for i in range(spec.members):
        cfg = replace(recipe.train, seed=i, precision=spec.precision)
        d = spec.sizes[i % len(spec.sizes)]
        runs.append(Run(model_config_for(data.config, d, cfg, **model_kw), data, cfg))
    return runs


def _time_planned(data: TaskData, device: torch.device, spec: Spec, steps: int) -> dict:
    """The row's runs in the packs the engine plans for them (:func:`plan_packs`: shared, by
    width), every pack stepping in turn as :func:`train_runs` steps them; against a ``graphs``
    row of the same sizes (one pack padded to the widest), what packing by width gains."""
    runs = _runs(data, spec)
    members = [(r.model_cfg, r.cfg) for r in runs]
    groups = plan_packs(members, device, share=True)
    packs = [start_pack([(i, runs[i]) for i in g], device, static=True) for g in groups]
    for pack in packs:
        warm_up(pack, 3, steps)
    before = sum(_captured(p) for p in packs)
    trained = sum(m.tokens for p in packs for m in p.members)
    useful = computed = 0
    sync(device)
    t0 = time.perf_counter()
    for _ in range(steps):
        for pack in packs:
            step_pack(pack)
            useful += pack.last.useful
            computed += len(pack.members) * pack.last.n
    sync(device)
    elapsed = time.perf_counter() - t0
    tokens = sum(m.tokens for p in packs for m in p.members) - trained
    return {
        "path": spec.path,
        "members": spec.members,
        "d_models": sorted(set(spec.sizes)),
        "packs": [len(g) for g in groups],
        "weight_share": weight_share(members, groups),
        "steps": steps,
        "step_ms": 1000 * elapsed / steps,
        "model_steps_per_s": spec.members * steps / elapsed,
        "tokens_per_s": tokens / elapsed,
        "useful_share": useful / max(computed, 1),
        "graphs_before": before,
        "graphs_after": sum(_captured(p) for p in packs),
        "graphs_failed": any(p.graphs is not None and p.graphs.failed for p in packs),
    }


def _time_pack(data: TaskData, device: torch.device, spec: Spec, steps: int) -> dict:
    runs = _runs(data, spec)
    path = spec.path
    pack = start_pack(list(enumerate(runs)), device, static=path != "eager")
    compile_s = None
    if path == "compile":
        t0 = time.perf_counter()
        pack.graphs = None
        pack.eager_step = torch.compile(pack.eager_step)
        step_pack(pack)
        sync(device)
        compile_s = time.perf_counter() - t0
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    warm_up(pack, 3, steps)  # and, graphed, every shape of the timed steps captured
    before = _captured(pack)
    elapsed, tokens, share = timed_steps(pack, steps, 0, device)
    row = {
        "path": path,
        "members": spec.members,
        "d_models": sorted(set(spec.sizes)),
        "steps": steps,
        "step_ms": 1000 * elapsed / steps,
        "model_steps_per_s": spec.members * steps / elapsed,
        "tokens_per_s": tokens / elapsed,
        "useful_share": share,
        "weight_share": weight_share(
            [(r.model_cfg, r.cfg) for r in runs], [list(range(len(runs)))]
        ),
        # the graphs captured before and after the timed steps: equal, or a capture was timed
        "graphs_before": before,
        "graphs_after": _captured(pack),
        "graphs_failed": bool(pack.graphs is not None and pack.graphs.failed),
    }
    if compile_s is not None:
        row["compile_s"] = compile_s
    if device.type == "cuda":
        row["peak_memory"] = int(torch.cuda.max_memory_allocated(device))
    row["host_batch_ms"] = 1000 * host_seconds(pack, device)
    row["device_step_ms"] = 1000 * device_seconds(pack, device, steps)
    return row


def _captured(pack) -> int:
    return len(pack.graphs.graphs) if pack.graphs is not None else 0


def host_seconds(pack, device: torch.device) -> float:
    """What the host spends on a step's batch: a whole chunk of every member's batches drawn,
    laid out as spans and sent (:class:`threshold.train.layout.Feed`), per step. The pack's
    drawn batches are dropped first: time it on a pack that trains no further."""
    for member in pack.members:
        member.ahead = member.ahead[:, :0]
    pack.feed.chunk = []
    sync(device)
    t0 = time.perf_counter()
    for _ in range(CHUNK):
        pack.feed.next()
    sync(device)
    return (time.perf_counter() - t0) / CHUNK


def device_seconds(pack, device: torch.device, steps: int) -> float:
    """Seconds a step takes with its batch already on the device: the last batch again, through
    the pack's own step (graphed where the pack is)."""
    batch = pack.last
    step = pack.eager_step if pack.graphs is None else pack.graphs.step
    step(batch.spans, batch.n, batch.t, batch.dense)  # its graph captured, if not yet
    sync(device)
    t0 = time.perf_counter()
    for _ in range(steps):
        step(batch.spans, batch.n, batch.t, batch.dense)
    sync(device)
    return (time.perf_counter() - t0) / steps
