"""Admission control: heavy jobs from many threads queue by bytes and slots, first come first served."""

from __future__ import annotations

import threading
import time

import pytest

from ui.admission import LIGHT_BYTES, Limiter

GB = 1024**3


def test_jobs_never_exceed_capacity_or_slots_and_all_finish() -> None:
    lim = Limiter(capacity_bytes=3 * GB, slots=2)
    lock = threading.Lock()
    state = {"bytes": 0, "jobs": 0, "max_bytes": 0, "max_jobs": 0, "waited": 0, "done": 0}

    def job(nbytes: int) -> None:
        def on_wait(ahead: int, snap) -> None:  # noqa: ANN001
            with lock:
                state["waited"] += 1
            # ahead = running + the queued before this one. Nothing may be running for a moment
            # (the head of the queue has not woken to take the freed slot yet), but then this
            # job is not the head: someone is always ahead of a job that waits.
            assert 1 <= ahead <= snap.running + snap.waiting - 1, (ahead, snap)

        with lim.admit(nbytes, seconds=5, label="t", on_wait=on_wait, poll_s=0.01):
            with lock:
                state["bytes"] += nbytes
                state["jobs"] += 1
                state["max_bytes"] = max(state["max_bytes"], state["bytes"])
                state["max_jobs"] = max(state["max_jobs"], state["jobs"])
            time.sleep(0.02)
            with lock:
                state["bytes"] -= nbytes
                state["jobs"] -= 1
                state["done"] += 1

    threads = [threading.Thread(target=job, args=((1 + i % 3) * GB // 2,)) for i in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not any(t.is_alive() for t in threads)
    assert state["max_jobs"] <= 2 and state["max_bytes"] <= 3 * GB, state
    assert state["waited"] > 0  # some really queued
    assert state["done"] == len(threads)  # none gave up its place (an on_wait that raises would)
    snap = lim.snapshot()
    assert snap.running == 0 and snap.waiting == 0


def test_first_come_first_served_and_waiting_count() -> None:
    lim = Limiter(capacity_bytes=GB, slots=1)
    order: list[int] = []
    seen_ahead: dict[int, int] = {}
    gate = threading.Event()

    def first() -> None:
        with lim.admit(GB, 5, "first"):
            order.append(0)
            gate.wait(10)

    def later(i: int) -> None:
        def on_wait(ahead: int, snap) -> None:  # noqa: ANN001
            seen_ahead.setdefault(i, ahead)

        with lim.admit(GB, 5, f"job{i}", on_wait=on_wait, poll_s=0.01):
            order.append(i)

    t0 = threading.Thread(target=first)
    t0.start()
    while not order:
        time.sleep(0.005)
    rest = []
    for i in (1, 2, 3):
        t = threading.Thread(target=later, args=(i,))
        t.start()
        rest.append(t)
        while i not in seen_ahead:
            time.sleep(0.005)
    assert seen_ahead == {1: 1, 2: 2, 3: 3}  # "waiting for N others"
    assert lim.snapshot().waiting == 3
    gate.set()
    for t in [t0, *rest]:
        t.join(10)
    assert order == [0, 1, 2, 3]


def test_light_work_never_waits_and_a_cancelled_waiter_leaves_the_queue() -> None:
    lim = Limiter(capacity_bytes=GB, slots=1)
    with lim.admit(GB, 5, "big"):
        with lim.admit(LIGHT_BYTES // 2, 0.1, "small"):  # would deadlock if it queued
            pass

        def stale(ahead: int, snap) -> None:  # noqa: ANN001
            raise RuntimeError("the page was rerun")

        with pytest.raises(RuntimeError), lim.admit(GB, 5, "stale", on_wait=stale):
            pass
        assert lim.snapshot().waiting == 0
    assert lim.snapshot().running == 0


def test_a_job_bigger_than_capacity_runs_alone() -> None:
    lim = Limiter(capacity_bytes=GB, slots=2)
    with lim.admit(5 * GB, 5, "huge"):
        assert lim.snapshot().running == 1


def test_pages_show_the_server_load_in_the_sidebar() -> None:
    from tests.chart_data import run_app

    at = run_app("pages/1_Heatmaps.py")
    assert not at.exception
    captions = [c.value for c in at.sidebar.caption]
    assert any(c.startswith("Server: idle") for c in captions), captions
