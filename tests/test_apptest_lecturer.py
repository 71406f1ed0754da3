"""What a lecturer saw, each fixed (issue 41, item 8): the query-token picker after a model switch, the
real models named from the registry, a caption saying "6 layers × 12 heads" once, the sink sentence at one
length said once, legend entries that look different, the Tour's precision control driving the chart, the
synthetic sink map at a legible width and the shipped StreamingLLM chart keeping its plot area."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from attncore.decoder.stream_run import SHIPPED_STREAM_FILE, load_stream_run
from attncore.models.bundled import BUNDLED_MODELS
from attncore.overflow import overflow_sweep
from attncore.sinks import SinkSpec
from tests.chart_data import decode, figure, figures, no_errors, page_device, run_app
from tests.legend_checks import duplicate_swatches, swatches
from ui import decoder_lab
from ui.nav import real_models
from ui.views import decoder as dec_view
from ui.views import sinks as snk_view

pytestmark = pytest.mark.usefixtures("one_torch_thread")

HEATMAPS = "pages/1_Heatmaps.py"
TOUR = "pages/0_Tour.py"
TEXT = "The cat sat on the mat."


# ------------------------------------------------------------------------------ 1 · the query-token picker

@pytest.mark.slow
def test_switching_the_model_sends_the_new_models_token_to_the_picker() -> None:
    at = run_app(HEATMAPS, timeout=900, rt_src="real", rt_model="minilm", rt_text=TEXT, rt_tok="3")
    no_errors(at)
    before = at.selectbox(key="rt_tok")
    assert before.value == 3 and before.options[3].endswith("sat")  # MiniLM: [CLS] the cat sat
    at.radio(key="rt_model").set_value("smollm2")
    at.run(timeout=900)
    no_errors(at)
    pick = at.selectbox(key="rt_tok")
    assert pick.value == 3
    assert pick.options != before.options  # SmolLM2's tokens, not MiniLM's
    # the browser keeps a widget's shown label unless the server sends one: it must be SmolLM2's token 3
    assert pick.proto.set_value and pick.proto.raw_value == pick.options[3], (pick.proto.raw_value,
                                                                              pick.options[3])
    assert "sat" not in pick.options[3]
    # and once in sync, moving the picker by hand keeps the user's choice
    pick.set_value(5)
    at.run(timeout=900)
    assert at.selectbox(key="rt_tok").value == 5 and not at.selectbox(key="rt_tok").proto.set_value


# ------------------------------------------------------------------------------ 2, 3 · the real models named

def test_home_and_training_lab_name_every_bundled_model() -> None:
    at = run_app("app.py")
    no_errors(at)
    text = "\n".join([m.value for m in at.markdown] + [c.value for c in at.caption])
    for b in BUNDLED_MODELS.values():
        assert b.name in text, b.name
    assert real_models("the character model") in text
    at = run_app("pages/6_Training_lab.py", timeout=300)
    no_errors(at)
    text = "\n".join(m.value for m in at.markdown)
    assert "(all-MiniLM-L6-v2, SmolLM2-135M-Instruct and the character model trained here)" in text


def test_real_models_follow_the_registry() -> None:
    names = [b.name for b in BUNDLED_MODELS.values()]
    assert real_models("x") == ", ".join(names) + " and x"
    assert "SmolLM2-135M-Instruct" in names and "all-MiniLM-L6-v2" in names


def test_minilm_caption_says_its_shape_once() -> None:
    at = run_app(HEATMAPS, timeout=300, rt_src="real", rt_model="minilm", rt_text=TEXT)
    no_errors(at)
    said = [c.value for c in at.caption if "layers ×" in c.value]
    assert said, [c.value for c in at.caption]
    for c in said:
        assert c.count("6 layers ×") == 1, c
    assert any("all-MiniLM-L6-v2, a BERT encoder: 6 layers × 12 heads" in c for c in said), said


# ------------------------------------------------------------------------------ 4 · one length, one sentence

def _sinks(length: int, share: list[float]) -> SimpleNamespace:
    return SimpleNamespace(length=length, sink_heads=3, heads=9, eps=0.3, share=torch.tensor(share),
                           first_score=torch.full((9,), 0.5))


def test_a_text_at_gus_length_or_shorter_says_its_length_once() -> None:
    s56 = _sinks(56, [0.0, 0.5, 1.0])
    sentence, shares = decoder_lab.sink_lengths(s56, _sinks(56, [0.0, 0.5, 1.0]))
    assert sentence.count("At 56 tokens") == 1, sentence
    assert "their protocol asks for 64; the text has 56" in sentence
    assert [lab for lab, _ in shares] == ["56 tokens"]
    fig = dec_view.share_figure(shares).to_plotly_json()
    assert [t["name"] for t in fig["data"]] == ["56 tokens"]
    # two lengths: two sentences and two curves, each named by its length
    sentence, shares = decoder_lab.sink_lengths(_sinks(64, [0.0, 0.5, 1.0]), _sinks(512, [0.1, 0.6, 1.0]))
    assert sentence.count("At 64 tokens (their protocol)") == 1 and sentence.count("At 512 tokens") == 1
    assert [lab for lab, _ in shares] == ["64 tokens", "512 tokens"]
    np.testing.assert_allclose(shares[1][1], [0.1, 0.6, 1.0], rtol=1e-6)


# ------------------------------------------------------------------------------ 5 · legend swatches

def test_legend_checker_finds_two_names_with_one_look() -> None:
    fig = {"data": [{"type": "scatter", "mode": "lines", "name": "a", "line": {"color": "#111", "dash": "dash"}},
                    {"type": "scatter", "mode": "lines", "name": "b", "line": {"color": "#111", "dash": "dash"}},
                    {"type": "scatter", "mode": "lines", "name": "c", "line": {"color": "#111"}}]}
    assert duplicate_swatches(fig) == [("a", "b")]


@pytest.mark.parametrize(("page", "query"), [
    (TOUR, {"tour": "2"}),
    ("pages/3_Saturation_and_gradients.py", {"sat_tab": "Why √d"}),
    ("pages/3_Saturation_and_gradients.py", {"sat_tab": "Saturation"}),
    ("pages/3_Saturation_and_gradients.py", {"sat_tab": "Gradients"}),
])
def test_no_two_legend_entries_look_the_same(page: str, query: dict[str, str]) -> None:
    at = run_app(page, timeout=300, **query)
    no_errors(at)
    figs = figures(at)
    assert figs
    for f in figs:
        assert not duplicate_swatches(f), ((f["layout"].get("meta") or {}).get("view"), duplicate_swatches(f))


# ------------------------------------------------------------------------------ 6 · the Tour's precision

def test_tour_precision_control_changes_the_chart() -> None:
    ov = overflow_sweep(np.geomspace(1.0, 1e4, 241), 4, device=page_device())
    seen = []
    for dtype in ("float16", "float64"):
        at = run_app(TOUR, timeout=300, tour="5", tour_odt=dtype)
        no_errors(at)
        fig = figure(at, "sat-overflow")
        i = ov.dtypes.index(dtype)
        lines = {t["xaxis"]: t for t in fig["data"] if t.get("name") == dtype}
        assert set(lines) == {"x", "x2"}, [t.get("name") for t in fig["data"]]
        np.testing.assert_allclose(decode(lines["x"]["y"]), np.maximum(ov.naive_error[i], 1e-20), rtol=1e-5)
        np.testing.assert_allclose(decode(lines["x2"]["y"]), np.maximum(ov.stable_error[i], 1e-20), rtol=1e-5)
        names = {t.get("name") for t in fig["data"]}
        assert not names & (set(ov.dtypes) - {dtype}), names  # the other precisions are not drawn
        seen.append(sorted(str(n) for n in names))
    assert seen[0] != seen[1]


# ------------------------------------------------------------------------------ 7 · the synthetic sink map

def test_synthetic_sink_map_gives_every_key_a_legible_column() -> None:
    spec = SinkSpec()
    keys = spec.n + spec.sink
    fig = snk_view.sink_map_figure(np.full((spec.n, keys), 1.0 / keys), spec).to_plotly_json()
    width, height = fig["layout"]["width"], fig["layout"]["height"]
    assert (width - snk_view.MAP_FRAME_PX) / keys >= 8  # ~75 px for 33 keys before: 2 px a column
    assert (height - 40 - 70) / spec.n >= 8  # title above, key labels and their title below
    at = run_app("pages/4_Attention_sinks.py", timeout=300)
    no_errors(at)
    shown = figure(at, "snk-map")
    assert shown["layout"]["width"] == snk_view.MAP_FRAME_PX + snk_view.MAP_CELL_PX * keys


# ------------------------------------------------------------------------------ 8 · the shipped StreamingLLM chart

LEGEND_ROW_PX, AXIS_TITLE_PX = 20, 50


def plot_fraction(fig: dict) -> float:
    """The plot area's share of the figure's height: minus the margins, the x axis title and, for a
    horizontal legend under the plot, its rows (up to four entries a row)."""
    lay = fig["layout"]
    h = lay["height"]
    m = lay.get("margin", {})
    legend = lay.get("legend", {})
    entries = len(swatches(fig))
    below = legend.get("orientation") == "h" or legend.get("y", 1.0) < 0
    rows = math.ceil(entries / 4) if below else 0
    return (h - m.get("t", 0) - m.get("b", 0) - AXIS_TITLE_PX - rows * LEGEND_ROW_PX) / h


@pytest.mark.skipif(not SHIPPED_STREAM_FILE.is_file(), reason="the 2,048-token run is not shipped")
def test_shipped_streaming_chart_keeps_its_plot_area_and_its_numbers() -> None:
    r = load_stream_run().result
    fig = dec_view.stream_figure(r, tag="dec_stream_shipped").to_plotly_json()
    assert plot_fraction(fig) >= 0.5, plot_fraction(fig)
    lay = fig["layout"]
    assert lay["legend"]["orientation"] == "v" and lay["legend"]["x"] >= 1.0  # beside the plot
    entries = [n for n, _ in swatches(fig)]
    windows = sorted({s.window for s in r.settings if s.window is not None})
    sinks = sorted({s.sinks for s in r.settings if s.sinks})
    assert len(entries) == 1 + len(windows) + len(sinks) < len(r.settings), entries
    assert not duplicate_swatches(fig)
    # every setting still drawn, with its numbers, and no two settings alike (colour by window, dash by k)
    lines = [t for t in fig["data"] if t.get("x") is not None and t["name"] in {s.label for s in r.settings}]
    assert [t["name"] for t in lines] == [s.label for s in r.settings]
    looks = {(t["line"]["color"], t["line"]["dash"]) for t in lines}
    assert len(looks) == len(r.settings)
    block = dec_view.auto_block(r.length)
    for t, s in zip(lines, r.settings, strict=True):
        _, y = dec_view.loss_curve(r.nll[r.index(s)].numpy(), block)
        np.testing.assert_allclose(decode(t["y"]), y, rtol=1e-6)
