"""Real-browser tests of the Saturation & gradients page (Chromium against `streamlit run`)."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Page, expect

from tests.browser_utils import assert_clean, nudge_and_time, open_page, report, screenshot, wait_idle

pytestmark = pytest.mark.browser

PATH = "/Saturation_and_gradients"


def open_tab(page: Page, label: str, url_value: str) -> None:
    """Click a tab and wait for its rerun: the URL names it and its panel holds a chart."""
    page.get_by_role("tab", name=label).click()
    page.wait_for_url(re.compile(f"sat_tab={url_value}"), timeout=120_000)
    page.wait_for_selector("[role=tabpanel]:visible .js-plotly-plot", timeout=120_000)
    wait_idle(page)


def settled(page: Page) -> None:
    """Wait until no element is marked stale (the last rerun has redrawn everything)."""
    wait_idle(page)
    page.wait_for_function("() => !document.querySelector('[data-stale=true]')", timeout=120_000)


def no_exception(page: Page) -> None:
    exc = page.locator("[data-testid=stException]")
    assert exc.count() == 0, exc.first.inner_text()


def test_each_tab_opens_redraws_and_looks_right(page: Page, app_url: str) -> None:
    open_page(page, app_url + PATH)
    expect(page.get_by_role("heading", name="Saturation & gradients").first).to_be_visible()
    assert_clean(page)
    for tab, label, url_value in (("Why √d", "Head dim d", None), ("Saturation", "Entries n in the row", "Saturation"),
                                  ("Gradients", "Keys n per row", "Gradients")):
        if url_value:
            open_tab(page, tab, url_value)
        expect(page.get_by_role("tab", name=tab)).to_have_attribute("aria-selected", "true")
        seconds = nudge_and_time(page, label, timeout_s=120)
        assert_clean(page)
        report(f"redraw Saturation & gradients, tab {tab!r}, slider {label!r}: {seconds:.3f} s")
        settled(page)
        name = {"Why √d": "why", "Saturation": "saturation", "Gradients": "gradients"}[tab]
        screenshot(page, f"page-saturation-{name}", height=3600 if tab == "Gradients" else 2000)


def test_url_state_round_trip(page: Page, app_url: str) -> None:
    open_page(page, f"{app_url}{PATH}?sat_tab=Gradients&sat_keys=4&sat_stat=mean&sat_dmax=256")
    assert_clean(page)
    expect(page.get_by_role("tab", name="Gradients")).to_have_attribute("aria-selected", "true")
    expect(page.get_by_role("radio", name="mean, band = ±2 SE")).to_be_checked()
    nudge_and_time(page, "Keys n per row", timeout_s=120)
    page.wait_for_url(re.compile("sat_keys=8"), timeout=60_000)
    for part in ("sat_stat=mean", "sat_tab=Gradients", "sat_dmax=256"):
        assert part in page.url, page.url


def test_bad_scores_show_a_message_not_a_traceback(page: Page, app_url: str) -> None:
    open_page(page, f"{app_url}{PATH}?sat_tab=Saturation")
    assert_clean(page)
    box = page.get_by_role("textbox", name=re.compile("Scores"))
    for text, message in (("1, nan, 3", "not a finite number"), ("", "at least two scores"),
                          (", ".join(["2"] * 80), "80 scores were given; the limit is 64")):
        box.fill(text)
        box.press("Enter")
        err = page.locator("[data-testid=stAlertContentError]")
        expect(err).to_contain_text(message, timeout=60_000)
        settled(page)
        no_exception(page)
        expect(err).to_have_count(1)
        expect(page.locator(".js-plotly-plot")).to_have_count(1)  # the saturation curve still draws
    screenshot(page, "page-saturation-bad-scores", height=1500)
    box.fill("4, 1, 0.5, -2")
    box.press("Enter")
    expect(page.locator(".js-plotly-plot")).to_have_count(2, timeout=60_000)
    settled(page)
    assert_clean(page)


def test_over_budget_request_is_refused_in_words(page: Page, app_url: str) -> None:
    open_page(page, f"{app_url}{PATH}?sat_d=4096&sat_n=1000000")
    no_exception(page)
    err = page.locator("[data-testid=stAlertContentError]")
    expect(err).to_have_count(1)
    assert "the limit is 33.6M" in err.inner_text() and "Reduce the samples or d" in err.inner_text()


@pytest.mark.slow
def test_real_model_tab_runs_the_intervention(page: Page, app_url: str) -> None:
    """The tab 'Real model' on SmolLM2 at 64 tokens: the spread charts, then Run: the progress bar, the
    partial table and Stop while it runs, then the intervention's four panels and its sentence."""
    open_page(page, f"{app_url}{PATH}?sat_tab=Real%20model&sat_rl=64", timeout_s=300)
    expect(page.get_by_role("tab", name="Real model")).to_have_attribute("aria-selected", "true")
    page.wait_for_selector("[role=tabpanel]:visible .js-plotly-plot", timeout=300_000)
    settled(page)
    assert_clean(page)
    no_exception(page)
    page.get_by_role("button", name=re.compile(r"^Run 7 settings")).click()
    expect(page.get_by_test_id("stButton").get_by_role("button", name="Stop")).to_be_visible(timeout=120_000)
    expect(page.get_by_text(re.compile(r"Perplexity is lowest at"))).to_be_visible(timeout=300_000)
    settled(page)
    assert_clean(page)
    no_exception(page)
    assert page.locator("[role=tabpanel]:visible .js-plotly-plot").count() == 3
    screenshot(page, "page-saturation-real", height=3000)
