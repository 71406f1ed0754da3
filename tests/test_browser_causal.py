"""Real-browser tests of the shipped causal character model on the Heatmaps and Attention sinks pages."""

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


def test_heatmaps_causal_model_draws_and_its_temperature_redraws(page: Page, app_url: str) -> None:
    open_page(page, f"{app_url}/Heatmaps?rt_src=real&rt_model=causal", timeout_s=180)
    assert_clean(page)
    expect(page.get_by_text("What comes next: the next-character distribution")).to_be_visible()
    assert page.locator(".js-plotly-plot").count() >= 3  # the head, every head of the layer, next character
    assert_drawn_at_their_margins(page, {"rt-weights"})  # one-character token labels
    seconds = nudge_and_time(page, "Temperature τ (next character)", key="ArrowLeft", presses=4)
    assert_clean(page)
    report(f"redraw Heatmaps causal model, slider 'Temperature (next character)': {seconds:.3f} s")
    page.wait_for_url("**rt_ntemp=0.8**", timeout=15_000)
    assert "rt_model=causal" in page.url, page.url
    screenshot(page, "page-heatmaps-causal-model", height=2600)


def test_sinks_causal_model_draws_and_notes_unknown_characters(page: Page, app_url: str) -> None:
    open_page(page, f"{app_url}/Attention_sinks?snk_view=model&snk_model=causal", timeout_s=180)
    assert_clean(page)
    expect(page.get_by_text("Every head (rows: layers, columns: heads)")).to_be_visible()
    assert_drawn_at_their_margins(page, {"snk-grid", "snk-head"})  # one-character labels (12:a) too
    seconds = nudge_and_time(page, "Sink threshold ε")
    assert_clean(page)
    report(f"redraw Attention sinks causal model, slider 'Sink threshold': {seconds:.3f} s")
    box = page.get_by_role("textbox", name="Text")
    box.fill("ROMEO: <b>soft</b> **light** @ window")
    box.press("Control+Enter")
    wait_idle(page)
    assert_clean(page)
    note = page.locator("[data-testid=stAlertContentInfo]").first
    expect(note).to_contain_text("were dropped")
    expect(note).to_contain_text("<")  # shown as typed, not as an HTML tag or bold text
    expect(note).to_contain_text("*")
    assert page.locator("[data-testid=stAlertContentInfo] b").count() == 0
    assert page.locator("[data-testid=stAlertContentInfo] strong").count() == 0
    screenshot(page, "page-attention_sinks-causal-model", height=5200)
