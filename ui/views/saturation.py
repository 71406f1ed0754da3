"""Saturation & gradients page: figure and table builders (arrays in, go.Figure / DataFrame out)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from numpy.typing import ArrayLike

from attncore import theory
from attncore.dot_products import D_GRID, DotHistograms, StdSweep
from attncore.gradients import (
    GRADIENT_QUANTITIES,
    SETTINGS,
    GradientSweep,
    SaturationCurve,
    ScaleSweep,
    TemperatureRows,
)
from attncore.overflow import OVERFLOW_DTYPES, OverflowRow, OverflowSweep
from ui import figures
from ui.figures import PALETTE, Band, Curve, Histogram, Marker, Panel
from ui.maps import heatmap

SCALED_C, UNSCALED_C, THEORY_C, EXACT_C = PALETTE[0], PALETTE[5], PALETTE[1], PALETTE[2]
DTYPE_C = dict(zip(OVERFLOW_DTYPES, (PALETTE[5], PALETTE[3], PALETTE[0], PALETTE[2]), strict=True))
LOG_FLOOR = 1e-20  # log-axis floor for values that are exactly 0 (underflow; the CSV keeps the 0)
PANEL_ORDER = ("jac", "max", "saturated", "grad_scores", "grad_q", "grad_k")
LOG_PANELS = {"jac", "grad_scores", "grad_q", "grad_k"}
NAN_ROW = dict(zip(OVERFLOW_DTYPES, (1e2, 1e3, 1e4, 1e5), strict=True))  # where ✕ marks a NaN, per dtype


def grouped_bars(categories: Sequence[str], series: Sequence[tuple[str, ArrayLike]], *,
                 title: str | None = None, x_title: str = "", y_title: str = "",
                 height: int = 360) -> go.Figure:
    """Bars grouped by category (e.g. key position), one colour per series (e.g. temperature)."""
    fig = go.Figure()
    for i, (name, y) in enumerate(series):
        fig.add_trace(go.Bar(x=list(categories), y=figures.as_f32(y), name=name,
                             marker_color=PALETTE[i % len(PALETTE)],
                             hovertemplate=f"{name}<br>%{{x}}<br>%{{y:.4f}}<extra></extra>"))
    fig.update_layout(barmode="group", bargap=0.2, bargroupgap=0.05)
    fig.update_xaxes(title=x_title, type="category")
    fig.update_yaxes(title=y_title)
    return figures.style(fig, title=title, height=height)


# Points of each theory curve over the histogram's range: smooth at any chart width the app draws (one per
# ~2 px), an even count so no point falls on 0 (where the d = 1 density is infinite). 800 made the chart
# 45 KB, the largest on the page's first screen (issue 34); 240 makes it 16 KB.
THEORY_POINTS = 240


def _densities(h: DotHistograms, vq: float, vk: float) -> dict[str, np.ndarray]:
    """Theory on a fine grid (no point at 0, where the d = 1 density is infinite)."""
    xs = np.linspace(h.edges_raw[0], h.edges_raw[-1], THEORY_POINTS)
    root = math.sqrt(h.d)
    exact = np.asarray(theory.dot_product_density(xs, h.d, vq, vk))
    return {"x": xs, "normal": np.asarray(theory.normal_density(xs, h.d * vq * vk)), "exact": exact,
            "x_scaled": xs / root, "normal_scaled": np.asarray(theory.normal_density(xs / root, vq * vk)),
            "exact_scaled": exact * root}

# One legend entry per role, in words, across both panels (each panel's formula on hover): two
# differently named entries with the same swatch read as one (issue 41).
GAUSS = "Gaussian (central limit)"
SMALL = "small-σ expansion"
LARGE = "large-σ limit"


def dot_histogram_figure(h: DotHistograms, vq: float, vk: float, same_x: bool) -> go.Figure:
    t = _densities(h, vq, vk)
    exact_line = {"color": EXACT_C, "dash": "dot", "width": 2.5}
    panels = [
        Panel(f"q·k, d = {h.d} (unscaled)",
              hist=Histogram("measured", h.edges_raw, h.density_raw, PALETTE[4]),
              curves=[Curve(GAUSS, t["x"], t["normal"], theory=True, color=THEORY_C, hover="N(0, d·σq²·σk²)"),
                      Curve("exact (variance-gamma)", t["x"], t["exact"], theory=True, color=EXACT_C,
                            extra={"line": exact_line})],
              x_title="q·k", y_title="density"),
        Panel(f"q·k / √d (scaled by 1/{math.sqrt(h.d):.3g})",
              hist=Histogram("measured", h.edges_scaled, h.density_scaled, PALETTE[4]),
              curves=[Curve(GAUSS, t["x_scaled"], t["normal_scaled"], theory=True, color=THEORY_C,
                            hover="N(0, σq²·σk²)"),
                      Curve("exact (variance-gamma)", t["x_scaled"], t["exact_scaled"], theory=True,
                            color=EXACT_C, extra={"line": exact_line})],
              x_title="q·k / √d", y_title="density"),
    ]
    fig = figures.panel_grid(panels, cols=2, height=380, shared_x=same_x)
    if same_x:  # both on the unscaled axis: the scaled histogram shows as the narrow spike it is
        fig.update_xaxes(range=[float(h.edges_raw[0]), float(h.edges_raw[-1])])
    return fig


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
                Curve("top weight, closed form", xs, top, theory=True, color=SCALED_C,
                      hover="top weight 1/(1+(n−1)e^(−x)) = %{y:.4f}"),
                Curve("each other weight (measured)", x, sc.other.numpy(), color=UNSCALED_C),
                Curve("each other weight, closed form", xs, other, theory=True, color=UNSCALED_C,
                      hover="each other weight 1/(eˣ+n−1) = %{y:.4f}"),
                Curve("Jacobian norm (measured)", x, sc.jac_norm.numpy(), color=EXACT_C),
                Curve("Jacobian norm, closed form", xs, jac, theory=True, color=EXACT_C),
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


def jacobian_frame(jac: np.ndarray) -> pd.DataFrame:
    df = pd.DataFrame(jac, columns=[f"d_by_s{j}" for j in range(jac.shape[1])])
    df.insert(0, "weight", [f"p{i}" for i in range(jac.shape[0])])
    return df


def scale_figure(sw: ScaleSweep) -> go.Figure:
    n, sig = sw.n, sw.sigma
    small = np.geomspace(sig[0], min(0.6, sig[-1]), 40)
    large = np.geomspace(min(2 * math.sqrt(2 * math.log(n)) + 1.0, sig[-1]), sig[-1], 40)
    refs = [Marker(1.0, " σ = 1: scaled"), Marker(8.0, " √64"), Marker(math.sqrt(512), " √512")]
    refs = [m for m in refs if m.x <= sig[-1]]
    panels = [
        Panel("E‖J‖_F", curves=[
            Curve("measured", sig, sw.jac_mean, err=2 * sw.jac_se, color=SCALED_C),
            Curve(SMALL, small, theory.jacobian_norm_small_scale(small, n),
                  theory=True, color=THEORY_C, hover="small σ: √((n−1)/n²·(1+σ²(n−4)/n))"),
            Curve(LARGE, large, theory.jacobian_norm_large_scale(large, n), theory=True,
                  color=EXACT_C, hover="large σ: f_G(0)/σ"),
            Curve("flat row", [sig[0], sig[-1]], [theory.uniform_row_jacobian_norm(n)] * 2,
                  theory=True, color=PALETTE[7])],
            markers=refs, x_title="logit scale σ", y_title="‖J‖_F", log_x=True),
        Panel("E[max weight]", curves=[
            Curve("measured", sig, sw.max_mean, err=2 * sw.max_se, color=SCALED_C),
            Curve(SMALL, small, theory.max_weight_small_scale(small, n), theory=True,
                  color=THEORY_C, hover="small σ: (1 + σ·E[max z])/n"),
            Curve(LARGE, large, theory.max_weight_large_scale(large, n), theory=True,
                  color=EXACT_C, hover="large σ: 1 − ln2·f_G(0)/σ")],
            markers=refs, x_title="logit scale σ", y_title="max weight", log_x=True, y_range=(0.0, 1.02)),
    ]
    return figures.panel_grid(panels, cols=2, height=400)


def scale_frame(sw: ScaleSweep) -> pd.DataFrame:
    return pd.DataFrame({"sigma": sw.sigma, "jacobian_mean": sw.jac_mean, "jacobian_se": sw.jac_se,
                         "max_weight_mean": sw.max_mean, "max_weight_se": sw.max_se, "keys": sw.n,
                         "rows": sw.trials})


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


def overflow_figure(ov: OverflowSweep, only: str | None = None) -> go.Figure:
    """Error against x per dtype; a NaN output is an ✕ in its dtype's row above the impossible error 1.
    ``only``: that dtype's curves and its ln max alone (the Tour's precision control)."""
    panels = []
    for method, errs in (("naive eˣ/Σeˣ", ov.naive_error), ("stable, max subtracted", ov.stable_error)):
        curves = []
        for name, e in zip(ov.dtypes, errs, strict=True):
            if only is not None and name != only:
                continue
            curves.append(Curve(name, ov.x, np.maximum(e, 1e-20), color=DTYPE_C[name],
                                extra={"mode": "lines"}))
            bad = np.isnan(e)
            if bad.any():
                curves.append(Curve(f"{name}: NaN output", ov.x[bad], np.full(int(bad.sum()), NAN_ROW[name]),
                                    color=DTYPE_C[name],
                                    extra={"mode": "markers", "marker": {"symbol": "x", "size": 6}}))
        # each label at its own height: on a narrow panel "bf16/f32" at x = 88.7 runs into "f64" at 709.8
        marks = [Marker(theory.exp_overflow_logit(t), f" ln max {lab}", DTYPE_C[t], y=y)
                 for t, lab, y, covers in (("float16", "f16", 0.3, ("float16",)),
                                           ("float32", "bf16/f32", 0.45, ("bfloat16", "float32")),
                                           ("float64", "f64", 0.6, ("float64",)))
                 if only is None or only in covers]
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


def rows_figure(rows: TemperatureRows, scores: Sequence[float]) -> go.Figure:
    """The worked example's rows as grouped bars: one group per position, one colour per row."""
    positions = [f"{i}: {s:g}" for i, s in enumerate(scores)]
    return grouped_bars(positions, list(zip(rows.labels, rows.weights.numpy(), strict=True)),
                        x_title="position: score", y_title="weight", height=340)


def jacobian_figure(jac: np.ndarray, scores: Sequence[float]) -> go.Figure:
    """One row's softmax Jacobian (n, n) as a diverging map labelled by the scores."""
    labels = [f"{s:g}" for s in scores]
    lim = max(float(np.abs(jac).max()), 1e-12)
    fig = heatmap(jac, diverging=True, value_name="∂p_i/∂s_j", x_labels=labels, y_labels=labels,
                  zmin=-lim, zmax=lim, height=360, x_title="score s_j", y_title="weight p_i")
    return fig.update_traces(hovertemplate="weight %{y}<br>score %{x}<br>∂p_i/∂s_j %{z:.4g}<extra></extra>")


def sci(v: float, digits: int = 4) -> str:
    """A number as the overflow table prints it: scientific notation, ``NaN``, ``inf``, or ``0``."""
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "inf" if v > 0 else "−inf"
    return "0" if v == 0 else f"{v:.{digits}e}"


def overflow_table(rows: Sequence[OverflowRow]) -> pd.DataFrame:
    """Naive and stable softmax of one row in each dtype, for the table under the overflow chart.

    Every number is text in scientific notation (``NaN`` as NaN), so nothing prints as
    0.000...0003 or None.
    """
    return pd.DataFrame([{
        "dtype": r.dtype, "method": r.method, "eˣ in dtype": sci(r.exp_x),
        "weights": "[" + ", ".join(sci(w, 3) for w in r.weights) + "]",
        "row sum": sci(r.row_sum), "max |error|": sci(r.max_error), "finite": "yes" if r.finite else "NO",
    } for r in rows])


def unscaled_decay(gs: GradientSweep) -> pd.DataFrame:
    """Unscaled statistics on the ladder d = 1, 4, 16, 64, ... (each d four times the last).

    Columns: ``d``, ``neg_log_median_jac`` (``-ln median ||J||``, NaN where the median is 0),
    ``mean_jac``, ``mean_grad_scores``, ``mean_grad_q``, ``mean_grad_k``. Fourfold steps make
    the growth law readable: ``-ln median`` doubles per step if it grows like ``sqrt(d)`` and
    quadruples if it grows like d (geometric decay); a mean halves per step if it falls like
    ``d^-1/2``.
    """
    keep = [i for i, d in enumerate(gs.d) if int(d) in {4**k for k in range(7)}]
    st = {q: gs.stats[("unscaled", q)] for q in ("jac", "grad_scores", "grad_q", "grad_k")}
    med = st["jac"].median[keep]
    with np.errstate(divide="ignore"):
        neg_log = np.where(med > 0, -np.log(np.where(med > 0, med, 1.0)), np.nan)
    return pd.DataFrame({"d": gs.d[keep], "neg_log_median_jac": neg_log, "mean_jac": st["jac"].mean[keep],
                         "mean_grad_scores": st["grad_scores"].mean[keep],
                         "mean_grad_q": st["grad_q"].mean[keep], "mean_grad_k": st["grad_k"].mean[keep]})
