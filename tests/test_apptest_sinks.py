"""AppTest: the Attention sinks page (synthetic lab and real model) and the Heatmaps page's real-text source.

Every control is changed and every chart's data is compared with what attncore computes.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from attncore import theory as T
from attncore.models import MODEL_DIRS_ENV, LoadedModel, load_model, run_text
from attncore.sinks import (
    CONTENT_RANGE,
    STRENGTH_RANGE,
    ZOO,
    SinkSpec,
    content_sweep,
    normaliser_zoo,
    sink_report,
    strength_sweep,
    zoo_theory,
)
from tests.chart_data import (
    decode,
    figure,
    figures,
    no_errors,
    page_device,
    run_app,
    trace,
    traces_named,
)
from tests.chart_data import set_widget as _set
from tests.chart_data import walk as _walk
from tests.streamlit_markdown import visible
from tests.test_apptest_home_heatmaps import HEADS_OPEN as HEATMAPS_HEADS_OPEN
from tests.test_apptest_home_heatmaps import check_charts as check_heatmaps
from tests.test_models import make_tiny_gpt2
from ui.cached import SWEEP_POINTS
from ui.maps import downsample
from ui.realtext import DEFAULT_TEXT

PAGE = "pages/4_Attention_sinks.py"
HEATMAPS = "pages/1_Heatmaps.py"


@pytest.fixture(scope="module")
def lm() -> LoadedModel:
    return load_model()


def walk(at: AppTest, changes, check: Callable[[AppTest], None]) -> None:
    """tests.chart_data.walk; the sink toggle's default (on) is left out of the URL."""
    _walk(at, changes, check, defaults=[("snk_sink", True)])


def y_of(fig: dict, name: str) -> np.ndarray:
    found = traces_named(fig, name)
    assert len(found) == 1, [t.get("name") for t in fig["data"]]
    return decode(found[0]["y"])


# ---------------------------------------------------------------------------- synthetic lab


def lab_spec(at: AppTest) -> SinkSpec:
    """The spec the controls describe. Hidden sliders (sink off) keep their value, which the URL holds."""
    s = at.session_state

    def get(k: str, d: float) -> float:
        if k in s:
            return s[k]
        return float(at.query_params[k]) if k in at.query_params else d

    d = SinkSpec()
    return SinkSpec(n=s["snk_n"], sink=s["snk_sink"], strength=get("snk_s", d.strength),
                    sink_value=get("snk_v", d.sink_value), content=s["snk_c"], spread=s["snk_sd"],
                    sink_logit=s["snk_b"], gate_bias=s["snk_gb"], gate=s["snk_gate"], seed=s["seed"],
                    dtype=s["dtype"])


NOTHING_OPEN, ZOO_OPEN = "snk_nothing_open", "snk_zoo_open"  # the lab's two expanders drawn when opened
MORE_OPEN = "snk_more_open"  # "Sinks and their fixes, in full": its text and formulas are sent when opened


def run_lab(**query: str) -> AppTest:
    """The synthetic lab with sections 2 and 3 and the full text opened (they are computed and sent only when
    open)."""
    at = run_app(PAGE, **query)
    views = {(f["layout"].get("meta") or {}).get("view") for f in figures(at)}
    assert not views & {"snk-nothing-mass", "snk-nothing-rms", "snk-zoo"}, views  # closed: not sent
    assert not any("\\text{softmax: }" in s.value for s in at.latex)
    at.session_state[NOTHING_OPEN] = True
    at.session_state[ZOO_OPEN] = True
    at.session_state[MORE_OPEN] = True
    return at.run()


def check_lab(at: AppTest) -> None:
    """Every chart of the synthetic lab equals attncore's numbers for the current controls."""
    no_errors(at)
    spec = lab_spec(at)
    dev = page_device()  # attncore on the page's own device
    zoo, th = normaliser_zoo(spec, dev), zoo_theory(spec)
    rtol = 1e-2 if spec.dtype == "bfloat16" else 1e-5
    w = zoo["softmax"].weights.float().cpu().numpy()
    log_color = at.session_state["snk_log"]
    expect, _, _ = downsample(np.log10(np.maximum(w, 1e-4)) if log_color else w, 256)
    np.testing.assert_allclose(decode(trace(figure(at, "snk-map"))["z"]), expect, rtol=rtol, atol=1e-5)
    # Sweeps: measured (trace 0) and theory (trace 1).
    xs = np.linspace(*STRENGTH_RANGE, SWEEP_POINTS)
    sw = strength_sweep(spec, xs, dev)
    views = {(f["layout"].get("meta") or {}).get("view") for f in figures(at)}
    assert ("snk-strength" in views) == spec.sink  # issue 11: no empty "weight on the sink" chart
    if spec.sink:
        fig = figure(at, "snk-strength")
        np.testing.assert_allclose(decode(trace(fig, 0)["y"]), sw.mean("sink_weight"), rtol=rtol, atol=1e-6)
        np.testing.assert_allclose(decode(trace(fig, 1)["y"]),
                                   T.sink_weight_theory(xs, spec.n, spec.content, spec.spread), rtol=1e-5)
    fig = figure(at, "snk-rms")
    np.testing.assert_allclose(decode(trace(fig, 0)["y"]), sw.mean("output_rms"), rtol=rtol, atol=1e-7)
    np.testing.assert_allclose(
        decode(trace(fig, 1)["y"]),
        T.softmax_output_rms_theory(spec.n, spec.content, spec.spread, strength=xs, sink_value=spec.sink_value),
        rtol=1e-5)
    cs = np.linspace(*CONTENT_RANGE, SWEEP_POINTS)
    cw = content_sweep(spec, cs, dev)
    mass, rms = figure(at, "snk-nothing-mass"), figure(at, "snk-nothing-rms")
    labels = {"softmax": "softmax", "softmax1": "softmax1", "sink_logit": "sink logit b",
              "sigmoid": "sigmoid −log n", "relu": "ReLU ÷ n", "gated": "gated softmax"}
    for name in ZOO:
        np.testing.assert_allclose(y_of(rms, labels[name]), cw.mean(f"rms_{name}"), rtol=rtol, atol=1e-7)
        if name != "gated":
            np.testing.assert_allclose(y_of(mass, labels[name]), cw.mean(f"mass_{name}"), rtol=rtol, atol=1e-7)
    np.testing.assert_allclose(y_of(mass, "softmax1 theory"),
                               T.real_mass_theory(spec.n, cs, spec.spread, extra_logit=0.0), rtol=1e-5)
    np.testing.assert_allclose(y_of(mass, "sink logit b theory"),
                               T.real_mass_theory(spec.n, cs, spec.spread, extra_logit=spec.sink_logit), rtol=1e-5)
    np.testing.assert_allclose(y_of(mass, "sigmoid −log n theory"),
                               T.sigmoid_mass_theory(spec.n, cs, spec.spread), rtol=1e-5)
    np.testing.assert_allclose(y_of(mass, "ReLU ÷ n theory"), T.relu_mass_theory(spec.n, cs, spec.spread), rtol=1e-5)
    np.testing.assert_allclose(y_of(rms, "ReLU ÷ n theory"), T.relu_output_rms_theory(spec.n, cs, spec.spread),
                               rtol=1e-5)
    grid = figure(at, "snk-zoo")
    assert len(grid["data"]) == len(ZOO)
    for tr, name in zip(grid["data"], ZOO, strict=True):
        expect, _, _ = downsample(zoo[name].weights.float().cpu().numpy(), 96)
        np.testing.assert_allclose(decode(tr["z"]), expect, rtol=rtol, atol=1e-6)
    for field in ("row_sum", "sink_weight", "output_rms"):
        fig = figure(at, f"snk-zoo-{field}")
        np.testing.assert_allclose(decode(trace(fig, 0)["y"]),
                                   [float(getattr(zoo[n], field).mean()) for n in ZOO], rtol=rtol, atol=1e-7)
        np.testing.assert_allclose(decode(trace(fig, 1)["y"]), [getattr(th[n], field) for n in ZOO], rtol=1e-5)


def test_lab_defaults_show_a_sink() -> None:
    at = run_lab()
    check_lab(at)
    metrics = {m.label: m.value for m in at.metric}
    assert float(metrics["Weight on the sink"]) > 0.8  # s = 6 against 32 tokens of logit ~0
    assert float(metrics["Output RMS"]) < 0.2 * float(metrics["Output RMS without a sink"])
    assert any("\\text{softmax: }" in s.value for s in at.latex)
    # issue 11: a log colour scale with a bar in weights; axis labels on the five-normaliser row
    sink_map = trace(figure(at, "snk-map"))
    assert (sink_map["zmin"], sink_map["zmax"]) == (-4.0, 0.0) and sink_map["colorbar"]["ticktext"][-1] == "1"
    zoo = figure(at, "snk-zoo")["layout"]
    assert zoo["xaxis"]["title"]["text"] == "key" and zoo["yaxis"]["title"]["text"] == "query"
    assert all(zoo[k]["showticklabels"] for k in zoo if k.startswith(("xaxis", "yaxis")))
    assert at.get("download_button")
    assert "Computed by attncore" in " ".join(c.value for c in at.caption)


LAB_CHANGES = [
    ("slider", "snk_n", 48),
    ("slider", "snk_s", 9.0),
    ("slider", "snk_v", 0.5),
    ("slider", "snk_c", -3.0),
    ("slider", "snk_sd", 1.5),
    ("slider", "snk_b", -2.0),
    ("slider", "snk_gb", 0.5),
    ("radio", "snk_gate", "headwise"),
    ("toggle", "snk_sink", False),
    ("toggle", "snk_sink", True),
    ("toggle", "snk_log", False),
    ("number_input", "seed", 3),
    ("selectbox", "dtype", "float64"),
    ("selectbox", "dtype", "bfloat16"),
]


def test_lab_every_control_changes_the_charts() -> None:
    at = run_lab()
    walk(at, LAB_CHANGES, check_lab)
    # The sink's sliders kept their values while the sink was switched off.
    assert (at.session_state["snk_s"], at.session_state["snk_v"]) == (9.0, 0.5)


def test_lab_without_a_sink_and_nothing_relevant() -> None:
    at = run_lab(snk_sink="0", snk_c="-10", snk_n="256")
    check_lab(at)
    soft = figure(at, "snk-zoo-row_sum")
    sums = dict(zip(decode(trace(soft, 0)["x"]) if isinstance(trace(soft, 0)["x"], dict) else trace(soft, 0)["x"],
                    decode(trace(soft, 0)["y"]), strict=True))
    assert sums["softmax"] == pytest.approx(1.0, abs=1e-5)  # softmax must spend 1 ...
    # ... the fixes need not: R = n e^{c + 1/2} = 0.019 gives R / (1 + R) = 0.018.
    assert sums["softmax1"] < 0.05 and sums["sink logit b"] < sums["softmax1"]
    assert {m.label: m.value for m in at.metric}["Weight on the sink"] == "no sink"


def test_lab_url_values_are_clamped_with_a_message() -> None:
    query = {"snk_n": "99999", "snk_s": "nan", "snk_gate": "both", "snk_view": "bogus"}
    at = run_app(PAGE, **query)
    notes = " ".join(w.value for w in at.warning)  # said once, on the run that read the URL
    for needle in ("snk_n=99999 is above its limit 1024", "snk_s must be a finite number", "snk_gate='both'",
                   "snk_view='bogus'"):
        assert needle in notes, needle
    assert at.session_state["snk_n"] == 1024
    check_lab(run_lab(**query))


# ---------------------------------------------------------------------------- real model


def check_model(at: AppTest, lm: LoadedModel) -> None:
    """Every chart of the real-model view equals attncore's numbers for the current text and controls."""
    no_errors(at)
    s = at.session_state
    text = s.get("snk_text", DEFAULT_TEXT)
    layer, head = int(s["snk_layer"]), int(s["snk_head"])
    att = run_text(lm, text)
    rep = sink_report(att.attentions, att.categories(), eps=float(s["snk_eps"]))
    labels = att.category_labels()
    glance = figure(at, "snk-glance")
    assert all(att.categories()[key].any() for key in labels)  # these texts have every key set
    for key, name in labels.items():
        np.testing.assert_allclose(y_of(glance, f"on {name}"), rep.mass[key].double().numpy().mean(1), rtol=1e-5)
        np.testing.assert_allclose(y_of(glance, f"uniform attention ({name})"), rep.uniform[key], rtol=1e-6)
        np.testing.assert_allclose(decode(trace(figure(at, f"snk-mass-{key}"))["z"]), rep.mass[key].numpy(),
                                   rtol=1e-5, atol=1e-7)
    grid = figure(at, "snk-grid")
    z = decode(trace(grid)["z"])
    tr, tc = grid["layout"]["meta"]["tile_rows"], grid["layout"]["meta"]["tile_cols"]
    for l in range(lm.layers):
        for h in range(lm.heads):
            expect, _, _ = downsample(att.attentions[l, h].numpy(), 40)
            tile = z[l * tr: l * tr + expect.shape[0], h * tc: h * tc + expect.shape[1]]
            np.testing.assert_allclose(tile, expect, rtol=1e-5, atol=1e-7)
    shape = grid["layout"]["shapes"][0]  # the outline of the selected head
    assert shape["x0"] == head * tc - 0.5 and shape["y0"] == layer * tr - 0.5
    head_fig = figure(at, "snk-head")
    np.testing.assert_allclose(decode(trace(head_fig, 0)["z"]), att.attentions[layer, head].numpy(),
                               rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(decode(figure(at, "snk-metric")["data"][0]["z"]), rep.share.numpy(), rtol=1e-6)
    # issue 11: only informative cell text (no rows of "0.00")
    metric = figure(at, "snk-metric")["data"][0]
    if "text" in metric:
        share = rep.share.numpy()
        text = np.array(metric["text"])
        assert ((text == "") == (np.round(share, 2) == 0)).all()
        assert "0.00" not in text


def test_model_view_defaults(lm: LoadedModel) -> None:
    at = run_app(PAGE, snk_view="model")
    check_model(at, lm)
    metrics = {visible(m.label): (m.value, m.delta) for m in at.metric}  # labels as shown (ui.text.plain)
    value, delta = metrics["Mass on [CLS], layers 1–4"]
    assert float(value) > 0.3 and "× uniform" in delta
    att = run_text(lm, DEFAULT_TEXT)
    assert metrics["Tokens L"][0] == str(len(att.tokens))


MODEL_CHANGES = [
    ("slider", "snk_layer", 4),
    ("slider", "snk_head", 7),
    ("slider", "snk_eps", 0.6),
    ("text_area", "snk_text", "Paris is the capital of France; Berlin is the capital of Germany."),
]


def test_model_view_every_control_changes_the_charts(lm: LoadedModel) -> None:
    at = run_app(PAGE, snk_view="model")
    walk(at, MODEL_CHANGES, lambda a: check_model(a, lm))
    at.session_state[NOTHING_OPEN] = True  # the lab's sections 2 and 3 are drawn once opened
    at.session_state[ZOO_OPEN] = True
    _set(at, "radio", "snk_view", "lab")
    check_lab(at)


def test_model_view_bad_text(lm: LoadedModel) -> None:
    at = run_app(PAGE, snk_view="model")
    _set(at, "text_area", "snk_text", "")  # F11: an empty box says what to type (an info box, as everywhere)
    assert not at.exception and not at.error
    assert any("Type or paste a text in the box above" in i.value for i in at.info), [i.value for i in at.info]
    long = ("To be, or not to be, that is the question: whether 'tis nobler in the mind to suffer "
            "the slings and arrows of outrageous fortune. ") * 80
    assert len(long) > 9_000
    _set(at, "text_area", "snk_text", long[:10_000])
    no_errors(at)
    info = " ".join(i.value for i in at.info)
    assert "at most 512 tokens" in info and "truncated" in info
    assert int({m.label: m.value for m in at.metric}["Tokens L"]) == 512
    _set(at, "text_area", "snk_text", "🙂 Ünïcödé, 你好！ مرحبا")
    check_model(at, lm)


def test_model_view_local_folders(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(MODEL_DIRS_ENV, raising=False)
    at = run_app(PAGE, snk_view="model", snk_model="local")
    no_errors(at)
    assert any("Type the path of a model folder" in i.value for i in at.info)
    _set(at, "text_input", "snk_path", "/etc")
    assert not at.exception and "switched off" in at.error[0].value
    root = tmp_path / "models"
    (root / "empty").mkdir(parents=True)
    monkeypatch.setenv(MODEL_DIRS_ENV, str(root))
    _set(at, "text_input", "snk_path", "/etc")
    assert not at.exception and "outside the allowed model directories" in at.error[0].value
    _set(at, "text_input", "snk_path", str(root / "empty"))
    assert not at.exception and "no config.json" in at.error[0].value
    assert at.query_params["snk_path"] == str(root / "empty")
    # A decoder of your own: causal maps, the causal sink metric, no error.
    make_tiny_gpt2(root / "tiny-gpt2")
    _set(at, "text_input", "snk_path", "tiny-gpt2")
    no_errors(at)
    metrics = {visible(m.label): (m.value, m.delta) for m in at.metric}  # labels as shown (ui.text.plain)
    assert metrics["Tokens L"][1] == "causal" and metrics["Sink heads for [CLS]"][0].endswith("of 4")
    att = run_text(load_model("tiny-gpt2"), DEFAULT_TEXT)
    rep = sink_report(att.attentions, att.categories(), causal=True, eps=0.3)
    np.testing.assert_allclose(decode(figure(at, "snk-metric")["data"][0]["z"]), rep.share.numpy(), rtol=1e-6)


# ---------------------------------------------------------------------------- Heatmaps: real text


def check_real_heatmaps(at: AppTest, lm: LoadedModel) -> None:
    no_errors(at)
    s = at.session_state
    att = run_text(lm, s.get("rt_text", DEFAULT_TEXT))
    layer, head = int(s["rt_layer"]), int(s["rt_head"])
    fig = figure(at, "rt-weights")
    np.testing.assert_allclose(decode(trace(fig, 0)["z"]), att.attentions[layer, head].numpy(), rtol=1e-5,
                               atol=1e-7)
    assert list(trace(fig, 0)["y"])[0] == "0:[CLS]"
    grid = figure(at, "rt-heads")
    thumbs = [t for t in grid["data"] if t.get("type") == "heatmap"]  # the rest: pick points (clicks)
    assert len(thumbs) == lm.heads
    for h, tr in enumerate(thumbs):
        np.testing.assert_allclose(decode(tr["z"]), att.attentions[layer, h].numpy(), rtol=1e-5, atol=1e-7)


def test_heatmaps_real_text_source(lm: LoadedModel) -> None:
    at = run_app(HEATMAPS, rt_src="real")
    check_real_heatmaps(at, lm)
    walk(at, [("slider", "rt_layer", 3), ("slider", "rt_head", 11),
              ("text_area", "rt_text", "The quick brown fox jumps over the lazy dog.")],
         lambda a: check_real_heatmaps(a, lm))
    assert at.query_params["rt_src"] == "real" and at.query_params["rt_layer"] == "3"
    # Back to the synthetic source: the original page, unchanged (its heads grid drawn once opened).
    at.session_state[HEATMAPS_HEADS_OPEN] = True
    _set(at, "radio", "rt_src", "synthetic")
    check_heatmaps(at)
    assert "rt_src" not in at.query_params


def test_heatmaps_real_text_bad_input() -> None:
    at = run_app(HEATMAPS, rt_src="real", rt_text="   ")  # F11: white space is no text: say what to type
    no_errors(at)
    assert any("Type or paste a text in the box above" in i.value for i in at.info), [i.value for i in at.info]
    assert not figures(at)
    at = run_app(HEATMAPS, rt_src="real", rt_layer="99", rt_head="999")
    no_errors(at)
    assert (at.session_state["rt_layer"], at.session_state["rt_head"]) == (5, 11)


def test_gate_help_states_the_mean_gate_its_bias_gives() -> None:
    # issue 9, correction 8: the help said "mean ≈ 0.1, i.e. b_g ≈ −2", but E σ(−2 + Z) = 0.155.
    at = run_app(PAGE)
    text = at.slider(key="snk_gb").help
    g = np.random.default_rng(0)
    z = g.standard_normal(2_000_000)
    mc = lambda b: float(np.mean(1 / (1 + np.exp(-(b + z)))))  # noqa: E731
    b01 = T.gate_bias_for_mean(0.1)
    assert mc(b01) == pytest.approx(0.1, abs=1e-3)  # the bias the text gives really yields a mean of 0.1
    assert mc(-2.0) == pytest.approx(float(T.gate_mean_theory(-2.0)), abs=1e-3)
    assert f"b_g ≈ {b01:.1f}" in text and f"b_g = −2 gives a mean of {float(T.gate_mean_theory(-2.0)):.3f}" in text
    assert "i.e. b_g ≈ −2" not in text
