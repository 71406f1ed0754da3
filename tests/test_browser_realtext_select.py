"""Real-browser tests of real text in front (issue 11): real mouse clicks on a head thumbnail, a
layer x head tile and a row of the weight map select that head or query token."""

from __future__ import annotations

import json

import pytest
from playwright.sync_api import Page, expect

from tests.browser_utils import (
    assert_clean,
    assert_drawn_at_their_margins,
    chart_point,
    open_expander,
    open_page,
    screenshot,
    show_chart,
    slider,
    wait_idle,
)

pytestmark = pytest.mark.browser

VIEWPORT = {"width": 1280, "height": 720}

META_JS = """(view) => JSON.stringify(Array.from(document.querySelectorAll('.js-plotly-plot'))
  .find(el => (el.layout.meta || {}).view === view).layout.meta)"""
Z_JS = """(view) => JSON.stringify(Array.from(document.querySelectorAll('.js-plotly-plot'))
  .find(el => (el.layout.meta || {}).view === view).data[0].z).slice(0, 400)"""


def click_at(page: Page, view: str, trace: int, *, fx: float = 0.5, fy: float = 0.5, ix: float | None = None,
             iy: float | None = None) -> None:
    show_chart(page, view)
    x, y = chart_point(page, view, trace, fx=fx, fy=fy, ix=ix, iy=iy)
    page.mouse.move(x, y)
    page.wait_for_timeout(300)
    page.mouse.click(x, y)


def test_heatmaps_click_a_thumbnail_then_a_row(page: Page, app_url: str) -> None:
    page.set_viewport_size(VIEWPORT)
    open_page(page, f"{app_url}/Heatmaps?rt_src=real", timeout_s=180)
    assert_drawn_at_their_margins(page, {"rt-weights"})  # word-piece token labels
    assert_clean(page)
    expect(page.get_by_text("all-MiniLM-L6-v2 · layer 0 · head 0")).to_be_visible()
    before = page.evaluate(Z_JS, "rt-weights")
    # thumbnail of head 4 (trace 4 is its heatmap), clicked off-centre
    click_at(page, "rt-heads", 4, fx=0.3, fy=0.7)
    page.wait_for_url("**rt_head=4**", timeout=30_000)
    wait_idle(page)
    assert_clean(page)
    expect(page.get_by_text("all-MiniLM-L6-v2 · layer 0 · head 4")).to_be_visible()
    assert '"selected":4' in page.evaluate(META_JS, "rt-heads")
    assert page.evaluate(Z_JS, "rt-weights") != before  # the big map redrew with head 4
    assert slider(page, "Head").input_value() == "4"  # the slider follows the click
    screenshot(page, "realtext-select-heatmaps-thumbnails")
    # a row of the weight map: query 6
    strip_before = page.locator(".attn-strip").first.inner_html()
    click_at(page, "rt-weights", 0, fx=0.5, iy=6)
    page.wait_for_url("**rt_tok=6**", timeout=30_000)
    wait_idle(page)
    assert_clean(page)
    assert '"selected":6' in page.evaluate(META_JS, "rt-weights")
    strip = page.locator(".attn-strip").first
    assert strip.inner_html() != strip_before
    assert "outline:2px" in strip.locator('[data-j="6"]').get_attribute("style")
    expect(page.get_by_role("heading", name="Token 6:")).to_be_visible()
    screenshot(page, "realtext-select-heatmaps-map")
    strip.scroll_into_view_if_needed()
    page.wait_for_timeout(400)
    title = strip.locator('[data-j="0"]').get_attribute("title")
    assert title.startswith("0: [CLS], weight ")  # hover shows the weight
    screenshot(page, "realtext-select-heatmaps-token")


def test_sinks_click_a_layer_head_tile(page: Page, app_url: str) -> None:
    page.set_viewport_size(VIEWPORT)
    open_page(page, f"{app_url}/Attention_sinks?snk_view=model", timeout_s=180)
    assert_clean(page)
    m = json.loads(page.evaluate(META_JS, "snk-grid"))
    tr, tc = m["tile_rows"], m["tile_cols"]
    # tile (layer 3, head 7), a cell a third of the way into it
    click_at(page, "snk-grid", 0, ix=7 * tc + (tc - 1) / 3, iy=3 * tr + (tr - 1) / 2)
    page.wait_for_url("**snk_layer=3**", timeout=30_000)
    wait_idle(page)
    assert "snk_head=7" in page.url, page.url
    assert_clean(page)
    assert json.loads(page.evaluate(META_JS, "snk-grid"))["selected"] == [3, 7]
    expect(page.get_by_text("all-MiniLM-L6-v2 · layer 3 · head 7")).to_be_visible()
    screenshot(page, "realtext-select-sinks-grid")


def test_heatmaps_synthetic_click_a_head_thumbnail(page: Page, app_url: str) -> None:
    """Synthetic source: a click on thumbnail 2 of "All heads" shows head 2 in the maps above."""
    page.set_viewport_size(VIEWPORT)
    open_page(page, f"{app_url}/Heatmaps")
    assert_clean(page)
    assert page.locator(".js-plotly-plot").count() == 2  # the grid is drawn once its expander opens (issue 34)
    open_expander(page, "All heads (click one to show it above)")
    page.wait_for_function("() => Array.from(document.querySelectorAll('.js-plotly-plot'))"
                           ".some(el => (el.layout.meta || {}).view === 'heads')", timeout=60_000)
    assert '"selected":0' in page.evaluate(META_JS, "heads")
    before = page.evaluate(Z_JS, "weights")
    click_at(page, "heads", 2, fx=0.6, fy=0.4)  # trace 2: head 2's heatmap
    page.wait_for_url("**head=2**", timeout=30_000)
    wait_idle(page)
    assert_clean(page)
    assert '"selected":2' in page.evaluate(META_JS, "heads")
    assert slider(page, "Selected head").input_value() == "2"
    assert page.evaluate(Z_JS, "weights") != before  # the head's own map redrew
