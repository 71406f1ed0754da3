"""The league of normalisers and gates and the weight-decay sweep (Training lab, section "Which fix removes
the sink?"): tables, bar charts ordered by sink rate, one cell's curves, and the sentences about them.

Pure functions of the league's table cells (:func:`attncore.training.league.league_table`), the sweep's
(:func:`attncore.training.wd_sweep.wd_table`), the cells' curves
(:func:`attncore.training.league_verdict.cell_curves`) and the verdicts
(:class:`attncore.training.league_verdict.OrderingVerdict`); no streamlit calls. Every number drawn or
written is one of those.
"""

from __future__ import annotations

import html
from typing import Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from attncore.citations import REFERENCES, quoted
from attncore.training import VARIANT_INFO
from attncore.training.bbm import SINK_THRESHOLD
from attncore.training.league_verdict import OrderingVerdict, ReferenceOrdering
from ui import figures
from ui.figures import PALETTE, Curve

__all__ = ["MEASURES", "cells_frame", "curves_figure", "curves_text", "gu_setting_text", "league_figure",
           "reference_text", "status_text", "variant_name", "wd_figure", "wd_frame", "wd_text"]

MEASURES: dict[str, str] = {
    "sink_rate": "sink rate (ε = 0.3)",
    "nowhere_other": "weight sent nowhere",
    "max_activation": "largest activation |x|",
    "kurtosis": "kurtosis of the residual stream",
    "loss": "held-out task loss",
}
"""The measures a chart can show, by the league table's key."""


def variant_name(variant: str) -> str:
    """The league's variant as the page names it (``standard`` -> ``softmax``)."""
    names = {"standard": "softmax", "sink_logit": "sink logit b₀=0 (gpt-oss form)"}
    if variant in names:
        return names[variant]
    return str((VARIANT_INFO.get(variant) or {}).get("label") or variant)


def _num(x: float | None, digits: int = 3) -> str:
    if x is None:
        return "—"
    return f"{x:.{digits}g}" if abs(x) >= 1000 or (x != 0 and abs(x) < 1e-3) else f"{x:.{digits}f}"


def _interval(s: dict[str, Any]) -> str:
    """'0.375 ± 0.120 (3 seeds)', '0.375 (1 seed)', '—'."""
    if s.get("mean") is None:
        return "—"
    half = "" if s.get("half") is None else f" ± {_num(s['half'])}"
    n = s["n"]
    return f"{_num(s['mean'])}{half} ({n} seed{'s' if n != 1 else ''})"


def cells_frame(cells: list[dict[str, Any]]) -> pd.DataFrame:
    """One row per cell, in the given order (most sink first): the variant, the learning rate, the seeds, and
    each measure's mean ± the 95% t interval's half-width over the seeds."""
    rows = []
    for rank, c in enumerate(cells, start=1):
        row: dict[str, Any] = {"rank": rank, "variant": variant_name(c["variant"]), "lr": f"{c['lr']:g}",
                               "seeds": ", ".join(str(s) for s in c["seeds"]) or "—"}
        for key, name in MEASURES.items():
            row[name] = _interval(c[key])
        rows.append(row)
    return pd.DataFrame(rows)


def league_figure(cells: list[dict[str, Any]], measure: str = "sink_rate") -> go.Figure:
    """Horizontal bars: each cell's mean ``measure`` over its seeds with the 95% t interval (none from one
    seed), in the given order (most sink first, at the top). ``layout.meta``: ``variants``, ``means``,
    ``halves``."""
    names = [variant_name(c["variant"]) for c in cells]
    means = [c[measure]["mean"] for c in cells]
    halves = [c[measure]["half"] for c in cells]
    ns = [c[measure]["n"] for c in cells]
    # horizontal bars: the variants' names are long, and rank 1 (most sink) at the top
    fig = go.Figure(go.Bar(
        y=[html.escape(n) for n in names], x=[0.0 if m is None else float(m) for m in means], orientation="h",
        error_x={"type": "data", "array": [0.0 if h is None else float(h) for h in halves], "visible": True},
        marker_color=PALETTE[0], customdata=ns,
        hovertemplate="%{y}<br>mean %{x:.4g} over %{customdata} seed(s)<extra></extra>"))
    fig.update_yaxes(autorange="reversed")
    if measure == "sink_rate":
        fig.update_xaxes(range=[0, 1.05])
    lr = cells[0]["lr"] if cells else None
    title = f"{MEASURES[measure]} per variant" + (f", lr {lr:g}" if lr is not None else "")
    figures.style(fig, title=title, height=110 + 34 * len(cells))
    fig.update_layout(xaxis_title=MEASURES[measure] + " (mean, 95% t interval over seeds)",
                      meta={"view": "league", "measure": measure, "variants": [c["variant"] for c in cells],
                            "means": means, "halves": halves})
    return fig


def curves_figure(curves: list[dict[str, Any]], variant: str, lr: float) -> go.Figure:
    """One cell's weight on BOS from non-trigger positions (mean over the heads) against the step, one line
    per seed, the sink threshold dashed. ``layout.meta``: ``seeds`` and ``bos`` (per seed, the series)."""
    lines = []
    top = 1
    for k, c in enumerate(curves):
        x = np.asarray(c["steps"], dtype=np.float64)
        y = np.asarray([np.nan if v is None else v for v in c["bos"]], dtype=np.float64)
        top = max(top, int(x.max()) if x.size else 1)
        lines.append(Curve(f"seed {c['seed']}: sink rate {_num(c['sink_rate'])}", x, y,
                           color=PALETTE[k % len(PALETTE)],
                           hover=f"seed {c['seed']}<br>step %{{x}}<br>mean weight on BOS %{{y:.3f}}"
                                 "<extra></extra>"))
    lines.append(Curve(f"{SINK_THRESHOLD:g} (a head's sink threshold)", [0, top], [SINK_THRESHOLD] * 2,
                       theory=True, color=PALETTE[7]))
    fig = figures.line_chart(lines, title=f"{html.escape(variant_name(variant))} · lr {lr:g}",
                             x_title="training step", y_title="weight on BOS (head mean)", height=340)
    fig.update_yaxes(range=[-0.02, 1.02])
    fig.update_layout(meta={"view": "league_curves", "seeds": [c["seed"] for c in curves],
                            "bos": [c["bos"] for c in curves]})
    return fig


def curves_text(curves: list[dict[str, Any]], variant: str, lr: float) -> str:
    """Per seed: the run's sink rate and its last mean weight on BOS and held-out loss."""
    if not curves:
        return f"{variant_name(variant)} at lr {lr:g}: no run in the file yet."
    parts = []
    for c in curves:
        bos = next((v for v in reversed(c["bos"]) if v is not None), None)
        loss = next((v for v in reversed(c["loss"]) if v is not None), None)
        parts.append(f"seed {c['seed']}: sink rate {_num(c['sink_rate'])}, last mean weight on BOS "
                     f"{_num(bos)}, held-out loss {_num(loss)}")
    return f"{variant_name(variant)} at lr {lr:g}: " + "; ".join(parts) + "."


def status_text(file: str, n_runs: int, planned: int, header: dict[str, Any]) -> str:
    """How many of the league's runs the shipped file holds, and what made it (command, corpus by name and
    hash, machine, commit)."""
    if not file:
        return "No league file ships with this app."
    corpus = header.get("corpus") or {}
    state = ("complete" if n_runs >= planned
             else "the league was still running when this file was shipped; cells with fewer seeds fill in "
                  "as it resumes")
    return (f"{n_runs} of the league's {planned} runs are in ({state}). Made by "
            f"`{header.get('command', '?')}` on {header.get('machine', '?')} from commit "
            f"{str(header.get('git_commit') or '?')[:10]}, corpus {corpus.get('name', '?')} "
            f"(SHA-256 {str(corpus.get('sha256') or '?')[:12]}…).")


def reference_text(ref: ReferenceOrdering) -> str:
    """The reference ordering with its paper, table, scale and what was checked."""
    r = REFERENCES[ref.paper]
    order = " > ".join(variant_name(v) for v in ref.order)
    q = quoted("zuhri2025.softpick0")
    return (f"{r.short}, {ref.where} ({ref.scale}), most sink first: {order}. This is {ref.note}: their "
            f"abstract says {q.label} ({q.model}).")


def verdict_lines(verdicts: list[OrderingVerdict]) -> list[str]:
    """One sentence per learning rate (the verdicts' own)."""
    return [v.text for v in verdicts]


def wd_frame(cells: list[dict[str, Any]]) -> pd.DataFrame:
    """One row per weight decay: the seeds and each measure's mean ± the 95% t interval."""
    rows = []
    for c in cells:
        row: dict[str, Any] = {"weight decay": f"{c['weight_decay']:g}", "lr": f"{c['lr']:g}",
                               "seeds": ", ".join(str(s) for s in c["seeds"]) or "—"}
        for key, name in MEASURES.items():
            row[name] = _interval(c[key])
        rows.append(row)
    return pd.DataFrame(rows)


def wd_figure(cells: list[dict[str, Any]], measure: str = "sink_rate") -> go.Figure:
    """``measure`` against the weight decay (categories, ascending), mean over seeds with the 95% t interval.
    ``layout.meta``: ``weight_decays``, ``means``, ``halves``."""
    wds = [c["weight_decay"] for c in cells]
    means = [c[measure]["mean"] for c in cells]
    halves = [c[measure]["half"] for c in cells]
    curve = Curve("softmax", [f"{w:g}" for w in wds], [np.nan if m is None else m for m in means],
                  err=[0.0 if h is None else h for h in halves], color=PALETTE[0],
                  hover="weight decay %{x}<br>mean %{y:.4g}<extra></extra>")
    fig = figures.line_chart([curve], title=f"{MEASURES[measure]} against weight decay (softmax)",
                             x_title="weight decay", y_title=MEASURES[measure], height=340)
    fig.update_xaxes(type="category")
    fig.update_layout(meta={"view": "wd_sweep", "measure": measure, "weight_decays": wds, "means": means,
                            "halves": halves})
    return fig


def wd_text(cells: list[dict[str, Any]], planned: int) -> str:
    """The sweep's sink rate per weight decay, and how many runs are in."""
    n = sum(len(c["seeds"]) for c in cells)
    if not cells:
        return f"The weight-decay sweep: 0 of its {planned} runs are in yet."
    per = "; ".join(f"weight decay {c['weight_decay']:g}: {_interval(c['sink_rate'])}" for c in cells)
    return f"Sink rate at ε = {SINK_THRESHOLD:g} ({n} of the sweep's {planned} runs in): {per}."


def gu_setting_text(base: dict[str, Any]) -> str:
    """Gu et al.'s weight-decay setting, from the pinned entries, beside ours (``base``: the sweep's model
    settings); their Table 2's numbers are not shown."""
    m, t = quoted("gu2024.decay.model"), quoted("gu2024.tokens")
    return (f"{m.reference.short} ({m.reference.venue}) swept weight decay on {m.model} ({m.printed} "
            f"parameters; {m.setting}), trained on {t.printed} {t.label}. Their Table 2's sink rates could "
            "not be read from the paper's text here, so they are not shown. Ours: Bigram-Backcopy, "
            f"{base['n_layer']} layers x {base['n_head']} heads, width {base['d_model']}, {base['steps']:,} "
            f"steps of batch {base['batch']}.")
