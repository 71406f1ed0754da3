"""Issue 11: page text cites what a reader can find (a title, an author, the claim itself), never the
project's internal names for its source texts ("source text 003", "source 004", "the source text's")."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Everything a page can show: the pages, the ui package, attncore's messages and the shipped result files.
SCANNED = [ROOT / "app.py", *(ROOT / "pages").glob("*.py"), *(ROOT / "ui").rglob("*.py"),
           *(ROOT / "attncore").rglob("*.py"), *(ROOT / "attncore" / "training" / "results").glob("*.json")]
INTERNAL = re.compile(r"sources?\s+(texts?\s+)?0\d\d|source[ _]0\d\d|the source texts?'", re.IGNORECASE)


def test_no_internal_source_names_in_what_pages_show() -> None:
    hits = [f"{p.relative_to(ROOT)}:{i}: {line.strip()}" for p in SCANNED
            for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) if INTERNAL.search(line)]
    assert not hits, "\n".join(hits)


def test_the_pattern_catches_the_old_wording() -> None:
    for text in ("Source text 003 says", "source text 001, exercise 3", "sources 003, 001 and 000",
                 "source 004 says", "source_004",
                 "the source text's exercise", "the source texts' claims"):
        assert INTERNAL.search(text), text
    for text in ("Python standard library source (built in)", "the source of softmax1", "open source 2024"):
        assert not INTERNAL.search(text), text
