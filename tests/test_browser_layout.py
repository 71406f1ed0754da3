"""Real browser, issue 11: at 1280x720 every page shows a chart without scrolling (chart first)."""

from __future__ import annotations

import time

import pytest
from playwright.sync_api import Page

from tests.browser_utils import assert_clean, open_page, report, screenshot, url_path
from ui.nav import PAGES

pytestmark = pytest.mark.browser

VIEWPORT = {"width": 1280, "height": 720}
# The first chart must start this far above the bottom edge, so a real part of it is on screen.
VISIBLE_PX = 120


def first_chart_top(page: Page) -> float:
    """The top (px from the top of the viewport, page scrolled to the top) of the first chart on the page."""
    page.evaluate("() => { const m = document.querySelector('[data-testid=stMain]'); if (m) m.scrollTo(0, 0);"
                  " window.scrollTo(0, 0); }")
    return float(page.locator(".js-plotly-plot").first.bounding_box()["y"])


# Pages arranged chart-first: all of ui.nav.PAGES; a new page joins once it is arranged the same way.
CHART_FIRST = {"Tour", "Heatmaps", "Entropy vs length", "Saturation & gradients", "Attention sinks", "Kernels",
               "Training lab", "Evidence"}


@pytest.mark.parametrize("entry", PAGES, ids=[e.label for e in PAGES])
def test_first_chart_is_above_the_fold(page: Page, app_url: str, entry) -> None:
    page.set_viewport_size(VIEWPORT)
    open_page(page, f"{app_url}/{url_path(entry.path)}", timeout_s=180)
    assert_clean(page)
    top = first_chart_top(page)
    report(f"first chart top {entry.label} at 1280x720: {top:.0f} px")
    if entry.label in CHART_FIRST:
        assert top < VIEWPORT["height"] - VISIBLE_PX, f"{entry.label}: first chart starts at {top:.0f} px"


SHOTS = [(theme, present) for theme in ("light", "dark") for present in (False, True)]


@pytest.mark.parametrize("entry", PAGES, ids=[e.label for e in PAGES])
def test_screenshots_light_dark_presenter(page: Page, app_url: str, entry) -> None:
    """docs/page-<name>[-dark][-present].png at 1280x720 (written when ATTNLAB_UPDATE_SCREENSHOTS=1),
    and the first render time of each view (printed, not asserted)."""
    path = url_path(entry.path)
    for theme, present in SHOTS:
        page.emulate_media(color_scheme=theme)
        page.set_viewport_size(VIEWPORT)
        t0 = time.perf_counter()
        open_page(page, f"{app_url}/{path}" + ("?present=1" if present else ""), timeout_s=180)
        first = time.perf_counter() - t0
        assert_clean(page)
        if present:
            # presenter mode opens with the sidebar collapsed and larger chart text
            # (the sidebar, ~300 px wide when open, leaves the page the whole width: its title starts at the left
            # edge; the Tour's chart sits right of its lesson by design)
            assert page.locator("h1").first.bounding_box()["x"] < 150
            sizes = page.evaluate("() => Array.from(document.querySelectorAll('.js-plotly-plot .xtick text'))"
                                  ".map(t => parseFloat(getComputedStyle(t).fontSize))")
            assert sizes and min(sizes) >= 16, sizes
        report(f"first render {entry.label} ({theme}{', presenter' if present else ''}): {first:.2f} s")
        suffix = ("-dark" if theme == "dark" else "") + ("-present" if present else "")
        screenshot(page, f"page-{path.lower()}{suffix}")
