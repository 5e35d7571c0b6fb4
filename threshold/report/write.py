"""Write a report folder: ``index.html``, ``summary.md``, ``results.json`` and the figures.

The folder must be new or empty; ``force`` lets a report replace an earlier one there: the files
the earlier report listed in its ``results.json`` are removed first, anything else is left alone.
A folder that cannot be made or written is a :class:`ConfigError` (one line at the command line).
It draws with matplotlib and plotly (:mod:`threshold.report.figures`, about 1 s to import), which
is why the package's face does not re-export it: reading studies loads neither.
"""

from __future__ import annotations

import json
import os
import re
from datetime import UTC, datetime
from pathlib import Path

from threshold.errors import ConfigError
from threshold.meta import git_commit
from threshold.report import figures
from threshold.report.build import build
from threshold.report.data import Collected, Progress
from threshold.report.efficiency import GRID_SEEDS, GRID_SIZES
from threshold.report.render import render
from threshold.report.results import FORMATS, RESULTS
from threshold.report.view import Report

try:
    from threshold.report.figures import interactive
except ImportError:  # no plotly (a lent GPU, .ci/wheels): reports without the interactive figure
    interactive = None

__all__ = ["PLOTLY_JS", "RESULTS", "check_output", "write_report"]

PLOTLY_JS = "plotly.min.js"


def _cannot(out: Path, e: OSError) -> ConfigError:
    return ConfigError(
        f"output folder {str(out)!r} cannot be written ({e.strerror or e}): give -o a folder "
        "that you can create and write"
    )


def _probe(out: Path) -> None:
    """Make ``out`` (and its missing parents) and remove them again: can the report go there?"""
    missing = []
    for folder in [out, *out.parents]:
        if folder.exists():
            break
        missing.append(folder)
    try:
        out.mkdir(parents=True)
    except OSError as e:
        raise _cannot(out, e) from None
    for folder in missing:  # deepest first
        folder.rmdir()


def check_output(out: Path, force: bool) -> list[str]:
    """Refuse a folder with other content unless ``force``, or one that cannot be made or
    written; returns an earlier report's files. Leaves no folder behind."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise ConfigError(f"output {str(out)!r} is a file: give a folder with -o")
    if not out.is_dir():
        _probe(out)
        return []
    if not os.access(out, os.W_OK | os.X_OK):
        raise _cannot(out, PermissionError(13, "Permission denied"))
    if not any(out.iterdir()):
        return []
    if not force:
        raise ConfigError(
            f"output folder {str(out)!r} exists and is not empty: choose another -o, "
            "or pass --force to write the report over it"
        )
    try:
        earlier = json.loads((out / RESULTS).read_text())
        files = earlier["files"] if earlier.get("format") in FORMATS else []
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        files = []
    return [f for f in files if isinstance(f, str) and "/" not in f and f not in ("", ".", "..")]


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-")


def _plotly_script(out: Path) -> str:
    """Write plotly's script beside the page; returns its file name.

    Each report folder carries its own copy (4.8 MB: the plotly package ships only its full
    bundle), so a folder copied or moved alone still draws its figure; git keeps one blob for
    every identical copy, so the repository does not grow with them. The committed reports link
    theirs to ``reports/cpu/all``'s, so a copy of the working tree (the one a lent GPU gets, 64
    MiB at most) carries it once; a report written there again writes through the link.
    """
    interactive.write_plotly_js(out / PLOTLY_JS)
    return PLOTLY_JS


class _Names:
    """File names in the report folder, each used once."""

    def __init__(self) -> None:
        self.used: set[str] = set()

    def __call__(self, name: str) -> str:
        stem, dot, ext = name.rpartition(".")
        candidate, i = name, 1
        while candidate in self.used:
            i += 1
            candidate = f"{stem}-{i}{dot}{ext}"
        self.used.add(candidate)
        return candidate


def write_report(
    collected: Collected,
    out: Path,
    force: bool = False,
    on_progress: Progress | None = None,
    rendered_from: str = "storage",
) -> dict:
    """Build the view, draw the figures and write the report into ``out``; returns what
    ``results.json`` holds.

    ``rendered_from``: "storage", or the ``results.json`` the studies were read back from.
    """
    out = Path(out)
    earlier = check_output(out, force)
    try:
        return _write(collected, out, earlier, on_progress, rendered_from)
    except OSError as e:
        raise _cannot(out, e) from None


def _write(collected, out, earlier, on_progress, rendered_from) -> dict:
    studies = collected.studies
    # Analysis figures are copied from their folders, or from this very folder when a report
    # is rendered again in place: read them before the earlier report's files go.
    sources = {
        src: Path(src).read_bytes()
        for s in studies
        for a in s.analyses
        for src in (a.get("copy_from") or a["figures"]).values()
    }
    for name in earlier:
        (out / name).unlink(missing_ok=True)
    out.mkdir(parents=True, exist_ok=True)
    unique = _Names()
    fitted = any(s.ok for s in studies)
    names = (
        {"comparison": unique("comparison.png"), "curves": unique("curves.png")} if fitted else {}
    )
    if any(s.budget for s in studies):
        names["budget"] = unique("budget.png")
    entries = []
    copies = {}  # file in out: source
    for s in studies:
        entry = s.to_json() | {"figure": unique(f"study-{_slug(s.name)}.png") if s.runs else None}
        for a in entry["analyses"]:
            a["report_figures"] = {}
            source = next(x for x in s.analyses if x["trial"] == a["trial"])
            for kind, src in (source.get("copy_from") or a["figures"]).items():
                name = unique(f"analysis-{_slug(s.name)}-trial{a['trial']}-{kind}.png")
                copies[name] = src
                a["report_figures"][kind] = name
        entries.append(entry)
    transfer_figs = [
        unique(f"transfer-{i + 1}-{_slug(Path(t['file']).stem)}.png")
        for i, t in enumerate(collected.transfer)
    ]
    plotly_src = _plotly_script(out) if fitted and interactive is not None else None
    rendered = (datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"), rendered_from, git_commit())
    view = build(
        collected, entries, transfer_figs, names, plotly_src, rendered, (GRID_SIZES, GRID_SEEDS)
    )
    # One style a study, in the order the page lists them: the PNGs and plotly agree.
    order = [v.row.name for v in view.studies]
    styles = {name: figures.study_style(i) for i, name in enumerate(order)}
    by_name = {s.name: s for s in studies}
    ordered = [by_name[name] for name in order]
    jobs = []  # (file name, draw(path)): drawn under one progress bar
    if fitted:
        jobs.append(
            (names["comparison"], lambda p: figures.comparison_figure(view.groups, styles, p))
        )
        jobs.append((names["curves"], lambda p: figures.curves_figure(ordered, styles, p)))
    if "budget" in names:
        jobs.append((names["budget"], lambda p: figures.budget_figure(ordered, styles, p)))
    for s, entry in zip(studies, entries, strict=True):
        if entry["figure"]:
            jobs.append((entry["figure"], lambda p, s=s: figures.study_figure(s, p)))
    for t, name in zip(collected.transfer, transfer_figs, strict=True):
        jobs.append((name, lambda p, t=t: figures.transfer_figure(t, p)))
    written = [plotly_src] if plotly_src else []
    for i, (name, draw) in enumerate(jobs):
        if on_progress is not None:
            on_progress("drawing figures", i, len(jobs))
        draw(out / name)
        written.append(name)
    if on_progress is not None:
        on_progress("drawing figures", len(jobs), len(jobs))
    for name, src in copies.items():
        (out / name).write_bytes(sources[src])
        written.append(name)
    plotly_div = None
    if plotly_src:
        plotly_div = interactive.comparison_plotly(ordered, styles).to_html(
            full_html=False,
            include_plotlyjs=False,
            div_id="comparison-plot",
            config={"displaylogo": False, "responsive": True},
        )
    _write_pages(view, plotly_div, out)
    written += ["index.html", "summary.md", RESULTS]
    results = view.to_json() | {"files": written}
    (out / RESULTS).write_text(json.dumps(results, indent=1), encoding="utf-8")
    return results


def _write_pages(view: Report, plotly_div: str | None, out: Path) -> None:
    html = render("report.html.j2", r=view, plotly_div=plotly_div)
    (out / "index.html").write_text(html, encoding="utf-8")
    (out / "summary.md").write_text(render("summary.md.j2", r=view), encoding="utf-8")
