"""AppTest: SmolLM2-135M-Instruct (4-bit (Q4_1) weights dequantised to float32) on the Heatmaps page's
real-text source: the head map, the token strips and q, k, v (the shared checks of the real-text views),
the layers x heads overview with its three key/value groups, the next-token distribution with a
temperature, a generated continuation, and the forward pass cached by (model, text). Every chart is
compared with attncore run directly on the same text."""

from __future__ import annotations

import numpy as np
import pytest

import attncore.models as models
from attncore.models import LoadedModel, load_model, run_text
from attncore.models.generation import generate, next_distribution, next_logits
from attncore.qkv import capture
from tests.chart_data import decode, figure, no_errors, page_device, run_app, trace
from tests.chart_data import set_widget as _set
from tests.test_apptest_realtext_select import click, strip_weights, strips
from ui import cached_models

HEATMAPS = "pages/1_Heatmaps.py"
TEXT = "The cat sat on the mat. The dog slept."


@pytest.fixture(scope="module")
def lm() -> LoadedModel:
    return load_model("smollm2", page_device())


def check_causal_token(at, lm: LoadedModel, att, layer: int, head: int, i: int) -> None:
    """The token strips (its row; its column, blank above the diagonal), q, k, v and output of query ``i``
    equal attncore's; k and v are the key/value head of the query head's group."""
    w = att.attentions[layer, head]
    frm, to = strips(at)
    np.testing.assert_allclose(strip_weights(frm)[: i + 1], w[i, : i + 1].numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(strip_weights(to)[i:], w[i:, i].numpy(), rtol=1e-5, atol=1e-6)
    cap = next(c.value for c in at.caption if c.value.startswith("**To"))
    seen = len(att.tokens) - i
    assert f"mean {float(w[i:, i].mean()):.3f} over the {seen} queries that see it" in cap
    hv = capture(lm, TEXT)
    z = decode(trace(figure(at, "rt-token-qkv"))["z"])
    want = np.stack([t[layer, head, i].numpy() for t in (hv.q, hv.k, hv.v, hv.output)])
    np.testing.assert_allclose(z, want, rtol=1e-5, atol=1e-6)
    assert hv.group(head) == head // 3
    np.testing.assert_allclose(want[1], hv.k[layer, 3 * hv.group(head), i].numpy())


def test_smollm2_views_equal_attncore_and_moving_never_reruns_the_forward(
        lm: LoadedModel, monkeypatch: pytest.MonkeyPatch) -> None:
    passes: list[str] = []
    real = models.run_text

    def counting(*a, **k):
        passes.append(a[1])
        return real(*a, **k)

    monkeypatch.setattr(models, "run_text", counting)
    cached_models._text_attention.clear()
    at = run_app(HEATMAPS, timeout=900, rt_src="real", rt_model="smollm2", rt_text=TEXT, rt_layer="3",
                 rt_head="4", rt_tok="2")
    no_errors(at)
    att = real(lm, TEXT)
    from ui.realtext import model_sentence
    from ui.text import plain

    sentence = model_sentence(lm)
    assert "SmolLM2-135M-Instruct, 4-bit (Q4_1) weights dequantised to float32: 30 layers × 9 query heads sharing " \
           "3 key/value heads (grouped-query attention: 3 query heads per group), width 576, head dim 64" in sentence
    assert plain(sentence) in [c.value for c in at.caption]
    np.testing.assert_allclose(decode(trace(figure(at, "rt-weights"))["z"]), att.attentions[3, 4].numpy(),
                               rtol=1e-5, atol=1e-6)
    check_causal_token(at, lm, att, 3, 4, 2)
    # the overview: 30 x 9 tiles, the heads grouped by their 3 key/value heads, each tile the summary
    ov = figure(at, "rt-overview")
    meta = ov["layout"]["meta"]
    assert (meta["layers"], meta["heads"], meta["kv_heads"], meta["side"]) == (30, 9, 3, len(att.tokens))
    z = decode(trace(ov)["z"])
    side, rows, cols = meta["side"], meta["rows"], meta["cols"]
    assert [cols[h + 1] - cols[h] for h in range(8)] == [side + 1, side + 1, side + 3] * 2 + [side + 1] * 2
    for n, h in ((0, 0), (3, 4), (29, 8)):
        np.testing.assert_allclose(z[rows[n]:rows[n] + side, cols[h]:cols[h] + side],
                                   att.summary.thumbs[n, h].numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(att.summary.thumbs[3, 4].numpy(), att.attentions[3, 4].numpy(), atol=1e-6)
    picks = trace(ov, 1)
    assert picks["customdata"][3 * 9 + 4] == [3, 4]
    assert "layer 3 · head 4 · KV group 1" in picks["text"][3 * 9 + 4]
    # the layer's heads, titled by their key/value group
    titles = [a["text"] for a in figure(at, "rt-heads")["layout"]["annotations"]]
    assert "head 4 · KV 1" in titles and "head 8 · KV 2" in titles
    # the next-token bars at τ = 1, then at τ = 0.5
    logits = next_logits(lm, TEXT)
    for t in (1.0, 0.5):
        if t != 1.0:
            _set(at, "slider", "rt_dtemp", t)
            no_errors(at)
        want = next_distribution(lm, logits, t, 12)
        fig = figure(at, "rt-dec-next")
        assert fig["layout"]["meta"]["chars"] == [n for n, _ in want]
        np.testing.assert_allclose(decode(trace(fig)["y"]), [p for _, p in want], rtol=1e-6, atol=1e-9)
    # moving between layers, heads and tokens, and clicking a tile, reuse the one forward pass
    _set(at, "slider", "rt_layer", 7)
    _set(at, "slider", "rt_head", 1)
    _set(at, "selectbox", "rt_tok", 5)
    click(at, "chart_rt_overview", [12, 6])
    no_errors(at)
    assert (at.session_state["rt_layer"], at.session_state["rt_head"]) == (12, 6)
    np.testing.assert_allclose(decode(trace(figure(at, "rt-weights"))["z"]), att.attentions[12, 6].numpy(),
                               rtol=1e-5, atol=1e-6)
    assert passes == [TEXT], passes


def test_generation_on_the_page_equals_attncore(lm: LoadedModel) -> None:
    at = run_app(HEATMAPS, timeout=900, rt_src="real", rt_model="smollm2", rt_text=TEXT, rt_layer="2",
                 rt_head="5", rt_gen="1", rt_gn="3", rt_gmode="sample", rt_dtemp="1.5")
    no_errors(at)
    seed = int(at.session_state["seed"]) if "seed" in at.session_state else 0
    g = generate(lm, TEXT, 3, greedy=False, temperature=1.5, seed=seed)
    fig = figure(at, "rt-gen")
    assert fig["layout"]["meta"] == {"view": "rt-gen", "layer": 2, "head": 5}
    z = decode(trace(fig)["z"])
    w = g.attentions[:, 2, 5].numpy()
    P = len(g.prompt)
    for t in range(len(g.new)):
        np.testing.assert_allclose(z[t, : P + t], w[t, : P + t], rtol=1e-5, atol=1e-6)
        assert np.isnan(z[t, P + t:]).all()
    shown = [m.value for m in at.get("text")]
    assert g.text.strip() in shown, (g.text, shown)  # st.text drops the leading space
    _set(at, "radio", "rt_gmode", "greedy")
    no_errors(at)
    greedy = generate(lm, TEXT, 3, greedy=True)
    np.testing.assert_allclose(decode(trace(figure(at, "rt-gen"))["z"])[0, : P], greedy.attentions[0, 2, 5, :P],
                               rtol=1e-5, atol=1e-6)
    assert greedy.text.strip() in [m.value for m in at.get("text")]


def test_a_long_text_keeps_the_summaries_and_the_shown_layer(lm: LoadedModel) -> None:
    """Past the map limit (394 tokens for 270 maps) the page keeps every head's summary and the shown layer's
    maps only, says so, and its numbers equal attncore's long-text pass."""
    text = " ".join(["The cat sat on the mat."] * 70)  # ~490 tokens
    at = run_app(HEATMAPS, timeout=900, rt_src="real", rt_model="smollm2", rt_text=text, rt_layer="5",
                 rt_head="2")
    no_errors(at)
    att = run_text(lm, text, layers=(5,))
    assert att.kept == (5,) and len(att.tokens) > lm.full_map_limit
    assert any(f"the maps only for the layer shown (5); past {lm.full_map_limit} tokens" in i.value for i in at.info)
    np.testing.assert_allclose(decode(trace(figure(at, "rt-weights"))["z"]), att.maps(5)[2].numpy(),
                               rtol=1e-5, atol=1e-6)
    ov = figure(at, "rt-overview")
    meta = ov["layout"]["meta"]
    z = decode(trace(ov)["z"])
    thumbs = att.summary.thumbs  # (30, 9, 24, 24), drawn as 12 x 12 block means
    small = thumbs.reshape(30, 9, 12, 2, 12, 2).mean((3, 5))
    r, c = meta["rows"][20], meta["cols"][7]
    np.testing.assert_allclose(z[r:r + 12, c:c + 12], small[20, 7].numpy(), rtol=1e-5, atol=1e-6)


def test_attention_sinks_page_cuts_smollm2_text_where_every_map_fits(lm: LoadedModel) -> None:
    """The Attention sinks page needs every layer's maps: a text past 394 tokens is cut there with a note,
    and the first-token mass per layer x head equals attncore's on the cut text."""
    from attncore.sinks import sink_report

    text = " ".join(["The cat sat on the mat."] * 70)
    at = run_app("pages/4_Attention_sinks.py", timeout=900, snk_view="model", snk_model="smollm2", snk_text=text)
    no_errors(at)
    att = run_text(lm, text, max_tokens=lm.full_map_limit)
    assert att.all_maps and len(att.tokens) == lm.full_map_limit == 394 and att.dropped > 0
    assert any(f"truncated to the first {lm.full_map_limit}" in i.value for i in at.info)
    rep = sink_report(att.attentions, att.categories(), causal=True, eps=0.3)
    np.testing.assert_allclose(decode(trace(figure(at, "snk-mass-first"))["z"]), rep.mass["first"].numpy(),
                               rtol=1e-5, atol=1e-6)
