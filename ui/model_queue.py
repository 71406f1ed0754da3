"""The queue for a shared model: who waits behind whose pass, each waiter's place and an estimate of the wait.

One loaded model serves every session of the server, and its passes run one at a time
(:func:`attncore.models.modules.exclusive`). Without this module a student whose pass waits behind ten
others sees a spinner and nothing else. :class:`ModelQueue` keeps, per model, the pass running and the
passes waiting in arrival order (first come, first served: only the first waiter tries the model's lock,
with a timeout, so the place a waiter is told is the place it has), and calls ``on_wait(Place)`` every
``poll_s`` while a pass waits; :class:`PassTimes` turns the server's own measured pass times into the
estimate: per kind of pass (``ui.cached.Planned``'s name), the moving median of the last
:data:`WINDOW` ratios measured / planned seconds (the plan's own estimate grows with the token count, so
the ratio carries a measurement at 64 tokens over to 1,024), times the waiting pass's planned seconds; a
kind never measured yet borrows the median over every kind, and before any pass, the plan's estimate
stands. Everything held is bounded (:data:`WINDOW` ratios per kind, :data:`MAX_KINDS` kinds) and a
waiter's entry is removed however its block ends (an interrupted run included).

No Streamlit and no torch here: a page draws :class:`Place` with :func:`waiting_message`.
"""

from __future__ import annotations

import itertools
import statistics
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

__all__ = ["MAX_KINDS", "QUEUE", "WINDOW", "ModelQueue", "PassTimes", "Place", "waiting_message"]

WINDOW = 15  # measured ratios kept per kind of pass (a moving median)
MAX_KINDS = 64  # kinds of pass remembered (the least recently measured forgotten first)


class PassTimes:
    """This server's measured pass times, as ratios measured / planned seconds per kind (bounded)."""

    def __init__(self, window: int = WINDOW, max_kinds: int = MAX_KINDS) -> None:
        self.window = max(1, int(window))
        self.max_kinds = max(1, int(max_kinds))
        self._ratios: OrderedDict[str, deque[float]] = OrderedDict()
        self._lock = threading.Lock()

    def record(self, kind: str, planned_s: float, measured_s: float) -> None:
        """Keep one pass's ratio (ignored when either time is not positive)."""
        if not (planned_s > 0 and measured_s > 0):
            return
        with self._lock:
            d = self._ratios.pop(kind, None) or deque(maxlen=self.window)
            d.append(measured_s / planned_s)
            self._ratios[kind] = d
            while len(self._ratios) > self.max_kinds:
                self._ratios.popitem(last=False)

    def ratio(self, kind: str) -> float | None:
        """The moving median ratio of ``kind``, else over every kind, else None (nothing measured)."""
        with self._lock:
            own = self._ratios.get(kind)
            if own:
                return statistics.median(own)
            every = [r for d in self._ratios.values() for r in d]
        return statistics.median(every) if every else None

    def estimate(self, kind: str, planned_s: float) -> float:
        """Seconds a pass of ``kind`` planned at ``planned_s`` takes on this server."""
        r = self.ratio(kind)
        return max(0.0, planned_s * (1.0 if r is None else r))

    def measured(self, kind: str) -> int:
        """How many of ``kind``'s ratios are held (at most the window)."""
        with self._lock:
            return len(self._ratios.get(kind, ()))

    def clear(self) -> None:
        with self._lock:
            self._ratios.clear()


@dataclass(frozen=True)
class Place:
    """A waiting pass's view of its model's queue.

    Attributes:
        place: 1 + the passes ahead of it (the running one counted): 2 when one pass runs and none waits
            before it.
        ahead: passes ahead of it (``place - 1``).
        wait_s: estimated seconds until it starts (the running pass's remaining estimate plus the
            estimates of the waiting ones before it).
        own_s: its own estimated seconds.
        waited_s: seconds it has waited so far.
        measured: whether the estimates come from this server's measured passes (False: the plans' own).
    """

    place: int
    ahead: int
    wait_s: float
    own_s: float
    waited_s: float
    measured: bool


@dataclass
class _Entry:
    number: int
    kind: str
    estimate: float
    thread: int
    started: float | None = None


class ModelQueue:
    """Per model (by identity), the pass holding its lock and the passes waiting for it, first come first
    served. ``clock``: seconds (monotonic), replaceable in tests."""

    def __init__(self, times: PassTimes | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.times = times if times is not None else PassTimes()
        self._clock = clock
        self._cond = threading.Condition()
        self._running: dict[int, _Entry] = {}
        self._waiting: dict[int, list[_Entry]] = {}
        self._numbers = itertools.count()

    def __len__(self) -> int:
        """Passes registered now (running and waiting, every model)."""
        with self._cond:
            return len(self._running) + sum(len(w) for w in self._waiting.values())

    def _place(self, key: int, me: _Entry, waited_s: float) -> Place:
        now = self._clock()
        queue = self._waiting.get(key, [])
        before = queue[:queue.index(me)] if me in queue else []
        run = self._running.get(key)
        wait = sum(e.estimate for e in before)
        if run is not None and run.started is not None:
            wait += max(0.0, run.estimate - (now - run.started))
        ahead = len(before) + (1 if run is not None else 0)
        return Place(ahead + 1, ahead, wait, me.estimate, waited_s, self.times.ratio(me.kind) is not None)

    @contextmanager
    def holding(self, model: Any, lock: Any, kind: str, planned_s: float,
                on_wait: Callable[[Place], None] | None = None, poll_s: float = 0.25) -> Iterator[None]:
        """Hold ``lock`` (``model``'s, re-entrant) for the block, after the passes that came before in
        ``model``'s queue; ``on_wait(place)`` is called every ``poll_s`` while it waits (never when the model
        is free; it may raise, e.g. Streamlit ending a stale run: the place is given up). A thread that
        holds the lock already passes straight in. The block's time is recorded by :meth:`record`."""
        owned = getattr(lock, "_is_owned", None)
        if owned is not None and owned():  # re-entrant: this thread holds the model already
            with lock:
                yield
            return
        key = id(model)
        me = _Entry(next(self._numbers), kind, self.times.estimate(kind, planned_s), threading.get_ident())
        with self._cond:
            self._waiting.setdefault(key, []).append(me)
        t0 = self._clock()
        try:
            while True:
                with self._cond:
                    first = self._waiting[key][0] is me
                if first and lock.acquire(timeout=poll_s):
                    with self._cond:
                        self._waiting[key].remove(me)
                        me.started = self._clock()
                        self._running[key] = me
                        self._cond.notify_all()
                    break
                if on_wait is not None:
                    with self._cond:
                        p = self._place(key, me, self._clock() - t0)
                    on_wait(p)
                if not first:
                    with self._cond:
                        if self._waiting[key][0] is not me:
                            self._cond.wait(poll_s)
        except BaseException:
            self._leave(key, me)
            raise
        try:
            yield
        finally:
            lock.release()
            self._leave(key, me)

    def _leave(self, key: int, me: _Entry) -> None:
        with self._cond:
            if self._running.get(key) is me:
                del self._running[key]
            queue = self._waiting.get(key)
            if queue is not None and me in queue:
                queue.remove(me)
            if queue is not None and not queue:
                del self._waiting[key]
            self._cond.notify_all()

    def record(self, kind: str, planned_s: float, measured_s: float) -> None:
        """A computed pass's measured seconds (the estimates of later waiters follow them)."""
        self.times.record(kind, planned_s, measured_s)


QUEUE = ModelQueue()  # the process-wide registry (one server's sessions share it)


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def waiting_message(p: Place, label: str) -> str:
    """The line a waiting student reads: their place, the passes ahead, the estimated wait and where the
    estimate comes from (plain text: ``label`` is the plan's own words, never user text)."""
    others = "1 pass" if p.ahead == 1 else f"{p.ahead} passes"
    source = ("this server's recent pass times" if p.measured
              else "the plans' estimates (no pass measured on this server yet)")
    return (f"The model is busy with other students' passes: yours ({label}) is {_ordinal(p.place)} in line, "
            f"{others} ahead, waiting {p.waited_s:.0f} s so far. Estimated start in about {p.wait_s:.0f} s "
            f"and about {p.own_s:.0f} s of its own, by {source}. It starts by itself.")
