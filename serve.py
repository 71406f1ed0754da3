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
"""

from __future__ import annotations

import sys
import time


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


def main(argv: list[str]) -> int:
    """Warm up, then hand over to ``streamlit run app.py <argv>`` in this process."""
    from streamlit.web import cli

    seconds = warm()
    print(f"Attention Lab: compute stack loaded in {seconds:.1f} s; starting the server.", flush=True)
    sys.argv = ["streamlit", "run", "app.py", *argv]
    try:
        cli.main()
    except SystemExit as exc:  # click ends the process through SystemExit
        return int(exc.code or 0)
    finally:
        stop_workers()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
