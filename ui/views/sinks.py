"""Attention sinks page: figure and table builders (arrays in, go.Figure / DataFrame out).

Every builder tags its figure with the page's ``layout.meta.view`` name.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from numpy.typing import ArrayLike

from attncore import theory as T
from attncore.sinks import ZOO, SinkReport, SinkSpec, SweepResult, ZooEntry, ZooTheory, zoo_content_theory
from ui import figures
from ui.figures import PALETTE, SEQUENTIAL, Curve, as_f32, style
from ui.maps import downsample_stack, heatmap, heatmap_grid
from ui.text import chart
from ui.views import realtext as realtext_views

ZOO_LABELS = {"softmax": "softmax", "softmax1": "softmax1", "sink_logit": "sink logit b",
              "sigmoid": "sigmoid −log n", "relu": "ReLU ÷ n", "gated": "gated softmax"}
ZOO_COLORS = {name: PALETTE[i] for i, name in enumerate(ZOO)}
ZOO_FIELDS = (("row_sum", "row sum (weight spent)", False), ("sink_weight", "weight on the sink", False),
              ("output_rms", "output RMS", True))
MAP_SIDE = 256  # cells per side of the synthetic weight maps
GRID_MARGIN = {"l": 36, "r": 90, "t": 28, "b": 10}  # the layer x head grid's margins (px)
PICK_SPACING_PX = 27  # the grid's pick points are about this far apart at its nominal width
PICK_MARKER_PX = 14  # ...and this wide: each answers within 7 + 20 px, and neighbours never overlap


def _tag(fig: go.Figure, view: str) -> go.Figure:
    return fig.update_layout(meta={"view": view})


# ---------------------------------------------------------------------------- generic pieces


def layer_head_grid(
    attn: ArrayLike,
    tokens: Sequence[str] | None = None,
    *,
    selected: tuple[int, int] | None = None,
    max_side: int = 40,
    zmax: float | None = 1.0,
    width_px: int = 1100,
) -> go.Figure:
    """Every head of every layer as one tiled heatmap: rows = layers, columns = heads.

    ``attn`` (N, H, L, S). Each map is block-averaged to at most ``max_side`` cells
    per side and the tiles are separated by one blank (NaN) row and column, so
    the whole grid is a single trace (fast to build and to draw). Hover names the
    layer, head, query and key. ``selected`` = (layer, head) is outlined.
    ``layout.meta`` carries ``tile_rows``/``tile_cols`` (cells per tile, gap included).
    """
    a = np.asarray(attn, dtype=np.float32)
    if a.ndim != 4:
        raise ValueError(f"layer_head_grid needs (layers, heads, L, S); got shape {a.shape}.")
    N, H = a.shape[:2]
    small, fr, fc = downsample_stack(a, max_side)  # (N, H, th, tw)
    th, tw = small.shape[-2:]
    z = np.full((N, th + 1, H, tw + 1), np.nan, dtype=np.float32)
    z[:, :th, :, :tw] = small.transpose(0, 2, 1, 3)
    z = z.reshape(N * (th + 1), H * (tw + 1))[:-1, :-1]  # tiles with one blank row/column between

    def names(n_cells: int, factor: int, kind: str, blocks: int, block_kind: str) -> list[str]:
        out: list[str] = []
        for b in range(blocks):
            for i in range(n_cells):
                j = i * factor
                if factor == 1 and tokens is not None and j < len(tokens):
                    out.append(f"{block_kind} {b} · {kind} {j}: {chart(tokens[j])}")
                else:
                    out.append(f"{block_kind} {b} · {kind}s {j}…{j + factor - 1}")
            if b < blocks - 1:
                out.append(f"{block_kind} {b} gap")
        return out

    x = names(tw, fc, "key", H, "head")
    y = names(th, fr, "query", N, "layer")
    # Labels, outline and axes go into the layout in one assignment: Plotly's add_annotation runs its
    # validation and relayout machinery per call (18 labels: 50-100 ms of every rerun that draws the grid,
    # a layer or head move included; one layout: ~4 ms), with the same figure as the result.
    labels = [{"x": h * (tw + 1) + (tw - 1) / 2, "y": 1.0, "yref": "paper", "yanchor": "bottom",
               "text": f"h{h}", "showarrow": False, "font": {"size": 11}} for h in range(H)]
    labels += [{"x": 0.0, "xref": "paper", "xanchor": "right", "y": l * (th + 1) + (th - 1) / 2,
                "text": f"L{l}", "showarrow": False, "font": {"size": 11}} for l in range(N)]
    layout: dict = {"annotations": labels}
    if selected is not None:
        l, h = selected
        layout["shapes"] = [{"type": "rect", "x0": h * (tw + 1) - 0.5, "x1": h * (tw + 1) + tw - 0.5,
                             "y0": l * (th + 1) - 0.5, "y1": l * (th + 1) + th - 0.5,
                             "line": {"color": PALETTE[5], "width": 3}}]
    # Square tiles on a chart about `width_px` wide.
    row_px = width_px / H * (th + 1) / (tw + 1)
    height = int(min(900, max(240, N * row_px + 40)))
    # Clickable: a lattice of pick points per tile (customdata = layer, head) chooses that head. Each point
    # answers within its radius plus Plotly's 20 px hover distance, so the points are spaced by the tile's
    # size on screen (about PICK_SPACING_PX apart at `width_px`), not by its cells: every point is an SVG
    # node the browser draws on each rerun that resends the grid (a layer or head move), and 4 x 4 per tile
    # put 4 rows of points in the 28 px tall tiles of SmolLM2's 30 layers (4,320 points; their drawing was
    # 80 % of the grid's). At the page's narrowest width (1280 px window) points stay further apart than
    # a marker is wide, so a click never lands on two tiles' points at once.
    tile_w = (width_px - GRID_MARGIN["l"] - GRID_MARGIN["r"]) * tw / (H * (tw + 1) - 1)
    tile_h = (height - GRID_MARGIN["t"] - GRID_MARGIN["b"]) * th / (N * (th + 1) - 1)
    ps_x = _pick_cells(tw, tile_w)
    ps_y = _pick_cells(th, tile_h)
    px, py, cd = [], [], []
    for l in range(N):
        for h in range(H):
            for r in ps_y:
                for c in ps_x:
                    px.append(x[h * (tw + 1) + c])
                    py.append(y[l * (th + 1) + r])
                    cd.append((l, h))
    heat = go.Heatmap(
        z=z, x=x, y=y, colorscale=SEQUENTIAL, zmin=0.0, zmax=zmax, hoverongaps=False,
        colorbar={"thickness": 12, "len": 0.9, "title": {"text": "weight", "side": "right"}},
        hovertemplate="%{y}<br>%{x}<br>weight %{z:.4f}<extra></extra>")
    pick = realtext_views.pick_points(
        px, py, np.array(cd, dtype=np.int64),
        "layer %{customdata[0]} · head %{customdata[1]}<br>click: show this head<extra></extra>",
        size=PICK_MARKER_PX)
    # ranges pinned to the grid (the markers would pad an autorange); rows top to bottom
    hidden = {"showticklabels": False, "showgrid": False, "zeroline": False, "ticks": ""}
    fig = go.Figure(data=[heat, pick], layout={
        **layout,
        "xaxis": {**hidden, "range": [-0.5, len(x) - 0.5]},
        "yaxis": {**hidden, "autorange": False, "range": [len(y) - 0.5, -0.5]},
        "meta": {"tile_rows": th + 1, "tile_cols": tw + 1, "selected": list(selected or ())}})
    style(fig, height=height)
    # r: room for the colour bar and its title, so the browser need not widen it and draw again
    fig.update_layout(margin=GRID_MARGIN)
    return fig


def _pick_cells(cells: int, tile_px: float) -> list[int]:
    """The cells of a tile side that carry pick points: one per PICK_SPACING_PX of the side (at least one,
    at most one per cell), each at the middle of its share of the side."""
    m = min(cells, max(1, round(tile_px / PICK_SPACING_PX)))
    return [int((k + 0.5) * cells / m) for k in range(m)]


def labelled_heatmap(
    z: ArrayLike,
    x_labels: Sequence[str],
    y_labels: Sequence[str],
    *,
    title: str | None = None,
    x_title: str = "",
    y_title: str = "",
    value_name: str = "value",
    zmin: float | None = 0.0,
    zmax: float | None = 1.0,
    text_format: str | None = ".2f",
    height: int = 300,
) -> go.Figure:
    """A small labelled matrix (e.g. layers x heads), values printed in the cells.

    ``z`` (rows, cols) with one label per row and column; ``text_format`` (a d3
    format such as ``.2f``) prints each value in its cell, None prints nothing.
    """
    a = as_f32(z)
    if a.ndim != 2 or a.shape != (len(y_labels), len(x_labels)):
        raise ValueError(
            f"labelled_heatmap: z {a.shape} does not match {len(y_labels)} x {len(x_labels)} labels.")
    kw: dict = {}
    if text_format is not None:  # print only what informs: cells that round to 0 stay blank
        text = [[("" if not np.isfinite(v) or format(float(v), text_format) == format(0.0, text_format)
                  else format(float(v), text_format)) for v in row] for row in a]  # d3 ".2f" = Python ".2f"
        kw.update(text=text, texttemplate="%{text}", textfont={"size": 10})
    # the axes in the constructor's layout: update_xaxes / update_yaxes cost ~3 ms each on every rerun
    fig = go.Figure(go.Heatmap(
        z=a, x=list(x_labels), y=list(y_labels), colorscale=SEQUENTIAL, zmin=zmin, zmax=zmax,
        colorbar={"thickness": 12, "len": 0.9}, hoverongaps=False,
        hovertemplate=f"{y_title} %{{y}}<br>{x_title} %{{x}}<br>{value_name} %{{z:.4f}}<extra></extra>",
        **kw), layout={"yaxis": {"autorange": "reversed", "title": {"text": y_title}, "type": "category"},
                       "xaxis": {"title": {"text": x_title}, "type": "category",
                                 "tickangle": 0 if len(x_labels) <= 16 else -60}})
    return style(fig, title=title, height=height)


def bars_with_theory(
    names: Sequence[str],
    values: ArrayLike,
    *,
    errors: ArrayLike | None = None,
    theory: ArrayLike | None = None,
    title: str | None = None,
    y_title: str = "",
    log_y: bool = False,
    height: int = 300,
) -> go.Figure:
    """One bar per item (measured mean, error bar = spread over queries) and a dashed theory tick.

    ``theory`` may hold NaN where no closed form exists.
    """
    v = as_f32(values)
    fig = go.Figure(go.Bar(
        x=list(names), y=v, name="measured", marker_color=[PALETTE[i % len(PALETTE)] for i in range(len(v))],
        error_y=None if errors is None else {"type": "data", "array": as_f32(errors), "visible": True,
                                              "thickness": 1.5, "color": PALETTE[7]},
        hovertemplate="%{x}<br>measured %{y:.4g}<extra></extra>"))
    if theory is not None:
        fig.add_trace(go.Scatter(
            x=list(names), y=as_f32(theory), mode="markers", name="theory (mean field)",
            marker={"symbol": "line-ew-open", "size": 38, "color": PALETTE[7], "line": {"width": 3}},
            hovertemplate="%{x}<br>theory %{y:.4g}<extra></extra>"))
    fig.update_yaxes(title=y_title, type="log" if log_y else "linear")
    if log_y:
        figures.log_ticks(fig)
    fig.update_layout(bargap=0.35, showlegend=False)
    return style(fig, title=title, height=height)


# ---------------------------------------------------------------------------- synthetic lab


def keys_labels(spec: SinkSpec) -> list[str]:
    """Key labels of the synthetic head: the sink (when on), then t1..tn."""
    return (["sink"] if spec.sink else []) + [f"t{j}" for j in range(1, spec.n + 1)]


LOG_FLOOR = -4.0  # log10 of the smallest weight the log colour scale tells apart
MAP_CELL_PX = 10  # width of one key's column in the synthetic map (the sink column included)
MAP_FRAME_PX = 190  # what the map figure spends beside its cells: query labels, colour bar and its title
MAP_MAX_WIDTH = 900


def sink_map_figure(weights: np.ndarray, spec: SinkSpec, log_color: bool = True) -> go.Figure:
    """softmax weights (n, n[+1]) of the synthetic head (``snk-map``).

    ``log_color`` colours by log10(weight) from 1e-4 to 1 (the colour bar is labelled in weights),
    so the real keys, which share the little weight the sink leaves, differ in colour too.
    """
    w = np.asarray(weights, dtype=np.float64)
    title = ("softmax weights" + ("" if spec.sink else " (no sink token)")
             + (" · log scale" if log_color else ""))
    z = np.log10(np.maximum(w, 10.0**LOG_FLOOR)) if log_color else w
    fig = heatmap(z, title=title, x_labels=keys_labels(spec),
                  y_labels=[f"t{i}" for i in range(1, spec.n + 1)], max_side=MAP_SIDE,
                  zmin=LOG_FLOOR if log_color else 0.0, zmax=0.0 if log_color else 1.0, height=380,
                  value_name="log10 weight" if log_color else "weight")
    if log_color:
        ticks = np.arange(LOG_FLOOR, 1.0)
        fig.update_traces(colorbar={"tickvals": ticks.tolist(),
                                    "ticktext": [f"1e{int(t)}" if t < 0 else "1" for t in ticks],
                                    "title": {"text": "weight", "side": "right"}})
    else:
        fig.update_traces(colorbar={"title": {"text": "weight", "side": "right"}})
    fig.update_xaxes(side="bottom")  # keeps the key labels clear of the title
    # its own width: MAP_CELL_PX per key (up to MAP_MAX_WIDTH), whatever the column it is drawn in
    fig.update_layout(width=min(MAP_MAX_WIDTH, MAP_FRAME_PX + MAP_CELL_PX * w.shape[1]))
    return _tag(fig, "snk-map")


def strength_figure(sweep: SweepResult, spec: SinkSpec) -> go.Figure:
    """Weight on the sink against its strength s, measured and mean-field (``snk-strength``)."""
    x = sweep.x
    fig = figures.line_chart([
        Curve("measured (mean ± sd over queries)", x, sweep.mean("sink_weight"),
              err=sweep.std("sink_weight")),
        Curve("theory", x, np.asarray(T.sink_weight_theory(x, spec.n, spec.content, spec.spread)),
              theory=True),
    ], title="weight on the sink vs strength s", x_title="sink strength s", y_title="weight on sink",
        height=380)
    _tag(fig, "snk-strength")
    figures.legend_below(fig)
    if spec.sink:
        figures.mark_x(fig, spec.strength, f"s = {spec.strength:g}")
    return fig


def strength_rms_figure(sweep: SweepResult, spec: SinkSpec, no_sink: float) -> go.Figure:
    """Output RMS against the sink strength, with the no-sink level (``snk-rms``)."""
    x = sweep.x
    theory = T.softmax_output_rms_theory(spec.n, spec.content, spec.spread, strength=x,
                                         sink_value=spec.sink_value)
    fig = figures.line_chart([
        Curve("output RMS (measured)", x, sweep.mean("output_rms"), err=sweep.std("output_rms")),
        Curve("theory", x, np.asarray(theory), theory=True),
        Curve("no sink token (measured)", x, np.full_like(x, no_sink), color=PALETTE[7],
              extra={"mode": "lines", "line": {"dash": "dot", "color": PALETTE[7]}}),
    ], title="output RMS vs strength s", x_title="sink strength s", y_title="RMS of the output",
        log_y=True, height=380)
    _tag(fig, "snk-rms")
    figures.legend_below(fig)
    figures.log_ticks(fig)
    if spec.sink:
        figures.mark_x(fig, spec.strength, f"s = {spec.strength:g}")
    return fig


def strength_frame(sweep: SweepResult, spec: SinkSpec) -> pd.DataFrame:
    """The strength sweep with its theory, for the CSV."""
    x, n, cc, sd = sweep.x, spec.n, spec.content, spec.spread
    return pd.DataFrame({
        "strength": x, "sink_weight_mean": sweep.mean("sink_weight"),
        "sink_weight_sd": sweep.std("sink_weight"),
        "sink_weight_theory": T.sink_weight_theory(x, n, cc, sd), "output_rms_mean": sweep.mean("output_rms"),
        "output_rms_theory": T.softmax_output_rms_theory(n, cc, sd, strength=x, sink_value=spec.sink_value)})


def nothing_figures(sweep: SweepResult, spec: SinkSpec) -> tuple[go.Figure, go.Figure]:
    """Row sum and output RMS of every normaliser against the content logit c (``snk-nothing-*``)."""
    x = sweep.x
    mass_curves: list[Curve] = []
    rms_curves: list[Curve] = []
    for name in ZOO:
        color, label = ZOO_COLORS[name], ZOO_LABELS[name]
        mass_t, rms_t = zoo_content_theory(name, spec, x)
        if name != "gated":
            mass_curves += [Curve(label, x, sweep.mean(f"mass_{name}"), color=color),
                            Curve(f"{label} theory", x, mass_t, theory=True, color=color,
                                  extra={"showlegend": False})]
        rms_curves += [Curve(label, x, sweep.mean(f"rms_{name}"), color=color),
                       Curve(f"{label} theory", x, rms_t, theory=True, color=color,
                             extra={"showlegend": False})]
    mass = figures.line_chart(mass_curves, title="weight spent on the real tokens (mean over queries)",
                              x_title="content logit c", y_title="row sum", log_y=True, height=400)
    rms = figures.line_chart(rms_curves, title="output RMS", x_title="content logit c",
                             y_title="RMS of the output", log_y=True, height=400)
    for fig, view in ((mass, "snk-nothing-mass"), (rms, "snk-nothing-rms")):
        _tag(fig, view)
        figures.legend_below(fig)
        figures.log_ticks(fig)
        figures.mark_x(fig, spec.content, f"c = {spec.content:g}")
    return mass, rms


def content_frame(sweep: SweepResult) -> pd.DataFrame:
    """The content sweep: mass and output RMS of every normaliser, for the CSV."""
    cols = {"content": sweep.x}
    for name in ZOO:
        cols[f"mass_{name}"] = sweep.mean(f"mass_{name}")
        cols[f"rms_{name}"] = sweep.mean(f"rms_{name}")
    return pd.DataFrame(cols)


def zoo_maps_figure(zoo: dict[str, ZooEntry]) -> go.Figure:
    """The weights of every normaliser on the same logits, side by side (``snk-zoo``)."""
    maps = [zoo[name].weights.cpu().numpy() for name in ZOO]
    # two lines for the gated map: in one line its title ran into its neighbour's at 1280 px
    titles = [ZOO_LABELS[name] + ("<br>(weights; gate on output)" if name == "gated" else "") for name in ZOO]
    zmax = float(max(m.max() for m in maps)) or 1.0
    fig = heatmap_grid(maps, titles, cols=len(ZOO), max_side=96, zmin=0.0, zmax=zmax, cell_height=260)
    # Axis labels on every map: key index (key 0 is the sink when it is on) across, query down.
    fig.update_xaxes(showticklabels=True, title={"text": "key", "standoff": 2}, tickfont={"size": 9},
                     nticks=5)
    fig.update_yaxes(showticklabels=True, tickfont={"size": 9}, nticks=5)
    fig.update_layout(yaxis={"title": {"text": "query"}}, coloraxis_colorbar={"title": {"text": "weight"}})
    return fig.update_layout(meta={"view": "snk-zoo"}, margin={"t": 50, "b": 40})


def zoo_bars_figure(zoo: dict[str, ZooEntry], theory: dict[str, ZooTheory], field: str, label: str,
                    log_y: bool) -> go.Figure:
    """One statistic of every normaliser: mean over queries, spread, theory tick (``snk-zoo-<field>``)."""
    vals = [float(getattr(zoo[n], field).mean()) for n in ZOO]
    errs = [float(getattr(zoo[n], field).std(unbiased=False)) for n in ZOO]
    th = [getattr(theory[n], field) for n in ZOO]
    fig = bars_with_theory([ZOO_LABELS[n] for n in ZOO], vals, errors=errs, theory=th, title=label,
                           log_y=log_y, height=330)
    return _tag(fig, f"snk-zoo-{field}")


def zoo_table(spec: SinkSpec, zoo: dict[str, ZooEntry], theory: dict[str, ZooTheory]) -> pd.DataFrame:
    """Per query and normaliser: row sum, sink weight, output RMS, gate, with the theory."""
    frames = []
    for name in ZOO:
        e = zoo[name]
        frames.append(pd.DataFrame({
            "normaliser": name, "query": np.arange(1, spec.n + 1),
            "row_sum": e.row_sum.double().cpu().numpy(), "sink_weight": e.sink_weight.double().cpu().numpy(),
            "output_rms": e.output_rms.double().cpu().numpy(),
            "gate_mean": e.gate_mean.double().cpu().numpy(),
            "row_sum_theory": theory[name].row_sum, "sink_weight_theory": theory[name].sink_weight,
            "output_rms_theory": theory[name].output_rms}))
    return pd.concat(frames, ignore_index=True)


# ---------------------------------------------------------------------------- real model


def glance_figure(rep: SinkReport, labels: dict[str, str], n_layers: int) -> go.Figure:
    """Mean mass per layer on each key set, against uniform attention (``snk-glance``). The y title is short:
    rotated, a longer one ran past the plot's height into the chart's title."""
    x = np.arange(n_layers)
    curves: list[Curve] = []
    for i, (key, label) in enumerate(labels.items()):
        name = chart(label)  # may hold a user's first token
        m = rep.mass[key].double().numpy()  # (N, H)
        color = PALETTE[i]
        curves += [Curve(f"on {name}", x, m.mean(1), err=m.std(1), color=color,
                         hover=f"on {name}<br>layer %{{x}}<br>mean mass %{{y:.3f}}"),
                   Curve(f"uniform attention ({name})", x, np.full(n_layers, rep.uniform[key]), theory=True,
                         color=color)]
    fig = figures.line_chart(curves, title="mean attention mass per layer (error bar: spread over heads)",
                             x_title="layer (0-based)", y_title="mean mass",
                             height=380)
    fig.update_xaxes(dtick=1)
    _tag(fig, "snk-glance")
    return figures.legend_below(fig)


def mass_figure(rep: SinkReport, key: str, name: str, n_keys: int, layers: int, heads: int) -> go.Figure:
    """Mass on one key set per layer and head (``snk-mass-<key>``)."""
    fig = labelled_heatmap(rep.mass[key].numpy(), [str(h) for h in range(heads)],
                           [str(l) for l in range(layers)], x_title="head", y_title="layer",
                           title=f"on {chart(name)} ({n_keys} token{'s' if n_keys != 1 else ''})",
                           value_name="mass", zmin=0.0, zmax=1.0, text_format=".2f" if heads <= 6 else None,
                           height=int(min(600, 110 + 34 * layers)))
    return _tag(fig, f"snk-mass-{key}")


def mass_frame(rep: SinkReport, labels: dict[str, str], layers: int, heads: int) -> pd.DataFrame:
    """Mass on every key set per layer and head, for the CSV."""
    return pd.DataFrame([{"layer": l, "head": h,
                          **{f"mass_{labels[k]}": float(rep.mass[k][l, h]) for k in labels}}
                         for l in range(layers) for h in range(heads)])


def metric_figure(rep: SinkReport, tokens: Sequence[str], layers: int) -> go.Figure:
    """Share of each layer's heads that are sink heads for each key (``snk-metric``)."""
    x_labels = [f"{j}:{chart(t)}" for j, t in enumerate(tokens)]
    fig = labelled_heatmap(rep.share.numpy(), x_labels, [str(l) for l in range(layers)],
                           x_title="key", y_title="layer", value_name="share of heads", zmin=0.0,
                           zmax=1.0, text_format=".2f" if len(tokens) <= 24 else None,
                           height=int(min(600, 150 + 34 * layers)))
    return _tag(fig, "snk-metric")


def alpha_frame(rep: SinkReport, tokens: Sequence[str]) -> pd.DataFrame:
    """alpha of every head for every key, and whether it passes the threshold, for the CSV."""
    a = rep.alpha.numpy()
    return pd.DataFrame([{"layer": l, "head": h, "key": j, "token": tokens[j], "alpha": float(a[l, h, j]),
                          "sink_head": bool(a[l, h, j] > rep.eps)}
                         for l in range(a.shape[0]) for h in range(a.shape[1]) for j in range(a.shape[-1])])
