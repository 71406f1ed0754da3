"""Margins a figure will need, estimated on the server, so the browser draws each chart once.

Plotly's automargin draws a chart, measures its tick labels, axis titles, legend and colour bar,
and when they do not fit the layout's margins it widens them and draws the whole chart a second
time. Almost every chart of this app asked for 10 px and was drawn twice; on the Attention sinks
lab, whose nine charts all change when a slider moves, that second pass cost ~0.1 s of what a user
waits for (``bench.ui``). :func:`fit_margins` estimates what automargin would push (from the tick
values, the category names, the legend entries and the fonts, with constants measured in Chromium
on the plotly.js that Streamlit 1.67 bundles, v4) and asks for that up front. Automargin stays
on: an estimate that falls short costs the old second draw, never a clipped label. It reads the
figure's own property dicts (Plotly's attribute access would cost ~35 ms on a 45-trace figure;
this takes ~1-2 ms) and writes through Plotly only what it changes.

Three parts of a layout depend on the chart's width, which the server does not know. Legends
wrap: their margin is estimated at the narrowest width the chart is shown at (a wider chart fits
more entries per row, so the margin is never too small; the legend below is placed a fixed number
of pixels under the axis). Plotly rotates category labels when they collide: crowded category axes
get a fixed angle. A colour bar sits 2% of the plot's width beyond it: here at its edge.
"""

from __future__ import annotations

import base64
import math
import re
from typing import Any

import numpy as np
import plotly.graph_objects as go

from ui.figures import relayout

__all__ = ["fit_margins", "label_px"]

EM = 0.56  # mean width of a tick or legend character in ems (Source Sans; measured 0.42-0.5, with slack)
BASE_FONT = 12  # Plotly's default font size (px)
Y_SLACK = 4.0  # px more on the left: the estimate fell 1-4 px short at some extreme settings
Y_BAND = 53.0  # px beside a left axis's widest tick label (label pad, title standoff and line), 12 px font
X_BAND = 17.0  # px under a bottom axis's tick labels without a title
X_TITLE_BAND = 52.0  # ... with a title
CATEGORY_PAD = 8.0  # category axes sit this much further out
X_ROTATED = 12.0  # more under rotated labels (their anchor sits below the axis)
SUPER_H = 22.3  # tick label height with superscripts (10^k), 12 px font; plain labels 16
PLAIN_H = 16.0
LEGEND_ROW = 19.0  # px per legend row at 11 px
LEGEND_PAD = 22.0  # legend box padding (both ends)
LEGEND_KEY = 44.0  # px of an entry that is not its text (the line or marker and gaps)
LEGEND_GAP = 8.0  # between the x axis band and a legend below it
CB_BODY = 39.0  # a vertical colour bar's pads, beside its thickness and tick labels, px
CB_AUTO_EM = 4.25  # Plotly's own colour-bar tick labels, in ems (51 px at 12 px: 81-84 px measured in all)
CB_BELOW = 34.0  # a horizontal colour bar's pads under its thickness and tick labels, px
CB_TITLE = 19.0  # a colour bar title written beside it (side "right")
CB_TITLE_TOP = 30.0  # ... above it (Plotly's default for vertical bars)
NARROWEST_PLOT = 170.0  # px: the plot area of a chart in a three-column row at 1280 px (legend columns)
DEFAULT_HEIGHT = 450
PLOTLY_MARGINS = {"l": 80, "r": 80, "t": 100, "b": 80}  # what Plotly uses where a layout sets none
TITLE_BAND = 30.0  # a figure title's line above a legend that sits on the plot
WIDE_PLOT = 470.0  # px a top legend spans on a full-width chart at 1280 px (Plotly caps it near 2/3)
MIN_PLOT_SHARE = 0.5  # a chart with a legend keeps at least this share of its height for the plot
_AXIS = re.compile(r"^([xy])axis(\d*)$")
_SUPERSCRIPT = re.compile(r"<sup>|10\^")


def label_px(text: str, font_px: float) -> float:
    """Estimated width of one line of label text (HTML tags dropped)."""
    plain = re.sub(r"<[^>]+>", "", text)
    return len(plain) * EM * font_px


def _nice(step: float) -> float:
    """The tick step Plotly would choose near ``step`` (1, 2, 5 x 10^k)."""
    if not step > 0 or not math.isfinite(step):
        return 1.0
    p = 10.0 ** math.floor(math.log10(step))
    for m in (1.0, 2.0, 5.0, 10.0):
        if step <= m * p * 1.0001:
            return m * p
    return 10.0 * p


def _si(v: float) -> str:
    """How Plotly writes a large tick value (exponentformat "B": 15k, 2M, 3B)."""
    a = abs(v)
    for div, suf in ((1e9, "B"), (1e6, "M"), (1e3, "k")):
        if a >= 10 * div:
            return f"{v / div:.3g}{suf}"
    return f"{v:.6g}"


def _linear_labels(lo: float, hi: float) -> list[str]:
    """The longest labels a linear axis over [lo, hi] will show (its ends, at the tick step's precision)."""
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return ["0.00"]
    if hi <= lo:
        hi = lo + (abs(lo) or 1.0)
    step = _nice((hi - lo) / 8.0)
    dec = max(0, -math.floor(math.log10(step) + 1e-9))
    out = []
    for v in (math.floor(lo / step) * step, math.ceil(hi / step) * step, lo, hi):
        out.append(_si(v) if abs(v) >= 1e4 else f"{round(v / step) * step:.{dec}f}")
    return out


def _log_labels(lo: float, hi: float, power: bool) -> list[str]:
    """Labels of a log axis over [10^lo, 10^hi]: 10^k (``power``) or plain decimals."""
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return ["10^-3"]
    ks = range(math.floor(lo), math.ceil(hi) + 1)
    if power:
        return [("1" if k == 0 else "10" if k == 1 else f"10^{k}") for k in (ks[0], ks[-1])]
    return [(f"{10.0 ** k:.{max(0, -k)}f}" if k < 0 else _si(10.0 ** k)) for k in (ks[0], ks[-1])]


def _values(v: Any) -> np.ndarray | None:
    """A trace's array property as numpy (plain lists, arrays and Plotly's base64 typed arrays)."""
    if v is None:
        return None
    if isinstance(v, dict):
        if "bdata" not in v:
            return None
        arr = np.frombuffer(base64.b64decode(v["bdata"]), dtype=np.dtype(v.get("dtype", "f8")))
        return arr
    try:
        return np.asarray(v)
    except (TypeError, ValueError):
        return None


def _get(d: Any, *path: str) -> Any:
    """``d[path[0]][path[1]]...``, None where a level is missing (Plotly leaves unset props out)."""
    for k in path:
        if not isinstance(d, dict):
            return None
        d = d.get(k)
    return d


def _on(tr: dict, letter: str, name: str) -> bool:
    return (tr.get(f"{letter}axis") or letter) == name


def _extent(data: list[dict], letter: str, name: str) -> tuple[list[str], float, float]:
    """(category labels, lo, hi) of what the traces put on one axis (numbers only for lo/hi)."""
    cats: list[str] = []
    lo, hi = math.inf, -math.inf
    for tr in data:
        if not _on(tr, letter, name):
            continue
        vals = _values(tr.get(letter))
        kind = tr.get("type")
        if vals is None and kind == "heatmap":  # cells at 0 .. columns - 1 (rows for y)
            z = tr.get("z")
            shape = np.shape(z) if not isinstance(z, dict) else tuple(
                int(n) for n in str(z.get("shape", "0")).split(","))
            if len(shape) == 2:
                vals = np.array([0.0, shape[1 if letter == "x" else 0] - 1.0])
        if kind == "bar" and letter == ("x" if tr.get("orientation") == "h" else "y"):
            lo, hi = min(lo, 0.0), max(hi, 0.0)
        if vals is None or vals.size == 0:
            continue
        if vals.dtype.kind in "OUS":
            cats.extend(str(s) for s in vals.ravel()[:512])
            continue
        v = vals.astype(np.float64, copy=False).ravel()
        err = tr.get(f"error_{letter}")
        arr = _values(err.get("array")) if isinstance(err, dict) and err.get("visible") is not False else None
        if arr is not None and arr.size == v.size and arr.dtype.kind == "f":
            v = np.concatenate([v - arr, v + arr])
        v = v[np.isfinite(v)]
        if v.size:
            lo, hi = min(lo, float(v.min())), max(hi, float(v.max()))
    return cats, lo, hi


def _axis_labels(data: list[dict], ax: dict, letter: str, name: str) -> tuple[list[str], bool]:
    """The widest labels an axis may show and whether they carry superscripts."""
    if ax.get("showticklabels") is False or ax.get("visible") is False:
        return [], False
    ticktext = ax.get("ticktext")
    if ticktext is not None and len(ticktext):
        texts = [str(t) for t in ticktext]
        return texts, any(_SUPERSCRIPT.search(t) for t in texts)
    cats, lo, hi = _extent(data, letter, name)
    if cats or ax.get("type") == "category":
        return cats, False
    rng = ax.get("range")
    fixed = rng is not None and len(rng) == 2 and None not in rng
    if ax.get("type") == "log":
        power = ax.get("exponentformat") == "power" or ax.get("dtick") in (1, "1")
        if fixed:
            a, b = float(rng[0]), float(rng[1])
        else:
            a = math.log10(lo) if lo > 0 else -3.0
            b = math.log10(hi) if hi > 0 else 0.0
        labels = _log_labels(min(a, b), max(a, b), power)
        return labels, power and any(lab.startswith("10^") for lab in labels)
    if fixed:
        lo, hi = float(min(rng)), float(max(rng))
    return _linear_labels(lo, hi), False


def _font(font: Any, lay: dict) -> float:
    """A font's size, else the layout's, else Plotly's 12 px."""
    return float(_get(font, "size") or _get(lay, "font", "size") or BASE_FONT)


def _domain_start(lay: dict, letter: str, anchor: str | None) -> float:
    """Where the axis an axis is anchored to starts (0: this axis sits on the figure's edge)."""
    if not anchor or anchor == "free":
        return 0.0
    dom = _get(lay, f"{letter}axis{anchor[1:]}", "domain")
    return float(dom[0]) if dom is not None else 0.0


def _legend_entries(fig: go.Figure) -> list[str]:
    if fig._layout.get("showlegend") is False:
        return []
    names = [str(tr["name"]) for tr in fig._data if tr.get("name") and tr.get("showlegend") is not False
             and tr.get("type") not in ("heatmap", "histogram2d")]
    shown = any(tr.get("showlegend") is True for tr in fig._data)
    return names if len(names) > 1 or shown else []


def _legend_rows(lay: dict, entries: list[str], width: float) -> tuple[int, float]:
    """Rows a horizontal legend takes when its entries flow as Plotly lays them out in ``width`` px,
    and its row height. A wider chart fits more entries per row, so at a chart's narrowest width
    this is the most rows it takes (its margin may then have room to spare, never too little)."""
    font = _font(_get(lay, "legend", "font"), lay)
    rows, used = 1, 0.0
    for w in (label_px(e, font) + LEGEND_KEY for e in entries):
        if used and used + w > width:
            rows, used = rows + 1, 0.0
        used += w
    return rows, LEGEND_ROW * font / 11.0


def _axis_keys(lay: dict) -> list[str]:
    """xaxis, yaxis (set or not) and every subplot axis the layout has."""
    return ["xaxis", "yaxis", *(k for k in lay if _AXIS.match(k) and k not in ("xaxis", "yaxis"))]


def fit_margins(fig: go.Figure) -> go.Figure:
    """Ask, in place, for the margins automargin would push the figure to (never less than it asked).

    Also makes the width-dependent parts fixed: legend rows, crowded category labels' angle,
    colour-bar position. Figures with ``layout.meta.margins == "fixed"`` are left as they are.
    """
    lay: dict = fig._layout  # Plotly's own dict of what the layout sets (read only here)
    data: list[dict] = fig._data
    meta = lay.get("meta")
    if isinstance(meta, dict) and meta.get("margins") == "fixed":
        return fig
    m = lay.get("margin") or {}
    need = {side: float(dflt if m.get(side) is None else m[side]) for side, dflt in PLOTLY_MARGINS.items()}
    x_band = 0.0
    updates: dict[str, Any] = {}
    for key in _axis_keys(lay):
        letter, num = _AXIS.match(key).groups()  # type: ignore[union-attr]
        ax = lay.get(key) or {}
        name = f"{letter}{num}"
        other = "y" if letter == "x" else "x"
        if _domain_start(lay, other, ax.get("anchor") or f"{other}{num}") > 0.01:
            continue  # an inner subplot's axis: its labels stay inside the figure
        font = _font(ax.get("tickfont"), lay)
        labels, sup = _axis_labels(data, ax, letter, name)
        if not labels:
            continue
        widest = max(label_px(t, font) for t in labels)
        scale = max(1.0, font / BASE_FONT)  # the pads do not shrink with a smaller tick font
        numeric = _is_number(labels) and ax.get("type") != "category"
        on_map = any(tr.get("type") == "heatmap" and _on(tr, letter, name) for tr in data)
        pad = 0.0 if numeric and not on_map else CATEGORY_PAD
        title = _get(ax, "title", "text")
        side = ax.get("side")
        if letter == "y":
            if side != "right":
                need["l"] = max(need["l"], widest + pad + Y_BAND * scale + 3.0 * max(0.0, BASE_FONT - font)
                                + Y_SLACK)
            # a tick at the very end of the range: half its label overhangs the plot (Plotly pushes ~0.8
            # of the label's height; 20 px measured on a log axis whose top tick fell on the range's end)
            dom = ax.get("domain") or (0.0, 1.0)
            high = (SUPER_H if sup else PLAIN_H) * scale
            if float(dom[1]) >= 0.99:
                need["t"] = max(need["t"], high)
            if float(dom[0]) <= 0.01:
                need["b"] = max(need["b"], high)
            continue
        if title:  # a title of several lines
            pad += str(title).count("<br>") * 1.2 * _font(_get(ax, "title", "font"), lay) + 2.0
        angle = ax.get("tickangle")
        crowded = widest * len(set(labels)) > NARROWEST_PLOT * 0.8
        if side != "top" and not numeric and angle is None and crowded:
            angle = -90  # what Plotly turns crowded category labels to at narrow widths
            updates[key] = {"tickangle": angle}
        if angle not in (None, 0, "auto"):
            rad = math.radians(float(angle))
            high = widest * abs(math.sin(rad)) + PLAIN_H * scale * abs(math.cos(rad)) + X_ROTATED
        else:
            high = (SUPER_H if sup else PLAIN_H) * scale + pad
            if numeric:
                need["r"] = max(need["r"], widest)  # the last tick label overhangs the plot's right edge
        band = high + (X_TITLE_BAND if title else X_BAND) * scale
        if side == "top":
            need["t"] = max(need["t"], band)
        else:
            x_band = max(x_band, band)
            need["b"] = max(need["b"], band)
    _colorbars(fig, need, updates)
    entries = _legend_entries(fig)
    leg = lay.get("legend") or {}
    if entries and leg.get("orientation") == "h":
        height = float(lay.get("height") or DEFAULT_HEIGHT)
        y = leg.get("y")
        if y is not None and y < 0 and leg.get("yref") in (None, "paper"):  # below the plot
            rows, row_h = _legend_rows(lay, entries, NARROWEST_PLOT)
            need["b"] = max(need["b"], x_band + LEGEND_GAP + rows * row_h + LEGEND_PAD)
            height = _keep_plot(height, need, updates)
            plot_h = max(height - need["t"] - need["b"], 1.0)
            updates["legend"] = {"y": -(x_band + LEGEND_GAP) / plot_h, "yanchor": "top"}
        elif leg.get("yref") == "container":  # at the figure's top (small multiples): t has room for two rows
            rows, row_h = _legend_rows(lay, entries, WIDE_PLOT)
            need["t"] += max(0, rows - 2) * row_h
            _keep_plot(height, need, updates)
        else:  # just above the plot (y = 1.02 of its height), under the title
            rows, row_h = _legend_rows(lay, entries, WIDE_PLOT)
            plot_h = max(height - need["t"] - need["b"], 1.0)
            lift = max(0.0, float(y if y is not None else 1.02) - 1.0) * plot_h
            titled = bool(_get(lay, "title", "text"))
            need["t"] = max(need["t"], rows * row_h + LEGEND_PAD + lift + (TITLE_BAND if titled else 0.0))
            _keep_plot(height, need, updates)
    margin = {k: math.ceil(v) for k, v in need.items()}
    if margin != {k: m.get(k) for k in margin}:
        updates["margin"] = margin
    if updates:
        relayout(fig, **updates)
    return fig


def _keep_plot(height: float, need: dict[str, float], updates: dict[str, Any]) -> float:
    """A legend's margin never takes the plot below :data:`MIN_PLOT_SHARE` of the figure: a taller figure
    (issue 41: a legend of many entries below a short chart left it a strip). Returns the height."""
    used = math.ceil(need["t"]) + math.ceil(need["b"])  # the margins asked for are rounded up
    if height - used >= MIN_PLOT_SHARE * height:
        return height
    height = float(math.ceil(used / (1.0 - MIN_PLOT_SHARE)))
    updates["height"] = int(height)
    return height


def _is_number(labels: list[str]) -> bool:
    try:
        [float(t.replace("−", "-").rstrip("kMB")) for t in labels if not t.startswith("10^")]
    except ValueError:
        return False
    return True


def _colorbars(fig: go.Figure, need: dict[str, float], updates: dict[str, Any]) -> None:
    """Room on the right for a vertical colour bar, placed at the plot's edge (not 2% of its width out)."""
    lay: dict = fig._layout
    bars: list[tuple[dict, int | None]] = []  # (colour bar, trace index; None: the layout's coloraxis)
    cax = lay.get("coloraxis")
    if isinstance(cax, dict) and cax.get("colorscale") is not None and cax.get("showscale") is not False:
        bars.append((cax.get("colorbar") or {}, None))
    for i, tr in enumerate(fig._data):
        if tr.get("type") == "heatmap" and tr.get("showscale") is not False and tr.get("coloraxis") is None:
            bars.append((tr.get("colorbar") or {}, i))
    for cb, owner in bars:
        font = _font(cb.get("tickfont"), lay)
        if cb.get("orientation") == "h":  # under the plot at a fraction of its height: that many px more
            y = cb.get("y")
            if y is not None and y < 0.5 and cb.get("yref") != "container":
                plot_h = float(lay.get("height") or DEFAULT_HEIGHT) - need["t"] - need["b"]
                below = -float(y) * max(plot_h, 1.0) if y < 0 else 0.0
                need["b"] = max(need["b"], below + float(cb.get("thickness") or 30) + CB_BELOW
                                + PLAIN_H * font / BASE_FONT)
            continue
        x = cb.get("x")
        if x is None:
            at_edge = {"x": 1.0, "xanchor": "left"}
            if owner is None:
                updates["coloraxis"] = {"colorbar": at_edge}
            else:
                fig.data[owner].colorbar.update(at_edge)
        elif cb.get("xref") != "container" and x > 1.0:
            continue  # placed further out on purpose: leave its room to automargin
        ticktext = cb.get("ticktext")
        if ticktext is not None and len(ticktext):
            width = CB_BODY + max(label_px(str(t), font) for t in ticktext)
        else:  # Plotly's own tick labels: room for the widest it writes in practice
            width = CB_BODY + CB_AUTO_EM * font
        width += float(cb.get("thickness") or 30)
        if _get(cb, "title", "text"):
            width += CB_TITLE if _get(cb, "title", "side") == "right" else CB_TITLE_TOP
        need["r"] = max(need["r"], width)
