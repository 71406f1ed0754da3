"""AppTest: the home page and the Heatmaps page, every control changed, chart data checked."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from streamlit.testing.v1 import AppTest

from attncore.attention import AttentionStages
from attncore.explore import SyntheticSpec, synthetic_stages
from attncore.stats import entropy
from tests.chart_data import decode, figure, figures, no_errors, page_device, run_app, set_widget, trace, walk
from ui.maps import MASKED_GREY, downsample, downsample_signed
from ui.nav import PAGES, REAL_TEXT_LINKS

HEATMAPS = "pages/1_Heatmaps.py"


HEADS_OPEN = "hm_heads_open"  # the "All heads" expander: its grid is computed and sent only when open


def run(path: str, **query: str) -> AppTest:
    """The page from its URL; Heatmaps with its heads grid's expander then opened (closed, nothing of it is
    sent: checked here)."""
    at = run_app(path, **query)
    if path != HEATMAPS:
        return at
    assert "heads" not in {(f["layout"].get("meta") or {}).get("view") for f in figures(at)}
    at.session_state[HEADS_OPEN] = True
    return at.run()


def spec_of(at: AppTest) -> SyntheticSpec:
    """The spec the page's current controls describe (read back from session state)."""
    s = at.session_state

    def get(k: str, d: object) -> object:
        return s[k] if k in s else d  # noqa: SIM401 (AppTest state has no .get)
    return SyntheticSpec(
        L=s["L"], S=s["S"], d_k=s["dk"], heads=s["heads"], kv_heads=s["kv"], scoring=s["scoring"],
        temperature=s["temp"], mask=s["mask"], valid_len=get("vlen", 12), window=get("win", 4),
        block=get("block", 8), normalizer=s["norm"], ssmax_s=get("ss", 0.43), input_std=s["std"],
        seed=s["seed"], dtype=s["dtype"],
    )


def selected_head(at: AppTest) -> int:
    return int(at.session_state["head"]) if "head" in at.session_state and at.session_state["heads"] > 1 else 0


def stages_on_page_device(spec: SyntheticSpec) -> AttentionStages:
    """attncore's stages computed on the page's own device, brought to the CPU for comparison."""
    st = synthetic_stages(spec, page_device())
    return AttentionStages(**{f.name: (v.cpu() if isinstance(v := getattr(st, f.name), torch.Tensor) else v)
                              for f in dataclasses.fields(st)})


def check_charts(at: AppTest) -> None:
    """Every heatmap on the page equals attncore's numbers for the current controls."""
    no_errors(at)
    spec = spec_of(at)
    st = stages_on_page_device(spec)
    head = selected_head(at)
    w = st.weights[head].numpy()
    main = decode(trace(figure(at, "weights"), 0)["z"])
    expect_main, _, _ = downsample(w, 512)
    assert main.shape == expect_main.shape
    np.testing.assert_allclose(main, expect_main, rtol=1e-5, atol=1e-6)
    # Per-row entropy bars equal attncore.stats.entropy.
    bars = decode(trace(figure(at, "weights"), 1)["x"])
    np.testing.assert_allclose(bars, entropy(st.weights[head]).numpy(), rtol=1e-5, atol=1e-6)
    stages = figure(at, "stages")
    for i, tensor in enumerate((st.raw, st.scaled, st.masked, st.weights)):
        z = decode(trace(stages, i)["z"])
        expect, _, _ = (downsample if i == 3 else downsample_signed)(tensor[head].numpy(), 128)
        np.testing.assert_allclose(z, expect, rtol=1e-5, atol=1e-5, equal_nan=True)
    if spec.heads > 1:
        grid = figure(at, "heads")
        maps = [tr for tr in grid["data"] if tr["type"] == "heatmap"]  # the rest: pick points (clicks)
        assert len(maps) == spec.heads and grid["layout"]["meta"]["selected"] == head
        for h, tr in enumerate(maps):
            expect, _, _ = downsample(st.weights[h].numpy(), 64)
            np.testing.assert_allclose(decode(tr["z"]), expect, rtol=1e-5, atol=1e-6)


def test_home_page_lists_every_page() -> None:
    at = run("app.py")
    no_errors(at)
    assert at.title[0].value == "Attention Lab"
    text = " ".join(m.value for m in at.markdown) + " ".join(c.value for c in at.caption)
    for entry in PAGES:
        assert entry.summary in text
    assert any("attncore" in m.value for m in at.markdown)


@pytest.mark.parametrize("index", [0, 1])
def test_home_real_text_links_open_the_real_model_views(index: int) -> None:
    """The home page's "Real text" deep links carry URL state that opens the real-model view itself."""
    link = REAL_TEXT_LINKS[index]
    at = run(link.page.path, **link.query)
    no_errors(at)
    chart = {"Heatmaps": "rt-heads", "Attention sinks": "snk-grid"}[link.page.label]
    assert figure(at, chart)["data"], chart  # the layer x head overview is drawn


def test_heatmaps_defaults_match_attncore() -> None:
    at = run(HEATMAPS)
    check_charts(at)
    # Default: 4 heads, causal off, scaled dot product -> the std of scaled scores is ~1.
    labels = {m.label: m.value for m in at.metric}
    spec = spec_of(at)
    st = stages_on_page_device(spec)
    assert labels["Mean entropy (nats)"] == f"{float(entropy(st.weights[0]).mean()):.3f}"
    assert abs(float(labels["std of scaled scores"]) - 1.0) < 0.15


CHANGES = [
    ("slider", "L", 40),
    ("slider", "S", 33),
    ("select_slider", "dk", 512),
    ("slider", "heads", 8),
    ("selectbox", "kv", 2),
    ("slider", "head", 5),
    ("slider", "std", 2.5),
    ("radio", "scoring", "dot"),
    ("radio", "scoring", "additive"),
    ("slider", "temp", 0.5),
    ("selectbox", "mask", "causal"),
    ("selectbox", "norm", "softmax1"),
    ("selectbox", "norm", "sigmoid"),
    ("selectbox", "norm", "softpick"),
    ("selectbox", "norm", "ssmax"),
    ("slider", "ss", 1.2),
    ("number_input", "seed", 7),
    ("selectbox", "dtype", "float64"),
    ("selectbox", "dtype", "float16"),
    ("selectbox", "dtype", "bfloat16"),
]


def _set(at: AppTest, kind: str, key: str, value) -> None:
    set_widget(at, kind, key, value)


def test_heatmaps_every_control_changes_the_chart_data() -> None:
    walk(run(HEATMAPS), CHANGES, check_charts)


@pytest.mark.parametrize(("mask", "extra"), [("padding", ("vlen", 5)), ("window", ("win", 3)),
                                             ("blocks", ("block", 4))])
def test_heatmaps_mask_controls(mask: str, extra: tuple[str, int]) -> None:
    at = run(HEATMAPS)
    _set(at, "selectbox", "mask", mask)
    check_charts(at)
    key, value = extra
    _set(at, "slider", key, value)
    check_charts(at)
    spec = spec_of(at)
    w = stages_on_page_device(spec).weights[selected_head(at)].numpy()
    L, S = w.shape
    i, j = np.meshgrid(np.arange(L), np.arange(S), indexing="ij")
    hidden = {"padding": j >= value, "window": (j > i) | (j <= i - value),
              "blocks": (i // value) != (j // value)}[mask]
    assert np.all(w[hidden] == 0)
    assert np.allclose(w.sum(-1), 1.0, atol=1e-5)


def test_heatmaps_fully_masked_rows_are_zero_not_nan() -> None:
    at = run(HEATMAPS, mask="padding", vlen="0")
    check_charts(at)
    z = decode(trace(figure(at, "weights"))["z"])
    assert np.all(z == 0) and not np.isnan(z).any()
    note = next(i.value for i in at.info if "fully masked" in i.value)
    # issue 9, corrections 6 and 7: the note says where attncore's zeros differ from others
    assert "cuDNN" in note and "−1e6" in note and "1/S" in note and "CPU" in note


def test_heatmaps_compare_mode_shows_scaled_vs_unscaled() -> None:
    at = run(HEATMAPS, dk="512")
    _set(at, "toggle", "cmp", True)
    no_errors(at)
    a = decode(trace(figure(at, "compare-A"))["z"])
    b = decode(trace(figure(at, "compare-B"))["z"])
    spec = spec_of(at)
    wa = stages_on_page_device(spec).weights[0].numpy()
    wb = stages_on_page_device(SyntheticSpec(**{**spec.__dict__, "scoring": "dot"})).weights[0].numpy()
    np.testing.assert_allclose(a, wa, atol=1e-6)
    np.testing.assert_allclose(b, wb, atol=1e-6)
    # Unscaled at d_k = 512: rows collapse onto one key (max weight near 1).
    assert b.max(-1).mean() > 0.8 > 0.5 > a.max(-1).mean()
    for kind, key, value in (("radio", "b_scoring", "scaled_dot"), ("slider", "b_temp", 2.0),
                             ("selectbox", "b_norm", "ssmax")):
        _set(at, kind, key, value)
        no_errors(at)
        b2 = decode(trace(figure(at, "compare-B"))["z"])
        assert not np.allclose(b2, b)
        b = b2


def test_heatmaps_url_restores_the_view_and_reports_bad_values() -> None:
    at = run(HEATMAPS, L="24", S="20", norm="softmax1", mask="causal", heads="3")
    check_charts(at)
    assert (at.session_state["L"], at.session_state["S"], at.session_state["heads"]) == (24, 20, 3)
    bad = run_app(HEATMAPS, L="99999", dk="0", temp="nan", mask="bogus", heads="x")
    notes = " ".join(w.value for w in bad.warning)  # said on the run that reads the URL
    for needle in ("L=99999 is above its limit 1024", "dk=0 is not one of", "temp", "mask='bogus'", "heads"):
        assert needle in notes, needle
    bad.session_state[HEADS_OPEN] = True
    check_charts(bad.run())
    assert bad.session_state["L"] == 1024 and bad.session_state["dk"] == 64


def test_heatmaps_float16_overflow_warning() -> None:
    at = run(HEATMAPS, dtype="float16", dk="1024", std="30", scoring="dot")
    check_charts(at)
    assert any("65504" in w.value for w in at.warning)
    z = decode(trace(figure(at, "weights"))["z"])
    assert np.isfinite(z).all()


def test_heatmaps_additive_over_budget_gives_a_plain_message() -> None:
    at = run(HEATMAPS, scoring="additive", L="1024", S="1024", heads="16", kv="16")
    assert not at.exception
    assert at.error and "limit" in at.error[0].value and "additive" in at.error[0].value


# ---------------------------------------------------------------- issue 11: the lesson visible by default


def test_heatmaps_scores_share_one_colour_range_by_default() -> None:
    at = run(HEATMAPS, dk="512")
    no_errors(at)
    st = stages_on_page_device(spec_of(at))
    stages = figure(at, "stages")
    raw, scaled, masked = (trace(stages, i) for i in range(3))
    top = float(np.abs(st.raw[0].numpy()).max())  # raw scores are the widest (scale 1/√512 < 1)
    for t in (raw, scaled, masked):
        assert t["zmin"] == pytest.approx(-top, rel=1e-5) and t["zmax"] == pytest.approx(top, rel=1e-5)
    assert raw["showscale"] is True and scaled["showscale"] is False  # one bar for the three
    _set(at, "toggle", "hm_own", True)
    no_errors(at)
    stages = figure(at, "stages")
    lim = float(np.abs(st.scaled[0].numpy()).max())
    assert trace(stages, 0)["zmax"] == pytest.approx(top, rel=1e-5)
    assert trace(stages, 1)["zmax"] == pytest.approx(lim, rel=1e-5) and lim < top / 10
    assert at.query_params["hm_own"] == "1"


def test_heatmaps_selected_head_has_a_colour_bar_log_option_labelled_log_n_and_fitted_max_axis() -> None:
    at = run(HEATMAPS)
    no_errors(at)
    fig = figure(at, "weights")
    hm = trace(fig, 0)
    assert hm["showscale"] is True and hm["colorbar"]["title"]["text"] == "weight"
    assert "log n" in fig["layout"]["xaxis2"]["title"]["text"]
    assert any(t.get("name") == "log n (uniform)" for t in fig["data"])
    w = stages_on_page_device(spec_of(at)).weights[0].numpy()
    assert fig["layout"]["xaxis3"]["range"][1] == pytest.approx(w.max(-1).max() * 1.08, rel=1e-4)
    assert fig["layout"]["xaxis3"]["range"][1] < 1.0  # 16 keys, no row puts all its weight on one
    _set(at, "toggle", "hm_log", True)
    no_errors(at)
    hm = trace(figure(at, "weights"), 0)
    np.testing.assert_allclose(decode(hm["z"]), np.log10(np.maximum(w, 1e-4)), rtol=1e-5, atol=1e-5)
    assert (hm["zmin"], hm["zmax"]) == (-4.0, 0.0)
    assert hm["colorbar"]["ticktext"][0] == "1e-4"
    assert any("log10" in c.value for c in at.caption)


def test_heatmaps_large_signed_maps_keep_the_signal() -> None:
    at = run(HEATMAPS, L="1024", S="1024", heads="1", kv="1", scoring="dot")
    no_errors(at)
    raw = stages_on_page_device(spec_of(at)).raw[0].numpy()
    z = decode(trace(figure(at, "stages"), 0)["z"])
    signed, _, _ = downsample_signed(raw, 128)
    np.testing.assert_allclose(z, signed, rtol=1e-6)
    # Block means cancel towards 0; the kept entries are as large as the scores themselves.
    assert np.abs(z).mean() > 5 * np.abs(downsample(raw, 128)[0]).mean()
    assert (z > 0).any() and (z < 0).any()
    assert any("largest-magnitude score" in c.value for c in at.caption)


def test_downsample_signed_picks_the_largest_magnitude_with_its_sign() -> None:
    a = np.array([[1.0, -5.0, 2.0, 2.0], [3.0, 0.0, -np.inf, 1.5]], dtype=np.float32)
    small, fr, fc = downsample_signed(a, 2)
    assert (fr, fc) == (1, 2)
    np.testing.assert_array_equal(small, [[-5.0, 2.0], [3.0, 1.5]])
    nan_block, _, _ = downsample_signed(np.array([[-np.inf, -np.inf, 1.0, 0.0]]), 2)
    assert np.isnan(nan_block[0, 0]) and nan_block[0, 1] == 1.0


def test_heatmaps_masked_cells_are_grey_with_a_legend_entry() -> None:
    at = run(HEATMAPS, mask="causal")
    no_errors(at)
    fig = figure(at, "stages")
    masked = decode(trace(fig, 2)["z"])
    assert np.isnan(masked[0, 1:]).all()  # -inf above the diagonal is sent as a gap...
    assert fig["layout"]["plot_bgcolor"] == MASKED_GREY  # ...which shows the grey plot area
    assert [t["name"] for t in fig["data"] if t.get("showlegend")] == ["masked (−∞)"]
    assert any("Grey cells are masked" in c.value for c in at.caption)
    plain = figure(run(HEATMAPS), "stages")
    assert plain["layout"].get("showlegend") is False


def test_heatmaps_compare_sits_above_the_stage_row() -> None:
    at = run(HEATMAPS)
    views = [(f["layout"].get("meta") or {}).get("view") for f in figures(at)]
    assert "compare-A" not in views
    _set(at, "toggle", "cmp", True)
    views = [(f["layout"].get("meta") or {}).get("view") for f in figures(at)]
    assert views.index("compare-A") < views.index("compare-B") < views.index("stages")
