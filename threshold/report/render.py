"""Templates in, text out: the report's pages, the suite's README and the dashboard's notes.

jinja2 renders the files in ``templates/``: ``*.html.j2`` with every value escaped (autoescape),
``*.md.j2`` as written, with table cells escaped for Markdown by :func:`markdown_table`. Undefined
names fail (``StrictUndefined``), so a template never prints an empty cell by mistake. Numbers
are written by the filters of :mod:`threshold.report.text`.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

import jinja2

from threshold.report import text
from threshold.search.bounds import LOCATING_RUNS

__all__ = ["markdown_table", "render"]

TEMPLATES = Path(__file__).parent / "templates"


def _cell(value) -> str:
    return str(value).replace("|", "\\|").replace("\n", " ")


def markdown_table(header, rows) -> str:
    """A Markdown table, each cell escaped (``|`` and line breaks)."""
    lines = ["| " + " | ".join(_cell(h) for h in header) + " |"]
    lines.append("|" + "|".join("---" for _ in header) + "|")
    lines.extend("| " + " | ".join(_cell(c) for c in row) + " |" for row in rows)
    return "\n".join(lines)


@cache
def _environment(html: bool) -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES),
        autoescape=html,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.filters.update(
        number=text.number,
        interval=text.interval,
        duration=text.duration,
        factor=text.factor,
        point=text.point,
        point_d=text.point_d,
        share=text.share,
        cyclic=text.cyclic_words,
        spread=text.spread_words,
        md=_cell,
    )
    env.globals.update(table=markdown_table, grid_words=text.GRID_WORDS, locating=LOCATING_RUNS)
    return env


def render(template: str, **context) -> str:
    """``templates/<template>`` rendered with ``context``; HTML escaped when it ends .html.j2."""
    return _environment(template.endswith(".html.j2")).get_template(template).render(**context)
