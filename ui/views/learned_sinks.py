"""A sink that forms in training (the Bigram-Backcopy task): figures and tables for the Training lab's
"A sink forms" tab and the Attention sinks page's "learned here" part.

Pure functions of a result dict (``python -m attncore.training.experiments null_attention``), of
:func:`attncore.training.null_attention.summarise`'s summary, of live run records (:mod:`ui.jobs`) or
of attention weights; no streamlit calls. Every sentence is computed from the numbers it quotes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from attncore.training.bbm import BIGRAM, COPY, SINK_THRESHOLD
from attncore.training.inspect import char_label
from attncore.training.null_attention import RUN_COLUMNS, run_rows, summarise
from attncore.training.null_verdicts import mean_se_text, table_rows, verdicts
from attncore.training.sink_stats import LAST_POINTS
from ui import figures
from ui.figures import PALETTE, Band, Curve, Panel
from ui.maps import heatmap, heatmap_grid
from ui.views.sinks import bars_with_theory
from ui.views.training_runs import stop_note

__all__ = [
    "ROLE_NAMES",
    "bos_curves_figure",
    "bos_position_figure",
    "colors",
    "gate_figure",
    "job_figure",
    "live_figure",
    "map_figure",
    "maps_grid_figure",
    "measured_text",
    "nowhere_figure",
    "position_frame",
    "runs_frame",
    "seq_labels",
    "summary_frame",
    "summary_of",
    "value_figure",
    "verdict_lines",
]

ROLE_NAMES = {0: "BOS", BIGRAM: "non-trigger (bigram)", COPY: "trigger (copy)"}


def _view(fig: go.Figure, name: str) -> go.Figure:
    fig.update_layout(meta={"view": name})
    return fig


def summary_of(runs: Sequence[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per-variant statistics over seeds (:func:`attncore.training.null_attention.summarise`)."""
    return summarise(list(runs))


def colors(summary: dict[str, Any]) -> dict[str, str]:
    """One colour per variant label, in the summary's order."""
    return {label: PALETTE[i % len(PALETTE)] for i, label in enumerate(summary)}


def _opt(v: Any) -> float:
    return float("nan") if v is None else float(v)


def bos_curves_figure(summary: dict[str, dict[str, Any]], *, view: str = "sk-curves") -> go.Figure:
    """Weight on BOS against the training step, from non-trigger positions (left) and trigger positions
    (right): per variant the mean over seeds (line) and the range of the seeds (band); dashed: 0.3."""
    col = colors(summary)
    panels = []
    for key, title in (("bos_other_curve", "from non-trigger positions (head not needed)"),
                       ("bos_trigger_curve", "from trigger positions (head must copy)")):
        curves, bands = [], []
        top = 0
        for label, s in summary.items():
            c = s["curves"][key]
            x = np.asarray(c["steps"], dtype=np.float64)
            top = max(top, int(x.max()) if x.size else 0)
            mean = np.asarray([_opt(v) for v in c["mean"]])
            n = c["n"]
            hover = (f"{label}<br>step %{{x}}<br>mean over seeds %{{y:.3f}}<extra></extra>")
            curves.append(Curve(label, x, mean, color=col[label], hover=hover, extra={"legendgroup": label}))
            if max(n, default=0) > 1:
                bands.append(Band(label, x, [_opt(v) for v in c["min"]], [_opt(v) for v in c["max"]],
                                  color=col[label]))
        curves.append(Curve(f"{SINK_THRESHOLD:g} (sink threshold)", [0, max(top, 1)], [SINK_THRESHOLD] * 2,
                            theory=True, color=PALETTE[7], extra={"legendgroup": "threshold"}))
        panels.append(Panel(title, curves=curves, bands=bands, x_title="training step",
                            y_title="weight on BOS", y_range=(-0.02, 1.02)))
    fig = figures.panel_grid(panels, cols=2, height=420)  # its legend sits above the panels
    return _view(fig, view)


def _pm_parts(summary: dict[str, dict[str, Any]], key: str) -> tuple[list[float], list[float]]:
    mean = [_opt(s[key]["mean"]) for s in summary.values()]
    se = [0.0 if s[key]["se"] is None else float(s[key]["se"]) for s in summary.values()]
    return mean, se


def nowhere_figure(summary: dict[str, dict[str, Any]]) -> go.Figure:
    """Weight each variant sends nowhere (1 − Σ w), at non-trigger and trigger positions, mean ± SE."""
    names = list(summary)
    fig = go.Figure()
    for i, (key, name) in enumerate((("nowhere_other", "non-trigger positions"),
                                     ("nowhere_trigger", "trigger positions"))):
        mean, se = _pm_parts(summary, key)
        fig.add_trace(go.Bar(x=names, y=figures.as_f32(mean), name=name, marker_color=PALETTE[i],
                             error_y={"type": "data", "array": figures.as_f32(se), "visible": True,
                                      "thickness": 1.5, "color": PALETTE[7]},
                             hovertemplate=f"%{{x}}<br>{name}<br>%{{y:.4f}} of the weight goes nowhere"
                                           "<extra></extra>"))
    fig.update_layout(barmode="group", bargap=0.25)
    fig.update_xaxes(type="category")
    fig.update_yaxes(title="1 − Σⱼ wᵢⱼ", range=[-0.05, 1.05])
    figures.style(fig, title="weight sent nowhere (mean ± SE over seeds)", height=340)
    figures.legend_below(fig)
    return _view(fig, "sk-nowhere")


def gate_figure(summary: dict[str, dict[str, Any]]) -> go.Figure | None:
    """The gated variant's mean gate at non-trigger and trigger positions (None without a gated run)."""
    gated = {k: s for k, s in summary.items()
             if s["variant"] == "gated" and s["gate_other"]["mean"] is not None}
    if not gated:
        return None
    s = next(iter(gated.values()))
    names = ["non-trigger positions", "trigger positions"]
    vals = [s["gate_other"]["mean"], s["gate_trigger"]["mean"]]
    errs = [s[k]["se"] or 0.0 for k in ("gate_other", "gate_trigger")]
    fig = bars_with_theory(names, vals, errors=errs, title=f"{s['label']}: mean gate σ(x W_g) (± SE)",
                           y_title="gate", height=340)
    fig.update_yaxes(range=[0, 1])
    return _view(fig, "sk-gate")


def value_figure(summary: dict[str, dict[str, Any]]) -> go.Figure:
    """BOS's value norm over the mean value norm per variant (mean ± SE); 1 = a typical token."""
    names = list(summary)
    mean, se = _pm_parts(summary, "value_ratio")
    fig = bars_with_theory(names, mean, errors=se, title="‖v_BOS‖ / mean ‖v_j‖ (mean ± SE over seeds)",
                           y_title="value-norm ratio", height=340)
    fig.add_hline(y=1.0, line={"dash": "dash", "color": PALETTE[7], "width": 1.5})
    return _view(fig, "sk-value")


def seq_labels(chars: str, roles: Sequence[int]) -> list[str]:
    """Axis labels of a sequence (the map numbers them): 'BOS', the characters, trigger rows marked '▸'."""
    return ["BOS" if r == 0 else f"{char_label(c)}{' ▸' if r == COPY else ''}"
            for c, r in zip(chars, roles, strict=True)]


def map_figure(weights: np.ndarray, chars: str, roles: Sequence[int], *, view: str, title: str | None = None,
               height: int = 460) -> go.Figure:
    """One head's causal attention map (T, T) on a sequence; rows of trigger positions end in '▸'."""
    labels = seq_labels(chars, roles)
    fig = heatmap(weights, title=title, x_labels=labels, y_labels=labels, zmin=0.0, zmax=1.0,
                  height=height, x_title="key", y_title="query (▸ = trigger: its head must copy)")
    # its own margins, room for the longest rotated key label ('255:␣ ▸') on top (measured in Chromium)
    fig.update_layout(margin={"l": 110, "r": 102, "t": 100, "b": 20},
                      meta={"view": view, "margins": "fixed"})
    return fig


def maps_grid_figure(maps: Sequence[tuple[str, np.ndarray]], roles: Sequence[int] | None = None) -> go.Figure:
    """One small causal map (T, T) per variant (0 above the diagonal), sharing one colour scale; with
    ``roles`` (T,), a triangle left of each map marks the trigger rows."""
    fig = heatmap_grid([w for _, w in maps], [name for name, _ in maps], cols=min(4, len(maps)),
                       max_side=64, zmin=0.0, zmax=1.0, cell_height=230)
    trig = [] if roles is None else [i for i, r in enumerate(roles) if r == COPY]
    if trig and all(np.asarray(w).shape[0] <= 64 for _, w in maps):  # one row per cell: marks line up
        fig.add_traces([go.Scatter(x=[-1.5] * len(trig), y=trig, mode="markers", showlegend=False,
                                   marker={"symbol": "triangle-right", "size": 5, "color": PALETTE[5]},
                                   hovertemplate="trigger row %{y}<extra></extra>",
                                   xaxis=f"x{figures.axis_name(i)}", yaxis=f"y{figures.axis_name(i)}")
                        for i in range(len(maps))])
    # its own margins, wide enough for the colour bar (measured in Chromium), axes without automargin
    fig.update_xaxes(automargin=False)
    fig.update_yaxes(automargin=False)
    fig.update_layout(margin={"l": 20, "r": 110, "t": 28, "b": 20},
                      meta={"view": "sk-maps", "margins": "fixed"})
    return fig


def bos_position_figure(chars: str, roles: Sequence[int],
                        series: Sequence[tuple[str, np.ndarray]]) -> go.Figure:
    """Weight on BOS at every query position, one line per model; trigger positions drawn as diamonds."""
    roles_a = np.asarray(roles)
    x = np.arange(len(roles_a))
    curves = []
    for i, (name, w) in enumerate(series):
        color = PALETTE[i % len(PALETTE)]
        curves.append(Curve(name, x[1:], np.asarray(w, dtype=np.float64)[1:], color=color,
                            extra={"mode": "lines", "legendgroup": name,
                                   "line": {"color": color, "width": 1.5}}))
        trig = np.flatnonzero(roles_a == COPY)
        curves.append(Curve(f"{name}: trigger positions", trig, np.asarray(w)[trig], color=color,
                            extra={"mode": "markers", "legendgroup": name, "showlegend": False,
                                   "marker": {"symbol": "diamond", "size": 8, "color": color}}))
    fig = figures.line_chart(curves, title="weight on BOS at each query position (◆ trigger positions)",
                             x_title="query position", y_title="weight on BOS", height=320)
    fig.update_yaxes(range=[-0.02, 1.02])
    figures.legend_below(fig)
    return _view(fig, "sk-bospos")


def position_frame(chars: str, roles: Sequence[int],
                   series: Sequence[tuple[str, np.ndarray]]) -> pd.DataFrame:
    """One row per position: the character, its role and each model's weight on BOS."""
    data: dict[str, Any] = {"position": np.arange(len(roles)), "character": [char_label(c) for c in chars],
                            "role": [ROLE_NAMES[int(r)] for r in roles]}
    for name, w in series:
        data[f"{name}: weight on BOS"] = np.asarray(w, dtype=np.float64)
    return pd.DataFrame(data)


def summary_frame(summary: dict[str, dict[str, Any]]) -> pd.DataFrame:
    """The result table: per variant, mean ± SE over seeds (text cells, as the command prints it)."""
    cols, rows = table_rows(summary)
    return pd.DataFrame(rows, columns=cols)


def runs_frame(runs: Sequence[dict[str, Any]]) -> pd.DataFrame:
    """One row per run (seed)."""
    return pd.DataFrame(run_rows(list(runs)), columns=RUN_COLUMNS)


def verdict_lines(summary: dict[str, dict[str, Any]], window: int | None) -> dict[str, list[str]]:
    """The verdicts (:func:`attncore.training.null_verdicts.verdicts`)."""
    return verdicts(summary, window)


def measured_text(summary: dict[str, dict[str, Any]]) -> str:
    """One clause per variant: seeds with a sink at the end, and the end weight that decided it (the BOS
    weight from non-trigger positions averaged over the last evaluation points, as the sink rule reads it)."""
    parts = []
    for label, s in summary.items():
        if s["bos_end"]["mean"] is None:
            parts.append(f"{label}: no finished run")
            continue
        w = mean_se_text(s["bos_end"])  # the verdicts' digits: no '0.00 ± 0.00' for a small non-zero weight
        parts.append(f"{label} {s['n_sink']}/{s['n_usable']} seeds with a sink (BOS weight {w})")
    return ("; ".join(parts) + f". A sink: non-trigger positions put more than {SINK_THRESHOLD:g} of their "
            f"weight on BOS, averaged over the last {LAST_POINTS} evaluation points; ± is one standard error "
            "over seeds.")


# ---------------------------------------------------------------------------- live runs


def _sink_head_series(probes: Sequence[dict[str, Any]]) -> tuple[list[int], list[float], list[float]]:
    """Steps, and the BOS weight from non-trigger and trigger positions of the head with the largest
    non-trigger BOS weight at each step."""
    steps, other, trig = [], [], []
    for p in probes:
        best, where = None, None
        for li, row in enumerate(p.get("bos_other") or []):
            for h, v in enumerate(row or []):
                if v is not None and (best is None or v > best):
                    best, where = v, (li, h)
        if where is None:
            continue
        t_row = (p.get("bos_trigger") or [None])[where[0]]
        steps.append(int(p["step"]))
        other.append(float(best))
        trig.append(_opt(None if t_row is None else t_row[where[1]]))
    return steps, other, trig


def live_figure(probes: Sequence[dict[str, Any]], *, title: str, total: int | None = None) -> go.Figure:
    """The running job: weight on BOS from non-trigger and trigger positions at each evaluation point so far
    (the head with the largest non-trigger weight)."""
    steps, other, trig = _sink_head_series(probes)
    curves = [Curve("from non-trigger positions", steps, other, color=PALETTE[0]),
              Curve("from trigger positions", steps, trig, color=PALETTE[1]),
              Curve(f"{SINK_THRESHOLD:g} (sink threshold)", [0, max(total or 1, 1)], [SINK_THRESHOLD] * 2,
                    theory=True, color=PALETTE[7])]
    fig = figures.line_chart(curves, title=title, x_title="step", y_title="weight on BOS", height=320)
    fig.update_yaxes(range=[-0.02, 1.02])
    if total:
        fig.update_xaxes(range=[0, total])
    figures.legend_below(fig)
    return _view(fig, "sk-live")


def job_figure(records: Sequence[dict[str, Any]]) -> go.Figure:
    """Finished live runs: weight on BOS from non-trigger positions against the step, one line per run; a
    diverged or stopped run's line ends where it did."""
    curves = []
    for i, rec in enumerate(records):
        probes = [{"step": s, **p} for s, p in zip(rec["steps"], rec["probes"], strict=True)]
        steps, other, _ = _sink_head_series(probes)
        curves.append(Curve(rec["label"] + stop_note(rec), steps, other, color=PALETTE[i % len(PALETTE)]))
    top = max((max(r["steps"], default=0) for r in records), default=1)
    curves.append(Curve(f"{SINK_THRESHOLD:g} (sink threshold)", [0, max(top, 1)], [SINK_THRESHOLD] * 2,
                        theory=True, color=PALETTE[7]))
    fig = figures.line_chart(curves, title="this job: weight on BOS from non-trigger positions",
                             x_title="step", y_title="weight on BOS", height=340)
    fig.update_yaxes(range=[-0.02, 1.02])
    figures.legend_below(fig)
    return _view(fig, "sk-job")
