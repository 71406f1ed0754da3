"""Real-browser test of the Heatmaps dropout view and the per-query padding mask."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from tests.browser_utils import assert_clean, nudge_and_time, open_page, report, screenshot

pytestmark = pytest.mark.browser


def test_heatmaps_dropout_and_per_query_padding_redraw(page: Page, app_url: str) -> None:
    open_page(page, f"{app_url}/Heatmaps?mask=padding2d&vlens=1,3,0,4&drop=0.3&L=24&S=24")
    assert_clean(page)
    expect(page.get_by_role("combobox", name="Mask")).to_have_value("padding per query (2-D valid_lens)")
    expect(page.get_by_text("Dropout (training mode)", exact=True)).to_be_visible()
    expect(page.get_by_text("that row is fully masked")).to_be_visible()
    seconds = nudge_and_time(page, "Dropout p (training mode)")
    assert_clean(page)
    report(f"redraw Heatmaps dropout view (24 x 24), slider 'Dropout p': {seconds:.3f} s")
    page.wait_for_url("**drop=0.35**", timeout=15_000)
    screenshot(page, "page-heatmaps-dropout", height=3000)
