"""Margins a figure will need, estimated on the server, so the browser draws each chart once.

Plotly's automargin draws a chart, measures its tick labels, axis titles, legend and colour bar,
and when they do not fit the layout's margins it widens them and draws the whole chart a second
time. Almost every chart of this app asked for 10 px and was drawn twice; on the Attention sinks
lab, whose nine charts all change when a slider moves, that second pass cost ~0.1 s of what a user
waits for (``bench.ui``). :func:`fit_margins` estimates what automargin would push (from the tick
values, the category names, the legend entries and the fonts, with constants measured in Chromium
on the plotly.js that Streamlit 1.67 bundles, v4) and asks for that up front. Automargin stays
on: an estimate that falls short costs the old second draw, never a clipped label.

Three parts of a layout depend on the chart's width, which the server does not know. Legends
wrap: their margin is estimated at the narrowest width the chart is shown at (a wider chart fits
more entries per row, so the margin is never too small; the legend below is placed a fixed number
of pixels under the axis). Plotly rotates category labels when they collide: crowded category axes
get a fixed angle. A colour bar sits 2% of the plot's width beyond it: here at its edge.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from typing import Any

import numpy as np
import plotly.graph_objects as go

__all__ = ["fit_margins", "label_px"]

EM = 0.56  # mean width of a tick or legend character in ems (Source Sans; measured 0.42-0.5, with slack)
BASE_FONT = 12  # Plotly's default font size (px)
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
CB_AUTO_EM = 3.75  # Plotly's own colour-bar tick labels, in ems (45 px at 12 px; 81 px measured in all)
CB_BELOW = 34.0  # a horizontal colour bar's pads under its thickness and tick labels, px
CB_TITLE = 19.0  # a colour bar title written beside it (side "right")
CB_TITLE_TOP = 30.0  # ... above it (Plotly's default for vertical bars)
NARROWEST_PLOT = 170.0  # px: the plot area of a chart in a three-column row at 1280 px (legend columns)
DEFAULT_HEIGHT = 450
PLOTLY_MARGINS = {"l": 80, "r": 80, "t": 100, "b": 80}  # what Plotly uses where a layout sets none
TITLE_BAND = 30.0  # a figure title's line above a legend that sits on the plot
WIDE_PLOT = 470.0  # px a top legend spans on a full-width chart at 1280 px (Plotly caps it near 2/3)
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
    if v is None:
        return None
    if isinstance(v, dict):  # a typed array Plotly has not decoded
        return None
    try:
        return np.asarray(v)
    except (TypeError, ValueError):
        return None


def _extent(traces: Iterable[Any], letter: str, ax_name: str) -> tuple[list[str], float, float]:
    """(category labels, lo, hi) of what the traces put on one axis (numbers only for lo/hi)."""
    cats: list[str] = []
    lo, hi = math.inf, -math.inf
    for tr in traces:
        if (getattr(tr, f"{letter}axis", None) or letter) != ax_name:
            continue
        vals = _values(getattr(tr, letter, None))
        if vals is None and tr.type == "heatmap":  # cells at 0 .. columns - 1 (rows for y)
            z = _values(tr.z)
            if z is not None and z.ndim == 2:
                vals = np.array([0.0, z.shape[1 if letter == "x" else 0] - 1.0])
        if tr.type == "bar" and letter == ("y" if tr.orientation != "h" else "x"):
            lo, hi = min(lo, 0.0), max(hi, 0.0)
        if vals is None or vals.size == 0:
            continue
        if vals.dtype.kind in "OUS":
            cats.extend(str(s) for s in vals.ravel()[:512])
            continue
        v = vals.astype(np.float64, copy=False).ravel()
        err = getattr(tr, f"error_{letter}", None)
        arr = _values(err.array) if err is not None and err.visible is not False else None
        if arr is not None and arr.size == v.size and arr.dtype.kind == "f":
            v = np.concatenate([v - arr, v + arr])
        v = v[np.isfinite(v)]
        if v.size:
            lo, hi = min(lo, float(v.min())), max(hi, float(v.max()))
    return cats, lo, hi


def _axis_labels(fig: go.Figure, ax: Any, letter: str, ax_name: str) -> tuple[list[str], bool]:
    """The widest labels an axis may show and whether they carry superscripts."""
    if ax.showticklabels is False or ax.visible is False:
        return [], False
    if ax.ticktext is not None and len(ax.ticktext):
        texts = [str(t) for t in ax.ticktext]
        return texts, any(_SUPERSCRIPT.search(t) for t in texts)
    cats, lo, hi = _extent(fig.data, letter, ax_name)
    if cats or ax.type == "category":
        return cats, False
    rng = ax.range
    if ax.type == "log":
        power = ax.exponentformat == "power" or ax.dtick in (1, "1")
        if rng is not None and None not in rng:
            a, b = float(rng[0]), float(rng[1])
        else:
            a = math.log10(lo) if lo > 0 else -3.0
            b = math.log10(hi) if hi > 0 else 0.0
        labels = _log_labels(min(a, b), max(a, b), power)
        return labels, power and any(lab.startswith("10^") for lab in labels)
    if rng is not None and None not in rng:
        lo, hi = float(min(rng)), float(max(rng))
    return _linear_labels(lo, hi), False


def _font(ax_font: Any, lay: Any) -> float:
    size = getattr(ax_font, "size", None) if ax_font is not None else None
    base = getattr(lay.font, "size", None) if lay.font is not None else None
    return float(size or base or BASE_FONT)


def _domain_start(lay: Any, letter: str, anchor: str | None) -> float:
    """Where the axis an axis is anchored to starts (0: this axis sits on the figure's edge)."""
    if not anchor or anchor == "free":
        return 0.0
    other = lay[f"{letter}axis{anchor[1:]}"] if anchor[1:] else lay[f"{letter}axis"]
    dom = other.domain
    return float(dom[0]) if dom is not None else 0.0


def _legend_entries(fig: go.Figure) -> list[str]:
    if fig.layout.showlegend is False:
        return []
    names = [str(tr.name) for tr in fig.data if tr.name and tr.showlegend is not False
             and tr.type not in ("heatmap", "histogram2d")]
    shown = [tr for tr in fig.data if tr.showlegend is True]
    return names if len(names) > 1 or shown else []


def _legend_rows(fig: go.Figure, entries: list[str], width: float) -> tuple[int, float]:
    """Rows a horizontal legend takes when its entries flow as Plotly lays them out in ``width`` px,
    and its row height. A wider chart fits more entries per row, so at a chart's narrowest width
    this is the most rows it takes (its margin may then have room to spare, never too little)."""
    lay = fig.layout
    font = _font(lay.legend.font, lay) if lay.legend is not None else BASE_FONT
    rows, used = 1, 0.0
    for w in (label_px(e, font) + LEGEND_KEY for e in entries):
        if used and used + w > width:
            rows, used = rows + 1, 0.0
        used += w
    return rows, LEGEND_ROW * font / 11.0


def fit_margins(fig: go.Figure) -> go.Figure:
    """Ask, in place, for the margins automargin would push the figure to (never less than it asked).

    Also makes the width-dependent parts fixed: legend rows, crowded category labels' angle,
    colour-bar position. Figures with ``layout.meta.margins == "fixed"`` are left as they are.
    """
    lay = fig.layout
    meta = lay.meta if isinstance(lay.meta, dict) else {}
    if meta.get("margins") == "fixed":
        return fig
    m = lay.margin
    need = {side: float(getattr(m, side) if getattr(m, side) is not None else PLOTLY_MARGINS[side])
            for side in PLOTLY_MARGINS}
    x_band = 0.0
    for key in [k for k in lay if _AXIS.match(k)]:  # xaxis and yaxis always, then subplots' axes
        letter, num = _AXIS.match(key).groups()  # type: ignore[union-attr]
        ax = lay[key]
        name = f"{letter}{num}"
        other = "y" if letter == "x" else "x"
        if _domain_start(lay, other, ax.anchor or f"{other}{num}") > 0.01:
            continue  # an inner subplot's axis: its labels stay inside the figure
        font = _font(ax.tickfont, lay)
        labels, sup = _axis_labels(fig, ax, letter, name)
        if not labels:
            continue
        widest = max(label_px(t, font) for t in labels)
        scale = max(1.0, font / BASE_FONT)  # the pads do not shrink with a smaller tick font
        on_map = any(tr.type == "heatmap" and (getattr(tr, f"{letter}axis", None) or letter) == name
                     for tr in fig.data)
        pad = CATEGORY_PAD if on_map or ax.type == "category" or not _is_number(labels) else 0.0
        if letter == "y" and ax.side != "right":
            need["l"] = max(need["l"], widest + pad + Y_BAND * scale + 3.0 * max(0.0, BASE_FONT - font))
        elif letter == "x" and ax.side == "top":
            titled = bool(ax.title is not None and ax.title.text)
            band = (SUPER_H if sup else PLAIN_H) * scale + pad + (X_TITLE_BAND if titled else X_BAND) * scale
            need["t"] = max(need["t"], band)
            if _is_number(labels):
                need["r"] = max(need["r"], widest)  # the last tick label overhangs the plot's right edge
        elif letter == "x":
            titled = bool(ax.title is not None and ax.title.text)
            if titled:  # a title of several lines
                pad += str(ax.title.text).count("<br>") * 1.2 * _font(ax.title.font, lay) + 2.0
            angle = ax.tickangle
            crowded = ax.type == "category" or not _is_number(labels)
            if crowded and angle is None and widest * len(set(labels)) > NARROWEST_PLOT * 0.8:
                angle = -90  # what Plotly turns crowded category labels to at narrow widths
                ax.tickangle = angle
            if angle not in (None, 0):
                high = widest * abs(math.sin(math.radians(float(angle)))) + PLAIN_H * scale * abs(
                    math.cos(math.radians(float(angle)))) + X_ROTATED
            else:
                high = (SUPER_H if sup else PLAIN_H) * scale + pad
            band = high + (X_TITLE_BAND if titled else X_BAND) * scale
            x_band = max(x_band, band)
            need["b"] = max(need["b"], band)
            if angle in (None, 0) and ax.type != "category" and _is_number(labels):
                need["r"] = max(need["r"], widest)  # the last tick label overhangs the plot's right edge
    _colorbars(fig, need)
    entries = _legend_entries(fig)
    leg = lay.legend
    if entries and leg is not None and leg.orientation == "h":
        height = float(lay.height or DEFAULT_HEIGHT)
        if leg.y is not None and leg.y < 0 and leg.yref in (None, "paper"):  # below the plot
            rows, row_h = _legend_rows(fig, entries, NARROWEST_PLOT)
            need["b"] = max(need["b"], x_band + LEGEND_GAP + rows * row_h + LEGEND_PAD)
            plot_h = max(height - need["t"] - need["b"], 1.0)
            fig.update_layout(legend={"y": -(x_band + LEGEND_GAP) / plot_h, "yanchor": "top"})
        elif leg.yref == "container":  # at the figure's top (small multiples): t has room for two rows
            rows, row_h = _legend_rows(fig, entries, WIDE_PLOT)
            need["t"] += max(0, rows - 2) * row_h
        else:  # just above the plot (y = 1.02 of its height), under the title
            rows, row_h = _legend_rows(fig, entries, WIDE_PLOT)
            titled = lay.title is not None and bool(lay.title.text)
            plot_h = max(height - need["t"] - need["b"], 1.0)
            lift = max(0.0, float(leg.y if leg.y is not None else 1.02) - 1.0) * plot_h
            need["t"] = max(need["t"], rows * row_h + LEGEND_PAD + lift + (TITLE_BAND if titled else 0.0))
    fig.update_layout(margin={k: math.ceil(v) for k, v in need.items()})
    return fig


def _is_number(labels: list[str]) -> bool:
    try:
        [float(t.replace("−", "-").rstrip("kMB")) for t in labels if not t.startswith("10^")]
    except ValueError:
        return False
    return True


def _colorbars(fig: go.Figure, need: dict[str, float]) -> None:
    """Room on the right for a vertical colour bar, placed at the plot's edge (not 2% of its width out)."""
    lay = fig.layout
    bars = []
    cax = lay.coloraxis
    if cax is not None and cax.colorscale is not None and cax.showscale is not False:
        bars.append(cax.colorbar)
    for tr in fig.data:
        if tr.type == "heatmap" and tr.showscale is not False and tr.coloraxis is None:
            bars.append(tr.colorbar)
    for cb in bars:
        if cb.orientation == "h":  # under the plot at a fraction of its height: that many px more
            if cb.y is not None and cb.y < 0.5 and cb.yref != "container":
                plot_h = float(lay.height or DEFAULT_HEIGHT) - need["t"] - need["b"]
                below = -float(cb.y) * max(plot_h, 1.0) if cb.y < 0 else 0.0
                need["b"] = max(need["b"], below + float(cb.thickness or 30) + CB_BELOW
                                + PLAIN_H * _font(cb.tickfont, lay) / BASE_FONT)
            continue
        if cb.x is None:
            cb.x, cb.xanchor = 1.0, "left"
        elif cb.xref != "container" and cb.x > 1.0:
            continue  # placed further out on purpose: leave its room to automargin
        font = _font(cb.tickfont, lay)
        if cb.ticktext is not None and len(cb.ticktext):
            width = CB_BODY + max(label_px(str(t), font) for t in cb.ticktext)
        else:  # Plotly's own tick labels: room for the widest it writes in practice
            width = CB_BODY + CB_AUTO_EM * font
        title = cb.title.text if cb.title is not None else None
        width += float(cb.thickness or 30)
        if title:
            width += CB_TITLE if cb.title.side == "right" else CB_TITLE_TOP
        need["r"] = max(need["r"], width)
