"""The sink experiment over settings (Training lab, tab "A sink forms"): the grid of cells (variant x
setting) as a clickable map, a table, and one cell's curves over its seeds.

Pure functions of :class:`attncore.training.sink_verdicts.Cell` tuples; no streamlit calls. The numbers
drawn are the cells' own (the rules of :mod:`attncore.training.sink_verdicts`).
"""

from __future__ import annotations

import html
from collections.abc import Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from attncore.training.bbm import SINK_THRESHOLD
from attncore.training.sink_verdicts import Cell, Setting, interval_text, num_text
from ui import figures
from ui.figures import PALETTE, SEQUENTIAL, Curve
from ui.views import dash_missing, right_aligned
from ui.views.realtext import pick_points

__all__ = ["axes", "cell_curves_figure", "cell_text", "grid_figure", "grid_frame", "grid_table",
           "setting_label"]


def axes(cells: Sequence[Cell]) -> tuple[list[str], list[Setting]]:
    """The map's rows (variant labels, in the cells' order) and columns (the grid's settings sorted, then
    the shipped run's)."""
    rows = list(dict.fromkeys(c.label for c in cells))
    shipped = {c.setting for c in cells if c.source == "shipped"}
    cols = sorted({c.setting for c in cells}, key=lambda s: (s in shipped, s))
    return rows, cols


def setting_label(s: Setting, shipped: bool = False) -> str:
    """'rotary<br>lr 0.001<br>1,200 steps' (a column label), '(shipped)' under the shipped run's."""
    return f"{s.positions}<br>lr {s.lr:g}<br>{s.steps:,} steps" + ("<br>(shipped)" if shipped else "")


def _short(x: float) -> str:
    """'0.42', or '3e-04' where two decimals would print a non-zero weight as 0.00 (a map cell is narrow)."""
    return num_text(x) if x == 0 or abs(x) >= 0.005 else f"{x:.0e}"


def cell_text(c: Cell) -> str:
    """What a map cell prints: the end weight, ± the interval's half-width, the sinks, the seeds run."""
    if not c.seeds:
        return f"not run<br>0 of {c.planned}"
    if c.status in ("diverged", "not learned"):
        return f"{c.status}<br>{c.n_run} of {c.planned}"
    m = c.end["mean"]
    head = _short(m) + (f" ± {_short(c.end['half'])}" if c.end.get("half") is not None else "")
    tail = f"<br>{c.n_sink}/{c.n_usable} sink" + (f"<br>{c.n_transient} transient" if c.n_transient else "")
    seeds = f"<br>{c.n_run} of {c.planned} seeds" if c.n_run < c.planned else ""
    return head + tail + seeds


def grid_figure(cells: Sequence[Cell], selected: tuple[str, Setting] | None = None) -> go.Figure:
    """Variant (rows) x setting (columns): colour = the end weight on BOS from non-trigger positions (mean
    over the cell's seeds; blank where not run, not learned or diverged), text = that mean ± the 95% t
    interval's half-width, the seeds with a sink and the seeds run. Clicking a cell picks it
    (``customdata`` = row, column); ``selected`` is outlined. ``layout.meta``: ``rows``, ``cols`` (setting
    keys) and ``z`` (the means, None where blank)."""
    rows, cols = axes(cells)
    by = {(c.label, c.setting): c for c in cells}
    shipped_cols = {c.setting for c in cells if c.source == "shipped"}
    x = [setting_label(s, s in shipped_cols) for s in cols]
    y = [html.escape(r) for r in rows]
    z = np.full((len(rows), len(cols)), np.nan)
    text = [["" for _ in cols] for _ in rows]
    hover = [["" for _ in cols] for _ in rows]
    for i, r in enumerate(rows):
        for j, s in enumerate(cols):
            c = by.get((r, s))
            if c is None:
                text[i][j] = "—"
                hover[i][j] = f"{html.escape(r)} was not trained at {s.text()}"
                continue
            if c.learned and c.end.get("mean") is not None:
                z[i, j] = c.end["mean"]
            text[i][j] = cell_text(c)
            hover[i][j] = (f"{html.escape(r)} · {s.text()}<br>end weight {interval_text(c.end)}<br>"
                           f"{html.escape(c.sinks_text()) if c.n_usable else c.status}; "
                           f"{c.seeds_text()}<br>click: this cell's curves")
    # blanks as None, not NaN: a chart's numbers are all finite (tests/chart_data.all_data)
    zs = [[None if np.isnan(v) else float(v) for v in row] for row in z]
    fig = go.Figure(go.Heatmap(z=zs, x=x, y=y, text=text, texttemplate="%{text}", textfont={"size": 11},
                               customdata=hover,
                               hovertemplate="%{customdata}<extra></extra>", colorscale=SEQUENTIAL, zmin=0.0,
                               zmax=1.0, hoverongaps=True, xgap=2, ygap=2,
                               colorbar={"thickness": 12,
                                         "title": {"text": "end weight on BOS", "side": "right"}}))
    px, py, cd = [], [], []
    for i in range(len(rows)):
        for j in range(len(cols)):
            if (rows[i], cols[j]) in by:
                px.append(x[j])
                py.append(y[i])
                cd.append((i, j))
    fig.add_trace(pick_points(px, py, np.array(cd, dtype=np.int64).reshape(-1, 2),
                              "%{y} · column %{customdata[1]}<br>click: this cell's curves<extra></extra>"))
    if selected is not None and selected[0] in rows and selected[1] in cols:
        i, j = rows.index(selected[0]), cols.index(selected[1])
        fig.add_shape(type="rect", x0=j - 0.5, x1=j + 0.5, y0=i - 0.5, y1=i + 0.5,
                      line={"color": PALETTE[5], "width": 3})
    fig.update_xaxes(side="bottom", showgrid=False, zeroline=False, tickangle=0)
    fig.update_yaxes(autorange="reversed", showgrid=False, zeroline=False)
    figures.style(fig, title="End weight on BOS from non-trigger positions, per variant and setting",
                  height=int(170 + 52 * len(rows)))
    fig.update_layout(meta={"view": "sk-grid", "rows": rows, "cols": [s.key() for s in cols],
                            "z": zs})
    return fig


def cell_curves_figure(c: Cell) -> go.Figure:
    """One cell's BOS weight from non-trigger positions against the step, one line per seed; dashed: the
    sink threshold; the shaded span: the evaluation points the end weight averages."""
    curves = []
    top = 1
    for k, f in enumerate(c.per_seed):
        x = np.asarray(f["steps"], dtype=np.float64)
        y = np.asarray([np.nan if v is None else v for v in f["curve"]], dtype=np.float64)
        top = max(top, int(x.max()) if x.size else 1)
        state = ("diverged" if f["diverged_at"] is not None else "sink" if f["sink"] else
                 "transient sink" if f["transient"] else "no sink")
        end = "—" if f["bos_end"] is None else f"{f['bos_end']:.3f}"
        curves.append(Curve(f"seed {f['seed']}: {state}, end {end}", x, y, color=PALETTE[k % len(PALETTE)],
                            hover=f"seed {f['seed']}<br>step %{{x}}<br>weight on BOS %{{y:.3f}}"
                                  "<extra></extra>"))
    curves.append(Curve(f"{SINK_THRESHOLD:g} (sink threshold)", [0, top], [SINK_THRESHOLD] * 2, theory=True,
                        color=PALETTE[7]))
    title = f"{html.escape(c.label)} · {c.setting.text()} ({c.seeds_text()})"
    # a short y title: rotated, 'weight on BOS (non-trigger)' ran past the plot into the chart's title
    fig = figures.line_chart(curves, title=title, x_title="training step", y_title="weight on BOS",
                             height=360)
    if c.end_steps:
        fig.add_vrect(x0=c.end_steps[0], x1=c.end_steps[-1], fillcolor=PALETTE[7], opacity=0.15, line_width=0)
    fig.update_yaxes(range=[-0.02, 1.02])
    figures.legend_below(fig)
    fig.update_layout(meta={"view": "sk-grid-cell", "label": c.label, "setting": c.setting.key(),
                            "seeds": [f["seed"] for f in c.per_seed]})
    return fig


def grid_frame(cells: Sequence[Cell]) -> pd.DataFrame:
    """One row per cell: setting, seeds run of planned, learned, end weight mean, the 95% t interval,
    seeds with a sink, transient sinks, and the cell's status."""
    rows = []
    for c in cells:
        e = c.end
        rows.append({"variant": c.label, "positions": c.setting.positions, "lr": c.setting.lr,
                     "steps": c.setting.steps, "source": c.source, "seeds run": c.n_run,
                     "seeds planned": c.planned,
                     "learned": f"{c.n_learned}/{c.n_usable}" if c.n_usable else "—",
                     "end weight (mean)": e.get("mean"), "95% t half-width": e.get("half"),
                     "interval low": e.get("lo"), "interval high": e.get("hi"),
                     "seeds with a sink": c.n_sink if c.n_usable else None,
                     "transient sinks": c.n_transient if c.n_usable else None, "status": c.status})
    return pd.DataFrame(rows)


GRID_FORMATS: dict[str, str] = {"end weight (mean)": "{:.4f}", "95% t half-width": "{:.4f}",
                                "interval low": "{:.4f}", "interval high": "{:.4f}",
                                "seeds with a sink": "{:.0f}", "transient sinks": "{:.0f}"}
GRID_CONFIG = right_aligned(GRID_FORMATS)


def grid_table(cells: Sequence[Cell]) -> pd.DataFrame:
    """:func:`grid_frame` as the page shows it (with :data:`GRID_CONFIG`): a number a cell does not have
    reads "—", never "None"; its status column says why (not run, diverged, not learned)."""
    return dash_missing(grid_frame(cells), GRID_FORMATS)
