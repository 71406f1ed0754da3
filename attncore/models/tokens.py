"""Tokens as a reader sees them: one display form for every model's tokens.

Shape legend: ``L`` tokens of one text.

A tokenizer writes its tokens in its own alphabet: byte-level BPE (GPT-2, SmolLM2, Qwen2) maps each byte
to a printable character (``Ġ`` a space, ``Ċ`` a newline, ``Ã©`` the two bytes of ``é``); SentencePiece
(Llama, Mistral) writes a space as ``▁`` and an unknown byte as ``<0x0A>``; WordPiece (BERT, MiniLM)
marks a piece that continues a word with ``##``. :func:`display_tokens` turns each into the text it stands
for, with the invisible characters made visible: a space as ``␣`` (the mark the character model's labels
use), a newline as ``↵``, a tab as ``⇥``, a carriage return as ``␍``; a character whose bytes are split over
tokens is shown on each of them, with ``…`` on the side where it continues; a byte that is no part of any
character is written ``<0xNN>``. WordPiece's ``##`` is dropped (the piece is shown as the letters it adds).
Special tokens (``[CLS]``, ``<|endoftext|>``) are kept as they are written.

One label per token: positions stay distinct (the figure builders add the index where labels repeat).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

__all__ = ["BYTE_BPE", "CHARS", "SENTENCEPIECE", "WORDPIECE", "display_text", "display_tokens",
           "raw_marks", "tokenizer_kind"]

BYTE_BPE, SENTENCEPIECE, WORDPIECE, CHARS = "byte-bpe", "sentencepiece", "wordpiece", "chars"
VISIBLE = {" ": "␣", "\n": "↵", "\t": "⇥", "\r": "␍"}
SPLIT = "…"  # the side on which a character split over tokens continues
_SP_BYTE = re.compile(r"<0x([0-9A-Fa-f]{2})>")
_SPECIAL = re.compile(r"^(\[[A-Z]+\]|<\|?[^<>]*\|?>|</?s>|<unk>|<pad>)$")


@lru_cache(maxsize=1)
def _unicode_to_byte() -> dict[str, int]:
    """The inverse of GPT-2's ``bytes_to_unicode``: printable character -> the byte it stands for."""
    bs = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs, strict=True)}


def raw_marks(tokens: Sequence[str]) -> str | None:
    """The tokenizer kind the raw ``tokens`` are written in, guessed from their marks (None: plain text)."""
    if any("Ġ" in t or "Ċ" in t for t in tokens):
        return BYTE_BPE
    if any("▁" in t or _SP_BYTE.fullmatch(t) for t in tokens):
        return SENTENCEPIECE
    if any(t.startswith("##") and len(t) > 2 for t in tokens):
        return WORDPIECE
    return None


def tokenizer_kind(tokenizer: Any) -> str:
    """:data:`BYTE_BPE`, :data:`SENTENCEPIECE` or :data:`WORDPIECE` for a transformers tokenizer (read from
    how it writes a space and a newline), :data:`CHARS` when it is none of these."""
    try:
        probe = [str(t) for t in tokenizer.tokenize("a b\nc d")]
    except Exception:
        return CHARS
    kind = raw_marks(probe)
    if kind is not None:
        return kind
    backend = getattr(getattr(tokenizer, "backend_tokenizer", None), "model", None)
    if "WordPiece" in type(backend).__name__ or hasattr(tokenizer, "wordpiece_tokenizer"):
        return WORDPIECE
    return CHARS


def _to_bytes(token: str, kind: str) -> bytes | None:
    """The bytes a token stands for (None: it is not written in ``kind``'s alphabet)."""
    if kind == BYTE_BPE:
        table = _unicode_to_byte()
        if not all(c in table for c in token):
            return None
        return bytes(table[c] for c in token)
    if kind == SENTENCEPIECE:
        out = bytearray()
        pos = 0
        for m in _SP_BYTE.finditer(token):
            out += token[pos:m.start()].replace("▁", " ").encode("utf-8")
            out.append(int(m.group(1), 16))
            pos = m.end()
        out += token[pos:].replace("▁", " ").encode("utf-8")
        return bytes(out)
    return token.encode("utf-8")


def _char_len(lead: int) -> int:
    """Bytes of the UTF-8 character ``lead`` starts (0: not a lead byte)."""
    if lead < 0x80:
        return 1
    if 0xC2 <= lead <= 0xDF:
        return 2
    if 0xE0 <= lead <= 0xEF:
        return 3
    if 0xF0 <= lead <= 0xF4:
        return 4
    return 0


def _chars(data: bytes) -> list[tuple[int, int, str]]:
    """(start, end, text) of each character of ``data``; a byte no character holds is ``<0xNN>``."""
    out, i = [], 0
    while i < len(data):
        n = _char_len(data[i])
        if n and i + n <= len(data):
            try:
                out.append((i, i + n, data[i:i + n].decode("utf-8")))
                i += n
                continue
            except UnicodeDecodeError:
                pass
        out.append((i, i + 1, f"<0x{data[i]:02X}>"))
        i += 1
    return out


def display_text(text: str) -> str:
    """``text`` with its invisible characters made visible (space ``␣``, newline ``↵``, tab ``⇥``; any other
    control character as ``U+XXXX``); the empty string as ``∅``."""
    if not text:
        return "∅"
    return "".join(VISIBLE.get(c, c if c.isprintable() else f"U+{ord(c):04X}") for c in text)


def display_tokens(tokens: Sequence[str], kind: str | None = None) -> tuple[str, ...]:
    """(L,) the display form of the raw ``tokens`` (L,) of one text, in order (see the module docstring).

    ``kind`` is the tokenizer's (:func:`tokenizer_kind`); None guesses it from the tokens' marks. A byte
    split over neighbouring tokens is read across them, so a multi-byte character cut in two is shown on
    both halves (``é…``, ``…é``). Special tokens and tokens outside the kind's alphabet are shown as
    written, their invisible characters made visible.
    """
    toks = [str(t) for t in tokens]
    kind = raw_marks(toks) if kind is None else kind
    if kind == WORDPIECE:
        return tuple(display_text(t[2:] if t.startswith("##") and len(t) > 2 else t) for t in toks)
    if kind not in (BYTE_BPE, SENTENCEPIECE):
        return tuple(display_text(t) for t in toks)
    spans: list[tuple[int, int] | None] = []
    data = bytearray()
    for t in toks:
        b = None if _SPECIAL.match(t) and not _SP_BYTE.fullmatch(t) else _to_bytes(t, kind)
        if b is None:
            spans.append(None)
            continue
        spans.append((len(data), len(data) + len(b)))
        data += b
    chars = _chars(bytes(data))
    out: list[str] = []
    ci = 0
    for t, span in zip(toks, spans, strict=True):
        if span is None:
            out.append(display_text(t))
            continue
        s, e = span
        while ci < len(chars) and chars[ci][1] <= s:
            ci += 1
        parts, j = [], ci
        while j < len(chars) and chars[j][0] < e:
            cs, ce, text = chars[j]
            parts.append((SPLIT if cs < s else "") + display_text(text) + (SPLIT if ce > e else ""))
            j += 1
        out.append("".join(parts) or "∅")
    return tuple(out)
