"""ui.model_queue: a pass waiting for the shared model is told its place and an estimate from this server's
measured pass times; the queue is first come first served, bounded and emptied however a wait ends."""

from __future__ import annotations

import threading
import time

import pytest
import torch

from attncore.models.modules import exclusive, model_lock
from attncore.plan import Plan
from ui import model_queue
from ui.cached import Planned
from ui.model_queue import ModelQueue, PassTimes, Place, waiting_message


def _wait_for(cond, timeout: float = 10.0) -> None:
    t0 = time.monotonic()
    while not cond():
        assert time.monotonic() - t0 < timeout, "timed out"
        time.sleep(0.01)


def test_pass_times_median_ratio_fallbacks_and_bounds():
    t = PassTimes(window=3, max_kinds=2)
    assert t.estimate("a", 2.0) == 2.0  # nothing measured: the plan's own estimate
    for measured in (1.0, 3.0, 100.0, 4.0, 5.0):  # planned 1 s each: ratios 1, 3, 100, 4, 5
        t.record("a", 1.0, measured)
    assert t.measured("a") == 3  # the window keeps the last three: 100, 4, 5
    assert t.ratio("a") == 5.0
    assert t.estimate("a", 0.5) == pytest.approx(2.5)
    assert t.estimate("never", 2.0) == pytest.approx(10.0)  # another kind borrows the median over all
    t.record("b", 2.0, 1.0)
    t.record("c", 1.0, 1.0)  # a third kind: the least recently measured ("a") is forgotten
    assert t.measured("a") == 0 and t.measured("b") == 1 and t.measured("c") == 1
    t.record("b", 0.0, 1.0)
    t.record("b", 1.0, -1.0)  # ignored
    assert t.measured("b") == 1


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_places_and_estimates_first_come_first_served():
    times = PassTimes()
    times.record("sinks", 1.0, 2.0)  # this server runs a sinks pass in twice its planned seconds
    clock = _Clock()
    q = ModelQueue(times, clock)
    model = torch.nn.Linear(1, 1)
    lock = model_lock(model)
    seen: dict[int, list[Place]] = {1: [], 2: [], 3: []}
    order: list[int] = []
    release = threading.Event()

    def holder() -> None:
        with q.holding(model, lock, "sinks", 3.0):  # estimate 6 s
            order.append(0)
            release.wait(10)

    def waiter(i: int) -> None:
        with q.holding(model, lock, "sinks", 1.0, on_wait=seen[i].append, poll_s=0.02):
            order.append(i)

    threads = [threading.Thread(target=holder)]
    threads[0].start()
    _wait_for(lambda: order == [0])
    clock.now += 1.0  # the running pass has run 1 s of its 6
    for i in (1, 2, 3):
        threads.append(threading.Thread(target=waiter, args=(i,)))
        threads[-1].start()
        _wait_for(lambda i=i: len(seen[i]) >= 1)
    _wait_for(lambda: all(len(seen[i]) >= 2 for i in (1, 2, 3)))
    last = {i: seen[i][-1] for i in (1, 2, 3)}
    assert [last[i].place for i in (1, 2, 3)] == [2, 3, 4]
    assert [last[i].ahead for i in (1, 2, 3)] == [1, 2, 3]
    # the running pass's 5 s left, plus 2 s for each waiting pass ahead (planned 1 s x measured ratio 2)
    assert [last[i].wait_s for i in (1, 2, 3)] == pytest.approx([5.0, 7.0, 9.0])
    assert all(p.own_s == pytest.approx(2.0) and p.measured for p in last.values())
    assert len(q) == 4
    release.set()
    for t in threads:
        t.join(10)
    assert order == [0, 1, 2, 3]  # arrival order
    assert len(q) == 0  # cleared


def test_a_wait_that_raises_gives_up_its_place_and_nested_holding_passes_in():
    q = ModelQueue(PassTimes())
    model = torch.nn.Linear(1, 1)
    lock = model_lock(model)
    release, order = threading.Event(), []

    def holder() -> None:
        with q.holding(model, lock, "k", 1.0):
            with q.holding(model, lock, "k", 1.0):  # re-entrant in one thread: no wait, no deadlock
                order.append("nested")
            release.wait(10)

    def stale(p: Place) -> None:
        raise RuntimeError("the run was replaced")

    t = threading.Thread(target=holder)
    t.start()
    _wait_for(lambda: order == ["nested"])
    with pytest.raises(RuntimeError), q.holding(model, lock, "k", 1.0, on_wait=stale, poll_s=0.01):
        order.append("never")
    assert len(q) == 1  # only the holder
    release.set()
    t.join(10)
    assert len(q) == 0 and order == ["nested"]
    with exclusive(model):  # the queue's lock is the one every pass of this model holds
        assert lock._is_owned()


def test_waiting_message_says_the_numbers():
    p = Place(place=3, ahead=2, wait_s=7.4, own_s=2.0, waited_s=1.2, measured=True)
    msg = waiting_message(p, "a 64-token pass of the decoder")
    assert "3rd in line" in msg and "2 passes ahead" in msg and "about 7 s" in msg and "about 2 s" in msg
    assert "this server's recent pass times" in msg
    first = waiting_message(Place(2, 1, 0.4, 1.0, 0.0, False), "x")
    assert "2nd in line" in first and "1 pass ahead" in first and "no pass measured" in first
    assert "11th" in waiting_message(Place(11, 10, 1, 1, 0, True), "x")


class _Slot:
    """A stand-in for an st.empty() slot: records what it shows."""

    def __init__(self) -> None:
        self.shown: list[str] = []

    def empty(self) -> _Slot:
        self.shown.append("")
        return self

    def info(self, body: str, icon: str | None = None) -> None:
        self.shown.append(body)


def test_planned_shows_the_place_while_waiting_and_records_its_time():
    model = torch.nn.Linear(1, 1)
    kind = "test_queue_planned"
    planned = Planned(kind, lambda x: Plan("a test pass", 0, 0.1, lambda: x * 2, model=model))
    planned.clear()
    model_queue.QUEUE.times.clear()
    release, held = threading.Event(), threading.Event()

    def holder() -> None:
        with model_queue.QUEUE.holding(model, model_lock(model), kind, 0.1):
            held.set()
            release.wait(10)

    t = threading.Thread(target=holder)
    t.start()
    held.wait(10)
    slot, out = _Slot(), []
    w = threading.Thread(target=lambda: out.append(planned(21, where=slot)))
    w.start()
    _wait_for(lambda: any("in line" in s for s in slot.shown))
    release.set()
    t.join(10)
    w.join(10)
    assert out[0].value == 42
    msgs = [s for s in slot.shown if s]
    assert msgs and "2nd in line" in msgs[0] and "1 pass ahead" in msgs[0] and "a test pass" in msgs[0]
    assert slot.shown[-1] == ""  # cleared once the pass started
    assert model_queue.QUEUE.times.measured(kind) == 1  # its measured time feeds later estimates
    assert len(model_queue.QUEUE) == 0
    assert planned(21, where=_Slot()).value == 42  # a cache hit: no pass, no new measurement
    assert model_queue.QUEUE.times.measured(kind) == 1
    planned.clear()
