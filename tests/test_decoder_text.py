"""attncore.decoder.text.text_tokens (a chosen text cut to its first tokens) and the sink measurements on
such a text, on a tiny random Llama with a character tokenizer, against from-scratch computations:
transformers' own attention maps."""

from __future__ import annotations

import re

import pytest
import torch

from attncore.decoder.sinks import GU_TOKENS, decoder_sinks, sink_variants
from attncore.decoder.text import MIN_TEXT_TOKENS, text_tokens
from attncore.errors import AttnInputError
from ui.decoder_lab import short_for_shift, variants_length

pytestmark = pytest.mark.usefixtures("one_torch_thread")

ALPHABET = "\n .,;:!?'-abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"  # ids 0..61; 62: unknown
V = 64
TEXT = ("First Citizen:\nBefore we proceed any further, hear me speak.\n\nAll:\nSpeak, speak.\n\n"
        "First Citizen:\nYou are all resolved rather to die than to famish?\n")


class CharTokenizer:
    """A transformers-shaped tokenizer, one id per character (``bos``: an id put first, as some add)."""

    def __init__(self, bos: int | None = None) -> None:
        self.bos = bos

    def __call__(self, text: str, return_tensors: str = "pt") -> dict[str, torch.Tensor]:
        assert return_tensors == "pt"
        ids = [ALPHABET.index(c) if c in ALPHABET else 62 for c in text]
        if self.bos is not None:
            ids = [self.bos, *ids]
        return {"input_ids": torch.tensor([ids])}

    def decode(self, ids: list[int]) -> str:
        return "".join("<s>" if i == 63 else ALPHABET[i] if i < 62 else "�" for i in ids)


@pytest.fixture(scope="module")
def model() -> torch.nn.Module:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    return LlamaForCausalLM(LlamaConfig(
        vocab_size=V, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=256, attn_implementation="eager",
        initializer_range=0.5)).eval()


def _attn(model: torch.nn.Module, ids: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        out = model(input_ids=ids, output_attentions=True)
    return torch.stack([a[0] for a in out.attentions]).float()  # (N, H, L, L)


def test_text_tokens_cuts_and_counts() -> None:
    tok = CharTokenizer()
    tt = text_tokens(tok, TEXT, 40)
    assert tt.total == len(TEXT) and tt.length == 40 and tt.asked == 40 and not tt.short
    assert tt.ids.shape == (1, 40) and "".join(tt.texts) == TEXT[:40]
    assert tt.ids[0].tolist() == [ALPHABET.index(c) for c in TEXT[:40]]
    whole = text_tokens(tok, TEXT, 1024)  # fewer tokens than asked: all of them
    assert whole.length == whole.total == len(TEXT) and whole.short and whole.asked == 1024
    assert "".join(whole.texts) == TEXT
    bos = text_tokens(CharTokenizer(bos=63), TEXT, 20)  # the tokenizer's own special tokens are kept
    assert bos.texts[0] == "<s>" and bos.total == len(TEXT) + 1 and "".join(bos.texts[1:]) == TEXT[:19]


@pytest.mark.parametrize(("text", "length", "match"), [
    ("", 64, "empty"), ("  \n\t ", 64, "empty"),
    ("a" * (MIN_TEXT_TOKENS - 1), 64, f"gives {MIN_TEXT_TOKENS - 1} tokens.*at least {MIN_TEXT_TOKENS}"),
    ("x", 64, "gives 1 token;"),
    (TEXT, MIN_TEXT_TOKENS - 1, "at least"),
    ("a" * 30, 64, "30 characters; at most 20"),
])
def test_text_tokens_refuses_plainly(text: str, length: int, match: str) -> None:
    kw = {"max_chars": 20} if len(text) == 30 else {}
    with pytest.raises(AttnInputError, match=match):
        text_tokens(CharTokenizer(), text, length, **kw)
    tt = text_tokens(CharTokenizer(), "b" * MIN_TEXT_TOKENS, 64)  # exactly the minimum is measured
    assert tt.length == MIN_TEXT_TOKENS


def test_sinks_on_a_chosen_text_from_scratch(model: torch.nn.Module) -> None:
    """Gu et al.'s score on the text's first 64 tokens and at the user's length, against transformers' maps:
    a causal pass on a cut text equals the first rows of the pass on the longer one."""
    tok = CharTokenizer()
    L = 100
    big = text_tokens(tok, TEXT, L)
    small = text_tokens(tok, TEXT, GU_TOKENS)
    attn = _attn(model, big.ids)  # (N, H, L, L)
    sL = decoder_sinks(model, big.ids, big.texts, eps=0.2)
    s64 = decoder_sinks(model, small.ids, small.texts, eps=0.2)
    torch.testing.assert_close(sL.first_score, attn[..., 0].mean(-1))
    torch.testing.assert_close(s64.first_score, attn[..., :GU_TOKENS, 0].mean(-1), atol=1e-5, rtol=1e-5)
    assert sL.sink_heads == int((attn[..., 0].mean(-1) > 0.2).sum()) and sL.length == L
    kinds = {a.position: a.kind for a in sL.attractors}
    for pos, kind in kinds.items():  # the kinds come from the text's own characters
        c = TEXT[pos]
        assert kind == ("newline" if c == "\n" else "punctuation" if not c.isalnum()
                        else "function" if c.lower() in ("a", "i") else "word")  # 'a', 'I': function words


def test_a_short_text_is_read_whole_and_the_variants_fit(model: torch.nn.Module) -> None:
    tok = CharTokenizer()
    text = TEXT[:40]
    tt = text_tokens(tok, text, 256)
    assert tt.length == tt.total == 40
    s = decoder_sinks(model, tt.ids, tt.texts)
    torch.testing.assert_close(s.first_score, _attn(model, tt.ids)[..., 0].mean(-1))
    shift = 3
    n = variants_length(tt.total, shift)
    assert n == 37 and variants_length(5_000, shift) == GU_TOKENS
    v = sink_variants(model, text_tokens(tok, text, n + shift).ids, tt.texts, other_first=5, other_text="x",
                      shift=shift, length=n)
    torch.testing.assert_close(v[2].first_score, _attn(model, tt.ids[:, shift:shift + n])[..., 0].mean(-1))
    assert v[2].first_text == text[shift] and v[0].first_text == text[0]


@pytest.mark.parametrize(("total", "shift", "said", "fix"), [
    (24, 32, "a shift of 32 tokens goes past its whole length", "Lower the shift to 8 or less"),
    (24, 24, "a shift of 24 tokens is its whole length", "Lower the shift to 8 or less"),
    (24, 10, "shifted by 10 it leaves 14", "Lower the shift to 8 or less"),
    (16, 3, "shifted by 3 it leaves 13", "Use a longer text: at least 19 tokens for a shift of 3."),
])
def test_a_shift_past_the_text_says_so_plainly(total: int, shift: int, said: str, fix: str) -> None:
    """F8: dec_shift=32 on a 24-token text said the shift 'leaves -8' tokens."""
    msg = short_for_shift(total, shift)
    assert msg is not None and said in msg and fix in msg, msg
    assert f"Your text gives {total} tokens; " in msg and f"the {MIN_TEXT_TOKENS} the variants need" in msg
    assert not re.search(r"-\d", msg), msg  # no negative count
    assert variants_length(total, shift) == max(0, total - shift)


def test_a_shift_that_leaves_enough_says_nothing() -> None:
    assert short_for_shift(24, 8) is None and short_for_shift(5_000, 32) is None
    assert short_for_shift(24, 9) is not None  # 15 left: one fewer than the variants need
