"""User-derived text shown safely: never interpreted as markdown, LaTeX, emoji, icons or HTML.

Streamlit renders the body of ``st.error`` / ``st.warning`` / ``st.info`` / ``st.caption`` (and
``st.markdown``, tab titles, metric and widget labels) as GitHub-flavoured markdown with LaTeX,
``:red[...]``-style directives and ``:emoji:`` / ``:material/icon:`` shortcodes. A URL value, a
file name or an exception message that echoes one could therefore draw a link
(``[Session expired](http://evil)``), load an image (``![x](http://evil/x.png)``), autolink a
bare ``http://`` address or show an icon. :func:`plain` backslash-escapes every character that
could start markup (CommonMark allows escaping any ASCII punctuation, and the escape is
invisible in the output). Some patterns are found *after* markdown is parsed, in the text itself,
where no escape stops them: shortcodes, GFM's ``www.`` / ``http://`` / e-mail autolinks and the
typographic arrows (``a -> b`` drawn as ``a → b``). :func:`plain` breaks each with an invisible
WORD JOINER (U+2060). The text reads exactly as typed (a copy holds the joiners).
"""

from __future__ import annotations

import html
import re

__all__ = ["JOINER", "chart", "code", "plain"]

JOINER = "\u2060"  # WORD JOINER: zero width, no line break; breaks patterns found in parsed text
# a colon that opens a shortcode candidate: `:smile:`, `:+1:`, `:material/home:`, `:streamlit:`
_SHORTCODE = re.compile(r":(?=[\w+/-]+:)")
# patterns Streamlit's renderer finds in the parsed text (so escapes do not stop them), and where a
# joiner breaks each: shortcodes after their colon, `www.` / `scheme://` before the dot / colon,
# e-mail addresses before the `@`, typographic arrows (->, <-, <->, --, >=, <=, ~= between spaces)
# after their first character
_IN_TEXT = [
    (_SHORTCODE, ":" + JOINER),
    (re.compile(r"(?i)(?<=\bwww)(?=\.)"), JOINER),
    (re.compile(r"(?<=\w)(?=://)"), JOINER),
    (re.compile(r"(?<=[-.\w+])(?=@)"), JOINER),
    (re.compile(r"(?<!\S)([<>~-])(?=(?:->|-|>|=)(?!\S))"), "\\1" + JOINER),
]
# characters that start markup anywhere: links/images ([ ]), autolinks and HTML (< >), code (`),
# emphasis (* ~), LaTeX ($), e-mail autolinks (@), entities (&amp;) and the escape character itself
_ALWAYS = {ord(c): "\\" + c for c in "\\`*[]<>$~@&"}
_MARKUP = [
    # emphasis underscores: all but those between two letters or digits (x_y is plain text)
    (re.compile(r"(?<![^\W_])_|_(?![^\W_])"), r"\\_"),
    # a directive (`:red[x]`, `:small[x]`, a bare `:blue` that colours nothing and vanishes) and
    # scheme://... (autolinked by GFM) both start with a colon before a letter or `//`
    (re.compile(r":(?=[A-Za-z]|//)"), r"\\:"),
    (re.compile(r"^(\s*)([#>+=|-])"), r"\1\\\2"),  # a heading, quote or list marker at the start
    (re.compile(r"^(\s*\d+)([.)])"), r"\1\\\2"),  # an ordered-list marker at the start
]


def _one_line(text: object) -> str:
    """Line breaks as spaces; no leading white space (four spaces would start a code block, and
    markdown drops fewer anyway)."""
    return str(text).replace("\r", " ").replace("\n", " ").lstrip()


def plain(text: object) -> str:
    """``text`` as markdown that renders to exactly its characters (line breaks become spaces).

    Only characters that could start markup are escaped (CommonMark backslash escapes, invisible
    in the output), so ordinary messages read the same in the source and on the screen; what the
    renderer finds in the parsed text (shortcodes, autolinks, arrows) is broken by an invisible
    :data:`JOINER`.
    """
    s = _one_line(text)
    for pattern, repl in _IN_TEXT:
        s = pattern.sub(repl, s)
    s = s.translate(_ALWAYS)
    for pattern, repl in _MARKUP:
        s = pattern.sub(repl, s)
    return s


def code(text: object) -> str:
    """``text`` as an inline code span (a path, a file name) that no character in it can end.

    The fence is one backtick longer than the longest run of backticks inside, padded with a space
    where the text starts or ends with one (CommonMark strips one such space); shortcodes, which
    Streamlit also looks for in code, are broken as in :func:`plain`.
    """
    s = _SHORTCODE.sub(":" + JOINER, _one_line(text))
    fence = "`" * (max((len(r) for r in re.findall(r"`+", s)), default=0) + 1)
    pad = " " if s.startswith("`") or s.endswith("`") or (s.startswith(" ") and s.endswith(" ")) else ""
    return f"{fence}{pad}{s}{pad}{fence}"


def chart(text: object) -> str:
    """``text`` inside a Plotly string (a title, a trace name, an axis category, a hover text): Plotly
    draws a subset of HTML there (``<b>``, ``<a href>``, ``<br>``, entities), so ``&``, ``<`` and ``>``
    become entities and the text is drawn as typed."""
    return html.escape(str(text), quote=False)
