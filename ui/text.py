"""User-derived text shown safely: never interpreted as markdown, LaTeX, emoji or HTML.

Streamlit renders the body of ``st.error`` / ``st.warning`` / ``st.info`` (and
``st.markdown``) as GitHub-flavoured markdown with LaTeX and ``:emoji:`` shortcodes.
A URL value or an exception message that echoes one could therefore draw a link
(``[Session expired](http://evil)``), load an image (``![x](http://evil/x.png)``) or
autolink a bare ``http://`` address. :func:`plain` backslash-escapes every character that
could start markup (CommonMark allows escaping any ASCII punctuation, and the escape is
invisible in the output), so the text reads exactly as typed and nothing in it is markup.
"""

from __future__ import annotations

import re

__all__ = ["plain"]

# characters that start markup anywhere: links/images ([ ]), autolinks and HTML (< >), code (`),
# emphasis (* ~), LaTeX ($), e-mail autolinks (@) and the escape character itself
_ALWAYS = {ord(c): "\\" + c for c in "\\`*[]<>$~@"}
_MARKUP = [
    (re.compile(r"(?<!\w)_|_(?!\w)"), r"\\_"),  # emphasis underscores (intraword ones are plain text)
    (re.compile(r":(?=//)"), r"\\:"),  # scheme://... is autolinked by GFM
    (re.compile(r"(?i)\b(www)\."), r"\1\\."),  # so is www.example
    (re.compile(r"^(\s*)([#>+=|-])"), r"\1\\\2"),  # a heading, quote or list marker at the start
    (re.compile(r"^(\s*\d+)([.)])"), r"\1\\\2"),  # an ordered-list marker at the start
]


def plain(text: object) -> str:
    """``text`` as markdown that renders to exactly its characters (line breaks become spaces).

    Only characters that could start markup are escaped (CommonMark backslash escapes, invisible
    in the output), so ordinary messages read the same in the source and on the screen.
    """
    s = str(text).replace("\r", " ").replace("\n", " ").translate(_ALWAYS)
    for pattern, repl in _MARKUP:
        s = pattern.sub(repl, s)
    return s
