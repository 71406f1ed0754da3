"""One size, every backend: torch's refusals with its reasons, the default dispatch, the timed
rounds (interleaved: round ``k`` calls every backend once, so a drift in the machine's speed hits
them alike), the machine's load while they ran, the error against the float64 reference and,
on CUDA, the peak memory of each call."""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable
from dataclasses import replace

import torch
from torch import Tensor

from attncore.budget import fmt_bytes
from attncore.errors import AttnInputError
from attncore.kernels.calls import (
    BACKENDS,
    BASELINES,
    MATERIALISING,
    SDPA_BACKENDS,
    clean_message,
    default_choice,
    free,
    is_oom,
    refusal,
    run_once,
    sync,
)
from attncore.kernels.cost import call_flops, check_inputs, default_budget_bytes, materialised_bytes
from attncore.kernels.reference import reference, reference_error, reference_rows
from attncore.kernels.results import BackendResult, SizeResult, load_average, machine_load, spread
from attncore.kernels.spec import MAX_T, MIN_T, KernelInputs, KernelSpec, fully_masked_rows, make_inputs

__all__ = ["Progress", "probe", "probe_size", "time_call"]

Progress = Callable[[float, str], None]


def time_call(fn: Callable[[], Tensor], device: torch.device) -> float:
    """Seconds of one call (CUDA events on a GPU, the wall clock on the CPU)."""
    if device.type == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize(device)
        return start.elapsed_time(end) / 1e3
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def probe(
    spec: KernelSpec,
    L: int,
    device: torch.device | str,
    *,
    S: int | None = None,
    repeats: int = 5,
    max_seconds: float = 2.0,
    min_rounds: int = 1,
    budget_bytes: float | None = None,
    measure_memory: bool = True,
    compare: bool = True,
    progress: Progress | None = None,
) -> SizeResult:
    """Try every SDPA backend, the default dispatch and both baselines at ``L`` queries, ``S`` keys.

    Args:
        spec: the configuration.
        L: queries.
        device: where to run.
        S: keys (default ``L``).
        repeats: timed rounds after one warm-up call of each; a round calls every backend once,
            in turn (fewer rounds once the backends have spent ``max_seconds`` each on average,
            but never fewer than ``min_rounds``).
        max_seconds: the average time per backend after which no further round starts.
        min_rounds: rounds run whatever they cost (at most ``repeats``).
        budget_bytes: memory budget for the materialised paths (default
            :func:`~attncore.kernels.cost.default_budget_bytes`).
        measure_memory: measure peak memory (CUDA: in process; CPU: a fresh forked process).
        compare: compute the max error against the float64 reference.
        progress: called with (fraction of this size done, what runs next).

    Returns:
        A :class:`~attncore.kernels.results.SizeResult` with one row per backend (``BACKENDS``),
        ``"default"`` and the ``BASELINES``, in that order.
    """
    device = torch.device(device)
    res = probe_size(spec, L, L if S is None else S, device, repeats, max_seconds,
                     default_budget_bytes(device) if budget_bytes is None else budget_bytes,
                     compare, progress, min_rounds=min_rounds)
    if measure_memory:
        from attncore.kernels.memory import measure_memory as measure

        res = measure([res], spec, device)[0][0]
    return res


def probe_size(spec: KernelSpec, L: int, S: int, device: torch.device, repeats: int, max_seconds: float,
               budget: float, compare: bool, progress: Progress | None, min_rounds: int = 1) -> SizeResult:
    """:func:`probe` without the memory pass (the sweep measures memory for all sizes at once)."""
    spec.validate()
    if not (MIN_T <= L <= MAX_T and MIN_T <= S <= MAX_T):
        raise AttnInputError(f"L and S must be between {MIN_T} and {MAX_T}; got L={L}, S={S}.")
    check_inputs(spec, L, S, device)
    x = make_inputs(spec, L, S, device)
    chosen = default_choice(x, spec.dropout)
    source = "torch._fused_sdp_choice"
    masked = fully_masked_rows(spec.mask, L)
    ref_rows = reference_rows(spec, L, S, masked)
    names = [*BACKENDS, "default", *BASELINES]
    outputs: dict[str, Tensor] = {}
    rows: list[BackendResult] = []
    for i, name in enumerate(names):
        if progress is not None:
            progress(0.5 * i / len(names), name)
        est = materialised_bytes(name, spec, L, S) if name in MATERIALISING else None
        if est is not None and est > budget:
            rows.append(BackendResult(
                name, L, S, "skipped", estimated_bytes=est,
                reason=(f"materialising the {spec.batch}×{spec.heads}×{L}×{S} score matrices would need "
                        f"about {fmt_bytes(est)}; the budget is {fmt_bytes(budget)}")))
            continue
        rows.append(_warm_up(name, x, spec, device, est, outputs))
    load_before = load_average()
    rows = _timed_rounds(rows, x, spec, device, repeats, max_seconds, outputs, progress, min_rounds)
    load = machine_load(load_before, torch.get_num_threads())
    # Bitwise agreement with the default dispatch (random outputs under dropout: not compared).
    default_out = outputs.get("default")
    final: list[BackendResult] = []
    for r in rows:
        same = None
        if r.name in BACKENDS and r.status == "ran" and default_out is not None and spec.dropout == 0:
            same = bool(torch.equal(outputs[r.name], default_out))
        final.append(replace(r, same_as_default=same))
    if chosen is None and default_out is not None and spec.dropout == 0:
        matches = [r.name for r in final if r.same_as_default]
        chosen = matches[0] if len(matches) == 1 else None
        source = "output match"
    final = [replace(r, chosen=(r.name == chosen),
                     flops=call_flops(r.name, spec, L, S, device, chosen) if r.status == "ran" else None)
             for r in final]
    if compare and spec.dropout == 0:
        compared = []
        ref = reference(x, ref_rows)  # (B, H, rows, E), once for every backend
        for r in final:
            if r.status == "ran":
                err, merr, bad, n = reference_error(outputs[r.name], x, ref_rows, ref)
                r = replace(r, max_err=err, masked_err=merr, nonfinite_rows=bad, rows_compared=n)
            compared.append(r)
        final = compared
    outputs.clear()
    del x
    free(device)
    if progress is not None:
        progress(1.0, "done")
    return SizeResult(L, S, tuple(final), chosen, source, load)


def _warm_up(name: str, x: KernelInputs, spec: KernelSpec, device: torch.device, est: float | None,
             outputs: dict[str, Tensor]) -> BackendResult:
    """First call of ``name``: torch's refusal (with its reason) or the output that is compared."""
    L, S = x.query.shape[-2], x.key.shape[-2]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            outputs[name] = run_once(name, x, spec, device)
            sync(device)
        except Exception as exc:  # torch refuses with RuntimeError; anything else is reported too
            if is_oom(exc):
                # Only an out-of-memory call left memory to give back. A refusal allocates nothing, and
                # free() is a full garbage collection: ~20-35 ms in a server process, twice per size on a
                # CPU (its two CUDA-only backends refuse), 0.2-0.3 s of every Kernels rerun.
                free(device)
                return BackendResult(name, L, S, "out of memory", reason=clean_message(str(exc))[:300],
                                     estimated_bytes=est)
            status = "refused" if name in SDPA_BACKENDS and isinstance(exc, RuntimeError) else "failed"
            return BackendResult(name, L, S, status, reason=refusal(exc, caught), estimated_bytes=est)
    return BackendResult(name, L, S, "ran", estimated_bytes=est)


def _timed_rounds(rows: list[BackendResult], x: KernelInputs, spec: KernelSpec, device: torch.device,
                  repeats: int, max_seconds: float, outputs: dict[str, Tensor],
                  progress: Progress | None, min_rounds: int = 1) -> list[BackendResult]:
    """Time every backend that ran in interleaved rounds (one call each per round), so a drift in
    the machine's speed hits them alike; every round's time is kept. CUDA: then the peak memory."""
    names = [r.name for r in rows if r.status == "ran"]
    times: dict[str, list[float]] = {n: [] for n in names}
    lost: dict[str, str] = {}
    spent = 0.0
    for k in range(max(1, repeats)):
        if progress is not None:
            progress(0.5 + 0.5 * k / max(1, repeats), f"timing, round {k + 1}")
        for n in names:
            if n in lost:
                continue
            try:
                t = time_call(lambda n=n: run_once(n, x, spec, device), device)
            except Exception as exc:
                if not is_oom(exc):
                    raise
                outputs.pop(n, None)
                free(device)
                lost[n] = clean_message(str(exc))[:300]
                continue
            times[n].append(t)
            spent += t
        if k + 1 >= min_rounds and spent >= max_seconds * max(1, len(names)):
            break
    out = []
    for r in rows:
        if r.name in lost:
            r = replace(r, status="out of memory", reason=lost[r.name])
        elif r.name in times and times[r.name]:
            peak = None
            if device.type == "cuda":
                try:
                    peak = _cuda_peak(r.name, x, spec, device)
                except Exception as exc:
                    if not is_oom(exc):
                        raise
                    free(device)
            ts = tuple(times[r.name])
            r = replace(r, seconds=spread(ts).median, times=ts, peak_bytes=peak)
        out.append(r)
    return out


def _cuda_peak(name: str, x: KernelInputs, spec: KernelSpec, device: torch.device) -> float:
    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    base = torch.cuda.memory_allocated(device)
    out = run_once(name, x, spec, device)
    torch.cuda.synchronize(device)
    peak = torch.cuda.max_memory_allocated(device) - base
    del out
    return float(peak)
