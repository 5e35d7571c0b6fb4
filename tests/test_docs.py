"""The README and docs/ link to each other by file and heading: every such link must land."""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md")])
LINK = re.compile(r"\]\(([^)\s]+)\)")


@cache  # each page's headings once, not once per link to it
def anchors(page: Path) -> set[str]:
    """GitHub's heading anchors of a page: lower case, punctuation but hyphens dropped, spaces
    to hyphens (a repeated heading's later anchors get -1, -2, ...)."""
    seen: dict[str, int] = {}
    out = set()
    for line in page.read_text().splitlines():
        if not line.startswith("#"):
            continue
        text = line.lstrip("#").strip().lower()
        slug = re.sub(r"[^\w\- ]", "", text).replace(" ", "-")  # backticks go with the rest
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def local_links(page: Path) -> list[tuple[Path, str]]:
    """(target page, anchor or "") of each link of ``page`` to a file of the repository."""
    out = []
    for target in LINK.findall(page.read_text()):
        if re.match(r"[a-z]+:", target):  # http:, https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        out.append(((page.parent / path).resolve() if path else page, anchor))
    return out


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_link_lands_on_a_file_and_heading(page):
    broken = []
    for target, anchor in local_links(page):
        if not target.exists():
            broken.append(f"{target.relative_to(ROOT)} (no such file)")
        elif anchor and target.suffix == ".md" and anchor not in anchors(target):
            broken.append(f"{target.relative_to(ROOT)}#{anchor} (no such heading)")
    assert not broken, f"{page.relative_to(ROOT)}: " + "; ".join(broken)


# A path on one machine (a home, a scratch or a work folder) or a folder beside the checkout:
# a clone has none of them.
MACHINE_LOCAL = re.compile(r"\.\./shared/|/work/|/tmp/|/root/|/home/")


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_pages_stand_alone_in_a_clone(page):
    """No link leaves the repository and no page names a path on one machine."""
    outside = [str(t) for t, _ in local_links(page) if not t.is_relative_to(ROOT)]
    local = [
        f"line {i}: {m.group(0)}"
        for i, line in enumerate(page.read_text().splitlines(), 1)
        for m in MACHINE_LOCAL.finditer(line)
    ]
    assert not outside + local, f"{page.relative_to(ROOT)}: " + "; ".join(outside + local)
