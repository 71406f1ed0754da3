"""The texts of the decoder measurements: the public-domain text shipped with the package, and any chosen
text cut to its first tokens.

Shape legend: ``L`` tokens of one window (or of a chosen text), ``B`` windows, ``T`` tokens of a whole text.

The first ~12 KB of the opening of Shakespeare's *Coriolanus* as it stands in Karpathy's tiny Shakespeare
(``data/shakespeare_coriolanus.txt``, public domain), so the perplexities on the pages need no file
from outside the package. Two short texts of modern English prose written for this app and dedicated to the
public domain (``data/lighthouse_own.txt``, a story; ``data/bread_own.txt``, an explanation; ~2 KB each)
let a measurement be repeated on texts of another kind (:data:`SINK_TEXTS`).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from torch import Tensor

from attncore.errors import AttnInputError
from attncore.models.loading import MAX_TEXT_CHARS

__all__ = [
    "MIN_TEXT_TOKENS",
    "SHIPPED_TEXT_FILE",
    "SHIPPED_TEXT_NAME",
    "SHIPPED_TEXT_TITLE",
    "SINK_TEXTS",
    "TextTokens",
    "shipped_text",
    "sink_text",
    "text_tokens",
    "text_windows",
]

SHIPPED_TEXT_FILE = Path(__file__).resolve().parent / "data" / "shakespeare_coriolanus.txt"
SHIPPED_TEXT_TITLE = "Shakespeare, Coriolanus I.i"
SHIPPED_TEXT_NAME = f"{SHIPPED_TEXT_TITLE} (public domain, ~12 KB)"
MIN_TEXT_TOKENS = 16  # the fewest tokens a chosen text must give for the sink measurements
# (title, file under data/): the shipped text and the two texts written for this app
SINK_TEXTS: tuple[tuple[str, str], ...] = (
    (SHIPPED_TEXT_TITLE, SHIPPED_TEXT_FILE.name),
    ("The lighthouse (a story written for this app, public domain)", "lighthouse_own.txt"),
    ("Baking bread (an explanation written for this app, public domain)", "bread_own.txt"),
)


@lru_cache(maxsize=1)
def shipped_text() -> str:
    """The shipped text (UTF-8)."""
    return SHIPPED_TEXT_FILE.read_text(encoding="utf-8")


@lru_cache(maxsize=4)
def sink_text(index: int) -> str:
    """The text of :data:`SINK_TEXTS` ``[index]`` (UTF-8)."""
    if not 0 <= index < len(SINK_TEXTS):
        raise AttnInputError(f"there are {len(SINK_TEXTS)} shipped texts; got index {index}.")
    return (SHIPPED_TEXT_FILE.parent / SINK_TEXTS[index][1]).read_text(encoding="utf-8")


def text_windows(ids: Tensor, length: int, count: int) -> list[Tensor]:
    """``count`` windows of ``length`` tokens from ``ids`` (1, T), spread evenly from the start to the end.

    Returns a list of (1, L) tensors (they may overlap when ``count * length > T``). Raises
    :class:`AttnInputError` when the text is shorter than one window.
    """
    T = int(ids.shape[-1])
    if length < 2 or count < 1:
        raise AttnInputError(f"a window needs at least 2 tokens and there must be a window; got {length}, "
                             f"{count}.")
    if length > T:
        raise AttnInputError(f"the text has {T:,} tokens, fewer than one window of {length:,}.")
    if count == 1:
        return [ids[..., :length].reshape(1, -1)]
    step = (T - length) / (count - 1)
    starts = sorted({int(round(i * step)) for i in range(count)})
    return [ids[..., s:s + length].reshape(1, -1) for s in starts]




@dataclass(frozen=True)
class TextTokens:
    """A text's first tokens: ``ids`` (1, L), ``texts`` (L,) each token decoded alone, ``total`` = T, the
    tokens of the whole text (``T >= L``; ``T > L`` when the text was cut), and ``asked``, the L asked for."""

    ids: Tensor
    texts: tuple[str, ...]
    total: int
    asked: int

    @property
    def length(self) -> int:
        """L, the tokens kept: ``min(asked, total)``."""
        return int(self.ids.shape[-1])

    @property
    def short(self) -> bool:
        """The text has fewer tokens than were asked for."""
        return self.total < self.asked


def text_tokens(tokenizer: Any, text: str, length: int, *, min_tokens: int = MIN_TEXT_TOKENS,
                max_chars: int = MAX_TEXT_CHARS) -> TextTokens:
    """The first ``length`` tokens of ``text`` under ``tokenizer`` (a transformers tokenizer: called with
    ``return_tensors="pt"``, its special tokens as it adds them), or all of them when it has fewer.

    Raises :class:`AttnInputError` when the text is empty, longer than ``max_chars`` characters, or gives
    fewer than ``min_tokens`` tokens (or ``length < min_tokens``).
    """
    if not isinstance(text, str) or not text.strip():
        raise AttnInputError("the text is empty; type or paste a text to measure.")
    if len(text) > max_chars:
        raise AttnInputError(f"the text has {len(text):,} characters; at most {max_chars:,} are read.")
    if length < min_tokens:
        raise AttnInputError(f"asked for {length} tokens; the measurements need at least {min_tokens}.")
    ids = tokenizer(text, return_tensors="pt")["input_ids"]  # (1, T)
    total = int(ids.shape[-1])
    if total < min_tokens:
        raise AttnInputError(f"the text gives {total} token{'s' if total != 1 else ''}; the measurements "
                             f"need at least {min_tokens}.")
    ids = ids[..., :length].reshape(1, -1)  # (1, L)
    texts = tuple(tokenizer.decode([int(i)]) for i in ids[0])
    return TextTokens(ids=ids, texts=texts, total=total, asked=int(length))
