"""Saturation & gradients: why attention divides by sqrt(d), shown and measured."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import numpy as np
import streamlit as st

from attncore import theory
from attncore.dot_products import D_GRID
from attncore.errors import AttnInputError
from attncore.gradients import (
    MAX_SCORES,
    SETTINGS,
    TemperatureRows,
    parse_scores,
    saturation_crossing,
    softmax_jacobian,
)
from attncore.overflow import OVERFLOW_DTYPES
from ui import cached, widgets
from ui.page import PageContext, run_page
from ui.saturation_real import REAL_PARAMS, real_model
from ui.state import Param, value
from ui.text import plain
from ui.views import saturation as view
from ui.views import saturation_text as words

if TYPE_CHECKING:
    import plotly.graph_objects as go

TABS = ("Why √d", "Saturation", "Gradients", "Real model")
SOURCE_SCORES = (9.2, -3.1, 8.8, -5.4, 1.2)  # the source's worked example (words.SOURCE), the default row
DEFAULT_SCORES = ", ".join(f"{v:g}" for v in SOURCE_SCORES)
ROW_KEYS = ("unscaled", "tau0.5", "tau1", "tau2")  # the rows of attncore.gradients.temperature_rows
ROW_LABELS = {"unscaled": "unscaled (τ = 1)", "tau0.5": "τ = 0.5·√d", "tau1": "τ = √d", "tau2": "τ = 2·√d"}

P_TAB = Param("sat_tab", TABS[0], options=TABS)
# 1 · Why sqrt(d)
P_D = Param("sat_d", 64, options=D_GRID)
P_N = Param("sat_n", 20_000, options=(1_000, 2_000, 5_000, 10_000, 20_000, 50_000, 100_000, 200_000,
                                      500_000, 1_000_000))
P_VQ = Param("sat_vq", 1.0, lo=0.25, hi=4.0)
P_VK = Param("sat_vk", 1.0, lo=0.25, hi=4.0)
P_BINS = Param("sat_bins", 60, lo=10, hi=200)
P_SAMEX = Param("sat_samex", True)
P_NS = Param("sat_ns", 500, options=(250, 500, 1_000, 2_000, 4_000))
# 2 · Saturation
P_SN = Param("sat_sn", 4, options=(2, 3, 4, 5, 8, 16, 32, 64, 128, 256, 512, 1024, 4096))
P_XMAX = Param("sat_xmax", 10.0, lo=2.0, hi=40.0)
P_LEVEL = Param("sat_level", 0.99, options=(0.9, 0.95, 0.99, 0.999))
P_SCORES = Param("sat_scores", DEFAULT_SCORES)
P_DEX = Param("sat_dex", 64, options=D_GRID)
# 3 · Gradients
P_JROW = Param("sat_jrow", "unscaled", options=ROW_KEYS)
P_KEYS = Param("sat_keys", 16, options=(2, 4, 8, 16, 32, 64, 128, 256, 512, 1024))
P_TRIALS = Param("sat_trials", 2_000, options=(250, 500, 1_000, 2_000, 4_000, 8_000))
P_SMAX = Param("sat_smax", 64.0, options=(4.0, 8.0, 16.0, 32.0, 64.0, 128.0))
P_BATCH = Param("sat_batch", 64, options=(16, 32, 64, 128, 256, 512))
P_DMAX = Param("sat_dmax", 1024, options=(64, 128, 256, 512, 1024, 2048, 4096))
P_STAT = Param("sat_stat", "median", options=("median", "mean"))
P_OX = Param("sat_ox", 100.0, options=(1.0, 5.0, 10.0, 11.0, 12.0, 50.0, 88.0, 89.0, 100.0, 500.0,
                                       709.0, 710.0, 1000.0))
PARAMS = (P_TAB, P_D, P_N, P_VQ, P_VK, P_BINS, P_SAMEX, P_NS, P_SN, P_XMAX, P_LEVEL, P_SCORES, P_DEX,
          P_JROW, P_KEYS, P_TRIALS, P_SMAX, P_BATCH, P_DMAX, P_STAT, P_OX, *REAL_PARAMS)


@contextmanager
def guarded() -> Iterator[None]:
    """Show an input or budget error in place of one section and let the rest of the page render."""
    try:
        yield
    except AttnInputError as exc:
        st.error(plain(exc), icon=":material/block:")


def chart(fig: go.Figure, name: str, where: Any = st) -> None:
    """Tag the figure for tests (``layout.meta.view = name``) and draw it under the key ``chart_<name>``."""
    fig.update_layout(meta={"view": name})
    where.plotly_chart(fig, key=f"chart_{name}")


def comma(v: int) -> str:
    return f"{v:,}"


# --------------------------------------------------------------------------- 1 · Why sqrt(d)


def why_sqrt_d(ctx: PageContext) -> None:
    st.markdown("q·k is a sum of d independent products, so **its variance grows linearly with d**; "
                "dividing by √d undoes exactly that, whatever the dimension.")
    st.latex(r"q\cdot k=\sum_{i=1}^{d} q_i k_i,\quad \operatorname{Var}(q\cdot k)=d\,\sigma_q^2\sigma_k^2,"
             r"\quad \operatorname{Var}\!\Big(\frac{q\cdot k}{\sqrt d}\Big)=\sigma_q^2\sigma_k^2,\quad"
             r"\text{kurtosis}=3+\frac{6}{d}")
    side = ctx.controls
    side.markdown("#### Dot products")
    d = widgets.select_slider(P_D, "Head dim d", where=side)
    n = widgets.select_slider(P_N, "Samples", fmt=comma, where=side)
    vq = widgets.slider(P_VQ, "Query variance σq²", step=0.05, where=side)
    vk = widgets.slider(P_VK, "Key variance σk²", step=0.05, where=side)
    bins = widgets.slider(P_BINS, "Bins", where=side)
    same_x = widgets.toggle(P_SAMEX, "Same x-axis for both histograms", where=side,
                            help="Draw the scaled histogram on the unscaled one's axis, to see how much "
                                 "narrower it is.")
    with guarded():
        res = cached.sat_dot_histograms(d, n, bins, vq, vk, ctx.seed, ctx.device, ctx.sample_dtype)
        h = res.value
        chart(view.dot_histogram_figure(h, vq, vk, same_x), "sat-hist")
        st.markdown(words.spread_sentence(h, d, n, vq, vk))
        widgets.csv_download(lambda: view.hist_frame(h, vq, vk), f"qk_histogram_d{d}.csv",
                             label="Download histogram (CSV)", key="dl_sat_hist")
        widgets.caption_compute(ctx.device_label, res.seconds,
                                f"{n:,} samples of q and k in {ctx.sample_dtype}; {h.outside:,} fell outside "
                                "±5 theoretical std and are not drawn. Error: ±1 standard error. Bars: "
                                "Monte Carlo draws; dashed: the Gaussian of the central limit theorem and "
                                "the exact law of a sum of products of Gaussians (variance-gamma), which "
                                "differ visibly only at small d.")
    st.markdown("##### The spread against d")
    ns = widgets.select_slider(P_NS, "Samples per d (sweep)", fmt=comma, where=ctx.controls)
    with guarded():
        sw = cached.sat_std_sweep(ns, vq, vk, ctx.seed, ctx.device, ctx.sample_dtype)
        chart(view.std_sweep_figure(sw.value, vq, vk, d), "sat-std")
        widgets.csv_download(lambda: view.std_frame(sw.value, vq, vk), "qk_std_vs_d.csv",
                             label="Download std vs d (CSV)", key="dl_sat_std")
        widgets.caption_compute(ctx.device_label, sw.seconds,
                                f"{ns:,} fresh samples for each d = 1 … 4096. Error bars: ±2 standard errors "
                                "from each sample's own fourth moment.")


# --------------------------------------------------------------------------- 2 · Saturation


def saturation(ctx: PageContext) -> None:
    st.markdown("Give softmax one score x and n − 1 zeros: as x grows the row **saturates** to one-hot, "
                "fast (with n = 4 the top weight passes 0.99 at x ≈ 5.7, under one unscaled standard "
                "deviation at d = 64).")
    st.latex(r"\mathrm{softmax}([x,0,\dots,0])_1=\frac{1}{1+(n-1)e^{-x}},\qquad "
             r"x^\ast=\ln\frac{\text{level}\,(n-1)}{1-\text{level}}")
    side = ctx.controls
    side.markdown("#### Saturation")
    n = widgets.select_slider(P_SN, "Entries n in the row", where=side)
    x_max = widgets.slider(P_XMAX, "Largest x", step=0.5, where=side)
    level = widgets.select_slider(P_LEVEL, "Saturation level", where=side,
                                  help="The top weight at which the row counts as saturated.")
    with guarded():
        res = cached.sat_saturation_curve(n, x_max)
        sc = res.value
        x_star = theory.saturation_threshold(n, level)
        crossing = saturation_crossing(sc.x, sc.top, level)
        chart(view.saturation_figure(sc, n, level, x_star, x_max), "sat-curve")
        m = st.columns(3)
        m[0].metric(f"x where the top weight reaches {level:g}",
                    "beyond the range" if crossing is None else f"{crossing:.3f}",
                    f"theory {x_star:.3f}", delta_color="off", delta_arrow="off",
                    help="Measured: linear interpolation on attncore's softmax. Theory: the closed form "
                         "above.")
        m[1].metric(f"top weight at x = {x_max:g}", f"{float(sc.top[-1]):.6f}")
        m[2].metric("‖J‖_F at x = 0 (uniform row)", f"{float(sc.jac_norm[0]):.4f}",
                    f"theory √(n−1)/n = {theory.uniform_row_jacobian_norm(n):.4f}", delta_color="off",
                    delta_arrow="off")
        widgets.csv_download(lambda: view.saturation_frame(sc), f"saturation_n{n}.csv",
                             label="Download curve (CSV)", key="dl_sat_curve")
        widgets.caption_compute(ctx.device_label, res.seconds,
                                f"{sc.x.numel()} rows of {n} entries in float64 through attncore's softmax.")
    st.markdown("##### A worked example, and what temperature does")
    st.markdown(
        f"The {words.SOURCE} scores five positions with [9.2, −3.1, 8.8, −5.4, 1.2], scores the size of an "
        "unscaled d = 64 dot product. Edit them; each row below is softmax(scores / τ): unscaled, then "
        "τ = 0.5√d, √d and 2√d. A smaller τ sharpens the row, a larger one flattens it."
    )
    side.markdown("#### Worked example")
    text = side.text_input(f"Scores (comma-separated, 2 to {MAX_SCORES})", key=P_SCORES.key,
                           help="Plain finite numbers within ±1,000,000, e.g. 9.2, -3.1, 8.8.")
    d_ex = widgets.select_slider(P_DEX, "d (the scaling is √d)", where=side)
    with guarded():
        scores = parse_scores(text)
        res = cached.sat_temperature_rows(tuple(scores), d_ex)
        rows = res.value
        if tuple(scores) == SOURCE_SCORES and d_ex == 64:
            source_check(rows)
        chart(view.rows_figure(rows, scores), "sat-rows")
        frame = view.rows_frame(rows, scores)
        widgets.table(frame, column_config={c: st.column_config.NumberColumn(format="%.4f")
                                            for c in frame.columns[2:]})
        widgets.csv_download(frame, f"temperature_rows_d{d_ex}.csv", label="Download rows (CSV)",
                             key="dl_sat_rows")
        widgets.caption_compute(ctx.device_label, res.seconds,
                                "Computed in float64 on the CPU. ‖J‖_F is the size of the row's softmax "
                                "Jacobian (see Gradients): it shrinks as the row saturates.")


def source_check(rows: TemperatureRows) -> None:
    """Compare the live numbers with what the source prints, and say where it is wrong (twice)."""
    st.info(words.source_check_text(rows), icon=":material/fact_check:")


# --------------------------------------------------------------------------- 3 · Gradients


def gradients(ctx: PageContext) -> None:
    st.markdown("Gradients reach the scores only through the softmax Jacobian diag(p) − ppᵀ, zero for a "
                "one-hot row: a saturated row passes (almost) nothing back.")
    st.latex(r"J=\frac{\partial p}{\partial s}=\operatorname{diag}(p)-pp^\top,\quad "
             r"\|J\|_F^2=\sum_i p_i^2-2\sum_i p_i^3+\Big(\sum_i p_i^2\Big)^2,\quad "
             r"\frac{\partial \ell}{\partial q_i}=\text{scale}\cdot K^\top J_i\,"
             r"\frac{\partial \ell}{\partial p_i}")
    jacobian_section(ctx)
    st.divider()
    scale_section(ctx)
    st.divider()
    depth_section(ctx)
    st.divider()
    overflow_section(ctx)


def jacobian_section(ctx: PageContext) -> None:
    st.markdown("##### The Jacobian of one row")
    ctx.controls.markdown("#### Jacobian")
    row = widgets.radio(P_JROW, "Row (the scores and d of the Saturation tab)", labels=ROW_LABELS,
                        where=ctx.controls)
    c = st.columns([2, 3])
    with guarded():
        try:
            scores = parse_scores(str(value(P_SCORES)))
        except AttnInputError as exc:
            raise AttnInputError(f"The scores set on the Saturation tab are not valid: {exc}") from exc
        d_ex = int(value(P_DEX))
        res = cached.sat_temperature_rows(tuple(scores), d_ex)
        i = ROW_KEYS.index(row)
        p = res.value.weights[i]  # (n,)
        jac = softmax_jacobian(p).numpy()  # (n, n)
        closed = float(res.value.jac_norm[i])
        c[0].metric("‖J‖_F (closed form)", f"{closed:.5f}",
                    f"materialised {float(np.linalg.norm(jac)):.5f}", delta_color="off", delta_arrow="off",
                    help="√(Σp² − 2Σp³ + (Σp²)²) against the norm of the n × n matrix itself.")
        c[0].metric("max weight", f"{float(res.value.max_weight[i]):.4f}")
        c[0].caption("Diagonal p(1 − p): " + ", ".join(f"{v:.3f}" for v in np.diag(jac)[:12])
                     + (" …" if len(scores) > 12 else "")
                     + f". Row: {res.value.labels[i]}, scores {', '.join(f'{s:g}' for s in scores[:8])}"
                     + (" …" if len(scores) > 8 else "") + f", d = {d_ex}.")
        chart(view.jacobian_figure(jac, scores), "sat-jacobian", where=c[1])
        with c[1]:
            widgets.csv_download(lambda: view.jacobian_frame(jac), "softmax_jacobian.csv",
                                 label="Download Jacobian (CSV)", key="dl_sat_jac")
            widgets.caption_compute(ctx.device_label, res.seconds, "float64, CPU.")


def scale_section(ctx: PageContext) -> None:
    st.markdown("##### ‖J‖ and the max weight against the logit scale")
    st.markdown(
        "Rows of n logits drawn from N(0, σ²): σ = 1 is scaled attention at any d, σ = √d unscaled "
        "attention at dimension d. At σ → 0 the row is flat and ‖J‖ is √(n−1)/n, small for many keys. "
        "**With more than four keys the norm is not monotonic:** it first grows as the row sharpens "
        "(the σ² term below), peaks, and then decays like 1/σ as the row turns one-hot. What keeps it "
        "from vanishing faster is rare near-ties between the top two logits, whose density at zero, "
        "f_G(0), sets that asymptote."
    )
    side = ctx.controls
    side.markdown("#### ‖J‖ against the logit scale")
    keys = widgets.select_slider(P_KEYS, "Keys n per row", where=side)
    trials = widgets.select_slider(P_TRIALS, "Rows (Monte Carlo)", fmt=comma, where=side)
    s_max = widgets.select_slider(P_SMAX, "Largest σ", fmt=lambda v: f"{v:g}", where=side)
    with guarded():
        res = cached.sat_scale_sweep(keys, trials, s_max, ctx.seed, ctx.device, ctx.sample_dtype)
        chart(view.scale_figure(res.value), "sat-jscale")
        widgets.csv_download(lambda: view.scale_frame(res.value), f"jacobian_vs_scale_n{keys}.csv",
                             label="Download (CSV)", key="dl_sat_jscale")
        widgets.caption_compute(ctx.device_label, res.seconds,
                                f"{trials:,} rows of {keys} standard-normal logits, reused for every σ; "
                                f"{ctx.sample_dtype}. Error bars: ±2 standard errors.")


def depth_section(ctx: PageContext) -> None:
    st.markdown("##### Against d: scaled vs unscaled, through attncore.attention")
    st.markdown(
        "Q, K, V ~ N(0, 1) with L = S = n and head dim d, pushed through `attncore.attention` twice: with "
        "scale 1/√d and with scale 1; the loss is a fixed random projection of the output and autograd "
        "gives ∂loss/∂Q and ∂loss/∂K. Scaled, every curve is flat in d. Unscaled, the **typical** row "
        "(median) loses its gradient fast while the **means** hold on: a few rows with near-tied top "
        "scores still get large gradients, so training learns from a handful of rows, which is noisy "
        "and unstable. Switch the statistic to see both; the numbers below the chart say how fast."
    )
    side = ctx.controls
    side.markdown("#### Against d")
    batch = widgets.select_slider(P_BATCH, "Batch (independent draws)", where=side)
    d_max = widgets.select_slider(P_DMAX, "Largest d", where=side)
    stat = widgets.radio(P_STAT, "Statistic", where=side,
                         labels={"median": "median, band = 25–75%", "mean": "mean, band = ±2 SE"})
    keys, level = int(value(P_KEYS)), float(value(P_LEVEL))
    with guarded():
        res = cached.sat_gradient_sweep(d_max, keys, batch, level, ctx.seed, ctx.device, ctx.dtype)
        gs = res.value
        last = -1
        m = st.columns(3)
        for col, setting in zip(m[:2], SETTINGS, strict=True):
            col.metric(f"{setting}: rows saturated at d = {gs.d[last]}",
                       f"{100 * gs.stats[(setting, 'saturated')].mean[last]:.1f}%",
                       help=f"Share of rows whose max weight is at least {level:g} (set on the "
                            "Saturation tab).")
        med = {s: gs.stats[(s, "grad_q")].median[last] for s in SETTINGS}
        m[2].metric(f"median ‖∂loss/∂q‖ at d = {gs.d[last]}, unscaled ÷ scaled",
                    f"{med['unscaled'] / med['scaled']:.2g}" if med["scaled"] > 0 else "n/a")
        chart(view.depth_figure(gs, stat), "sat-grad")
        st.markdown(words.depth_reading(view.unscaled_decay(gs)))
        widgets.csv_download(lambda: view.depth_frame(gs), "gradients_vs_d.csv", label="Download (CSV)",
                             key="dl_sat_grad")
        check = (f" Autograd's ∂loss/∂Q and ∂loss/∂K match the chain rule through J = diag(p) − ppᵀ to a "
                 f"relative {gs.chain_rule_error:.1e}." if ctx.dtype in ("float32", "float64") else "")
        widgets.caption_compute(ctx.device_label, res.seconds,
                                f"{batch} × {keys} query rows per d, n = {keys} keys (set above), inputs in "
                                f"{ctx.dtype}; values at exactly 0 are drawn at {view.LOG_FLOOR:g} on log "
                                "axes."
                                + check)


def overflow_section(ctx: PageContext) -> None:
    st.markdown("##### Overflow: naive vs stable softmax")
    st.markdown(
        "Saturation is a property of the maths; overflow is a property of the number format. The textbook "
        "softmax computes eˣ first, and eˣ is infinite once x passes the log of the largest finite number: "
        + ", ".join(f"**{theory.exp_overflow_logit(t):.2f}** in {t}" for t in OVERFLOW_DTYPES)
        + ". Then inf/inf = NaN. Subtracting the row's maximum first keeps every exponent ≤ 0 and gives "
        "the same weights, so it never overflows. The row here is [x, 0, 0, 0]."
    )
    st.latex(r"\mathrm{softmax}(x)_i=\frac{e^{x_i-m}}{\sum_j e^{x_j-m}},\qquad m=\max_j x_j")
    ctx.controls.markdown("#### Overflow")
    x = widgets.select_slider(P_OX, "x for the table", fmt=lambda v: f"{v:g}", where=ctx.controls)
    with guarded():
        res = cached.sat_overflow_sweep(4, ctx.device)
        chart(view.overflow_figure(res.value), "sat-overflow")
        widgets.csv_download(lambda: view.overflow_frame(res.value), "softmax_overflow.csv",
                             label="Download sweep (CSV)", key="dl_sat_overflow")
        widgets.caption_compute(ctx.device_label, res.seconds,
                                f"{len(res.value.x)} values of x from 1 to 10,000 in four dtypes. Error is "
                                "the largest |difference| from float64 stable softmax of the same rounded "
                                "logits; exact zeros are drawn at 1e-20.")
        rows = cached.sat_overflow_rows(float(x), 4)
        st.table(view.overflow_table(rows).set_index(["dtype", "method"]))


# --------------------------------------------------------------------------- page


def body(ctx: PageContext) -> None:
    st.title("Saturation & gradients")
    st.caption("Why attention divides by √d: the dot product's spread grows like √d, large scores saturate "
               "the softmax, and a saturated softmax passes almost no gradient back. Measured live, drawn "
               "against closed forms.")
    tabs = st.tabs(list(TABS), key=P_TAB.key, on_change="rerun")
    for tab, render in zip(tabs, (why_sqrt_d, saturation, gradients, real_model), strict=True):
        if tab.open:
            with tab:
                render(ctx)


run_page(title="Saturation & gradients", icon=":material/speed:", params=PARAMS, body=body,
         oom_hint="Lower the samples, trials, batch or the largest d.")
