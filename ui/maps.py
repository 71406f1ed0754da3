"""Maps as charts: 2-D arrays (weights, scores) block-averaged to what a screen shows, as Plotly
heatmaps, grids of them (one per head) and their plain-dict parts for fast builds; masked (−∞) cells in
grey. Arrays in, ``go.Figure`` (or dicts) out; never calls streamlit. Colours, layout and axes come from
:mod:`ui.figures`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import plotly.graph_objects as go
import torch
from numpy.typing import ArrayLike, NDArray

from ui.figures import DIVERGING, SEQUENTIAL, axis_name, relayout, style
from ui.text import chart

__all__ = [
    "GridParts",
    "MASKED_GREY",
    "downsample",
    "downsample_signed",
    "downsample_stack",
    "grid_parts",
    "heatmap",
    "heatmap_grid",
    "heatmap_hover",
    "heatmap_props",
    "heatmap_trace",
    "masked_legend",
    "title_annotation",
]


# Masked (−∞) cells are NaN in a chart; heatmap figures paint the plot area this neutral grey, so a
# masked cell reads as "no score", distinct from a score of 0 (white on the diverging scale).
MASKED_GREY = "#8c8c8c"


def downsample(z: ArrayLike, max_side: int) -> tuple[NDArray[np.float32], int, int]:
    """Block-average a 2-D map to at most ``max_side`` cells per side.

    Non-finite cells (masked, shown blank) are left out of each block's mean; a
    block with no finite cell stays NaN. Returns ``(small, row_factor, col_factor)``;
    cell ``(i, j)`` of ``small`` covers rows ``i*row_factor ...`` and columns
    ``j*col_factor ...`` of ``z``.
    """
    a = np.asarray(z, dtype=np.float32)
    if a.ndim != 2:
        raise ValueError(f"heatmaps need a 2-D array; got shape {a.shape}.")
    if max_side < 1:
        raise ValueError("max_side must be at least 1.")
    return downsample_stack(a, max_side)


def downsample_stack(a: ArrayLike, max_side: int) -> tuple[NDArray[np.float32], int, int]:
    """:func:`downsample` applied to every map of a stack (..., L, S) at once (same blocks, same NaN rule)."""
    x = np.asarray(a, dtype=np.float32)
    n, m = x.shape[-2:]
    fr, fc = -(-n // max_side), -(-m // max_side)
    if fr == 1 and fc == 1:
        return np.where(np.isfinite(x), x, np.nan).astype(np.float32), 1, 1
    rows, cols = -(-n // fr), -(-m // fc)
    lead = x.shape[:-2]
    finite = np.isfinite(x)
    if finite.all():
        # The usual case: block means by torch's average pooling (ceil_mode: an edge block is averaged
        # over the cells it has). A real model's 6 x 12 maps of 512 x 512: ~10-19 ms against 57 ms for
        # numpy's float64 block sums (the same means to ~5e-7), on every rerun of a 512-token view.
        t = torch.from_numpy(np.ascontiguousarray(x)).reshape(-1, 1, n, m)
        small = torch.nn.functional.avg_pool2d(t, (fr, fc), ceil_mode=True)
        return small.reshape(*lead, rows, cols).numpy(), fr, fc
    vals = np.zeros((*lead, rows * fr, cols * fc), dtype=np.float64)
    counts = np.zeros((*lead, rows * fr, cols * fc), dtype=np.float32)
    vals[..., :n, :m] = np.where(finite, x, 0.0)
    counts[..., :n, :m] = finite
    sums = vals.reshape(*lead, rows, fr, cols, fc).sum(axis=(-3, -1))
    cnt = counts.reshape(*lead, rows, fr, cols, fc).sum(axis=(-3, -1))
    with np.errstate(invalid="ignore", divide="ignore"):
        small = np.where(cnt > 0, sums / np.maximum(cnt, 1), np.nan)
    return small.astype(np.float32), fr, fc


def downsample_signed(z: ArrayLike, max_side: int) -> tuple[NDArray[np.float32], int, int]:
    """Downsample a signed map by keeping, per block, the entry of largest magnitude with its sign.

    Block means of signed scores cancel to 0 (grey-white on a diverging scale) when a block
    mixes signs; the max-|x| rule keeps the strongest score of each block visible. Non-finite
    cells are left out; a block with no finite cell stays NaN. Same blocks as :func:`downsample`.
    """
    x = np.asarray(z, dtype=np.float32)
    if x.ndim < 2:
        raise ValueError(f"heatmaps need a 2-D array; got shape {x.shape}.")
    n, m = x.shape[-2:]
    fr, fc = -(-n // max_side), -(-m // max_side)
    clean = np.where(np.isfinite(x), x, np.nan).astype(np.float32)
    if fr == 1 and fc == 1:
        return clean, 1, 1
    rows, cols = -(-n // fr), -(-m // fc)
    lead = x.shape[:-2]
    pad = np.full((*lead, rows * fr, cols * fc), np.nan, dtype=np.float32)
    pad[..., :n, :m] = clean
    blocks = np.moveaxis(pad.reshape(*lead, rows, fr, cols, fc), -3, -2).reshape(*lead, rows, cols, fr * fc)
    mag = np.where(np.isnan(blocks), -1.0, np.abs(blocks))
    pick = np.take_along_axis(blocks, mag.argmax(axis=-1)[..., None], axis=-1)[..., 0]
    return pick.astype(np.float32), fr, fc


def masked_legend(name: str = "masked (−∞)") -> go.Scatter:
    """A legend-only grey square naming the masked cells of a heatmap figure."""
    return go.Scatter(x=[None], y=[None], mode="markers", name=name, showlegend=True, hoverinfo="skip",
                      marker={"symbol": "square", "size": 12, "color": MASKED_GREY})


def heatmap_hover(fr: int, fc: int, value_name: str, *, signed_rule: bool = False) -> str:
    """A heatmap's hover template: the cell's query, key and value, or for a block-averaged map (``fr`` x
    ``fc`` cells per block) the block's first query and key and its mean (``signed_rule``: largest |x|)."""
    if fr == 1 and fc == 1:
        return f"query %{{y}}<br>key %{{x}}<br>{value_name} %{{z:.6g}}<extra></extra>"
    rule = "largest-|·|" if signed_rule else "mean"
    return (f"queries %{{y}}…+{fr - 1}<br>keys %{{x}}…+{fc - 1}<br>"
            f"{rule} {value_name} %{{z:.6g}}<extra></extra>")


def heatmap_props(small: np.ndarray, fr: int, fc: int, *, value_name: str) -> dict:
    """The properties of an unlabelled heatmap trace of a map already block-averaged by ``fr`` x ``fc``
    (:func:`downsample`), as :func:`heatmap_trace` sets them: cells at 0, fc, 2 fc, ... (rows: fr)."""
    return {"z": small, "x0": 0, "dx": fc, "y0": 0, "dy": fr,
            "hovertemplate": heatmap_hover(fr, fc, value_name), "hoverongaps": False}


def heatmap_trace(
    z: ArrayLike,
    *,
    max_side: int,
    diverging: bool,
    value_name: str,
    x_labels: Sequence[str] | None,
    y_labels: Sequence[str] | None,
    coloraxis: str | None = None,
    zmin: float | None = None,
    zmax: float | None = None,
    colorbar: str = "right",
    signed_rule: bool = False,
) -> go.Heatmap:
    """One heatmap trace. Large maps are block-averaged (``signed_rule``: max-|x| per block, signed)."""
    small, fr, fc = (downsample_signed if signed_rule else downsample)(z, max_side)
    kw: dict = {"z": small}
    if x_labels is not None and fc == 1:  # labels may be a user's tokens: drawn as typed (ui.text.chart)
        kw["x"] = [f"{j}:{chart(t)}" for j, t in enumerate(x_labels)]
    else:
        kw.update(x0=0, dx=fc)
    if y_labels is not None and fr == 1:
        kw["y"] = [f"{i}:{chart(t)}" for i, t in enumerate(y_labels)]
    else:
        kw.update(y0=0, dy=fr)
    hover = heatmap_hover(fr, fc, value_name, signed_rule=signed_rule)
    if coloraxis is not None:
        kw["coloraxis"] = coloraxis
    else:
        kw["colorscale"] = DIVERGING if diverging else SEQUENTIAL
        if diverging:
            kw["zmid"] = 0.0
        if zmin is not None:
            kw["zmin"] = zmin
        if zmax is not None:
            kw["zmax"] = zmax
        if colorbar == "bottom":
            kw["colorbar"] = {"thickness": 8, "orientation": "h", "y": -0.04, "yanchor": "top",
                              "len": 1.0}
        else:
            kw["colorbar"] = {"thickness": 12, "len": 0.9}
    return go.Heatmap(hovertemplate=hover, hoverongaps=False, **kw)


def heatmap(
    z: ArrayLike,
    *,
    title: str | None = None,
    diverging: bool = False,
    value_name: str = "weight",
    x_labels: Sequence[str] | None = None,
    y_labels: Sequence[str] | None = None,
    max_side: int = 512,
    zmin: float | None = None,
    zmax: float | None = None,
    height: int = 420,
    x_title: str = "key",
    y_title: str = "query",
    colorbar: str = "right",
) -> go.Figure:
    """One attention map (L, S): query rows top to bottom, keys left to right.

    ``diverging`` centres a red-blue scale at 0 (for signed scores). NaN or
    infinite cells (masked keys) are blank. Hover shows query, key and value.
    ``colorbar``: ``"right"`` or ``"bottom"`` (horizontal, for narrow columns).
    """
    fig = go.Figure(heatmap_trace(z, max_side=max_side, diverging=diverging, value_name=value_name,
                                   x_labels=x_labels, y_labels=y_labels, zmin=zmin, zmax=zmax,
                                   colorbar=colorbar))
    relayout(fig, yaxis={"autorange": "reversed", "title": {"text": y_title}, "showgrid": False,
                         "zeroline": False},
             xaxis={"title": {"text": x_title}, "side": "top", "showgrid": False, "zeroline": False})
    return style(fig, title=title, height=height)


def title_annotation(text: str, x0: float, x1: float, y: float) -> dict:
    """A centred subplot title over paper coordinates [x0, x1] at height y."""
    return {"text": text, "x": (x0 + x1) / 2, "y": y, "xref": "paper", "yref": "paper",
            "xanchor": "center", "yanchor": "bottom", "showarrow": False, "font": {"size": 12}}


def heatmap_grid(
    maps: Sequence[ArrayLike],
    titles: Sequence[str],
    *,
    cols: int = 4,
    max_side: int = 64,
    diverging: bool = False,
    value_name: str = "weight",
    zmin: float | None = None,
    zmax: float | None = None,
    cell_height: int = 170,
) -> go.Figure:
    """Small multiples (e.g. one thumbnail per head) sharing one colour axis."""
    g = grid_parts(maps, titles, cols=cols, max_side=max_side, diverging=diverging, value_name=value_name,
                   zmin=zmin, zmax=zmax, cell_height=cell_height)
    fig = go.Figure(data=g.traces, layout=g.layout)
    style(fig, height=g.height)
    relayout(fig, margin={"t": 28})  # room for the top row's titles
    return fig


@dataclass
class GridParts:
    """What :func:`heatmap_grid` draws, before it becomes a figure: one heatmap trace (a plain dict) per map
    on its own pair of axes, the layout (axes, shared colour axis, titles) and the figure's height. A
    builder that adds to the grid (pick points, outlines) adds plain dicts and makes the figure once: Plotly
    validates every ``add_trace`` and layout update on its own (a 12-map clickable grid: ~85 ms that way,
    ~25 ms at once).
    """

    traces: list[dict]
    layout: dict
    height: int
    cells: list[tuple[int, int, int, int]]  # per map: (rows, columns) drawn, (row, column) block factors


def grid_parts(
    maps: Sequence[ArrayLike],
    titles: Sequence[str],
    *,
    cols: int = 4,
    max_side: int = 64,
    diverging: bool = False,
    value_name: str = "weight",
    zmin: float | None = None,
    zmax: float | None = None,
    cell_height: int = 170,
) -> GridParts:
    """The parts of :func:`heatmap_grid` (see :class:`GridParts`)."""
    if len(maps) != len(titles):
        raise ValueError("one title per map is needed.")
    n = len(maps)
    cols = max(1, min(cols, n))
    rows = -(-n // cols)
    height = cell_height * rows + 30
    hgap, vgap = 0.02, min(0.08, 40 / height)
    cw = (1 - hgap * (cols - 1)) / cols
    ch = (1 - vgap * (rows - 1)) / rows
    traces, layout, notes, cells = [], {}, [], []
    for i, z in enumerate(maps):
        r, c = divmod(i, cols)
        x0 = min(1.0, max(0.0, c * (cw + hgap)))
        y1 = min(1.0, max(0.0, 1 - r * (ch + vgap)))
        name = axis_name(i)
        small, fr, fc = downsample(z, max_side)
        cells.append((small.shape[0], small.shape[1], fr, fc))
        traces.append({"type": "heatmap", **heatmap_props(small, fr, fc, value_name=value_name),
                       "coloraxis": "coloraxis", "xaxis": f"x{name}", "yaxis": f"y{name}"})
        bare = {"showticklabels": False, "showgrid": False, "zeroline": False}
        layout[f"xaxis{name}"] = {"domain": [x0, min(1.0, x0 + cw)], "anchor": f"y{name}", **bare}
        layout[f"yaxis{name}"] = {"domain": [max(0.0, y1 - ch), y1], "anchor": f"x{name}",
                                  "autorange": "reversed", **bare}
        notes.append(title_annotation(titles[i], x0, x0 + cw, y1))
    axis: dict = {"colorscale": DIVERGING if diverging else SEQUENTIAL, "colorbar": {"thickness": 12}}
    if diverging:
        axis["cmid"] = 0.0
    if zmin is not None:
        axis["cmin"] = zmin
    if zmax is not None:
        axis["cmax"] = zmax
    return GridParts(traces=traces, layout={**layout, "coloraxis": axis, "annotations": notes}, height=height,
                     cells=cells)
