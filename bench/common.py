"""Timing helpers shared by the benchmarks (median of repeats, after a warm-up)."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import torch


def median_time(fn: Callable[[], object], *, repeats: int = 5, warmup: int = 1) -> float:
    """Median wall time of ``fn()`` in seconds (CUDA work is synchronised)."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def row(label: str, ours: float, base: float, base_name: str) -> str:
    """One line: ours, the baseline and ours/baseline."""
    return (f"{label:<44} ours {ours * 1e3:9.2f} ms   {base_name} {base * 1e3:9.2f} ms   "
            f"ratio ours/{base_name} {ours / base:6.2f}")
