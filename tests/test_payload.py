"""What the first render of a page sends (issue 34, "Fast"): deterministic, load-independent budgets on the
charts a default view draws and on their Plotly JSON, and on what a new tab must lay out with its first chart
besides them: data grids, HTML tables, formulas and text (bench/payload.py prints every page's numbers)."""

from __future__ import annotations

import json

import pytest

from attncore.dot_products import dot_histograms
from bench.payload import Chart, PagePayload
from bench.payload import first_render as sent
from tests.chart_data import figures, run_app
from tests.plot_area import assert_plot_areas
from ui.nav import PAGES
from ui.views import saturation as sat_view

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def first_render(script: str, **query: str) -> list[Chart]:
    return sent(run_app(script, **query)).charts


# Per page's default view: at most (charts, KB of Plotly JSON, data grids, HTML tables, KB of table data,
# formulas, KB of text). A data grid makes the browser load and run about 1.5 MB of grid JavaScript beside
# Plotly's; every cell of an HTML table is a Markdown block; formulas are typeset by KaTeX. Before issue 34's
# first-render work (commit fe367d2) the pages sent: Heatmaps 3 charts (37 KB); Entropy vs length a grid,
# 2 formulas, 5.2 KB of text; Attention sinks 4 formulas; Kernels a claims table, 2 formulas, 6.8 KB of text;
# Training lab a grid; every other page what its budget allows.
BUDGETS: dict[str, tuple[int, int, int, int, int, int, float]] = {
    "Tour": (1, 15, 0, 0, 0, 1, 1.0),
    "Heatmaps": (2, 25, 0, 0, 0, 1, 1.5),
    "Entropy vs length": (1, 45, 0, 0, 0, 1, 2.0),
    "Saturation & gradients": (2, 32, 0, 0, 0, 1, 2.0),
    "Attention sinks": (3, 30, 0, 0, 0, 1, 1.0),
    "Kernels": (2, 25, 1, 0, 0, 1, 4.0),  # the backend table is the page's second lesson
    "Training lab": (2, 20, 0, 0, 0, 1, 5.0),
    # the table of claims is the page; its text includes the References list the rows link to (issue 44
    # item 10: every source in full, ~1.4 KB; 4.4 KB of text in all when it was added); the table ~1.2 KB a
    # claim (66 KB at 57 claims; 60 KB was set at 52)
    "Evidence": (1, 10, 0, 1, 72, 0, 5.0),
}


def test_every_page_has_a_first_render_budget() -> None:
    assert set(BUDGETS) == {e.label for e in PAGES}


@pytest.mark.parametrize("entry", PAGES, ids=[e.label for e in PAGES])
def test_a_new_tab_is_sent_no_more_than_its_budget(entry) -> None:
    at = run_app(entry.path, timeout=900)
    assert_plot_areas(figures(at), entry.label)  # issue 41: a legend never eats the plot
    got: PagePayload = sent(at)
    charts, kb, grids, tables, table_kb, formulas, text_kb = BUDGETS[entry.label]
    o = got.others
    assert len(got.charts) <= charts and got.total() <= kb * 1024, [(c.view, c.bytes) for c in got.charts]
    assert o.grids <= grids and o.tables <= tables and o.table_bytes <= table_kb * 1024, o
    assert o.formulas <= formulas and o.text <= text_kb * 1024, o


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
