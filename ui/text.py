"""User-derived text shown safely: never interpreted as markdown, LaTeX, emoji or HTML.

Streamlit renders the body of ``st.error`` / ``st.warning`` / ``st.info`` (and
``st.markdown``) as GitHub-flavoured markdown with LaTeX and ``:emoji:`` shortcodes.
A URL value or an exception message that echoes one could therefore draw a link
(``[Session expired](http://evil)``), load an image (``![x](http://evil/x.png)``) or
autolink a bare ``http://`` address. :func:`plain` backslash-escapes every ASCII
punctuation character (CommonMark allows escaping any of them, and the escape is
invisible in the output), so the text reads exactly as typed and nothing in it is markup.
"""

from __future__ import annotations

import string

__all__ = ["plain"]

# every ASCII punctuation character: [ ] ( ) ! * _ ` $ # < > ~ | : . / \ and the rest
_ESCAPES = {ord(c): "\\" + c for c in string.punctuation}


def plain(text: object) -> str:
    """``text`` as markdown that renders to exactly its characters (line breaks become spaces)."""
    s = str(text).replace("\r", " ").replace("\n", " ")
    return s.translate(_ESCAPES)
