"""Load test: N concurrent sessions against ONE `streamlit run` server on 127.0.0.1.

Each session is a small client of Streamlit's own websocket protocol (no browser): it opens
``ws://127.0.0.1:PORT/_stcore/stream``, sends ``BackMsg.rerun_script`` messages the way the
frontend does (a page's script hash to navigate, ``WidgetStates`` to move a control) and reads
the ``ForwardMsg`` stream (``delta`` elements, ``script_finished``). For every rerun it records

* time to chart: from sending the rerun to the first Plotly chart of that run;
* redraw: from sending the rerun to ``script_finished`` (the whole page drawn);
* errors: tracebacks (``exception`` elements), error boxes (``st.error``), a run that did not
  finish in time, a dropped connection.

A session visits every page and on each page moves ``--moves`` of its sliders / number inputs /
checkboxes by a step or two (as a student nudges a control), back to back by default (a stress
test: every session always waits for the server) or after ``--think`` seconds of reading.
Phases:

1. idle: one session alone (the baseline redraw times);
2. N concurrent sessions for each N in ``--sessions`` (default 10, 20, 40);
3. interference: one session presses "Run sweep" on a long Entropy sweep (``--sweep``) while
   another redraws the Heatmaps page; its redraw alone against during the sweep;
4. ``--browsers K`` real Chromium pages (Playwright) during the N=10 phase: time until a
   chart is visible (skipped when Playwright or Chromium is missing);
5. hostile client (issue 32): ``--hostile N`` ordinary sessions (default 20; 0 skips the phase)
   tour the pages while one hostile client, again and again, opens the Training lab from issue
   32's F1 URL (``tr_var``/``tr_lr`` entries repeated thousands of times), presses Run
   ``--presses`` times in a row, reloads the page (a new session, the same URL) and presses again,
   then closes the tab mid-job. The ordinary sessions' redraw p50/p95 are compared with idle (the
   issue asks for p95 within 2x), and the hostile client's presses are counted: accepted, refused
   with the per-session limit or the full queue.

The server's peak RSS (its whole process tree) is sampled every 0.2 s. Only loopback
addresses; every phase is bounded in time (``--phase-timeout``) and count.

Run:  python -m bench.load [--sessions 10,20,40] [--moves 2] [--browsers 2]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from streamlit.proto.BackMsg_pb2 import BackMsg
from streamlit.proto.ClientState_pb2 import ClientState
from streamlit.proto.ForwardMsg_pb2 import ForwardMsg
from websockets.asyncio.client import connect
from websockets.typing import Subprotocol

ROOT = Path(__file__).resolve().parents[1]
HOST = "127.0.0.1"  # loopback only
RUN_TIMEOUT_S = 240.0  # one rerun longer than this counts as an error
MAX_SESSIONS = 60
MOVABLE = ("slider", "number_input", "checkbox")


# --------------------------------------------------------------------------- the server
def _free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def _tree_rss(pid: int) -> int:
    """Resident bytes of ``pid`` and its children (Linux /proc)."""
    total, todo, seen = 0, [pid], set()
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.add(p)
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) * 1024
            for t in Path(f"/proc/{p}/task").iterdir():
                with contextlib.suppress(OSError):
                    todo += [int(c) for c in (t / "children").read_text().split()]
    return total


class Server:
    """`streamlit run app.py` on a free loopback port, with an RSS sampler.

    The server's output (stdout and stderr) goes to a file, ``log`` (default
    test-artifacts/bench-load-streamlit.log), never to a pipe: a pipe nobody reads fills at 64 KB,
    and then the server's next log line blocks the thread that writes it while it holds the logging
    lock, so every other script thread waits behind it and the server stops answering (issue 44,
    item 13: 40 sessions logging a traceback each render). ``command``: what follows the interpreter
    (``serve.py``; a test passes a stand-in server); ``cwd``: the checkout it serves (bench.klass's
    ``--before`` serves an earlier commit's files)."""

    def __init__(self, command: Sequence[str] = ("serve.py",), log: Path | None = None,
                 cwd: Path = ROOT) -> None:
        self.port = _free_port()
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "STREAMLIT_BROWSER_GATHER_USAGE_STATS": "false"}
        self.log = log if log is not None else ROOT / "test-artifacts" / "bench-load-streamlit.log"
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log, "wb") as out:  # the child keeps its own handle to the file
            self.proc = subprocess.Popen(
                [sys.executable, *command, "--server.address", HOST,  # streamlit run app.py, warmed
                 "--server.port", str(self.port), "--server.headless", "true"],
                cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
            )
        self.peak = 0
        self.current = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._stop.wait(0.2):
            self.current = _tree_rss(self.proc.pid)
            self.peak = max(self.peak, self.current)

    def start(self, timeout: float = 180) -> None:
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            if self.proc.poll() is not None:
                tail = self.log.read_bytes()[-4000:].decode("utf-8", "replace")
                raise RuntimeError(f"streamlit exited (its output: {self.log}):\n{tail}")
            with contextlib.suppress(OSError), \
                    urllib.request.urlopen(f"http://{HOST}:{self.port}/_stcore/health", timeout=2) as r:
                if r.status == 200:
                    self._thread.start()
                    return
            time.sleep(0.5)
        raise RuntimeError("streamlit did not become healthy")

    def reset_peak(self) -> None:
        self.peak = self.current = _tree_rss(self.proc.pid)

    def stop(self) -> None:
        self._stop.set()
        self.proc.terminate()
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()


# --------------------------------------------------------------------------- one session
@dataclass
class Run:
    page: str
    action: str
    chart_s: float | None
    redraw_s: float | None
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    infos: list[str] = field(default_factory=list)  # info boxes (e.g. a waiting student's place in line)
    query: str | None = None  # the URL's query the page wrote during this run, if it changed it


@dataclass
class Widget:
    kind: str
    id: str
    label: str
    value: list[float] | float | bool
    lo: float = 0.0
    hi: float = 1.0
    step: float = 1.0
    is_int: bool = False


def _widget(el) -> Widget | None:  # noqa: ANN001 - a protobuf Element
    kind = el.WhichOneof("type")
    if kind not in MOVABLE:
        return None
    w = getattr(el, kind)
    if getattr(w, "disabled", False) or not w.id:
        return None
    if kind == "checkbox":
        return Widget(kind, w.id, w.label, bool(w.value) if w.set_value else bool(w.default))
    if kind == "slider":
        if len(w.options):  # a select_slider: its state is an index into options; left alone
            return None
        vals = list(w.value) if w.set_value else list(w.default)
        return Widget(kind, w.id, w.label, vals, w.min, w.max, w.step or 1.0, w.data_type == w.INT)
    is_int = w.data_type == w.INT
    val = w.value if w.set_value else w.default
    step = w.step or 1.0
    lo = w.min if w.has_min else val - 10 * step
    hi = w.max if w.has_max else val + 10 * step
    return Widget(kind, w.id, w.label, float(val), float(lo), float(hi), float(step), is_int)


def _nudged(w: Widget, rng: random.Random) -> Widget:
    """The widget one or two steps away (a student nudging it), within its bounds."""
    if w.kind == "checkbox":
        return Widget(w.kind, w.id, w.label, not w.value)
    delta = rng.choice((-2, -1, 1, 2)) * w.step
    if isinstance(w.value, list):
        vals = [min(w.hi, max(w.lo, v + delta)) for v in w.value]
        if vals == w.value:
            vals = [min(w.hi, max(w.lo, v - delta)) for v in w.value]
        return Widget(w.kind, w.id, w.label, vals, w.lo, w.hi, w.step, w.is_int)
    v = min(w.hi, max(w.lo, float(w.value) + delta))
    if v == w.value:
        v = min(w.hi, max(w.lo, float(w.value) - delta))
    return Widget(w.kind, w.id, w.label, v, w.lo, w.hi, w.step, w.is_int)


class Session:
    """One browser tab's worth of protocol, without the browser."""

    def __init__(self, port: int, seed: int) -> None:
        self.url = f"ws://{HOST}:{port}/_stcore/stream"
        self.rng = random.Random(seed)
        self.pages: dict[str, str] = {}  # name -> script hash
        self.page_hash = ""
        self.widgets: dict[str, Widget] = {}
        self.buttons: dict[str, str] = {}  # label -> widget id
        self.runs: list[Run] = []
        self.ws = None

    async def __aenter__(self) -> Session:
        self.ws = await connect(self.url, subprotocols=[Subprotocol("streamlit")], max_size=None,
                                open_timeout=60, ping_interval=None, additional_headers={"Origin": f"http://{HOST}"})
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self.ws is not None:
            await self.ws.close()

    async def rerun(self, page: str, action: str, changed: Widget | None = None,
                    query: str = "", press: str | None = None) -> Run:
        cs = ClientState(query_string=query, page_script_hash=self.page_hash)
        if press is not None:  # a button click: a trigger that is true for this one run
            bs = cs.widget_states.widgets.add()
            bs.id, bs.trigger_value = press, True
        for w in self.widgets.values():
            if changed is not None and w.id == changed.id:
                w = changed
            ws = cs.widget_states.widgets.add()
            ws.id = w.id
            if w.kind == "checkbox":
                ws.bool_value = bool(w.value)
            elif w.kind == "slider":
                ws.double_array_value.data.extend(w.value)  # type: ignore[arg-type]
            elif w.is_int:
                ws.int_value = int(w.value)  # type: ignore[arg-type]
            else:
                ws.double_value = float(w.value)  # type: ignore[arg-type]
        msg = BackMsg(rerun_script=cs)
        run = Run(page, action, None, None)
        t0 = time.perf_counter()
        await self.ws.send(msg.SerializeToString())
        widgets: dict[str, Widget] = {}
        buttons: dict[str, str] = {}
        started = False
        try:
            async with asyncio.timeout(RUN_TIMEOUT_S):
                while True:
                    fm = ForwardMsg()
                    fm.ParseFromString(await self.ws.recv())
                    kind = fm.WhichOneof("type")
                    if kind == "new_session":
                        started = True
                    elif kind == "page_info_changed":
                        run.query = fm.page_info_changed.query_string
                    elif kind == "navigation":
                        self.pages = {p.page_name or p.url_pathname or "Home": p.page_script_hash
                                      for p in fm.navigation.app_pages}
                    elif kind == "delta" and fm.delta.WhichOneof("type") == "new_element":
                        el = fm.delta.new_element
                        et = el.WhichOneof("type")
                        if et == "plotly_chart" and run.chart_s is None:
                            run.chart_s = time.perf_counter() - t0
                        elif et == "exception":
                            run.errors.append(f"traceback: {el.exception.type}: {el.exception.message[:120]}")
                        elif et == "alert" and el.alert.format == el.alert.ERROR:
                            run.errors.append(f"error box: {el.alert.body[:160]}")
                        elif et == "alert" and el.alert.format == el.alert.WARNING:
                            run.warnings.append(el.alert.body[:200])
                        elif et == "alert" and el.alert.format == el.alert.INFO:
                            run.infos.append(el.alert.body[:300])
                        w = _widget(el)
                        if w is not None:
                            widgets[w.id] = w
                        elif et == "button" and el.button.id:
                            buttons[el.button.label] = el.button.id
                    elif kind == "script_finished" and started:
                        if fm.script_finished == ForwardMsg.FINISHED_EARLY_FOR_RERUN:
                            continue
                        run.redraw_s = time.perf_counter() - t0
                        break
        except TimeoutError:
            run.errors.append(f"no redraw within {RUN_TIMEOUT_S:.0f} s")
        if widgets:
            self.widgets = widgets
        self.buttons = buttons
        self.runs.append(run)
        return run

    async def goto(self, name: str) -> Run:
        self.page_hash = self.pages.get(name, "")
        self.widgets = {}
        return await self.rerun(name, "open")

    async def pause(self, think: float) -> None:
        """A student reading the page: ``think`` seconds on average (0.5x to 1.5x), none when 0."""
        if think > 0:
            await asyncio.sleep(think * self.rng.uniform(0.5, 1.5))

    async def tour(self, moves: int, deadline: float, think: float = 0.0) -> None:
        """Open every page and nudge ``moves`` controls on each (until ``deadline``)."""
        await self.rerun("Home", "open")
        for name in [p for p in self.pages if p != "Home"] or ["Home"]:
            if time.monotonic() > deadline:
                return
            await self.pause(think)
            await self.goto(name)
            for _ in range(moves):
                if not self.widgets or time.monotonic() > deadline:
                    break
                await self.pause(think)
                w = self.rng.choice(sorted(self.widgets.values(), key=lambda x: x.id))
                await self.rerun(name, f"move {w.label[:30]}", _nudged(w, self.rng))


# --------------------------------------------------------------------------- phases
def _pct(xs: list[float], q: float) -> float:
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, round(q * (len(xs) - 1))))]


def _summary(label: str, runs: list[Run], failures: list[str], server: Server) -> dict[str, float]:
    redraw = [r.redraw_s for r in runs if r.redraw_s is not None]
    chart = [r.chart_s for r in runs if r.chart_s is not None]
    errors = [f"{r.page} / {r.action}: {e}" for r in runs for e in r.errors] + failures
    print(f"{label:<28} reruns {len(runs):4d}  errors {len(errors):3d}  "
          f"time to chart p50 {_pct(chart, .5):6.2f} s p95 {_pct(chart, .95):6.2f} s   "
          f"redraw p50 {_pct(redraw, .5):6.2f} s p95 {_pct(redraw, .95):6.2f} s   "
          f"server peak RSS {server.peak / 2**30:5.2f} GiB   load avg {os.getloadavg()[0]:.1f}", flush=True)
    for e in errors[:8]:
        print(f"    ! {e}")
    if len(errors) > 8:
        print(f"    ! ... and {len(errors) - 8} more")
    return {"p50": _pct(redraw, .5), "p95": _pct(redraw, .95), "errors": len(errors)}


async def _many(port: int, n: int, moves: int, timeout: float, seed: int,
                think: float) -> tuple[list[Run], list[str]]:
    deadline = time.monotonic() + timeout
    failures: list[str] = []

    async def one(i: int) -> list[Run]:
        await asyncio.sleep(i * 0.25)  # students arrive over a few seconds, not in one instant
        try:
            async with Session(port, seed + i) as s:
                await s.tour(moves, deadline, think)
                return s.runs
        except Exception as exc:  # a dropped or refused connection is an error of the server
            failures.append(f"session {i}: {type(exc).__name__}: {exc}")
            return []

    results = await asyncio.gather(*(one(i) for i in range(n)))
    return [r for rs in results for r in rs], failures


async def _idle(port: int, moves: int) -> list[Run]:
    async with Session(port, 1) as s:
        await s.tour(moves, time.monotonic() + 600)
        await s.tour(moves, time.monotonic() + 600)  # second pass: warm caches, the real idle
        return s.runs[len(s.runs) // 2:]


async def _interference(port: int, redraws: int, sweep_query: str) -> tuple[list[Run], list[Run], float]:
    """Heatmaps redraws alone, then while another session runs the Entropy page's long sweep."""
    async with Session(port, 7) as a, Session(port, 8) as b:
        await a.rerun("Home", "open")
        await b.rerun("Home", "open")
        await a.goto("Heatmaps")
        alone = []
        for _ in range(redraws):
            w = a.rng.choice(sorted(a.widgets.values(), key=lambda x: x.id))
            alone.append(await a.rerun("Heatmaps", "move", _nudged(w, a.rng)))
        b.page_hash = b.pages.get("Entropy vs length", "")
        b.widgets = {}
        await b.rerun("Entropy vs length", "open", query=sweep_query)
        run_id = next((i for label, i in b.buttons.items() if label.startswith("Run sweep")), None)
        if run_id is None:  # refused, or small enough to have run at once: nothing long to measure
            print(f"    the sweep did not wait for its button: {b.runs[-1].errors or 'it ran at once'}")
            return alone, [], b.runs[-1].redraw_s or float("nan")
        sweep = asyncio.create_task(b.rerun("Entropy vs length", "long sweep", press=run_id))
        await asyncio.sleep(1.0)
        busy = []
        for _ in range(redraws):
            if sweep.done():
                break
            w = a.rng.choice(sorted(a.widgets.values(), key=lambda x: x.id))
            busy.append(await a.rerun("Heatmaps", "move during sweep", _nudged(w, a.rng)))
        long_run = await sweep
        for e in long_run.errors:
            print(f"    ! the long sweep: {e}")
        return alone, busy, long_run.redraw_s or float("nan")


# issue 32's F1 URL: 3,000 x 1,000 repeated entries (17 kB)
HOSTILE_QUERY = "tr_var=" + ",".join(["relu"] * 3000) + "&tr_lr=" + ",".join(["1"] * 1000)


@dataclass
class Hostile:
    """What the hostile client did and what the server answered."""

    opens: int = 0
    presses: int = 0
    accepted: int = 0
    refused_session: int = 0
    refused_full: int = 0
    reloads: int = 0
    closed_tabs: int = 0
    errors: list[str] = field(default_factory=list)
    open_s: list[float] = field(default_factory=list)

    ignored: int = 0

    def count(self, run: Run, job_before: str) -> str:
        """One Run press's answer: refused (the page's warning says why), accepted (the page wrote a new
        job id into its URL) or ignored (no new job and no refusal: the press came while the button was
        disabled). Returns the job id the URL holds after it."""
        self.presses += 1
        self.errors += run.errors
        said = " ".join(run.warnings)
        job = _job_id(run.query) if run.query is not None else job_before
        if "already has" in said:
            self.refused_session += 1
        elif "already queued on this server" in said:
            self.refused_full += 1
        elif job and job != job_before:
            self.accepted += 1
        else:
            self.ignored += 1
        return job


def _job_id(query: str) -> str:
    return next((v for k, _, v in (p.partition("=") for p in query.split("&")) if k == "tr_job"), "")


async def _hostile_tab(port: int, seed: int, presses: int, h: Hostile, close_mid_job: bool,
                       job: str = "") -> str:
    """One tab of the hostile client: open the Training lab from the F1 URL (with ``job``'s id when it
    reloads a tab that had one), press Run ``presses`` times; the job id its URL holds at the end."""
    query = HOSTILE_QUERY + (f"&tr_job={job}" if job else "")
    async with Session(port, seed) as s:
        await s.rerun("Home", "open", query=query)
        s.page_hash = s.pages.get("Training lab", "")
        run = await s.rerun("Training lab", "open hostile URL", query=query)
        h.opens += 1
        h.errors += run.errors
        if run.redraw_s is not None:
            h.open_s.append(run.redraw_s)
        job = _job_id(run.query) if run.query is not None else job
        for _ in range(presses):
            button = s.buttons.get("Run")
            if button is None:
                break
            job = h.count(await s.rerun("Training lab", "press Run", query=query, press=button), job)
        if close_mid_job:
            h.closed_tabs += 1  # leaving the block closes the websocket: a closed tab
    return job


async def _hostile(port: int, deadline: float, presses: int, seed: int) -> Hostile:
    """Until ``deadline``: a tab pressing Run, its reload pressing again, then a tab closed mid-job."""
    h = Hostile()
    i = 0
    while time.monotonic() < deadline:
        try:
            job = await _hostile_tab(port, seed + i, presses, h, close_mid_job=False)
            h.reloads += 1  # the URL the page wrote, in a new session: a reload
            await _hostile_tab(port, seed + i + 1, presses, h, close_mid_job=True, job=job)
        except Exception as exc:  # a refused connection is an answer of the server too
            h.errors.append(f"{type(exc).__name__}: {exc}")
            await asyncio.sleep(1.0)
        i += 2
    return h


async def _with_hostile(port: int, n: int, moves: int, timeout: float, seed: int, think: float,
                        presses: int) -> tuple[list[Run], list[str], Hostile]:
    ordinary = asyncio.create_task(_many(port, n, moves, timeout, seed, think))
    hostile = asyncio.create_task(_hostile(port, time.monotonic() + timeout, presses, seed + 10_000))
    (runs, failures), h = await ordinary, await hostile
    return runs, failures, h


def _browsers(port: int, k: int, out: list[str]) -> None:
    """K real Chromium pages at once: seconds until a chart is visible on each."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        out.append("browsers: skipped (playwright not installed)")
        return
    try:
        with sync_playwright() as pw:
            # the Chromium the browser tests use (tests/conftest.py), else Playwright's own
            exe = os.environ.get("ATTNLAB_CHROMIUM", "/usr/bin/chromium")
            browser = pw.chromium.launch(executable_path=exe if Path(exe).exists() else None,
                                         args=["--no-sandbox", "--disable-dev-shm-usage"])
            pages = [browser.new_page() for _ in range(k)]
            t0 = time.perf_counter()
            for p in pages:
                p.goto(f"http://{HOST}:{port}/Heatmaps", wait_until="commit")
            for i, p in enumerate(pages):
                p.wait_for_selector(".js-plotly-plot", timeout=300_000)
                out.append(f"browser {i}: first chart visible after {time.perf_counter() - t0:6.2f} s")
            browser.close()
    except Exception as exc:  # no Chromium here: report, do not fail the bench
        out.append(f"browsers: {type(exc).__name__}: {str(exc)[:200]}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sessions", default="10,20,40", help="comma-separated session counts")
    ap.add_argument("--moves", type=int, default=2, help="controls moved per page per session")
    ap.add_argument("--browsers", type=int, default=2, help="real Chromium pages during the N=10 phase")
    ap.add_argument("--phase-timeout", type=float, default=300.0, help="seconds per phase, at most")
    ap.add_argument("--think", type=float, default=0.0,
                    help="seconds a session pauses before each action, on average (0: back to back, "
                         "a stress test; 3: closer to students reading the page)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--hostile", type=int, default=20,
                    help="ordinary sessions beside the hostile client (0: no hostile phase)")
    ap.add_argument("--presses", type=int, default=5, help="Run presses in a row per hostile tab")
    ap.add_argument("--no-interference", action="store_true", help="skip the long-sweep phase")
    ap.add_argument("--sweep", default="ent_hi=23&ent_q=256",
                    help="Entropy page URL state of the long sweep (one that waits for its Run button)")
    args = ap.parse_args()
    counts = [min(MAX_SESSIONS, int(x)) for x in args.sessions.split(",") if x.strip() and int(x) > 0]

    server = Server()
    print(f"bench.load: streamlit on {HOST}:{server.port}, {os.cpu_count()} CPUs, load average "
          f"{os.getloadavg()[0]:.1f} before start; think time {args.think:g} s; "
          f"ATTNCORE_MAX_BYTES={os.environ.get('ATTNCORE_MAX_BYTES', '(default)')}", flush=True)
    try:
        server.start()
        server.reset_peak()
        print(f"idle server RSS {server.current / 2**30:.2f} GiB", flush=True)
        idle_runs = asyncio.run(_idle(server.port, args.moves))
        idle = _summary("idle (1 session)", idle_runs, [], server)
        per_page = {}
        for r in idle_runs:
            if r.redraw_s is not None:
                per_page.setdefault(r.page, []).append(r.redraw_s)
        print("    idle redraw by page: " + ", ".join(f"{p} {statistics.median(v):.2f} s"
                                                    for p, v in per_page.items()))
        for n in counts:
            server.reset_peak()
            notes: list[str] = []
            th = None
            if n == counts[0] and args.browsers > 0:
                th = threading.Thread(target=_browsers, args=(server.port, args.browsers, notes), daemon=True)
                th.start()
            runs, failures = asyncio.run(_many(server.port, n, args.moves, args.phase_timeout, args.seed + n,
                                                  args.think))
            s = _summary(f"{n} concurrent sessions", runs, failures, server)
            if th is not None:
                th.join(args.phase_timeout)
            for line in notes:
                print(f"    {line}")
            p50x, p95x = s["p50"] / idle["p50"], s["p95"] / idle["p95"]
            print(f"    redraw against idle: p50 {p50x:.1f}x, p95 {p95x:.1f}x", flush=True)
        if args.hostile > 0:
            server.reset_peak()
            n = min(MAX_SESSIONS, args.hostile)
            runs, failures, h = asyncio.run(_with_hostile(server.port, n, args.moves, args.phase_timeout,
                                                          args.seed + 500, args.think, args.presses))
            s = _summary(f"{n} sessions + hostile", runs, failures, server)
            p50x, p95x = s["p50"] / idle["p50"], s["p95"] / idle["p95"]
            print(f"    redraw against idle: p50 {p50x:.1f}x, p95 {p95x:.1f}x (issue 32: p95 within 2x)",
                  flush=True)
            print(f"    hostile client: {h.opens} tabs opened from the F1 URL ({len(h.open_s)} drawn, median "
                  f"{statistics.median(h.open_s) if h.open_s else float('nan'):.2f} s), {h.reloads} reloads, "
                  f"{h.closed_tabs} tabs closed mid-job; {h.presses} Run presses: {h.accepted} accepted, "
                  f"{h.refused_session} refused (one job per session), {h.refused_full} refused (queue "
                  f"full), {h.ignored} ignored (Run disabled); errors {len(h.errors)}", flush=True)
            for e in h.errors[:5]:
                print(f"    ! hostile: {e}")
        if args.no_interference:
            return
        server.reset_peak()
        alone, busy, sweep_s = asyncio.run(_interference(server.port, 6, args.sweep))
        a = statistics.median([r.redraw_s for r in alone if r.redraw_s]) if alone else float("nan")
        b = statistics.median([r.redraw_s for r in busy if r.redraw_s]) if busy else float("nan")
        errs = sum(len(r.errors) for r in alone + busy)
        print(f"{'long sweep vs redraw':<28} Heatmaps redraw alone {a:.2f} s, during another session's "
              f"sweep {b:.2f} s (ratio {b / a:.2f}, {len(busy)} redraws); the sweep took {sweep_s:.1f} s; "
              f"errors {errs}; server peak RSS {server.peak / 2**30:.2f} GiB")
    finally:
        server.stop()


if __name__ == "__main__":
    main()
