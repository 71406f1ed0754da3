"""AppTest: the shipped causal character model on the Heatmaps page (real-text source) and the
Attention sinks page (real model), its next-character chart, its bad input, and the Entropy
page's sentence on the Training lab's own "fully scaled" result.

Every chart is compared with attncore run directly on the same text.
"""

from __future__ import annotations

import statistics
import unicodedata

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from attncore.sinks import sink_report
from attncore.training import (
    MAX_VIEW_CHARS,
    CharTransformer,
    attention_maps,
    known_text,
    load_result,
    load_shipped_model,
    next_char_distribution,
    text_attention,
)
from tests.chart_data import decode, figure, figures, no_errors, page_device, run_app, trace
from tests.chart_data import set_widget as _set
from ui.maps import downsample
from ui.realtext import DEFAULT_TEXT

HEATMAPS = "pages/1_Heatmaps.py"
SINKS = "pages/4_Attention_sinks.py"
ENTROPY = "pages/2_Entropy_vs_length.py"
SHAKESPEARE = "ROMEO:\nBut soft, what light through yonder window breaks?"


@pytest.fixture(scope="module")
def model() -> CharTransformer:
    """The shipped model on the device the pages compute on: the references below run where the page
    runs (CPU and CUDA kernels round differently, so a CPU reference cannot match a CUDA page to 1e-9)."""
    return load_shipped_model(page_device())


def _text(at: AppTest, key: str) -> str:
    return str(at.session_state[key]) if key in at.session_state else DEFAULT_TEXT


def check_next(at: AppTest, model: CharTransformer, prefix: str, view: str) -> None:
    """The next-character bars equal next_char_distribution at the slider's temperature."""
    s = at.session_state
    t, k = float(s[f"{prefix}ntemp"]), int(s[f"{prefix}topk"])
    text = known_text(model, _text(at, f"{prefix}text")).text
    dist = next_char_distribution(model, text, t)
    fig = figure(at, view)
    assert fig["layout"]["meta"]["chars"] == [c for c, _ in dist[:k]]
    assert fig["layout"]["meta"]["temperature"] == pytest.approx(t)
    np.testing.assert_allclose(decode(trace(fig)["y"]), [p for _, p in dist[:k]], rtol=1e-9, atol=1e-12)
    if abs(t - 1.0) > 1e-12:  # grey ticks: the same characters at temperature 1
        ref = dict(next_char_distribution(model, text, 1.0))
        np.testing.assert_allclose(decode(trace(fig, 1)["y"]), [ref[c] for c, _ in dist[:k]], rtol=1e-9)
    else:
        assert len(fig["data"]) == 1
    caption = " ".join(c.value for c in at.caption)
    assert f"The {k} bars hold {sum(p for _, p in dist[:k]):.1%} of the probability" in caption


# ---------------------------------------------------------------------------- Heatmaps


def check_heatmaps(at: AppTest, model: CharTransformer) -> None:
    no_errors(at)
    s = at.session_state
    text = known_text(model, _text(at, "rt_text")).text
    maps = attention_maps(model, text).numpy()  # (N, H, L, L)
    layer, head = int(s["rt_layer"]), int(s["rt_head"])
    w = decode(trace(figure(at, "rt-weights"), 0)["z"])
    np.testing.assert_allclose(w, maps[layer, head], rtol=1e-5, atol=1e-7)
    assert (np.triu(w, k=1) == 0).all()  # causal: nothing above the diagonal
    np.testing.assert_allclose(w.sum(-1), 1.0, rtol=1e-5)
    grid = figure(at, "rt-heads")
    thumbs = [t for t in grid["data"] if t.get("type") == "heatmap"]  # the rest: pick points (clicks)
    assert len(thumbs) == model.config.n_head
    for h, tr in enumerate(thumbs):
        expect, _, _ = downsample(maps[layer, h], 64)  # the grid block-averages to 64 cells a side
        z = decode(tr["z"])
        np.testing.assert_allclose(z, expect, rtol=1e-5, atol=1e-7)
        assert (np.triu(z, k=1) == 0).all()  # blocks wholly above the diagonal are 0
    check_next(at, model, "rt_", "rt-next")


def test_heatmaps_causal_model_every_control(model: CharTransformer) -> None:
    at = run_app(HEATMAPS, rt_src="real", rt_model="causal")
    check_heatmaps(at, model)
    assert list(trace(figure(at, "rt-weights"), 0)["y"])[:2] == ["0:W", "1:h"]
    caption = " ".join(c.value for c in at.caption)
    assert f"{model.config.n_layer} layers × {model.config.n_head} heads" in caption
    for kind, key, value in [("slider", "rt_layer", 2), ("slider", "rt_head", 3),
                             ("slider", "rt_ntemp", 0.5), ("slider", "rt_topk", 5),
                             ("text_area", "rt_text", SHAKESPEARE), ("slider", "rt_ntemp", 2.0)]:
        _set(at, kind, key, value)
        check_heatmaps(at, model)
    assert at.query_params["rt_model"] == "causal" and at.query_params["rt_ntemp"] == "2"
    assert at.query_params["rt_topk"] == "5"
    # Lower temperature sharpens: the top character's probability rises.
    _set(at, "slider", "rt_ntemp", 0.3)
    sharp = decode(trace(figure(at, "rt-next"))["y"])[0]
    _set(at, "slider", "rt_ntemp", 3.0)
    flat = decode(trace(figure(at, "rt-next"))["y"])[0]
    assert sharp > flat
    # Back to MiniLM: no next-character chart (an encoder has none).
    _set(at, "radio", "rt_model", "minilm")
    no_errors(at)
    assert "rt-next" not in [(f.get("layout", {}).get("meta") or {}).get("view") for f in figures(at)]


# ---------------------------------------------------------------------------- Attention sinks


def check_sinks(at: AppTest, model: CharTransformer) -> None:
    no_errors(at)
    s = at.session_state
    text = known_text(model, _text(at, "snk_text")).text
    att = text_attention(model, text)
    rep = sink_report(att.attentions, att.categories(), causal=True, eps=float(s["snk_eps"]))
    layer, head = int(s["snk_layer"]), int(s["snk_head"])
    # the metric tiles: share of heads with alpha_k > eps, computed directly from the maps
    allowed = np.tril(np.ones((len(text), len(text)), dtype=bool))
    maps = att.attentions.double().numpy()
    alpha = (maps * allowed).sum(-2) / allowed.sum(-2)  # (N, H, L): mean weight key k gets
    share = (alpha > float(s["snk_eps"])).mean(1)  # (N, L)
    np.testing.assert_allclose(decode(figure(at, "snk-metric")["data"][0]["z"]), share, rtol=1e-6)
    np.testing.assert_allclose(decode(trace(figure(at, "snk-mass-first"))["z"]), rep.mass["first"].numpy(),
                               rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(rep.mass["first"].double().numpy(), alpha[..., 0], rtol=1e-5)
    # each cell prints its value to two decimals (blank where that is 0.00)
    want = [["" if f"{v:.2f}" == "0.00" else f"{v:.2f}" for v in row] for row in rep.mass["first"].numpy()]
    assert trace(figure(at, "snk-mass-first"))["text"] == want
    grid = figure(at, "snk-grid")
    z = decode(trace(grid)["z"])
    tr, tc = grid["layout"]["meta"]["tile_rows"], grid["layout"]["meta"]["tile_cols"]
    for l_ in range(model.config.n_layer):
        for h in range(model.config.n_head):
            expect, _, _ = downsample(att.attentions[l_, h].numpy(), 40)
            tile = z[l_ * tr: l_ * tr + expect.shape[0], h * tc: h * tc + expect.shape[1]]
            np.testing.assert_allclose(tile, expect, rtol=1e-5, atol=1e-7)
    head_map = decode(trace(figure(at, "snk-head"), 0)["z"])
    np.testing.assert_allclose(head_map, att.attentions[layer, head].numpy(), rtol=1e-5, atol=1e-7)
    assert (np.triu(head_map, k=1) == 0).all()
    check_sinks_captions(at, model, text, maps, alpha, float(s["snk_eps"]))
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Tokens L"] == str(len(text))
    assert metrics["Sink heads for first token (" + att.tokens[0] + ")"] == (
        f"{int((alpha[..., 0] > float(s['snk_eps'])).sum())} of {model.config.n_layer * model.config.n_head}")
    check_next(at, model, "snk_", "snk-next")


def check_sinks_captions(at: AppTest, model: CharTransformer, text: str, maps: np.ndarray, alpha: np.ndarray,
                         eps: float) -> None:
    """Issue 11: with the causal model every sentence describes what is shown (its causal mask, its
    first-token sink, its own layers and heads), each number recomputed here from the maps."""
    L, n_layer, n_head = len(text), model.config.n_layer, model.config.n_head
    captions = " ".join(c.value for c in at.caption)
    labels = " ".join(m.label for m in at.metric)
    for encoder_word in ("[CLS]", "[SEP]", "BERT", "encoder"):
        assert encoder_word not in captions and encoder_word not in labels, encoder_word
    assert f"({n_layer} layers × {n_head} heads" in captions
    # the grid: 0 above every diagonal, and the first query's whole weight on the first token in every head
    assert "The causal mask leaves every tile 0 above its diagonal." in captions
    assert (np.triu(maps, k=1) == 0).all()
    np.testing.assert_allclose(maps[:, :, 0, 0], 1.0, atol=1e-6)
    # the layer-by-layer chart: the even share of the first token and the layer that puts most on it
    even = sum(1 / (i + 1) for i in range(L)) / L
    per_layer = maps[..., 0].mean(-1).mean(1)  # (layers,): mass on the first token, mean over heads
    top = int(per_layer.argmax())
    assert (f"so the first token's even share is the mean of 1/(i + 1): {even:.3f} for these {L} tokens, "
            f"not 1/L = {1 / L:.3f}.") in captions
    assert (f"in layer {top}: {per_layer[top]:.3f}, {per_layer[top] / even:.1f}× the even share.") in captions
    # the sink metric: what uniform causal attention would score, and how many keys exceed eps even then
    uni = np.tril(np.ones((L, L)))
    uni /= uni.sum(-1, keepdims=True)
    u = (uni * np.tril(np.ones((L, L)))).sum(-2) / np.tril(np.ones((L, L))).sum(-2)  # (L,)
    assert f"from {u[-1]:.3f} (the last token) to {u[0]:.3f} (the first)" in captions
    above = int((u > eps).sum())
    if above:
        assert f"for the first {above} token{'s' if above != 1 else ''} that is above ε = {eps:g}" in captions
    else:
        assert f"all at most ε = {eps:g}, so any cell above 0 is a head that singles a token out" in captions
    # the cards: the middle layer(s) named as such; punctuation (a character model has no special tokens)
    metrics = {m.label: m.value for m in at.metric}
    mid = range(1, n_layer - 1) if n_layer > 2 else range(n_layer)
    name = f"layer {mid.start}" if len(mid) == 1 else f"layers {mid.start}–{mid.stop - 1}"
    first = f"Mass on first token ({text_attention(model, text).tokens[0]}), {name}"
    assert metrics[first] == f"{maps[list(mid), :, :, 0].mean():.2f}"
    punct = np.array([unicodedata.category(c).startswith("P") for c in text])
    assert "Mass on other special tokens" not in metrics
    # no empty curve or map for the special tokens a character model's text does not have
    names = {t["name"] for t in figure(at, "snk-glance")["data"]}
    assert not any("special" in n for n in names) and "on first token (" + text_attention(model, text).tokens[0] + \
        ")" in names
    assert not [f for f in figures(at) if (f["layout"].get("meta") or {}).get("view") == "snk-mass-special"]
    assert metrics["Mass on punctuation"] == f"{maps[..., punct].sum(-1).mean():.3f}"


def test_sinks_causal_model_every_control(model: CharTransformer) -> None:
    at = run_app(SINKS, snk_view="model", snk_model="causal")
    check_sinks(at, model)
    for kind, key, value in [("slider", "snk_eps", 0.1), ("slider", "snk_layer", 0), ("slider", "snk_head", 2),
                             ("text_area", "snk_text", SHAKESPEARE), ("slider", "snk_ntemp", 0.7),
                             ("slider", "snk_topk", 30)]:
        _set(at, kind, key, value)
        check_sinks(at, model)
    assert at.query_params["snk_model"] == "causal" and at.query_params["snk_ntemp"] == "0.7"


# ---------------------------------------------------------------------------- bad input


def test_unknown_characters_are_dropped_with_a_note_that_is_not_markdown(model: CharTransformer) -> None:
    raw = "Hello **wörld** <b>x</b> `code` @ 😀 $x$"
    at = run_app(HEATMAPS, rt_src="real", rt_model="causal", rt_text=raw)
    check_heatmaps(at, model)
    kt = known_text(model, raw)
    assert kt.unknown == ("*", "ö", "<", ">", "/", "`", "@", "😀") and kt.n_unknown == 14
    note = " ".join(i.value for i in at.info)
    assert f"{kt.n_unknown} characters outside its vocabulary were dropped" in note
    for c in kt.unknown:
        assert f"(U+{ord(c):04X})" in note
    assert "\\<" in note and "\\`" in note and "\\@" in note and "\\*" in note  # escaped, never markup
    assert "ö (U+00F6)" in note
    # the maps and the next-character chart are those of the kept text
    assert decode(trace(figure(at, "rt-weights"), 0)["z"]).shape == (len(kt.text), len(kt.text))


def test_text_past_the_limit_is_cut_with_a_note(model: CharTransformer) -> None:
    raw = "to be or not to be " * 20  # 380 characters
    at = run_app(SINKS, snk_view="model", snk_model="causal", snk_text=raw)
    check_sinks(at, model)
    note = " ".join(i.value for i in at.info)
    assert (f"The text has {len(raw)} characters the model knows; the views read the first {MAX_VIEW_CHARS}, "
            f"so the last {len(raw) - MAX_VIEW_CHARS} were cut.") in note
    assert {m.label: m.value for m in at.metric}["Tokens L"] == str(MAX_VIEW_CHARS)
    caption = " ".join(c.value for c in at.caption)
    assert f"the model reads the last {model.config.context} of the {MAX_VIEW_CHARS} characters" in caption


@pytest.mark.parametrize("raw, needle", [(" ", None), ("😀😀ü", "none of the 3 characters")])
def test_empty_or_unknown_only_text_is_a_plain_error(raw: str, needle: str | None) -> None:
    at = run_app(HEATMAPS, rt_src="real", rt_model="causal", rt_text=raw)
    assert not at.exception
    if needle is None:  # a lone space is a character the model knows: it runs
        no_errors(at)
        assert decode(trace(figure(at, "rt-weights"), 0)["z"]).shape == (1, 1)
    else:
        assert needle in at.error[0].value and "😀" not in at.error[0].value


def test_empty_text_says_what_to_type() -> None:
    """F11: an empty box is an info box that says what to type, on every real-text input (not an error)."""
    at = run_app(SINKS, snk_view="model", snk_model="causal")
    _set(at, "text_area", "snk_text", "")
    no_errors(at)
    assert any("Type or paste a text in the box above" in i.value for i in at.info), [i.value for i in at.info]


def test_url_bounds_of_the_new_controls() -> None:
    at = run_app(HEATMAPS, rt_src="real", rt_model="causal", rt_ntemp="99", rt_topk="0")
    assert not at.exception and not at.error
    assert at.session_state["rt_ntemp"] == 5.0 and at.session_state["rt_topk"] == 1
    assert len(decode(trace(figure(at, "rt-next"))["y"])) == 1


# ---------------------------------------------------------------------------- Entropy page


def test_entropy_page_states_the_shipped_lr_sweep_and_links_to_the_training_lab() -> None:
    at = run_app(ENTROPY, timeout=300, ent_lo="6", ent_hi="8")
    no_errors(at)
    assert "fully scaled attention (rate" not in " ".join(m.value for m in at.markdown)  # closed: not sent
    at.session_state["ent_more_open"] = True  # 'What the formulas assume': drawn when opened (issue 34)
    at.run()
    no_errors(at)
    d = load_result("lr_sweep")
    k = len(d.get("seeds") or [0])
    cells: dict = {}
    for r in d["runs"]:
        cells.setdefault((r["variant"], r["lr"]), []).append(r)
    best = {}  # per variant, the rate with the lowest mean final training loss among those run at every seed
    for (v, lr), runs in cells.items():
        if len(runs) >= k and all(r["diverged_at"] is None for r in runs):
            mean = statistics.fmean(r["final_train_loss"] for r in runs)
            if v not in best or mean < best[v][1]:
                best[v] = (lr, mean)
    (ls, s), (lf, f) = best["standard"], best["fully_scaled"]
    text = " ".join(m.value for m in at.markdown)
    cfg = d["sizes"]["config"]
    assert (f"fully scaled attention (rate {lf:g}) ended at a mean final training loss of "
            f"{f:.3f} nats per character against {s:.3f} for standard attention (rate {ls:g})") in text
    assert f"{k} seed{'s' if k != 1 else ''} at the best rates" in text
    assert (f"{cfg['n_layer']} layers and width {cfg['d_model']}, {cfg['steps']} steps on "
            f"{d['corpus']['name']}, {len(d['sizes']['lrs'])} learning rates") in text
    assert "about 1.4 with fully scaled attention against 1.2 with standard attention" in text
    links = [(p.proto.page, p.proto.label) for p in at.get("page_link")]
    assert any(page.endswith("Training_lab") or "6_Training_lab" in page for page, _ in links), links
