"""Serve Attention Lab: ``streamlit run app.py`` with the heavy imports done before the first visit.

    python serve.py [streamlit run options]      # e.g. --server.port 8501 --server.headless true

``make run``, the container's CMD and the browser tests start the app this way. A plain
``streamlit run app.py`` works too; it only leaves the first visitor of a new server to pay
for importing torch, pandas and attncore (about 2 s on a 2-core machine) and the first
real-text visitor for transformers' model code (about 3 s) inside their page loads. It also
starts the Kernels page's memory-measuring helper
(:func:`attncore.kernels.warm_memory_measurement`). Nothing here touches Streamlit's caches:
modules that define cached functions (``ui.cached`` and its siblings) are imported by the first script run,
inside the server's runtime. When the server stops, the training queue's worker is stopped and
joined (:func:`stop_workers`) before the interpreter exits: a daemon thread still inside torch at
exit can abort the process ("terminate called without an active exception").

Warm-up for a class (issue 41 item 7a; ``ATTNLAB_WARM=1``, which ``make run`` and the Kubernetes manifests
set; ``docker run -e ATTNLAB_WARM=1`` for the image): once Streamlit's runtime exists, a background thread
loads the real model and computes the Tour's real-decoder step and the real-model views at their defaults
into the server's caches (:mod:`ui.warmup`, imported inside the runtime); the first page is not held up by
it. The server is *ready* when that is done: the line "Attention Lab: ready" in its output, and, with
``ATTNLAB_READY_FILE`` set, that file written (a JSON line: seconds taken and any step that failed; removed
at start, so a restarted container is not ready before its own warm-up), which the Kubernetes
readinessProbe tests for. Without ``ATTNLAB_WARM`` the server is ready as soon as it answers.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

WARM_ENV = "ATTNLAB_WARM"  # "1": warm the real model and the default views at start (ui.warmup)
READY_FILE_ENV = "ATTNLAB_READY_FILE"  # written when the server is ready (the readinessProbe tests it)


def warm() -> float:
    """Import the compute stack and run the first calls that initialise lazily; seconds taken."""
    t0 = time.perf_counter()
    import pandas  # noqa: F401
    import plotly.graph_objects as go
    import torch

    import attncore  # noqa: F401
    import attncore.kernels
    import attncore.row_theory  # noqa: F401
    import attncore.sweeps
    import attncore.training  # noqa: F401

    a = torch.ones(64, 64)
    (a @ a).sum()  # torch's thread pool and matmul kernels
    torch.nn.functional.scaled_dot_product_attention(a[None, None], a[None, None], a[None, None])
    attncore.sweeps.run_sweep(attncore.sweeps.SweepSpec(lengths=(64,), queries=2), device="cpu")
    go.Figure([go.Scatter(x=[0], y=[0]), go.Heatmap(z=[[0.0]]), go.Bar(x=[0], y=[0])]).to_plotly_json()
    # the real-text views' model code (about 3 s of imports; the weights still load on first use)
    from transformers import AutoConfig, AutoModel, AutoTokenizer  # noqa: F401
    from transformers.models.bert import modeling_bert  # noqa: F401
    attncore.kernels.warm_memory_measurement()  # the Kernels page's measuring helper starts importing
    return time.perf_counter() - t0


def stop_workers(timeout: float = 10.0) -> None:
    """Stop and join the training queue's worker if a page started it (``ui.jobs`` is imported by the
    first script run, inside the runtime; it is looked up, never imported, here)."""
    jobs = sys.modules.get("ui.jobs")
    queue = getattr(jobs, "QUEUE", None)
    if queue is not None:
        queue.shutdown(timeout)


def _runtime_exists() -> bool:
    from streamlit.runtime import Runtime

    return Runtime.exists()


def warm_pages(stop: threading.Event, ready_file: Path | None,
               runtime_exists: Callable[[], bool] = _runtime_exists) -> list[tuple[str, str]]:
    """Wait for Streamlit's runtime, then run :func:`ui.warmup.run` (imported only then: modules that define
    cached functions belong inside the runtime), printing each step; then write ``ready_file``. Returns the
    steps that failed."""
    t0 = time.perf_counter()
    while not runtime_exists():
        if stop.wait(0.2):
            return []

    def report(step: str, done: int, total: int) -> None:
        if step:
            print(f"Attention Lab: warm-up {done + 1}/{total}: {step}", flush=True)

    failed = importlib.import_module("ui.warmup").run(report, stop.is_set)
    seconds = time.perf_counter() - t0
    if stop.is_set():
        return failed
    for step, why in failed:
        print(f"Attention Lab: warm-up step failed ({step}): {why}", flush=True)
    mark_ready(ready_file, seconds, failed)
    return failed


def mark_ready(ready_file: Path | None, seconds: float, failed: Sequence[tuple[str, str]] = ()) -> None:
    """Say the server is ready: a line in its output, and ``ready_file`` (if any) written."""
    print(f"Attention Lab: ready (warm-up {seconds:.0f} s"
          f"{', ' + str(len(failed)) + ' step(s) failed' if failed else ''}).", flush=True)
    if ready_file is not None:
        tmp = ready_file.with_name(ready_file.name + ".tmp")
        tmp.write_text(json.dumps({"ready": True, "warmup_s": round(seconds, 1),
                                   "failed": [s for s, _ in failed]}) + "\n")
        tmp.replace(ready_file)  # whole or absent: a probe never reads half a file


def _ready_file() -> Path | None:
    name = os.environ.get(READY_FILE_ENV, "").strip()
    return Path(name) if name else None


def main(argv: list[str]) -> int:
    """Warm up, then hand over to ``streamlit run app.py <argv>`` in this process (with ``ATTNLAB_WARM=1``
    the pages' passes warm in a background thread meanwhile)."""
    from streamlit.web import cli

    ready_file = _ready_file()
    if ready_file is not None:
        ready_file.unlink(missing_ok=True)  # a restarted container is not ready before its own warm-up
    seconds = warm()
    print(f"Attention Lab: compute stack loaded in {seconds:.1f} s; starting the server.", flush=True)
    stop = threading.Event()
    if os.environ.get(WARM_ENV, "").strip() == "1":
        warmer = threading.Thread(target=warm_pages, args=(stop, ready_file), name="attnlab-warmup",
                                  daemon=True)
    else:
        warmer = threading.Thread(target=_ready_when_up, args=(stop, ready_file), name="attnlab-ready",
                                  daemon=True)
    warmer.start()
    sys.argv = ["streamlit", "run", "app.py", *argv]
    try:
        cli.main()
    except SystemExit as exc:  # click ends the process through SystemExit
        return int(exc.code or 0)
    finally:
        stop.set()
        warmer.join(30)  # a daemon thread inside torch at exit can abort the process
        stop_workers()
    return 0


def _ready_when_up(stop: threading.Event, ready_file: Path | None,
                   runtime_exists: Callable[[], bool] = _runtime_exists) -> None:
    """Without a warm-up: ready once Streamlit's runtime exists."""
    while not runtime_exists():
        if stop.wait(0.2):
            return
    mark_ready(ready_file, 0.0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
