"""Why a head attends where it does (issue 40 item 1): one query's logits taken apart by
:mod:`attncore.decoder.why`, as figures and a table (arrays in, figures / tables / sentences out; no
streamlit).
"""

from __future__ import annotations

import html
from collections.abc import Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from attncore.decoder.why import HeadWhy
from ui.figures import PALETTE, legend_below, style

__all__ = ["key_sentence", "norm_cos_figure", "pairs_figure", "parts_frame"]


def pairs_figure(why: HeadWhy, key: int, tokens: Sequence[str], *, view: str) -> go.Figure:
    """Grouped bars: each rotary pair's contribution to the logit of ``key`` and of the first token, pairs
    from low to high frequency (x: rank; the pair's dims and theta_p in the hover).

    ``layout.meta``: ``view``, ``key``, ``pair_index`` (the model's pair of each bar) and ``inv_freq``.
    """
    P = int(why.pair.shape[1])
    E = 2 * P
    x = list(range(P))
    dims = [f"dims {p}, {p + P}" for p in why.pair_index.tolist()]
    custom = np.stack([why.pair_index.double().numpy(), why.inv_freq.numpy()], axis=1)  # (P, 2)
    fig = go.Figure()
    for j, colour in ((key, PALETTE[0]), (0, PALETTE[1])) if key != 0 else ((0, PALETTE[1]),):
        fig.add_bar(x=x, y=why.pair[j].numpy(), name=html.escape(f"key {j}: {tokens[j]}"),
                    marker_color=colour, customdata=custom, hovertext=dims,
                    hovertemplate="pair %{customdata[0]} (%{hovertext})<br>θ %{customdata[1]:.3g}"
                                  "<br>contribution %{y:.4f}<extra></extra>")
    step = max(1, P // 8)
    ticks = x[::step]
    fig.update_xaxes(title={"text": f"rotary pair, low → high frequency (of {P}, head dim {E})"},
                     tickmode="array", tickvals=ticks,
                     ticktext=[f"{float(why.inv_freq[i]):.1e}" for i in ticks])
    fig.update_yaxes(title={"text": "contribution to q·k/√E"})
    style(fig, title="The logit by rotary frequency pair", height=340)
    legend_below(fig)
    return fig.update_layout(barmode="group", meta={"view": view, "key": int(key),
                                                    "pair_index": why.pair_index.tolist(),
                                                    "inv_freq": why.inv_freq.tolist()})


def norm_cos_figure(why: HeadWhy, tokens: Sequence[str], *, view: str) -> go.Figure:
    """Every key the query sees: its norm |k_j| (x) against its cosine with q_i (y), coloured by the logit
    (their product times |q_i|/√E). ``layout.meta``: ``view``, ``ref`` (the median key), ``winner``."""
    n = int(why.logits.numel())
    labels = [html.escape(f"{j}: {tokens[j]}") for j in range(n)]
    fig = go.Figure(go.Scatter(
        x=why.k_norm.numpy(), y=why.cos.numpy(), mode="markers", name="keys", showlegend=False,
        marker={"color": why.logits.numpy(), "colorscale": "Viridis", "size": 9,
                "colorbar": {"title": {"text": "logit"}}},
        text=labels, customdata=why.logits.numpy(),
        hovertemplate="%{text}<br>|k| %{x:.3f}<br>cos %{y:.3f}<br>logit %{customdata:.3f}<extra></extra>"))
    for j, name, colour in ((0, "first token", PALETTE[1]), (why.ref, "median key", PALETTE[7])):
        fig.add_scatter(x=[float(why.k_norm[j])], y=[float(why.cos[j])], mode="markers", name=name,
                        marker={"symbol": "circle-open", "size": 16, "color": colour, "line": {"width": 2}},
                        hoverinfo="skip")
    fig.update_xaxes(title={"text": "key norm |k_j|"})
    fig.update_yaxes(title={"text": "cos(q_i, k_j)"})
    style(fig, title="Norm against angle, every key", height=340)
    legend_below(fig)
    return fig.update_layout(meta={"view": view, "ref": int(why.ref), "winner": why.winner})


def parts_frame(why: HeadWhy, tokens: Sequence[str]) -> pd.DataFrame:
    """Every key's logit and its parts (the columns of each split sum to the logit, or to its lead over the
    median key), largest logit first."""
    n = int(why.logits.numel())
    df = pd.DataFrame({
        "key": np.arange(n), "token": list(tokens[:n]), "logit": why.logits.numpy(),
        "|k|": why.k_norm.numpy(), "cos": why.cos.numpy(),
        "lead over median": (why.logits - why.logits[why.ref]).numpy(),
        "norm part": why.norm_part.numpy(), "angle part": why.angle_part.numpy(),
        "content": why.content.sum(-1).numpy(), "position": why.position.sum(-1).numpy(),
        "mostly by": [why.wins_by(j) if j != why.ref else "" for j in range(n)],
    })
    return df.sort_values(["logit", "key"], ascending=[False, True], kind="stable").reset_index(drop=True)


def key_sentence(why: HeadWhy, key: int, tokens: Sequence[str]) -> str:
    """The selected key's logit in its three splits (numbers from ``why``; the caller escapes the
    tokens)."""
    s = float(why.logits[key])
    content, position = float(why.content[key].sum()), float(why.position[key].sum())
    lead = s - float(why.logits[why.ref])
    text = (f"Key {key} ({tokens[key]}) scores {s:.3f} = |q| {why.q_norm:.2f} × |k| "
            f"{float(why.k_norm[key]):.2f} × cos {float(why.cos[key]):+.3f} / √{2 * why.pair.shape[1]}; "
            f"content {content:+.3f} and "
            f"position {position:+.3f} (sum {content + position:.3f}).")
    if key != why.ref:
        verb = "leads" if lead > 0 else "trails"
        text += (f" It {verb} the median key {why.ref} ({tokens[why.ref]}) by {abs(lead):.3f}: "
                 f"{float(why.norm_part[key]):+.3f} from the norms, {float(why.angle_part[key]):+.3f} from "
                 f"the angle, so mostly by {'its norm' if why.wins_by(key) == 'norm' else 'its angle'}.")
    return text
