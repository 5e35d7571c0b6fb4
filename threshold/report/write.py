"""Write a report folder: ``index.html``, ``summary.md``, ``results.json`` and the figures.

The folder must be new or empty; ``force`` lets a report replace an earlier one there: the files
the earlier report listed in its ``results.json`` are removed first, anything else is left alone.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from datetime import UTC, datetime
from pathlib import Path

import threshold
from threshold.errors import ConfigError
from threshold.report.data import GRID_SEEDS, GRID_SIZES, Collected, Progress
from threshold.report.html import PLOTLY_JS, render_html
from threshold.report.markdown import render_markdown

__all__ = ["RESULTS", "check_output", "write_report"]

RESULTS = "results.json"
_HEADLINE = ("params_p80", "interval_params", "d_p80", "interval_d", "midpoint_params",
             "midpoint_interval_params", "midpoint_d", "interval_ratio")  # fmt: skip
FORMAT = "threshold-report/1"


def check_output(out: Path, force: bool) -> list[str]:
    """Refuse a folder with other content unless ``force``; returns an earlier report's files."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise ConfigError(f"output {str(out)!r} is a file: give a folder with -o")
    if not out.is_dir() or not any(out.iterdir()):
        return []
    if not force:
        raise ConfigError(
            f"output folder {str(out)!r} exists and is not empty: choose another -o, "
            "or pass --force to write the report over it"
        )
    try:
        earlier = json.loads((out / RESULTS).read_text())
        files = earlier["files"] if earlier.get("format") == FORMAT else []
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        files = []
    return [f for f in files if isinstance(f, str) and "/" not in f and f not in ("", ".", "..")]


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-")


def _commit() -> str:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=Path(threshold.__file__).parent,
            capture_output=True, text=True, timeout=5,
        )  # fmt: skip
        return out.stdout.strip() if out.returncode == 0 else "unknown"
    except OSError:
        return "unknown"


def _plotly_script(out: Path, shared: Path | None) -> tuple[str, str | None]:
    """Write plotly's script; returns its ``src`` for the page and the file written in ``out``.

    ``shared``: one copy for several reports (a suite's), written when missing or out of date
    and linked by a relative path, so each report does not carry its own 4.5 MB.
    """
    from plotly.offline import get_plotlyjs

    script = get_plotlyjs()
    if shared is None:
        (out / PLOTLY_JS).write_text(script, encoding="utf-8")
        return PLOTLY_JS, PLOTLY_JS
    shared = Path(shared)
    try:
        current = shared.read_text(encoding="utf-8")
    except OSError:
        current = None
    if current != script:
        shared.parent.mkdir(parents=True, exist_ok=True)
        tmp = shared.with_name(shared.name + ".tmp")
        tmp.write_text(script, encoding="utf-8")
        tmp.replace(shared)
    return Path(os.path.relpath(shared, out)).as_posix(), None


def write_report(
    collected: Collected,
    out: Path,
    force: bool = False,
    on_progress: Progress | None = None,
    shared_plotly: Path | None = None,
) -> dict:
    """Draw the figures and write the report into ``out``; returns the results dict.

    ``shared_plotly``: link this copy of plotly's script instead of writing one into ``out``.
    """
    from threshold.report import figures

    out = Path(out)
    for name in check_output(out, force):
        (out / name).unlink(missing_ok=True)
    out.mkdir(parents=True, exist_ok=True)
    studies = collected.studies
    jobs = []  # (file name, draw(path)): figures, drawn under one progress bar
    names: dict[str, str] = {}
    used: set[str] = set()

    def unique(name: str) -> str:
        stem, dot, ext = name.rpartition(".")
        candidate, i = name, 1
        while candidate in used:
            i += 1
            candidate = f"{stem}-{i}{dot}{ext}"
        used.add(candidate)
        return candidate

    fitted = [s for s in studies if s.ok]
    if fitted:
        baseline = collected.baseline
        jobs.append(
            (unique("comparison.png"), lambda p: figures.comparison_figure(studies, baseline, p))
        )
        jobs.append((unique("curves.png"), lambda p: figures.curves_figure(studies, p)))
        names["comparison"], names["curves"] = jobs[0][0], jobs[1][0]
    study_figs = {}
    for s in studies:
        if s.runs:
            name = unique(f"study-{_slug(s.name)}.png")
            study_figs[s.name] = name
            jobs.append((name, lambda p, s=s: figures.study_figure(s, p)))
    transfer_figs = []
    for i, t in enumerate(collected.transfer):
        name = unique(f"transfer-{i + 1}-{_slug(Path(t['file']).stem)}.png")
        transfer_figs.append(name)
        jobs.append((name, lambda p, t=t: figures.transfer_figure(t, p)))
    written = []
    for i, (name, draw) in enumerate(jobs):
        if on_progress is not None:
            on_progress("drawing figures", i, len(jobs))
        draw(out / name)
        written.append(name)
    if on_progress is not None:
        on_progress("drawing figures", len(jobs), len(jobs))

    study_json = []
    for s in studies:
        entry = s.to_json() | {"figure": study_figs.get(s.name)}
        for a in entry["analyses"]:
            a["report_figures"] = {}
            for kind, src in a["figures"].items():
                name = unique(f"analysis-{_slug(s.name)}-trial{a['trial']}-{kind}.png")
                shutil.copyfile(src, out / name)
                written.append(name)
                a["report_figures"][kind] = name
        study_json.append(entry)
    transfer_json = [t | {"figure": f} for t, f in zip(collected.transfer, transfer_figs,
                                                       strict=True)]  # fmt: skip
    comparison = []
    for s in study_json:
        est = s["estimate"] if s["status"] == "ok" else {}
        comparison.append(
            {
                "name": s["name"],
                "label": s["label"],
                "measured_op": s["settings"]["measured_op"],
                "status": s["status"],
                "status_text": s["status_text"],
                "n_runs": s["n_runs"],
                **{key: est.get(key) for key in _HEADLINE},
                "reduction": s["reduction"],
                "reduction_note": s["reduction_note"],
                "size_ratio": s["size_ratio"],
            }
        )
    plotly_div, plotly_src = None, None
    if fitted:
        fig = figures.comparison_plotly(studies)
        plotly_div = fig.to_html(
            full_html=False, include_plotlyjs=False, div_id="comparison-plot",
            config={"displaylogo": False, "responsive": True},
        )  # fmt: skip
        plotly_src, local = _plotly_script(out, shared_plotly)
        written += [local] if local else []
    results = {
        "format": FORMAT,
        "created": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "version": threshold.__version__,
        "git_commit": _commit(),
        "storage": collected.storage,
        "baseline": collected.baseline,
        "analysis_dir": collected.analysis_dir,
        "grid": {"sizes": GRID_SIZES, "seeds": GRID_SEEDS},
        "comparison": comparison,
        "studies": study_json,
        "transfer": transfer_json,
        "figures": names,
    }
    (out / "index.html").write_text(render_html(results, plotly_div, plotly_src), encoding="utf-8")
    (out / "summary.md").write_text(render_markdown(results), encoding="utf-8")
    written += ["index.html", "summary.md", RESULTS]
    results["files"] = written
    (out / RESULTS).write_text(json.dumps(results, indent=1), encoding="utf-8")
    return results
