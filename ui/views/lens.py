"""Logit lens and direct logit attribution (Heatmaps' real text, decoders): figures, tables, sentences.

A :class:`attncore.decoder.lens.LensPass` in, ``go.Figure`` / ``DataFrame`` / plain sentences out; no
streamlit. Token strings are passed in as :func:`attncore.models.tokens.display_tokens` shows them (``␣`` a
leading space, ``↵`` a newline) and escaped for Plotly here. Every figure sets ``layout.meta.view``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from attncore.decoder.lens import LensPass, point_label
from ui.figures import DIVERGING, PALETTE, SEQUENTIAL, Curve, line_chart, style
from ui.text import chart

__all__ = [
    "dla_figure",
    "dla_frame",
    "dla_sentence",
    "lens_figure",
    "lens_frame",
    "rank_figure",
    "rank_sentence",
    "settled_point",
    "top_heads",
]


def _tag(fig: go.Figure, view: str) -> go.Figure:
    return fig.update_layout(meta={"view": view})


def lens_figure(r: LensPass, top_tokens: Sequence[Sequence[str]]) -> go.Figure:
    """Reading points (rows, "emb" at the top) x the top K tokens (columns, likeliest first): each cell's
    colour is the probability, its text the token. ``top_tokens`` (P, K) are ``r.top_ids`` as text."""
    probs = r.top_probs.numpy().astype(np.float64)  # (P, K)
    P, K = probs.shape
    if len(top_tokens) != P or any(len(row) != K for row in top_tokens):
        raise ValueError(f"lens_figure: {P} x {K} probabilities, tokens {len(top_tokens)} rows")
    text = [[chart(t) for t in row] for row in top_tokens]
    fig = go.Figure(go.Heatmap(
        z=probs, x=[str(k + 1) for k in range(K)], y=list(r.points), text=text, texttemplate="%{text}",
        textfont={"size": 10}, colorscale=SEQUENTIAL, zmin=0.0, zmax=1.0,
        colorbar={"thickness": 12, "len": 0.9},
        hovertemplate="after layer %{y}<br>rank %{x}: %{text}<br>p = %{z:.4f}<extra></extra>"),
        layout={"yaxis": {"autorange": "reversed", "title": {"text": "read after layer"}, "type": "category"},
                "xaxis": {"title": {"text": "rank at that layer (1 = likeliest; Ġ marks a leading space, Ċ a "
                                            "newline)"}, "type": "category"}})
    return _tag(style(fig, height=max(360, 16 * P + 90)), "lens")


def rank_figure(r: LensPass, target: str) -> go.Figure:
    """The final prediction's rank (1 = top, log scale) and probability at each reading point (x: "emb" = -1,
    then the layer after which the residual is read)."""
    x = np.arange(-1, len(r.points) - 1)
    rank = r.target_rank.numpy().astype(np.float64) + 1.0
    fig = line_chart([Curve(name=f"rank of {chart(target)} (1 = top)", x=x, y=rank, color=PALETTE[0],
                            hover="rank %{y:.0f}")],
                     x_title="read after layer (-1: the embeddings)", y_title="rank (1 = likeliest)",
                     log_y=True, height=300)
    return _tag(fig, "lens-rank")


def settled_point(r: LensPass) -> int:
    """The first reading point from which the final prediction stays the lens's top token to the end."""
    top = (r.target_rank == 0).tolist()
    i = len(top)
    while i > 0 and top[i - 1]:
        i -= 1
    return i


def rank_sentence(r: LensPass, target: str, token: str) -> str:
    """What the rank line shows, in words built from it."""
    s = settled_point(r)
    where = "only after the last layer" if s == len(r.points) - 1 else (
        "from the embeddings on" if s == 0 else f"from layer {point_label(s)} on")
    prob = float(r.target_prob[-1])
    rank0 = int(r.target_rank[0]) + 1
    return (f"After token {r.position} ({token}) the model predicts {target} (p = {prob:.1%}). Read through "
            f"the final norm and the unembedding, the residual stream ranks it {rank0:,} at the "
            f"embeddings and has it on top {where}.")


def dla_figure(r: LensPass, head_labels: Sequence[str], difference: bool = False) -> go.Figure:
    """Layers (rows) x heads (columns): each head's direct contribution to the prediction's logit (or, with
    ``difference``, to logit(prediction) - logit(second token)), red-blue centred at 0."""
    z = (r.difference() if difference else r.attribution.heads).numpy()  # (N, H)
    N = z.shape[0]
    name = "logit difference" if difference else "logit contribution"
    fig = go.Figure(go.Heatmap(
        z=z, x=[chart(h) for h in head_labels], y=[str(n) for n in range(N)], colorscale=DIVERGING, zmid=0.0,
        colorbar={"thickness": 12, "len": 0.9}, hoverongaps=False,
        hovertemplate=f"layer %{{y}}, head %{{x}}<br>{name} %{{z:+.4f}}<extra></extra>"),
        layout={"yaxis": {"autorange": "reversed", "title": {"text": "layer"}, "type": "category"},
                "xaxis": {"title": {"text": "head · key/value group"}, "type": "category", "side": "top"}})
    fig = style(fig, height=max(360, 14 * N + 100))
    return _tag(fig, "lens-dla-diff" if difference else "lens-dla")


def top_heads(z: np.ndarray, n: int = 3) -> list[tuple[int, int, float]]:
    """The ``n`` heads with the largest contribution (layer, head, value), largest first, ties by index."""
    flat = z.reshape(-1)
    H = z.shape[1]
    order = sorted(range(flat.size), key=lambda i: (-float(flat[i]), i))[:n]
    return [(i // H, i % H, float(flat[i])) for i in order]


def _heads_text(items: list[tuple[int, int, float]]) -> str:
    return ", ".join(f"layer {lay} head {h} ({v:+.2f})" for lay, h, v in items)


def dla_sentence(r: LensPass, target: str, second: str) -> str:
    """The attribution's sum and its largest heads, from the numbers."""
    a, c = r.attribution, r.contrast
    heads = float(a.heads.sum())
    mlps = float(a.mlps.sum())
    rest = float(a.attn_bias.sum()) + a.unembed_bias
    bias = f", biases {rest:+.2f}" if rest != 0.0 else ""
    return (f"The logit of {target}, {a.logit:.2f}, is the sum of its direct parts with the final norm's "
            f"scale frozen: embedding {a.embedding:+.2f}, all heads {heads:+.2f}, all MLPs {mlps:+.2f}{bias} "
            f"(sum {a.total:.4f}). Largest heads: {_heads_text(top_heads(a.heads.numpy()))}. Against "
            f"{second} (logit {c.logit:.2f}), the heads that separate them most: "
            f"{_heads_text(top_heads(r.difference().numpy()))}. Direct means straight to the unembedding: "
            "what a head does through later layers is not counted here.")


def lens_frame(r: LensPass, top_tokens: Sequence[Sequence[str]]) -> pd.DataFrame:
    """One row per reading point: the prediction's rank and probability, then the top tokens and theirs."""
    rows = []
    for i, label in enumerate(r.points):
        row: dict[str, object] = {"after_layer": label, "prediction_rank": int(r.target_rank[i]) + 1,
                                  "prediction_prob": float(r.target_prob[i])}
        for k, tok in enumerate(top_tokens[i]):
            row[f"top{k + 1}"] = tok
            row[f"p{k + 1}"] = float(r.top_probs[i, k])
        rows.append(row)
    return pd.DataFrame(rows)


def dla_frame(r: LensPass) -> pd.DataFrame:
    """One row per part (embedding, each head, each layer's o_proj bias and MLP): its direct contribution to
    the prediction's logit, to the second token's and to their difference."""
    a, c = r.attribution, r.contrast
    rows: list[tuple[str, int, int, float, float]] = [("embedding", -1, -1, a.embedding, c.embedding)]
    N, H = a.heads.shape
    for n in range(N):
        rows += [("head", n, h, float(a.heads[n, h]), float(c.heads[n, h])) for h in range(H)]
        rows.append(("o_proj bias", n, -1, float(a.attn_bias[n]), float(c.attn_bias[n])))
        rows.append(("mlp", n, -1, float(a.mlps[n]), float(c.mlps[n])))
    df = pd.DataFrame(rows, columns=["part", "layer", "head", "prediction", "second"])
    df["difference"] = df["prediction"] - df["second"]
    return df
