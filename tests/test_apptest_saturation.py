"""AppTest: the Saturation & gradients page, every control changed, chart data checked against attncore."""

from __future__ import annotations

import json
import math
from functools import lru_cache

import numpy as np
import pytest
import torch
from streamlit.testing.v1 import AppTest

from attncore import theory
from attncore.dot_products import D_GRID, dot_histograms, dot_std_sweep
from attncore.dtypes import DTYPES
from attncore.gradients import (
    gradient_sweep,
    jacobian_vs_scale,
    parse_scores,
    saturation_crossing,
    saturation_curve,
    softmax_jacobian,
    temperature_rows,
)
from attncore.overflow import overflow_rows, overflow_sweep
from tests.chart_data import decode, figure, figures, no_errors, page_device, run_app
from ui.views import saturation as sat_views

PAGE = "pages/3_Saturation_and_gradients.py"
ROW_KEYS = ("unscaled", "tau0.5", "tau1", "tau2")
GRAD_PANELS = ("jac", "max", "saturated", "grad_scores", "grad_q", "grad_k")
LOG_PANELS = {"jac", "grad_scores", "grad_q", "grad_k"}


def run(**query: str) -> AppTest:
    return run_app(PAGE, **query)


def views(at: AppTest) -> set[str]:
    return {(f.get("layout", {}).get("meta") or {}).get("view") for f in figures(at)}


def trace(fig: dict, name: str, axis: str = "x") -> dict:
    found = [t for t in fig["data"] if t.get("name") == name and t.get("xaxis", "x") == axis]
    assert len(found) == 1, (name, axis, [(t.get("name"), t.get("xaxis")) for t in fig["data"]])
    return found[0]


def xy(t: dict) -> tuple[np.ndarray, np.ndarray]:
    return decode(t["x"]).astype(np.float64), decode(t["y"]).astype(np.float64)


def close(actual, expected, rtol: float = 2e-6, atol: float = 1e-9) -> None:
    np.testing.assert_allclose(np.asarray(actual, np.float64), np.asarray(expected, np.float64),
                               rtol=rtol, atol=atol)


# Defaults of the controls that one tab reads from another (their widgets vanish while that tab is closed).
SHARED_DEFAULTS = {"sat_scores": "9.2, -3.1, 8.8, -5.4, 1.2", "sat_dex": 64, "sat_level": 0.99, "sat_keys": 16}


def get(at: AppTest, key: str):
    """A control's value: session state, else (a widget of a closed tab) the URL, else the default."""
    if key in at.session_state:
        return at.session_state[key]
    default = SHARED_DEFAULTS[key]
    return type(default)(at.query_params[key]) if key in at.query_params else default


def mc_dtype(at: AppTest) -> torch.dtype:
    return torch.float64 if get(at, "dtype") == "float64" else torch.float32


# The references are recomputed from scratch (not through the page's cache), once per argument set.
ref_gradient_sweep = lru_cache(maxsize=32)(lambda *a, **k: gradient_sweep(list(a[0]), *a[1:], **k))
ref_scale_sweep = lru_cache(maxsize=32)(
    lambda smax, *a, **k: jacobian_vs_scale(np.geomspace(0.01, smax, 49), *a, **k))
# On the page's device, as the page computes it (CUDA's exp and division round apart from the CPU's).
ref_overflow = lru_cache(maxsize=2)(lambda device: overflow_sweep(np.geomspace(1.0, 1e4, 241), 4, device=device))


# --------------------------------------------------------------------------- checks per tab


def check_why(at: AppTest) -> None:
    """Both histograms, their theory curves and the std sweep equal attncore's numbers."""
    no_errors(at)
    d, n, vq, vk = get(at, "sat_d"), get(at, "sat_n"), get(at, "sat_vq"), get(at, "sat_vk")
    h = dot_histograms(d, n, get(at, "sat_bins"), var_q=vq, var_k=vk, seed=get(at, "seed"), dtype=mc_dtype(at),
                       device=page_device())
    fig = figure(at, "sat-hist")
    close(xy(trace(fig, "measured", "x"))[1], h.density_raw)
    close(xy(trace(fig, "measured", "x2"))[1], h.density_scaled)
    x, y = xy(trace(fig, sat_views.GAUSS, "x"))
    close(y, theory.normal_density(x, d * vq * vk), rtol=1e-4)
    x, y = xy(trace(fig, "exact (variance-gamma)", "x"))
    close(y, theory.dot_product_density(x, d, vq, vk), rtol=1e-4)
    x, y = xy(trace(fig, sat_views.GAUSS, "x2"))
    close(y, theory.normal_density(x, vq * vk), rtol=1e-4)
    shared = fig["layout"].get("xaxis2", {}).get("matches") == "x"
    assert shared == bool(get(at, "sat_samex"))
    if shared:  # issue 11: both histograms drawn over the unscaled range
        assert fig["layout"]["xaxis2"]["range"] == fig["layout"]["xaxis"]["range"]
        assert fig["layout"]["xaxis"]["range"][1] == pytest.approx(float(h.edges_raw[-1]), rel=1e-6)
    sw = dot_std_sweep(D_GRID, get(at, "sat_ns"), var_q=vq, var_k=vk, seed=get(at, "seed"), dtype=mc_dtype(at),
                       device=page_device())
    std = figure(at, "sat-std")
    raw = trace(std, "measured std(q·k)")
    close(xy(raw)[1], sw.std_raw)
    close(decode(raw["error_y"]["array"]), 2 * sw.se_raw)
    close(xy(trace(std, "measured std(q·k/√d)"))[1], sw.std_scaled)
    x, y = xy(trace(std, "√(d·σq²·σk²)"))
    close(y, theory.dot_product_std(x, vq, vk), rtol=1e-5)
    text = " ".join(m.value for m in at.markdown)
    assert f"std √(d·σq²·σk²) = **{theory.dot_product_std(d, vq, vk):#.3g}**" in text
    assert f"measured {h.std_raw:#.3g}" in text
    assert "source text" not in text
    assert (f"Matters\" tutorial), **{theory.dot_product_std(512, vq, vk):.1f}** against "
            f"{math.sqrt(vq * vk):#.3g}") in text
    assert any("Computed by attncore on" in c.value for c in at.caption)


def check_saturation(at: AppTest) -> None:
    no_errors(at)
    n, x_max, level = get(at, "sat_sn"), get(at, "sat_xmax"), get(at, "sat_level")
    sc = saturation_curve(torch.linspace(0.0, x_max, 81, dtype=torch.float64), n)
    fig = figure(at, "sat-curve")
    close(xy(trace(fig, "top weight (measured)"))[1], sc.top.numpy())
    close(xy(trace(fig, "each other weight (measured)"))[1], sc.other.numpy())
    close(xy(trace(fig, "Jacobian norm (measured)"))[1], sc.jac_norm.numpy(), atol=1e-12)
    x, y = xy(trace(fig, "top weight, closed form"))
    close(y, theory.saturation_top_weight(x, n), rtol=1e-5)
    metrics = {m.label: m for m in at.metric}
    m = metrics[f"x where the top weight reaches {level:g}"]
    crossing = saturation_crossing(sc.x, sc.top, level)
    assert m.value == ("beyond the range" if crossing is None else f"{crossing:.3f}")
    assert m.delta == f"theory {theory.saturation_threshold(n, level):.3f}"
    rows = temperature_rows(parse_scores(get(at, "sat_scores")), get(at, "sat_dex"))
    bars = figure(at, "sat-rows")
    for i, label in enumerate(rows.labels):
        close(decode(trace(bars, label)["y"]), rows.weights[i].numpy())
    table = at.dataframe[0].value
    close(table[[c for c in table.columns if c.startswith("p")]].to_numpy(), rows.weights.numpy(), rtol=1e-12)


def check_gradients(at: AppTest) -> None:
    no_errors(at)
    s = {k: get(at, k) for k in ("sat_scores", "sat_dex", "sat_jrow", "sat_smax", "sat_keys", "sat_trials",
                                 "seed", "sat_dmax", "sat_batch", "sat_level", "dtype", "sat_stat", "sat_ox")}
    rows = temperature_rows(parse_scores(s["sat_scores"]), s["sat_dex"])
    jac = softmax_jacobian(rows.weights[ROW_KEYS.index(s["sat_jrow"])]).numpy()
    close(decode(figure(at, "sat-jacobian")["data"][0]["z"]), jac, atol=1e-7)
    sw = ref_scale_sweep(s["sat_smax"], s["sat_keys"], s["sat_trials"], seed=s["seed"], dtype=mc_dtype(at),
                         device=page_device())
    js = figure(at, "sat-jscale")
    close(xy(trace(js, "measured", "x"))[1], sw.jac_mean)
    close(xy(trace(js, "measured", "x2"))[1], sw.max_mean)
    x, y = xy(trace(js, sat_views.LARGE, "x"))
    close(y, theory.jacobian_norm_large_scale(x, s["sat_keys"]), rtol=1e-5)
    ds = tuple(d for d in D_GRID if d <= s["sat_dmax"])
    gs = ref_gradient_sweep(ds, s["sat_keys"], s["sat_batch"], level=s["sat_level"], seed=s["seed"],
                            dtype=DTYPES[s["dtype"]], device=page_device())
    grad = figure(at, "sat-grad")
    for i, q in enumerate(GRAD_PANELS):
        axis = "x" if i == 0 else f"x{i + 1}"
        for setting in ("scaled", "unscaled"):
            st = gs.stats[(setting, q)]
            expect = st.median if s["sat_stat"] == "median" and q != "saturated" else st.mean
            if q in LOG_PANELS:
                expect = np.maximum(expect, 1e-20)
            x, y = xy(trace(grad, setting, axis))
            close(x, gs.d)
            close(y, expect, rtol=1e-5, atol=1e-12)
    ov = ref_overflow(page_device())
    of = figure(at, "sat-overflow")
    for i, name in enumerate(ov.dtypes):
        close(xy(trace(of, name, "x"))[1], np.maximum(ov.naive_error[i], 1e-20), rtol=1e-5, atol=1e-25)
        close(xy(trace(of, name, "x2"))[1], np.maximum(ov.stable_error[i], 1e-20), rtol=1e-5, atol=1e-25)
    table = at.table[-1].value.reset_index()
    expect_rows = overflow_rows(float(s["sat_ox"]), 4)
    assert list(table["finite"]) == ["yes" if r.finite else "NO" for r in expect_rows]
    close(np.array([float(v) for v in table["row sum"]]), [r.row_sum for r in expect_rows], rtol=1e-4)
    # issue 11: scientific notation, NaN printed as NaN (never None), no fixed-point 0.000...0003
    for r, row in zip(expect_rows, table.itertuples(index=False), strict=True):
        cells = [row[2], row[4], row[5], *row[3].strip("[]").split(", ")]
        assert all(c in ("NaN", "inf", "0") or "e" in c for c in cells), cells
        assert ("NaN" in row[3]) == any(math.isnan(w) for w in r.weights)
        assert "None" not in str(row) and "nan" not in str(row)


CHECK = {"Why √d": check_why, "Saturation": check_saturation, "Gradients": check_gradients}


def charts(at: AppTest) -> list[str]:
    """Every chart (data and layout) as canonical JSON, to tell whether a control changed anything."""
    return [json.dumps(f, sort_keys=True) for f in figures(at)]


def change_each(at: AppTest, tab: str, changes: list[tuple[str, str, object]]) -> None:
    """Change every control in turn: the state, the URL and the chart data follow, and still match attncore."""
    before = charts(at)
    for kind, key, val in changes:
        element = getattr(at, kind)(key=key)
        (element.input(val) if kind == "text_input" else element.set_value(val)).run()
        assert at.session_state[key] == val, key
        CHECK[tab](at)
        now = charts(at)
        assert now != before, f"{key} changed nothing"
        before = now
        encoded = f"{val:.6g}" if isinstance(val, float) else ("1" if val is True else "0" if val is False else str(val))
        assert at.query_params[key] == encoded, key


# --------------------------------------------------------------------------- tests


@pytest.mark.parametrize("tab", list(CHECK))
def test_defaults_of_each_tab_match_attncore(tab: str) -> None:
    at = run(sat_tab=tab)
    CHECK[tab](at)
    expected = {"Why √d": {"sat-hist", "sat-std"}, "Saturation": {"sat-curve", "sat-rows"},
                "Gradients": {"sat-jacobian", "sat-jscale", "sat-grad", "sat-overflow"}}[tab]
    assert views(at) == expected  # only the open tab is computed


def test_why_sqrt_d_every_control() -> None:
    at = run()
    change_each(at, "Why √d", [
        ("select_slider", "sat_d", 16),
        ("select_slider", "sat_n", 5000),
        ("slider", "sat_vq", 2.0),
        ("slider", "sat_vk", 0.5),
        ("slider", "sat_bins", 30),
        ("toggle", "sat_samex", False),
        ("select_slider", "sat_ns", 250),
        ("number_input", "seed", 7),
        ("selectbox", "dtype", "float64"),
    ])


def test_saturation_every_control_and_the_source_check() -> None:
    at = run(sat_tab="Saturation")
    note = " ".join(i.value for i in at.info)
    assert "[0.371, 0.080, 0.353, 0.060, 0.136]" in note and "sums to 0.85" in note
    assert "[0.599, 0.000, 0.401, 0.000, 0.000]" in note
    # issue 9, correction 9: the source's second example, [8.5, -2.1, 7.9, ...] -> [0.99, 0.00, 0.01, ...],
    # is flagged too: softmax fixes p1/p3 = e^(8.5 - 7.9) whatever the rest of the row holds
    w = torch.softmax(torch.tensor([8.5, -2.1, 7.9, 0.3, -1.0], dtype=torch.float64), 0)
    assert float(w[0] / w[2]) == pytest.approx(math.exp(0.6))
    assert f"**{math.exp(0.6):.2f}**" in note and "1.82" in note and "[0.99, 0.00, 0.01, …]" in note
    assert "source text 001" not in note
    change_each(at, "Saturation", [
        ("select_slider", "sat_sn", 16),
        ("slider", "sat_xmax", 20.0),
        ("select_slider", "sat_level", 0.999),
        ("select_slider", "sat_dex", 512),
        ("text_input", "sat_scores", "1, 2, 3, 10"),
    ])
    assert not at.info  # the source note belongs to the source's own example only


def test_gradients_every_control() -> None:
    at = run(sat_tab="Gradients", sat_dmax="64", sat_trials="500")
    change_each(at, "Gradients", [
        ("radio", "sat_jrow", "tau2"),
        ("select_slider", "sat_keys", 8),
        ("select_slider", "sat_trials", 250),
        ("select_slider", "sat_smax", 16.0),
        ("select_slider", "sat_batch", 32),
        ("select_slider", "sat_dmax", 128),
        ("radio", "sat_stat", "mean"),
        ("number_input", "seed", 3),
        ("selectbox", "dtype", "bfloat16"),
    ])
    # The table's x changes the table only.
    at.select_slider(key="sat_ox").set_value(710.0).run()
    check_gradients(at)
    assert at.query_params["sat_ox"] == "710"
    tab = at.table[-1].value.reset_index()
    finite = dict(zip(zip(tab["dtype"], tab["method"], strict=True), tab["finite"], strict=True))
    assert finite[("float64", "naive")] == "NO" and finite[("float64", "stable")] == "yes"


def test_gradients_tab_reads_the_scores_of_the_saturation_tab() -> None:
    at = run(sat_tab="Saturation")
    at.text_input(key="sat_scores").input("0, 0.5, 3").run()
    at.session_state["sat_tab"] = "Gradients"
    at.run()
    check_gradients(at)
    assert at.query_params["sat_tab"] == "Gradients" and at.query_params["sat_scores"] == "0, 0.5, 3"
    z = decode(figure(at, "sat-jacobian")["data"][0]["z"])
    assert z.shape == (3, 3)


@pytest.mark.parametrize(("text", "fragment"), [
    ("", "at least two scores"),
    ("1, nan, 2", "not a finite number"),
    ("9" * 5000, "5,000 characters long"),
])
def test_bad_scores_give_a_message_and_the_rest_still_renders(text: str, fragment: str) -> None:
    """(Every message of the parser is checked in test_gradients.py; here: how the page shows one.)"""
    at = run(sat_tab="Saturation", sat_scores=text)
    assert not at.exception
    assert len(at.error) == 1 and fragment in at.error[0].value
    assert views(at) == {"sat-curve"}


def test_bad_scores_on_the_gradients_tab_block_only_the_jacobian() -> None:
    at = run(sat_tab="Gradients", sat_scores=", ".join(["1"] * 100), sat_dmax="64")
    assert not at.exception
    assert len(at.error) == 1
    assert "Saturation tab are not valid: 100 scores were given; the limit is 64" in at.error[0].value
    assert views(at) == {"sat-jscale", "sat-grad", "sat-overflow"}


def test_bad_url_values_are_clamped_with_a_notice() -> None:
    at = run(sat_d="99999", sat_vq="100", sat_tab="bogus", sat_n="7", sat_bins="nan")
    check_why(at)
    notes = " ".join(w.value for w in at.warning)
    for needle in ("sat_d=99999 is not one of", "sat_vq=100.0 is above its limit 4", "sat_tab='bogus'",
                   "sat_n=7 is not one of", "sat_bins"):
        assert needle in notes, needle
    assert (get(at, "sat_d"), get(at, "sat_vq"), get(at, "sat_tab")) == (64, 4.0, "Why √d")


def test_over_budget_requests_give_plain_messages() -> None:
    at = run(sat_d="4096", sat_n="1000000")
    assert not at.exception
    assert len(at.error) == 1
    assert "samples × d would be 4.1G; the limit is 33.6M" in at.error[0].value
    assert "Reduce the samples or d" in at.error[0].value
    assert views(at) == {"sat-std"}
    grad = run(sat_tab="Gradients", sat_keys="1024", sat_batch="512", sat_dmax="4096", sat_trials="8000")
    assert not grad.exception
    errors = " ".join(e.value for e in grad.error)
    assert "trials × keys × scales would be" in errors and "batch × keys × (sum of d over the sweep)" in errors
    assert views(grad) == {"sat-jacobian", "sat-overflow"}


def test_std_statement_states_the_source_numbers() -> None:
    at = run()
    text = " ".join(m.value for m in at.markdown)
    assert "= **8.00**" in text and "divided by √d = 8.00 they have std **1.00**" in text
    assert "At d = 64 that is 8.00 against 1.00" in text and "tutorial), **22.6** against 1.00" in text
    h = dot_histograms(64, 20_000, 60, seed=0)
    assert abs(h.std_raw - 8) < 5 * theory.sample_std_error(64, 20_000)
    assert abs(h.std_scaled - 1) < 5 * theory.sample_std_error(64, 20_000) / math.sqrt(64)


def test_gradients_reading_states_how_fast_the_unscaled_gradients_fall() -> None:
    # issue 9, correction 1: the page said the median falls "geometrically" and that "the mean does
    # not fall"; -ln(median ||J||) grows like sqrt(d), and the means of ||J|| and dL/dlogits fall like
    # d^-1/2. Every number of the new sentence is checked against the sweep.
    at = run(sat_tab="Gradients")
    no_errors(at)
    text = " ".join(m.value for m in at.markdown)
    assert "geometrically," not in text.replace("not geometrically", "")
    assert "the **mean** does not fall" not in text
    ds = tuple(d for d in D_GRID if d <= get(at, "sat_dmax"))
    gs = ref_gradient_sweep(ds, get(at, "sat_keys"), get(at, "sat_batch"), level=get(at, "sat_level"),
                            seed=get(at, "seed"), dtype=DTYPES[get(at, "dtype")], device=page_device())
    ladder = [d for d in (16, 64, 256, 1024, 4096) if d in ds]
    med = {d: gs.stats[("unscaled", "jac")].median[ds.index(d)] for d in ladder}
    neg_log = [-math.log(med[d]) for d in ladder]
    assert ", ".join(f"{v:.2f}" for v in neg_log) + " at d = " + ", ".join(map(str, ladder)) in text
    steps = np.array(neg_log[1:]) / np.array(neg_log[:-1])
    assert 1.5 < steps.mean() < 2.7  # like sqrt(d) (x2 per fourfold d), not like d (x4)
    assert "grows like √d" in text and f"×{steps.mean():.1f} each time d grows fourfold" in text
    mean = {q: gs.stats[("unscaled", q)].mean for q in ("jac", "grad_scores", "grad_q", "grad_k")}
    a, b = ds.index(ladder[-2]), ds.index(ladder[-1])
    for q in ("jac", "grad_scores"):
        ratio = mean[q][b] / mean[q][a]
        assert 0.35 < ratio < 0.75  # d^-1/2 gives 0.5 per fourfold d
        assert f"×{ratio:.2f}" in text
    assert mean["grad_q"][b] > 0.5 and mean["grad_k"][b] > 0.5  # "stay of order one"
    assert f"({mean['grad_q'][b]:.2f} and {mean['grad_k'][b]:.2f} at d = {ladder[-1]})" in text
