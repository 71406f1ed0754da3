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
from tests.chart_data import decode, figure, no_errors, page_device, run_app, set_widget, trace, walk
from ui.figures import downsample
from ui.nav import PAGES

HEATMAPS = "pages/1_Heatmaps.py"


def run(path: str, **query: str) -> AppTest:
    return run_app(path, **query)


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
        expect, _, _ = downsample(tensor[head].numpy(), 128)
        np.testing.assert_allclose(z, expect, rtol=1e-5, atol=1e-5, equal_nan=True)
    if spec.heads > 1:
        grid = figure(at, "heads")
        assert len(grid["data"]) == spec.heads
        for h, tr in enumerate(grid["data"]):
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
    bad = run(HEATMAPS, L="99999", dk="0", temp="nan", mask="bogus", heads="x")
    check_charts(bad)
    notes = " ".join(w.value for w in bad.warning)
    for needle in ("L=99999 is above its limit 1024", "dk=0 is not one of", "temp", "mask='bogus'", "heads"):
        assert needle in notes, needle
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
