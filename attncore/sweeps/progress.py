"""Progress, partial results and stopping, shared by both sweep engines.

A sweep reports ``progress(fraction_done, message)`` about every 0.1 s from the calling thread
(returning ``False`` stops it), may hand the caller its short lengths early through a
``partial`` callback, and stops between chunks of work when its cancel event is set; a stop
raises :class:`SweepCancelled`. :class:`Ticker` is the clock both engines report through.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable

import pandas as pd

from attncore.budget import fmt_count
from attncore.errors import Cancelled

__all__ = ["PARTIAL_FRACTIONS", "Partial", "Progress", "SweepCancelled", "Ticker"]

Progress = Callable[[float, str], "bool | None"]
Partial = Callable[[list["pd.DataFrame | None"]], None]

# A staged run reports its finished lengths after about these fractions of its work (then the rest).
PARTIAL_FRACTIONS: tuple[float, ...] = (1 / 16, 1 / 4)
REPORT_EVERY_S = 0.1


class SweepCancelled(Cancelled):
    """The progress callback returned False (or the cancel event was set) between chunks."""


class Ticker:
    """Throttled progress for ``total`` work units: a message with the share done and the time left.

    ``tick(done)`` (units done so far) calls ``progress`` at most every
    :data:`REPORT_EVERY_S` seconds and returns False when the caller asked to stop (a
    ``False`` from ``progress`` or the ``cancel`` event); ``finish()`` reports 1.0 once.
    """

    def __init__(self, total: int, progress: Progress | None, cancel: threading.Event | None = None):
        self.total = max(1, int(total))
        self.progress, self.cancel = progress, cancel
        self.t0 = time.perf_counter()
        self.last = 0.0

    def stopped(self) -> bool:
        """Whether the cancel event is set."""
        return self.cancel is not None and self.cancel.is_set()

    def tick(self, done: float) -> bool:
        """Report ``done`` units (throttled); False when the sweep should stop."""
        if self.stopped():
            return False
        if self.progress is None:
            return True
        now = time.perf_counter()
        if now - self.last < REPORT_EVERY_S:
            return True
        self.last = now
        frac = min(1.0, done / self.total)
        eta = (now - self.t0) * (1 - frac) / frac if frac > 0.02 else float("nan")
        msg = f"{frac:.0%} of {fmt_count(self.total)} random numbers" + \
            (f", about {eta:.0f} s left" if math.isfinite(eta) else "")
        return self.progress(frac, msg) is not False

    def finish(self) -> None:
        """The final report: 1.0, "done"."""
        if self.progress is not None:
            self.progress(1.0, "done")
