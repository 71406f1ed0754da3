"""AppTest: real text in front (issue 11). Clicking a head thumbnail, a layer x head tile or a row of
the weight map selects it; the query token's strips, q, k, v and output equal attncore's numbers.

AppTest has no interaction for Plotly selections, so :func:`click` sends the widget state the
browser sends (Streamlit's selection JSON with the clicked point's ``customdata``) for the chart's
element id: the page's ``on_select`` callback then runs exactly as after a real click
(``tests/test_browser_realtext_select.py`` clicks in Chromium). AppTest reruns the whole page on every
interaction; :func:`fragment_click` sends the click as the browser does for a chart drawn inside an
``st.fragment``, whose rerun is that fragment alone.
"""

from __future__ import annotations

import functools
import html
import json
import re

import numpy as np
import pytest
import streamlit.testing.v1.local_script_runner as local_script_runner
import torch
from streamlit.proto.WidgetStates_pb2 import WidgetStates
from streamlit.runtime.scriptrunner_utils.script_requests import RerunData
from streamlit.testing.v1 import AppTest

import ui.page
import ui.realtext
from attncore.models import LoadedModel, load_model, run_text
from attncore.qkv import capture, capture_char, top_keys
from attncore.training import known_text, load_shipped_model, text_attention
from attncore.training.inspect import MAX_VIEW_CHARS
from tests.chart_data import decode, figure, no_errors, run_app, set_widget, trace
from ui.maps import downsample
from ui.realtext import DEFAULT_TEXT, TOP_KEYS
from ui.views import heatmaps as hm_views
from ui.views import realtext as rt_views
from ui.views import sinks as snk_views

pytestmark = pytest.mark.usefixtures("one_torch_thread")

HEATMAPS = "pages/1_Heatmaps.py"
SINKS = "pages/4_Attention_sinks.py"
INJECTION = "<img src=x onerror=alert(1)> [a](http://x) **bold** $x$"


@pytest.fixture(scope="module")
def lm() -> LoadedModel:
    return load_model()


def chart(at: AppTest, key: str):
    found = [e for e in at.get("plotly_chart") if getattr(e, "key", None) == key]
    assert len(found) == 1, [getattr(e, "key", None) for e in at.get("plotly_chart")]
    return found[0]


def click(at: AppTest, key: str, customdata: list) -> AppTest:
    """What the browser sends after a click on a pick point of the chart ``key``."""
    ws: WidgetStates = at._tree.get_widget_states()
    w = ws.widgets.add()
    w.id = chart(at, key).proto.id
    w.string_value = json.dumps({"selection": {
        "points": [{"curve_number": 1, "point_number": 0, "point_index": 0, "customdata": customdata}],
        "point_indices": [0], "box": [], "lasso": []}})
    return at._run(ws)


def fragment_of(at: AppTest, key: str) -> str | None:
    """The id of the ``st.fragment`` the chart ``key`` was drawn in (None: drawn by the page itself)."""
    meta = at._session_state._state.get_widget_metadata(chart(at, key).proto.id)
    return None if meta is None else meta.fragment_id


def fragment_click(at: AppTest, key: str, customdata: list) -> AppTest:
    """:func:`click` on a chart drawn inside an ``st.fragment``, sent as the browser sends it: the rerun
    request carries the chart's fragment id (``ClientState.fragment_id``), so Streamlit reruns that
    fragment alone. Afterwards ``at`` holds what the fragment drew (the rest of the page was not sent)."""
    fid = fragment_of(at, key)
    assert fid, f"{key} is not drawn inside a fragment"
    local_script_runner.RerunData = functools.partial(RerunData, fragment_id_queue=[fid])  # type: ignore[misc]
    try:
        return click(at, key, customdata)
    finally:
        local_script_runner.RerunData = RerunData  # type: ignore[misc]


def count_runs(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """How often the page frame (``run_page``: a page run, not a fragment's) and the model load run from now
    on, counted in the returned dict."""
    runs = {"page": 0, "model": 0}

    def counted(name, original):
        def call(*args, **kwargs):
            runs[name] += 1
            return original(*args, **kwargs)
        return call

    monkeypatch.setattr(ui.page, "run_page", counted("page", ui.page.run_page))
    monkeypatch.setattr(ui.realtext, "load_model", counted("model", ui.realtext.load_model))
    return runs


def strips(at: AppTest) -> list[str]:
    return [e.proto.body for e in at.get("html") if "attn-strip" in e.proto.body]


def strip_weights(body: str) -> np.ndarray:
    return np.array([float(x) for x in re.findall(r'data-w="([^"]+)"', body)])


# ---------------------------------------------------------------------------- the mapping (no app)


def test_picked_reads_customdata_and_skips_other_points() -> None:
    assert rt_views.picked([], ("tok",)) is None
    assert rt_views.picked([{"curve_number": 1, "x": 2}], ("tok",)) is None  # a bar: no customdata
    assert rt_views.picked([{"customdata": [3, 5, 0.25]}], ("tok",)) == {"tok": 3}
    assert rt_views.picked([{"customdata": 4}], ("tok",)) == {"tok": 4}
    assert rt_views.picked([{"customdata": {"0": 2, "1": 7}}], ("layer", "head")) == {"layer": 2, "head": 7}
    assert rt_views.picked([{"customdata": [1]}, {"customdata": [2, 9]}], ("layer", "head")) == \
        {"layer": 2, "head": 9}


def test_thumbnail_pick_points_lie_on_their_own_thumbnail() -> None:
    rng = np.random.default_rng(0)
    maps = [rng.random((30, 30)) for _ in range(12)]
    fig = hm_views.layer_heads_figure(maps, layer=4, selected=7)
    picks = [t for t in fig.data if t.name == rt_views.PICK]
    heats = [t for t in fig.data if t.type == "heatmap"]
    assert len(picks) == len(heats) == 12
    for h, (pk, hm) in enumerate(zip(picks, heats, strict=True)):
        assert (pk.xaxis, pk.yaxis) == (hm.xaxis, hm.yaxis)
        assert {tuple(c) for c in pk.customdata} == {(4, h)}
        assert min(pk.x) >= 0 and max(pk.x) <= 29 and min(pk.y) >= 0 and max(pk.y) <= 29
    outline = fig.layout.shapes[0]
    assert (outline.xref, outline.yref) == (heats[7].xaxis, heats[7].yaxis)
    assert fig.layout.meta == {"view": "rt-heads", "layer": 4, "selected": 7}


def test_weight_map_pick_points_cover_every_row_with_the_weights() -> None:
    L = 9
    w = np.random.default_rng(1).dirichlet(np.ones(L), size=L)
    labels = [f"t{i}" for i in range(L)]
    fig = hm_views.token_head_figure(w, np.ones(L), w.max(1), np.full(L, L), labels, "v", selected=3)
    pk = [t for t in fig.data if t.name == rt_views.PICK][0]
    cd = np.array(pk.customdata)
    assert cd.shape == (L * L, 3)
    np.testing.assert_allclose(cd[:, 2], w[cd[:, 0].astype(int), cd[:, 1].astype(int)])
    assert list(pk.y[:L]) == ["0:t0"] * L and pk.x[L + 2] == "2:t2"  # the heatmap's own category labels
    # sent compactly: indices as integers, the weight as the shortest decimal of its float32 (the map's cells)
    sent = json.loads(fig.to_json())["data"][-1]["customdata"]
    assert all(type(i) is int and type(j) is int for i, j, _ in sent)
    assert [np.float32(x) for _, _, x in sent] == [np.float32(w[i, j]) for i, j, _ in sent]
    assert max(len(json.dumps(x)) for _, _, x in sent) <= 15  # "0.024060946", "1.2345678e-05"
    assert fig.layout.shapes[0].y0 == 2.5 and fig.layout.meta["selected"] == 3


def test_long_texts_keep_every_row_clickable_within_the_point_cap() -> None:
    L = 400
    w = np.full((L, L), 1 / L)
    fig = hm_views.token_head_figure(w, np.ones(L), w.max(1), np.full(L, L), [f"t{i}" for i in range(L)], "v")
    cd = np.array([t for t in fig.data if t.name == rt_views.PICK][0].customdata)
    assert len(cd) <= rt_views.MAX_PICK_POINTS
    assert set(cd[:, 0].astype(int)) == set(range(L))


def test_sinks_grid_pick_points_name_their_tile() -> None:
    a = np.random.default_rng(2).random((3, 4, 12, 12)).astype(np.float32)
    fig = snk_views.layer_head_grid(a, [f"t{i}" for i in range(12)], selected=(1, 2))
    pk = [t for t in fig.data if t.name == rt_views.PICK][0]
    for x, y, (layer, head) in zip(pk.x, pk.y, pk.customdata, strict=True):
        assert x.startswith(f"head {head} ·") and y.startswith(f"layer {layer} ·")
    assert {tuple(c) for c in pk.customdata} == {(l, h) for l in range(3) for h in range(4)}


def test_token_strip_escapes_user_text() -> None:
    tokens = ["<img src=x onerror=alert(1)>", "[a](http://x)", '"quoted"']
    body = rt_views.token_strip_html(tokens, np.array([0.5, 0.25, 0.25]), 1, label="from")
    assert "<img" not in body and "&lt;img src=x onerror=alert(1)&gt;" in body
    assert "[a](http://x)" in body and "&quot;quoted&quot;" in body
    np.testing.assert_allclose(strip_weights(body), [0.5, 0.25, 0.25])
    assert 'title="0: &lt;img src=x onerror=alert(1)&gt;, weight 0.5000"' in body
    np.testing.assert_allclose(rt_views.strip_alpha(np.array([0.5, 0.25, 0.0])), [1.0, 0.5, 0.0])


# ---------------------------------------------------------------------------- Heatmaps: clicks and token


def check_token(at: AppTest, lm: LoadedModel, prefix: str, key: str) -> None:
    """Strips, q/k/v/output and top keys of the page equal attncore's numbers for the chosen token."""
    no_errors(at)
    s = at.session_state
    text = s.get(f"{prefix}text", DEFAULT_TEXT)
    layer, head, i = int(s[f"{prefix}layer"]), int(s[f"{prefix}head"]), int(s[f"{prefix}tok"])
    att = run_text(lm, text)
    hv = capture(lm, text)
    w = att.attentions[layer, head]
    frm, to = strips(at)
    np.testing.assert_allclose(strip_weights(frm), w[i].numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(strip_weights(to), w[:, i].numpy(), rtol=1e-5, atol=1e-6)
    assert f'data-j="{i}"' in frm and "outline:2px" in frm.split(f'data-j="{i}"')[1].split("</span>")[0]
    for tok in att.tokens:
        assert html.escape(tok) in frm
    qkv = figure(at, f"{key}-qkv")
    z = decode(trace(qkv)["z"])
    expect = np.stack([t[layer, head, i].numpy() for t in (hv.q, hv.k, hv.v, hv.output)])
    np.testing.assert_allclose(z, expect, rtol=1e-5, atol=1e-6)
    keys = top_keys(w[i], min(TOP_KEYS, len(att.tokens)))
    bars = figure(at, f"{key}-topkeys")
    assert bars["layout"]["meta"]["keys"] == [j for j, _ in keys]
    np.testing.assert_allclose(decode(trace(bars)["x"]), [x for _, x in keys], rtol=1e-6)
    # the sentence under the chart, number by number
    cap = next(c.value for c in at.caption if c.value.startswith("q, k and v are this head's"))
    w_err = float((hv.weights(layer)[head, i] - w[i].double()).abs().max())
    o_err = float((hv.mix(w[None, i], layer)[head, 0] - hv.output[layer, head, i].double()).abs().max())
    assert f"within {w_err:.1e}" in cap and f"within {o_err:.1e}" in cap
    assert w_err < 1e-5 and o_err < 1e-5
    assert f"hold {sum(x for _, x in keys):.1%} of the row's weight" in cap
    assert f"‖o‖ = {float(hv.output[layer, head, i].norm()):.3f}" in cap
    frm_cap = next(c.value for c in at.caption if c.value.startswith("**From"))
    top = int(w[i].argmax())
    assert f"the row sums to {float(w[i].sum()):.3f}, the most, {float(w[i, top]):.3f}, on {top}:" in frm_cap
    to_cap = next(c.value for c in at.caption if c.value.startswith("**To"))
    assert f"mean {float(w[:, i].mean()):.3f} over the {len(att.tokens)} queries" in to_cap


def test_synthetic_heads_grid_click_selects_that_head() -> None:
    """Heatmaps, synthetic source: a click on thumbnail 2 of the "All heads" grid shows head 2 above."""
    at = run_app(HEATMAPS)
    at.session_state["hm_heads_open"] = True  # the "All heads" expander: computed and sent when opened
    at.run()
    assert at.session_state["head"] == 0
    assert figure(at, "heads")["layout"]["meta"]["selected"] == 0
    before = decode(trace(figure(at, "stages"), 3)["z"])
    click(at, "chart_heads", [2])
    assert at.session_state["head"] == 2 and at.query_params["head"] == "2"
    assert at.slider(key="head").value == 2  # the slider follows the click
    assert figure(at, "heads")["layout"]["meta"]["selected"] == 2
    grid = figure(at, "heads")
    heat = [tr for tr in grid["data"] if tr["type"] == "heatmap"]
    # the big weight map now shows the thumbnail that was clicked
    np.testing.assert_allclose(decode(trace(figure(at, "stages"), 3)["z"]), decode(heat[2]["z"]), rtol=1e-5,
                               atol=1e-7)
    assert not np.allclose(decode(trace(figure(at, "stages"), 3)["z"]), before)
    click(at, "chart_heads", [99])  # out of range (a stale click): clamped to the last head
    assert at.session_state["head"] == 3


def test_heatmaps_clicks_select_head_and_token(lm: LoadedModel) -> None:
    at = run_app(HEATMAPS, rt_src="real")
    check_token(at, lm, "rt_", "rt-token")
    assert at.session_state["rt_tok"] == 1  # the first word after [CLS]
    att = run_text(lm, DEFAULT_TEXT)
    # a click on thumbnail 5 of layer 0
    click(at, "chart_rt_heads", [0, 5])
    assert (at.session_state["rt_layer"], at.session_state["rt_head"]) == (0, 5)
    assert at.query_params["rt_head"] == "5"
    assert at.slider(key="rt_head").value == 5  # the slider follows the click
    np.testing.assert_allclose(decode(trace(figure(at, "rt-weights"))["z"]), att.attentions[0, 5].numpy(),
                               rtol=1e-5, atol=1e-7)
    assert figure(at, "rt-heads")["layout"]["meta"]["selected"] == 5
    check_token(at, lm, "rt_", "rt-token")
    # a click on row 7 of the weight map (query 7, key 2)
    click(at, "chart_rt_weights", [7, 2, 0.1])
    assert at.session_state["rt_tok"] == 7 and at.query_params["rt_tok"] == "7"
    assert at.selectbox(key="rt_tok").value == 7
    assert figure(at, "rt-weights")["layout"]["meta"]["selected"] == 7
    check_token(at, lm, "rt_", "rt-token")
    # the layer slider still works, and the thumbnails follow it
    set_widget(at, "slider", "rt_layer", 3)
    assert figure(at, "rt-heads")["layout"]["meta"] == {"view": "rt-heads", "layer": 3, "selected": 5}
    check_token(at, lm, "rt_", "rt-token")


def test_heatmaps_clicks_rerun_only_the_selection_fragment(lm: LoadedModel,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 34: a click on a head tile reruns the fragment that draws what the head drives (inside the one
    that draws what the layer drives, with the overview), and a click on a row of the map only the fragment
    inside that which draws the map and the token's views, never the page: neither the page frame
    (``run_page``) nor the model load runs again, the map, the token views and the sidebar controls follow
    the click, presenter mode stays on, and the URL says what was clicked, so a copied link reproduces the
    view."""
    runs = count_runs(monkeypatch)
    at = run_app(HEATMAPS, rt_src="real", present="1")
    no_errors(at)
    assert runs == {"page": 1, "model": 1}
    head_fragment = fragment_of(at, "chart_rt_heads")
    token_fragment = fragment_of(at, "chart_rt_weights")
    layer_fragment = fragment_of(at, "chart_rt_overview")
    assert head_fragment and layer_fragment and head_fragment != layer_fragment
    assert token_fragment and token_fragment not in (head_fragment, layer_fragment)
    att = run_text(lm, DEFAULT_TEXT)
    # a click on thumbnail 5 of layer 0
    fragment_click(at, "chart_rt_heads", [0, 5])
    no_errors(at)
    assert runs == {"page": 1, "model": 1}  # the page around the fragment did not run
    assert not at.title and not at.text_area  # ... and drew nothing: only the fragment was sent
    assert (at.session_state["rt_layer"], at.session_state["rt_head"]) == (0, 5)
    assert at.query_params["rt_head"] == "5" and at.query_params["rt_src"] == "real"
    assert at.query_params["present"] == "1"
    assert at.slider(key="rt_head").value == 5  # the sidebar slider, drawn by the fragment, follows
    weights = figure(at, "rt-weights")
    np.testing.assert_allclose(decode(trace(weights)["z"]), att.attentions[0, 5].numpy(), rtol=1e-5, atol=1e-7)
    assert weights["layout"]["meta"]["present"] is True  # restyled for presenter mode in a fragment run
    assert figure(at, "rt-heads")["layout"]["meta"]["selected"] == 5
    assert [c.key for c in at.get("plotly_chart")] == ["chart_rt_weights", "chart_rt-token_qkv",
                                                       "chart_rt-token_topkeys", "chart_rt_heads"]
    assert not [s for s in at.slider if s.key == "rt_layer"]  # the layer's part was not redrawn
    assert any(e.value.startswith("q, k and v are this head's") for e in at.caption)
    # a click on row 7 of the map: the map and the token's views rerun, the head grids do not
    fragment_click(at, "chart_rt_weights", [7, 2, 0.1])
    no_errors(at)
    assert runs == {"page": 1, "model": 1}
    assert [c.key for c in at.get("plotly_chart")] == ["chart_rt_weights", "chart_rt-token_qkv",
                                                       "chart_rt-token_topkeys"]
    assert not at.slider and not at.metric  # the Layer and Head sliders and the metrics were not redrawn
    assert at.session_state["rt_tok"] == 7 and at.selectbox(key="rt_tok").value == 7
    assert figure(at, "rt-weights")["layout"]["meta"]["selected"] == 7
    query = dict(at.query_params)
    assert (query["rt_head"], query["rt_tok"], query["rt_src"], query["present"]) == ("5", "7", "real", "1")
    check_token(at, lm, "rt_", "rt-token")
    # the copied link opens the same view
    again = run_app(HEATMAPS, **query)
    no_errors(again)
    np.testing.assert_allclose(decode(trace(figure(again, "rt-weights"))["z"]), att.attentions[0, 5].numpy(),
                               rtol=1e-5, atol=1e-7)
    assert figure(again, "rt-weights")["layout"]["meta"]["selected"] == 7
    check_token(again, lm, "rt_", "rt-token")


HEAD_CLICK_CHARTS = ["chart_rt_weights", "chart_rt-token_qkv", "chart_rt-token_topkeys", "chart_rt_heads"]


@pytest.mark.parametrize("model", ["minilm", "smollm2"])
def test_a_head_click_sends_only_what_the_head_drives(model: str) -> None:
    """Issue 34 item 5: a click on a tile of the head grid redraws the map, the token's two charts and the
    grid itself (MiniLM ~101 KB of figure JSON, SmolLM2 ~83 KB with its unchanged next-token bars; before,
    the selection's whole fragment: 5-6 charts, 189 / 360 KB), and neither the layers x heads overview nor the sentence about every head, which
    depend on the text and the layer only; the overview keeps outlining the layer. A tile of the overview
    in another layer redraws both, with the new layer outlined."""
    query = {"rt_src": "real"} if model == "minilm" else {"rt_src": "real", "rt_model": "smollm2"}
    at = run_app(HEATMAPS, timeout=900, **query)
    no_errors(at)
    ov = figure(at, "rt-overview")
    assert ov["layout"]["meta"]["layer"] == 0
    (box,) = ov["layout"]["shapes"][-1:]
    rows, cols, side = ov["layout"]["meta"]["rows"], ov["layout"]["meta"]["cols"], ov["layout"]["meta"]["side"]
    assert (box["x0"], box["x1"], box["y0"], box["y1"]) == (cols[0] - 0.5, cols[-1] + side - 0.5, rows[0] - 0.5,
                                                            rows[0] + side - 0.5)
    for head in (3, 5):
        fragment_click(at, "chart_rt_heads", [0, head])
        no_errors(at)
        assert at.session_state["rt_head"] == head and at.query_params["rt_head"] == str(head)
        charts = [c.key for c in at.get("plotly_chart")]
        decoder_next = ["chart_rt-dec_next"] if model == "smollm2" else []  # drawn above the grid, 4 KB
        assert charts == HEAD_CLICK_CHARTS[:3] + decoder_next + HEAD_CLICK_CHARTS[3:], charts
        sent = sum(len(c.proto.spec) for c in at.get("plotly_chart"))
        assert sent < 120_000, sent  # the overview alone is 86 KB (MiniLM), 282 KB (SmolLM2)
        assert not any(c.value.startswith("On this text,") for c in at.caption)  # the sentence stays
        assert figure(at, "rt-heads")["layout"]["meta"] == {"view": "rt-heads", "layer": 0, "selected": head}
    # the overview, another layer: the layer's part reruns, the head grid shows that layer (AppTest keeps what
    # the last run drew, so a page run first draws the overview again)
    at.run()
    fragment_click(at, "chart_rt_overview", [2, 1])
    no_errors(at)
    assert (at.session_state["rt_layer"], at.session_state["rt_head"]) == (2, 1)
    assert figure(at, "rt-overview")["layout"]["meta"]["layer"] == 2
    assert figure(at, "rt-heads")["layout"]["meta"] == {"view": "rt-heads", "layer": 2, "selected": 1}
    assert at.slider(key="rt_layer").value == 2 and at.slider(key="rt_head").value == 1


def test_heatmaps_fragment_rerun_keeps_the_error_boundary(monkeypatch: pytest.MonkeyPatch) -> None:
    """An error while the selection fragment reruns alone is a plain message, as in a page run (never a
    traceback), and the click still reaches the URL."""
    at = run_app(HEATMAPS, rt_src="real")
    no_errors(at)

    def broken(*_args, **_kwargs):
        raise RuntimeError("token views broke")

    monkeypatch.setattr(ui.realtext, "token_section", broken)
    fragment_click(at, "chart_rt_heads", [0, 3])
    assert not at.exception, [e.value for e in at.exception]
    assert [e.value for e in at.error] == [
        "Something went wrong while computing this view (RuntimeError: token views broke). Try other "
        "settings; the message has been logged."]
    assert at.query_params["rt_head"] == "3"


def test_heatmaps_token_param_from_the_sidebar_and_the_url(lm: LoadedModel) -> None:
    at = run_app(HEATMAPS, rt_src="real", rt_layer="2", rt_head="4", rt_tok="6")
    check_token(at, lm, "rt_", "rt-token")
    set_widget(at, "selectbox", "rt_tok", 0)
    assert at.query_params["rt_tok"] == "0"
    check_token(at, lm, "rt_", "rt-token")
    # a token index past the text is clamped to its last token
    at = run_app(HEATMAPS, rt_src="real", rt_tok="900")
    no_errors(at)
    assert at.session_state["rt_tok"] == len(run_text(lm, DEFAULT_TEXT).tokens) - 1
    check_token(at, lm, "rt_", "rt-token")


def test_indices_past_the_model_or_text_get_a_note(lm: LoadedModel) -> None:
    # within the URL's own bounds (layer/head <= 127, token <= 1023) but past this model and text
    at = run_app(SINKS, snk_view="model", snk_layer="99", snk_head="40", snk_tok="600")
    no_errors(at)
    L = len(run_text(lm, DEFAULT_TEXT).tokens)
    assert (at.session_state["snk_layer"], at.session_state["snk_head"], at.session_state["snk_tok"]) == \
        (lm.layers - 1, lm.heads - 1, L - 1)
    notes = [w.value for w in at.warning]
    assert f"snk_layer=99 is beyond {lm.name}'s {lm.layers} layers (0–{lm.layers - 1}); using {lm.layers - 1}." \
        in notes
    assert f"snk_head=40 is beyond its {lm.heads} heads per layer (0–{lm.heads - 1}); using {lm.heads - 1}." in notes
    assert f"snk_tok=600 is beyond this text's {L} tokens (0–{L - 1}); using {L - 1}." in notes
    assert at.query_params["snk_layer"] == str(lm.layers - 1) and at.query_params["snk_tok"] == str(L - 1)
    at.run()  # the clamped values stand: no note the second time
    assert not [w.value for w in at.warning if "is beyond" in w.value]
    # in range: no note
    at = run_app(SINKS, snk_view="model", snk_layer="2", snk_head="3", snk_tok="4")
    assert not [w.value for w in at.warning if "is beyond" in w.value]


def test_user_text_stays_literal_in_the_token_views(lm: LoadedModel) -> None:
    at = run_app(HEATMAPS, rt_src="real")
    set_widget(at, "text_area", "rt_text", INJECTION)
    check_token(at, lm, "rt_", "rt-token")
    for body in strips(at):
        assert "<img" not in body and "<a " not in body and "<strong" not in body
    att = run_text(lm, INJECTION)
    for i in range(len(att.tokens)):  # every token's caption renders as its literal characters
        set_widget(at, "selectbox", "rt_tok", i)
        frm_cap = next(c.value for c in at.caption if c.value.startswith("**From"))
        assert "](" not in frm_cap.replace("\\]\\(", "") and "<img" not in frm_cap
    no_errors(at)


def test_heatmaps_causal_model_token_views() -> None:
    at = run_app(HEATMAPS, rt_src="real", rt_model="causal", rt_text="To be, or not to be", rt_tok="5")
    no_errors(at)
    model = load_shipped_model("cpu")
    text = known_text(model, "To be, or not to be", MAX_VIEW_CHARS).text
    hv = capture_char(model, text)
    att = text_attention(model, text)
    layer, head = int(at.session_state["rt_layer"]), int(at.session_state["rt_head"])
    z = decode(trace(figure(at, "rt-token-qkv"))["z"])
    expect = np.stack([t[layer, head, 5].numpy() for t in (hv.q, hv.k, hv.v, hv.output)])
    np.testing.assert_allclose(z, expect, rtol=1e-5, atol=1e-6)
    frm, to = strips(at)
    np.testing.assert_allclose(strip_weights(frm), att.attentions[layer, head, 5].numpy(), atol=1e-6)
    assert frm.count("line-through") == len(text) - 6  # keys after token 5 are masked for it
    assert to.count("line-through") == 5  # queries before token 5 cannot see it
    col = att.attentions[layer, head, 5:, 5]  # the queries that see token 5
    to_cap = next(c.value for c in at.caption if c.value.startswith("**To"))
    assert f"mean {float(col.mean()):.3f} over the {len(text) - 5} queries that see it" in to_cap


# ---------------------------------------------------------------------------- Attention sinks


def test_sinks_grid_click_selects_layer_and_head(lm: LoadedModel) -> None:
    at = run_app(SINKS, snk_view="model")
    no_errors(at)
    click(at, "chart_snk_grid", [4, 9])
    assert (at.session_state["snk_layer"], at.session_state["snk_head"]) == (4, 9)
    assert at.query_params["snk_layer"] == "4" and at.query_params["snk_head"] == "9"
    att = run_text(lm, DEFAULT_TEXT)
    np.testing.assert_allclose(decode(trace(figure(at, "snk-head"))["z"]), att.attentions[4, 9].numpy(),
                               rtol=1e-5, atol=1e-7)
    grid = figure(at, "snk-grid")
    assert grid["layout"]["meta"]["selected"] == [4, 9]
    tr, tc = grid["layout"]["meta"]["tile_rows"], grid["layout"]["meta"]["tile_cols"]
    expect, _, _ = downsample(att.attentions[4, 9].numpy(), 40)
    z = decode(trace(grid)["z"])
    np.testing.assert_allclose(z[4 * tr: 4 * tr + expect.shape[0], 9 * tc: 9 * tc + expect.shape[1]], expect,
                               rtol=1e-5, atol=1e-7)
    check_token(at, lm, "snk_", "snk-token")
    click(at, "chart_snk_head", [3, 0, 0.5])
    assert at.session_state["snk_tok"] == 3
    check_token(at, lm, "snk_", "snk-token")
    # a tile outside the model is clamped, not an error
    click(at, "chart_snk_grid", [99, 99])
    no_errors(at)
    assert (at.session_state["snk_layer"], at.session_state["snk_head"]) == (5, 11)


def test_sinks_clicks_rerun_only_the_model_fragment(lm: LoadedModel, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 34: on Attention sinks' real-model part, a click on a layer x head tile or a row of the map reruns
    the fragment below the model and text, not the page: ``run_page`` and the model load run once, the title,
    the part picker and the text box are not sent again, the map and the sidebar controls follow the click,
    and the URL (presenter mode included) says what was clicked."""
    runs = count_runs(monkeypatch)
    at = run_app(SINKS, snk_view="model", present="1")
    no_errors(at)
    assert runs == {"page": 1, "model": 1}
    grid_fragment = fragment_of(at, "chart_snk_grid")
    assert grid_fragment and grid_fragment == fragment_of(at, "chart_snk_head")
    att = run_text(lm, DEFAULT_TEXT)
    fragment_click(at, "chart_snk_grid", [3, 7])
    no_errors(at)
    assert runs == {"page": 1, "model": 1}
    assert not at.title and not at.text_area and not at.radio  # only the fragment was sent ...
    assert not at.metric  # ... not the metrics over every head, nor the sections under the head's part
    assert [c.key for c in at.get("plotly_chart")] == ["chart_snk_grid", "chart_snk_head", "chart_snk-token_qkv",
                                                       "chart_snk-token_topkeys"]
    assert not [s for s in at.slider if s.key == "snk_eps"]
    assert (at.session_state["snk_layer"], at.session_state["snk_head"]) == (3, 7)
    assert at.slider(key="snk_layer").value == 3 and at.slider(key="snk_head").value == 7
    assert (at.query_params["snk_layer"], at.query_params["snk_head"]) == ("3", "7")
    assert (at.query_params["snk_view"], at.query_params["present"]) == ("model", "1")
    head = figure(at, "snk-head")
    np.testing.assert_allclose(decode(trace(head)["z"]), att.attentions[3, 7].numpy(), rtol=1e-5, atol=1e-7)
    assert head["layout"]["meta"]["present"] is True
    assert figure(at, "snk-grid")["layout"]["meta"]["selected"] == [3, 7]
    fragment_click(at, "chart_snk_head", [5, 0, 0.5])
    no_errors(at)
    assert runs == {"page": 1, "model": 1}
    assert at.session_state["snk_tok"] == 5 and at.query_params["snk_tok"] == "5"
    check_token(at, lm, "snk_", "snk-token")


def test_a_model_without_query_key_value_layers_says_so(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    from attncore.models import MODEL_DIRS_ENV
    from tests.test_models import make_tiny_gpt2

    make_tiny_gpt2(tmp_path / "tiny-gpt2")
    monkeypatch.setenv(MODEL_DIRS_ENV, str(tmp_path))
    at = run_app(SINKS, snk_view="model", snk_model="local", snk_path="tiny-gpt2")
    no_errors(at)
    assert any("q, k and v are not shown for this model" in i.value for i in at.info)
    assert len(strips(at)) == 2  # the strips need only the attention maps
    assert torch.is_tensor(run_text(load_model(str(tmp_path / "tiny-gpt2")), DEFAULT_TEXT).attentions)


def test_heatmaps_real_text_heads_sentence_matches_the_maps(lm: LoadedModel) -> None:
    """The sentence about every head (entropy below 3/4 log n, over half the weight on the first token)
    counts the heads from the model's own maps, recomputed here from scratch."""
    at = run_app(HEATMAPS, rt_src="real")
    no_errors(at)
    A = run_text(lm, DEFAULT_TEXT).attentions.double()  # (N, H, L, L), an encoder: every key visible
    L = A.shape[-1]
    ent = -(A * torch.where(A > 0, A.log(), torch.zeros_like(A))).sum(-1).mean(-1)  # (N, H) mean row entropy
    threshold = 0.75 * float(np.log(L))
    low, first = int((ent < threshold).sum()), int((A[..., 0].mean(-1) > 0.5).sum())
    assert 0 < low < A.shape[0] * A.shape[1]  # the sentence has something to say either way
    want = (f"On this text, {low} of the {A.shape[0] * A.shape[1]} heads of all-MiniLM-L6-v2 have a mean "
            f"entropy below three quarters of log n ({threshold:.2f} nats), and {first} put more than half of "
            "their weight on the first token, [CLS]")
    captions = " ".join(c.value for c in at.caption).replace("\\", "")
    assert want in captions, captions
    # the causal model: its own maps, its first character
    at = run_app(HEATMAPS, rt_src="real", rt_model="causal")
    no_errors(at)
    text = " ".join(c.value for c in at.caption).replace("\\", "")
    assert "heads of character transformer have a mean entropy" in text, text
