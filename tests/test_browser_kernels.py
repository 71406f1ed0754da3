"""Real-browser test of the Kernels page: opens from its own URL, redraws, no error box; the verdicts,
the time chart's error bars and its fitted guides are drawn."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from attncore.kernels import VERDICTS
from tests.browser_utils import assert_clean, nudge_and_time, open_expander, open_page, report, screenshot

pytestmark = pytest.mark.browser

CLAIMS = "3 · What is said of FlashAttention, beside this machine"  # drawn when opened (issue 34)


def test_kernels_opens_from_its_url_redraws_and_keeps_url_state(page: Page, app_url: str) -> None:
    open_page(page, f"{app_url}/Kernels?k_tmin=64&k_tmax=512&k_mask=boolean", timeout_s=180)
    expect(page.get_by_role("heading", name="Kernels").first).to_be_visible()
    assert_clean(page)
    expect(page.get_by_role("combobox", name="Mask")).to_have_value("boolean attn_mask")
    expect(page.get_by_text("Which backend accepts this call")).to_be_visible()
    # Both log-log charts and the backend table are drawn; the claims' table once its expander is opened.
    assert page.locator(".js-plotly-plot").count() == 2
    assert page.locator("[data-testid=stDataFrame]").count() == 1
    assert page.locator("[data-testid=stTable]").count() == 0
    open_expander(page, CLAIMS)
    assert_clean(page)
    assert page.locator("[data-testid=stTable]").count() == 1
    seconds = nudge_and_time(page, "Head dim E", timeout_s=120)
    assert_clean(page)
    report(f"redraw Kernels (T 64..512, boolean mask), slider 'Head dim E': {seconds:.3f} s")
    page.wait_for_url("**k_dim=128**", timeout=15_000)
    assert "k_mask=boolean" in page.url and "k_tmax=512" in page.url, page.url
    screenshot(page, "page-kernels-boolean-mask", height=2600)


def test_kernels_default_view_draws_verdicts_error_bars_and_fitted_guides(page: Page, app_url: str) -> None:
    open_page(page, f"{app_url}/Kernels", timeout_s=240)
    assert_clean(page)
    open_expander(page, CLAIMS)
    assert_clean(page)
    table = page.locator("[data-testid=stTable]")
    expect(table).to_contain_text("verdict")
    text = table.inner_text()
    assert sum(text.count(v) for v in VERDICTS) >= 3, text  # one verdict per claim
    # the time chart: error bars (the interval of each median) and the fitted guides
    chart = page.locator(".js-plotly-plot").first
    assert chart.locator("g.errorbar").count() > 0
    legend = chart.locator(".legendtext").all_text_contents()
    assert any("default dispatch" in t for t in legend) and any("guide" in t for t in legend), legend
    screenshot(page, "page-kernels-default-top")
    screenshot(page, "page-kernels-default", height=2900)


def test_kernels_over_limit_request_is_a_plain_message(page: Page, app_url: str) -> None:
    open_page(page, f"{app_url}/Kernels?k_tmin=65536&k_tmax=65536&k_heads=64&k_dim=256", charts=False)
    assert page.locator("[data-testid=stException]").count() == 0
    expect(page.locator("[data-testid=stAlertContentError]").first).to_contain_text("Lower the largest T")


def test_kernels_32_heads_in_32_groups_opens(page: Page, app_url: str) -> None:
    """Issue 26: this URL said "groups must be between 1 and 16; got 32." with no charts."""
    open_page(page, f"{app_url}/Kernels?k_heads=32&k_groups=32&k_tmin=32&k_tmax=64&k_mem=0", timeout_s=180)
    assert_clean(page)
    assert page.locator(".js-plotly-plot").count() == 2
