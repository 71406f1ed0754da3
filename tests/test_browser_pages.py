"""Real-browser tests: every page opens from its own URL, redraws on a slider move, shows no error."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from tests.browser_utils import (
    assert_clean,
    nudge_and_time,
    nudge_times,
    open_page,
    redraw_times,
    report,
    screenshot,
    url_path,
)
from ui.nav import PAGES, REAL_TEXT_LINKS

pytestmark = pytest.mark.browser


def test_home_opens_and_links_every_page(page: Page, app_url: str) -> None:
    open_page(page, app_url + "/", charts=False)
    expect(page.get_by_role("heading", name="Attention Lab")).to_be_visible()
    assert_clean(page)
    main = page.locator("[data-testid=stMain]")
    for entry in PAGES:
        expect(main.get_by_role("link", name=entry.label)).to_be_visible()
    screenshot(page, "home", height=1100)
    # The "Real text" deep links open the real-model views with their URL state.
    main.get_by_role("link", name=REAL_TEXT_LINKS[0].label).click()
    page.wait_for_url("**/Heatmaps?rt_src=real*")
    page.wait_for_selector(".js-plotly-plot", timeout=120_000)
    expect(page.get_by_role("radiogroup", name="Source").get_by_role("radio", name="real text (transformer)")
           ).to_be_checked()
    assert_clean(page)
    open_page(page, app_url + "/", charts=False)
    # The sidebar navigation labels the home page "Home" and reaches each page.
    side = page.locator("[data-testid=stSidebar]")
    expect(side.get_by_role("link", name="Home")).to_be_visible()
    side.get_by_role("link", name=PAGES[0].label).click()
    page.wait_for_url(f"**/{url_path(PAGES[0].path)}*")
    page.wait_for_selector(".js-plotly-plot", timeout=120_000)
    assert_clean(page)


# The first slider in each page's controls, moved by the test.
FIRST_SLIDER = {"Heatmaps": "Queries L", "Saturation & gradients": "Head dim d",
                "Attention sinks": "Real tokens n", "Entropy vs length": "Sequence lengths n",
                "Kernels": "Head dim E"}

# Pages whose first slider redraws a chart (the Training lab has its own: tests/test_browser_training.py).
REDRAWING = [e for e in PAGES if e.label in FIRST_SLIDER]


@pytest.mark.parametrize("entry", REDRAWING, ids=[e.label for e in REDRAWING])
def test_page_opens_from_its_url_and_redraws(page: Page, app_url: str, entry) -> None:
    path = url_path(entry.path)
    open_page(page, f"{app_url}/{path}")
    expect(page.get_by_role("heading", name=entry.label).first).to_be_visible()
    assert_clean(page)
    label = FIRST_SLIDER[entry.label]
    seconds, settled = nudge_times(page, label)
    assert_clean(page)
    report(f"redraw {entry.label} default settings, slider {label!r}: chart updated {seconds:.3f} s, "
           f"page settled {settled:.3f} s")
    screenshot(page, f"page-{path.lower()}-tall", height=1600)  # 1280x720 views: test_browser_layout


def test_heatmaps_url_state_round_trip(page: Page, app_url: str) -> None:
    open_page(page, f"{app_url}/Heatmaps?L=24&mask=causal&norm=softmax1")
    assert_clean(page)
    expect(page.get_by_role("combobox", name="Mask")).to_have_value("causal")
    expect(page.get_by_role("combobox", name="Normaliser")).to_have_value("softmax1 (off-by-one)")
    nudge_and_time(page, "Queries L")
    assert "L=25" in page.url and "mask=causal" in page.url and "norm=softmax1" in page.url, page.url


def test_heatmaps_redraw_times_default_and_largest(page: Page, app_url: str) -> None:
    """A benchmark, not an assertion: prints the first and the median redraw after a slider move."""
    for name, query in (("default settings", "L=17"),
                        ("largest settings (16 heads x 1024 x 1024, d_k=1024)",
                         "L=1023&S=1024&heads=16&kv=16&dk=1024")):
        open_page(page, f"{app_url}/Heatmaps?{query}", timeout_s=180)
        assert_clean(page)
        first, median = redraw_times(page, "Queries L", moves=5, timeout_s=120)
        assert_clean(page)
        report(f"redraw Heatmaps {name}: first move {first:.3f} s, median of the next 5 {median:.3f} s")


def test_heatmaps_bad_url_values_are_clamped_with_a_message(page: Page, app_url: str) -> None:
    open_page(page, f"{app_url}/Heatmaps?L=99999&dk=0&temp=nan&mask=bogus")
    assert_clean(page)
    warn = page.locator("[data-testid=stAlertContentWarning]")
    text = " ".join(warn.all_inner_texts())
    assert "above its limit 1024" in text and "dk" in text and "mask" in text, text


def test_heatmaps_url_text_is_never_a_link_or_an_image(page: Page, app_url: str) -> None:
    """Markdown in a URL value is shown as typed: no phishing link, no image fetched from elsewhere."""
    link = "[Session expired - click to log in again](http://example/phish)"
    open_page(page, f"{app_url}/Heatmaps?L={link}&mask=![x](http://example/x.png)")
    assert_clean(page)
    # ui.text.plain breaks Streamlit's autolinks with an invisible word joiner (U+2060) after "http"
    text = " ".join(page.locator("[data-testid=stAlertContentWarning]").all_inner_texts())
    assert "Session expired" in text and "http://example/x.png" in text.replace("\u2060", ""), text
    assert page.locator('a[href^="http://example"]').count() == 0
    assert page.locator('img[src^="http://example"]').count() == 0
