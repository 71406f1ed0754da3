"""The shipped causal character model: the next-character bar chart and its table.

Used by the Heatmaps page's real-text source and the Attention sinks page's real-model part
when the model chosen is the character transformer. No streamlit here.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from attncore.training import char_label
from ui.figures import PALETTE, style
from ui.text import chart

__all__ = ["next_char_figure", "next_char_frame", "top_k"]


def top_k(dist: Sequence[tuple[str, float]], k: int) -> list[tuple[str, float]]:
    """The ``k`` most likely characters of a distribution sorted most likely first."""
    return list(dist[: max(1, int(k))])


def next_char_figure(dist: Sequence[tuple[str, float]], k: int, temperature: float, *, view: str,
                     reference: Sequence[tuple[str, float]] | None = None) -> go.Figure:
    """Bars: the ``k`` most likely next characters at ``temperature`` (trace 0, probabilities).

    ``reference`` (the distribution at temperature 1) adds grey ticks on the same characters,
    so the chart shows what the temperature did. Labels and hover texts are HTML-escaped
    (:func:`ui.text.chart`): a local model's tokens may look like markup. ``layout.meta``: ``view``,
    ``chars`` (the characters, as the model writes them) and ``temperature``.
    """
    top = top_k(dist, k)
    chars = [c for c, _ in top]
    labels = [chart(char_label(c)) for c in chars]  # a model's vocabulary is drawn as typed, never as markup
    # Plotly treats category labels that look like numbers as numbers: pin the order.
    p = np.array([q for _, q in top], dtype=np.float64)
    fig = go.Figure(go.Bar(
        x=list(range(len(top))), y=p, name=f"τ = {temperature:g}", marker_color=PALETTE[0],
        text=[f"{q:.1%}" for q in p], textposition="outside", cliponaxis=False,
        customdata=labels, hovertemplate="next character %{customdata}<br>p = %{y:.4f}<extra></extra>"))
    if reference is not None and abs(temperature - 1.0) > 1e-12:
        ref = dict(reference)
        fig.add_trace(go.Scatter(
            x=list(range(len(top))), y=np.array([ref.get(c, 0.0) for c in chars], dtype=np.float64),
            mode="markers", name="τ = 1", customdata=labels,
            marker={"symbol": "line-ew-open", "size": 26, "color": PALETTE[7], "line": {"width": 3}},
            hovertemplate="next character %{customdata}<br>p at τ = 1: %{y:.4f}<extra></extra>"))
    fig.update_xaxes(tickmode="array", tickvals=list(range(len(top))), ticktext=labels,
                     title="next character (␣ space, ↵ newline)")
    fig.update_yaxes(title="probability", range=[0, float(p.max()) * 1.15 + 0.03])  # room for the labels
    style(fig, height=340)
    fig.update_layout(bargap=0.25, showlegend=reference is not None and abs(temperature - 1.0) > 1e-12,
                      legend={"x": 1.0, "xanchor": "right", "y": 1.0, "yanchor": "top"},
                      meta={"view": view, "chars": chars, "temperature": float(temperature)})
    return fig


def next_char_frame(dist: Sequence[tuple[str, float]], temperature: float) -> pd.DataFrame:
    """Every character of the vocabulary with its probability at ``temperature`` (CSV download)."""
    return pd.DataFrame({
        "rank": np.arange(1, len(dist) + 1),
        "character": [c for c, _ in dist],
        "shown as": [char_label(c) for c, _ in dist],
        "probability": [q for _, q in dist],
        "temperature": float(temperature),
    })
