"""Real browser: the Training lab's tab "4 · A sink forms", the experiment over settings: the map is drawn,
a mouse click on a cell picks it (its curves and the URL follow)."""

from __future__ import annotations

import json
from urllib.parse import parse_qs, urlparse

import pytest
from playwright.sync_api import Page, expect

from tests.browser_utils import assert_clean, open_page, screenshot, wait_idle
from tests.test_browser_realtext_select import META_JS, click_at

pytestmark = pytest.mark.browser

TAB = "4 · A sink forms"
VIEW_JS = """(view) => Array.from(document.querySelectorAll('.js-plotly-plot')).some(g =>
  ((g.layout || {}).meta || {}).view === view && (g._fullData || []).length > 0)"""


def test_grid_map_and_a_clicked_cell(page: Page, app_url: str) -> None:
    page.set_viewport_size({"width": 1280, "height": 900})
    open_page(page, f"{app_url}/Training_lab", charts=False, timeout_s=180)
    wait_idle(page, 180)
    page.get_by_role("tab", name=TAB).click()
    wait_idle(page)
    panel = page.get_by_role("tabpanel", name=TAB)
    expect(panel.get_by_text("Verdict over settings.")).to_be_visible(timeout=60_000)
    page.wait_for_function(VIEW_JS, arg="sk-grid", timeout=60_000)
    meta = json.loads(page.evaluate(META_JS, "sk-grid"))
    rows, cols = meta["rows"], meta["cols"]
    assert rows[0] == "softmax" and "rotary_0.01_600" in cols
    # click softmax (row 0) at the shipped setting's column: its curves replace softmax1's at lr 0.001
    click_at(page, "sk-grid", 1, ix=cols.index("rotary_0.01_600"), iy=0)
    page.wait_for_url("**sk_gset=rotary_0.01_600**", timeout=30_000)
    wait_idle(page)
    query = parse_qs(urlparse(page.url).query)
    assert query["sk_gvar"] == ["softmax"] and query["sk_gset"] == ["rotary_0.01_600"]
    page.wait_for_function(VIEW_JS, arg="sk-grid-cell", timeout=60_000)
    cell = json.loads(page.evaluate(META_JS, "sk-grid-cell"))
    assert cell["label"] == "softmax" and cell["setting"] == "rotary_0.01_600" and cell["seeds"] == [0, 1, 2]
    assert_clean(page)
    page.locator("[data-testid=stPlotlyChart]").filter(has=page.locator(".js-plotly-plot")).nth(
        [json.loads(v or "{}").get("view") for v in page.evaluate(
            "() => Array.from(document.querySelectorAll('.js-plotly-plot')).map(el => "
            "JSON.stringify(el.layout.meta || {}))")].index("sk-grid")).scroll_into_view_if_needed()
    page.wait_for_timeout(500)
    screenshot(page, "training_lab-sink_grid")
