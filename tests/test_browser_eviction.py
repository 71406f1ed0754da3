"""Real browser: the Attention sinks page's panel "Which tokens to keep" at 32 tokens: it waits with its
estimate, runs after its button (progress, then every chart), and the shipped run's view opens."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from tests.browser_utils import assert_clean, open_page, screenshot, wait_idle

pytestmark = pytest.mark.browser

VIEW_JS = """(view) => Array.from(document.querySelectorAll('.js-plotly-plot')).some(g =>
  ((g.layout || {}).meta || {}).view === view && (g._fullData || []).length > 0)"""
SHORT = ("snk_view=decoder&dec_L=40&dec_sl=64&dec_w1=8&dec_w2=16&dec_aw=4&dec_al=32&dec_T=16"
         "&keep_L=32&keep_b=8")


def test_keep_panel(page: Page, app_url: str) -> None:
    open_page(page, f"{app_url}/Attention_sinks?{SHORT}", charts=False, timeout_s=600)
    expect(page.get_by_text("13 of 13 decodes still to run").first).to_be_visible(timeout=600_000)
    page.get_by_role("button", name="Run 13 decodes").click()
    for view in ("keep_budget", "keep_loss", "keep_map", "keep_first"):
        page.wait_for_function(VIEW_JS, arg=view, timeout=600_000)
    page.get_by_text("The shipped run at 2,048 tokens (prose and code)").click()
    page.wait_for_function(VIEW_JS, arg="keep_shipped_budget", timeout=600_000)
    wait_idle(page, 300)
    expect(page.get_by_text("decodes; the rest still to be computed").first.or_(
        page.get_by_text("Shipped run: all 34 decodes.").first)).to_be_visible()
    assert_clean(page)
    page.get_by_text("Which tokens to keep: KV-cache eviction").scroll_into_view_if_needed()
    screenshot(page, "attention_sinks-keep", height=4200)
