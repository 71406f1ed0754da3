"""Benchmark of the Evidence page: how long its 47 tests take, and its first open against another page's.

    python -m bench.evidence

1. In this process (imports done, as a server has them after ``serve.py``'s warm-up): every claim of
   :mod:`attncore.evidence` measured once, the fast pass (the table's first draw) and the slower second
   pass, wall and CPU seconds, the slowest rows named; CPU seconds are what the tests cost on an idle
   machine (torch may use every core, so an idle wall time can be shorter).
2. AppTest, each page's first run in a fresh process (caches empty), the Evidence page against the
   Saturation & gradients page's default view (the baseline: the live computations the most rows reuse)
   and their ratio, and the Evidence page's second run (every row from the cache).

The machine's load average is printed beside the numbers: on the shared 2-core machine read ratios.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

RUN_PAGE = """
import sys, time
sys.path.insert(0, {root!r})
import serve
serve.warm()
from tests.chart_data import run_app
t0 = time.perf_counter(); at = run_app({page!r}, timeout=900); first = time.perf_counter() - t0
assert not at.exception, [e.value for e in at.exception]
t0 = time.perf_counter(); at.run(timeout=900); again = time.perf_counter() - t0
print(first, again)
"""


def passes() -> None:
    from attncore.evidence import CLAIMS, Setting, evaluate

    for label, slow in (("fast pass (the table's first draw)", False),
                        ("second pass (timings, models, sweep)", True)):
        w0, c0, per = time.perf_counter(), time.process_time(), []
        for c in CLAIMS:
            if c.slow == slow:
                t = time.process_time()
                evaluate(c, Setting())
                per.append((time.process_time() - t, c.key))
        wall, cpu = time.perf_counter() - w0, time.process_time() - c0
        top = ", ".join(f"{k} {s:.2f}" for s, k in sorted(per, reverse=True)[:4])
        print(f"{label:<40} {len(per):2d} rows  wall {wall:6.2f} s  cpu {cpu:6.2f} s   "
              f"slowest (cpu s): {top}")


def page_run(page: str) -> tuple[float, float]:
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = subprocess.run([sys.executable, "-c", RUN_PAGE.format(root=root, page=page)], capture_output=True,
                         text=True, cwd=root, check=True)
    first, again = (float(v) for v in out.stdout.strip().splitlines()[-1].split())
    return first, again


def main() -> None:
    import serve

    serve.warm()
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    passes()
    ev, ev_again = page_run("pages/7_Evidence.py")
    base, base_again = page_run("pages/3_Saturation_and_gradients.py")
    print(f"AppTest first run   Evidence {ev:6.2f} s   Saturation & gradients {base:6.2f} s   "
          f"ratio {ev / base:5.2f}")
    print(f"AppTest second run  Evidence {ev_again:6.2f} s   Saturation & gradients {base_again:6.2f} s")
    print(f"load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
