"""Real-browser tests of the Attention sinks page and the Heatmaps page's real-text source."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from tests.browser_utils import (
    assert_clean,
    assert_drawn_at_their_margins,
    nudge_and_time,
    open_page,
    report,
    screenshot,
    wait_idle,
)

pytestmark = pytest.mark.browser

def test_sinks_lab_redraws_and_keeps_its_url_state(page: Page, app_url: str) -> None:
    open_page(page, f"{app_url}/Attention_sinks?snk_s=8&snk_gate=headwise")
    expect(page.get_by_role("heading", name="Attention sinks").first).to_be_visible()
    assert_clean(page)
    seconds = nudge_and_time(page, "Sink strength s (its logit)")
    assert_clean(page)
    report(f"redraw Attention sinks lab, slider 'Sink strength s': {seconds:.3f} s")
    page.wait_for_url("**snk_s=8.25**", timeout=15_000)
    assert "snk_gate=headwise" in page.url, page.url
    nudge_and_time(page, "Content logit c", key="ArrowLeft", presses=4)
    assert_clean(page)
    screenshot(page, "page-attention_sinks-lab", height=3300)


def test_sinks_real_model_view_redraws(page: Page, app_url: str) -> None:
    open_page(page, f"{app_url}/Attention_sinks?snk_view=model", timeout_s=180)
    assert_clean(page)
    expect(page.get_by_text("Mass on [CLS], layers 1–4")).to_be_visible()
    # The head map and the layer x head grid are drawn at their own margins: the browser did not
    # have to widen them for the token labels or the colour bar and draw them a second time.
    assert_drawn_at_their_margins(page, {"snk-grid", "snk-head"})
    seconds = nudge_and_time(page, "Layer")
    assert_clean(page)
    report(f"redraw Attention sinks real model (MiniLM), slider 'Layer': {seconds:.3f} s")
    seconds = nudge_and_time(page, "Sink threshold ε")
    assert_clean(page)
    report(f"redraw Attention sinks real model, slider 'Sink threshold': {seconds:.3f} s")
    # New text: type, apply with Ctrl+Enter, see the token count change.
    box = page.get_by_role("textbox", name="Text")
    box.fill("Short text, with commas.")
    box.press("Control+Enter")
    wait_idle(page)
    # [CLS] short text , with comma ##s . [SEP]
    expect(page.locator("[data-testid=stMetricValue]").first).to_have_text("9")
    assert_clean(page)
    screenshot(page, "page-attention_sinks-model", height=4200)


def test_sinks_bad_input_shows_a_message_not_a_traceback(page: Page, app_url: str) -> None:
    open_page(page, f"{app_url}/Attention_sinks?snk_view=model&snk_model=local&snk_path=/etc", charts=False)
    assert page.locator("[data-testid=stException]").count() == 0
    err = page.locator("[data-testid=stAlertContentError]")
    expect(err.first).to_be_visible()
    assert "ATTNLAB_MODEL_DIRS" in err.first.inner_text()
    open_page(page, f"{app_url}/Attention_sinks?snk_view=model&snk_text=%20", charts=False)
    assert page.locator("[data-testid=stException]").count() == 0
    assert page.locator("[data-testid=stAlertContentError]").count() == 0  # F11: no text is an info box
    expect(page.locator("[data-testid=stAlertContentInfo]").first).to_contain_text("Type or paste a text")


def test_heatmaps_real_text_source_redraws(page: Page, app_url: str) -> None:
    open_page(page, f"{app_url}/Heatmaps?rt_src=real", timeout_s=180)
    assert_clean(page)
    seconds = nudge_and_time(page, "Head")
    assert_clean(page)
    report(f"redraw Heatmaps real text (MiniLM), slider 'Head': {seconds:.3f} s")
    page.wait_for_url("**rt_head=1**", timeout=15_000)  # the URL carries the new head
    screenshot(page, "page-heatmaps-real-text", height=2000)
