"""Shared Plotly primitives: numpy arrays in, ``go.Figure`` out. Never calls streamlit.

Page-specific builders live in :mod:`ui.views` (one module per page) and are built from these.

One visual language for every page:

* weights and other non-negative maps use ``Viridis`` (perceptually uniform,
  colour-blind safe, readable on light and dark backgrounds);
* signed data (raw scores) use the diverging ``RdBu_r`` centred at 0;
* lines use the Okabe-Ito palette; theory curves are dashed, measurements solid
  with error bars;
* backgrounds are transparent so Streamlit's light and dark themes both work.

Arrays are sent as float32 and large maps are block-averaged to at most
``max_side`` cells per side, so chart payloads stay small.
"""

from __future__ import annotations

import copy
import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import plotly.graph_objects as go
import torch
from numpy.typing import ArrayLike, NDArray
from plotly.subplots import make_subplots

from ui.text import chart

__all__ = [
    "DIVERGING",
    "PALETTE",
    "SEQUENTIAL",
    "Band",
    "Curve",
    "GridParts",
    "Histogram",
    "Marker",
    "Panel",
    "as_f32",
    "axis_name",
    "downsample",
    "downsample_stack",
    "MASKED_GREY",
    "PRESENT_DIVERGING",
    "PRESENT_SEQUENTIAL",
    "downsample_signed",
    "grid_parts",
    "masked_legend",
    "present",
    "heatmap",
    "heatmap_grid",
    "heatmap_hover",
    "heatmap_props",
    "heatmap_trace",
    "legend_below",
    "legend_key",
    "line_chart",
    "log_ticks",
    "mark_x",
    "panel_grid",
    "relayout",
    "style",
    "title_annotation",
]

SEQUENTIAL = "Viridis"
DIVERGING = "RdBu_r"
# Okabe-Ito, with grey instead of black so it reads on dark backgrounds too.
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#999999")

Array = NDArray[np.floating]
# Presenter mode (issue 11): chart text that reads from the back of a lecture hall, and colour scales
# whose ends stay apart when a projector washes the dark tones out.
PRESENT_TICK_PX = 16
PRESENT_LEGEND_PX = 14
PRESENT_TITLE_PX = 20
PRESENT_SEQUENTIAL = "Plasma"
PRESENT_DIVERGING = "Balance"
# Masked (−∞) cells are NaN in a chart; heatmap figures paint the plot area this neutral grey, so a
# masked cell reads as "no score", distinct from a score of 0 (white on the diverging scale).
MASKED_GREY = "#8c8c8c"


def _merged(old: dict, new: dict) -> dict:
    """``new`` deep-merged into ``old`` (dicts merge, anything else replaces), as Plotly's update does."""
    out = dict(old)
    for k, v in new.items():
        out[k] = _merged(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def relayout(fig: go.Figure, **props: object) -> go.Figure:
    """``fig.update_layout(**props)``, about 5x faster for top-level layout properties.

    Plotly's ``update_layout`` runs every key through its batch-update and relayout machinery (built
    for live widgets): 5-10 ms per call, most of a chart's build time and of a page rerun (issue 11).
    Assigning each top-level property once, merged with what the figure already has, sets the same
    values. Dotted / underscore paths (``xaxis_title``) and subplot axes go through ``update_layout``.
    """
    lay = fig.layout
    slow: dict[str, object] = {}
    for k, v in props.items():
        if k not in lay._valid_props:  # a magic underscore path or a subplot axis (xaxis2)
            slow[k] = v
            continue
        if isinstance(v, dict):
            cur = lay[k]
            old = cur.to_plotly_json() if hasattr(cur, "to_plotly_json") else None
            if old:
                v = _merged(old, v)
        lay[k] = v
    if slow:
        fig.update_layout(**slow)
    return fig


def style(fig: go.Figure, *, title: str | None = None, height: int | None = None) -> go.Figure:
    """Apply the shared layout: transparent background, compact margins, palette."""
    if title is not None:
        relayout(fig, title={"text": title, "x": 0.0, "xanchor": "left", "font": {"size": 15}})
    elif fig.layout.title.text is not None:
        relayout(fig, title=None)  # no title: clear one the figure had
    relayout(
        fig,
        margin={"l": 10, "r": 10, "t": 40 if title else 10, "b": 10},
        paper_bgcolor="rgba(0,0,0,0)",
        plot_bgcolor="rgba(0,0,0,0)",
        colorway=list(PALETTE),
        hoverlabel={"namelength": -1},
        legend={"orientation": "h", "yanchor": "bottom", "y": 1.02, "x": 0.0},
    )
    if height is not None:
        relayout(fig, height=height)
    return fig


def _bigger(font: object, px: int) -> dict:
    size = getattr(font, "size", None) if font is not None else None
    return {"size": max(px, int(size or 0))}


def present(fig: go.Figure) -> go.Figure:
    """Presenter styling of any figure, in place: ticks and axis titles >= 16 px, legends >= 14 px,
    annotations (subplot titles, labels) >= 16 px, thicker lines, taller, high-contrast colour scales.

    ``layout.meta.present`` is set, so tests and the browser can tell a presented chart.
    """
    lay = fig.layout
    fig.update_layout(font={"size": PRESENT_TICK_PX},
                      legend={"font": _bigger(lay.legend.font, PRESENT_LEGEND_PX)},
                      hoverlabel={"font": {"size": PRESENT_LEGEND_PX}})
    if lay.title is not None and lay.title.text:
        fig.update_layout(title={"font": {"size": PRESENT_TITLE_PX}})
    fig.update_xaxes(tickfont={"size": PRESENT_TICK_PX}, title_font={"size": PRESENT_TICK_PX})
    fig.update_yaxes(tickfont={"size": PRESENT_TICK_PX}, title_font={"size": PRESENT_TICK_PX})
    # Plotly labels a log axis's 2s and 5s in small digits; a projected chart labels decades only.
    fig.for_each_xaxis(lambda ax: ax.update(dtick=1) if ax.type == "log" and ax.dtick is None else None)
    fig.for_each_yaxis(lambda ax: ax.update(dtick=1) if ax.type == "log" and ax.dtick is None else None)
    for a in lay.annotations or ():
        a.font = {**(a.font.to_plotly_json() if a.font else {}), **_bigger(a.font, PRESENT_TICK_PX)}

    for tr in fig.data:
        if isinstance(tr, go.Heatmap):
            if tr.colorscale is not None:
                tr.colorscale = PRESENT_DIVERGING if tr.zmid is not None else PRESENT_SEQUENTIAL
            tr.colorbar.tickfont = {"size": PRESENT_TICK_PX}
        elif isinstance(tr, go.Scatter) and tr.line is not None and tr.line.width:
            tr.line.width = max(3.0, float(tr.line.width))
    if lay.coloraxis is not None and lay.coloraxis.colorscale is not None:
        diverging = lay.coloraxis.cmid is not None
        fig.update_layout(coloraxis={"colorscale": PRESENT_DIVERGING if diverging else PRESENT_SEQUENTIAL,
                                     "colorbar": {"tickfont": {"size": PRESENT_TICK_PX}}})
    if lay.height:
        fig.update_layout(height=int(lay.height * 1.15))
    fig.update_layout(meta={**(lay.meta if isinstance(lay.meta, dict) else {}), "present": True})
    return fig


def as_f32(a: ArrayLike) -> NDArray[np.float32]:
    """A contiguous float32 copy (or view): what every chart sends to the browser."""
    return np.ascontiguousarray(np.asarray(a, dtype=np.float32))


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


def axis_name(i: int) -> str:
    """Plotly's suffix of the i-th subplot axis: '' for the first, then '2', '3', ..."""
    return "" if i == 0 else str(i + 1)


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


@dataclass
class Curve:
    """One series on a line chart.

    ``err`` draws symmetric error bars; ``theory`` curves are dashed and unmarked.
    """

    name: str
    x: ArrayLike
    y: ArrayLike
    err: ArrayLike | None = None
    theory: bool = False
    color: str | None = None
    hover: str = ""
    extra: dict = field(default_factory=dict)


def line_chart(
    curves: Sequence[Curve],
    *,
    title: str | None = None,
    x_title: str = "",
    y_title: str = "",
    log_x: bool = False,
    log_y: bool = False,
    height: int = 380,
) -> go.Figure:
    """Measurements (solid, markers, error bars) and theory (dashed) on shared axes."""
    fig = _figure(_curve_traces(curves))  # one construction, not one add_trace per curve
    relayout(fig, xaxis={"title": {"text": x_title}, "type": "log" if log_x else "linear"},
             yaxis={"title": {"text": y_title}, "type": "log" if log_y else "linear"})
    return style(fig, title=title, height=height)


# --------------------------------------------------------------------------- small multiples and markers


def _rgba(hex_color: str, alpha: float) -> str:
    h = hex_color.lstrip("#")
    r, g, b = (int(h[i : i + 2], 16) for i in (0, 2, 4))
    return f"rgba({r},{g},{b},{alpha})"


@dataclass
class Band:
    """A shaded range ``lo..hi`` along x (an interquartile range or ±1 standard error)."""

    name: str
    x: ArrayLike
    lo: ArrayLike
    hi: ArrayLike
    color: str = PALETTE[0]


@dataclass
class Histogram:
    """Density bars: ``edges`` (bins+1,) and ``density`` (bins,)."""

    name: str
    edges: ArrayLike
    density: ArrayLike
    color: str = PALETTE[4]


@dataclass
class Marker:
    """A vertical reference line at ``x``, labelled at height ``y`` (0 bottom, 1 top of the plot)."""

    x: float
    label: str
    color: str = PALETTE[7]
    y: float = 1.0


@dataclass
class Panel:
    """One subplot of :func:`panel_grid`: bars, bands, then curves (theory dashed), then markers."""

    title: str
    curves: Sequence[Curve] = ()
    y_title: str = ""
    log_y: bool = False
    x_title: str = ""
    log_x: bool = False
    bands: Sequence[Band] = ()
    hist: Histogram | None = None
    markers: Sequence[Marker] = ()
    y_range: tuple[float, float] | None = None


def legend_key(name: str, *, dash: str = "solid", symbol: str | None = None,
               color: str = PALETTE[7]) -> Curve:
    """A legend-only entry explaining a line style (drawn nowhere)."""
    mode = "markers" if symbol and dash == "none" else "lines+markers" if symbol else "lines"
    extra: dict = {"mode": mode, "showlegend": True, "hoverinfo": "skip", "legendgroup": f"key:{name}",
                   "line": {"color": color, "dash": "solid" if dash == "none" else dash, "width": 2}}
    if symbol:
        extra["marker"] = {"symbol": symbol, "size": 8, "color": color}
    return Curve(name, [None], [None], color=color, extra=extra)


def _decade_ticks(p: Panel) -> dict:
    """Label only whole decades on a log x axis spanning two or more of them (no 2, 5 clutter)."""
    xs = [np.asarray(c.x, dtype=np.float64) for c in p.curves]
    xs = [x[np.isfinite(x) & (x > 0)] for x in xs]
    xs = [x for x in xs if x.size]
    if not p.log_x or not xs:
        return {}
    lo, hi = min(float(x.min()) for x in xs), max(float(x.max()) for x in xs)
    return {"dtick": 1} if np.log10(hi / lo) >= 2 else {}


@functools.lru_cache(maxsize=64)
def _grid(rows: int, cols: int, titles: tuple[str, ...], shared_x: bool) -> go.Figure:
    """The empty subplot grid of :func:`panel_grid` (``make_subplots`` takes 20-200 ms; a copy of a
    cached grid a fifth of that). Never handed out: :func:`panel_grid` copies it."""
    fig = make_subplots(rows=rows, cols=cols, subplot_titles=list(titles),
                        shared_xaxes="all" if shared_x else False,
                        horizontal_spacing=0.08 if cols > 1 else 0.0,
                        vertical_spacing=0.16 if rows > 1 else 0.0)
    fig.update_annotations(font_size=13)  # the subplot titles
    return fig


@functools.lru_cache(maxsize=64)
def _grid_layout(rows: int, cols: int, titles: tuple[str, ...], shared_x: bool) -> dict:
    """The layout of :func:`_grid` as a plain dict (cached: callers copy it)."""
    return _grid(rows, cols, titles, shared_x).layout.to_plotly_json()


def _curve_traces(curves: Sequence[Curve]) -> list[dict]:
    """The traces :func:`line_chart` draws for ``curves`` (theory dashed, measurements with error bars).

    Plain dicts: the figure is built from them without Plotly's per-property validation
    (``_validate=False``, see :func:`_figure`), which took ~1 ms a trace, most of a chart's build.
    """
    traces = []
    for i, c in enumerate(curves):
        color = c.color or PALETTE[i % len(PALETTE)]
        kw: dict = {"type": "scatter", "x": as_f32(c.x), "y": as_f32(c.y), "name": c.name}
        if c.theory:
            kw.update(mode="lines", line={"color": color, "dash": "dash", "width": 2})
        else:
            kw.update(mode="lines+markers", line={"color": color, "width": 2}, marker={"size": 6})
            if c.err is not None:
                kw["error_y"] = {"type": "data", "array": as_f32(c.err), "visible": True, "thickness": 1.2}
        kw["hovertemplate"] = (c.hover or f"{c.name}<br>x %{{x:.4g}}<br>y %{{y:.4g}}") + "<extra></extra>"
        kw.update(c.extra)
        traces.append(kw)
    return traces


def _figure(traces: Sequence[dict], layout: dict | None = None) -> go.Figure:
    """A figure of dict traces built without per-property validation (10x faster than validated
    ``go.Scatter`` objects for the Entropy page's 45 traces: 38 -> 4 ms). The dicts are written by
    this module with plain nested keys (no ``line_dash`` shorthands); the JSON is the same."""
    return go.Figure(data=list(traces), layout=layout, _validate=False)


def panel_grid(panels: Sequence[Panel], *, cols: int = 2, height: int | None = None,
               shared_x: bool = False, title: str | None = None,
               legend: Sequence[Curve] = ()) -> go.Figure:
    """Small multiples of measurement-vs-theory panels sharing one legend.

    Curves are drawn as :func:`line_chart` draws them (so they look the same as everywhere else);
    a series (its ``legendgroup``, else its name) that appears in several panels gets one
    legend entry that toggles it everywhere. Bands are filled between ``lo`` and ``hi``
    under their curve. ``legend`` adds style keys (see :func:`legend_key`). When every
    panel has the same x title it is written under the bottom row only.
    """
    if not panels:
        raise ValueError("panel_grid needs at least one panel.")
    cols = max(1, min(cols, len(panels)))
    rows = -(-len(panels) // cols)
    key = (rows, cols, tuple(p.title for p in panels), shared_x)
    grid = _grid(*key)
    lay = copy.deepcopy(_grid_layout(*key))  # a plain dict: built into the figure once, at the end
    one_x_title = len({p.x_title for p in panels}) == 1
    seen: set[str] = set()
    # A band shades the range of a curve of its name: the legend entry is the curve's (its swatch the
    # curve's colour), not the band's pale fill (issue 34: softmax and sigmoid looked alike).
    curve_groups = {(c.extra or {}).get("legendgroup", c.name) for p in panels for c in p.curves}

    def legend_once(name: str) -> bool:
        first = name not in seen
        seen.add(name)
        return first

    # Subplots are numbered row by row, as the panels are: panel i draws on axes x{i+1} / y{i+1}.
    traces: list = []
    axes: dict[str, dict] = {}
    shapes: list[dict] = []
    notes: list[dict] = []
    for i, p in enumerate(panels):
        r = i // cols + 1
        sfx = axis_name(i)
        on = {"xaxis": f"x{sfx}", "yaxis": f"y{sfx}"}
        if p.hist is not None:
            h = p.hist
            edges = np.asarray(h.edges, dtype=np.float64)
            traces.append({"type": "bar", "x": as_f32((edges[:-1] + edges[1:]) / 2), "y": as_f32(h.density),
                           "width": float(edges[1] - edges[0]), "name": h.name, "legendgroup": h.name,
                           "showlegend": legend_once(h.name),
                           "marker": {"color": _rgba(h.color, 0.55), "line": {"width": 0}},
                           "hovertemplate": f"{h.name}<br>x %{{x:.4g}}<br>density %{{y:.4g}}<extra></extra>",
                           **on})
        for b in p.bands:
            x = as_f32(b.x)
            traces.append({"type": "scatter", "x": np.concatenate([x, x[::-1]]),
                           "y": np.concatenate([as_f32(b.hi), as_f32(b.lo)[::-1]]),
                           "fill": "toself", "fillcolor": _rgba(b.color, 0.18), "line": {"width": 0},
                           "name": b.name, "legendgroup": b.name,
                           "showlegend": b.name not in curve_groups and legend_once(b.name),
                           "hoverinfo": "skip", **on})
        for tr in _curve_traces(p.curves):
            group = tr.get("legendgroup") or tr["name"]
            shown = False if tr.get("showlegend") is False else legend_once(group)
            tr.update(legendgroup=group, showlegend=shown, **on)
            traces.append(tr)
        # Log axes label powers of ten (10⁻⁹), not SI prefixes (1n), which read badly for errors.
        x_title = p.x_title if (r == rows or not one_x_title) else None
        xa = lay[f"xaxis{sfx}"]
        xa.update(type="log" if p.log_x else "linear", exponentformat="power" if p.log_x else "B",
                  **_decade_ticks(p))
        if x_title is not None:
            xa["title"] = {"text": x_title}
        ya = lay[f"yaxis{sfx}"]
        ya.update(title={"text": p.y_title}, type="log" if p.log_y else "linear",
                  exponentformat="power" if p.log_y else "B")
        if p.y_range is not None:
            lo, hi = p.y_range
            ya["range"] = [np.log10(lo), np.log10(hi)] if p.log_y else [lo, hi]
        axes[f"xaxis{sfx}"], axes[f"yaxis{sfx}"] = xa, ya
        for m in p.markers:
            # Shapes take data coordinates on log axes; annotations take log10 of them.
            shapes.append({"type": "line", "x0": float(m.x), "x1": float(m.x), "y0": 0, "y1": 1,
                           "xref": f"x{sfx}", "yref": f"y{sfx} domain",
                           "line": {"color": m.color, "width": 1, "dash": "dot"}})
            notes.append({"x": float(np.log10(m.x)) if p.log_x else float(m.x), "y": m.y,
                          "xref": f"x{sfx}", "yref": f"y{sfx} domain", "text": m.label, "showarrow": False,
                          "xanchor": "left", "yanchor": "top", "font": {"size": 11, "color": m.color}})
    for tr in _curve_traces(legend):
        tr.update(xaxis="x", yaxis="y")
        traces.append(tr)
    lay.update(axes)  # whole axes, as update_xaxes(row=, col=) would leave them
    if shapes:
        lay["shapes"] = shapes
    if notes:
        lay["annotations"] = [*lay.get("annotations", []), *notes]
    fig = _figure(traces, lay)
    fig._grid_ref, fig._grid_str = grid._grid_ref, grid._grid_str  # add_vline(row=...) and friends work
    relayout(fig, bargap=0.0, hovermode="closest")
    fig = style(fig, title=title, height=height or 330 * rows + 40)
    # The legend sits at the very top of the figure, the subplot titles below it.
    relayout(fig, legend={"yref": "container", "y": 1.0, "yanchor": "top", "x": 0.0},
             margin={"t": 96 if title else 72})
    return fig


# --------------------------------------------------------------------------- chart touches


def mark_x(fig: go.Figure, x: float, label: str) -> go.Figure:
    """A dotted vertical line at ``x`` with a short label (the current slider value)."""
    if fig._grid_ref is not None:  # subplots: add_vline draws the line on every one of them
        fig.add_vline(x=x, line={"color": PALETTE[7], "dash": "dot", "width": 1.5},
                      annotation_text=label, annotation_position="top left",
                      annotation_font={"size": 11, "color": PALETTE[7]})
        return fig
    # One plot: the shape and label add_vline makes, appended directly (add_vline costs ~15 ms).
    lay = fig.layout
    line = {"color": PALETTE[7], "dash": "dot", "width": 1.5}
    lay.shapes = (*lay.shapes, {"type": "line", "x0": x, "x1": x, "xref": "x", "y0": 0, "y1": 1,
                                "yref": "y domain", "line": line})
    lay.annotations = (*lay.annotations, {"text": label, "x": x, "xref": "x", "y": 1, "yref": "y domain",
                                          "xanchor": "right", "yanchor": "top", "showarrow": False,
                                          "font": {"size": 11, "color": PALETTE[7]}})
    return fig


def legend_below(fig: go.Figure) -> go.Figure:
    """Move the legend under the plot, so it never collides with a title."""
    relayout(fig, legend={"orientation": "h", "yanchor": "top", "y": -0.22, "x": 0.0, "font": {"size": 11}},
             margin={"b": 10})
    return fig


MAX_LOG_LABELS = 6  # decade labels on a log y axis of an ordinary chart (a 400 px chart, 16 px text)


def log_ticks(fig: go.Figure, max_labels: int = MAX_LOG_LABELS) -> go.Figure:
    """Powers of ten only, written as 10^k, on a log y axis: every decade, or every k-th decade when the
    data span more than ``max_labels`` of them (issue 34: a row sum falling to 1e-40 put 40 labels on a
    400 px axis, piled into one block). Data within two decades get 1-2-5 labels written in full (0.2,
    not Plotly's bare "2"). Call it after the last trace is added."""
    ys = [np.asarray(tr.y, dtype=np.float64).ravel() for tr in fig.data if getattr(tr, "y", None) is not None]
    ys = [y[np.isfinite(y) & (y > 0)] for y in ys]
    ys = [y for y in ys if y.size]
    step = 1
    if ys:
        ymin, ymax = min(float(y.min()) for y in ys), max(float(y.max()) for y in ys)
        lo, hi = math.floor(math.log10(ymin)), math.ceil(math.log10(ymax))
        if hi - lo <= 2:
            # two decades or less: Plotly's own labels there are bare digits ("2", "5" for 0.2 and 0.5,
            # read as 2 and 5); label 1-2-5 steps with their full values instead
            vals = [m * 10.0**k for k in range(lo, hi + 1) for m in (1, 2, 5)
                    if ymin / 2 <= m * 10.0**k <= ymax * 2]
            fig.update_yaxes(tickmode="array", tickvals=vals, ticktext=[f"{v:g}" for v in vals])
            return fig
        step = max(1, math.ceil((hi - lo) / max_labels))
    fig.update_yaxes(dtick=step, exponentformat="power")
    return fig
