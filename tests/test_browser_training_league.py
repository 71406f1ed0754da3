"""Real browser: the Training lab's league section opens from its folded expander, draws the league chart,
a cell's curves and the verdict's sentence, and changes learning rate without an error box."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from tests.browser_utils import (
    assert_clean,
    chart_views,
    open_expander,
    open_page,
    screenshot,
    show_chart,
    wait_idle,
)
from ui.league import TITLE

pytestmark = pytest.mark.browser


def test_league_section_opens_and_draws(page: Page, app_url: str) -> None:
    open_page(page, f"{app_url}/Training_lab?lg_cell=softpick", charts=False, timeout_s=180)
    expect(page.get_by_role("heading", name="Live runs")).to_be_visible(timeout=180_000)  # the page is drawn
    wait_idle(page, 180)
    assert "league" not in chart_views(page)  # folded: not sent (issue 34)
    open_expander(page, TITLE, timeout_s=180)
    wait_idle(page, 120)
    views = chart_views(page)
    assert "league" in views and "league_curves" in views, views
    expect(page.get_by_text("Against the paper's ordering.").first).to_be_visible()
    assert_clean(page)
    show_chart(page, "league")
    screenshot(page, "training_lab-league", height=1800)
    page.get_by_role("combobox", name="League: learning rate").click()
    page.get_by_role("option", name="0.01").click()
    wait_idle(page, 120)
    expect(page.get_by_text("At learning rate 0.01").first).to_be_visible()
    assert_clean(page)
