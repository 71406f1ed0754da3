"""What a probe returns: one :class:`BackendResult` per backend and baseline, grouped by size, with
every timed round kept (the median and the spread are computed from them, never stored alone)."""

from __future__ import annotations

import math
import os
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field

from attncore.kernels.spec import KernelSpec

__all__ = [
    "MEDIAN_COVERAGE",
    "BackendResult",
    "MachineLoad",
    "SizeResult",
    "Spread",
    "SweepResult",
    "load_average",
    "machine_load",
    "paired_ratio",
    "spread",
]


# The interval of a median: the order statistics that hold it with at least this probability.
MEDIAN_COVERAGE = 0.95


def _coverage(k: int, n: int) -> float:
    """P(x_(k) <= median <= x_(n+1-k)) for ``n`` independent values of a continuous distribution."""
    return 1.0 - 2.0 * sum(math.comb(n, i) for i in range(k)) / 2.0**n


@dataclass(frozen=True)
class Spread:
    """A median with an interval around it, from ``n`` independent values.

    Attributes:
        median: the median.
        lo, hi: the order statistics ``x_(k)``, ``x_(n+1-k)`` with the largest ``k`` whose interval
            holds the distribution's median with probability at least :data:`MEDIAN_COVERAGE`
            (a distribution-free interval); the smallest and largest value (``k = 1``) when fewer
            than 6 values cannot reach it. Equal to ``median`` for one value.
        n: how many values.
        k: the order statistic used (1 = min–max).
    """

    median: float
    lo: float
    hi: float
    n: int
    k: int = 1

    @property
    def coverage(self) -> float:
        """Probability that [lo, hi] holds the true median (independent values); 0 for one value."""
        return 0.0 if self.n < 2 else _coverage(self.k, self.n)

    @property
    def interval(self) -> str:
        """What [lo, hi] is, in words: ``"min–max"`` or ``"2nd–8th of 9"``."""
        if self.k == 1:
            return "min–max"
        return f"{_ordinal(self.k)}–{_ordinal(self.n + 1 - self.k)} of {self.n}"


def _ordinal(i: int) -> str:
    return f"{i}{'th' if 10 <= i % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(i % 10, 'th')}"


def spread(values: Sequence[float]) -> Spread:
    """Median of ``values`` (at least one) and the interval of :class:`Spread`."""
    vals = sorted(float(v) for v in values)
    if not vals:
        raise ValueError("spread() needs at least one value")
    n = len(vals)
    k = 1
    while k + 1 <= n // 2 and _coverage(k + 1, n) >= MEDIAN_COVERAGE:
        k += 1
    return Spread(statistics.median(vals), vals[k - 1], vals[n - k], n, k)


@dataclass(frozen=True)
class BackendResult:
    """One backend (or baseline) at one size.

    Attributes:
        name: ``"flash"``, ``"efficient"``, ``"cudnn"``, ``"math"`` (forced with
            ``sdpa_kernel``), ``"default"`` (torch's own dispatch), ``"attncore"`` or
            ``"notebook"`` (the materialised baselines).
        L, S: queries and keys.
        status: ``"ran"``, ``"refused"`` (torch would not run it; ``reason`` is torch's),
            ``"skipped"`` (the materialised matrices would exceed the budget; ``reason``
            says by how much), ``"out of memory"`` or ``"failed"``.
        reason: torch's refusal, the budget note or the error; empty when it ran.
        chosen: torch's default dispatch runs this backend (False for baselines).
        same_as_default: the output equals the default dispatch's bit for bit (None: not
            compared, e.g. baselines or a refusal).
        seconds: median of the timed rounds (one call each, after one warm-up call).
        times: every timed round's seconds, in round order (round ``k`` of every backend of a
            size ran in the same interleaved round).
        peak_bytes: peak memory above what was allocated before the call (inputs, mask),
            output included; None when not measured.
        max_err: max |out - reference| over the compared query rows' finite entries,
            fully masked rows included (the reference gives them 0); None with dropout.
        masked_err: max |out| over the fully masked rows (NaN when the output is NaN there);
            None when no row is fully masked or with dropout.
        nonfinite_rows: compared query rows with a NaN or infinite output.
        rows_compared: query rows compared with the reference (all rows when ``L`` is small).
        estimated_bytes: for materialised paths, the budget estimate of their L x S matrices.
        flops: the flops this path does per call (:func:`attncore.kernels.cost.call_flops`).
    """

    name: str
    L: int
    S: int
    status: str
    reason: str = ""
    chosen: bool = False
    same_as_default: bool | None = None
    seconds: float | None = None
    times: tuple[float, ...] = ()
    peak_bytes: float | None = None
    max_err: float | None = None
    masked_err: float | None = None
    nonfinite_rows: int = 0
    rows_compared: int = 0
    estimated_bytes: float | None = None
    flops: float | None = None

    @property
    def accepted(self) -> bool | None:
        """True when it ran, False when torch refused it, None when not tried (budget)."""
        if self.status == "refused":
            return False
        if self.status == "skipped":
            return None
        return True

    @property
    def rounds(self) -> int:
        """Timed rounds (0 when it did not run)."""
        return len(self.times) if self.times else int(self.seconds is not None)

    @property
    def time(self) -> Spread | None:
        """Median and range of the timed rounds (None when it did not run)."""
        if self.times:
            return spread(self.times)
        if self.seconds is not None:
            return Spread(self.seconds, self.seconds, self.seconds, 1)
        return None


@dataclass(frozen=True)
class MachineLoad:
    """How busy the machine was while a size was timed.

    Attributes:
        before, after: the 1-minute load average (``os.getloadavg``) before and after the rounds;
            NaN where the platform has none.
        cpus: CPUs this process may run on.
        threads: torch's intra-op threads.
    """

    before: float
    after: float
    cpus: int
    threads: int

    @property
    def peak(self) -> float:
        """The larger of the two readings (NaN when unknown)."""
        vals = [v for v in (self.before, self.after) if math.isfinite(v)]
        return max(vals) if vals else float("nan")

    @property
    def busy(self) -> bool:
        """More runnable work than CPUs at either reading: timings are slowed and spread out."""
        return math.isfinite(self.peak) and self.peak > self.cpus


def _cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def load_average() -> float:
    """The machine's 1-minute load average (NaN where the platform has none)."""
    try:
        return float(os.getloadavg()[0])
    except (AttributeError, OSError):
        return float("nan")


def machine_load(before: float, threads: int) -> MachineLoad:
    """A :class:`MachineLoad` from a reading taken before the rounds and one taken now."""
    return MachineLoad(before, load_average(), _cpus(), threads)


def paired_ratio(a: BackendResult, b: BackendResult) -> Spread | None:
    """``a``'s time over ``b``'s, round by round (the rounds are interleaved, so a drift in the
    machine's speed hits both sides of each ratio alike): the median and range of the per-round
    ratios. None when either did not run."""
    if a.time is None or b.time is None:
        return None
    if a.times and b.times:
        pairs = [x / y for x, y in zip(a.times, b.times, strict=False) if y > 0]
        if pairs:
            return spread(pairs)
    if b.time.median <= 0:
        return None
    r = a.time.median / b.time.median
    return Spread(r, r, r, 1)


@dataclass(frozen=True)
class SizeResult:
    """Every backend and baseline at one size ``L x S``.

    Attributes:
        default_backend: the backend torch's default dispatch picks (a key of ``BACKENDS``),
            or None when it could not be told.
        choice_source: how it was told: ``"torch._fused_sdp_choice"`` or ``"output match"``.
        load: how busy the machine was while the rounds ran (None: not recorded).
    """

    L: int
    S: int
    rows: tuple[BackendResult, ...]
    default_backend: str | None
    choice_source: str
    load: MachineLoad | None = None

    def row(self, name: str) -> BackendResult:
        """The result of one backend / baseline."""
        for r in self.rows:
            if r.name == name:
                return r
        raise KeyError(name)


@dataclass(frozen=True)
class SweepResult:
    """A sweep over lengths ``L = S``.

    Attributes:
        sizes: one :class:`SizeResult` per length reached (all of them unless cancelled).
        memory_note: how the memory column was measured (and any failure of that).
        cancelled: the cancel callback stopped the sweep early.
    """

    spec: KernelSpec
    device: str
    lengths: tuple[int, ...]
    budget_bytes: float
    sizes: tuple[SizeResult, ...]
    memory_note: str
    cancelled: bool = False
    notes: tuple[str, ...] = field(default_factory=tuple)
