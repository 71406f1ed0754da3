"""Real browser: the Training lab's "An induction head forms" opens from its URL with the shipped run's curves,
maps and verdict, and a short live run completes with its curves and its sentence, no error box."""

from __future__ import annotations

import os
import re
import tempfile

import pytest
from playwright.sync_api import Page, expect

from tests.browser_utils import (
    ARTIFACTS,
    assert_clean,
    chart_views,
    open_page,
    screenshot,
    show_chart,
    wait_idle,
)

pytestmark = pytest.mark.browser

os.environ.setdefault("ATTNLAB_CACHE_DIR", tempfile.mkdtemp(prefix="attnlab-runs-"))


def test_induction_section_shows_the_shipped_run_and_a_live_run(page: Page, app_url: str) -> None:
    open_page(page, f"{app_url}/Training_lab?tr_ind=1&tr_ind_steps=100", charts=False, timeout_s=180)
    expect(page.get_by_role("heading", name="An induction head forms").first).to_be_visible(timeout=180_000)
    wait_idle(page, 180)
    expect(page.get_by_text("Verdict.").first).to_be_visible()
    page.wait_for_function("() => Array.from(document.querySelectorAll('.js-plotly-plot'))"
                           ".filter(el => (el.layout.meta || {}).view === 'tr-ind-maps').length === 1",
                           timeout=120_000)
    views = chart_views(page)
    assert "tr-ind-curves" in views and "tr-ind-maps" in views, views
    expect(page.get_by_role("link", name=re.compile("The same stripe in SmolLM2-135M"))).to_be_visible()
    assert_clean(page)
    show_chart(page, "tr-ind-curves")
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "training_lab-induction-curves.png"))
    show_chart(page, "tr-ind-maps")
    page.screenshot(path=str(ARTIFACTS / "training_lab-induction-maps.png"))
    page.get_by_role("button", name="Run the induction model").click()
    done = page.locator("[data-testid=stMarkdown]").filter(has_text=re.compile(r"Seed 0, \d+ s: "))
    done.first.wait_for(timeout=240_000)
    wait_idle(page)
    expect(done.first).to_contain_text("the second copy's loss went from")
    assert "tr-ind-job" in chart_views(page)
    assert_clean(page)
    done.first.scroll_into_view_if_needed()
    screenshot(page, "training_lab-induction-live")
