"""AppTest, issue 11 across pages: what every page draws the same way (metric chips, presenter mode)."""

from __future__ import annotations

import pytest
from streamlit.proto.Metric_pb2 import Metric as MetricProto

from tests.chart_data import figures, no_errors, run_app
from tests.plot_area import assert_plot_areas

VIEWS = [
    ("pages/1_Heatmaps.py", {}),
    ("pages/2_Entropy_vs_length.py", {"ent_lo": "6", "ent_hi": "10"}),
    ("pages/3_Saturation_and_gradients.py", {"sat_tab": "Saturation"}),
    ("pages/4_Attention_sinks.py", {}),
]


@pytest.mark.parametrize(("page", "query"), VIEWS, ids=[p for p, _ in VIEWS])
def test_theory_chips_carry_no_arrow(page: str, query: dict[str, str]) -> None:
    """A 'theory 1.000' delta is a reference value, not a change: no up/down arrow, grey."""
    at = run_app(page, **query)
    no_errors(at)
    with_delta = [m for m in at.metric if m.proto.delta]
    assert with_delta, "the page shows theory beside its metrics"
    for m in with_delta:
        assert m.proto.direction == MetricProto.MetricDirection.NONE, (m.label, m.proto.delta)
        assert m.proto.color == MetricProto.MetricColor.GRAY, m.label


def _layout_sizes(fig: dict) -> tuple[list[float], list[float], list[float]]:
    """Every tick font size, legend font size and annotation font size a figure's JSON sets."""
    lay = fig["layout"]
    ticks = [lay[k].get("tickfont", {}).get("size", lay.get("font", {}).get("size", 0))
             for k in lay if k.startswith(("xaxis", "yaxis"))]
    legend = [lay.get("legend", {}).get("font", {}).get("size", lay.get("font", {}).get("size", 0))]
    notes = [a.get("font", {}).get("size", lay.get("font", {}).get("size", 0)) for a in lay.get("annotations", [])]
    return ticks, legend, notes


@pytest.mark.parametrize(("page", "query"), VIEWS, ids=[p for p, _ in VIEWS])
def test_presenter_mode_enlarges_every_chart(page: str, query: dict[str, str]) -> None:
    at = run_app(page, present="1", **query)
    no_errors(at)
    assert at.session_state["present"] is True and at.toggle(key="present").value is True
    figs = figures(at)
    assert figs
    assert_plot_areas(figs, f"{page}, presenter mode")  # issue 41: a legend never eats the plot
    for f in figs:
        lay = f["layout"]
        assert lay["meta"]["present"] is True, lay.get("meta")
        assert lay["font"]["size"] >= 16
        ticks, legend, notes = _layout_sizes(f)
        assert ticks and min(ticks) >= 16, (lay["meta"], ticks)
        assert min(legend) >= 14 and (not notes or min(notes) >= 16), (lay["meta"], legend, notes)
        normal = [_scale_key("Viridis"), _scale_key("RdBu_r")]
        scales = [tr["colorscale"] for tr in f["data"] if tr.get("type") == "heatmap" and "colorscale" in tr]
        scales += [lay["coloraxis"]["colorscale"]] if "colorscale" in lay.get("coloraxis", {}) else []
        for sc in scales:  # high-contrast scales replace the normal ones
            assert _scale_key(sc) not in normal, lay["meta"]
    # Off by default: the same page without the flag keeps the normal sizes and scales.
    plain = run_app(page, **query)
    assert not any((f["layout"].get("meta") or {}).get("present") for f in figures(plain))


def test_presenter_mode_lives_in_the_url() -> None:
    at = run_app("pages/1_Heatmaps.py")
    at.toggle(key="present").set_value(True).run()
    no_errors(at)
    assert at.query_params["present"] == "1"
    assert all(f["layout"]["meta"]["present"] for f in figures(at))


def test_present_restyles_a_figure_without_changing_its_data() -> None:
    import numpy as np

    from ui import figures as F
    from ui.maps import heatmap

    fig = heatmap(np.eye(3), diverging=True)
    before = fig.data[0].z.copy()
    F.present(fig)
    assert fig.layout.font.size == F.PRESENT_TICK_PX and fig.layout.xaxis.tickfont.size == 16
    assert fig.data[0].colorscale == go_scale(F.PRESENT_DIVERGING)
    np.testing.assert_array_equal(fig.data[0].z, before)


def _scale_key(scale) -> tuple:
    """A colour scale (name or list of [stop, colour]) as comparable tuples."""
    return tuple(tuple(x) for x in go_scale(scale))


def go_scale(name):
    import plotly.graph_objects as go

    return go.Heatmap(colorscale=name).colorscale


def test_presenter_mode_draws_tables_as_html_tables() -> None:
    """Issue 34: ``st.dataframe`` draws on a canvas at the theme's 14 px, which page CSS cannot reach, so in
    presenter mode ``ui.widgets.table`` draws the same numbers as an HTML table (``st.table``, 16.8 px)."""
    from attncore.gradients import parse_scores, temperature_rows
    from ui.text import plain

    query = {"sat_tab": "Saturation"}
    normal = run_app("pages/3_Saturation_and_gradients.py", **query)
    no_errors(normal)
    (grid,) = normal.dataframe
    at = run_app("pages/3_Saturation_and_gradients.py", present="1", **query)
    no_errors(at)
    assert not at.dataframe, "presenter mode draws no canvas grid"
    # st.table reads cells and headers as Markdown: the helper escapes them (invisible backslashes)
    (shown,) = [t.value for t in at.table if list(t.value.columns) == [plain(c) for c in grid.value.columns]]
    rows = temperature_rows(parse_scores(at.session_state["sat_scores"]), at.session_state["sat_dex"])
    p_cols = [c for c in shown.columns if c.startswith("p")]
    assert shown[p_cols].to_numpy().tolist() == [[plain(f"{w:.4f}") for w in r] for r in rows.weights.numpy()]


def test_presented_frame_keeps_what_the_grid_shows() -> None:
    """The text ``st.table`` gets: the column config's labels and printf formats, a Styler's own formats,
    blank missing cells, every text escaped (``st.table`` reads cells as Markdown), numbers aligned right."""
    import numpy as np
    import pandas as pd
    import streamlit as st

    from ui.text import plain
    from ui.widgets import presented_frame

    df = pd.DataFrame({"name": ["**bold**", "1. item"], "x": [0.123456, np.nan], "n": [3, 12000],
                       "ok": [True, False], "t": ["1.5", "—"]})
    frame, right = presented_frame(df, {"x": st.column_config.NumberColumn("x (nats)", format="%.2f"),
                                        "t": st.column_config.TextColumn("time", alignment="right")})
    assert list(frame.columns) == ["name", "x (nats)", "n", "ok", "time"]
    assert frame["name"].tolist() == [plain("**bold**"), plain("1. item")] != df["name"].tolist()
    assert frame["x (nats)"].tolist() == [plain("0.12"), ""]
    assert frame["n"].tolist() == ["3", "12000"] and frame["ok"].tolist() == ["yes", "no"]
    assert right == ["x (nats)", "n", "time"]
    styled = df[["x", "n"]].style.format(na_rep="one seed", precision=3, subset=pd.IndexSlice[[1], ["x"]])
    frame, _ = presented_frame(styled)
    assert frame["x"].tolist() == [plain("0.1235"), "one seed"]  # unformatted cells: up to 4 decimals, as the grid
