"""Real-text views shared by Heatmaps and Attention sinks: click targets, the token strip, and one
token's q, k, v and output (arrays in, figures / HTML / tables out; no streamlit).

Plotly heatmaps cannot be selected by a click (they have no point selection), so every clickable
map gets an invisible scatter of *pick points* on top (:func:`pick_points`): each point carries
``customdata`` that names what a click on it chooses (a query token, or a layer and head), and
:func:`picked` reads that back out of Streamlit's selection event.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from attncore.explore import row_stats
from attncore.models import TextAttention
from ui.figures import DIVERGING, PALETTE, style

__all__ = [
    "heads_sentence",
    "heads_summary",
    "MAX_PICK_POINTS",
    "PICK",
    "STRIP_RGB",
    "pick_point_props",
    "pick_points",
    "picked",
    "strip_alpha",
    "token_strip_html",
    "top_keys_figure",
    "top_keys_frame",
    "vectors_figure",
    "vectors_frame",
]

PICK = "pick"  # the name of every pick-point trace
# Pick points on one weight map: every row kept, columns thinned past it (every key up to 64 tokens,
# every 4th at 128, every 64th at 512). Each costs the browser ~0.15 ms to draw: 16,384 points made
# the 512-token view's first render 8.5-8.9 s, 4,096 6.1-7.4 s (bench: 2-core machine, Chromium).
MAX_PICK_POINTS = 4_096
STRIP_RGB = (0, 114, 178)  # PALETTE[0] as RGB: the token strip's colour
VECTOR_ROWS = ("q", "k", "v", "o")


def pick_point_props(x: Sequence[Any], y: Sequence[Any], customdata: np.ndarray | list, hover: str, *,
                     xaxis: str = "x", yaxis: str = "y", size: int = 8) -> dict:
    """The properties of :func:`pick_points` as a plain trace dict, for a builder that makes its figure once
    from dicts (Plotly validates a ``go.Scatter`` again when it goes into a figure)."""
    # customdata as plain lists: a typed array would reach Streamlit's selection event as an object.
    # x and y as object arrays: Plotly validates a list of 4,096 category names in 4.8 ms, an array in 0.3.
    return {"type": "scatter", "x": np.asarray(x, dtype=object), "y": np.asarray(y, dtype=object),
            "mode": "markers", "name": PICK,
            "customdata": customdata if isinstance(customdata, list) else np.asarray(customdata).tolist(),
            "hovertemplate": hover, "showlegend": False, "xaxis": xaxis, "yaxis": yaxis,
            "marker": {"size": size, "opacity": 0.0, "color": PALETTE[7]},
            "selected": {"marker": {"opacity": 0.0}}, "unselected": {"marker": {"opacity": 0.0}}}


def pick_points(x: Sequence[Any], y: Sequence[Any], customdata: np.ndarray | list, hover: str, *,
                xaxis: str = "x", yaxis: str = "y", size: int = 8) -> go.Scatter:
    """Invisible markers at (x, y) that make a heatmap clickable (name :data:`PICK`).

    ``customdata`` (P, k) holds what a click on each point selects (a list of lists is sent as it is);
    ``hover`` is its hover template (the markers take the hover from the heatmap beneath, so it must say
    as much). ``size``: the markers' diameter in px; a point answers hover and clicks within its radius
    plus Plotly's hover distance (20 px), so larger markers cover a heatmap with fewer points.
    """
    props = pick_point_props(x, y, customdata, hover, xaxis=xaxis, yaxis=yaxis, size=size)
    del props["type"]
    return go.Scatter(**props)


def picked(points: Sequence[dict], fields: Sequence[str]) -> dict[str, int] | None:
    """What a click chose: ``{field: int}`` from the first selected point whose ``customdata``
    has an entry per field (points of other traces, like bars, are skipped); None when none has."""
    for p in points or ():
        cd = p.get("customdata") if isinstance(p, dict) else None
        if isinstance(cd, int | float):
            cd = [cd]
        elif isinstance(cd, dict):  # a typed array serialised by JSON.stringify: {"0": a, "1": b, ...}
            try:
                cd = [cd[k] for k in sorted(cd, key=int)]
            except (TypeError, ValueError):
                continue
        if isinstance(cd, list | tuple) and len(cd) >= len(fields):
            try:
                return {f: int(round(float(v))) for f, v in zip(fields, cd, strict=False)}
            except (TypeError, ValueError):
                continue
    return None


# ---------------------------------------------------------------------------- token strip


def strip_alpha(weights: np.ndarray) -> np.ndarray:
    """Background opacity of each token: its weight over the strip's largest (0 for masked/absent)."""
    w = np.nan_to_num(np.asarray(weights, dtype=np.float64), nan=0.0)
    top = float(w.max()) if w.size else 0.0
    return w / top if top > 0 else np.zeros_like(w)


def token_strip_html(tokens: Sequence[str], weights: np.ndarray, selected: int, *, label: str,
                     visible: np.ndarray | None = None, raw: Sequence[str] = ()) -> str:
    """The text's tokens as spans coloured by ``weights`` (S,), the ``selected`` token outlined.

    ``raw`` (S,), the tokens as the tokenizer writes them, go in each title (``raw: Ġhead``) where they
    differ from ``tokens``.

    Every token is ``html.escape``d (user text never becomes markup); the hover title gives the
    index, the token and its weight. Tokens in ``visible == False`` (keys a causal query cannot
    see) are struck through and titled so.
    """
    w = np.asarray(weights, dtype=np.float64)
    alpha = strip_alpha(w)
    r, g, b = STRIP_RGB
    spans = []
    pad = "1px 1px;margin:1px 0" if all(len(t) <= 1 for t in tokens) else "1px 3px;margin:1px"  # characters
    for j, tok in enumerate(tokens):
        a = float(alpha[j])
        seen = visible is None or bool(visible[j])
        fg = "#fff" if a > 0.55 else "inherit"
        style_ = (f"background:rgba({r},{g},{b},{a:.3f});color:{fg};padding:{pad};"
                  "border-radius:3px;display:inline-block;white-space:pre;font-family:monospace")
        if j == selected:
            style_ += f";outline:2px solid {PALETTE[5]};outline-offset:1px"
        if not seen:
            style_ += ";text-decoration:line-through;opacity:0.45"
        title = (f"{j}: {tok}, weight {w[j]:.4f}" if seen else f"{j}: {tok}, not visible (causal mask)")
        if len(raw) == len(tokens) and raw[j] != tok:
            title += f" (raw: {raw[j]})"
        spans.append(f'<span class="attn-tok" data-j="{j}" data-w="{w[j]:.6g}" title="{html.escape(title)}" '
                     f'style="{style_}">{html.escape(tok)}</span>')
    return (f'<div class="attn-strip" data-label="{html.escape(label)}" style="line-height:1.9">'
            + "".join(spans) + "</div>")


# ---------------------------------------------------------------------------- q, k, v, output


def vectors_figure(q: np.ndarray, k: np.ndarray, v: np.ndarray, o: np.ndarray, token: str, *,
                   view: str) -> go.Figure:
    """Four rows (q_i, k_i, v_i, o_i) over the head dimensions, one diverging colour range.

    ``q``, ``k`` (E,) and ``v``, ``o`` (Ev,) of one token (E = Ev here). ``layout.meta``:
    ``view`` and ``rows`` (the row names, top to bottom).
    """
    z = np.stack([np.asarray(a, dtype=np.float32) for a in (q, k, v, o)])  # (4, E)
    lim = float(np.abs(z).max()) or 1.0
    names = [f"{n}<sub>i</sub>" for n in VECTOR_ROWS]
    fig = go.Figure(go.Heatmap(
        z=z, x=np.arange(z.shape[1]), y=names, colorscale=DIVERGING, zmid=0.0, zmin=-lim, zmax=lim,
        colorbar={"thickness": 10, "len": 0.9, "title": {"text": "value", "side": "right"}},
        hovertemplate="%{y}[%{x}] = %{z:.4f}<extra></extra>", xgap=1, ygap=2))
    fig.update_xaxes(title={"text": "head dimension"}, showgrid=False, zeroline=False)
    fig.update_yaxes(autorange="reversed", showgrid=False)
    style(fig, title=f"q, k, v and output of {html.escape(token)}", height=250)
    return fig.update_layout(meta={"view": view, "rows": list(VECTOR_ROWS)}, margin={"t": 36})


def vectors_frame(q: np.ndarray, k: np.ndarray, v: np.ndarray, o: np.ndarray) -> pd.DataFrame:
    """One token's four vectors as columns, a row per head dimension (CSV download)."""
    return pd.DataFrame({"dim": np.arange(len(q)), "q": np.asarray(q, dtype=np.float64),
                         "k": np.asarray(k, dtype=np.float64), "v": np.asarray(v, dtype=np.float64),
                         "output": np.asarray(o, dtype=np.float64)})


def top_keys_figure(keys: Sequence[tuple[int, float]], tokens: Sequence[str], scores: np.ndarray, *,
                    view: str) -> go.Figure:
    """Horizontal bars: the weight of each top key (largest on top), its scaled score in the hover.

    ``keys`` (index, weight) as :func:`attncore.qkv.top_keys` returns them; ``scores`` (S,)
    the row's scaled scores q_i·k_j/√E. ``layout.meta``: ``view`` and ``keys`` (indices).
    """
    idx = [j for j, _ in keys]
    w = np.array([x for _, x in keys], dtype=np.float64)
    labels = [html.escape(f"{j}: {tokens[j]}") for j in idx]
    fig = go.Figure(go.Bar(
        x=w, y=list(range(len(idx))), orientation="h", marker_color=PALETTE[0],
        customdata=np.array([[j, float(scores[j])] for j in idx], dtype=np.float64),
        text=[f"{x:.3f}" for x in w], textposition="outside", cliponaxis=False,
        hovertemplate="key %{customdata[0]}<br>weight %{x:.4f}<br>score q·k/√E %{customdata[1]:.3f}"
                      "<extra></extra>"))
    fig.update_yaxes(tickmode="array", tickvals=list(range(len(idx))), ticktext=labels, autorange="reversed")
    top = float(w.max()) if w.size else 1.0
    fig.update_xaxes(title={"text": "weight w_ij"}, range=[0, max(top, 1e-6) * 1.2])
    style(fig, title="Top keys by weight", height=250)
    return fig.update_layout(meta={"view": view, "keys": idx}, margin={"t": 36}, showlegend=False)


def top_keys_frame(weights_row: np.ndarray, scores_row: np.ndarray, tokens: Sequence[str]) -> pd.DataFrame:
    """Every key of one query: token, scaled score and weight (CSV download)."""
    return pd.DataFrame({"key": np.arange(len(tokens)), "token": list(tokens),
                         "score": np.asarray(scores_row, dtype=np.float64),
                         "weight": np.asarray(weights_row, dtype=np.float64)})


def heads_summary(att: TextAttention) -> tuple[int, int, int, float]:
    """Over every head of the model on this text: (heads, heads whose mean row entropy is below
    three quarters of the mean uniform entropy log n, heads that put more than half of their
    weight on the first token, that threshold in nats)."""
    if not att.all_maps and att.summary is not None:  # a long text: the per-head summaries of every layer
        L = len(att.tokens)
        threshold = 0.75 * float(np.log(np.arange(1, L + 1) if att.causal else np.full(L, L)).mean())
        ent, mass = att.summary.entropy.double(), att.summary.first.double()  # (N, H)
        return int(ent.numel()), int((ent < threshold).sum()), int((mass > 0.5).sum()), threshold
    rs = row_stats(att.attentions, att.allowed)  # entropy (N, H, L); visible keys per row
    threshold = 0.75 * float(rs.visible.double().log().mean())
    low = int((rs.entropy.double().mean(-1) < threshold).sum())
    first = int((att.attentions[..., 0].double().mean(-1) > 0.5).sum())
    return int(att.attentions.shape[0] * att.attentions.shape[1]), low, first, threshold


def heads_sentence(att: TextAttention, name: str) -> str:
    """What every head of the model does on this text, in the numbers of :func:`heads_summary`."""
    total, low, first, threshold = heads_summary(att)
    return (f"On this text, {low} of the {total} heads of {name} have a mean entropy below three quarters "
            f"of log n ({threshold:.2f} nats), and {first} put more than half of their weight on the first "
            f"token, {att.tokens[0]} (see the Attention sinks page).")
