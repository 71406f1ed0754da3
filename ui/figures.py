"""Plotly figure builders: numpy arrays in, ``go.Figure`` out. Never calls streamlit.

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
    "Curve",
    "downsample",
    "heatmap",
    "heatmap_grid",
    "line_chart",
    "style",
    "weights_with_row_stats",
]

SEQUENTIAL = "Viridis"
DIVERGING = "RdBu_r"
# Okabe-Ito, with grey instead of black so it reads on dark backgrounds too.
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#999999")

Array = NDArray[np.floating]


def style(fig: go.Figure, *, title: str | None = None, height: int | None = None) -> go.Figure:
    """Apply the shared layout: transparent background, compact margins, palette."""
    fig.update_layout(
        title=None if title is None else {"text": title, "x": 0.0, "xanchor": "left", "font": {"size": 15}},
        margin={"l": 10, "r": 10, "t": 40 if title else 10, "b": 10},
        paper_bgcolor="rgba(0,0,0,0)",
        plot_bgcolor="rgba(0,0,0,0)",
        colorway=list(PALETTE),
        hoverlabel={"namelength": -1},
        legend={"orientation": "h", "yanchor": "bottom", "y": 1.02, "x": 0.0},
    )
    if height is not None:
        fig.update_layout(height=height)
    return fig


def _f32(a: ArrayLike) -> NDArray[np.float32]:
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
    n, m = a.shape
    fr, fc = -(-n // max_side), -(-m // max_side)
    finite = np.isfinite(a)
    if fr == 1 and fc == 1:
        return _f32(np.where(finite, a, np.nan)), 1, 1
    rows, cols = -(-n // fr), -(-m // fc)
    vals = np.zeros((rows * fr, cols * fc), dtype=np.float64)
    counts = np.zeros((rows * fr, cols * fc), dtype=np.float32)
    vals[:n, :m] = np.where(finite, a, 0.0)
    counts[:n, :m] = finite
    sums = vals.reshape(rows, fr, cols, fc).sum(axis=(1, 3))
    cnt = counts.reshape(rows, fr, cols, fc).sum(axis=(1, 3))
    with np.errstate(invalid="ignore", divide="ignore"):
        small = np.where(cnt > 0, sums / np.maximum(cnt, 1), np.nan)
    return _f32(small), fr, fc


def _heatmap_trace(
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
) -> go.Heatmap:
    small, fr, fc = downsample(z, max_side)
    kw: dict = {"z": small}
    if x_labels is not None and fc == 1:
        kw["x"] = [f"{j}:{t}" for j, t in enumerate(x_labels)]
    else:
        kw.update(x0=0, dx=fc)
    if y_labels is not None and fr == 1:
        kw["y"] = [f"{i}:{t}" for i, t in enumerate(y_labels)]
    else:
        kw.update(y0=0, dy=fr)
    if fr == 1 and fc == 1:
        hover = f"query %{{y}}<br>key %{{x}}<br>{value_name} %{{z:.6g}}<extra></extra>"
    else:
        hover = (f"queries %{{y}}…+{fr - 1}<br>keys %{{x}}…+{fc - 1}<br>"
                 f"mean {value_name} %{{z:.6g}}<extra></extra>")
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
) -> go.Figure:
    """One attention map (L, S): query rows top to bottom, keys left to right.

    ``diverging`` centres a red-blue scale at 0 (for signed scores). NaN or
    infinite cells (masked keys) are blank. Hover shows query, key and value.
    """
    fig = go.Figure(_heatmap_trace(z, max_side=max_side, diverging=diverging, value_name=value_name,
                                   x_labels=x_labels, y_labels=y_labels, zmin=zmin, zmax=zmax))
    fig.update_yaxes(autorange="reversed", title=y_title)
    fig.update_xaxes(title=x_title, side="top")
    return style(fig, title=title, height=height)


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
    if len(maps) != len(titles):
        raise ValueError("one title per map is needed.")
    n = len(maps)
    cols = max(1, min(cols, n))
    rows = -(-n // cols)
    fig = make_subplots(rows=rows, cols=cols, subplot_titles=list(titles),
                        horizontal_spacing=0.02, vertical_spacing=0.08 / max(1, rows - 1) if rows > 1 else 0.05)
    for i, z in enumerate(maps):
        fig.add_trace(_heatmap_trace(z, max_side=max_side, diverging=diverging, value_name=value_name,
                                     x_labels=None, y_labels=None, coloraxis="coloraxis"),
                      row=i // cols + 1, col=i % cols + 1)
    axis = {"colorscale": DIVERGING if diverging else SEQUENTIAL, "colorbar": {"thickness": 12}}
    if diverging:
        axis["cmid"] = 0.0
    if zmin is not None:
        axis["cmin"] = zmin
    if zmax is not None:
        axis["cmax"] = zmax
    fig.update_layout(coloraxis=axis)
    fig.update_yaxes(autorange="reversed", showticklabels=False)
    fig.update_xaxes(showticklabels=False)
    fig.update_annotations(font_size=12)
    return style(fig, height=cell_height * rows + 30)


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
    ent = _f32(row_entropy)
    mx = _f32(row_max)
    L = w.shape[0]
    fig = make_subplots(rows=1, cols=3, shared_yaxes=True, column_widths=[0.7, 0.15, 0.15],
                        horizontal_spacing=0.02,
                        subplot_titles=("weights", "entropy (nats)", "max weight"))
    fig.add_trace(_heatmap_trace(w, max_side=max_side, diverging=False, value_name="weight",
                                 x_labels=x_labels, y_labels=y_labels, zmin=0.0,
                                 zmax=None), row=1, col=1)
    fig.data[0].showscale = False
    y = list(fig.data[0].y) if fig.data[0].y is not None else np.arange(L)
    fig.add_trace(go.Bar(x=ent, y=y, orientation="h", name="entropy", marker_color=PALETTE[0],
                         hovertemplate="query %{y}<br>entropy %{x:.4f} nats<extra></extra>"),
                  row=1, col=2)
    if max_entropy is not None:
        fig.add_trace(go.Scatter(x=_f32(max_entropy), y=y, mode="lines", name="log(visible keys)",
                                 line={"color": PALETTE[7], "dash": "dash"},
                                 hovertemplate="query %{y}<br>log n %{x:.4f}<extra></extra>"),
                      row=1, col=2)
    fig.add_trace(go.Bar(x=mx, y=y, orientation="h", name="max weight", marker_color=PALETTE[1],
                         hovertemplate="query %{y}<br>max weight %{x:.4f}<extra></extra>"),
                  row=1, col=3)
    fig.update_yaxes(autorange="reversed")
    fig.update_xaxes(side="top", row=1, col=1, title="key")
    fig.update_xaxes(range=[0, 1.0], row=1, col=3)
    fig.update_layout(showlegend=False, bargap=0.05)
    return style(fig, title=title, height=height)


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
    fig = go.Figure()
    for i, c in enumerate(curves):
        color = c.color or PALETTE[i % len(PALETTE)]
        kw: dict = {"x": _f32(c.x), "y": _f32(c.y), "name": c.name}
        if c.theory:
            kw.update(mode="lines", line={"color": color, "dash": "dash", "width": 2})
        else:
            kw.update(mode="lines+markers", line={"color": color, "width": 2}, marker={"size": 6})
            if c.err is not None:
                kw["error_y"] = {"type": "data", "array": _f32(c.err), "visible": True, "thickness": 1.2}
        kw["hovertemplate"] = (c.hover or f"{c.name}<br>x %{{x:.4g}}<br>y %{{y:.4g}}") + "<extra></extra>"
        kw.update(c.extra)
        fig.add_trace(go.Scatter(**kw))
    fig.update_xaxes(title=x_title, type="log" if log_x else "linear")
    fig.update_yaxes(title=y_title, type="log" if log_y else "linear")
    return style(fig, title=title, height=height)


# --------------------------------------------------------------------------------------
# Entropy vs length page (issue 3): small multiples sharing one legend.
# --------------------------------------------------------------------------------------

__all__ += ["Panel", "legend_key", "panel_grid"]


@dataclass
class Panel:
    """One subplot of :func:`panel_grid`: its curves, axis title and scale."""

    title: str
    curves: Sequence[Curve]
    y_title: str = ""
    log_y: bool = False


def legend_key(name: str, *, dash: str = "solid", symbol: str | None = None,
               color: str = PALETTE[7]) -> Curve:
    """A legend-only entry explaining a line style (drawn nowhere)."""
    mode = "markers" if symbol and dash == "none" else "lines+markers" if symbol else "lines"
    extra: dict = {"mode": mode, "showlegend": True, "hoverinfo": "skip", "legendgroup": f"key:{name}",
                   "line": {"color": color, "dash": "solid" if dash == "none" else dash, "width": 2}}
    if symbol:
        extra["marker"] = {"symbol": symbol, "size": 8, "color": color}
    return Curve(name, [None], [None], color=color, extra=extra)


def _decade_ticks(curves: Sequence[Curve], log_x: bool) -> dict:
    """Label only whole decades on a log x axis spanning two or more of them (no 2, 5 clutter)."""
    xs = [np.asarray(c.x, dtype=np.float64) for c in curves]
    xs = [x[np.isfinite(x) & (x > 0)] for x in xs]
    xs = [x for x in xs if x.size]
    if not log_x or not xs:
        return {}
    lo, hi = min(float(x.min()) for x in xs), max(float(x.max()) for x in xs)
    return {"dtick": 1} if np.log10(hi / lo) >= 2 else {}


def panel_grid(
    panels: Sequence[Panel],
    *,
    cols: int = 2,
    x_title: str = "",
    log_x: bool = True,
    row_height: int = 330,
    legend: Sequence[Curve] = (),
) -> go.Figure:
    """Panels of measurement-vs-theory curves on a shared x axis with one legend.

    Each panel's traces are built by :func:`line_chart` (so the styles match every other
    page); curves of one series should share ``extra["legendgroup"]`` so a legend click
    toggles the series in every panel. ``legend`` adds style keys (see :func:`legend_key`).
    """
    if not panels:
        raise ValueError("panel_grid needs at least one panel.")
    cols = max(1, min(cols, len(panels)))
    rows = -(-len(panels) // cols)
    fig = make_subplots(rows=rows, cols=cols, subplot_titles=[p.title for p in panels],
                        horizontal_spacing=0.09, vertical_spacing=0.16 if rows > 1 else 0.05)
    for i, p in enumerate(panels):
        r, c = i // cols + 1, i % cols + 1
        for tr in line_chart(p.curves).data:
            fig.add_trace(tr, row=r, col=c)
        fig.update_yaxes(title=p.y_title, type="log" if p.log_y else "linear", row=r, col=c,
                         exponentformat="power" if p.log_y else "none")
        fig.update_xaxes(type="log" if log_x else "linear", row=r, col=c, exponentformat="power",
                         title=x_title if r == rows else None, **_decade_ticks(p.curves, log_x))
    for key in legend:
        for tr in line_chart([key]).data:
            fig.add_trace(tr, row=1, col=1)
    fig.update_annotations(font_size=13)
    style(fig, height=row_height * rows + 70)
    fig.update_layout(legend={"orientation": "h", "yanchor": "bottom", "y": 1.0 + 40 / (row_height * rows),
                              "x": 0.0, "font": {"size": 12}},
                      margin={"l": 10, "r": 10, "t": 60, "b": 10})
    return fig
