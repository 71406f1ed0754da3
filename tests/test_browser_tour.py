"""Real browser: the Tour walked with Next from step 1 to the end, in normal and in presenter mode: every step
clean, on one screen at 1280x720 and at 1920x1080 (the lesson, every chart with its legend and the step's controls
end above the viewport's bottom edge, issue 41), the step in the URL, a screenshot of each
(docs/tour-<n>-<step>[-present].png with ATTNLAB_UPDATE_SCREENSHOTS=1); Previous; and "Open this in full"."""

from __future__ import annotations

import re
import time

import pytest
from playwright.sync_api import Page, expect

from tests.browser_utils import assert_clean, open_page, report, screenshot, wait_idle
from ui.tour import STEPS, Step

pytestmark = pytest.mark.browser

VIEWPORT = {"width": 1280, "height": 720}
SCREENS = (VIEWPORT, {"width": 1920, "height": 1080})  # a 720p projector and a full-HD one
VISIBLE_PX = 120  # the chart starts at least this far above the bottom edge (as tests/test_browser_layout.py)

# The bottom edge (px from the top of the viewport, the page scrolled to its top) of each part of a step: every
# chart, every legend, the lesson and the step's controls (Streamlit gives a keyed element the class st-key-<key>).
BOTTOMS_JS = """(keys) => {
  const main = document.querySelector('[data-testid=stMain]');
  if (main) main.scrollTo(0, 0);
  window.scrollTo(0, 0);
  const bottom = (els) => els.length ? Math.max(...els.map(e => e.getBoundingClientRect().bottom)) : null;
  const all = (sel) => Array.from(document.querySelectorAll(sel));
  return {chart: bottom(all('.js-plotly-plot')), legend: bottom(all('.js-plotly-plot g.legend')),
          lesson: bottom(all('.st-key-tour_lesson')),
          controls: bottom(keys.flatMap(k => all('.st-key-' + k)).concat(all('.st-key-tour_next')))};
}"""


def bottoms(page: Page, step: Step) -> dict[str, float | None]:
    """Where the parts of the shown step end, in px from the top of the viewport."""
    return page.evaluate(BOTTOMS_JS, [p.key for p in step.params])


def fit_rows(page: Page, i: int, step: Step, present: bool) -> list[tuple[str, int, dict]]:
    """The step measured at both screen sizes (the viewport resized, charts redrawn to its width), back at
    1280x720 afterwards."""
    rows = []
    for screen in SCREENS:
        page.set_viewport_size(screen)
        page.wait_for_timeout(700)  # Plotly redraws a chart to its new width
        rows.append((f"step {i:2d} {step.key:<12s} {'present' if present else 'normal '} "
                     f"{screen['width']}x{screen['height']}", screen["height"], bottoms(page, step)))
    page.set_viewport_size(VIEWPORT)
    page.wait_for_timeout(400)
    return rows


def assert_fits(rows: list[tuple[str, int, dict]], say: bool = True) -> None:
    """Every part of every step ends above the viewport's bottom edge; all rows reported, then all failures."""
    bad = []
    for name, height, got in rows:
        if say:
                report(f"tour fit {name}: "
                   + ", ".join(f"{k} {'-' if v is None else f'{v:.0f}'}" for k, v in got.items())
                   + f" (viewport {height})")
        missing = [k for k in ("chart", "lesson", "controls") if got[k] is None]
        over = {k: round(v) for k, v in got.items() if v is not None and v > height}
        if missing or over:
            bad.append(f"{name}: {over} below {height} px" + (f", {missing} not found" if missing else ""))
    assert not bad, "\n".join(bad)


def chart_top(page: Page) -> float:
    return float(page.locator(".js-plotly-plot").first.bounding_box()["y"])


def walk(page: Page, app_url: str, present: bool) -> None:
    page.set_viewport_size(VIEWPORT)
    open_page(page, f"{app_url}/Tour" + ("?present=1" if present else ""), timeout_s=180)
    fits: list[tuple[str, int, dict]] = []
    for i, step in enumerate(STEPS, start=1):
        assert_clean(page)
        expect(page.get_by_role("heading", name=f"Tour · {step.title}").first).to_be_visible()
        if i > 1:
            assert re.search(rf"[?&]tour={i}(&|$)", page.url), page.url
        if present:
            assert "present=1" in page.url
            sizes = page.evaluate("() => Array.from(document.querySelectorAll('.js-plotly-plot .xtick text'))"
                                  ".map(t => parseFloat(getComputedStyle(t).fontSize))")
            assert not sizes or min(sizes) >= 16, (step.key, sizes)
        top = chart_top(page)
        assert top < VIEWPORT["height"] - VISIBLE_PX, f"step {i} ({step.key}): chart starts at {top:.0f} px"
        fits += fit_rows(page, i, step, present)
        screenshot(page, f"tour-{i:02d}-{step.key}" + ("-present" if present else ""))
        page.set_viewport_size(SCREENS[1])
        page.wait_for_timeout(700)
        screenshot(page, f"tour-{i:02d}-{step.key}" + ("-present" if present else "") + "-1080p", docs=False)
        page.set_viewport_size(VIEWPORT)
        page.wait_for_timeout(400)
        if i == len(STEPS):
            expect(page.get_by_role("button", name="Next →")).to_be_disabled()
            break
        t0 = time.perf_counter()
        page.get_by_role("button", name="Next →").click()
        page.wait_for_function(f"() => location.search.includes('tour={i + 1}')", timeout=120_000)
        wait_idle(page, 900)  # the real-decoder step loads SmolLM2 the first time (minutes on a loaded machine)
        page.wait_for_selector(".js-plotly-plot", timeout=120_000)
        report(f"tour next {i}->{i + 1}{' (presenter)' if present else ''}: {time.perf_counter() - t0:.2f} s "
               "(loaded machine: not a speed measurement)")
    assert_fits(fits)


def test_fit_check_can_fail() -> None:
    """A part ending below the viewport, or not found, is a failure; one that ends inside it is not."""
    inside = {"chart": 700.0, "legend": 690.0, "lesson": 300.0, "controls": 200.0}
    assert_fits([("inside", 720, inside)], say=False)
    with pytest.raises(AssertionError, match="chart"):
        assert_fits([("below", 720, {**inside, "chart": 721.0})], say=False)
    with pytest.raises(AssertionError, match="not found"):
        assert_fits([("no controls", 720, {**inside, "controls": None})], say=False)


def test_walk_every_step_with_next(page: Page, app_url: str) -> None:
    walk(page, app_url, present=False)


def test_walk_every_step_in_presenter_mode(page: Page, app_url: str) -> None:
    walk(page, app_url, present=True)


def test_previous_and_open_this_in_full(page: Page, app_url: str) -> None:
    page.set_viewport_size(VIEWPORT)
    open_page(page, f"{app_url}/Tour?tour=2&tour_d=64", timeout_s=180)
    assert_clean(page)
    page.get_by_role("button", name="← Previous").click()
    page.wait_for_function("() => !location.search.includes('tour=2')", timeout=120_000)
    wait_idle(page, 120)
    expect(page.get_by_role("heading", name=f"Tour · {STEPS[0].title}").first).to_be_visible()
    page.get_by_role("link", name="Open this in full").click()
    page.wait_for_url(re.compile(r"/Heatmaps\?"), timeout=120_000)
    page.wait_for_selector(".js-plotly-plot", timeout=180_000)
    wait_idle(page, 180)
    assert_clean(page)
    for part in ("L=12", "S=12", "heads=1", "kv=1"):
        assert part in page.url, page.url


def test_the_jacobian_step_at_256_keys_draws_and_opens_in_full(page: Page, app_url: str) -> None:
    """F1: /Tour?tour=4&tour_keys=256 was an error box with no "Open this in full"; now it draws 1,000 rows,
    says so, and its link opens the Saturation page at the same 1,000 rows, also clean."""
    page.set_viewport_size(VIEWPORT)
    step = [s.key for s in STEPS].index("jacobian") + 1
    open_page(page, f"{app_url}/Tour?tour={step}&tour_keys=256", timeout_s=180)
    assert_clean(page)
    expect(page.get_by_text(re.compile(r"^1,000 rows of 256 logits")).first).to_be_visible()
    screenshot(page, "tour-jacobian-256")
    page.get_by_role("link", name="Open this in full").click()
    page.wait_for_url(re.compile(r"/Saturation_and_gradients\?"), timeout=120_000)
    page.wait_for_selector(".js-plotly-plot", timeout=180_000)
    wait_idle(page, 180)
    assert_clean(page)
    for part in ("sat_keys=256", "sat_trials=1000"):
        assert part in page.url, page.url


@pytest.mark.parametrize("present", [False, True], ids=["normal", "present"])
def test_real_sink_step_from_its_url(page: Page, app_url: str, present: bool) -> None:
    """Step 9 alone (SmolLM2: its sink grid, the moved sink, the lesson), opened from its URL: clean, the chart
    on the first screen, the lesson whole; its screenshot without walking the other steps."""
    i = next(n for n, s in enumerate(STEPS, start=1) if s.key == "real_sink")
    page.set_viewport_size(VIEWPORT)
    open_page(page, f"{app_url}/Tour?tour={i}" + ("&present=1" if present else ""), timeout_s=900)
    wait_idle(page, 900)
    page.wait_for_selector(".js-plotly-plot", timeout=120_000)
    assert_clean(page)
    expect(page.get_by_role("heading", name=f"Tour · {STEPS[i - 1].title}").first).to_be_visible()
    assert len(page.locator(".js-plotly-plot").all()) == 2
    top = chart_top(page)
    assert top < VIEWPORT["height"] - VISIBLE_PX, f"step {i}: chart starts at {top:.0f} px"
    screenshot(page, f"tour-{i:02d}-real_sink" + ("-present" if present else ""))
