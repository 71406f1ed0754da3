"""attncore.models.tokens: one display form for every tokenizer's tokens, checked on hand-made tokens of each
kind (byte-level BPE, SentencePiece, WordPiece, plain characters) and on the real tokenizers' own decoding."""

from __future__ import annotations

import pytest

from attncore.models.tokens import (
    BYTE_BPE,
    CHARS,
    SENTENCEPIECE,
    WORDPIECE,
    display_text,
    display_tokens,
    raw_marks,
    tokenizer_kind,
)


def _byte_bpe(text: str) -> str:
    """GPT-2's bytes_to_unicode written out from its definition (the reference for the inverse)."""
    bs = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    table = dict(zip(bs, cs, strict=True))
    return "".join(chr(table[b]) for b in text.encode("utf-8"))


def test_byte_level_bpe_spaces_newlines_tabs_and_a_character_split_over_tokens() -> None:
    assert _byte_bpe(" head") == "Ġhead" and _byte_bpe("\n") == "Ċ" and _byte_bpe("\t") == "ĉ"
    raw = ["The", "Ġhead", "Ċ", "ĉ", "ĠĠ", "Ġcaf" + _byte_bpe("é")]
    assert display_tokens(raw, BYTE_BPE) == ("The", "␣head", "↵", "⇥", "␣␣", "␣café")
    # 日 is three bytes (e6 97 a5): split over three tokens, each shows the character and where it continues
    b = _byte_bpe(" 日本")
    raw = [b[:2], b[2], b[3], b[4:]]  # "Ġæ", "Ĺ", "¥", "æľ¬"
    assert display_tokens(raw, BYTE_BPE) == ("␣日…", "…日…", "…日", "本")
    # é (c3 a9) split in two, after a word
    e = _byte_bpe("é")
    assert display_tokens(["Ġcaf", e[0], e[1]], BYTE_BPE) == ("␣caf", "é…", "…é")
    # a byte no character holds (a lone continuation byte) is written as a byte
    assert display_tokens([e[1]], BYTE_BPE) == ("<0xA9>",)
    # special tokens as written, the kind guessed from the marks
    assert display_tokens(["<|endoftext|>", "Ġthe", "Ġend"]) == ("<|endoftext|>", "␣the", "␣end")
    assert raw_marks(["Ġthe"]) == BYTE_BPE


def test_sentencepiece_spaces_and_byte_tokens() -> None:
    raw = ["<s>", "▁The", "▁head", "<0x0A>", "<0x09>", "▁", "<0xE6>", "<0x97>", "<0xA5>", "本"]
    assert display_tokens(raw, SENTENCEPIECE) == ("<s>", "␣The", "␣head", "↵", "⇥", "␣", "日…", "…日…", "…日",
                                                  "本")
    assert raw_marks(["<0x0A>"]) == SENTENCEPIECE and display_tokens(["▁a", "<0x0A>"]) == ("␣a", "↵")


def test_wordpiece_continuations_and_plain_characters() -> None:
    raw = ["[CLS]", "the", "play", "##ing", "##s", "#", "##", "[SEP]"]
    assert display_tokens(raw, WORDPIECE) == ("[CLS]", "the", "play", "ing", "s", "#", "##", "[SEP]")
    assert raw_marks(raw) == WORDPIECE
    # characters (the character model, decoded token texts): invisible characters made visible
    assert display_tokens([" ", "\n", "\t", "a", "", "\x07"], CHARS) == ("␣", "↵", "⇥", "a", "∅", "U+0007")
    assert display_text(" the\n") == "␣the↵"


@pytest.mark.parametrize("text", ["The café\n\tis   open.", "日本語 🙂 naïve <b>x</b>", "a\r\nb"])
def test_display_equals_the_tokenizers_own_decoding(text: str) -> None:
    """On SmolLM2's byte-level BPE tokenizer: the display tokens, the marks turned back and the split
    characters joined, are the text the tokenizer itself decodes."""
    from transformers import AutoTokenizer

    from attncore.models import bundled

    copy = bundled.converted_copy()
    if copy is None:
        pytest.skip("SmolLM2's converted copy is not on this machine")
    tok = AutoTokenizer.from_pretrained(copy, local_files_only=True)
    assert tokenizer_kind(tok) == BYTE_BPE
    ids = tok(text)["input_ids"]
    shown = display_tokens(tok.convert_ids_to_tokens(ids), BYTE_BPE)
    assert not any(m in s for s in shown for m in "ĠĊĉ")
    joined = ""
    for s in shown:
        core = s.removeprefix("…")
        if s.startswith("…"):  # the rest of a split character: already written once
            core = core[1:] if not core.startswith("…") else ""
        joined += core.removesuffix("…") if not s.endswith("…") else core[:-1]
    decoded = tok.decode(ids)
    want = decoded.replace(" ", "␣").replace("\n", "↵").replace("\t", "⇥").replace("\r", "␍")
    assert joined == want
