"""A sweep over lengths ``T = L = S``: the work checked before anything runs, then a probe per
length, smallest first, then one memory pass over all of them."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from attncore.errors import AttnInputError
from attncore.kernels.cost import check_sweep, default_budget_bytes
from attncore.kernels.memory import measure_memory as _measure
from attncore.kernels.probe import Progress, probe_size
from attncore.kernels.results import SizeResult, SweepResult
from attncore.kernels.spec import KernelSpec, check_lengths

__all__ = ["Cancel", "sweep"]

Cancel = Callable[[], bool]


def sweep(
    spec: KernelSpec,
    lengths: Sequence[int],
    device: torch.device | str,
    *,
    repeats: int = 5,
    max_seconds: float = 2.0,
    budget_bytes: float | None = None,
    measure_memory: bool = True,
    compare: bool = True,
    progress: Progress | None = None,
    cancel: Cancel | None = None,
) -> SweepResult:
    """:func:`~attncore.kernels.probe.probe` at each length in ``lengths`` (``L = S``), smallest first.

    Before anything runs, the whole sweep's work is checked against
    :data:`~attncore.kernels.cost.MAX_SWEEP_FLOPS` and its largest inputs against the memory
    budget (raises :class:`~attncore.errors.ResourceLimitError`), and each size's materialised
    paths against ``budget_bytes`` (skipped with a note; fused kernels still run).

    Args:
        progress: called with (fraction done, a short note) before each step.
        cancel: polled between steps; returning True stops the sweep (``cancelled=True``;
            the sizes finished so far are kept).
    """
    spec.validate()
    device = torch.device(device)
    Ts = tuple(sorted({int(t) for t in lengths}))
    if not Ts:
        raise AttnInputError("the sweep needs at least one length T.")
    check_lengths(Ts)
    budget = default_budget_bytes(device) if budget_bytes is None else float(budget_bytes)
    check_sweep(spec, Ts, device, repeats, budget)
    # Timing counts for 80% of the progress bar, the memory pass for the rest.
    share = 0.8 if (measure_memory and device.type == "cpu") else 1.0
    weights = [float(t) * t for t in Ts]
    done_w, total_w = 0.0, sum(weights)
    sizes: list[SizeResult] = []
    cancelled = False
    for t, w in zip(Ts, weights, strict=True):
        if cancel is not None and cancel():
            cancelled = True
            break

        def step(frac: float, what: str, t: int = t, w: float = w, base: float = done_w) -> None:
            if progress is not None:
                progress(share * (base + frac * w) / total_w, f"T = {t}: {what}")

        sizes.append(probe_size(spec, t, t, device, repeats, max_seconds, budget, compare, step))
        done_w += w
    note = "not measured"
    if measure_memory and sizes and not (cancel is not None and cancel()):
        if progress is not None:
            progress(share, "measuring memory")
        sizes, note = _measure(sizes, spec, device)
    elif measure_memory:
        cancelled = True
    if progress is not None:
        progress(1.0, "done")
    notes = [f"T = {s.L}: {r.name} skipped ({r.reason})"
             for s in sizes for r in s.rows if r.status == "skipped"]
    return SweepResult(spec, str(device), Ts, budget, tuple(sizes), note, cancelled, tuple(notes))
