"""Admission control: heavy work from every session of this server queues for memory and cores.

One process serves a whole class. Without a limit, twenty students opening the largest
Heatmaps view or an Entropy sweep at once would each allocate their peak together and the
server would swap or be killed. :class:`Limiter` admits heavy jobs first come, first served
while the sum of their estimated bytes stays within ``capacity_bytes`` and no more than
``slots`` run at once (one per core by default); the rest wait, and a page shows "waiting for
N others". Light work (under ``LIGHT_BYTES`` and ``LIGHT_SECONDS``) never waits.

:func:`admit` is a plain context manager (no Streamlit), for any code: sweeps, theory,
gradient sweeps, model loads, training runs. :func:`heavy` wraps it for a page: it shows
the waiting message in place while queued. :func:`run_plan` admits a planned computation
(:class:`attncore.plan.Plan`, which holds its own estimate) the same way, taking the plan's
model first: a session waiting for a model another session is running holds no place here,
so it does not keep light or other work waiting (and no one holds a place while waiting for a
model, so no two sessions can wait for each other). :func:`sidebar_status` draws the load line.

Configuration (environment): ``ATTNLAB_ADMIT_BYTES`` (default 3 x ``ATTNCORE_MAX_BYTES``,
i.e. 6 GiB: the sum of estimates allowed to run together) and ``ATTNLAB_ADMIT_SLOTS``
(default: the CPU count).
"""

from __future__ import annotations

import itertools
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from attncore.budget import fmt_bytes, max_bytes

__all__ = ["LIGHT_BYTES", "LIGHT_SECONDS", "Limiter", "Snapshot", "admit", "heavy", "limiter", "run_plan",
           "sidebar_status"]

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)
LIGHT_BYTES = 64 * 1024**2  # below this and LIGHT_SECONDS a job runs at once, uncounted
LIGHT_SECONDS = 0.5
BYTES_ENV, SLOTS_ENV = "ATTNLAB_ADMIT_BYTES", "ATTNLAB_ADMIT_SLOTS"


@dataclass(frozen=True)
class Snapshot:
    """The limiter's state for display: what runs and how many wait."""

    running: int
    waiting: int
    bytes_running: int
    capacity_bytes: int
    slots: int


@dataclass
class _Ticket:
    nbytes: int
    seconds: float
    label: str
    number: int
    started: float = field(default=0.0)


class Limiter:
    """First come, first served admission by estimated bytes and a number of concurrent slots."""

    def __init__(self, capacity_bytes: int, slots: int):
        self.capacity_bytes = max(1, int(capacity_bytes))
        self.slots = max(1, int(slots))
        self._cond = threading.Condition()
        self._queue: list[_Ticket] = []
        self._running: list[_Ticket] = []
        self._numbers = itertools.count()

    def snapshot(self) -> Snapshot:
        with self._cond:
            return Snapshot(len(self._running), len(self._queue), sum(t.nbytes for t in self._running),
                            self.capacity_bytes, self.slots)

    def _fits(self, t: _Ticket) -> bool:
        if not self._running:
            return True  # alone, anything within attncore's own budget may run
        used = sum(r.nbytes for r in self._running)
        return len(self._running) < self.slots and used + t.nbytes <= self.capacity_bytes

    @contextmanager
    def admit(self, nbytes: float, seconds: float = 1.0, label: str = "job",
              on_wait: Callable[[int, Snapshot], None] | None = None,
              poll_s: float = 0.25) -> Iterator[None]:
        """Hold a place for the block; waits (calling ``on_wait(ahead, snapshot)``) while it cannot run.

        ``ahead`` counts the jobs running plus those queued before this one. ``on_wait`` may
        raise (e.g. Streamlit interrupting a stale run); the place in the queue is given up.
        """
        if nbytes < LIGHT_BYTES and seconds < LIGHT_SECONDS:
            yield
            return
        t = _Ticket(int(nbytes), float(seconds), label, next(self._numbers))
        with self._cond:
            self._queue.append(t)
        try:
            while True:
                with self._cond:
                    if self._queue[0] is t and self._fits(t):
                        self._queue.pop(0)
                        t.started = time.monotonic()
                        self._running.append(t)
                        self._cond.notify_all()
                        break
                    ahead = len(self._running) + self._queue.index(t)
                    snap = Snapshot(len(self._running), len(self._queue),
                                    sum(r.nbytes for r in self._running), self.capacity_bytes, self.slots)
                if on_wait is not None:
                    on_wait(ahead, snap)
                with self._cond:
                    if not (self._queue[0] is t and self._fits(t)):
                        self._cond.wait(poll_s)
        except BaseException:
            with self._cond:
                if t in self._queue:
                    self._queue.remove(t)
                    self._cond.notify_all()
            raise
        try:
            yield
        finally:
            with self._cond:
                self._running.remove(t)
                self._cond.notify_all()


def _env_int(name: str, default: int) -> int:
    try:
        v = int(float(os.environ.get(name, "")))
        return v if v > 0 else default
    except ValueError:
        return default


_LIMITER: Limiter | None = None
_LOCK = threading.Lock()


def limiter() -> Limiter:
    """The process-wide limiter (created on first use from the environment)."""
    global _LIMITER
    with _LOCK:
        if _LIMITER is None:
            _LIMITER = Limiter(_env_int(BYTES_ENV, 3 * max_bytes()), _env_int(SLOTS_ENV, os.cpu_count() or 2))
        return _LIMITER


def admit(nbytes: float, seconds: float = 1.0, label: str = "job",
          on_wait: Callable[[int, Snapshot], None] | None = None) -> Any:
    """``with admit(bytes, seconds, label):`` around heavy work anywhere (no Streamlit needed)."""
    return limiter().admit(nbytes, seconds, label, on_wait)


@contextmanager
def heavy(nbytes: float, seconds: float = 1.0, label: str = "this view", where: Any = None) -> Iterator[None]:
    """:func:`admit` for a page: while queued, a message says how many others are ahead."""
    import streamlit as st

    slot = (where or st).empty()
    shown = [False]

    def on_wait(ahead: int, snap: Snapshot) -> None:
        others = "1 other" if ahead == 1 else f"{ahead} others"
        slot.info(f"The server is busy: {label} is waiting for {others} "
                  f"({snap.running} running, {fmt_bytes(snap.bytes_running)} of "
                  f"{fmt_bytes(snap.capacity_bytes)} in use). It starts by itself.",
                  icon=":material/hourglass_top:")
        shown[0] = True

    try:
        with admit(nbytes, seconds, label, on_wait):
            if shown[0]:
                slot.empty()
            yield
    finally:
        if shown[0]:
            slot.empty()


class _Plan(Protocol[T_co]):  # attncore.plan.Plan, read by its fields (no attncore import here)
    label: str
    nbytes: int
    seconds: float

    def holding(self) -> Any: ...

    def run(self) -> T_co: ...


def run_plan(plan: _Plan[T], where: Any = None) -> T:
    """Run ``plan`` once admitted: its model held first (waiting for it takes no place), then a place for
    its estimated bytes and seconds (:func:`heavy`, the waiting message in ``where``)."""
    with plan.holding(), heavy(plan.nbytes, plan.seconds, label=plan.label, where=where):
        return plan.run()


def sidebar_status(where: Any) -> None:
    """One caption line: heavy jobs running and waiting on this server."""
    snap = limiter().snapshot()
    if snap.running or snap.waiting:
        where.caption(f"Server: {snap.running} heavy job{'s' if snap.running != 1 else ''} running, "
                      f"{snap.waiting} waiting ({fmt_bytes(snap.bytes_running)} of "
                      f"{fmt_bytes(snap.capacity_bytes)}).")
    else:
        where.caption(f"Server: idle (up to {snap.slots} heavy jobs at once, "
                      f"{fmt_bytes(snap.capacity_bytes)}).")
