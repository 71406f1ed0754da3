"""Heatmaps page: figure and table builders (arrays in, go.Figure / DataFrame out).

Synthetic Q, K, V (the stages of one head, the selected head with its row statistics, every
head, two settings side by side) and real text (one head of a transformer large, with token
labels, and every head of a layer). Every builder tags its figure with the page's
``layout.meta.view`` name.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from numpy.typing import ArrayLike

from attncore.attention import AttentionStages
from attncore.dropout import DropoutDraws
from attncore.explore import RowStats, SyntheticSpec
from ui import figures
from ui.figures import PALETTE, as_f32, axis_name, heatmap_trace, style, title_annotation

STAGE_SIDE = 128  # cells per side for the four stage maps
MAIN_SIDE = 512  # cells per side for the selected head
THUMB_SIDE = 64  # cells per side for head thumbnails
HEAD_SIDE = 512  # cells per side of a real model's selected head (every token fits unaveraged)


# ---------------------------------------------------------------------------- builders


def heatmap_row(
    maps: Sequence[ArrayLike],
    titles: Sequence[str],
    *,
    diverging: Sequence[bool],
    limits: Sequence[float | None],
    value_names: Sequence[str],
    max_side: int = 128,
    height: int = 340,
    colorbars: Sequence[bool] | None = None,
) -> go.Figure:
    """Several maps side by side in one figure, each with its own horizontal colour bar.

    ``limits[i]`` is the symmetric colour limit of a diverging map (or the top of a
    sequential one, from 0); ``None`` lets Plotly choose. ``colorbars[i] = False`` leaves
    map i's colour bar out (each one costs the browser a noticeable redraw).
    """
    n = len(maps)
    if not (len(titles) == len(diverging) == len(limits) == len(value_names) == n):
        raise ValueError("one title, diverging flag, limit and value name per map are needed.")
    gap = 0.04
    w = (1 - gap * (n - 1)) / n
    traces, layout, notes = [], {}, []
    for i, z in enumerate(maps):
        x0 = min(1.0, max(0.0, i * (w + gap)))
        x1 = min(1.0, x0 + w)
        lim = limits[i]
        tr = heatmap_trace(z, max_side=max_side, diverging=diverging[i], value_name=value_names[i],
                            x_labels=None, y_labels=None,
                            zmin=(-lim if diverging[i] else 0.0) if lim else None, zmax=lim or None)
        name = axis_name(i)
        tr.update(xaxis=f"x{name}", yaxis=f"y{name}",
                  showscale=True if colorbars is None else bool(colorbars[i]),
                  colorbar={"orientation": "h", "x": (x0 + x1) / 2, "xanchor": "center", "len": w,
                            "y": -0.02, "yanchor": "top", "thickness": 8})
        traces.append(tr)
        layout[f"xaxis{name}"] = {"domain": [x0, x1], "anchor": f"y{name}", "side": "top",
                                  "showgrid": False, "zeroline": False}
        layout[f"yaxis{name}"] = {"domain": [0.0, 0.9], "anchor": f"x{name}", "autorange": "reversed",
                                  "showgrid": False, "zeroline": False}
        notes.append({**title_annotation(titles[i], x0, x1, 1.0), "font": {"size": 13}})
    fig = go.Figure(data=traces, layout={**layout, "annotations": notes})
    style(fig, height=height)
    fig.update_layout(margin={"t": 20, "b": 50})
    return fig


def weights_with_row_stats(
    weights: ArrayLike,
    row_entropy: ArrayLike,
    row_max: ArrayLike,
    *,
    title: str | None = None,
    max_entropy: ArrayLike | None = None,
    x_labels: Sequence[str] | None = None,
    y_labels: Sequence[str] | None = None,
    max_side: int = 512,
    height: int = 520,
) -> go.Figure:
    """Weights heatmap (L, S) with per-row entropy and max weight beside it.

    ``max_entropy`` (L,) draws log(visible keys) per row as the uniform bound.
    """
    w = np.asarray(weights)
    ent = as_f32(row_entropy)
    mx = as_f32(row_max)
    hm = heatmap_trace(w, max_side=max_side, diverging=False, value_name="weight",
                        x_labels=x_labels, y_labels=y_labels, zmin=0.0)
    hm.update(showscale=False)
    y = list(hm.y) if hm.y is not None else np.arange(w.shape[0])
    traces = [
        hm,
        go.Bar(x=ent, y=y, orientation="h", name="entropy", marker_color=PALETTE[0], xaxis="x2",
               yaxis="y", hovertemplate="query %{y}<br>entropy %{x:.4f} nats<extra></extra>"),
    ]
    if max_entropy is not None:
        traces.append(go.Scatter(x=as_f32(max_entropy), y=y, mode="lines", name="log(visible keys)",
                                 xaxis="x2", yaxis="y", line={"color": PALETTE[7], "dash": "dash"},
                                 hovertemplate="query %{y}<br>log n %{x:.4f}<extra></extra>"))
    traces.append(go.Bar(x=mx, y=y, orientation="h", name="max weight", marker_color=PALETTE[1],
                         xaxis="x3", yaxis="y",
                         hovertemplate="query %{y}<br>max weight %{x:.4f}<extra></extra>"))
    d1, d2, d3 = (0.0, 0.68), (0.70, 0.84), (0.86, 1.0)
    layout = {
        "xaxis": {"domain": list(d1), "anchor": "y", "side": "bottom", "title": {"text": "key"},
                  "showgrid": False, "zeroline": False},
        "xaxis2": {"domain": list(d2), "anchor": "y", "side": "bottom", "title": {"text": "entropy (nats)"}},
        "xaxis3": {"domain": list(d3), "anchor": "y", "side": "bottom", "range": [0, 1.0],
                   "title": {"text": "max weight"}},
        "yaxis": {"autorange": "reversed", "title": {"text": "query"}, "showgrid": False},
        "showlegend": False,
        "bargap": 0.05,
    }
    return style(go.Figure(data=traces, layout=layout), title=title, height=height)


# ---------------------------------------------------------------------------- synthetic Q, K, V


def stages_figure(stages: AttentionStages, head: int) -> go.Figure:
    """Raw, scaled, masked scores and weights of one head, side by side (``stages``)."""
    raw = stages.raw[head].cpu().numpy()
    scaled = stages.scaled[head].cpu().numpy()
    masked = stages.masked[head].cpu().numpy()
    weights = stages.weights[head].cpu().numpy()
    finite = np.abs(scaled[np.isfinite(scaled)])
    lim = float(finite.max()) if finite.size else 1.0
    raw_lim = float(np.abs(raw[np.isfinite(raw)]).max()) if np.isfinite(raw).any() else 1.0
    # Red = positive, blue = negative, white = 0; each score map's range is in its title, and
    # only the weights carry a colour bar (every bar costs the browser a redraw).
    fig = heatmap_row(
        [raw, scaled, masked, weights],
        [f"1 · raw scores a(q, k) · ±{raw_lim:.3g}", f"2 · scaled ×{stages.scale:.3g}/τ · ±{lim:.3g}",
         f"3 · masked (blank = −∞) · ±{lim:.3g}", "4 · weights"],
        diverging=[True, True, True, False], limits=[raw_lim or 1.0, lim or 1.0, lim or 1.0, None],
        value_names=["score", "score", "score", "weight"], max_side=STAGE_SIDE,
        colorbars=[False, False, False, True])
    return fig.update_layout(meta={"view": "stages"})


def head_figure(stages: AttentionStages, spec: SyntheticSpec, head: int, rs: RowStats) -> go.Figure:
    """The selected head large, with per-query entropy and max weight (``weights``)."""
    vis = rs.visible.cpu().numpy().astype(np.float64)
    fig = weights_with_row_stats(
        stages.weights[head].cpu().numpy(), rs.entropy.cpu().numpy(), rs.max_weight.cpu().numpy(),
        max_entropy=np.log(np.maximum(vis, 1)), max_side=MAIN_SIDE,
        title=f"Head {head} (key/value head {head // (spec.heads // spec.kv_heads)})",
    )
    return fig.update_layout(meta={"view": "weights"})


def weights_frame(w: np.ndarray) -> pd.DataFrame:
    """Weights (L, S) as a wide table: one row per query, one column per key."""
    df = pd.DataFrame(w.astype(np.float64), columns=[f"key_{j}" for j in range(w.shape[1])])
    df.insert(0, "query", np.arange(w.shape[0]))
    return df


def heads_figure(stages: AttentionStages, spec: SyntheticSpec) -> go.Figure:
    """Every head's weights as thumbnails, labelled with its key/value group (``heads``)."""
    group = spec.heads // spec.kv_heads
    maps = [stages.weights[h].cpu().numpy() for h in range(spec.heads)]
    titles = [f"head {h} · kv {h // group}" for h in range(spec.heads)]
    fig = figures.heatmap_grid(maps, titles, cols=min(8, spec.heads), max_side=THUMB_SIDE, zmin=0.0)
    return fig.update_layout(meta={"view": "heads"})


def compare_figure(weights: np.ndarray, name: str, title: str) -> go.Figure:
    """One side of the A/B comparison (``compare-A`` / ``compare-B``)."""
    fig = figures.heatmap(weights, title=title, max_side=256, zmin=0.0, height=380)
    return fig.update_layout(meta={"view": f"compare-{name}"})


def dropout_figure(before: np.ndarray, after: np.ndarray, p: float) -> go.Figure:
    """One head's weights (L, S) before and after one dropout draw, one colour scale (``dropout_weights``)."""
    top = float(max(np.nanmax(before, initial=0.0), np.nanmax(after, initial=0.0))) or 1.0
    fig = heatmap_row([before, after],
                      ["weights before dropout", f"after dropout p = {p:g} (survivors × 1/(1−p))"],
                      diverging=[False, False], limits=[top, top], value_names=["weight", "weight"],
                      max_side=MAIN_SIDE, height=380, colorbars=[False, True])
    return fig.update_layout(meta={"view": "dropout_weights"})


def dropout_mean_figure(draws: DropoutDraws) -> go.Figure:
    """Mean output over the draws against the no-dropout output, ±2 standard errors (``dropout_mean``)."""
    x = draws.exact.detach().cpu().double().numpy().ravel()
    y = draws.mean.detach().cpu().double().numpy().ravel()
    se = draws.std_error.detach().cpu().double().numpy().ravel()
    lo, hi = float(min(x.min(), y.min())), float(max(x.max(), y.max()))
    fig = figures.line_chart([
        figures.Curve(f"mean of {draws.n} dropout draws (±2 standard errors)", x, y, err=2 * se,
                      hover="no dropout %{x:.4g}<br>mean of draws %{y:.4g}",
                      extra={"mode": "markers", "marker": {"size": 5}}),
        figures.Curve("expectation = output without dropout", [lo, hi], [lo, hi], theory=True,
                      color=PALETTE[7]),
    ], x_title="output entry without dropout", y_title="mean over draws", height=380)
    return fig.update_layout(meta={"view": "dropout_mean"})


# ---------------------------------------------------------------------------- real text


def token_head_figure(w: np.ndarray, entropy: np.ndarray, max_weight: np.ndarray, visible: np.ndarray,
                      labels: Sequence[str], view: str) -> go.Figure:
    """One head of a real model (L, L) with token labels and per-query entropy and max weight."""
    L = len(labels)
    fig = weights_with_row_stats(
        w, entropy, max_weight, max_entropy=np.log(np.maximum(visible, 1)), x_labels=list(labels),
        y_labels=list(labels), max_side=HEAD_SIDE, height=int(min(900, max(440, 160 + 18 * L))))
    # Every token label while they fit, slanted so that neighbours do not collide.
    every = 1 if L <= 80 else None
    fig.update_layout(xaxis={"tickangle": -60, "dtick": every}, yaxis={"dtick": every})
    return fig.update_layout(meta={"view": view}, margin={"t": 30})


def weights_table(w: np.ndarray, tokens: list[str]) -> pd.DataFrame:
    """One head's weights (L, L) as a wide table: a row per query, a column per key token."""
    df = pd.DataFrame(w.astype(np.float64), columns=[f"{j}:{t}" for j, t in enumerate(tokens)])
    df.insert(0, "query", [f"{i}:{t}" for i, t in enumerate(tokens)])
    return df


def layer_heads_figure(maps: Sequence[np.ndarray]) -> go.Figure:
    """Every head of one layer of a real model (``rt-heads``)."""
    heads = len(maps)
    fig = figures.heatmap_grid(list(maps), [f"head {h}" for h in range(heads)], cols=min(6, heads),
                               max_side=64, zmin=0.0, zmax=1.0)
    return fig.update_layout(meta={"view": "rt-heads"}, margin={"t": 30})
