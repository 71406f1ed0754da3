"""Real-browser tests of real text in front (issue 11): real mouse clicks on a head thumbnail, a
layer x head tile and a row of the weight map select that head or query token; on Heatmaps such a click
reruns only the fragment that draws the selection (issue 34)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import pytest
from playwright.sync_api import Page, expect
from streamlit.proto.BackMsg_pb2 import BackMsg
from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

from tests.browser_utils import (
    assert_clean,
    assert_drawn_at_their_margins,
    chart_point,
    open_expander,
    open_page,
    screenshot,
    show_chart,
    slider,
    wait_idle,
)

pytestmark = pytest.mark.browser

VIEWPORT = {"width": 1280, "height": 720}

META_JS = """(view) => JSON.stringify(Array.from(document.querySelectorAll('.js-plotly-plot'))
  .find(el => (el.layout.meta || {}).view === view).layout.meta)"""
Z_JS = """(view) => JSON.stringify(Array.from(document.querySelectorAll('.js-plotly-plot'))
  .find(el => (el.layout.meta || {}).view === view).data[0].z).slice(0, 400)"""


def click_at(page: Page, view: str, trace: int, *, fx: float = 0.5, fy: float = 0.5, ix: float | None = None,
             iy: float | None = None) -> None:
    show_chart(page, view)
    x, y = chart_point(page, view, trace, fx=fx, fy=fy, ix=ix, iy=iy)
    page.mouse.move(x, y)
    page.wait_for_timeout(300)
    page.mouse.click(x, y)


def test_heatmaps_click_a_thumbnail_then_a_row(page: Page, app_url: str) -> None:
    page.set_viewport_size(VIEWPORT)
    open_page(page, f"{app_url}/Heatmaps?rt_src=real", timeout_s=180)
    assert_drawn_at_their_margins(page, {"rt-weights"})  # word-piece token labels
    assert_clean(page)
    expect(page.get_by_text("all-MiniLM-L6-v2 · layer 0 · head 0")).to_be_visible()
    before = page.evaluate(Z_JS, "rt-weights")
    # thumbnail of head 4 (trace 4 is its heatmap), clicked off-centre
    click_at(page, "rt-heads", 4, fx=0.3, fy=0.7)
    page.wait_for_url("**rt_head=4**", timeout=30_000)
    wait_idle(page)
    assert_clean(page)
    expect(page.get_by_text("all-MiniLM-L6-v2 · layer 0 · head 4")).to_be_visible()
    assert '"selected":4' in page.evaluate(META_JS, "rt-heads")
    assert page.evaluate(Z_JS, "rt-weights") != before  # the big map redrew with head 4
    assert slider(page, "Head").input_value() == "4"  # the slider follows the click
    screenshot(page, "realtext-select-heatmaps-thumbnails")
    # a row of the weight map: query 6
    strip_before = page.locator(".attn-strip").first.inner_html()
    click_at(page, "rt-weights", 0, fx=0.5, iy=6)
    page.wait_for_url("**rt_tok=6**", timeout=30_000)
    wait_idle(page)
    assert_clean(page)
    assert '"selected":6' in page.evaluate(META_JS, "rt-weights")
    strip = page.locator(".attn-strip").first
    assert strip.inner_html() != strip_before
    assert "outline:2px" in strip.locator('[data-j="6"]').get_attribute("style")
    expect(page.get_by_role("heading", name="Token 6:")).to_be_visible()
    screenshot(page, "realtext-select-heatmaps-map")
    strip.scroll_into_view_if_needed()
    page.wait_for_timeout(400)
    title = strip.locator('[data-j="0"]').get_attribute("title")
    assert title.startswith("0: [CLS], weight ")  # hover shows the weight
    screenshot(page, "realtext-select-heatmaps-token")


@dataclass
class Runs:
    """The script runs a tab asks for and gets, read off Streamlit's websocket: the fragment id of each
    rerun request ('' = the whole page), the fragment id of each element sent ('' = drawn by the page
    itself, outside every fragment) and how each run finished."""

    asked: list[str] = field(default_factory=list)
    drawn: list[str] = field(default_factory=list)
    finished: list[str] = field(default_factory=list)

    def attach(self, page: Page) -> None:
        page.on("websocket", lambda ws: (ws.on("framesent", self._sent), ws.on("framereceived", self._got)))

    def clear(self) -> None:
        for seen in (self.asked, self.drawn, self.finished):
            seen.clear()

    def _sent(self, payload: str | bytes) -> None:
        msg = BackMsg()
        if isinstance(payload, bytes) and _parses(msg, payload) and msg.WhichOneof("type") == "rerun_script":
            self.asked.append(msg.rerun_script.fragment_id)

    def _got(self, payload: str | bytes) -> None:
        msg = ForwardMsg()
        if not (isinstance(payload, bytes) and _parses(msg, payload)):
            return
        kind = msg.WhichOneof("type")
        if kind == "delta":
            self.drawn.append(msg.delta.fragment_id)
        elif kind == "script_finished":
            self.finished.append(ForwardMsg.ScriptFinishedStatus.Name(msg.script_finished))


def _parses(msg: BackMsg | ForwardMsg, payload: bytes) -> bool:
    try:
        msg.ParseFromString(payload)
    except Exception:  # noqa: BLE001 - another kind of frame
        return False
    return True


def assert_fragment_run(runs: Runs) -> None:
    """The click asked for a fragment rerun and got one: every element sent back belongs to a fragment,
    and no whole-page run finished."""
    assert runs.asked and all(runs.asked), runs.asked  # every rerun request names a fragment
    assert runs.drawn and all(runs.drawn), runs.drawn
    assert "FINISHED_FRAGMENT_RUN_SUCCESSFULLY" in runs.finished, runs.finished
    assert "FINISHED_SUCCESSFULLY" not in runs.finished, runs.finished


def test_heatmaps_clicks_rerun_only_the_selection_fragment(page: Page, app_url: str) -> None:
    """Issue 34: a click on a head thumbnail reruns the fragment that draws the selection, and a click on a
    row of the map only the fragment inside it (the map and the token's views), never the page; the map,
    the Head slider and the Query token box follow, the URL says what was clicked, and that URL opened
    afresh shows the same view."""
    runs = Runs()
    runs.attach(page)
    page.set_viewport_size(VIEWPORT)
    open_page(page, f"{app_url}/Heatmaps?rt_src=real", timeout_s=180)
    assert "" in runs.drawn and "FINISHED_SUCCESSFULLY" in runs.finished  # the page's own run, as a control
    runs.clear()
    click_at(page, "rt-heads", 5, fx=0.4, fy=0.6)
    page.wait_for_url("**rt_head=5**", timeout=30_000)
    wait_idle(page)
    assert_clean(page)
    assert_fragment_run(runs)
    head_fragment = runs.asked[0]
    expect(page.get_by_text("all-MiniLM-L6-v2 · layer 0 · head 5")).to_be_visible()
    assert slider(page, "Head").input_value() == "5"
    runs.clear()
    click_at(page, "rt-weights", 0, fx=0.5, iy=4)
    page.wait_for_url("**rt_tok=4**", timeout=30_000)
    wait_idle(page)
    assert_clean(page)
    assert_fragment_run(runs)
    token_fragment = runs.asked[0]
    assert token_fragment != head_fragment and set(runs.drawn) == {token_fragment}  # the inner one alone
    assert '"selected":4' in page.evaluate(META_JS, "rt-weights")
    expect(page.get_by_role("heading", name="Token 4:")).to_be_visible()
    box = page.get_by_test_id("stSidebar").get_by_role("combobox", name="Query token")
    assert box.input_value().startswith("4 · "), box.input_value()  # the sidebar box follows the click
    url = page.url
    assert "rt_src=real" in url and "rt_head=5" in url and "rt_tok=4" in url, url
    # the copied link
    open_page(page, url, timeout_s=180)
    assert_clean(page)
    expect(page.get_by_text("all-MiniLM-L6-v2 · layer 0 · head 5")).to_be_visible()
    assert '"selected":4' in page.evaluate(META_JS, "rt-weights")
    assert '"selected":5' in page.evaluate(META_JS, "rt-heads")


def test_sinks_click_a_layer_head_tile(page: Page, app_url: str) -> None:
    page.set_viewport_size(VIEWPORT)
    open_page(page, f"{app_url}/Attention_sinks?snk_view=model", timeout_s=180)
    assert_clean(page)
    m = json.loads(page.evaluate(META_JS, "snk-grid"))
    tr, tc = m["tile_rows"], m["tile_cols"]
    # tile (layer 3, head 7), a cell a third of the way into it
    click_at(page, "snk-grid", 0, ix=7 * tc + (tc - 1) / 3, iy=3 * tr + (tr - 1) / 2)
    page.wait_for_url("**snk_layer=3**", timeout=30_000)
    wait_idle(page)
    assert "snk_head=7" in page.url, page.url
    assert_clean(page)
    assert json.loads(page.evaluate(META_JS, "snk-grid"))["selected"] == [3, 7]
    expect(page.get_by_text("all-MiniLM-L6-v2 · layer 3 · head 7")).to_be_visible()
    screenshot(page, "realtext-select-sinks-grid")


def test_heatmaps_synthetic_click_a_head_thumbnail(page: Page, app_url: str) -> None:
    """Synthetic source: a click on thumbnail 2 of "All heads" shows head 2 in the maps above."""
    page.set_viewport_size(VIEWPORT)
    open_page(page, f"{app_url}/Heatmaps")
    assert_clean(page)
    assert page.locator(".js-plotly-plot").count() == 2  # the grid is drawn once its expander opens (issue 34)
    open_expander(page, "All heads (click one to show it above)")
    page.wait_for_function("() => Array.from(document.querySelectorAll('.js-plotly-plot'))"
                           ".some(el => (el.layout.meta || {}).view === 'heads')", timeout=60_000)
    assert '"selected":0' in page.evaluate(META_JS, "heads")
    before = page.evaluate(Z_JS, "weights")
    click_at(page, "heads", 2, fx=0.6, fy=0.4)  # trace 2: head 2's heatmap
    page.wait_for_url("**head=2**", timeout=30_000)
    wait_idle(page)
    assert_clean(page)
    assert '"selected":2' in page.evaluate(META_JS, "heads")
    assert slider(page, "Selected head").input_value() == "2"
    assert page.evaluate(Z_JS, "weights") != before  # the head's own map redrew
