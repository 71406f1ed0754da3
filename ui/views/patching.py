"""Activation patching (Heatmaps' real text, decoders): the two maps of recovered shares, the sentence that
reads them and the CSV.

A :class:`attncore.decoder.patching.Patching` in, ``go.Figure`` / ``DataFrame`` / plain sentences out; no
streamlit. Token strings come in as the page shows them and are escaped for Plotly here. Every figure sets
``layout.meta.view``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from attncore.decoder.patching import Patching
from ui.figures import DIVERGING, style
from ui.text import chart

__all__ = [
    "CARRY",
    "carriers",
    "heads_figure",
    "patching_frame",
    "patching_sentence",
    "position_labels",
    "resid_figure",
    "top_heads",
]

CARRY = 0.5  # a position "carries" the answer at a layer when its patch recovers at least this share


def position_labels(tokens: Sequence[str]) -> list[str]:
    """'0 ␣When', '1 ␣Mary', ...: unique axis categories (a repeated token would merge its columns)."""
    return [f"{i} {t}" for i, t in enumerate(tokens)]


def _grid(z: np.ndarray, x: Sequence[str], x_title: str, hover: str, view: str) -> go.Figure:
    N = z.shape[0]
    fig = go.Figure(go.Heatmap(
        z=z, x=[chart(t) for t in x], y=[str(n) for n in range(N)], colorscale=DIVERGING, zmid=0.0,
        zmin=-1.0, zmax=1.0, colorbar={"thickness": 12, "len": 0.9, "title": {"text": "share"}},
        hoverongaps=False, hovertemplate=hover + "<br>recovered share %{z:.3f}<extra></extra>"),
        layout={"yaxis": {"autorange": "reversed", "title": {"text": "layer"}, "type": "category"},
                "xaxis": {"title": {"text": x_title}, "type": "category", "side": "top"}})
    fig = style(fig, height=max(360, 14 * N + 110))
    return fig.update_layout(meta={"view": view})


def resid_figure(r: Patching, tokens: Sequence[str]) -> go.Figure:
    """Layers (rows) x positions (columns): the share recovered by patching the residual stream at the input
    of that layer at that position (blank: not computed). The colour scale is fixed to [-1, 1], white at 0."""
    if r.resid is None:
        raise ValueError("resid_figure needs the residual part")
    z = r.resid.numpy()
    if z.shape[1] != len(tokens):
        raise ValueError(f"resid_figure: {z.shape[1]} positions, {len(tokens)} tokens")
    return _grid(z, position_labels(tokens), "position (the corrupted prompt's token)",
                 "layer %{y} input, position %{x}", "patch-resid")


def heads_figure(r: Patching, head_labels: Sequence[str]) -> go.Figure:
    """Layers (rows) x heads (columns): the share recovered by patching that head's output at every
    position."""
    if r.heads is None:
        raise ValueError("heads_figure needs the heads' part")
    return _grid(r.heads.numpy(), head_labels, "head · key/value group", "layer %{y}, head %{x}",
                 "patch-heads")


def top_heads(r: Patching, n: int = 3) -> list[tuple[int, int, float]]:
    """The ``n`` computed heads with the largest share (layer, head, share), largest first, ties by index."""
    if r.heads is None:
        return []
    z = r.heads.numpy()
    H = z.shape[1]
    cells = [(float(v), i) for i, v in enumerate(z.reshape(-1)) if np.isfinite(v)]
    return [(i // H, i % H, v) for v, i in sorted(cells, key=lambda c: (-c[0], c[1]))[:n]]


def carriers(r: Patching) -> list[tuple[int, int, int, float]]:
    """Runs of computed layers whose best position is the same and recovers at least :data:`CARRY`:
    ``(first layer, last layer, position, the run's smallest best share)``, in layer order."""
    if r.resid is None:
        return []
    z = r.resid.numpy()
    runs: list[tuple[int, int, int, float]] = []
    for layer in range(r.resid_done):
        row = z[layer]
        p = int(np.argmax(row))
        v = float(row[p])
        if v < CARRY:
            continue
        if runs and runs[-1][2] == p and runs[-1][1] == layer - 1:
            a, _, _, lo = runs[-1]
            runs[-1] = (a, layer, p, min(lo, v))
        else:
            runs.append((layer, layer, p, v))
    return runs


def _layers(a: int, b: int) -> str:
    return f"layer {a}" if a == b else f"layers {a}–{b}"


def patching_sentence(r: Patching, tokens: Sequence[str], answer: str, wrong: str) -> str:
    """What the two maps show, in words built from their numbers."""
    parts = [f"The metric, logit({answer}) − logit({wrong}) at the last position, is {r.clean_diff:+.2f} "
             f"on the clean prompt and {r.corrupted_diff:+.2f} on the corrupted one; a patch's share is how "
             "much of that gap it gives back."]
    done, total = r.steps
    if done < total:
        parts.append(f"Computed so far: {done} of {total} layer steps (the blank rows are not run yet).")
    if r.resid is not None and r.resid_done:
        runs = carriers(r)
        if runs:
            where = "; ".join(f"{_layers(a, b)} at position {p} ({tokens[p]}), ≥ {lo:.2f}"
                              for a, b, p, lo in runs)
            parts.append(f"The residual stream carries it (one position recovering ≥ {CARRY:.1f}) in "
                         f"{where}.")
        else:
            parts.append(f"No single position of the residual stream recovers {CARRY:.1f} or more in the "
                         f"{r.resid_done} layers computed: the answer is spread over positions.")
    if r.heads is not None and r.heads_done:
        top = top_heads(r)
        heads = ", ".join(f"layer {lay} head {h} ({v:+.2f})" for lay, h, v in top)
        z = r.heads.numpy()[: r.heads_done]
        big = int((z >= 0.1).sum())
        parts.append(f"Of the {z.size} heads computed, the largest shares: {heads}; {big} recover 0.10 or "
                     "more alone (shares of single heads do not add up: later layers read them together).")
    return " ".join(parts)


def patching_frame(r: Patching, tokens: Sequence[str]) -> pd.DataFrame:
    """One row per patch: part ("resid" or "head"), layer, position or head, its token, the share."""
    rows: list[tuple[str, int, int, str, float]] = []
    if r.resid is not None:
        z = r.resid.numpy()
        rows += [("resid", n, p, tokens[p], float(z[n, p]))
                 for n in range(z.shape[0]) for p in range(z.shape[1])]
    if r.heads is not None:
        z = r.heads.numpy()
        rows += [("head", n, h, "", float(z[n, h])) for n in range(z.shape[0]) for h in range(z.shape[1])]
    return pd.DataFrame(rows, columns=["part", "layer", "position_or_head", "token", "recovered_share"])
