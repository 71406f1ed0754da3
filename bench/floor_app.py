"""The floor bench.ui measures the app against: one small Plotly chart and nothing else.

Two pages of the same shape (``/floor_a``, ``/floor_b``), each one slider (``Points n``, for an
in-session rerun) and one line chart of ``n`` points, linked from the sidebar as the app's pages are
(``st.page_link``), so a new tab, a slider move and a page change each have the cheapest Streamlit +
Plotly answer this machine gives. ``python -m bench.ui`` serves it with
``python -m streamlit run bench/floor_app.py`` beside the app, with the app's .streamlit/config.toml.
"""

from __future__ import annotations

import math

import plotly.graph_objects as go
import streamlit as st


def _page(name: str) -> None:
    n = st.slider("Points n", 8, 64, 16, key=f"floor_{name}_n")
    x = list(range(n))
    fig = go.Figure(go.Scatter(x=x, y=[math.sin(i / 3 + (name == "b")) for i in x], mode="lines"))
    fig.update_layout(height=300, margin={"l": 40, "r": 10, "t": 10, "b": 30}, meta={"view": f"floor-{name}"})
    st.plotly_chart(fig, key=f"chart_floor_{name}")


def page_a() -> None:
    _page("a")


def page_b() -> None:
    _page("b")


PAGE_A = st.Page(page_a, title="Floor A", url_path="floor_a", default=True)
PAGE_B = st.Page(page_b, title="Floor B", url_path="floor_b")
current = st.navigation([PAGE_A, PAGE_B], position="hidden")
st.sidebar.page_link(PAGE_A, label="Floor A")
st.sidebar.page_link(PAGE_B, label="Floor B")
current.run()
