"""Real browser: the Training lab's tab "4 · A sink forms" (shipped result, a live run of the task) and the
Attention sinks page's part "a sink learned here" (maps, a typed sequence, another fix)."""

from __future__ import annotations

import os
import re
import tempfile

import pytest
from playwright.sync_api import Page, expect

from attncore.errors import AttnInputError
from attncore.training import load_result
from tests.browser_utils import ARTIFACTS, assert_clean, open_page, screenshot, wait_idle

pytestmark = pytest.mark.browser

os.environ.setdefault("ATTNLAB_CACHE_DIR", tempfile.mkdtemp(prefix="attnlab-runs-"))

TAB = "4 · A sink forms"
CURVE_JS = """(name) => Array.from(document.querySelectorAll('.js-plotly-plot')).some(g =>
  (g._fullData || []).some(t => t.name === name && t.y && t.y.length > 1))"""
VIEW_JS = """(view) => Array.from(document.querySelectorAll('.js-plotly-plot')).some(g =>
  ((g.layout || {}).meta || {}).view === view && (g._fullData || []).length > 0)"""


def shipped_complete() -> bool:
    try:
        return bool(load_result("null_attention").get("complete"))
    except AttnInputError:
        return False


def test_sink_tab_shows_the_result_and_a_live_run(page: Page, app_url: str) -> None:
    open_page(page, f"{app_url}/Training_lab?sk_vars=standard&sk_steps=50", charts=False, timeout_s=180)
    expect(page.get_by_role("heading", name="Live runs")).to_be_visible(timeout=180_000)
    wait_idle(page, 180)
    page.get_by_role("tab", name=TAB).click()
    wait_idle(page)
    panel = page.get_by_role("tabpanel", name=TAB)
    if shipped_complete():
        expect(panel.get_by_text("This run measured")).to_be_visible()
        expect(panel.get_by_text("Verdict over settings.").first).to_be_visible()
        expect(panel.get_by_text("At the shipped setting").first).to_be_visible()
        # the seven maps are drawn once their expander is opened (issue 34)
        panel.get_by_text("Every variant's head on one held-out sequence").click()
        wait_idle(page)
        for view in ("sk-curves", "sk-maps", "sk-nowhere", "sk-value"):
            page.wait_for_function(VIEW_JS, arg=view, timeout=60_000)
    else:
        expect(panel.get_by_text(re.compile("still running|no result file"))).to_be_visible()
    assert_clean(page)
    screenshot(page, "training_lab-sink_forms", height=2600)
    panel.get_by_role("button", name="Run on the task").click()
    done = panel.locator("[data-testid=stMarkdown]").filter(has_text=re.compile(r"softmax · seed 0: after 50 steps"))
    done.first.wait_for(timeout=240_000)
    wait_idle(page)
    expect(done.first).to_contain_text("weight on BOS from non-trigger positions")
    page.wait_for_function(CURVE_JS, arg="softmax · seed 0", timeout=60_000)
    expect(panel.get_by_text("What these runs show.")).to_be_visible()
    assert_clean(page)
    done.first.scroll_into_view_if_needed()
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "training_lab-sink_forms-live.png"))


def test_learned_part_maps_a_typed_sequence(page: Page, app_url: str) -> None:
    open_page(page, f"{app_url}/Attention_sinks?snk_view=learned", timeout_s=180)
    expect(page.get_by_role("heading", name="A sink learned here")).to_be_visible()
    for view in ("snk-learned-soft", "snk-learned-fix", "sk-bospos"):
        page.wait_for_function(VIEW_JS, arg=view, timeout=60_000)
    expect(page.get_by_text("softmax: on BOS from non-trigger")).to_be_visible()
    assert_clean(page)
    screenshot(page, "page-attention_sinks-learned", height=1900)
    open_page(page, f"{app_url}/Attention_sinks?snk_view=learned&snk_lsrc=text&snk_lfix=relu", timeout_s=180)
    box = page.get_by_role("textbox", name="Characters after BOS")
    box.fill("Speak, speak! Before we proceed any further, hear me é")
    box.press("Control+Enter")
    wait_idle(page)
    expect(page.get_by_text("1 character outside the corpus's vocabulary was dropped.")).to_be_visible()
    expect(page.get_by_text("ReLU: on BOS from trigger")).to_be_visible()
    assert_clean(page)
    screenshot(page, "page-attention_sinks-learned-typed", height=1900)
    # nothing the corpus has: a plain message, no traceback
    box = page.get_by_role("textbox", name="Characters after BOS")
    box.fill("ééé")
    box.press("Control+Enter")
    wait_idle(page)
    assert page.locator("[data-testid=stException]").count() == 0
    expect(page.locator("[data-testid=stAlertContentError]").first).to_contain_text("type at least one character")
