"""Real-browser test of SmolLM2-135M-Instruct (4-bit (Q4_1) weights dequantised to float32) on Heatmaps:
the layers x heads overview draws with its three key/value groups, and a real mouse click on a tile opens
that head (the URL, the sliders and the big map follow); the next-token chart and the generation map draw.
Screenshots: test-artifacts/smollm2-top.png, smollm2-overview.png, smollm2-generation.png."""

from __future__ import annotations

import json

import pytest
from playwright.sync_api import Page, expect

from tests.browser_utils import POINT_JS, assert_clean, open_page, screenshot, slider, wait_idle
from tests.browser_utils import chart_views as views
from tests.browser_utils import show_chart as show
from tests.test_browser_realtext_select import META_JS

pytestmark = pytest.mark.browser

VIEWPORT = {"width": 1280, "height": 720}
TEXT = "The cat sat on the mat. The dog slept."


def test_overview_tile_click_opens_the_head_and_generation_draws(page: Page, app_url: str) -> None:
    page.set_viewport_size(VIEWPORT)
    url = (f"{app_url}/Heatmaps?rt_src=real&rt_model=smollm2&rt_text=The%20cat%20sat%20on%20the%20mat."
           "%20The%20dog%20slept.&rt_gen=1&rt_gn=5")
    open_page(page, url, timeout_s=600)
    assert_clean(page)
    expect(page.get_by_text("SmolLM2-135M-Instruct · layer 0 · head 0")).to_be_visible()
    screenshot(page, "smollm2-top")
    for v in ("rt-overview", "rt-heads", "rt-dec-next", "rt-gen"):
        assert v in views(page), views(page)
    meta = json.loads(page.evaluate(META_JS, "rt-overview"))
    assert (meta["layers"], meta["heads"], meta["kv_heads"]) == (30, 9, 3)
    show(page, "rt-overview")
    # the pick point of layer 12, head 7 (trace 1, point 12 * 9 + 7): a real click at its position
    side, r, c = meta["side"], meta["rows"][12], meta["cols"][7]
    x, y = page.evaluate(POINT_JS, ["rt-overview", 1, 0, 0, c + (side - 1) / 2, r + (side - 1) / 2])
    page.mouse.move(x, y)
    page.wait_for_timeout(300)
    screenshot(page, "smollm2-overview")
    page.mouse.click(x, y)
    page.wait_for_url("**rt_layer=12**", timeout=60_000)
    wait_idle(page, 300)
    assert_clean(page)
    assert "rt_head=7" in page.url
    expect(page.get_by_text("SmolLM2-135M-Instruct · layer 12 · head 7")).to_be_visible()
    assert slider(page, "Layer").input_value() == "12" and slider(page, "Head").input_value() == "7"
    assert json.loads(page.evaluate(META_JS, "rt-gen"))["layer"] == 12
    show(page, "rt-gen")
    screenshot(page, "smollm2-generation")
