"""Which tokens to keep (Attention sinks, real decoder): perplexity against budget per policy beside dense,
the per-position loss, what each policy keeps over time, the share of slots on the first tokens, the table;
arrays in (:class:`attncore.decoder.eviction_read.PolicyLosses`, cache maps), figures and frames out."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots
from torch import Tensor

from attncore.decoder.eviction import SINKS
from attncore.decoder.eviction_read import POLICY_NAMES, PolicyLosses
from ui.figures import PALETTE, legend_below, style

__all__ = ["COLOURS", "SMOOTH", "budget_figure", "first_figure", "keep_map_figure", "loss_figure",
           "occupancy_figure", "rolling", "table"]

COLOURS = {"dense": "#999999", "window": PALETTE[5], "streaming": PALETTE[0], "h2o": PALETTE[2],
           "tova": PALETTE[3]}
SMOOTH = 32  # the per-position loss is drawn as a running mean over this many tokens


def budget_figure(pl: PolicyLosses, tag: str = "keep_budget") -> go.Figure:
    """Perplexity past each budget over dense's on the same tokens, one line per policy; dense is 1."""
    fig = go.Figure()
    bs = list(pl.budgets)
    for p in ("window", "streaming", "h2o", "tova"):
        xs = [b for b in bs if (p, b) in pl.rows]
        if xs:
            fig.add_trace(go.Scatter(x=xs, y=[pl.ratio(p, b) for b in xs], name=POLICY_NAMES[p],
                                     mode="lines+markers", line={"color": COLOURS[p]}))
    if bs:
        fig.add_trace(go.Scatter(x=bs, y=[1.0] * len(bs), name="dense (full cache)", mode="lines",
                                 line={"color": COLOURS["dense"], "dash": "dash"}))
    fig.update_xaxes(title="budget (keys a query attends to)", type="log", tickvals=bs)
    fig.update_yaxes(title="perplexity / dense's (tokens past the budget)", type="log")
    style(fig, height=340)
    legend_below(fig)
    fig.layout.meta = {"view": tag}
    return fig


def rolling(x: np.ndarray, n: int = SMOOTH) -> np.ndarray:
    """Running mean over the last ``n`` values (fewer at the start)."""
    c = np.cumsum(np.concatenate([[0.0], x.astype(np.float64)]))
    i = np.arange(1, len(x) + 1)
    lo = np.maximum(i - n, 0)
    return (c[i] - c[lo]) / (i - lo)


def loss_figure(pl: PolicyLosses, budget: int, tag: str = "keep_loss") -> go.Figure:
    """Loss of each next token (running mean over :data:`SMOOTH`) by position, dense and every policy at
    ``budget``; a dotted line where the cache first fills."""
    fig = go.Figure()
    series = [("dense", pl.dense)] + [(p, pl.rows[(p, budget)]) for p in pl.policies(budget)]
    for p, x in series:
        y = rolling(x.double().numpy())
        fig.add_trace(go.Scatter(x=np.arange(1, len(y) + 1), y=y, mode="lines", name=POLICY_NAMES[p],
                                 line={"color": COLOURS[p], "width": 1.5}))
    fig.add_vline(x=budget, line={"dash": "dot", "color": "#999999"})
    fig.update_xaxes(title="position of the predicted token")
    fig.update_yaxes(title=f"loss (nats), running mean of {SMOOTH}")
    style(fig, height=320)
    legend_below(fig)
    fig.layout.meta = {"view": tag}
    return fig


def keep_map_figure(maps: Sequence[tuple[str, Tensor]], budget: int, layer: int, marks: Sequence[int] = (),
                    tag: str = "keep_map") -> go.Figure:
    """What each policy keeps over time: per policy an (L, T) bool map (position j in the cache at step t),
    drawn as step (down) × position (across), kept cells coloured; ``marks``: punctuation positions, ticked
    above each map."""
    n = len(maps)
    fig = make_subplots(rows=1, cols=max(n, 1), subplot_titles=[POLICY_NAMES[p] for p, _ in maps],
                        horizontal_spacing=0.03, shared_yaxes=True)
    for j, (p, m) in enumerate(maps):
        z = m.T.numpy().astype(np.uint8)  # (T, L)
        fig.add_trace(go.Heatmap(z=z, colorscale=[[0, "rgba(0,0,0,0)"], [1, COLOURS[p]]], showscale=False,
                                 zmin=0, zmax=1, hovertemplate="step %{y}, position %{x}: "
                                                               "%{z}<extra></extra>"),
                      row=1, col=j + 1)
        if marks:
            fig.add_trace(go.Scatter(x=list(marks), y=[-4] * len(marks), mode="markers", showlegend=False,
                                     marker={"symbol": "line-ns-open", "color": "#555555", "size": 6},
                                     hovertemplate="punctuation at %{x}<extra></extra>"), row=1, col=j + 1)
        fig.update_xaxes(title="position" if j == 0 else None, row=1, col=j + 1)
    fig.update_yaxes(autorange="reversed")
    fig.update_yaxes(title="step (query)", row=1, col=1)
    style(fig, height=360)
    fig.layout.meta = {"view": tag, "budget": budget, "layer": layer}
    return fig


def occupancy_figure(grids: Sequence[tuple[str, list[list[float]]]], L: int, tag: str) -> go.Figure:
    """The shipped run's coarse maps: per policy a (32, 32) share of (step block, position block) cells kept
    (-1: no causal cell), steps down, positions across."""
    n = len(grids)
    fig = make_subplots(rows=1, cols=max(n, 1), subplot_titles=[POLICY_NAMES[p] for p, _ in grids],
                        horizontal_spacing=0.03, shared_yaxes=True)
    for j, (_, g) in enumerate(grids):
        z = np.array(g, dtype=np.float64)
        z[z < 0] = np.nan
        edge = np.linspace(0, L, z.shape[1] + 1)
        fig.add_trace(go.Heatmap(z=z, x=(edge[:-1] + edge[1:]) / 2, y=(edge[:-1] + edge[1:]) / 2, zmin=0,
                                 zmax=1, colorscale="Viridis", showscale=j == n - 1,
                                 colorbar={"title": "kept"},
                                 hovertemplate="steps ≈ %{y:.0f}, positions ≈ %{x:.0f}: "
                                               "%{z:.2f}<extra></extra>"),
                      row=1, col=j + 1)
    fig.update_yaxes(autorange="reversed")
    fig.update_yaxes(title="step (query)", row=1, col=1)
    fig.update_xaxes(title="position")
    style(fig, height=340)
    fig.layout.meta = {"view": tag}
    return fig


def first_figure(pl: PolicyLosses, tag: str = "keep_first") -> go.Figure:
    """Share of the full cache's slots holding one of the first :data:`SINKS` tokens, per policy and
    budget."""
    fig = go.Figure()
    bs = list(pl.budgets)
    for p in ("window", "streaming", "h2o", "tova"):
        xs = [b for b in bs if (p, b) in pl.first and not math.isnan(pl.first[(p, b)])]
        if xs:
            fig.add_trace(go.Bar(x=[str(b) for b in xs], y=[pl.first[(p, b)] for b in xs],
                                 name=POLICY_NAMES[p],
                                 marker={"color": COLOURS[p]}))
    fig.update_xaxes(title="budget (keys)", type="category")
    fig.update_yaxes(title=f"share of slots on the first {SINKS} tokens", tickformat=".1%")
    style(fig, height=300)
    legend_below(fig)
    fig.layout.meta = {"view": tag}
    return fig


def table(pl: PolicyLosses) -> pd.DataFrame:
    """One row per (budget, policy): perplexity past the budget, dense's there, the ratio, the first share."""
    rows = []
    for b in pl.budgets:
        for p in pl.policies(b):
            rows.append({"budget": b, "policy": POLICY_NAMES[p], "perplexity": pl.ppl(p, b),
                         "dense": pl.ppl("dense", b), "× dense": pl.ratio(p, b),
                         f"slots on first {SINKS}": pl.first.get((p, b), math.nan)})
    return pd.DataFrame(rows)
