"""ui.margins.fit_margins: the margins a figure asks for before the browser measures it."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
import pytest

from ui import figures
from ui.maps import heatmap
from ui.margins import (
    LEGEND_GAP,
    LEGEND_PAD,
    LEGEND_ROW,
    NARROWEST_PLOT,
    X_TITLE_BAND,
    Y_BAND,
    fit_margins,
    label_px,
)


def line(names: list[str], y_title: str = "weight", x_title: str = "n") -> go.Figure:
    fig = go.Figure([go.Scatter(x=[1, 2, 3], y=[0.1, 0.5, 0.9], name=n) for n in names])
    figures.style(fig, title="t", height=380)
    fig.update_layout(xaxis_title=x_title, yaxis_title=y_title)
    return fig


def test_margins_only_grow_and_a_second_call_changes_nothing() -> None:
    fig = line(["a", "b"])
    fig.update_layout(margin={"l": 300, "r": 200, "t": 90, "b": 250})
    fit_margins(fig)
    m = fig.layout.margin
    assert (m.l, m.r, m.t, m.b) == (300, 200, 90, 250)
    small = line(["a", "b"])
    fit_margins(small)
    first = small.layout.to_plotly_json()
    fit_margins(small)
    assert small.layout.to_plotly_json() == first


def test_the_left_margin_follows_the_widest_tick_label() -> None:
    narrow = fit_margins(line(["a"]))
    wide = go.Figure(go.Scatter(x=[1, 2], y=[-12345.678, 0.001]))
    figures.style(wide)
    fit_margins(wide)
    assert narrow.layout.margin.l >= Y_BAND + label_px("0.9", 12)
    assert wide.layout.margin.l > narrow.layout.margin.l + 2 * 12 * 0.5  # "−12k"-ish labels: wider
    cats = go.Figure(go.Bar(x=[1, 2], y=["short", "a much longer category"], orientation="h"))
    figures.style(cats)
    fit_margins(cats)
    assert cats.layout.margin.l >= Y_BAND + label_px("a much longer category", 12)


def test_a_legend_below_gets_its_rows_at_the_narrowest_width_and_sits_under_the_axis() -> None:
    names = ["measured (mean ± sd over queries)", "theory", "no sink token (measured)"]
    fig = figures.legend_below(line(names))
    fit_margins(fig)
    lay = fig.layout
    # at NARROWEST_PLOT px no two of these share a row ("theory" + the third are too wide together)
    assert label_px(names[1], 11) + label_px(names[2], 11) + 2 * 44 > NARROWEST_PLOT
    rows = 3
    x_band = 16 + X_TITLE_BAND + 2  # plain labels, a one-line title (2 px for its descenders)
    assert lay.margin.b == pytest.approx(x_band + LEGEND_GAP + rows * LEGEND_ROW + LEGEND_PAD, abs=1)
    plot_h = lay.height - lay.margin.t - lay.margin.b
    assert lay.legend.y == pytest.approx(-(x_band + LEGEND_GAP) / plot_h)  # a fixed gap in pixels
    assert lay.legend.yanchor == "top"
    short = figures.legend_below(line(["a", "b", "c", "d"]))
    fit_margins(short)
    assert short.layout.margin.b < lay.margin.b  # short names share rows


def test_crowded_categories_get_a_fixed_angle_and_their_height_below() -> None:
    names = ["softmax", "softmax1", "sink logit b", "sigmoid −log n", "gated softmax"]
    fig = go.Figure(go.Bar(x=names, y=[1, 1, 1, 2, 1]))
    figures.style(fig, height=330)
    fit_margins(fig)
    assert fig.layout.xaxis.tickangle == -90
    assert fig.layout.margin.b >= label_px("sigmoid −log n", 12)
    few = go.Figure(go.Bar(x=["a", "b"], y=[1, 2]))
    figures.style(few)
    fit_margins(few)
    assert few.layout.xaxis.tickangle is None  # room enough: Plotly keeps them level


def test_colour_bars_sit_at_the_plot_edge_with_room_on_the_right() -> None:
    fig = heatmap(np.random.default_rng(0).random((8, 8)), title="w")
    fit_margins(fig)
    cb = fig.data[0].colorbar
    assert cb.x == 1.0 and cb.xanchor == "left"
    assert fig.layout.margin.r >= float(cb.thickness or 30) + 30


def test_a_figure_can_keep_its_own_margins() -> None:
    fig = line(["a", "b"])
    fig.update_layout(meta={"margins": "fixed"})
    fit_margins(fig)
    assert fig.layout.margin.l == 10 and fig.layout.margin.b == 10


def test_room_above_and_below_for_the_end_ticks_of_a_y_axis() -> None:
    # a tick on the range's last value: half its label sticks out above the plot (Plotly pushed the
    # Kernels chart's top margin from 10 to 20 px when its measured times put a decade at the top)
    fig = go.Figure(go.Scatter(x=[1, 2], y=[1e-3, 10.0]))
    figures.style(fig)
    fig.update_yaxes(type="log", dtick=1, exponentformat="power")
    fig.update_xaxes(showticklabels=False)
    fit_margins(fig)
    assert fig.layout.margin.t >= 22 and fig.layout.margin.b >= 22  # 10^k labels are ~22 px high
    inner = go.Figure(go.Scatter(x=[1, 2], y=[1, 2]))
    figures.style(inner)
    inner.update_layout(yaxis_domain=[0.2, 0.8], xaxis_showticklabels=False)
    fit_margins(inner)
    assert inner.layout.margin.t == 10  # the axis ends inside the figure: nothing sticks out
