"""Saturation & gradients: why attention divides by sqrt(d), shown and measured."""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
import streamlit as st

from attncore import theory
from attncore.errors import AttnInputError
from attncore.gradients import (
    D_GRID,
    GRADIENT_QUANTITIES,
    MAX_SCORES,
    OVERFLOW_DTYPES,
    SETTINGS,
    DotHistograms,
    GradientSweep,
    OverflowSweep,
    SaturationCurve,
    ScaleSweep,
    StdSweep,
    TemperatureRows,
    parse_scores,
    saturation_crossing,
    softmax_jacobian,
)
from ui import cached, figures, widgets
from ui.figures import PALETTE, Band, Curve, Histogram, Marker, Panel
from ui.page import PageContext, run_page
from ui.state import Param, value

if TYPE_CHECKING:
    import plotly.graph_objects as go

TABS = ("Why √d", "Saturation", "Gradients")
SOURCE_SCORES = (9.2, -3.1, 8.8, -5.4, 1.2)  # source text 001's worked example, the default row
DEFAULT_SCORES = ", ".join(f"{v:g}" for v in SOURCE_SCORES)
SOURCE_SCALED = (0.31, 0.07, 0.30, 0.05, 0.12)  # what source text 001 prints for the scaled row
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
P_SAMEX = Param("sat_samex", False)
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
          P_JROW, P_KEYS, P_TRIALS, P_SMAX, P_BATCH, P_DMAX, P_STAT, P_OX)

SCALED_C, UNSCALED_C, THEORY_C, EXACT_C = PALETTE[0], PALETTE[5], PALETTE[1], PALETTE[2]
DTYPE_C = dict(zip(OVERFLOW_DTYPES, (PALETTE[5], PALETTE[3], PALETTE[0], PALETTE[2]), strict=True))
LOG_FLOOR = 1e-20  # log-axis floor for values that are exactly 0 (underflow; the CSV keeps the 0)


@contextmanager
def guarded() -> Iterator[None]:
    """Show an input or budget error in place of one section and let the rest of the page render."""
    try:
        yield
    except AttnInputError as exc:
        st.error(str(exc), icon=":material/block:")


def chart(fig: go.Figure, view: str, where: Any = st) -> None:
    """Tag the figure for tests (``layout.meta.view``) and draw it under the key ``chart_<view>``."""
    fig.update_layout(meta={"view": view})
    where.plotly_chart(fig, key=f"chart_{view}")


def comma(v: int) -> str:
    return f"{v:,}"


def mc_dtype(ctx: PageContext) -> str:
    return "float64" if ctx.dtype == "float64" else "float32"


# --------------------------------------------------------------------------- 1 · Why sqrt(d)


def why_sqrt_d(ctx: PageContext) -> None:
    st.markdown(
        "Draw a query and a key with independent zero-mean entries and take their dot product. It is a "
        "sum of d independent products, so its variance adds up: **it grows linearly with d**, and its "
        "spread like √d. Dividing by √d undoes exactly that, whatever the dimension. Below, the "
        "histograms are Monte Carlo draws; the dashed curves are the Gaussian of the central limit "
        "theorem and the exact law of a sum of products of Gaussians (a variance-gamma density), "
        "which differ visibly only at small d."
    )
    st.latex(r"q\cdot k=\sum_{i=1}^{d} q_i k_i,\quad \operatorname{Var}(q\cdot k)=d\,\sigma_q^2\sigma_k^2,"
             r"\quad \operatorname{Var}\!\Big(\frac{q\cdot k}{\sqrt d}\Big)=\sigma_q^2\sigma_k^2,\quad"
             r"\text{kurtosis}=3+\frac{6}{d}")
    c = st.columns([1.2, 1.2, 1, 1, 1])
    d = widgets.select_slider(P_D, "Head dim d", where=c[0])
    n = widgets.select_slider(P_N, "Samples", fmt=comma, where=c[1])
    vq = widgets.slider(P_VQ, "Query variance σq²", step=0.05, where=c[2])
    vk = widgets.slider(P_VK, "Key variance σk²", step=0.05, where=c[3])
    bins = widgets.slider(P_BINS, "Bins", where=c[4])
    same_x = widgets.toggle(P_SAMEX, "Same x-axis for both histograms",
                            help="Draw the scaled histogram on the unscaled one's axis, to see how much "
                                 "narrower it is.")
    with guarded():
        res = cached.sat_dot_histograms(d, n, bins, vq, vk, ctx.seed, ctx.device, mc_dtype(ctx))
        h = res.value
        sd_theory, sd_scaled = theory.dot_product_std(d, vq, vk), math.sqrt(vq * vk)
        st.markdown(
            f"**d = {d}:** unscaled scores have std √(d·σq²·σk²) = **{sd_theory:#.3g}** (measured "
            f"{h.std_raw:#.3g} ± {h.se_raw:.2g} from {n:,} samples); divided by √d = {math.sqrt(d):#.3g} "
            f"they have std **{sd_scaled:#.3g}** (measured {h.std_scaled:#.3g} ± {h.se_scaled:.2g}). "
            f"At d = 64 that is {theory.dot_product_std(64, vq, vk):#.3g} against {sd_scaled:#.3g}; at "
            f"d = 512, the source text's exercise, **{theory.dot_product_std(512, vq, vk):.1f}** against "
            f"{sd_scaled:#.3g} (√512 ≈ 22.6 for unit variances)."
        )
        chart(dot_histogram_figure(h, vq, vk, same_x), "sat-hist")
        widgets.csv_download(lambda: hist_frame(h, vq, vk), f"qk_histogram_d{d}.csv",
                             label="Download histogram (CSV)", key="dl_sat_hist")
        widgets.caption_compute(ctx.device_label, res.seconds,
                                f"{n:,} samples of q and k in {mc_dtype(ctx)}; {h.outside:,} fell outside "
                                "±5 theoretical std and are not drawn. Error: ±1 standard error.")
    st.markdown("##### The spread against d")
    ns = widgets.select_slider(P_NS, "Samples per d (sweep)", fmt=comma)
    with guarded():
        sw = cached.sat_std_sweep(ns, vq, vk, ctx.seed, ctx.device, mc_dtype(ctx))
        chart(std_sweep_figure(sw.value, vq, vk, d), "sat-std")
        widgets.csv_download(lambda: std_frame(sw.value, vq, vk), "qk_std_vs_d.csv",
                             label="Download std vs d (CSV)", key="dl_sat_std")
        widgets.caption_compute(ctx.device_label, sw.seconds,
                                f"{ns:,} fresh samples for each d = 1 … 4096. Error bars: ±2 standard errors "
                                "from each sample's own fourth moment.")


def _densities(h: DotHistograms, vq: float, vk: float) -> dict[str, np.ndarray]:
    """Theory on a fine grid (no point at 0, where the d = 1 density is infinite)."""
    xs = np.linspace(h.edges_raw[0], h.edges_raw[-1], 800)
    root = math.sqrt(h.d)
    exact = np.asarray(theory.dot_product_density(xs, h.d, vq, vk))
    return {"x": xs, "normal": np.asarray(theory.normal_density(xs, h.d * vq * vk)), "exact": exact,
            "x_scaled": xs / root, "normal_scaled": np.asarray(theory.normal_density(xs / root, vq * vk)),
            "exact_scaled": exact * root}


def dot_histogram_figure(h: DotHistograms, vq: float, vk: float, same_x: bool) -> go.Figure:
    t = _densities(h, vq, vk)
    exact_line = {"color": EXACT_C, "dash": "dot", "width": 2.5}
    panels = [
        Panel(f"q·k, d = {h.d} (unscaled)",
              hist=Histogram("measured", h.edges_raw, h.density_raw, PALETTE[4]),
              curves=[Curve("N(0, d·σq²·σk²)", t["x"], t["normal"], theory=True, color=THEORY_C),
                      Curve("exact (variance-gamma)", t["x"], t["exact"], theory=True, color=EXACT_C,
                            extra={"line": exact_line})],
              x_title="q·k", y_title="density"),
        Panel(f"q·k / √d (scaled by 1/{math.sqrt(h.d):.3g})",
              hist=Histogram("measured", h.edges_scaled, h.density_scaled, PALETTE[4]),
              curves=[Curve("N(0, σq²·σk²)", t["x_scaled"], t["normal_scaled"], theory=True, color=THEORY_C),
                      Curve("exact (variance-gamma)", t["x_scaled"], t["exact_scaled"], theory=True,
                            color=EXACT_C, extra={"line": exact_line})],
              x_title="q·k / √d", y_title="density"),
    ]
    return figures.panel_grid(panels, cols=2, height=380, shared_x=same_x)


def hist_frame(h: DotHistograms, vq: float, vk: float) -> pd.DataFrame:
    centres = (h.edges_raw[:-1] + h.edges_raw[1:]) / 2
    root = math.sqrt(h.d)
    return pd.DataFrame({
        "bin_left": h.edges_raw[:-1], "bin_right": h.edges_raw[1:], "density_measured": h.density_raw,
        "density_normal": theory.normal_density(centres, h.d * vq * vk),
        "density_exact": theory.dot_product_density(centres, h.d, vq, vk),
        "scaled_bin_left": h.edges_scaled[:-1], "scaled_bin_right": h.edges_scaled[1:],
        "scaled_density_measured": h.density_scaled,
        "scaled_density_normal": theory.normal_density(centres / root, vq * vk),
    })


def std_sweep_figure(sw: StdSweep, vq: float, vk: float, d: int) -> go.Figure:
    grid = np.geomspace(1, D_GRID[-1], 120)
    s = math.sqrt(vq * vk)
    panel = Panel(
        "std of the scores against d",
        curves=[Curve("measured std(q·k)", sw.d, sw.std_raw, err=2 * sw.se_raw, color=UNSCALED_C),
                Curve("√(d·σq²·σk²)", grid, theory.dot_product_std(grid, vq, vk), theory=True,
                      color=UNSCALED_C),
                Curve("measured std(q·k/√d)", sw.d, sw.std_scaled, err=2 * sw.se_scaled, color=SCALED_C),
                Curve("σq·σk", grid, np.full_like(grid, s), theory=True, color=SCALED_C)],
        markers=[Marker(d, f" d = {d}")], x_title="head dim d", y_title="std", log_x=True, log_y=True)
    return figures.panel_grid([panel], cols=1, height=380).update_yaxes(dtick=1)  # label decades only


def std_frame(sw: StdSweep, vq: float, vk: float) -> pd.DataFrame:
    return pd.DataFrame({"d": sw.d, "std_raw": sw.std_raw, "se_raw": sw.se_raw,
                         "std_raw_theory": theory.dot_product_std(sw.d, vq, vk), "std_scaled": sw.std_scaled,
                         "se_scaled": sw.se_scaled, "std_scaled_theory": math.sqrt(vq * vk),
                         "samples": sw.samples})


# --------------------------------------------------------------------------- 2 · Saturation


def saturation(ctx: PageContext) -> None:
    st.markdown(
        "Give softmax one score x and n − 1 zeros. As x grows the top weight heads to 1 and every other "
        "weight to 0: the row **saturates** to one-hot. It gets there fast. With n = 4 the top weight "
        "passes 0.99 at x ≈ 5.7, under one unscaled standard deviation at d = 64."
    )
    st.latex(r"\mathrm{softmax}([x,0,\dots,0])_1=\frac{1}{1+(n-1)e^{-x}},\qquad "
             r"x^\ast=\ln\frac{\text{level}\,(n-1)}{1-\text{level}}")
    c = st.columns(3)
    n = widgets.select_slider(P_SN, "Entries n in the row", where=c[0])
    x_max = widgets.slider(P_XMAX, "Largest x", step=0.5, where=c[1])
    level = widgets.select_slider(P_LEVEL, "Saturation level", where=c[2],
                                  help="The top weight at which the row counts as saturated.")
    with guarded():
        res = cached.sat_saturation_curve(n, x_max)
        sc = res.value
        x_star = theory.saturation_threshold(n, level)
        crossing = saturation_crossing(sc.x, sc.top, level)
        m = st.columns(3)
        m[0].metric(f"x where the top weight reaches {level:g}",
                    "beyond the range" if crossing is None else f"{crossing:.3f}",
                    f"theory {x_star:.3f}", delta_color="off",
                    help="Measured: linear interpolation on attncore's softmax. Theory: the closed form "
                         "above.")
        m[1].metric(f"top weight at x = {x_max:g}", f"{float(sc.top[-1]):.6f}")
        m[2].metric("‖J‖_F at x = 0 (uniform row)", f"{float(sc.jac_norm[0]):.4f}",
                    f"theory √(n−1)/n = {theory.uniform_row_jacobian_norm(n):.4f}", delta_color="off")
        chart(saturation_figure(sc, n, level, x_star, x_max), "sat-curve")
        widgets.csv_download(lambda: saturation_frame(sc), f"saturation_n{n}.csv",
                             label="Download curve (CSV)", key="dl_sat_curve")
        widgets.caption_compute(ctx.device_label, res.seconds,
                                f"{sc.x.numel()} rows of {n} entries in float64 through attncore's softmax.")
    st.markdown("##### A worked example, and what temperature does")
    st.markdown(
        "Source text 001 scores five positions with [9.2, −3.1, 8.8, −5.4, 1.2], scores the size of an "
        "unscaled d = 64 dot product. Edit them; each row below is softmax(scores / τ): unscaled, then "
        "τ = 0.5√d, √d and 2√d. A smaller τ sharpens the row, a larger one flattens it."
    )
    c = st.columns([3, 1])
    text = c[0].text_input(f"Scores (comma-separated, 2 to {MAX_SCORES})", key=P_SCORES.key,
                           help="Plain finite numbers within ±1,000,000, e.g. 9.2, -3.1, 8.8.")
    d_ex = widgets.select_slider(P_DEX, "d (the scaling is √d)", where=c[1])
    with guarded():
        scores = parse_scores(text)
        res = cached.sat_temperature_rows(tuple(scores), d_ex)
        rows = res.value
        if tuple(scores) == SOURCE_SCORES and d_ex == 64:
            source_check(rows)
        positions = [f"{i}: {s:g}" for i, s in enumerate(scores)]
        fig = figures.grouped_bars(positions, list(zip(rows.labels, rows.weights.numpy(), strict=True)),
                                   x_title="position: score", y_title="weight", height=340)
        chart(fig, "sat-rows")
        frame = rows_frame(rows, scores)
        st.dataframe(frame, hide_index=True, width="stretch",
                     column_config={c: st.column_config.NumberColumn(format="%.4f")
                                    for c in frame.columns[2:]})
        widgets.csv_download(frame, f"temperature_rows_d{d_ex}.csv", label="Download rows (CSV)",
                             key="dl_sat_rows")
        widgets.caption_compute(ctx.device_label, res.seconds,
                                "Computed in float64 on the CPU. ‖J‖_F is the size of the row's softmax "
                                "Jacobian (see Gradients): it shrinks as the row saturates.")


def source_check(rows: TemperatureRows) -> None:
    """Compare the live numbers with what source text 001 prints, and say where it is wrong."""
    unscaled, scaled = rows.weights[0].tolist(), rows.weights[2].tolist()
    fmt = lambda xs: "[" + ", ".join(f"{x:.3f}" for x in xs) + "]"  # noqa: E731
    st.info(
        f"**Checked against the source.** Unscaled, attncore gives {fmt(unscaled)}, as source text 001 "
        f"prints. Divided by √64 = 8 it gives **{fmt(scaled)}** (sum {sum(scaled):.3f}); the source prints "
        f"{fmt(SOURCE_SCALED)}, which sums to {sum(SOURCE_SCALED):.2f} and so cannot be a softmax row.",
        icon=":material/fact_check:")


def rows_frame(rows: TemperatureRows, scores: list[float]) -> pd.DataFrame:
    df = pd.DataFrame(rows.weights.numpy(), columns=[f"p{i}" for i in range(len(scores))])
    df.insert(0, "divisor τ", rows.divisors)
    df.insert(0, "row", rows.labels)
    df["entropy (nats)"] = rows.entropy.numpy()
    df["max weight"] = rows.max_weight.numpy()
    df["‖J‖_F"] = rows.jac_norm.numpy()
    return df


def saturation_figure(sc: SaturationCurve, n: int, level: float, x_star: float,
                      x_max: float) -> go.Figure:
    xs = np.linspace(0.0, x_max, 400)
    top, other = theory.saturation_top_weight(xs, n), theory.saturation_other_weight(xs, n)
    jac = theory.saturation_jacobian_norm(xs, n)
    x = sc.x.numpy()
    panel = Panel(
        f"softmax([x, 0, …, 0]) with n = {n}",
        curves=[Curve("top weight (measured)", x, sc.top.numpy(), color=SCALED_C),
                Curve("top weight: 1/(1+(n−1)e^(−x))", xs, top, theory=True, color=SCALED_C),
                Curve("each other weight (measured)", x, sc.other.numpy(), color=UNSCALED_C),
                Curve("each other weight: 1/(eˣ+n−1)", xs, other, theory=True, color=UNSCALED_C),
                Curve("‖J‖_F (measured)", x, sc.jac_norm.numpy(), color=EXACT_C),
                Curve("‖J‖_F closed form", xs, jac, theory=True, color=EXACT_C),
                Curve(f"level {level:g}", [0.0, x_max], [level, level], theory=True, color=PALETTE[7])],
        markers=[Marker(x_star, f" x* = {x_star:.2f}", y=0.55)] if x_star <= x_max else [],
        x_title="x (the one large score)", y_title="weight / norm", y_range=(0.0, 1.02))
    return figures.panel_grid([panel], cols=1, height=400)


def saturation_frame(sc: SaturationCurve) -> pd.DataFrame:
    x = sc.x.numpy()
    return pd.DataFrame({"x": x, "top_weight": sc.top.numpy(),
                         "top_weight_theory": theory.saturation_top_weight(x, sc.n),
                         "other_weight": sc.other.numpy(), "jacobian_frobenius": sc.jac_norm.numpy(),
                         "jacobian_frobenius_theory": theory.saturation_jacobian_norm(x, sc.n)})


# --------------------------------------------------------------------------- 3 · Gradients


def gradients(ctx: PageContext) -> None:
    st.markdown(
        "Gradients reach the scores only through the softmax Jacobian. For a row of weights p it is "
        "diag(p) − ppᵀ: zero for a one-hot row, and small for a flat row over many keys. Every "
        "gradient with respect to a query or a key is that matrix times something, so a saturated row "
        "passes (almost) nothing back."
    )
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
    c = st.columns([2, 3])
    row = widgets.radio(P_JROW, "Row (the scores and d of the Saturation tab)", labels=ROW_LABELS,
                        where=c[0])
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
                    f"materialised {float(np.linalg.norm(jac)):.5f}", delta_color="off",
                    help="√(Σp² − 2Σp³ + (Σp²)²) against the norm of the n × n matrix itself.")
        c[0].metric("max weight", f"{float(res.value.max_weight[i]):.4f}")
        c[0].caption("Diagonal p(1 − p): " + ", ".join(f"{v:.3f}" for v in np.diag(jac)[:12])
                     + (" …" if len(scores) > 12 else "")
                     + f". Row: {res.value.labels[i]}, scores {', '.join(f'{s:g}' for s in scores[:8])}"
                     + (" …" if len(scores) > 8 else "") + f", d = {d_ex}.")
        labels = [f"{s:g}" for s in scores]
        lim = max(float(np.abs(jac).max()), 1e-12)
        fig = figures.heatmap(jac, diverging=True, value_name="∂p_i/∂s_j", x_labels=labels, y_labels=labels,
                              zmin=-lim, zmax=lim, height=360, x_title="score s_j", y_title="weight p_i")
        fig.update_traces(hovertemplate="weight %{y}<br>score %{x}<br>∂p_i/∂s_j %{z:.4g}<extra></extra>")
        chart(fig, "sat-jacobian", where=c[1])
        with c[1]:
            widgets.csv_download(lambda: jacobian_frame(jac), "softmax_jacobian.csv",
                                 label="Download Jacobian (CSV)", key="dl_sat_jac")
            widgets.caption_compute(ctx.device_label, res.seconds, "float64, CPU.")


def jacobian_frame(jac: np.ndarray) -> pd.DataFrame:
    df = pd.DataFrame(jac, columns=[f"d_by_s{j}" for j in range(jac.shape[1])])
    df.insert(0, "weight", [f"p{i}" for i in range(jac.shape[0])])
    return df


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
    c = st.columns(3)
    keys = widgets.select_slider(P_KEYS, "Keys n per row", where=c[0])
    trials = widgets.select_slider(P_TRIALS, "Rows (Monte Carlo)", fmt=comma, where=c[1])
    s_max = widgets.select_slider(P_SMAX, "Largest σ", fmt=lambda v: f"{v:g}", where=c[2])
    with guarded():
        res = cached.sat_scale_sweep(keys, trials, s_max, ctx.seed, ctx.device, mc_dtype(ctx))
        chart(scale_figure(res.value), "sat-jscale")
        widgets.csv_download(lambda: scale_frame(res.value), f"jacobian_vs_scale_n{keys}.csv",
                             label="Download (CSV)", key="dl_sat_jscale")
        widgets.caption_compute(ctx.device_label, res.seconds,
                                f"{trials:,} rows of {keys} standard-normal logits, reused for every σ; "
                                f"{mc_dtype(ctx)}. Error bars: ±2 standard errors.")


def scale_figure(sw: ScaleSweep) -> go.Figure:
    n, sig = sw.n, sw.sigma
    small = np.geomspace(sig[0], min(0.6, sig[-1]), 40)
    large = np.geomspace(min(2 * math.sqrt(2 * math.log(n)) + 1.0, sig[-1]), sig[-1], 40)
    refs = [Marker(1.0, " σ = 1: scaled"), Marker(8.0, " √64"), Marker(math.sqrt(512), " √512")]
    refs = [m for m in refs if m.x <= sig[-1]]
    panels = [
        Panel("E‖J‖_F", curves=[
            Curve("measured", sig, sw.jac_mean, err=2 * sw.jac_se, color=SCALED_C),
            Curve("small σ: √((n−1)/n²·(1+σ²(n−4)/n))", small, theory.jacobian_norm_small_scale(small, n),
                  theory=True, color=THEORY_C),
            Curve("large σ: f_G(0)/σ", large, theory.jacobian_norm_large_scale(large, n), theory=True,
                  color=EXACT_C),
            Curve("flat row √(n−1)/n", [sig[0], sig[-1]], [theory.uniform_row_jacobian_norm(n)] * 2,
                  theory=True, color=PALETTE[7])],
            markers=refs, x_title="logit scale σ", y_title="‖J‖_F", log_x=True),
        Panel("E[max weight]", curves=[
            Curve("measured", sig, sw.max_mean, err=2 * sw.max_se, color=SCALED_C),
            Curve("small σ: (1 + σ·E[max z])/n", small, theory.max_weight_small_scale(small, n), theory=True,
                  color=THEORY_C),
            Curve("large σ: 1 − ln2·f_G(0)/σ", large, theory.max_weight_large_scale(large, n), theory=True,
                  color=EXACT_C)],
            markers=refs, x_title="logit scale σ", y_title="max weight", log_x=True, y_range=(0.0, 1.02)),
    ]
    return figures.panel_grid(panels, cols=2, height=400)


def scale_frame(sw: ScaleSweep) -> pd.DataFrame:
    return pd.DataFrame({"sigma": sw.sigma, "jacobian_mean": sw.jac_mean, "jacobian_se": sw.jac_se,
                         "max_weight_mean": sw.max_mean, "max_weight_se": sw.max_se, "keys": sw.n,
                         "rows": sw.trials})


PANEL_ORDER = ("jac", "max", "saturated", "grad_scores", "grad_q", "grad_k")
LOG_PANELS = {"jac", "grad_scores", "grad_q", "grad_k"}


def depth_section(ctx: PageContext) -> None:
    st.markdown("##### Against d: scaled vs unscaled, through attncore.attention")
    st.markdown(
        "Q, K, V ~ N(0, 1) with L = S = n and head dim d, pushed through `attncore.attention` twice: with "
        "scale 1/√d and with scale 1; the loss is a fixed random projection of the output and autograd "
        "gives ∂loss/∂Q and ∂loss/∂K. Scaled, every curve is flat in d. Unscaled, the **typical** row "
        "(median) loses its gradient geometrically, but the **mean** does not fall: a few rows with "
        "near-tied top scores still get large gradients. Training then learns from a handful of rows, "
        "which is noisy and unstable. Switch the statistic to see both."
    )
    c = st.columns(3)
    batch = widgets.select_slider(P_BATCH, "Batch (independent draws)", where=c[0])
    d_max = widgets.select_slider(P_DMAX, "Largest d", where=c[1])
    stat = widgets.radio(P_STAT, "Statistic", where=c[2],
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
        chart(depth_figure(gs, stat), "sat-grad")
        widgets.csv_download(lambda: depth_frame(gs), "gradients_vs_d.csv", label="Download (CSV)",
                             key="dl_sat_grad")
        check = (f" Autograd's ∂loss/∂Q and ∂loss/∂K match the chain rule through J = diag(p) − ppᵀ to a "
                 f"relative {gs.chain_rule_error:.1e}." if ctx.dtype in ("float32", "float64") else "")
        widgets.caption_compute(ctx.device_label, res.seconds,
                                f"{batch} × {keys} query rows per d, n = {keys} keys (set above), inputs in "
                                f"{ctx.dtype}; values at exactly 0 are drawn at {LOG_FLOOR:g} on log axes."
                                + check)


def depth_figure(gs: GradientSweep, stat: str) -> go.Figure:
    panels = []
    asym = np.geomspace(64, gs.d[-1], 30) if gs.d[-1] >= 64 else None
    for q in PANEL_ORDER:
        curves, bands = [], []
        for setting, color in zip(SETTINGS, (SCALED_C, UNSCALED_C), strict=True):
            s = gs.stats[(setting, q)]
            if stat == "median" and q != "saturated":
                y, lo, hi = s.median, s.q25, s.q75
            else:
                y, lo, hi = s.mean, s.mean - 2 * s.se, s.mean + 2 * s.se
            if q in LOG_PANELS:
                y, lo, hi = (np.maximum(a, LOG_FLOOR) for a in (y, lo, hi))
            curves.append(Curve(setting, gs.d, y, color=color))
            bands.append(Band(f"{setting} band", gs.d, lo, hi, color))
        if stat == "mean" and asym is not None and q in ("jac", "max"):
            f = theory.unscaled_jacobian_norm_large_d if q == "jac" else theory.unscaled_max_weight_large_d
            curves.append(Curve("unscaled, large d: f_G(0)·E[1/|q|]", asym, f(asym, gs.keys), theory=True,
                                color=EXACT_C))
        title = GRADIENT_QUANTITIES[q].replace("level", f"{gs.level:g}")
        panels.append(Panel(title, curves=curves, bands=bands, x_title="head dim d", log_x=True,
                            log_y=q in LOG_PANELS,
                            y_range=(0.0, 1.02) if q in ("max", "saturated") else None))
    return figures.panel_grid(panels, cols=3, height=640)


def depth_frame(gs: GradientSweep) -> pd.DataFrame:
    cols: dict[str, np.ndarray] = {"d": gs.d}
    for (setting, q), s in gs.stats.items():
        for stat in ("mean", "se", "median", "q25", "q75"):
            cols[f"{setting}_{q}_{stat}"] = getattr(s, stat)
    return pd.DataFrame(cols)


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
    x = widgets.select_slider(P_OX, "x for the table", fmt=lambda v: f"{v:g}")
    with guarded():
        res = cached.sat_overflow_sweep(4, ctx.device)
        chart(overflow_figure(res.value), "sat-overflow")
        widgets.csv_download(lambda: overflow_frame(res.value), "softmax_overflow.csv",
                             label="Download sweep (CSV)", key="dl_sat_overflow")
        widgets.caption_compute(ctx.device_label, res.seconds,
                                f"{len(res.value.x)} values of x from 1 to 10,000 in four dtypes. Error is "
                                "the largest |difference| from float64 stable softmax of the same rounded "
                                "logits; exact zeros are drawn at 1e-20.")
        rows = cached.sat_overflow_rows(float(x), 4)
        st.dataframe(pd.DataFrame([{
            "dtype": r.dtype, "method": r.method, "eˣ in dtype": r.exp_x,
            "weights": "[" + ", ".join("nan" if math.isnan(w) else f"{w:.4f}" for w in r.weights) + "]",
            "row sum": r.row_sum, "max |error|": r.max_error, "finite": "yes" if r.finite else "NO",
        } for r in rows]), hide_index=True, width="stretch")


NAN_ROW = dict(zip(OVERFLOW_DTYPES, (1e2, 1e3, 1e4, 1e5), strict=True))  # where ✕ marks a NaN, per dtype


def overflow_figure(ov: OverflowSweep) -> go.Figure:
    """Error against x per dtype; a NaN output is an ✕ in its dtype's row above the impossible error 1."""
    panels = []
    for method, errs in (("naive eˣ/Σeˣ", ov.naive_error), ("stable, max subtracted", ov.stable_error)):
        curves = []
        for name, e in zip(ov.dtypes, errs, strict=True):
            curves.append(Curve(name, ov.x, np.maximum(e, 1e-20), color=DTYPE_C[name],
                                extra={"mode": "lines"}))
            bad = np.isnan(e)
            if bad.any():
                curves.append(Curve(f"{name}: NaN output", ov.x[bad], np.full(int(bad.sum()), NAN_ROW[name]),
                                    color=DTYPE_C[name],
                                    extra={"mode": "markers", "marker": {"symbol": "x", "size": 6}}))
        marks = [Marker(theory.exp_overflow_logit(t), f" ln max {lab}", DTYPE_C[t], y=0.45)
                 for t, lab in (("float16", "f16"), ("float32", "bf16/f32"), ("float64", "f64"))]
        panels.append(Panel(method, curves=curves, markers=marks, x_title="largest logit x",
                            y_title="max |error|  (✕ above 1: NaN)", log_x=True, log_y=True,
                            y_range=(1e-21, 1e6)))
    fig = figures.panel_grid(panels, cols=2, height=420)
    return fig.update_yaxes(tickvals=[1e-20, 1e-15, 1e-10, 1e-5, 1.0])  # no ticks in the NaN rows


def overflow_frame(ov: OverflowSweep) -> pd.DataFrame:
    cols: dict[str, np.ndarray] = {"x": ov.x}
    for i, name in enumerate(ov.dtypes):
        cols[f"naive_{name}_error"] = ov.naive_error[i]
        cols[f"stable_{name}_error"] = ov.stable_error[i]
        cols[f"naive_{name}_nonfinite"] = ov.naive_nonfinite[i]
    return pd.DataFrame(cols)


# --------------------------------------------------------------------------- page


def body(ctx: PageContext) -> None:
    st.title("Saturation & gradients")
    st.markdown(
        "Why scaled dot-product attention divides by √d, one step at a time: the dot product's spread "
        "grows like √d, large scores saturate the softmax, and a saturated softmax passes almost no "
        "gradient back. Every number is measured live and drawn against its closed form."
    )
    tabs = st.tabs(list(TABS), key=P_TAB.key, on_change="rerun")
    for tab, render in zip(tabs, (why_sqrt_d, saturation, gradients), strict=True):
        if tab.open:
            with tab:
                render(ctx)


run_page(title="Saturation & gradients", icon=":material/speed:", params=PARAMS, body=body)
