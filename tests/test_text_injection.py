"""User and URL text is never rendered as markdown: links, images, autolinks and LaTeX stay text."""

from __future__ import annotations

import pytest
from markdown_it import MarkdownIt

from tests.chart_data import run_app
from ui.text import plain

PHISH = "[Session expired - click to log in again](http://example/phish)"
IMAGE = "![x](http://example/x.png)"
MD = MarkdownIt("commonmark")


def markup(body: str) -> list[str]:
    """Inline token types other than plain text/soft breaks that ``body`` renders to."""
    return [c.type for t in MD.parse(body) for c in (t.children or [])
            if c.type not in {"text", "softbreak"}]


def rendered(body: str) -> str:
    """The visible text ``body`` renders to (tags stripped)."""
    import re

    return re.sub(r"<[^>]+>", "", MD.renderInline(body)).replace("&lt;", "<").replace("&gt;", ">") \
        .replace("&amp;", "&").replace("&quot;", '"')


@pytest.mark.parametrize("text", [PHISH, IMAGE, "**bold** _it_ `code` $x^2$ :smile: <b>x</b> # h",
                                  "http://example/phish www.example.com <http://example/a>",
                                  "a\\[b\\](c) \\ end", "line\nbreak"])
def test_plain_renders_exactly_the_characters(text: str) -> None:
    body = plain(text)
    assert markup(body) == []
    assert rendered(body) == text.replace("\n", " ")
    assert "http:" not in body  # no bare address left for GFM's autolinker
    assert "$" not in body.replace("\\$", "")  # no unescaped dollar starts LaTeX


def test_the_check_can_fail() -> None:
    assert "link_open" in markup(PHISH)
    assert "image" in markup(IMAGE)


def test_injection_urls_give_plain_notices_in_the_app() -> None:
    at = run_app("pages/1_Heatmaps.py", L=PHISH, mask=IMAGE)
    assert not at.exception
    bodies = [w.value for w in at.warning]
    assert bodies, "expected notices about L and mask"
    for b in bodies:
        assert markup(b) == [], b
    shown = " ".join(rendered(b) for b in bodies)
    assert "http://example/phish" in shown and "http://example/x.png" in shown, shown


def test_error_messages_with_user_text_are_plain() -> None:
    """An input error quoting the user's text (Saturation's score list) is escaped too."""
    at = run_app("pages/3_Saturation_and_gradients.py", sat_tab="Saturation", sat_scores="1,[x](http://e.x)")
    assert not at.exception
    bodies = [e.value for e in at.error] + [w.value for w in at.warning]
    assert bodies, "expected a message about the bad scores"
    for b in bodies:
        assert markup(b) == [], b
