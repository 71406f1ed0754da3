"""A training job on a page: its time estimate before Run, then its place in the queue or its progress,
Stop, and what it produced.

The Training lab's live runs and its "A sink forms" tab both plan, start and follow a job of
:data:`ui.jobs.QUEUE` the same way: :func:`time_estimate` with their own training function,
:func:`run_button` with their own submission, and :func:`job_panel` (called from a fragment that
reruns every second while the job is active) with their own live chart and their own view of the
finished runs.

A page keeps its job's id in a URL parameter (``tr_job``, ``sk_job``): a reloaded page (a new
session) finds its job there and takes it back (:meth:`ui.jobs.JobQueue.adopt`), with Stop and
its result, instead of calling it another session's job.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import plotly.graph_objects as go
import streamlit as st

from attncore.errors import AttnInputError
from attncore.training import TrainConfig, train
from ui.admission import heavy
from ui.job_cost import calibration_cached, calibrations_for, estimate_seconds
from ui.jobs import TRAINING_BYTES, Job, JobQueue, session_id
from ui.text import plain
from ui.views.training_runs import calibration_text, duration

__all__ = ["job_panel", "other_job_caption", "run_button", "time_estimate"]

CALIBRATION_SECONDS = 5.0  # the admission estimate of measuring one job's calibrations (0.8 to 52 s seen)


def time_estimate(queue: JobQueue, configs: list[TrainConfig], text: str, device: str,
                  train_fn: Callable[..., Any] = train, *, timing: str, included: str = "") -> str:
    """' Estimated time: …' for ``configs`` trained by ``train_fn`` on ``text``, from calibrations measured on
    this server (a few real steps per model shape and attention path, cached), or why there is none yet.

    Args:
        queue: the job queue (:data:`ui.jobs.QUEUE`): no calibration is measured while it runs a job, which
            would time the job's competition.
        timing: what the spinner says is timed while a calibration is measured ('a few training steps').
        included: words after the duration (', probes and tests included').
    """
    vocab = len(set(text))
    try:
        cached = [c for c in (calibration_cached(cf, vocab, device, train_fn) for cf in configs) if c]
        est = estimate_seconds(configs, cached, vocab, device, train_fn)
        if est is None:
            if queue.running() is not None:
                return " The time estimate is measured when no training job is running."
            # a few real training steps (up to tens of seconds): they queue in the admission control
            with st.spinner(f"Timing {timing} on this server for the estimate…"), \
                    heavy(TRAINING_BYTES, CALIBRATION_SECONDS, label="the time estimate"):
                cals = calibrations_for(configs, text, device, train_fn)
                est = estimate_seconds(configs, cals, vocab, device, train_fn)
    except (AttnInputError, MemoryError) as exc:
        return f" No time estimate: {exc}"
    if est is None:
        return ""
    return f" Estimated time: {duration(est.seconds)}{included}; {calibration_text(est)}"


def run_button(queue: JobQueue, *, job_key: str, label: str, key: str, disabled: bool,
               submit: Callable[[], Job], status: Callable[[str, bool], None], poll_s: float) -> None:
    """The Run button (disabled while this session's job, kept under ``st.session_state[job_key]``, the key
    of a URL parameter, is active; a job found there that another session started, the page before a
    reload, is taken back), then ``status(job_id, polling)`` in a fragment that reruns every ``poll_s``
    seconds while the job is active. ``submit()`` queues the job; a full queue is said in plain words."""
    job = queue.get(st.session_state.get(job_key))
    me = session_id()
    if job is not None and job.active and job.owner != me:
        queue.adopt(job, me)  # the page was reloaded (a new session): its job is this page's again
    busy = job is not None and job.active
    if st.button(label, key=key, type="primary", icon=":material/play_arrow:", disabled=disabled or busy):
        try:
            job = submit()
        except AttnInputError as exc:  # the queue is full, or this session has its share of jobs
            st.warning(plain(exc), icon=":material/hourglass_disabled:")
        else:
            st.session_state[job_key] = job.id
            busy = True
    if job is not None:
        st.fragment(run_every=poll_s if busy else None)(status)(job.id, busy)


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
        why = f" because {snap['stop_reason']}" if snap.get("stop_reason") else ""
        st.caption(f"Stopped{why}: {len(records)} of {snap['n_runs']} runs kept ({stopped_keeps}).")


def other_job_caption(queue: JobQueue, job_keys: tuple[str, ...], poll_s: float) -> None:
    """'Another session's job is training…' when the running job is none of this session's (its owner is
    another session and its id is under none of ``job_keys``), in a fragment that reruns every ``poll_s``
    seconds while that job runs, so that its step stays current; when it has ended the page reruns once."""
    me = session_id()

    def others() -> Job | None:
        job = queue.running()
        mine = {st.session_state.get(k) for k in job_keys}
        return None if job is None or job.owner == me or job.id in mine else job

    polling = others() is not None

    def caption() -> None:
        job = others()
        if job is None:
            if polling:
                st.rerun()  # it has ended: redraw the page once (stops this polling)
            return
        snap = job.snapshot()
        st.caption(f"Another session's job is training on this server ({plain(snap['label'])}, step "
                   f"{snap['step']} of {snap['total']}); a Run now waits for it.")

    st.fragment(run_every=poll_s if polling else None)(caption)()
