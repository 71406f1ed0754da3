"""Saturation & gradients page, its real-model tab: figure and table builders over
:mod:`attncore.decoder.scaling` (results in, ``go.Figure`` / ``DataFrame`` out; no streamlit)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from torch import Tensor

from attncore.decoder.scaling import LEVELS, LogitSpread, ScaledRun
from ui import figures
from ui.figures import PALETTE, Curve, Marker, Panel
from ui.views.decoder import head_labels
from ui.views.sinks import labelled_heatmap

__all__ = ["HEAD_STATS", "SPREAD_SIGMAS", "heads_figure", "scale_figure", "scale_frame", "spread_figure",
           "spread_frame"]

# The per-head statistics a user can map (attncore.decoder.scaling.row_statistics' names).
HEAD_STATS: dict[str, str] = {
    "std": "std of q·k/√d",
    "gap": "mean gap, largest − second logit",
    "above90": f"share of rows with max weight > {LEVELS[0]:g}",
    "above99": f"share of rows with max weight > {LEVELS[1]:g}",
    "jac": "mean ‖J‖_F of the rows",
}
# The sigmas the Gaussian prediction is drawn at (the real heads' spread lies inside: SmolLM2's widest ~9).
SPREAD_SIGMAS: tuple[float, ...] = (0.0, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0, 12.0)
MEASURED_C, THEORY_C = PALETTE[0], PALETTE[1]


def spread_figure(sp: LogitSpread, sigmas: Sequence[float], gauss: dict[str, Tensor]) -> go.Figure:
    """Each head's logit std (x) against its rows' mean ‖J‖_F (y), beside i.i.d. N(0, σ²) rows of the same
    length (dashed), with the seed's law σ = 1 marked."""
    N, H = sp["std"].shape
    who = [f"layer {n}, head {h}" for n in range(N) for h in range(H)]
    heads = Curve(f"SmolLM2 heads ({N * H})", sp["std"].flatten().numpy(), sp["jac"].flatten().numpy(),
                  color=MEASURED_C,
                  extra={"mode": "markers", "marker": {"size": 6, "color": MEASURED_C, "opacity": 0.7},
                         "text": who,
                         "hovertemplate": "%{text}<br>std %{x:.3f}<br>‖J‖ %{y:.3f}<extra></extra>"})
    law = Curve("i.i.d. N(0, σ²) logits, same rows", np.asarray(sigmas), gauss["jac"].numpy(), theory=True,
                color=THEORY_C)
    fig = figures.line_chart([heads, law], x_title="std σ of the head's scaled logits q·k/√d",
                             y_title="mean ‖J‖_F of its rows", height=380)
    figures.mark_x(fig, 1.0, "seed's law σ = 1")
    figures.legend_below(fig)
    fig.update_layout(meta={"view": "sat-real-spread"})
    return fig


def heads_figure(sp: LogitSpread, stat: str, kv_heads: int) -> go.Figure:
    """Layers x heads map of one statistic of :data:`HEAD_STATS`."""
    z = sp[stat].numpy()  # (N, H)
    N, H = z.shape
    share = stat.startswith("above")
    fig = labelled_heatmap(z, head_labels(H, kv_heads), [str(n) for n in range(N)],
                           x_title="head · key/value group", y_title="layer", value_name=HEAD_STATS[stat],
                           zmin=0.0, zmax=1.0 if share else None, text_format=None,
                           height=max(320, 16 * N + 80))
    fig.update_layout(meta={"view": "sat-real-heads"})
    return fig


def spread_frame(sp: LogitSpread) -> pd.DataFrame:
    """One row per (layer, head): every statistic of :func:`attncore.decoder.scaling.row_statistics`."""
    N, H = sp["std"].shape
    out = {"layer": np.repeat(np.arange(N), H), "head": np.tile(np.arange(H), N)}
    out.update({name: v.flatten().numpy() for name, v in sp.stats.items()})
    return pd.DataFrame(out)


def scale_figure(runs: Sequence[ScaledRun], factors: Sequence[float], gauss: dict[str, Tensor]) -> go.Figure:
    """Perplexity, mean entropy, sink-head share and saturated rows against the factor c (log axis), the
    Gaussian prediction (i.i.d. N(0, c²) rows) dashed where one exists."""
    c = np.asarray([r.factor for r in runs])
    fc = np.asarray(factors)

    def measured(name: str, y: Sequence[float]) -> Curve:
        return Curve(name, c, np.asarray(y), color=MEASURED_C)

    def law(name: str) -> Curve:
        return Curve("i.i.d. N(0, c²) logits, same rows", fc, gauss[name].numpy(), theory=True,
                     color=THEORY_C)

    mark = (Marker(8.0, "no 1/√d"), Marker(1.0, "trained"))
    panels = [
        Panel("perplexity", (measured("SmolLM2", [r.perplexity for r in runs]),), log_y=True, log_x=True,
              markers=mark),
        Panel("mean entropy of the rows (nats)", (measured("SmolLM2", [r.mean_entropy for r in runs]),
                                                  law("entropy")), log_x=True, markers=mark),
        Panel("share of sink heads", (measured("SmolLM2", [r.sink_share for r in runs]),), log_x=True,
              y_range=(0.0, 1.0), markers=mark),
        Panel(f"share of rows with max weight > {LEVELS[0]:g}",
              (measured("SmolLM2", [r.saturated90 for r in runs]), law("above90")), log_x=True,
              y_range=(0.0, 1.0), markers=mark),
    ]
    for p in panels:
        p.x_title = "c (every logit times c)"
    fig = figures.panel_grid(panels, cols=2, height=560)
    fig.update_layout(meta={"view": "sat-real-scale"})
    return fig


def scale_frame(runs: Sequence[ScaledRun]) -> pd.DataFrame:
    """One row per factor: perplexity, loss, mean entropy, sink-head share, saturated rows, seconds."""
    return pd.DataFrame({
        "c": [r.factor for r in runs],
        "perplexity": [r.perplexity for r in runs],
        "loss (nats/token)": [r.loss for r in runs],
        "mean entropy (nats)": [r.mean_entropy for r in runs],
        "sink heads": [r.sink_share for r in runs],
        f"rows > {LEVELS[0]:g}": [r.saturated90 for r in runs],
        f"rows > {LEVELS[1]:g}": [r.saturated99 for r in runs],
        "seconds": [r.seconds for r in runs],
    })
