"""Real-browser tests of the Entropy vs length page (Chromium against `streamlit run`)."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Page, expect

from attncore.sweeps import max_sweep_n
from tests.browser_utils import assert_clean, nudge_and_time, open_page, report, screenshot, wait_idle
from tests.chart_data import page_device

pytestmark = pytest.mark.browser

PAGE = "Entropy_vs_length"


def test_entropy_page_opens_redraws_and_keeps_state_in_the_url(page: Page, app_url: str) -> None:
    open_page(page, f"{app_url}/{PAGE}?ent_hi=14&ent_vary=scale_rule&ent_rules=sqrt_d,ssmax")
    assert_clean(page)
    expect(page.get_by_role("heading", name="Entropy vs length")).to_be_visible()
    # the panels alone: SSMax's figure 1 is an expander drawn when opened (issue 34)
    expect(page.locator(".js-plotly-plot")).to_have_count(1)
    # Moving the upper end of the n range redraws the panels and lands in the URL.
    seconds = nudge_and_time(page, "Sequence lengths n", presses=1)
    assert_clean(page)
    report(f"redraw Entropy vs length (2 curves, n to 2^14), range slider: {seconds:.3f} s")
    assert "ent_lo=5" in page.url and "ent_vary=scale_rule" in page.url, page.url
    screenshot(page, "entropy-scale-rules", height=2300)


def test_entropy_page_default_view_and_figure1(page: Page, app_url: str) -> None:
    open_page(page, f"{app_url}/{PAGE}", timeout_s=180)
    assert_clean(page)
    # figure 1 is an expander drawn when opened (issue 34)
    page.get_by_text("One spike against a growing crowd").click()
    wait_idle(page, 120)
    caption = page.get_by_text(re.compile(r"softmax 0\.600 at n = 100 and 0\.129 at n = 1000"))
    expect(caption).to_be_visible()
    screenshot(page, "entropy-default", height=2300)
    # The figure-1 sliders redraw the figure-1 chart (a fragment) and still land in the URL.
    seconds = nudge_and_time(page, "Peak logit", presses=2)
    assert_clean(page)
    page.wait_for_url(re.compile(r"ent_peak=4"), timeout=30_000)
    report(f"redraw Entropy vs length figure-1 panel, peak slider: {seconds:.3f} s")


def test_entropy_long_sweep_waits_for_run_and_can_be_stopped(page: Page, app_url: str) -> None:
    # 1024 rows x 2^22 keys: 4.3 G random numbers, under the cap but far too long to start by itself
    # no chart before Run: the sweep waits for it, and figure 1 is an expander drawn when opened (issue 34)
    open_page(page, f"{app_url}/{PAGE}?ent_lo=22&ent_hi=22&ent_q=1024&ent_vary=none", charts=False,
              timeout_s=180)
    assert_clean(page)
    run = page.get_by_role("button", name=re.compile("Run sweep"))
    expect(run).to_be_visible()
    run.click()
    stop = page.get_by_test_id("stButton").get_by_role("button", name="Stop")  # not the header's Stop
    expect(stop).to_be_visible(timeout=60_000)
    expect(page.locator("[data-testid=stProgress]")).to_be_visible()
    screenshot(page, "entropy-running")
    stop.click()
    expect(page.get_by_text("The sweep was stopped")).to_be_visible(timeout=60_000)
    wait_idle(page)
    assert_clean(page)
    expect(page.get_by_role("button", name=re.compile("Run sweep"))).to_be_visible()


def test_entropy_bad_url_values_get_plain_messages(page: Page, app_url: str) -> None:
    open_page(page, f"{app_url}/{PAGE}?ent_lo=6&ent_hi=99&ent_d=0&ent_tau=-1&ent_s=nan&ent_vary=none"
                    "&ent_q=256", charts=False)
    warn = page.locator("[data-testid=stAlertContentWarning]")
    expect(warn.first).to_be_visible(timeout=60_000)
    wait_idle(page)
    assert page.locator("[data-testid=stException]").count() == 0
    text = " ".join(warn.all_inner_texts())
    for needle in ("ent_hi=99 is above its limit 30", "ent_d=0 is not one of", "ent_tau=-1.0 is below",
                   "ent_s must be a finite number"):
        assert needle in text, (needle, text)
    if max_sweep_n(page_device()) < 2**30:  # and 2^30 is above this device's cap: clamped again, said so
        info = " ".join(page.locator("[data-testid=stAlertContentInfo]").all_inner_texts())
        assert "above this device's cap" in info, info
    # 2^6 .. 2^24 at 256 rows (4.3 G logits) is long: it waits for Run instead of failing
    expect(page.get_by_role("button", name=re.compile("Run sweep"))).to_be_visible()
    screenshot(page, "entropy-bad-url", height=1000)
