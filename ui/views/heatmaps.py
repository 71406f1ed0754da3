"""Heatmaps page: figure and table builders (arrays in, go.Figure / DataFrame out).

Synthetic Q, K, V (the stages of one head, the selected head with its row statistics, every
head, two settings side by side) and real text (one head of a transformer large, with token
labels, and every head of a layer). Every builder tags its figure with the page's
``layout.meta.view`` name.
"""

from __future__ import annotations

import html
from collections.abc import Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from numpy.typing import ArrayLike

from attncore.attention import AttentionStages
from attncore.dropout import DropoutDraws
from attncore.explore import RowStats, SyntheticSpec
from ui import figures
from ui.figures import PALETTE, as_f32, axis_name, style
from ui.maps import (
    MASKED_GREY,
    downsample_stack,
    grid_parts,
    heatmap,
    heatmap_trace,
    masked_legend,
    title_annotation,
)
from ui.text import chart
from ui.views import realtext as realtext_views

STAGE_SIDE = 128  # cells per side for the four stage maps
MAIN_SIDE = 512  # cells per side for the selected head
THUMB_SIDE = 64  # cells per side for head thumbnails
HEAD_SIDE = 512  # cells per side of a real model's selected head (every token fits unaveraged)
LOG_FLOOR = -4.0  # log10 of the smallest weight the log colour scale tells apart (0 is drawn there)


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

    Signed (diverging) maps larger than ``max_side`` keep each block's largest-magnitude score
    with its sign (:func:`ui.maps.downsample_signed`); masked (non-finite) cells are drawn in
    :data:`ui.maps.MASKED_GREY` with a legend entry.

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
                            x_labels=None, y_labels=None, signed_rule=diverging[i],
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
    masked = any(not np.isfinite(np.asarray(z)).all() for z in maps)
    if masked:
        traces.append(masked_legend())
    fig = go.Figure(data=traces, layout={**layout, "annotations": notes})
    style(fig, height=height)
    fig.update_layout(margin={"t": 20, "b": 50}, showlegend=masked,
                      legend={"orientation": "h", "x": 2 * (w + gap) if n > 2 else 0.0, "xanchor": "left",
                              "y": -0.02, "yanchor": "top"})
    if masked:
        fig.update_layout(plot_bgcolor=MASKED_GREY)
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
    log_color: bool = False,
) -> go.Figure:
    """Weights heatmap (L, S) with a colour bar, and per-row entropy and max weight beside it.

    ``max_entropy`` (L,) draws log(visible keys) per row as the uniform bound (dashed, labelled).
    ``log_color`` colours by log10(weight) from :data:`LOG_FLOOR` (weights below it, and 0, at the
    floor), so the small weights a linear 0-1 scale paints alike become distinct. The max-weight
    axis runs from 0 to just above the largest row maximum.
    """
    w = np.asarray(weights, dtype=np.float64)
    ent = as_f32(row_entropy)
    mx = as_f32(row_max)
    # title above the bar: written sideways on its right it reached into the entropy panel
    # issue 34: the bar, its tick labels and its title need ~70 px at presenter mode's 16 px text; the gap
    # of 0.08 of the width (~55 px) let them reach into the entropy panel beside it
    bar = {"thickness": 10, "len": 0.8, "x": 0.605, "xanchor": "left", "y": 0.5,
           "title": {"text": "weight", "side": "top"}}
    if log_color:
        z = np.log10(np.maximum(w, 10.0**LOG_FLOOR))
        ticks = np.arange(LOG_FLOOR, 1.0)
        hm = heatmap_trace(z, max_side=max_side, diverging=False, value_name="log10 weight",
                           x_labels=x_labels, y_labels=y_labels, zmin=LOG_FLOOR, zmax=0.0)
        bar.update(tickvals=ticks.tolist(), ticktext=[f"1e{int(t)}" if t < 0 else "1" for t in ticks])
    else:
        hm = heatmap_trace(w, max_side=max_side, diverging=False, value_name="weight",
                           x_labels=x_labels, y_labels=y_labels, zmin=0.0)
    hm.update(showscale=True, colorbar=bar)
    y = list(hm.y) if hm.y is not None else np.arange(w.shape[0])
    traces = [
        hm,
        go.Bar(x=ent, y=y, orientation="h", name="entropy", marker_color=PALETTE[0], xaxis="x2",
               yaxis="y", hovertemplate="query %{y}<br>entropy %{x:.4f} nats<extra></extra>"),
    ]
    ent_title = "entropy (nats)"
    if max_entropy is not None:
        ent_title = "entropy (nats)<br>- - log n"  # '(uniform)' made it reach into the max-weight title
        traces.append(go.Scatter(x=as_f32(max_entropy), y=y, mode="lines", name="log n (uniform)",
                                 xaxis="x2", yaxis="y", line={"color": PALETTE[7], "dash": "dash"},
                                 hovertemplate="query %{y}<br>log n %{x:.4f}<extra></extra>"))
    traces.append(go.Bar(x=mx, y=y, orientation="h", name="max weight", marker_color=PALETTE[1],
                         xaxis="x3", yaxis="y",
                         hovertemplate="query %{y}<br>max weight %{x:.4f}<extra></extra>"))
    d1, d2, d3 = (0.0, 0.60), (0.74, 0.86), (0.88, 1.0)
    top = float(np.nanmax(mx)) if mx.size and np.isfinite(mx).any() else 1.0
    mx_range = [0.0, max(top, 1e-6) * 1.08]
    layout = {
        "xaxis": {"domain": list(d1), "anchor": "y", "side": "bottom", "title": {"text": "key"},
                  "showgrid": False, "zeroline": False},
        "xaxis2": {"domain": list(d2), "anchor": "y", "side": "bottom", "title": {"text": ent_title}},
        "xaxis3": {"domain": list(d3), "anchor": "y", "side": "bottom", "range": mx_range,
                   "title": {"text": "max<br>weight"}},  # on one line it sat ~2 px from the entropy title
        "yaxis": {"autorange": "reversed", "title": {"text": "query"}, "showgrid": False},
        "showlegend": False,
        "bargap": 0.05,
    }
    return style(go.Figure(data=traces, layout=layout), title=title, height=height)


# ---------------------------------------------------------------------------- synthetic Q, K, V


def stage_limits(stages: AttentionStages, head: int, shared: bool) -> tuple[float, float]:
    """The ± colour limits of the raw and of the scaled/masked score maps.

    ``shared``: one limit (the larger) for all three, so the √d scaling shows as faded colour,
    not only in the titles.
    """
    def top(a: np.ndarray) -> float:
        finite = np.abs(a[np.isfinite(a)])
        return float(finite.max()) if finite.size and finite.max() > 0 else 1.0

    raw_lim, lim = top(stages.raw[head].cpu().numpy()), top(stages.scaled[head].cpu().numpy())
    if shared:
        raw_lim = lim = max(raw_lim, lim)
    return raw_lim, lim


def stages_figure(stages: AttentionStages, head: int, *, shared: bool = True) -> go.Figure:
    """Raw, scaled, masked scores and weights of one head, side by side (``stages``).

    ``shared`` (default) puts the three score maps on one colour range with one colour bar;
    otherwise each map is scaled to its own ± range (written in its title).
    """
    raw = stages.raw[head].cpu().numpy()
    scaled = stages.scaled[head].cpu().numpy()
    masked = stages.masked[head].cpu().numpy()
    weights = stages.weights[head].cpu().numpy()
    raw_lim, lim = stage_limits(stages, head, shared)

    def own(a: np.ndarray) -> str:
        return f" · ±{float(np.abs(a[np.isfinite(a)]).max()) if np.isfinite(a).any() else 0:.3g}"

    fig = heatmap_row(
        [raw, scaled, masked, weights],
        [f"1 · raw scores a(q, k){own(raw)}", f"2 · scaled ×{stages.scale:.3g}/τ{own(scaled)}",
         f"3 · masked{own(masked)}", "4 · weights"],
        diverging=[True, True, True, False], limits=[raw_lim, lim, lim, None],
        value_names=["score", "score", "score", "weight"], max_side=STAGE_SIDE,
        colorbars=[shared, False, False, True])
    return fig.update_layout(meta={"view": "stages", "shared_range": shared})


def head_figure(stages: AttentionStages, spec: SyntheticSpec, head: int, rs: RowStats, *,
                log_color: bool = False) -> go.Figure:
    """The selected head large, with per-query entropy and max weight (``weights``)."""
    vis = rs.visible.cpu().numpy().astype(np.float64)
    fig = weights_with_row_stats(
        stages.weights[head].cpu().numpy(), rs.entropy.cpu().numpy(), rs.max_weight.cpu().numpy(),
        max_entropy=np.log(np.maximum(vis, 1)), max_side=MAIN_SIDE, log_color=log_color,
        title=f"Head {head} (key/value head {head // (spec.heads // spec.kv_heads)})",
    )
    return fig.update_layout(meta={"view": "weights"})


def weights_frame(w: np.ndarray) -> pd.DataFrame:
    """Weights (L, S) as a wide table: one row per query, one column per key."""
    df = pd.DataFrame(w.astype(np.float64), columns=[f"key_{j}" for j in range(w.shape[1])])
    df.insert(0, "query", np.arange(w.shape[0]))
    return df


def heads_figure(stages: AttentionStages, spec: SyntheticSpec, selected: int | None = None) -> go.Figure:
    """Every head's weights as thumbnails, labelled with its key/value group (``heads``); a click on
    a thumbnail chooses that head (pick points, ``customdata`` = head), the ``selected`` one outlined."""
    group = spec.heads // spec.kv_heads
    maps = [stages.weights[h].cpu().numpy() for h in range(spec.heads)]
    titles = [f"head {h} · kv {h // group}" for h in range(spec.heads)]
    hovers = [f"{t}<br>click: show this head<extra></extra>" for t in titles]
    return clickable_grid(maps, titles, [(h,) for h in range(spec.heads)], hovers, selected,
                          cols=min(8, spec.heads), zmin=0.0, meta={"view": "heads", "selected": selected})


def compare_figure(weights: np.ndarray, name: str, title: str) -> go.Figure:
    """One side of the A/B comparison (``compare-A`` / ``compare-B``)."""
    fig = heatmap(weights, title=title, max_side=256, zmin=0.0, height=380)
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
                      labels: Sequence[str], view: str, *, selected: int | None = None,
                      raw: Sequence[str] = ()) -> go.Figure:
    """One head of a real model (L, L) with token labels and per-query entropy and max weight.

    ``raw`` (L,), the tokens as the tokenizer writes them, go in the hover (``raw: Ġhead``) where they
    differ from the labels.

    Clickable: pick points (:func:`ui.views.realtext.pick_points`, ``customdata`` = query, key,
    weight) cover the map, every row of it; a click on a row chooses that query token. The
    ``selected`` query's row is outlined. ``layout.meta``: ``view``, ``selected``.
    """
    L = len(labels)
    fig = weights_with_row_stats(
        w, entropy, max_weight, max_entropy=np.log(np.maximum(visible, 1)), x_labels=list(labels),
        y_labels=list(labels), max_side=HEAD_SIDE, height=int(min(900, max(440, 160 + 18 * L))))
    S = w.shape[1]
    if L <= HEAD_SIDE and S <= HEAD_SIDE:  # every token its own cell: the labels below are the axis's
        names_x = [f"{j}:{chart(t)}" for j, t in enumerate(labels[:S])]  # the map's categories (ui.figures)
        names_y = [f"{i}:{chart(t)}" for i, t in enumerate(labels[:L])]
        stride = -(-S // max(1, realtext_views.MAX_PICK_POINTS // L))
        cols = np.arange(0, S, stride)
        ii, jj = np.meshgrid(np.arange(L), cols, indexing="ij")
        ii, jj = ii.ravel(), jj.ravel()
        # (query, key, weight): indices as integers and the weight at the float32 precision of the map's own
        # cells, written as its shortest decimal ("0.024060946", not "0.024060945958..."; ints, not "3.0"):
        # a fifth of the map's JSON at 23 tokens, on every head and token click that redraws it
        weight = np.asarray(w, dtype=np.float32)[ii, jj].astype(str).astype(np.float64)
        cd = [list(t) for t in zip(ii.tolist(), jj.tolist(), weight.tolist(), strict=True)]
        hover = "query %{y}<br>key %{x}<br>weight %{customdata[2]:.6g}"
        if len(raw) == L and tuple(raw) != tuple(labels):
            raws = [f"{n}:{chart(r)}" for n, r in enumerate(raw)]  # "3:Ġhead", as the axis names it
            cd = [c + [raws[i], raws[j]] for c, i, j in zip(cd, ii.tolist(), jj.tolist(), strict=True)]
            hover += "<br>raw: %{customdata[3]} → %{customdata[4]}"
        fig.add_trace(realtext_views.pick_points(
            [names_x[j] for j in jj], [names_y[i] for i in ii], cd,
            hover + "<br>click: show this query's row<extra></extra>"))
        # ranges pinned to the map (the markers would pad an autorange); queries top to bottom
        fig.update_layout(xaxis={"range": [-0.5, S - 0.5]},
                          yaxis={"range": [L - 0.5, -0.5], "autorange": False})
    if selected is not None and 0 <= selected < L:
        fig.add_shape(type="rect", xref="x", yref="y", x0=-0.5, x1=S - 0.5, y0=selected - 0.5,
                      y1=selected + 0.5, line={"color": PALETTE[5], "width": 2})
    # Every token label while they fit, slanted so that neighbours do not collide.
    every = 1 if L <= 80 else None
    fig.update_layout(xaxis={"tickangle": -60, "dtick": every}, yaxis={"dtick": every})
    return fig.update_layout(meta={"view": view, "selected": selected},
                             margin={"t": 30, "r": 24, **token_label_margins(labels)})


def token_label_margins(labels: Sequence[str]) -> dict[str, int]:
    """Left and bottom margins (px) that hold a token map's axis labels ``"i:token"``.

    With the 10 px of :func:`ui.figures.style`, the browser's automargin widened them after a
    first pass and drew the figure again (Plotly's doAutoMargin): for a 512-token map with its
    pick points, ~0.45 s of the view's first render. Estimated from the longest label (12 px labels
    in Chromium, measured: 95-142 px on the left and 98-138 px below for 7-16 characters, the
    widest glyphs and digits counting most), up to ~25 px over; wider text still widens them.
    Short labels (the character model's ``12:a``) need 87 px on the left and 91 below, more than
    the line gives them: hence the floors.
    """
    longest = max((len(f"{i}:{t}") for i, t in enumerate(labels)), default=1)
    return {"l": max(92, int(60 + 6.5 * longest)), "b": max(96, int(64 + 6 * longest))}


def weights_table(w: np.ndarray, tokens: list[str]) -> pd.DataFrame:
    """One head's weights (L, L) as a wide table: a row per query, a column per key token."""
    df = pd.DataFrame(w.astype(np.float64), columns=[f"{j}:{t}" for j, t in enumerate(tokens)])
    df.insert(0, "query", [f"{i}:{t}" for i, t in enumerate(tokens)])
    return df


def clickable_grid(maps: Sequence[np.ndarray], titles: Sequence[str], customdata: Sequence[Sequence[int]],
                   hovers: Sequence[str], selected: int | None = None, *, cols: int, meta: dict,
                   max_side: int = THUMB_SIDE, zmin: float | None = None, zmax: float | None = None,
                   top: int = 28) -> go.Figure:
    """A :func:`ui.maps.heatmap_grid` of thumbnails, every one clickable: a 6 x 6 grid of pick points per
    map (``customdata[i]`` on map ``i``, so a click anywhere on it chooses it), the axis ranges pinned to the
    map, and map ``selected`` outlined. ``meta`` becomes ``layout.meta``; ``top`` the top margin.

    The traces and the layout are plain dicts and the figure is made once (:class:`ui.maps.GridParts`):
    a head click redraws this grid, and Plotly's per-call validation of one ``add_trace`` and two axis updates
    per map took 85 ms of it for 12 heads.
    """
    g = grid_parts(list(maps), titles, cols=cols, max_side=max_side, zmin=zmin, zmax=zmax)
    picks, shapes = [], []
    for h, (tr, (rows, cols_, dy, dx)) in enumerate(zip(g.traces, g.cells, strict=True)):
        ys = (np.linspace(0, rows - 1, min(rows, 6)) * dy).round(3)
        xs = (np.linspace(0, cols_ - 1, min(cols_, 6)) * dx).round(3)
        gy, gx = np.meshgrid(ys, xs, indexing="ij")
        cd = np.tile(list(customdata[h]), (gx.size, 1))
        picks.append(realtext_views.pick_point_props(gx.ravel(), gy.ravel(), cd, hovers[h], xaxis=tr["xaxis"],
                                                     yaxis=tr["yaxis"]))
        # pin the ranges to the map: the markers would otherwise pad the autorange
        x_range, y_range = [-0.5 * dx, (cols_ - 0.5) * dx], [(rows - 0.5) * dy, -0.5 * dy]
        g.layout[tr["xaxis"].replace("x", "xaxis", 1)].update(range=x_range, ticks="")
        g.layout[tr["yaxis"].replace("y", "yaxis", 1)].update(range=y_range, ticks="", autorange=False)
        if h == selected:
            shapes.append({"type": "rect", "xref": tr["xaxis"], "yref": tr["yaxis"], "x0": x_range[0],
                           "x1": x_range[1], "y0": y_range[1], "y1": y_range[0],
                           "line": {"color": PALETTE[5], "width": 3}})
    fig = go.Figure(data=g.traces + picks, layout={**g.layout, "shapes": shapes, "meta": meta})
    style(fig, height=g.height)
    return figures.relayout(fig, margin={"t": top})


def layer_heads_figure(maps: Sequence[np.ndarray], *, layer: int = 0,
                       selected: int | None = None, kv_heads: int = 0) -> go.Figure:
    """Every head of one layer of a real model (``rt-heads``), the ``selected`` head outlined.

    Clickable: each thumbnail carries a grid of pick points (``customdata`` = layer, head), so a
    click anywhere on it chooses that head. With grouped-query attention (``kv_heads`` < heads) each
    title names the key/value head (``KV g``) and a row holds one group. ``layout.meta``: ``view``,
    ``layer``, ``selected``.
    """
    heads = len(maps)
    groups = heads // kv_heads if kv_heads and kv_heads < heads and heads % kv_heads == 0 else 0
    titles = [f"head {h} · KV {h // groups}" if groups else f"head {h}" for h in range(heads)]
    hovers = [f"layer {layer} · head {h}<br>click: show this head<extra></extra>" for h in range(heads)]
    return clickable_grid(maps, titles, [(layer, h) for h in range(heads)], hovers, selected,
                          cols=groups if groups and groups >= 3 else min(6, heads), zmin=0.0, zmax=1.0,
                          meta={"view": "rt-heads", "layer": layer, "selected": selected}, top=30)


def overview_layout(layers: int, heads: int, kv_heads: int, side: int) -> tuple[list[int], list[int]]:
    """Where each tile of the layers x heads overview starts: (row offset per layer, column offset per
    head) in cells. Tiles are ``side`` cells with one blank cell between heads and three between the
    key/value groups (``heads / kv_heads`` query heads each), so a group reads as one block."""
    groups = max(1, kv_heads) if kv_heads and heads % kv_heads == 0 else heads
    per = heads // groups
    cols, x = [], 0
    for h in range(heads):
        cols.append(x)
        x += side + (3 if (h + 1) % per == 0 and per > 1 and h + 1 < heads else 1)
    return [n * (side + 1) for n in range(layers)], cols


def overview_figure(thumbs: np.ndarray, *, first: np.ndarray, entropy: np.ndarray, kv_heads: int = 0,
                    layer: int | None = None, name: str = "") -> go.Figure:
    """Every head of every layer at once (``rt-overview``, bertviz's model view): rows = layers, columns =
    heads grouped by the key/value head they share, each tile the head's map as block means.

    ``thumbs`` (N, H, T, T) from :class:`attncore.models.HeadSummary`; ``first`` and ``entropy`` (N, H)
    go in the hover. One heatmap trace (blank cells between tiles) and one pick point per tile
    (``customdata`` = layer, head): a click opens that head. The row of ``layer`` is outlined (the layer a
    page shows; its head is outlined in the page's head grid, so a head click leaves this figure as it is).
    ``layout.meta``: ``view``, ``layers``, ``heads``, ``kv_heads``, ``side``, ``rows``, ``cols`` (tile
    offsets), ``layer``.
    """
    t = np.asarray(thumbs, dtype=np.float32)
    N, H, T = t.shape[0], t.shape[1], t.shape[-1]
    side = T if T <= 12 else -(-T // 2)  # 24 x 24 summaries are drawn at 12 x 12: 270 tiles stay light
    small = downsample_stack(t, side)[0] if side != T else t
    side = small.shape[-1]
    rows, cols = overview_layout(N, H, kv_heads, side)
    z = np.full((rows[-1] + side, cols[-1] + side), np.nan, dtype=np.float32)
    for n in range(N):
        for h in range(H):
            z[rows[n]:rows[n] + side, cols[h]:cols[h] + side] = small[n, h]
    groups = H // kv_heads if kv_heads and H % kv_heads == 0 else 1
    bar = {"thickness": 12, "len": 0.6, "title": {"text": "weight", "side": "right"}}
    fig = go.Figure(go.Heatmap(z=z, colorscale=figures.SEQUENTIAL, zmin=0.0, zmax=1.0, hoverinfo="skip",
                               colorbar=bar))
    cx = [cols[h] + (side - 1) / 2 for n in range(N) for h in range(H)]
    cy = [rows[n] + (side - 1) / 2 for n in range(N) for h in range(H)]
    cd = np.array([[n, h] for n in range(N) for h in range(H)])
    f, e = np.asarray(first, dtype=np.float64), np.asarray(entropy, dtype=np.float64)
    gtxt = [f" · KV group {h // groups}" if groups > 1 else "" for n in range(N) for h in range(H)]
    hover = [f"layer {n} · head {h}{g}<br>weight on the first token {f[n, h]:.3f}<br>mean entropy "
             f"{e[n, h]:.2f} nats<br>click: open this head"
             for (n, h), g in zip(cd.tolist(), gtxt, strict=True)]
    pick = realtext_views.pick_points(cx, cy, cd, "%{text}<extra></extra>")
    pick.update(text=hover, marker={"size": max(8, side * 2), "opacity": 0.0, "symbol": "square"})
    fig.add_trace(pick)
    fig.update_xaxes(range=[-0.5, z.shape[1] - 0.5], showgrid=False, zeroline=False, tickmode="array",
                     tickvals=[c + (side - 1) / 2 for c in cols], ticktext=[str(h) for h in range(H)],
                     title="head" + (f" (grouped by the {kv_heads} key/value heads they share)" if groups > 1
                                     else ""), side="top")
    step = 1 if N <= 12 else 5
    fig.update_yaxes(range=[z.shape[0] - 0.5, -0.5], autorange=False, showgrid=False, zeroline=False,
                     tickmode="array", tickvals=[rows[n] + (side - 1) / 2 for n in range(0, N, step)],
                     ticktext=[str(n) for n in range(0, N, step)], title="layer")
    if groups > 1:
        for g in range(kv_heads):
            x0, x1 = cols[g * groups] - 0.5, cols[(g + 1) * groups - 1] + side - 0.5
            fig.add_shape(type="rect", x0=x0 - 0.7, x1=x1 + 0.7, y0=-1.2, y1=z.shape[0] + 0.2,
                          line={"color": PALETTE[7], "width": 1, "dash": "dot"})
    if layer is not None and 0 <= layer < N:
        fig.add_shape(type="rect", x0=cols[0] - 0.5, x1=cols[-1] + side - 0.5, y0=rows[layer] - 0.5,
                      y1=rows[layer] + side - 0.5, line={"color": PALETTE[5], "width": 3})
    height = int(min(1500, max(320, 60 + N * (side + 1) * (9 if N > 12 else 14))))
    style(fig, height=height)
    return fig.update_layout(meta={"view": "rt-overview", "layers": N, "heads": H, "kv_heads": int(kv_heads),
                                   "side": int(side), "rows": rows, "cols": cols, "name": html.escape(name),
                                   "layer": layer},
                             showlegend=False)


def generation_figure(weights: np.ndarray, prompt: Sequence[str], new: Sequence[str], *, layer: int,
                      head: int) -> go.Figure:
    """What each generated token's predicting query attended to (``rt-gen``): row t = step t (the query
    that predicted generated token t), columns = keys (prompt, then the generated tokens), one head.

    ``weights`` (T, S) with S = P + T - 1; a step's keys past its own position are blank.
    ``layout.meta``: ``view``, ``layer``, ``head``.
    """
    w = np.asarray(weights, dtype=np.float64).copy()
    T, S = w.shape
    P = len(prompt)
    for t in range(T):
        w[t, P + t:] = np.nan
    keys = [f"{j}: {chart(x)}" for j, x in enumerate(list(prompt) + list(new)[: S - P])]
    rows = [f"→ {t}: {chart(x)}" for t, x in enumerate(new)]
    fig = go.Figure(go.Heatmap(z=w, x=keys, y=rows, colorscale=figures.SEQUENTIAL, zmin=0.0, zmax=1.0,
                               hoverongaps=False, colorbar={"thickness": 12, "title": {"text": "weight"}},
                               hovertemplate="predicting %{y}<br>key %{x}<br>weight %{z:.4f}<extra></extra>"))
    fig.add_vline(x=P - 0.5, line={"color": PALETTE[7], "dash": "dash", "width": 1})
    fig.update_yaxes(autorange="reversed", title="new token")
    fig.update_xaxes(title="key (prompt | generated)", tickangle=-60)
    style(fig, height=int(min(900, 160 + 22 * T)))
    return fig.update_layout(meta={"view": "rt-gen", "layer": int(layer), "head": int(head)})
