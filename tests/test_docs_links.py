"""Every relative link of the README and of ``docs/*.md`` resolves: the file exists and, where the link names
an anchor of a markdown page, that page has a heading with that anchor (GitHub's rule: lower case, characters
other than letters, digits, spaces, ``-`` and ``_`` dropped, spaces turned into ``-``, repeats numbered)."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.M | re.S)
INLINE = re.compile(r"\]\(([^)\s]+)\)")  # [text](target)
REFERENCE = re.compile(r"^\[[^\]]+\]:\s*(\S+)", re.M)  # [label]: target


def slug(heading: str) -> str:
    """GitHub's anchor of a heading's text."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """The anchors of ``page``'s headings, repeats suffixed ``-1``, ``-2``, ... as GitHub does."""
    seen: Counter[str] = Counter()
    out = set()
    for line in FENCE.sub("", page.read_text()).splitlines():
        if m := re.match(r"^#{1,6}\s+(.*)$", line):
            s = slug(m.group(1))
            out.add(s if not seen[s] else f"{s}-{seen[s]}")
            seen[s] += 1
    return out


def links(page: Path) -> list[str]:
    """The link targets of ``page`` outside code blocks, inline and reference-style."""
    text = FENCE.sub("", page.read_text())
    return INLINE.findall(text) + REFERENCE.findall(text)


def test_slug_follows_githubs_rule():
    assert slug("§1.3 The teacher: the summarization ladder (paper §3.1)") == \
        "13-the-teacher-the-summarization-ladder-paper-31"
    assert slug("Over-fitting (§5.3): the irrelevant region's update wins") == \
        "over-fitting-53-the-irrelevant-regions-update-wins"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_relative_links_resolve(page):
    broken = []
    for target in links(page):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto: ...
            continue
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            broken.append(f"{target}: no file {file}")
        elif anchor and file.suffix == ".md" and anchor not in anchors(file):
            broken.append(f"{target}: no heading with anchor #{anchor} in {file.name}")
    assert not broken, broken


def test_the_readme_links_every_page_of_docs():
    readme = links(ROOT / "README.md")
    missing = [p.name for p in PAGES[1:] if f"docs/{p.name}" not in {t.partition("#")[0] for t in readme}]
    assert not missing, f"README.md does not link {missing}"
