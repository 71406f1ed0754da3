"""The public-domain text shipped with the package for the decoder measurements.

Shape legend: ``L`` tokens of one window, ``B`` windows.

The first ~12 KB of the opening of Shakespeare's *Coriolanus* as it stands in Karpathy's tiny Shakespeare
(``data/shakespeare_coriolanus.txt``, public domain), so the perplexities on the pages need no file
from outside the package.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from torch import Tensor

from attncore.errors import AttnInputError

__all__ = ["SHIPPED_TEXT_FILE", "SHIPPED_TEXT_NAME", "shipped_text", "text_windows"]

SHIPPED_TEXT_FILE = Path(__file__).resolve().parent / "data" / "shakespeare_coriolanus.txt"
SHIPPED_TEXT_NAME = "Shakespeare, Coriolanus I.i (public domain, ~12 KB)"


@lru_cache(maxsize=1)
def shipped_text() -> str:
    """The shipped text (UTF-8)."""
    return SHIPPED_TEXT_FILE.read_text(encoding="utf-8")


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


