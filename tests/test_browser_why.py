"""Real-browser test of Heatmaps' "Why this head attends here" on SmolLM2 (issue 40 item 1): the expander
opens, both charts draw without an error. Screenshot: test-artifacts/why-head.png."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page

from tests.browser_utils import assert_clean, open_expander, open_page, screenshot, wait_idle
from tests.browser_utils import chart_views as views
from tests.browser_utils import show_chart as show
from ui.why import TITLE

pytestmark = pytest.mark.browser


def test_why_section_opens_and_draws(page: Page, app_url: str) -> None:
    page.set_viewport_size({"width": 1280, "height": 900})
    url = (f"{app_url}/Heatmaps?rt_src=real&rt_model=smollm2&rt_text=The%20cat%20sat%20on%20the%20mat."
           "%20The%20dog%20slept.&rt_layer=12&rt_head=7&rt_tok=9")
    open_page(page, url, timeout_s=600)
    assert_clean(page)
    assert "rt-why-pairs" not in views(page)  # closed: nothing of it sent
    open_expander(page, TITLE, timeout_s=300)
    wait_idle(page, 300)
    assert_clean(page)
    assert {"rt-why-pairs", "rt-why-normcos"} <= set(views(page)), views(page)
    show(page, "rt-why-pairs")
    screenshot(page, "why-head")
