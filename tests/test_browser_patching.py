"""Real-browser test of the "Activation patching" expander on Heatmaps' real text (SmolLM2), on the
factual-recall pair: opened, it waits for its Run button; run, both maps and the sentence draw with no error.
Screenshot: test-artifacts/patching.png."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from tests.browser_utils import assert_clean, open_expander, open_page, screenshot, wait_idle
from tests.browser_utils import chart_views as views
from tests.browser_utils import show_chart as show
from ui.patching import TITLE

pytestmark = pytest.mark.browser

VIEWPORT = {"width": 1280, "height": 900}


def test_the_patching_expander_draws(page: Page, app_url: str) -> None:
    page.set_viewport_size(VIEWPORT)
    url = f"{app_url}/Heatmaps?rt_src=real&rt_model=smollm2&rt_text=The%20capital%20of%20France%20is&rt_pp=capital"
    open_page(page, url, timeout_s=600)
    assert_clean(page)
    open_expander(page, TITLE, timeout_s=600)
    assert_clean(page)
    assert "patch-resid" not in views(page)
    page.get_by_role("button", name="Run patching").click()
    page.wait_for_timeout(500)
    wait_idle(page, timeout_s=900)
    assert_clean(page)
    for v in ("patch-resid", "patch-heads"):
        assert v in views(page), views(page)
    expect(page.get_by_text("The residual stream carries it", exact=False)).to_be_visible()
    show(page, "patch-resid")
    screenshot(page, "patching")
