"""Speed a user feels (issue 11): first render and slider redraws, measured in a real browser.

Starts ``streamlit run app.py`` on a free loopback port and headless Chromium (Playwright, the
Debian build at ``ATTNLAB_CHROMIUM``, as the browser tests). For every page it prints

* **first render**: a new tab (fresh browser context: nothing cached) navigates to the page's URL;
  seconds until the first chart is drawn and until the page settled (the script run finished).
  The median of ``--opens`` new tabs, the very first one (a cold server: nothing cached), and one
  tab of a browser that has opened the page before (its HTTP and code caches warm);
* **slider**: for each default-view slider named in the issue, seconds from the key press on the
  slider to *chart updated* (some chart's data changed) and to *page settled*; one move to warm up,
  then the median of ``--moves`` one-step moves to values not shown before (rightwards, or towards
  the cheaper end), so every answer is computed, not served from a cache;

at default and at the largest settings, and the first render of a 512-token real-model view.

Beside each number: the target (slider -> chart <= 0.5 s and -> settled <= 1.0 s at default
settings; first render <= 5 s) and PASS / over. What dominates is read off Streamlit's own
websocket frames (Playwright sees them): *send* is key press -> the rerun message leaves the
browser (the slider's own debounce), *script* is that message -> ``script_finished`` as Chromium
hands it over (the Python script run, server side, plus however long the page was too busy drawing
to take the message: on a page that redraws charts the server has often finished 0.1-0.3 s
earlier), *after* is ``script_finished`` -> settled (the browser drawing what it got); for a first
render *load* is navigation -> the first rerun message (HTML, the JS bundle, the websocket).
*charts KB* is the Plotly JSON the run sent (charts whose message the browser already had are
sent as a reference and count 0).

A benchmark, not an assertion: prints, never fails on a number. Takes several minutes on two
cores (``make bench-ui``; ``make bench`` leaves it out).

Run:  python -m bench.ui [--opens 3] [--moves 4] [--only Heatmaps,Sinks]
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import sys
import time
import urllib.parse
import urllib.request
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path

from playwright.sync_api import Browser, Page, sync_playwright
from streamlit.proto.BackMsg_pb2 import BackMsg
from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

from tests.browser_utils import (
    CHROMIUM,
    CHROMIUM_ARGS,
    FINGERPRINT_JS,
    IDLE_CONFIRM_S,
    slider,
    streamlit_server,
    wait_idle,
)

ROOT = Path(__file__).resolve().parents[1]
SLIDER_CHART_S, SLIDER_SETTLED_S, FIRST_RENDER_S = 0.5, 1.0, 5.0  # issue 11's targets
MOVE_TIMEOUT_S = 120.0  # a move still changing nothing after this long is left blank
# A text of more than 512 MiniLM tokens (cut to 512 by the page): the largest real-model view.
LONG_TEXT = " ".join(["When a head has nothing useful to read, softmax still makes it spend all of its "
                      "attention somewhere, often on the first token or on punctuation."] * 24)


@dataclass(frozen=True)
class View:
    """A page at some settings and the sliders moved on it."""

    page: str
    setting: str  # "default", "largest", ...
    path: str
    query: str = ""
    sliders: tuple[str, ...] = ()
    charts: bool = True  # False: its sliders change no chart (only "settled" is measured for them)
    opens: int | None = None  # new tabs for the first render (None: --opens)


VIEWS = (
    View("Heatmaps", "default", "Heatmaps", "", ("Queries L",)),
    View("Heatmaps", "largest", "Heatmaps", "L=1023&S=1024&heads=16&kv=16&dk=1024", ("Queries L",), opens=1),
    View("Entropy", "default", "Entropy_vs_length", "", ("Sequence lengths n", "Head dim d")),
    View("Saturation", "Why √d", "Saturation_and_gradients", "", ("<Head dim d",)),
    # the most samples (10^6) at the largest d the page accepts for them (n d <= 33.6M products:
    # d = 32; at the default d = 64 it refuses them with a message), moved towards smaller d
    View("Saturation", "Why √d largest", "Saturation_and_gradients", "sat_n=1000000&sat_ns=4000&sat_d=32",
         ("<Head dim d",), opens=1),
    View("Saturation", "Saturation tab", "Saturation_and_gradients", "sat_tab=Saturation",
         ("d (the scaling is √d)", "Entries n in the row")),
    View("Saturation", "Gradients tab", "Saturation_and_gradients", "sat_tab=Gradients",
         ("<Keys n per row", "<Largest d")),
    View("Sinks", "lab", "Attention_sinks", "", ("Sink strength s (its logit)", "Real tokens n")),
    View("Sinks", "lab largest", "Attention_sinks", "snk_n=1024", ("Sink strength s (its logit)",), opens=1),
    View("Sinks", "real model", "Attention_sinks", "snk_view=model", ("Layer",)),
    View("Sinks", "real model 512 tokens", "Attention_sinks",
         "snk_view=model&snk_text=" + urllib.parse.quote(LONG_TEXT), ("Layer",), opens=2),
    View("Sinks", "learned here", "Attention_sinks", "snk_view=learned", ("Tokens (BOS included)",)),
    View("Kernels", "default", "Kernels", "", ("<Head dim E",)),
    View("Training lab", "default", "Training_lab", "", ("Steps per run",), charts=False),
    View("Evidence", "default", "Evidence", ""),  # no slider: its first render (issue 24: under 5 s)
)


# --------------------------------------------------------------------------- server
def server() -> AbstractContextManager[str]:
    """`streamlit run app.py` on a free loopback port (as tests/conftest.py's app_url); its URL."""
    return streamlit_server("bench-ui-streamlit.log")


# --------------------------------------------------------------------------- websocket frames
@dataclass
class Frames:
    """Streamlit's websocket traffic of one tab, time-stamped as Playwright hands it over."""

    reruns: list[float] = field(default_factory=list)  # BackMsg.rerun_script sent
    finished: list[float] = field(default_factory=list)  # ForwardMsg.script_finished received (not early)
    chart_bytes: list[tuple[float, int]] = field(default_factory=list)  # plotly specs received

    def attach(self, page: Page) -> None:
        page.on("websocket", lambda ws: (ws.on("framesent", self._sent), ws.on("framereceived", self._got)))

    def _sent(self, payload: str | bytes) -> None:
        if isinstance(payload, bytes):
            msg = BackMsg()
            try:
                msg.ParseFromString(payload)
            except Exception:  # noqa: BLE001 - not a BackMsg: ignore
                return
            if msg.WhichOneof("type") == "rerun_script":
                self.reruns.append(time.perf_counter())

    def _got(self, payload: str | bytes) -> None:
        if not isinstance(payload, bytes):
            return
        now = time.perf_counter()
        msg = ForwardMsg()
        try:
            msg.ParseFromString(payload)
        except Exception:  # noqa: BLE001
            return
        kind = msg.WhichOneof("type")
        if kind == "script_finished" and msg.script_finished != ForwardMsg.FINISHED_EARLY_FOR_RERUN:
            self.finished.append(now)
        elif kind == "delta" and msg.delta.WhichOneof("type") == "new_element" \
                and msg.delta.new_element.WhichOneof("type") == "plotly_chart":
            self.chart_bytes.append((now, len(msg.delta.new_element.plotly_chart.spec)))

    def split(self, t0: float, end: float) -> tuple[float, float, int, int]:
        """(t0 -> first rerun sent, that -> last script_finished before ``end``, charts, KB sent)."""
        sent = [t for t in self.reruns if t0 <= t <= end]
        done = [t for t in self.finished if t0 <= t <= end + 0.5]
        charts = [b for t, b in self.chart_bytes if t0 <= t <= end + 0.5]
        if not sent or not done:
            return float("nan"), float("nan"), len(charts), sum(charts) // 1024
        return sent[0] - t0, done[-1] - sent[0], len(charts), sum(charts) // 1024


# --------------------------------------------------------------------------- measurements
@dataclass
class Sample:
    chart: float  # seconds to chart drawn / updated (nan: no chart)
    settled: float
    send: float  # press -> rerun sent (first render: navigation -> rerun sent = load)
    script: float  # rerun sent -> script_finished
    charts: int
    kb: int

    @property
    def after(self) -> float:
        return self.settled - self.send - self.script


def _median(samples: list[Sample]) -> Sample:
    def med(xs: list[float]) -> float:
        xs = [x for x in xs if x == x]
        return statistics.median(xs) if xs else float("nan")
    return Sample(med([s.chart for s in samples]), med([s.settled for s in samples]),
                  med([s.send for s in samples]), med([s.script for s in samples]),
                  round(med([s.charts for s in samples])), round(med([s.kb for s in samples])))


CHART_DRAWN_JS = ("() => Array.from(document.querySelectorAll('.js-plotly-plot'))"
                  ".some(g => (g.data || []).length)")


def first_render(browser: Browser, url: str, *, returning: bool = False) -> Sample:
    """A new tab opens ``url``: to the first chart drawn and to settled. Nothing is cached in the
    browser, unless ``returning`` (the browser opened the page once before: its HTTP and code caches
    hold Streamlit's and Plotly's JavaScript, as for a student who has used the app before)."""
    ctx = browser.new_context(viewport={"width": 1280, "height": 720})
    if returning:
        before = ctx.new_page()
        before.goto(url, timeout=300_000)
        before.wait_for_function(CHART_DRAWN_JS, timeout=300_000, polling=50)
        wait_idle(before, 300)
        before.close()
    page = ctx.new_page()
    frames = Frames()
    frames.attach(page)
    try:
        t0 = time.perf_counter()
        page.goto(url, wait_until="commit", timeout=300_000)
        page.wait_for_function(CHART_DRAWN_JS, timeout=300_000, polling=50)
        chart = time.perf_counter() - t0
        wait_idle(page, 300)
        settled = time.perf_counter() - t0 - IDLE_CONFIRM_S
        load, script, n, kb = frames.split(t0, t0 + settled)
        return Sample(chart, max(settled, chart), load, script, n, kb)
    finally:
        ctx.close()


def move(page: Page, frames: Frames, label: str, key: str, charts: bool, presses: int = 1) -> Sample:
    """Press ``key`` ``presses`` times on the slider ``label``: to some chart's data changed and to
    settled. A run that finishes without changing a chart (a refused size, say) leaves *chart* blank."""
    before = page.evaluate(FINGERPRINT_JS)
    thumb = slider(page, label)
    thumb.focus()
    t0 = time.perf_counter()
    for _ in range(presses):
        thumb.press(key)
    chart = float("nan")
    deadline = t0 + MOVE_TIMEOUT_S
    while time.perf_counter() < deadline:
        if charts and page.evaluate(FINGERPRINT_JS) != before:
            chart = time.perf_counter() - t0
            break
        done = [t for t in frames.finished if t > t0]
        if done and time.perf_counter() - done[-1] > (1.0 if charts else 0.0):
            break  # the run finished (and, for charts, a second passed) without a chart change
        page.wait_for_timeout(20)
    wait_idle(page, 300)
    settled = max(time.perf_counter() - t0 - IDLE_CONFIRM_S, chart if chart == chart else 0.0)
    send, script, n, kb = frames.split(t0, t0 + settled)
    return Sample(chart, settled, send, script, n, kb)


def _at_end(page: Page, label: str, key: str) -> bool:
    """Whether pressing ``key`` would leave the slider where it is (its thumb at that end)."""
    v, lo, hi = slider(page, label).evaluate("e => [Number(e.value), Number(e.min), Number(e.max)]")
    return v >= hi if key == "ArrowRight" else v <= lo


def slider_moves(browser: Browser, url: str, view: View, moves: int) -> dict[str, Sample]:
    """Per slider: one warm-up move, then the median of ``moves`` moves, one step each, in one
    direction (rightwards, or leftwards for a label written ``<label``, towards the cheaper end; back
    at the slider's end), so each answer is computed for a value not shown before, not found in a
    cache."""
    ctx = browser.new_context(viewport={"width": 1500, "height": 1000})
    page = ctx.new_page()
    frames = Frames()
    frames.attach(page)
    out: dict[str, Sample] = {}
    try:
        page.goto(url, timeout=300_000)
        if view.charts:
            page.wait_for_function(CHART_DRAWN_JS, timeout=300_000, polling=50)
        else:
            page.wait_for_selector("[data-testid=stSlider]", timeout=300_000)
        wait_idle(page, 300)
        for name in view.sliders:
            label = name.lstrip("<")
            key = "ArrowLeft" if name.startswith("<") else "ArrowRight"
            samples = []
            for _ in range(moves + 1):  # the first move pays one-off costs in the browser: left out
                if _at_end(page, label, key):
                    key = "ArrowLeft" if key == "ArrowRight" else "ArrowRight"
                samples.append(move(page, frames, label, key, view.charts))
            out[label] = _median(samples[1:])
    finally:
        ctx.close()
    return out


# --------------------------------------------------------------------------- the table
def _s(x: float) -> str:
    return "     -" if x != x else f"{x:6.2f}"


def _verdict(values: list[tuple[float, float | None]]) -> str:
    checked = [(v, t) for v, t in values if t is not None and v == v]
    if not checked:
        return ""
    return "PASS" if all(v <= t for v, t in checked) else "over"


def line(what: str, s: Sample, chart_target: float | None, settled_target: float | None,
         first_col: str = "send") -> str:
    tc = f"<= {chart_target:.1f}" if chart_target is not None else "     -"
    ts = f"<= {settled_target:.1f}" if settled_target is not None else "     -"
    verdict = _verdict([(s.chart, chart_target), (s.settled, settled_target)])
    return (f"  {what:<44} {_s(s.chart)} s {tc:>6}   {_s(s.settled)} s {ts:>6}  {verdict:<4}   "
            f"{first_col} {_s(s.send)}  script {_s(s.script)}  after {_s(s.after)}   "
            f"{s.charts:3d} charts {s.kb:6d} KB")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--opens", type=int, default=3, help="new tabs per view for the first render (median)")
    ap.add_argument("--moves", type=int, default=4, help="moves per slider after a warm-up move (median)")
    ap.add_argument("--only", default="", help="comma-separated pages (Heatmaps,Entropy,...); default all")
    ap.add_argument("--no-largest", action="store_true", help="default views only")
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # killed: still stop the server (finally)
    only = {p.strip() for p in args.only.split(",") if p.strip()}
    views = [v for v in VIEWS if (not only or v.page in only)
             and not (args.no_largest and ("largest" in v.setting or "512" in v.setting))]
    exe = CHROMIUM if Path(CHROMIUM).exists() else None
    print(f"bench.ui: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at start; headless "
          f"Chromium ({exe or 'Playwright default'}); first render: median of {args.opens} new tabs (cold "
          f"server: the first of them); sliders: median of {args.moves} moves after one warm-up move",
          flush=True)
    print(f"  {'view / measurement':<44} {'chart':>8} {'target':>6}   {'settled':>8} {'target':>6}"
          f"  {'':<4}   breakdown (s)                              sent per run", flush=True)
    with server() as url, sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=exe, args=CHROMIUM_ARGS, headless=True)
        try:
            for v in views:
                target_view = v.setting in ("default", "lab", "real model", "Why √d", "Saturation tab",
                                            "Gradients tab")
                full = f"{url}/{v.path}" + (f"?{v.query}" if v.query else "")
                print(f"{v.page} · {v.setting}" + (f"  (?{v.query[:60]}{'…' if len(v.query) > 60 else ''})"
                                                  if v.query else ""), flush=True)
                opens = [first_render(browser, full) for _ in range(v.opens or args.opens)]
                ft = FIRST_RENDER_S
                print(line("first render, cold server (1st new tab)", opens[0], ft, None, first_col="load"),
                      flush=True)
                if len(opens) > 1:
                    print(line(f"first render, new tab (median of {len(opens) - 1})", _median(opens[1:]), ft,
                               None, first_col="load"), flush=True)
                back = first_render(browser, full, returning=True)
                print(line("first render, new tab, browser cache warm", back, ft, None, first_col="load"),
                      flush=True)
                for label, s in slider_moves(browser, full, v, args.moves).items():
                    chart_target = SLIDER_CHART_S if target_view and v.charts else None
                    print(line(f"slider {label[:30]!r}", s, chart_target,
                               SLIDER_SETTLED_S if target_view else None), flush=True)
        finally:
            browser.close()
    print(f"load average {os.getloadavg()[0]:.1f} at the end. Targets (issue 11): default-view slider -> "
          f"chart <= {SLIDER_CHART_S} s and -> settled <= {SLIDER_SETTLED_S} s; first render <= "
          f"{FIRST_RENDER_S} s.")


if __name__ == "__main__":
    main()
