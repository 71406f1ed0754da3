"""Real browser: the Attention sinks page's part "a real decoder (SmolLM2)" at short lengths (sink grid,
massive activations, the StreamingLLM panel after its Run button, induction) and Entropy vs length's
real-model view."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Page, expect

from tests.browser_utils import assert_clean, open_page, screenshot, wait_idle

pytestmark = pytest.mark.browser

VIEW_JS = """(view) => Array.from(document.querySelectorAll('.js-plotly-plot')).some(g =>
  ((g.layout || {}).meta || {}).view === view && (g._fullData || []).length > 0)"""
SHORT = "snk_view=decoder&dec_L=40&dec_sl=64&dec_w1=8&dec_w2=16&dec_aw=4&dec_al=32&dec_T=16"


def test_decoder_part(page: Page, app_url: str) -> None:
    open_page(page, f"{app_url}/Attention_sinks?{SHORT}", charts=False, timeout_s=600)
    for view in ("dec_sink_grid", "dec_sink_share", "dec_kinds", "dec_value", "dec_massive", "dec_ablation",
                 "dec_deletion", "dec_induction", "dec_induction_map"):
        page.wait_for_function(VIEW_JS, arg=view, timeout=600_000)
    expect(page.get_by_text("Sink heads (Gu et al. 2024)")).to_be_visible()
    page.get_by_role("button", name="Run 7 settings").click()
    page.wait_for_function(VIEW_JS, arg="dec_stream", timeout=600_000)
    wait_idle(page, 300)
    expect(page.get_by_text("Perplexity relative to dense").first).to_be_visible()
    assert_clean(page)
    screenshot(page, "attention_sinks-decoder", height=5200)


def test_entropy_real_model(page: Page, app_url: str) -> None:
    open_page(page, f"{app_url}/Entropy_vs_length?ent_lo=4&ent_hi=8&ent_dec=1&ent_dl=64", charts=False,
              timeout_s=600)
    page.wait_for_function(VIEW_JS, arg="dec_entropy", timeout=600_000)
    wait_idle(page, 300)
    page.get_by_text("In a real model: SmolLM2").scroll_into_view_if_needed()
    assert_clean(page)
    screenshot(page, "entropy_vs_length-decoder", height=3000)


def test_decoder_part_on_a_typed_text(page: Page, app_url: str) -> None:
    """Switch to "Your own text", type one with markdown and HTML in it: the sink grid redraws on it, the
    caption names it by its token count, the text is shown as typed and kept in the URL."""
    open_page(page, f"{app_url}/Attention_sinks?{SHORT}", charts=False, timeout_s=600)
    page.wait_for_function(VIEW_JS, arg="dec_sink_grid", timeout=600_000)
    page.locator("[data-testid=stSidebar]").get_by_text("Your own text").click()
    wait_idle(page, 300)
    expect(page.get_by_text("Type or paste a text in the box above").first).to_be_visible()
    box = page.get_by_role("textbox", name="Your text")
    box.fill("Hi **there**")
    box.press("Control+Enter")
    wait_idle(page, 300)
    expect(page.locator("[data-testid=stAlertContentWarning]").first).to_contain_text(
        "the measurements need at least 16")
    assert_clean(page)
    typed = ("The <b>quick</b> brown fox jumps over the **lazy** dog.\nA second line, with [a link](http://e.x); "
             "and a colon: here.\n\nThird paragraph: it ends with a question? Yes, and one more line.\n")
    box.fill(typed)
    box.press("Control+Enter")
    wait_idle(page, 600)
    page.wait_for_function(VIEW_JS, arg="dec_sink_grid", timeout=600_000)
    assert_clean(page)
    caption = page.get_by_text(re.compile(r"^Text: your text, \d+ tokens\. At \d+ tokens")).first
    expect(caption).to_be_visible()
    expect(page.get_by_text("This panel runs on the shipped text").first).to_be_visible()
    assert box.input_value() == typed
    main = page.locator("[data-testid=stMain]")
    assert main.locator("[data-testid=stMarkdownContainer] b").count() == 0
    assert main.locator("[data-testid=stMarkdownContainer] a[href='http://e.x']").count() == 0
    assert "dec_src=own" in page.url and "dec_text=" in page.url, page.url
    caption.scroll_into_view_if_needed()
    screenshot(page, "attention_sinks-decoder-own-text", height=3000)
