"""Real browser: the Training lab opens from its URL, shows the shipped experiments, and a tiny live run
completes with a curve and no error box."""

from __future__ import annotations

import os
import re
import tempfile

import pytest
from playwright.sync_api import Page, expect

from attncore.errors import AttnInputError
from attncore.training import RESULT_NAMES, load_result
from tests.browser_utils import ARTIFACTS, assert_clean, open_page, screenshot, wait_idle

pytestmark = pytest.mark.browser

# Runs made by this test are kept in a throwaway folder, not in the user's cache (the app server
# inherits this environment when the session's app_url fixture starts it).
os.environ.setdefault("ATTNLAB_CACHE_DIR", tempfile.mkdtemp(prefix="attnlab-runs-"))

TABS = ("1 · Fully scaled attention", "2 · Without 1/√d", "3 · First-token attention (Shakespeare)",
        "4 · A sink forms")


def shipped_complete(name: str) -> bool:
    try:
        return bool(load_result(name).get("complete"))
    except AttnInputError:
        return False


CURVE_JS = """(name) => Array.from(document.querySelectorAll('.js-plotly-plot')).some(g =>
  (g._fullData || []).some(t => t.name === name && t.y && t.y.length > 0))"""


def test_training_lab_shows_the_experiments_and_a_live_run(page: Page, app_url: str) -> None:
    open_page(page, f"{app_url}/Training_lab?tr_var=standard&tr_steps=20", charts=False, timeout_s=180)
    expect(page.get_by_role("heading", name="Live runs")).to_be_visible(timeout=180_000)
    wait_idle(page, 180)
    expect(page.get_by_role("heading", name="Training lab").first).to_be_visible()
    expect(page.get_by_role("heading", name="Shipped experiments")).to_be_visible()
    expect(page.get_by_role("tab", name=TABS[0])).to_be_visible()
    assert_clean(page)
    screenshot(page, "training_lab-shipped", height=1600)  # not page-training_lab: the 1280x720 docs shot
    for name, tab in zip(RESULT_NAMES, TABS, strict=True):
        page.get_by_role("tab", name=tab).click()
        wait_idle(page)
        panel = page.get_by_role("tabpanel", name=tab)
        # a complete shipped file shows the claim, this run's numbers and a verdict
        if shipped_complete(name):
            expect(panel.get_by_text("This run measured")).to_be_visible()
            # the sink tab's verdict is the one over the grid of settings (the shipped run is one of them)
            verdict = "Verdict over settings." if name == "null_attention" else "Verdict."
            expect(panel.get_by_text(verdict).first).to_be_visible()
            expect(panel.locator(".js-plotly-plot").first).to_be_visible()
        else:
            # not made yet (or still being written): a plain note instead
            expect(panel.get_by_text(re.compile("still running|no result file"))).to_be_visible()
        assert_clean(page)
    # a tiny live run: progress, then the finished curve and its line of numbers
    page.get_by_role("button", name="Run", exact=True).click()
    done = page.locator("[data-testid=stMarkdown]").filter(has_text=re.compile(r"lr 0\.003: final training loss"))
    done.first.wait_for(timeout=180_000)
    wait_idle(page)
    expect(done.first).to_contain_text("standard · lr 0.003")
    expect(done.first).to_contain_text("after 20 steps")
    page.wait_for_function(CURVE_JS, arg="standard · lr 0.003", timeout=60_000)
    assert_clean(page)
    done.first.scroll_into_view_if_needed()
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "training_lab-live-run.png"))
