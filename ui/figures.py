"""Shared Plotly primitives: numpy arrays in, ``go.Figure`` out. Never calls streamlit.

Page-specific builders live in :mod:`ui.views` (one module per page) and are built from these;
maps (heatmaps, grids of them, downsampling) are in :mod:`ui.maps`.

One visual language for every page:

* weights and other non-negative maps use ``Viridis`` (perceptually uniform,
  colour-blind safe, readable on light and dark backgrounds);
* signed data (raw scores) use the diverging ``RdBu_r`` centred at 0;
* lines use the Okabe-Ito palette; theory curves are dashed, measurements solid
  with error bars;
* backgrounds are transparent so Streamlit's light and dark themes both work.

Arrays are sent as float32 and large maps are block-averaged to at most
``max_side`` cells per side (:func:`ui.maps.downsample`), so chart payloads stay small.
"""

from __future__ import annotations

import copy
import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import plotly.graph_objects as go
from numpy.typing import ArrayLike, NDArray
from plotly.subplots import make_subplots

__all__ = [
    "DIVERGING",
    "PALETTE",
    "SEQUENTIAL",
    "Band",
    "Curve",
    "Histogram",
    "Marker",
    "Panel",
    "as_f32",
    "axis_name",
    "PRESENT_DIVERGING",
    "PRESENT_SEQUENTIAL",
    "present",
    "legend_below",
    "legend_key",
    "line_chart",
    "log_ticks",
    "mark_x",
    "panel_grid",
    "relayout",
    "style",
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


def axis_name(i: int) -> str:
    """Plotly's suffix of the i-th subplot axis: '' for the first, then '2', '3', ..."""
    return "" if i == 0 else str(i + 1)


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
