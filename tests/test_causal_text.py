"""attncore.training.known_text / text_attention and the next-character chart builder."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attncore.errors import AttnInputError
from attncore.training import (
    CharTransformer,
    attention_maps,
    char_label,
    known_text,
    load_shipped_model,
    next_char_distribution,
    text_attention,
)
from ui.views.causal import next_char_figure, next_char_frame


@pytest.fixture(scope="module")
def model() -> CharTransformer:
    return load_shipped_model()


def test_known_text_drops_unknown_characters_and_cuts_at_the_limit(model: CharTransformer) -> None:
    kt = known_text(model, "ab@c ü@d", limit=3)
    assert kt.text == "abc" and kt.unknown == ("@", "ü") and kt.n_unknown == 3 and kt.cut == 2
    assert known_text(model, "to be").cut == 0
    with pytest.raises(AttnInputError, match="type at least one character"):
        known_text(model, "")
    with pytest.raises(AttnInputError, match="none of the 2 characters"):
        known_text(model, "@@")


def test_text_attention_is_the_model_maps_with_character_tokens(model: CharTransformer) -> None:
    text = "Thou art, a\nking."
    att = text_attention(model, text)
    assert torch.equal(att.attentions, attention_maps(model, text))
    assert att.causal and att.tokens[4] == "␣" and att.tokens[11] == "↵"
    assert att.punctuation.tolist() == [c in ",." for c in text]
    assert not att.special.any()
    L = len(text)
    assert (att.attentions.triu(diagonal=1) == 0).all()
    torch.testing.assert_close(att.attentions.sum(-1), torch.ones(3, 4, L), rtol=1e-5, atol=1e-5)
    assert char_label("\t") == "⇥" and char_label("\x00") == "U+0000" and char_label("a") == "a"


def test_next_char_figure_holds_the_top_k_in_order(model: CharTransformer) -> None:
    dist = next_char_distribution(model, "First Citizen", 0.7)
    ref = next_char_distribution(model, "First Citizen", 1.0)
    fig = next_char_figure(dist, 5, 0.7, view="x", reference=ref)
    np.testing.assert_array_equal(np.asarray(fig.data[0].y), [p for _, p in dist[:5]])
    np.testing.assert_array_equal(np.asarray(fig.data[1].y), [dict(ref)[c] for c, _ in dist[:5]])
    assert list(fig.layout.xaxis.ticktext) == [char_label(c) for c, _ in dist[:5]]
    assert len(next_char_figure(dist, 5, 1.0, view="x", reference=ref).data) == 1
    frame = next_char_frame(dist, 0.7)
    assert len(frame) == len(model.vocab) and frame["probability"].sum() == pytest.approx(1.0)


def test_next_char_figure_draws_markup_tokens_as_typed() -> None:
    """F10: a local model's vocabulary may hold tokens that look like HTML; Plotly draws a subset of HTML in
    tick labels and hover texts, so they are escaped and shown as typed."""
    tokens = ["<b>x</b>", "a&b", "<br>", "plain"]
    dist = list(zip(tokens, [0.4, 0.3, 0.2, 0.1], strict=True))
    ref = list(zip(tokens, [0.25, 0.25, 0.25, 0.25], strict=True))
    fig = next_char_figure(dist, 4, 0.5, view="x", reference=ref)
    want = ["&lt;b&gt;x&lt;/b&gt;", "a&amp;b", "&lt;br&gt;", "plain"]
    assert list(fig.layout.xaxis.ticktext) == want
    assert [list(t.customdata) for t in fig.data] == [want, want]  # the hover texts
    assert fig.layout.meta["chars"] == tokens  # what the model writes, kept for the table and tests
    rendered = [*fig.layout.xaxis.ticktext, *(c for t in fig.data for c in t.customdata)]
    assert not any("<" in s or ">" in s for s in rendered), rendered
