"""The cache boundary for the Kernels page: every SDPA backend timed at one size, and peak memory over the
sizes. Shared helpers in :mod:`ui.cached`.
"""

from __future__ import annotations

import streamlit as st

from attncore import kernels as _kernels
from ui.cached import Timed, timed

__all__ = [
    "KERNEL_DRAW_PAUSE_S",
    "kernel_memory",
    "KERNEL_MIN_ROUNDS",
    "KERNEL_PARTIAL_AFTER_S",
    "kernel_probe",
    "KERNEL_REPEATS",
    "KERNEL_ROUND_SECONDS",
]



# ---------------------------------------------------------------------------- Kernels page (issue 13)
# Interleaved timed rounds after a warm-up: 9 where they are cheap (order statistics that hold the median
# with 96%), never fewer than 5 (min-max holds it with 94%), and no round starts once the paths have spent
# 0.2 s each on average, so that the default view opens within issue 11's 5 s (9 rounds everywhere took
# its first render from ~6 to ~9 s of script time on this 2-core machine).
KERNEL_REPEATS = 9
KERNEL_MIN_ROUNDS = 5
KERNEL_ROUND_SECONDS = 0.2
# A kernel_probe call that took longer than this was measured now, not served from the cache: the page then
# draws the sizes done so far while it times the rest (a cached size comes back in ~1-3 ms).
KERNEL_PARTIAL_AFTER_S = 0.05
# After drawing a partial chart the page waits this long before timing the next size: on a machine where the
# browser shares the cores (a laptop running the app), its redraw (~50-100 ms of Plotly) would otherwise run
# during the next size's timed rounds and slow them.
KERNEL_DRAW_PAUSE_S = 0.1


@st.cache_data(max_entries=64, show_spinner=False)
def kernel_probe(spec: _kernels.KernelSpec, T: int, device: str) -> Timed[_kernels.SizeResult]:
    """Every SDPA backend, the default dispatch and both baselines at L = S = T (no memory yet)."""
    return timed(lambda: _kernels.probe(spec, T, device, repeats=KERNEL_REPEATS, min_rounds=KERNEL_MIN_ROUNDS,
                                        max_seconds=KERNEL_ROUND_SECONDS, measure_memory=False))


@st.cache_data(max_entries=16, show_spinner=False)
def kernel_memory(spec: _kernels.KernelSpec, lengths: tuple[int, ...],
                  device: str) -> Timed[tuple[tuple[_kernels.SizeResult, ...], str]]:
    """The probes of ``lengths`` with peak memory filled in (CPU: one fresh measuring process)."""
    sizes = [kernel_probe(spec, T, device).value for T in lengths]

    def run() -> tuple[tuple[_kernels.SizeResult, ...], str]:
        out, note = _kernels.measure_memory(sizes, spec, device)
        return tuple(out), note

    return timed(run)
