"""What a browser shows for a Streamlit markdown string or a Plotly text: a model for the tests.

Streamlit (1.67) renders element bodies, captions, labels, tab titles and metric texts with
react-markdown: CommonMark + GFM (autolinked ``www.`` / ``http://`` / e-mail literals, ``~strike~``,
tables), ``$...$`` / ``$$...$$`` LaTeX, ``:red[...]``-style directives (``:small``, ``:blue-badge``,
a bare known name colours nothing and vanishes), and, on the parsed text, ``:material/name:`` icons,
``:streamlit:`` and ``:emoji:`` shortcodes and arrows (``a -> b`` as ``a → b``; its bundle:
``StreamlitMarkdown.*.js``); GFM's autolinks are also found in the parsed text. Plotly draws a
pseudo-HTML subset (``<b>``, ``<a href>``, ``<br>``...) in every title, name, label and hover text.

:func:`visible` returns the text a reader sees, every construct that is not the literal
characters replaced by a marker such as ``⟦link⟧``; :func:`visible_plotly` the same for a Plotly
string. A test that puts a payload into the app then asks whether the payload is *seen as typed*.
The model errs on the strict side: any ``:word:`` counts as an emoji, any unescaped ``:letter``
as a directive.
"""

from __future__ import annotations

import html
import re
from html.parser import HTMLParser

from markdown_it import MarkdownIt

__all__ = ["JOINER", "visible", "visible_html", "visible_plotly"]

JOINER = "\u2060"  # invisible; ui.text puts it after a colon that could open a shortcode

_MD = MarkdownIt("commonmark", {"html": True}).enable(["strikethrough", "table"])
_MD.disable("text_join")  # keep backslash escapes as their own tokens: escaped characters are not syntax

_INLINE_MARKS = {"link_open": "⟦link⟧", "link_close": "⟦/link⟧", "em_open": "⟦em⟧", "em_close": "⟦/em⟧",
                 "strong_open": "⟦strong⟧", "strong_close": "⟦/strong⟧", "s_open": "⟦s⟧", "s_close": "⟦/s⟧",
                 "softbreak": " ", "hardbreak": "⟦br⟧"}
_BLOCK_MARKS = {"heading_open": "⟦h⟧", "blockquote_open": "⟦quote⟧", "bullet_list_open": "⟦list⟧",
                "ordered_list_open": "⟦list⟧", "list_item_open": "⟦item⟧", "hr": "⟦hr⟧", "table_open": "⟦table⟧",
                "th_open": "⟦cell⟧", "td_open": "⟦cell⟧"}
# syntax read from the characters as typed (an escaped character never starts these)
_SYNTAX = [
    ("⟦math⟧", re.compile(r"\$\$[\s\S]+?\$\$|\$(?![\s$])[^$\n]*?[^\s$]\$(?!\d)|\$[^\s$]\$")),
    ("⟦directive⟧", re.compile(r"(?<!:):[A-Za-z][\w-]*")),
    ("⟦s⟧", re.compile(r"~[^~\s][^~]*~")),
]
# replacements made on the parsed text, where escapes do not stop them: GFM's autolink literals
# (mdast-util-gfm-autolink-literal's transform), Streamlit's icons, logo, emoji and arrows
_TEXT = [
    ("⟦autolink⟧", re.compile(r"(?i)(?<!\w)(?:https?://|www(?=\.))[-.\w]+[^ \t\r\n]*")),
    ("⟦autolink⟧", re.compile(r"(?<![\w.+-])[-.\w+]+@[-\w]+(?:\.[-\w]+)+")),
    ("⟦icon⟧", re.compile(r":material_\w+:")),
    ("⟦logo⟧", re.compile(r":streamlit:")),
    ("⟦emoji⟧", re.compile(r":[\w+-]+:")),
    ("⟦typo⟧", re.compile(r"(?<!\S)(?:<->|->|<-|--|>=|<=|~=)(?!\S)")),
]


def _run_text(chars: list[tuple[str, bool]]) -> str:
    """One text node: (character, escaped) pairs -> what is seen."""
    shown = [c for c, _ in chars]
    raw = "".join("\0" if esc else c for c, esc in chars)  # escaped characters are no syntax
    taken = [False] * len(shown)

    def mark(start: int, end: int, marker: str) -> None:
        if end > start and not any(taken[start:end]):
            shown[start:end] = [marker] + [""] * (end - start - 1)
            taken[start:end] = [True] * (end - start)

    for marker, pattern in _SYNTAX:
        for m in pattern.finditer(raw):
            mark(m.start(), m.end(), marker)
    joined = "".join(c for c, _ in chars)
    for marker, pattern in _TEXT:
        for m in pattern.finditer(joined):
            mark(m.start(), m.end(), marker)
    return "".join(shown).replace(JOINER, "")


def _inline(tokens: list) -> str:
    out: list[str] = []
    run: list[tuple[str, bool]] = []
    for t in tokens:
        if t.type in ("text", "text_special"):
            run.extend((c, t.type == "text_special") for c in t.content)
            continue
        out.append(_run_text(run))
        run = []
        if t.type == "code_inline":
            out.append(f"⟦code⟧{t.content.replace(JOINER, '')}⟦/code⟧")
        elif t.type == "image":
            out.append("⟦image⟧")
        elif t.type == "html_inline":
            out.append("⟦html⟧")
        else:
            out.append(_INLINE_MARKS.get(t.type, f"⟦{t.type}⟧"))
    out.append(_run_text(run))
    return "".join(out)


def visible(body: str) -> str:
    """The text Streamlit shows for markdown ``body``; markup replaced by ``⟦...⟧`` markers."""
    source = body.replace(":material/", ":material_")  # Streamlit does this to the source first
    parts: list[str] = []
    for t in _MD.parse(source):
        if t.type == "inline":
            parts.append(_inline(t.children or []))
        elif t.type in ("code_block", "fence"):
            parts.append(f"⟦pre⟧{t.content}")
        elif t.type == "html_block":
            parts.append("⟦html⟧")
        elif t.type in _BLOCK_MARKS:
            parts.append(_BLOCK_MARKS[t.type])
        elif t.type.endswith("_close") and t.type.startswith(("paragraph", "heading")):
            parts.append("\n")
    return "".join(parts).strip()


_TAG = re.compile(r"<[A-Za-z/][^>]*>")


def visible_plotly(text: str) -> str:
    """What Plotly draws for ``text``: its tags (``<b>``, ``<a href=...>``, ``<br>``) become
    markers, HTML entities their characters; a string in ``$...$`` is typeset as LaTeX."""
    if len(text) > 1 and text.startswith("$") and text.endswith("$"):
        return "⟦math⟧"
    return html.unescape(_TAG.sub(lambda m: "⟦tag⟧", text))


class _Text(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.parts.append(f"⟦{tag}⟧")
        self.parts += [f"⟦@{k}⟧{v}⟦/@⟧" for k, v in attrs if v]  # hover titles, data-* values

    def handle_endtag(self, tag: str) -> None:
        self.parts.append(f"⟦/{tag}⟧")

    def handle_data(self, data: str) -> None:
        self.parts.append(data)


def visible_html(body: str) -> str:
    """The text of an ``st.html`` body (and its attribute values, each set apart), tags as markers."""
    parser = _Text()
    parser.feed(body)
    parser.close()
    return "".join(parser.parts)
