"""A class on the real model (issue 41 item 7c): students open a real-model view at once, each with their own
text, against ONE warmed server; beside it, in the same run, one student alone.

The server is ``serve.py`` with ``ATTNLAB_WARM=1`` (the shipped text's passes cached, as a class server is
after its warm-up); the bench waits for its ready file. Each student is a websocket session of
:mod:`bench.load` (no browser): it opens the home page, then the view from its URL with its own sentence
(``--view sinks``: Attention sinks' real decoder, ``snk_view=decoder&dec_src=own&dec_text=...``;
``--view heatmaps``: Heatmaps' real text with SmolLM2, ``rt_src=real&rt_model=smollm2&rt_text=...``). For
that run it records the time to the first chart and to settled (the script finished: every section drawn),
and whether a waiting message with the student's place in line was shown (:mod:`ui.model_queue`).

Phases, in one run: ``--alone`` students one after another (each alone on the server, each a new text),
then ``--students`` at once (all sessions connected first, then every page opened in the same instant),
each with a text no one else sent. The machine's 1-minute load average is printed before and after: on a
shared machine this is not an idle measurement.

``--before DIR`` measures an earlier commit's files (``git archive COMMIT | tar -x -C DIR``) the same way
after, in the same run (it cannot warm itself: one session opens the view on the shipped text first).

Run:  python -m bench.klass [--view sinks|heatmaps] [--students 10] [--alone 3] [--before DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
import urllib.parse
from pathlib import Path

from bench.load import ROOT, Run, Server, Session, _pct

PAGES = {"sinks": "Attention sinks", "heatmaps": "Heatmaps"}
SUBJECTS = ("the river", "my grandmother", "the old lighthouse", "a tired student", "the orchestra",
            "the city library", "a small robot", "the winter market", "our football team", "the night train",
            "a curious cat", "the mountain village", "the science fair", "a quiet bakery", "the harbour")
VERBS = ("remembered", "explained", "painted", "carried", "described", "counted", "followed", "opened")


def sentence(i: int) -> str:
    """Student ``i``'s own text (about 30-40 SmolLM2 tokens, distinct for every i)."""
    s, v = SUBJECTS[i % len(SUBJECTS)], VERBS[(i // len(SUBJECTS) + i) % len(VERBS)]
    return (f"On Tuesday morning {s} {v} a story about number {i + 7} that nobody had heard before, and "
            f"everyone in the room listened until the very last word was said.")


def query(view: str, text: str) -> str:
    if view == "sinks":
        q = {"snk_view": "decoder", "dec_src": "own", "dec_text": text}
    else:
        q = {"rt_src": "real", "rt_model": "smollm2", "rt_text": text}
    return urllib.parse.urlencode(q)


async def _open(port: int, seed: int, view: str, text: str, start: asyncio.Event | None) -> tuple[Run, bool]:
    async with Session(port, seed) as s:
        await s.rerun("Home", "open")
        s.page_hash = s.pages.get(PAGES[view], "")
        if start is not None:
            await start.wait()
        run = await s.rerun(PAGES[view], "open", query=query(view, text))
        return run, any("in line" in w for w in run.infos)


def _line(label: str, runs: list[Run]) -> str:
    chart = [r.chart_s for r in runs if r.chart_s is not None]
    settled = [r.redraw_s for r in runs if r.redraw_s is not None]
    errors = sum(len(r.errors) for r in runs)
    return (f"{label:<22} n {len(runs):3d}  first chart p50 {_pct(chart, .5):6.2f} s "
            f"p95 {_pct(chart, .95):6.2f} s   settled p50 {_pct(settled, .5):6.2f} s "
            f"p95 {_pct(settled, .95):6.2f} s   errors {errors}")


async def _phase_alone(port: int, view: str, n: int, first: int) -> list[Run]:
    out = []
    for i in range(n):
        run, _ = await _open(port, 1000 + i, view, sentence(first + i), None)
        out.append(run)
    return out


async def _phase_class(port: int, view: str, n: int, first: int) -> tuple[list[Run], int]:
    start = asyncio.Event()
    tasks = [asyncio.create_task(_open(port, 2000 + i, view, sentence(first + i), start)) for i in range(n)]
    await asyncio.sleep(3.0)  # every session connected and on the home page
    start.set()
    got = await asyncio.gather(*tasks)
    return [r for r, _ in got], sum(1 for _, told in got if told)


def _measure(server: Server, view: str, n: int, alone: int, label: str) -> None:
    server.reset_peak()
    runs_alone = asyncio.run(_phase_alone(server.port, view, alone, 100))
    print(_line(f"{label}: 1 alone", runs_alone) + f"   load avg {os.getloadavg()[0]:.1f}", flush=True)
    server.reset_peak()
    runs, told = asyncio.run(_phase_class(server.port, view, n, 0))
    print(_line(f"{label}: {n} at once", runs) + f"   load avg {os.getloadavg()[0]:.1f}", flush=True)
    print(f"    {told} of {n} were shown their place in line while waiting; server peak RSS "
          f"{server.peak / 2**30:.2f} GiB", flush=True)
    for r in runs + runs_alone:
        for e in r.errors[:2]:
            print(f"    ! {e}")


def _before(path: Path, view: str, n: int, alone: int) -> None:
    """The same phases against ``path`` (an earlier commit's files, which cannot warm itself): primed by one
    session opening the view on the shipped text, as the warm-up would have."""
    server = Server(log=ROOT / "test-artifacts" / "bench-klass-before.log", cwd=path)
    try:
        server.start()
        t0 = time.monotonic()
        prime = {"sinks": "snk_view=decoder", "heatmaps": "rt_src=real&rt_model=smollm2"}[view]

        async def once() -> Run:
            async with Session(server.port, 999) as s:
                await s.rerun("Home", "open")
                s.page_hash = s.pages.get(PAGES[view], "")
                return await s.rerun(PAGES[view], "open", query=prime)

        run = asyncio.run(once())
        print(f"before: primed by one session in {time.monotonic() - t0:.0f} s (errors {len(run.errors)})",
              flush=True)
        _measure(server, view, n, alone, "before")
    finally:
        server.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--view", choices=sorted(PAGES), default="sinks")
    ap.add_argument("--students", type=int, default=10)
    ap.add_argument("--alone", type=int, default=3, help="single-student opens before the class")
    ap.add_argument("--ready-timeout", type=float, default=900.0)
    ap.add_argument("--threads", type=int, default=0,
                    help="OMP_NUM_THREADS for the servers (0: torch's default, the CPU count)")
    ap.add_argument("--before", type=Path, default=None,
                    help="then measure this checkout (an earlier commit's files, from git archive)")
    args = ap.parse_args()
    n = max(1, min(60, args.students))
    ready = Path(tempfile.mkdtemp(prefix="attnlab-klass-")) / "ready"
    os.environ.update({"ATTNLAB_WARM": "1", "ATTNLAB_READY_FILE": str(ready)})
    if args.threads > 0:
        os.environ["OMP_NUM_THREADS"] = str(args.threads)
    server = Server()
    print(f"bench.klass: view {args.view}, {n} students at once, {args.alone} alone; {os.cpu_count()} CPUs; "
          f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', '(default)')}; load average "
          f"{os.getloadavg()[0]:.1f} before start (a shared machine: not an idle measurement)",
          flush=True)
    try:
        server.start()
        t0 = time.monotonic()
        while not ready.exists():
            if time.monotonic() - t0 > args.ready_timeout or server.proc.poll() is not None:
                raise RuntimeError(f"the server did not warm up (its output: {server.log})")
            time.sleep(1.0)
        print(f"warm-up done in {time.monotonic() - t0:.0f} s after the server answered; ready file: "
              f"{ready.read_text().strip()}", flush=True)
        print(f"warmed server RSS {server.current / 2**30:.2f} GiB", flush=True)
        _measure(server, args.view, n, args.alone, "now")
    finally:
        server.stop()
    if args.before is not None:
        _before(args.before, args.view, n, args.alone)
    print(f"load average {os.getloadavg()[0]:.1f} at the end", flush=True)


if __name__ == "__main__":
    main()
