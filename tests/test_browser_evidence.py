"""Real-browser test of the Evidence page: opens from its URL (time to the table printed), every claim in the
table with a working link into its view, the verdict filter from the URL, nothing rendered from URL text."""

from __future__ import annotations

import time

import pytest
from playwright.sync_api import Page, expect

from attncore.evidence import CLAIMS, SOURCES
from tests.browser_utils import assert_clean, open_page, report, screenshot, wait_idle
from ui.views import evidence as view

pytestmark = pytest.mark.browser


def rows(page: Page) -> int:
    return page.locator("[data-testid=stTable] tbody tr").count()


def test_evidence_opens_with_every_claim_and_links_into_the_views(page: Page, app_url: str) -> None:
    page.set_viewport_size({"width": 1280, "height": 720})
    t0 = time.perf_counter()
    page.goto(f"{app_url}/Evidence", timeout=300_000)
    page.wait_for_selector("[data-testid=stTable]", timeout=300_000)
    first = time.perf_counter() - t0
    wait_idle(page, 300)
    settled = time.perf_counter() - t0
    report(f"Evidence first open: table {first:.2f} s, settled {settled:.2f} s")
    assert_clean(page)
    expect(page.get_by_role("heading", name="Evidence").first).to_be_visible()
    assert rows(page) == len(CLAIMS)
    assert page.locator(".js-plotly-plot").count() == 1
    expect(page.get_by_text(f"All five texts: {len(CLAIMS)} claims:")).to_be_visible()
    # the overview chart names all five texts
    ticks = page.evaluate("() => Array.from(document.querySelectorAll('.js-plotly-plot .ytick text'))"
                          ".map(t => t.textContent)")
    assert len(ticks) == 5, ticks
    screenshot(page, "evidence-top")
    # a second visit comes from the cache
    t0 = time.perf_counter()
    open_page(page, f"{app_url}/Evidence", timeout_s=120)
    report(f"Evidence second open (cached): {time.perf_counter() - t0:.2f} s")
    # every row links to its view; follow the first
    hrefs = page.locator("[data-testid=stTable] tbody tr a").evaluate_all("els => els.map(e => e.getAttribute('href'))")
    assert [h for h in hrefs if h.startswith("/")] == [view.link(c.key) for c in CLAIMS]
    # and its sources and papers to their references (issue 44 item 10): an address, or the list below
    for c in CLAIMS:
        for s in c.sources:
            assert (SOURCES[s].url or "#" + view.REFERENCES_ANCHOR) in hrefs
    heading = page.get_by_role("heading", name="References")
    heading.scroll_into_view_if_needed()
    expect(heading).to_be_visible()
    expect(page.get_by_role("link", name="https://arxiv.org/abs/2309.17453")).to_be_visible()
    screenshot(page, "evidence-references")
    link = page.locator("[data-testid=stTable] tbody tr a[href^='/']").first
    assert link.get_attribute("target") == "_blank"  # the view opens beside the table
    with page.context.expect_page() as opened:
        link.click()
    other = opened.value
    other.wait_for_url("**/Entropy_vs_length?ent_vary=none*", timeout=60_000)
    open_page(other, other.url, timeout_s=180)
    assert_clean(other)
    expect(other.get_by_role("heading", name="Entropy vs length").first).to_be_visible()
    other.close()


def test_evidence_filters_from_the_url_and_plain_text(page: Page, app_url: str) -> None:
    page.set_viewport_size({"width": 1280, "height": 1400})
    open_page(page, f"{app_url}/Evidence?ev_v=misprint,fails&ev_src=sqrtd", timeout_s=300)
    assert_clean(page)
    shown = rows(page)
    assert 2 <= shown < len(CLAIMS)
    badges = page.locator("[data-testid=stTable] tbody tr .stMarkdownBadge").all_inner_texts()
    assert len(badges) == shown and set(badges) <= {"misprint in the source", "does not hold here"}, badges
    screenshot(page, "evidence-misprints", height=1400)
    # a URL value is never markup: a link in it stays text and is refused
    open_page(page, f"{app_url}/Evidence?ev_src=[x](http://evil.example)", timeout_s=300)
    assert page.locator("a[href*='evil.example']").count() == 0
    assert rows(page) == len(CLAIMS)
