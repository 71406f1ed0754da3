"""What the first render of a page sends (issue 34, "Fast"): deterministic, load-independent budgets on the
charts a default view draws and on their Plotly JSON (bench/payload.py prints every page's numbers)."""

from __future__ import annotations

import json

import pytest

from attncore.dot_products import dot_histograms
from bench.payload import Chart, _walk
from tests.chart_data import run_app
from ui.views import saturation as sat_view

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def first_render(script: str, **query: str) -> list[Chart]:
    at = run_app(script, **query)
    out: list[Chart] = []
    _walk(at._tree[0], False, out)
    return out


def test_training_lab_first_screen_is_one_lesson() -> None:
    """Was 13 charts and 252 KB (every tab drawn); now the open tab's two charts."""
    charts = first_render("pages/6_Training_lab.py")
    assert [c.view for c in charts] == ["tr-lr", "tr-lr-curves"]
    assert sum(c.bytes for c in charts) < 20_000


def test_attention_sinks_sends_section_one_only() -> None:
    """Was 9 charts and 107 KB; sections 2 and 3 are drawn when their expanders open."""
    charts = first_render("pages/4_Attention_sinks.py")
    assert [c.view for c in charts] == ["snk-map", "snk-strength", "snk-rms"]
    assert sum(c.bytes for c in charts) < 30_000


@pytest.mark.parametrize("d", [1, 64, 4096])
def test_histogram_chart_is_light(d: int) -> None:
    """Was 45 KB (four 800-point theory curves); the same curves at 240 points."""
    h = dot_histograms(d, 5_000, 60, seed=0)
    fig = sat_view.dot_histogram_figure(h, 1.0, 1.0, True)
    assert len(fig.to_json()) < 20_000
    xs = [json.loads(fig.to_json())["data"][i] for i in (1, 2)]
    assert all(len(t["x"]["bdata"]) * 3 // 4 == 4 * sat_view.THEORY_POINTS for t in xs)  # float32 each
