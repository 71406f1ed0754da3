"""A training job's status on a page: its place in the queue or its progress, Stop, then what it produced.

The Training lab's live runs and its "A sink forms" tab both follow a job of :data:`ui.jobs.QUEUE`
the same way; each hands :func:`job_panel` its own live chart and its own view of the finished
runs. Called from a fragment that reruns every second while the job is active.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import plotly.graph_objects as go
import streamlit as st

from ui.jobs import JobQueue
from ui.text import plain

__all__ = ["job_panel"]


def job_panel(
    queue: JobQueue,
    job_id: str,
    polling: bool,
    *,
    key: str,
    live_chart: Callable[[dict[str, Any]], go.Figure],
    show_records: Callable[[list[dict[str, Any]]], None],
    stopped_keeps: str,
) -> None:
    """The job ``job_id`` of ``queue``: queue position or progress with ``live_chart(snapshot)``, Stop; then
    ``show_records(records)`` for the finished runs, the store's notes, and why it failed or what a stop kept.

    Args:
        polling: the fragment reruns by itself (the job was active when the page ran); a job that has
            ended since reruns the whole page once, which stops the polling.
        key: the page's prefix of element keys (``<key>_stop``, ``chart_<key>_live``).
        stopped_keeps: what a stopped run keeps, in the words of the 'Stopped: …' caption.
    """
    job = queue.get(job_id)
    if job is None:
        return
    snap = job.snapshot()
    if polling and not job.active:
        st.rerun()  # finished since the page ran: redraw the page once (stops polling, lists the runs)
    ahead = queue.position(job) if snap["state"] == "queued" else None
    if ahead:
        st.info(f"Your run waits in the queue: {ahead} job{'s' if ahead != 1 else ''} ahead of it. "
                "One training job runs at a time on this server.", icon=":material/hourglass_top:")
    elif snap["state"] == "queued":  # nothing ahead: the worker is starting it
        st.progress(0.0, text=f"run 1 of {snap['n_runs']} ({snap['label']}): starting…")
    elif snap["state"] == "running":
        i, n, step, total = snap["current"], snap["n_runs"], snap["step"], snap["total"]
        frac = (i + (step / total if total else 0.0)) / n
        st.progress(min(1.0, frac), text=f"run {i + 1} of {n} ({snap['label']}): step {step} of {total} · "
                                         f"{snap['tokens_per_s']:,.0f} tokens/s")
        st.plotly_chart(live_chart(snap), key=f"chart_{key}_live")
    if job.active and st.button("Stop", key=f"{key}_stop", icon=":material/stop:",
                                help="Stops before the next step; what was trained is kept."):
        queue.cancel(job)
        st.caption("Stopping…")
    records = snap["records"]
    if records:
        show_records(records)
    for note in snap["notes"]:
        st.warning(plain(note), icon=":material/folder_off:")
    if snap["state"] == "failed":
        st.error(plain(snap["error"] or "The run failed."), icon=":material/error:")
    elif snap["state"] == "cancelled":
        st.caption(f"Stopped: {len(records)} of {snap['n_runs']} runs kept ({stopped_keeps}).")
