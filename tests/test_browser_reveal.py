"""Real browser (issue 41, items 3 and 4): predict, then reveal on the Tour (a student answers, the lecturer's
presenter view counts it), and the exports: the chart's camera button writes a PNG and an SVG of the
presenter size (Playwright's download event), and the exported HTML files (a step as a slide, the page's
charts, a two-slide deck, the worksheet) open from file:// with the network blocked, their charts drawn with
as many traces as the figure has. Screenshots: test-artifacts/reveal-*.png."""

from __future__ import annotations

import re
import struct
from pathlib import Path

import plotly.graph_objects as go
import pytest
from playwright.sync_api import BrowserContext, Page, expect

from tests.browser_utils import ARTIFACTS, assert_clean, open_page, screenshot, wait_idle
from ui import export
from ui.views import tour as tour_view

pytestmark = pytest.mark.browser

VIEWPORT = {"width": 1280, "height": 720}


def offline(context: BrowserContext) -> list[str]:
    """Abort every http(s) request from this context; returns the URLs it tried."""
    tried: list[str] = []

    def block(route) -> None:  # noqa: ANN001
        tried.append(route.request.url)
        route.abort()

    context.route(re.compile(r"^https?://"), block)
    return tried


def drawn_traces(page: Page) -> list[int]:
    """Every drawn chart's trace count (each chart div with its .main-svg)."""
    return page.evaluate("() => Array.from(document.querySelectorAll('.js-plotly-plot'))"
                         ".filter(d => d.querySelector('.main-svg')).map(d => d.data.length)")


def open_file(context: BrowserContext, path: Path) -> tuple[Page, list[str]]:
    page = context.new_page()
    tried = offline(context)
    page.goto(path.resolve().as_uri())
    page.wait_for_selector(".main-svg", timeout=60_000)
    return page, tried


def png_size(path: Path) -> tuple[int, int]:
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n", head
    return struct.unpack(">II", head[16:24])


def download(page: Page, locator, folder: Path, name: str) -> Path:  # noqa: ANN001
    with page.expect_download(timeout=120_000) as info:
        locator.click()
    path = folder / name
    info.value.save_as(path)
    return path


def test_predict_then_reveal_and_the_class_counts(page: Page, app_url: str, context: BrowserContext) -> None:
    """A lecturer presents the step; a student predicts and reveals; the lecturer's counts redraw by themselves."""
    lecturer = context.new_page()
    lecturer.set_viewport_size(VIEWPORT)
    open_page(lecturer, f"{app_url}/Tour?tour=2&tour_predict=1&present=1", charts=False, timeout_s=180)
    lecturer.get_by_text("How the class answered: no answers yet").wait_for(timeout=180_000)
    assert_clean(lecturer)

    page.set_viewport_size(VIEWPORT)
    open_page(page, f"{app_url}/Tour?tour=2&tour_predict=1", charts=False, timeout_s=180)
    page.get_by_role("button", name="Reveal").wait_for(timeout=180_000)  # a first load may look idle early
    wait_idle(page)
    assert_clean(page)
    assert page.locator(".js-plotly-plot").count() == 0  # the chart waits for the reveal
    expect(page.get_by_text("How does the spread (std) of q·k grow with d?")).to_be_visible()
    assert page.get_by_text("How the class answered").count() == 0  # students see no counts
    screenshot(page, "reveal-1-question")
    page.get_by_text("like √d: std ≈ 16.0 at d = 256").click()
    page.get_by_role("button", name="Reveal").click()
    page.wait_for_selector(".js-plotly-plot", timeout=120_000)
    wait_idle(page)
    assert_clean(page)
    expect(page.locator("[data-testid=stAlertContentSuccess]")).to_contain_text("Answer: like √d")
    screenshot(page, "reveal-2-revealed")

    lecturer.get_by_text("How the class answered: 1 answer").wait_for(timeout=60_000)  # no reload
    expect(lecturer.locator("[data-testid=stTable] td").first).to_be_visible()
    wait_idle(lecturer)
    assert_clean(lecturer)
    cells = [c.strip() for c in lecturer.locator("[data-testid=stTable] td").all_inner_texts()]
    assert "1" in cells and "like √d: std ≈ 16.0 at d = 256" in cells, cells
    screenshot(lecturer, "reveal-3-lecturer")


def test_camera_button_writes_png_and_svg_at_presenter_size(page: Page, app_url: str, tmp_path: Path) -> None:
    page.set_viewport_size(VIEWPORT)
    open_page(page, f"{app_url}/Tour?tour=2", timeout_s=180)
    assert_clean(page)
    camera = page.locator(".js-plotly-plot .modebar-btn[data-title^='Download plot']").first
    expect(camera).to_be_visible()  # the modebar is shown without hovering
    png = download(page, camera, tmp_path, "chart.png")
    assert png_size(png) == export.PRESENTER_SIZE
    page.locator("[data-testid=stSidebar] summary", has_text="Export charts").click()
    page.locator("[data-testid=stSidebar] label", has_text="SVG").click()
    wait_idle(page)
    page.wait_for_selector(".js-plotly-plot", timeout=60_000)
    camera = page.locator(".js-plotly-plot .modebar-btn[data-title^='Download plot']").first
    svg = download(page, camera, tmp_path, "chart.svg").read_text()
    root = re.search(r"<svg[^>]*>", svg).group(0)
    w, h = export.PRESENTER_SIZE
    assert f'width="{w}"' in root and f'height="{h}"' in root, root
    screenshot(page, "reveal-4-modebar")


def test_exported_files_open_offline_with_their_charts(page: Page, app_url: str, context: BrowserContext,
                                                       tmp_path: Path) -> None:
    page.set_viewport_size(VIEWPORT)
    open_page(page, f"{app_url}/Tour?tour=6", timeout_s=180)
    assert_clean(page)
    live = drawn_traces(page)
    assert len(live) == 1 and live[0] > 1
    page.locator("[data-testid=stExpander] summary", has_text="Export: slides and worksheet").click()
    wait_idle(page)
    step = download(page, page.get_by_role("button", name="Step as slide (HTML)"), tmp_path, "step.html")
    sheet = download(page, page.get_by_role("button", name="Worksheet (HTML)"), tmp_path, "sheet.html")
    page.locator("[data-testid=stSidebar] summary", has_text="Export charts").click()
    charts = download(page, page.get_by_role("button", name="Charts as offline HTML"), tmp_path, "charts.html")
    for path in (step, charts):
        f, tried = open_file(context, path)
        f.wait_for_timeout(500)
        assert drawn_traces(f) == live, path.name
        assert not tried, tried  # nothing asked for the network
        f.screenshot(path=str(ARTIFACTS / f"reveal-file-{path.stem}.png"))
        f.close()
    text = sheet.read_text()
    assert text.count('class="q"') >= 8 and "<script" not in text
    assert f'href="{app_url}/Tour?tour=2&amp;tour_predict=1"' in text  # absolute links, in the step's state

    # a two-slide deck: arrow keys move, each slide's chart drawn when shown
    figs = (tour_view.memory_figure((256, 1024, 4096), [1e6, 1.6e7, 2.6e8], [1e5, 4e5, 1.6e6], 1024),
            export_figure())
    deck = tmp_path / "deck.html"
    deck.write_text(export.deck_html([export.Slide("one <b>", "a < b", "c", (figs[0],)),
                                      export.Slide("two", "d", "e", (figs[1],))]))
    d, tried = open_file(context, deck)
    assert drawn_traces(d) == [len(figs[0].data)]
    expect(d.locator("h1", has_text="one <b>")).to_be_visible()
    d.keyboard.press("ArrowRight")
    d.wait_for_function("() => document.querySelectorAll('.main-svg').length >= 4")
    expect(d.locator("h1", has_text="two")).to_be_visible()
    assert sorted(drawn_traces(d)) == sorted([len(figs[0].data), len(figs[1].data)])
    d.screenshot(path=str(ARTIFACTS / "reveal-file-deck.png"))
    assert not tried, tried


def export_figure() -> go.Figure:
    return go.Figure([go.Bar(x=["a", "b"], y=[1, 2]), go.Scatter(x=["a", "b"], y=[2, 1]),
                      go.Scatter(x=["a", "b"], y=[1.5, 1.5])])
