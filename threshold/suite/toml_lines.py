"""Line numbers of the keys of a TOML file, for error messages that name the line.

:mod:`tomllib` reports lines for syntax errors only, so after a successful parse :func:`key_lines`
scans the raw text once more. It follows table headers (``[defaults]``, the n-th ``[[study]]``) and
records the line of each ``key =`` inside them, skipping the insides of multi-line strings and
arrays so that their lines are never taken for keys or headers. :func:`find_line` picks the first
known of several places: the key when found, else its table's header, else line 1 (a file written
with inline tables, ``study = [{...}]``, gets the line of that key).
"""

from __future__ import annotations

import re

__all__ = ["KEY", "find_line", "key_lines", "unquote"]

_HEADER = re.compile(r"^\s*(\[\[|\[)\s*([^\[\]]+?)\s*(\]\]|\])\s*(#.*)?$")
KEY = re.compile(r"""^\s*("(?:[^"\\]|\\.)*"|'[^']*'|[A-Za-z0-9_-]+)\s*(?:\.|=)""")


def key_lines(text: str) -> dict[tuple[str, int | None, str | None], int]:
    """1-based lines of table headers and keys: ``(table, index, key) -> line``.

    ``table`` is ``""`` at the top level, else the header's name (``"study"``); ``index`` counts
    the ``[[table]]`` headers of that name from 0 (None for a plain ``[table]``); ``key`` is the
    key (its first part when dotted), or None for the header's own line. Assumes ``text`` parses.
    """
    lines: dict[tuple[str, int | None, str | None], int] = {}
    counts: dict[str, int] = {}
    table: tuple[str, int | None] = ("", None)
    open_string: str | None = None  # the delimiter of a multi-line string that is open
    depth = 0  # open brackets and braces of a multi-line value
    for number, line in enumerate(text.splitlines(), start=1):
        if open_string is not None or depth > 0:  # inside a value that began on an earlier line
            open_string, depth = _scan_value(line, open_string, depth)
            continue
        header = _HEADER.match(line)
        if header and header.group(1) == "[[" and header.group(3) == "]]":
            name = unquote(header.group(2))
            index = counts.get(name, 0)
            counts[name] = index + 1
            table = (name, index)
            lines.setdefault((name, index, None), number)
            continue
        if header and header.group(1) == "[" and header.group(3) == "]":
            table = (unquote(header.group(2)), None)
            lines.setdefault((*table, None), number)
            continue
        key = KEY.match(line)
        if key:
            lines.setdefault((*table, unquote(key.group(1))), number)
            rest = line[line.index("=") + 1 :] if "=" in line else ""
            open_string, depth = _scan_value(rest, None, 0)
    return lines


def unquote(name: str) -> str:
    """A key or table name as TOML reads it: quotes removed, a dotted name's first part."""
    name = name.strip()
    if len(name) >= 2 and name[0] == name[-1] and name[0] in "\"'":
        return name[1:-1]
    return name.split(".")[0].strip()


def _scan_value(text: str, open_string: str | None, depth: int) -> tuple[str | None, int]:
    """Follow a value over one line: returns the open multi-line string and bracket depth."""
    i = 0
    while i < len(text):
        if open_string is not None:
            end = text.find(open_string, i)
            while end > 0 and open_string == '"""' and text[end - 1] == "\\":
                end = text.find(open_string, end + 1)
            if end < 0:
                return open_string, depth
            i, open_string = end + 3, None
            continue
        c = text[i]
        if c == "#":
            break
        if text.startswith('"""', i) or text.startswith("'''", i):
            open_string, i = text[i : i + 3], i + 3
            continue
        if c == '"':
            i += 1
            while i < len(text) and text[i] != '"':
                i += 2 if text[i] == "\\" else 1
        elif c == "'":
            end = text.find("'", i + 1)
            i = len(text) if end < 0 else end
        elif c in "[{":
            depth += 1
        elif c in "]}":
            depth -= 1
        i += 1
    return open_string, depth


def find_line(lines: dict, *places: tuple[str, int | None, str | None]) -> int:
    for place in places:
        if place in lines:
            return lines[place]
    return 1
