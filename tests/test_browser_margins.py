"""Every chart is drawn once: the margins :func:`ui.margins.fit_margins` asks for are the ones Plotly
draws at (its automargin did not have to widen them and draw the chart a second time), on the
default view of every page (and in presenter mode), at the tests' 1500 px and at 1280 and 1920 px."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page

from tests.browser_utils import MARGINS_JS, open_expander, open_page, wait_idle

pytestmark = pytest.mark.browser

VIEWS = ("Heatmaps", "Entropy_vs_length", "Saturation_and_gradients", "Saturation_and_gradients?sat_tab=Saturation",
         "Saturation_and_gradients?sat_tab=Gradients", "Attention_sinks", "Attention_sinks?snk_view=model",
         "Attention_sinks?snk_view=learned",
         "Kernels", "Training_lab", "Evidence",
         # presenter mode: 16 px ticks, 14 px legends, bigger colour-bar labels
         "Heatmaps?present=1", "Entropy_vs_length?present=1", "Attention_sinks?present=1")


# Charts of a default view that a page draws only once their expander is opened (issue 34): opened here, so
# they are checked as before.
HEADS = ("All heads (click one to show it above)", "heads")  # (expander title, the chart's view)
OPEN = {"Heatmaps": (HEADS,), "Heatmaps?present=1": (HEADS,)}


def widened(page: Page) -> list[tuple[str, list, list]]:
    return [(view, asked, got) for view, asked, got in page.evaluate(MARGINS_JS) if got != asked]


@pytest.mark.parametrize("path", VIEWS)
def test_default_views_are_drawn_at_the_margins_they_ask_for(page: Page, app_url: str, path: str) -> None:
    open_page(page, f"{app_url}/{path}", timeout_s=180)
    wait_idle(page)
    for title, view in OPEN.get(path, ()):
        open_expander(page, title)
        page.wait_for_function("(v) => Array.from(document.querySelectorAll('.js-plotly-plot'))"
                               ".some(g => (g.layout.meta || {}).view === v && g._fullLayout)", arg=view)
    assert page.evaluate(MARGINS_JS), "no chart on the page"
    assert widened(page) == []


@pytest.mark.parametrize("width", [1280, 1920])
def test_the_slider_pages_need_no_second_draw_at_other_widths(page: Page, app_url: str, width: int) -> None:
    page.set_viewport_size({"width": width, "height": 900})
    for path in ("Attention_sinks", "Entropy_vs_length", "Saturation_and_gradients?sat_tab=Gradients"):
        open_page(page, f"{app_url}/{path}", timeout_s=180)
        wait_idle(page)
        assert widened(page) == [], path
