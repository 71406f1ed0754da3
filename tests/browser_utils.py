"""Playwright helpers for the real-browser tests (Chromium against `streamlit run`)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from playwright.sync_api import Page

ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = ROOT / "test-artifacts"
DOCS = ROOT / "docs"
# Debian's Chromium (never `playwright install`) and the flags this closed network needs; shared by
# tests/conftest.py and bench/ui.py.
CHROMIUM = os.environ.get("ATTNLAB_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
]

# A cheap fingerprint of every chart's data: changes whenever any trace is redrawn with new data.
FINGERPRINT_JS = """() => Array.from(document.querySelectorAll('.js-plotly-plot')).map(g =>
  (g.data || []).map(t => { const s = JSON.stringify(t.z || t.y || t.x || null) || '';
    return s.length + ':' + s.slice(0, 96) + s.slice(-96); }).join(';')).join('|')"""


HOST = "127.0.0.1"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


@contextmanager
def streamlit_server(log_name: str, *, start_timeout_s: float = 120.0, cwd: Path = ROOT,
                     command: tuple[str, ...] = ("serve.py",)) -> Iterator[str]:
    """`python serve.py` (`streamlit run app.py`, warmed) on a free loopback port, its output in
    test-artifacts/<log_name>;
    yields the base URL once /_stcore/health answers, stops the server on exit. ``cwd``: the checkout
    it serves (bench.ui's ``--before`` serves an older commit's worktree); ``command``: what follows
    the interpreter (bench.ui's floor: ``-m streamlit run bench/floor_app.py``)."""
    port = free_port()
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "STREAMLIT_BROWSER_GATHER_USAGE_STATS": "false"}
    ARTIFACTS.mkdir(exist_ok=True)
    with open(ARTIFACTS / log_name, "w") as log:
        proc = subprocess.Popen(
            [sys.executable, *command, "--server.port", str(port),
             "--server.headless", "true", "--server.address", HOST, "--server.fileWatcherType", "none"],
            cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT)
        url = f"http://{HOST}:{port}"
        try:
            deadline = time.monotonic() + start_timeout_s
            while True:
                try:
                    with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as r:
                        if r.status == 200:
                            break
                except OSError:
                    pass
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"streamlit did not start; see {ARTIFACTS / log_name}")
                time.sleep(0.3)
            yield url
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()


def url_path(script: str) -> str:
    """URL path of a page script: 'pages/1_Heatmaps.py' -> 'Heatmaps'."""
    stem = Path(script).stem
    head, _, rest = stem.partition("_")
    return rest if head.isdigit() and rest else stem


def wait_idle(page: Page, timeout_s: float = 90.0) -> None:
    """Wait until Streamlit has finished the current script run.

    Waits with ``page.wait_for_timeout``, not ``time.sleep``: Playwright's sync API hands over
    events (websocket frames, console messages) only while the caller is inside one of its calls,
    so a sleeping caller would see frames, and bench.ui would time-stamp them, up to 0.3 s late.
    """
    page.wait_for_selector("[data-testid=stApp]", timeout=timeout_s * 1000)
    deadline = time.monotonic() + timeout_s
    # The status widget shows "Running..." while the script runs.
    while time.monotonic() < deadline:
        running = page.locator("[data-testid=stStatusWidget]").count() > 0 and \
            page.locator("[data-testid=stStatusWidget]").is_visible()
        if not running:
            page.wait_for_timeout(300)
            if not (page.locator("[data-testid=stStatusWidget]").count() > 0 and
                    page.locator("[data-testid=stStatusWidget]").is_visible()):
                return
        page.wait_for_timeout(100)
    raise AssertionError("the page kept running")


def open_page(page: Page, url: str, *, charts: bool = True, timeout_s: float = 120.0) -> None:
    page.goto(url, timeout=timeout_s * 1000)
    if charts:
        page.wait_for_selector(".js-plotly-plot", timeout=timeout_s * 1000)
    wait_idle(page, timeout_s)


def open_expander(page: Page, title: str, timeout_s: float = 120.0) -> None:
    """Click the closed expander ``title`` in the main area and wait for the rerun that draws its content (a
    page computes and sends what such an expander holds only once it is opened, issue 34)."""
    summary = page.locator("[data-testid=stMain] [data-testid=stExpander] summary", has_text=title)
    assert summary.count() == 1, f"{summary.count()} expanders titled {title!r}"
    summary.click()
    page.wait_for_timeout(300)  # the click's rerun starts
    wait_idle(page, timeout_s)


def assert_clean(page: Page) -> None:
    """No exception box and no error alert on the page."""
    exc = page.locator("[data-testid=stException]")
    assert exc.count() == 0, exc.first.inner_text()
    err = page.locator("[data-testid=stAlertContentError]")
    assert err.count() == 0, err.first.inner_text()


def fingerprint(page: Page) -> str:
    return str(page.evaluate(FINGERPRINT_JS))


def slider(page: Page, label: str):
    """The range input of the slider whose label is ``label`` (a range slider's start thumb)."""
    box = page.locator("[data-testid=stSlider]").filter(
        has=page.locator("[data-testid=stWidgetLabel]", has_text=label))
    assert box.count() >= 1, f"no slider labelled {label!r}"
    return box.first.locator("input[type=range]").first


def nudge_and_time(page: Page, label: str, key: str = "ArrowRight", presses: int = 1,
                   timeout_s: float = 60.0) -> float:
    """Press a key on a slider and return seconds until some chart's data changed."""
    return nudge_times(page, label, key, presses, timeout_s)[0]


IDLE_CONFIRM_S = 0.3  # wait_idle looks twice, this far apart, before it calls the page settled


def nudge_times(page: Page, label: str, key: str = "ArrowRight", presses: int = 1,
                timeout_s: float = 60.0) -> tuple[float, float]:
    """Press a key on a slider: seconds until some chart's data changed, and until the page settled
    (the script run finished; wait_idle's confirmation pause not counted)."""
    before = fingerprint(page)
    thumb = slider(page, label)
    thumb.focus()
    t0 = time.perf_counter()
    for _ in range(presses):
        thumb.press(key)
    page.wait_for_function(f"() => ({FINGERPRINT_JS})() !== {before!r}", timeout=timeout_s * 1000,
                           polling=50)
    elapsed = time.perf_counter() - t0
    wait_idle(page)
    settled = time.perf_counter() - t0 - IDLE_CONFIRM_S
    return elapsed, max(elapsed, settled)


def screenshot(page: Page, name: str, *, height: int | None = None, docs: bool = True) -> Path:
    """Save a screenshot to test-artifacts/ (and docs/ when ATTNLAB_UPDATE_SCREENSHOTS=1 and ``docs``)."""
    ARTIFACTS.mkdir(exist_ok=True)
    if height is not None:
        page.set_viewport_size({"width": page.viewport_size["width"], "height": height})
        wait_idle(page)
        time.sleep(0.5)
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path))
    if docs and os.environ.get("ATTNLAB_UPDATE_SCREENSHOTS") == "1":
        DOCS.mkdir(exist_ok=True)
        page.screenshot(path=str(DOCS / f"{name}.png"))
    return path


def report(line: str) -> None:
    """Print a benchmark-style line (not an assertion) to the test output and a log file."""
    ARTIFACTS.mkdir(exist_ok=True)
    with open(ARTIFACTS / "browser-timings.txt", "a") as f:
        f.write(line + "\n")
    print(line)


def redraw_times(page: Page, label: str, moves: int = 5, timeout_s: float = 60.0) -> tuple[float, float]:
    """(first, median of the next ``moves``) seconds for a slider move to redraw a chart.

    The first move after a page load pays one-off costs in the browser; the median of the
    following moves (alternating right and left, so the value stays in range) is the
    steady-state answer time a presenter sees.
    """
    first = nudge_and_time(page, label, key="ArrowLeft", timeout_s=timeout_s)
    times = sorted(nudge_and_time(page, label, key="ArrowRight" if i % 2 == 0 else "ArrowLeft",
                                  timeout_s=timeout_s) for i in range(moves))
    return first, times[len(times) // 2]


# Per chart: its view, the margins its layout asks for and the ones Plotly drew it with (l, r, t, b).
MARGINS_JS = """() => Array.from(document.querySelectorAll('.js-plotly-plot')).map(g => {
  const m = g.layout.margin || {}, s = g._fullLayout._size;
  return [(g.layout.meta || {}).view || '', [m.l, m.r, m.t, m.b], [s.l, s.r, s.t, s.b].map(Math.round)]; })"""


def assert_drawn_at_their_margins(page: Page, views: set[str]) -> None:
    """The charts of ``views`` were drawn at the margins their layouts ask for: Plotly's automargin
    did not have to widen them for labels or a colour bar (and draw them a second time)."""
    drawn = page.evaluate(MARGINS_JS)
    assert {v for v, *_ in drawn} >= views, drawn
    for view, asked, got in drawn:
        if view in views:
            assert got == asked, (view, asked, got)


# The page position of a point of a chart: chart (by layout.meta.view), axis pair of a trace, data position.
POINT_JS = """([view, trace, fx, fy, ix, iy]) => {
  const g = Array.from(document.querySelectorAll('.js-plotly-plot'))
    .find(el => (el.layout.meta || {}).view === view);
  const t = g.data[trace];
  const xa = g._fullLayout[(t.xaxis || 'x').replace('x', 'xaxis')];
  const ya = g._fullLayout[(t.yaxis || 'y').replace('y', 'yaxis')];
  const r = g.getBoundingClientRect();
  const x = ix === null ? xa._offset + xa._length * fx : xa._offset + xa.l2p(ix);
  const y = iy === null ? ya._offset + ya._length * fy : ya._offset + ya.l2p(iy);
  return [r.x + x, r.y + y];
}"""


def show_chart(page: Page, view: str) -> None:
    """Scroll the chart ``view`` into the window (a real click needs it on screen)."""
    page.locator("[data-testid=stPlotlyChart]").filter(
        has=page.locator(".js-plotly-plot")).nth(chart_views(page).index(view)).scroll_into_view_if_needed()
    page.wait_for_timeout(400)


def chart_views(page: Page) -> list[str]:
    return page.evaluate("() => Array.from(document.querySelectorAll('.js-plotly-plot'))"
                         ".map(el => (el.layout.meta || {}).view)")


def chart_point(page: Page, view: str, trace: int, *, fx: float = 0.5, fy: float = 0.5, ix: float | None = None,
                iy: float | None = None) -> tuple[float, float]:
    """The page position of a point of the chart ``view``: data position ``ix`` / ``iy`` on the axes of
    trace ``trace``, or the fractions ``fx`` / ``fy`` of their length where a data position is None."""
    x, y = page.evaluate(POINT_JS, [view, trace, fx, fy, ix, iy])
    return float(x), float(y)
