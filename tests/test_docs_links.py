"""The README is for newcomers (short, the two commands, every page in its table) and every link in it and
in docs/*.md and CONTRIBUTING.md leads somewhere: a file of the repository and, after a ``#``, one of its
headings (GitHub's anchors)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ui.nav import PAGES

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)


def links(path: Path) -> list[str]:
    """Every markdown link target of a file, code blocks left out."""
    return LINK.findall(FENCE.sub("", path.read_text(encoding="utf-8")))


def anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"[`*_]", "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    text = FENCE.sub("", path.read_text(encoding="utf-8"))
    return {anchor(m.group(1)) for m in re.finditer(r"^#+\s+(.+)$", text, re.M)}


def test_anchor_follows_githubs_rule() -> None:
    assert anchor("Sizing") == "sizing"
    assert anchor("Build and run (CPU)") == "build-and-run-cpu"
    assert anchor("`make run`: a laptop") == "make-run-a-laptop"


@pytest.mark.parametrize("path", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_link_leads_somewhere(path: Path) -> None:
    found = links(path)
    for target in found:
        if re.match(r"[a-z]+:", target):  # https:, mailto:
            assert target.startswith("https://"), f"{path.name}: {target}"
            continue
        file, _, frag = target.partition("#")
        dest = (path.parent / file).resolve() if file else path
        assert dest.is_relative_to(ROOT), f"{path.name}: {target} leaves the repository"
        assert dest.exists(), f"{path.name}: {target} does not exist"
        if frag:
            assert dest.suffix == ".md" and frag in anchors(dest), f"{path.name}: no heading #{frag} in {file}"


def test_the_checker_finds_a_broken_link(tmp_path: Path) -> None:
    """The link test can fail: a missing file and a missing heading are both caught."""
    (tmp_path / "a.md").write_text("# Title\n[ok](#title) [gone](b.md) [bad](#nowhere)\n", encoding="utf-8")
    found = links(tmp_path / "a.md")
    assert found == ["#title", "b.md", "#nowhere"]
    assert "title" in anchors(tmp_path / "a.md") and "nowhere" not in anchors(tmp_path / "a.md")
    assert not (tmp_path / "b.md").exists()


def test_readme_is_short_with_the_commands_and_every_page() -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 120
    for command in ("make run", "make run TORCH=cpu", "make test"):
        assert f"\n{command} " in text, command  # at the start of a line of a code block
    rows = re.findall(r"^\| \*\*(.+?)\*\* \|", text, re.M)
    assert rows == [p.label for p in PAGES], rows
    for doc in ("pages", "configuration", "limits", "deploy", "docker", "benchmarks", "layout"):
        assert f"](docs/{doc}.md)" in text, doc


def test_the_makefile_still_has_the_readmes_commands() -> None:
    make = (ROOT / "Makefile").read_text(encoding="utf-8")
    for target in ("run", "test", "test-fast", "clean", "bench"):
        assert re.search(rf"^{target}:", make, re.M), target


def test_the_pages_doc_counts_the_claims() -> None:
    from attncore.evidence import CLAIMS

    text = (ROOT / "docs" / "pages.md").read_text(encoding="utf-8")
    assert f"in one table ({len(CLAIMS)} claims)" in text
