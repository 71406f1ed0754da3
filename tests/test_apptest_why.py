"""The "Why this head attends here" section of Heatmaps' real text (issue 40 item 1): its figure builders
against attncore.decoder.why on a hand-built case, and the page on SmolLM2, whose charts and sentences carry
attncore's numbers."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from attncore.decoder.why import Rotary, decompose, rotary_of, sink_sentence, sink_summary
from attncore.models import load_model, run_text
from attncore.qkv import capture
from tests.chart_data import decode, figure, no_errors, run_app
from ui.realtext import DEFAULT_TEXT
from ui.text import plain
from ui.views import why as why_views
from ui.why import TITLE, chosen_key, exact_sentence

pytestmark = pytest.mark.usefixtures("one_torch_thread")

HEATMAPS = "pages/1_Heatmaps.py"
OPEN = "rt-why_open"


def _hand(n: int = 6, E: int = 8):
    inv = torch.tensor([100.0 ** (-2 * p / E) for p in range(E // 2)], dtype=torch.float64)
    ang = torch.arange(n, dtype=torch.float64)[:, None] * inv[None]
    rot = Rotary(inv_freq=inv, cos=ang.cos(), sin=ang.sin(), base=100.0)
    g = torch.Generator().manual_seed(5)
    q, k = torch.randn(n, E, generator=g), torch.randn(n, E, generator=g)
    return decompose(q, k, rot, n - 1), q, k


def test_builders_carry_the_decomposition() -> None:
    why, q, k = _hand()
    tokens = [f"t{j}" for j in range(6)]
    j = chosen_key(why.logits)
    fig = why_views.pairs_figure(why, j, tokens, view="v-pairs").to_dict()
    assert fig["layout"]["meta"]["pair_index"] == [3, 2, 1, 0]  # low to high frequency
    np.testing.assert_allclose(decode(fig["data"][0]["y"]), why.pair[j].numpy())
    np.testing.assert_allclose(decode(fig["data"][-1]["y"]), why.pair[0].numpy())
    sc = why_views.norm_cos_figure(why, tokens, view="v-nc").to_dict()
    np.testing.assert_allclose(decode(sc["data"][0]["x"]), why.k_norm.numpy())
    np.testing.assert_allclose(decode(sc["data"][0]["y"]), why.cos.numpy())
    df = why_views.parts_frame(why, tokens)
    np.testing.assert_allclose(df["norm part"] + df["angle part"], df["lead over median"], atol=1e-12)
    np.testing.assert_allclose(df["content"] + df["position"], df["logit"], atol=1e-9)
    assert list(df["logit"]) == sorted(df["logit"], reverse=True)
    # a counterfactual: another key's numbers change the sentence
    s = why_views.key_sentence(why, j, tokens)
    assert f"scores {float(why.logits[j]):.3f}" in s and f"cos {float(why.cos[j]):+.3f}" in s
    other = (j + 1) % 6
    assert why_views.key_sentence(why, other, tokens) != s


def test_chosen_key_skips_the_first_token_when_it_wins() -> None:
    assert chosen_key(torch.tensor([3.0, 1.0, 2.0])) == 2
    assert chosen_key(torch.tensor([1.0, 4.0, 2.0])) == 1
    assert chosen_key(torch.tensor([1.0])) == 0


@pytest.mark.slow
def test_heatmaps_real_text_why_section_on_smollm2() -> None:
    layer, head, tok = 3, 2, 9
    at = run_app(HEATMAPS, timeout=900, rt_src="real", rt_model="smollm2", rt_layer=str(layer),
                 rt_head=str(head), rt_tok=str(tok))
    no_errors(at)
    assert [e for e in at.get("expander") if e.proto.label == TITLE]  # drawn, closed, its charts not sent
    views = {(f.get("layout", {}).get("meta") or {}).get("view") for f in
             [__import__("json").loads(c.proto.spec) for c in at.get("plotly_chart")]}
    assert "rt-why-pairs" not in views
    at.session_state[OPEN] = True
    at.run()
    no_errors(at)
    lm = load_model("smollm2")
    att = run_text(lm, DEFAULT_TEXT)
    hv = capture(lm, DEFAULT_TEXT, len(att.tokens))
    rot = rotary_of(lm.model, len(hv.tokens))
    q, k = hv.q[layer, head], hv.k[layer, head]
    why = decompose(q, k, rot, tok, scale=hv.scale)
    j = chosen_key(why.logits)
    pairs = figure(at, "rt-why-pairs")
    assert pairs["layout"]["meta"]["key"] == j
    np.testing.assert_allclose(decode(pairs["data"][0]["y"]), why.pair[j].numpy(), atol=1e-6)
    np.testing.assert_allclose(decode(pairs["data"][1]["y"]), why.pair[0].numpy(), atol=1e-6)
    assert pairs["layout"]["meta"]["inv_freq"] == pytest.approx([1e5 ** (-2 * p / 64) for p in range(31, -1, -1)],
                                                               rel=1e-6)
    nc = figure(at, "rt-why-normcos")
    np.testing.assert_allclose(decode(nc["data"][0]["x"]), why.k_norm.numpy(), atol=1e-6)
    np.testing.assert_allclose(decode(nc["data"][0]["y"]), why.cos.numpy(), atol=1e-6)
    captions = [c.value for c in at.caption]
    from ui.realtext import token_labels
    labels = token_labels(att)
    assert plain(why_views.key_sentence(why, j, labels)) in captions
    assert plain("The first token: " + sink_sentence(sink_summary(q, k, why), tuple(labels))) in captions
    assert exact_sentence(why) in captions
    assert math.isfinite(why.q_norm)
