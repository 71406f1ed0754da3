"""Which engine runs a sweep (one home for the choice), and the entry points that run it.

Two engines compute the same statistics (:mod:`attncore.sweeps`):

``torch``
    :mod:`attncore.sweeps.engine`: blocks of draws from ``torch.Generator`` reduced with torch
    ops, on any device, up to ``n = 2**24`` (:data:`~attncore.sweeps.spec.MAX_SWEEP_N`). On a
    GPU a row of up to a block's length (2^20 keys for the logits method) is one materialised
    tile: the materialised path.
``fused``
    :mod:`attncore.sweeps.fused`: Triton kernels that draw their random numbers in-kernel
    (Philox), on CUDA, up to ``n = 2**30`` with memory flat in n (on the CPU only through
    Triton's interpreter, for tests).

As torch's scaled-dot-product attention picks a kernel by size and device, :func:`choose_engine`
picks by device, sample dtype, method and the sweep's largest n: the torch engine on a CPU and
for float64; on CUDA the torch engine below the method's crossover length
(:data:`CROSSOVERS`, measured) and the fused kernels from it on, and wherever the torch engine's
cap or work limit would refuse the sweep. ``engine="torch"`` / ``"fused"`` (or the environment
variable :data:`ENGINE_ENV`) forces one. The engines draw different random numbers, so the
same seed gives the same picture only on the same device and engine; since the choice depends
on nothing but the device, the dtype, the method and the largest n, a URL that fixes those
fixes the engine, and :func:`engine_choice` says which one ran and why.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd
import torch

from attncore.device import resolve_device
from attncore.errors import AttnInputError
from attncore.sweeps.engine import run_torch_sweeps, stage_keys
from attncore.sweeps.fused import advance, fused_sweep_steps, report_points, run_fused_sweep
from attncore.sweeps.fused_plan import MAX_SWEEP_N_CUDA as FUSED_MAX_N
from attncore.sweeps.fused_plan import (
    fused_unavailable_reason,
    fused_work,
    fused_work_limit,
    probe_length,
    validate_fused,
)
from attncore.sweeps.progress import Partial, Progress
from attncore.sweeps.spec import (
    MAX_SWEEP_N,
    MAX_SWEEP_WORK,
    PROBE_WORK,
    SweepSpec,
    block_keys,
    torch_work,
)

__all__ = [
    "CROSSOVERS",
    "ENGINES",
    "ENGINE_ENV",
    "Crossover",
    "EngineChoice",
    "SweepPlan",
    "check_sweep",
    "choose_engine",
    "engine_choice",
    "entropy_vs_length",
    "fused_from",
    "max_sweep_n",
    "max_sweep_work",
    "partial_lengths",
    "plan",
    "run_sweep",
    "run_sweep_set",
    "sweep_work",
]

ENGINE_ENV = "ATTNCORE_SWEEP_ENGINE"  # auto | torch | fused: which engine runs sweeps that do not say
ENGINES: tuple[str, ...] = ("auto", "torch", "fused")


@dataclass(frozen=True)
class Crossover:
    """On CUDA the fused kernels run a sweep of ``method`` whose largest n is at least ``n``.

    ``measured``: where the number comes from; ``evidence``: the timings it rests on.
    """

    method: str
    n: int
    measured: str
    evidence: str


CROSSOVERS: dict[str, Crossover] = {
    "logits": Crossover(
        "logits", 1 << 18,
        "NVIDIA H100 80GB HBM3, torch 2.11 + CUDA 13.0, triton 3.6 "
        "(27 Nov 2026: python -m bench.entropy_cuda --min-exp 18)",
        "fused 1.61 ms against the torch engine's 8.17 ms at 2^18 (the smallest n measured), 2.53 ms against "
        "7.44 ms at 2^20, 7.40 ms against 88.2 ms at 2^24: faster at every n measured. The materialised "
        "notebook softmax (no engine of the app) is faster up to 2^20 (0.57 ms at 2^18, 2.03 ms at 2^20); "
        "the H200 of issue 25 had put the crossover at 2^20 against it"),
    "vectors": Crossover(
        "vectors", 1 << 18,
        "NVIDIA H100 80GB HBM3, torch 2.11 + CUDA 13.0, triton 3.6 "
        "(27 Nov 2026: python -m bench.entropy_cuda --min-exp 18), the reworked vectors kernel",
        "fused 2.94 ms against the torch engine's 14.4 ms at 2^18 (the smallest n measured), 2.35 ms against "
        "55.8 ms at 2^20, 11.1 ms against 1.11 s at 2^24: faster at every n measured. The materialised "
        "notebook softmax is faster up to 2^19 (0.82 ms at 2^18); the kernel before its rework was slower "
        "than it up to 2^25 and the table then said 2^26"),
}


@dataclass(frozen=True)
class EngineChoice:
    """The engine that runs a sweep (``"torch"`` or ``"fused"``) and a plain sentence saying why."""

    name: str
    reason: str


def _label(n: int) -> str:
    """2^20 for powers of two, else the number."""
    return f"2^{n.bit_length() - 1}" if n > 0 and n & (n - 1) == 0 else f"{n:,}"


def _asked(engine: str | None) -> str:
    name = str(engine or "auto").strip().lower()
    if name == "auto":
        name = os.environ.get(ENGINE_ENV, "").strip().lower() or "auto"
    if name not in ENGINES:
        raise AttnInputError(f"unknown sweep engine {name!r}; choose one of {', '.join(ENGINES)}.")
    return name


def engine_choice(spec: SweepSpec, device: torch.device | str, engine: str | None = None) -> EngineChoice:
    """Which engine runs ``spec`` on ``device``, and why (see the module doc for the rule).

    ``engine``: ``"auto"``/None (then :data:`ENGINE_ENV`, then the rule), ``"torch"`` or
    ``"fused"`` (on the CPU only through Triton's interpreter: for tests).
    """
    dev = torch.device(device)
    name = _asked(engine)
    if name == "fused":
        why = fused_unavailable_reason(dev)
        if why is not None:
            raise AttnInputError(f"the fused sweep engine cannot run here: {why}")
        return EngineChoice("fused", "the fused Triton kernels, as asked")
    if name == "torch":
        return EngineChoice("torch", "the torch engine, as asked")
    torch_engine = "the torch engine (torch's generator, streamed in blocks)"
    if dev.type != "cuda":
        return EngineChoice("torch", f"{torch_engine}: the path on a {dev.type.upper()}")
    if spec.dtype != "float32":
        return EngineChoice("torch", f"{torch_engine}: the fused kernels sample in float32 only")
    if fused_unavailable_reason(dev) is not None:
        return EngineChoice("torch", f"{torch_engine}: {fused_unavailable_reason(dev)}")
    n_max = max((int(n) for n in spec.lengths), default=1)
    fused = "the fused Triton kernels (Philox draws in-kernel)"
    if n_max > MAX_SWEEP_N:
        return EngineChoice("fused", f"{fused}: n = {_label(n_max)} is above the torch engine's cap of "
                                     f"{_label(MAX_SWEEP_N)}")
    cross = CROSSOVERS.get(spec.method)
    if cross is not None and n_max < cross.n:
        if torch_work(spec, dev) <= MAX_SWEEP_WORK:
            return EngineChoice("torch", f"{torch_engine}: below n = {_label(cross.n)} keys it is the faster "
                                         f"path on CUDA for the {spec.method} method (measured on an "
                                         f"{cross.measured.split(',')[0]})")
        return EngineChoice("fused", f"{fused}: the torch engine's work limit would refuse this sweep")
    at = f"from n = {_label(cross.n)} keys " if cross is not None else ""
    return EngineChoice("fused", f"{fused}: {at}they are the faster path on CUDA for the {spec.method} "
                                 "method")


def fused_from(method: str) -> int:
    """The smallest largest-n at which a float32 sweep of ``method`` takes the fused kernels on CUDA."""
    cross = CROSSOVERS.get(method)
    return min(cross.n if cross is not None else 1, MAX_SWEEP_N + 1)


def choose_engine(engine: str | None, device: torch.device | str, spec: SweepSpec) -> str:
    """``"fused"`` or ``"torch"``: the name of :func:`engine_choice`."""
    return engine_choice(spec, device, engine).name


def max_sweep_n(device: torch.device | str | None = None) -> int:
    """The largest n (keys per row) a sweep may ask for on ``device``.

    ``2**30`` on CUDA where the fused kernels run (memory stays flat in n), ``2**24``
    elsewhere (the torch engine: beyond it a sweep takes minutes on a CPU).
    """
    dev = resolve_device(device) if device is None else torch.device(device)
    if dev.type == "cuda" and fused_unavailable_reason(dev) is None and _asked(None) != "torch":
        return FUSED_MAX_N
    return MAX_SWEEP_N


def check_sweep(spec: SweepSpec, device: torch.device | str, engine: str | None = None) -> str:
    """Validate ``spec`` for the engine that runs it on ``device`` (plain errors); return that engine."""
    dev = torch.device(device)
    name = choose_engine(engine, dev, spec)
    if name == "fused":
        validate_fused(spec, dev)
    else:
        spec.validate()
    return name


def _limit(name: str, device: torch.device) -> int:
    return fused_work_limit(device) if name == "fused" else MAX_SWEEP_WORK


def max_sweep_work(device: torch.device | str) -> int:
    """The work budget of the engine that runs the large sweeps on ``device`` (see :class:`SweepPlan`)."""
    dev = torch.device(device)
    big = SweepSpec(lengths=(max_sweep_n(dev),))
    return _limit(choose_engine(None, dev, big), dev)


def sweep_work(spec: SweepSpec, device: torch.device | str = "cpu", engine: str | None = None) -> int:
    """Work units of ``spec`` on ``device`` in its engine's unit: random numbers for the fused
    kernels, :func:`~attncore.sweeps.spec.torch_work` units for the torch engine."""
    dev = torch.device(device)
    if choose_engine(engine, dev, spec) == "fused":
        return fused_work(spec)
    return torch_work(spec, dev)


@dataclass(frozen=True)
class SweepPlan:
    """What a list of sweeps costs on one device, from :func:`plan`.

    ``engines[i]`` runs spec i; ``work[i]`` is its work in that engine's units
    (:func:`sweep_work`) and ``share[i]`` the fraction of that engine's work limit it takes;
    ``probes[i]`` is a small sweep with spec i's method and sizes on the same engine (run it
    with ``engine=engines[i]``) that measures the seconds per unit, ``probe_work[i]`` its units.
    """

    engines: tuple[str, ...]
    work: tuple[int, ...]
    share: tuple[float, ...]
    probes: tuple[SweepSpec, ...]
    probe_work: tuple[int, ...]

    @property
    def total(self) -> int:
        """Work units of all the sweeps together (each in its engine's unit)."""
        return sum(self.work)

    @property
    def load(self) -> float:
        """All the sweeps together as a fraction of the budget (above 1: too much)."""
        return float(sum(self.share))


def plan(specs: Sequence[SweepSpec], device: torch.device | str = "cpu", probe_work: int = PROBE_WORK
         ) -> SweepPlan:
    """Price ``specs`` on ``device``: each one's engine, work units and one calibration probe.

    A probe keeps the sweep's method, d, queries and value dim (what its rate depends on)
    with the plain ``sqrt_d`` softmax and one length of whole blocks (the fused kernels': about
    a second's random numbers on CUDA).
    """
    dev = torch.device(device)
    engines, works, shares, probes, probe_units = [], [], [], [], []
    for spec in specs:
        name = choose_engine(None, dev, spec)
        one = replace(spec, lengths=(1,), scale_rule="sqrt_d", normalizer="softmax")
        if name == "fused":
            probe = replace(one, lengths=(probe_length(one, dev),))
        else:
            blocks = max(1, probe_work // max(1, torch_work(one, dev)))
            probe = replace(one, lengths=(blocks * block_keys(one, dev),))
        work = sweep_work(spec, dev, name)
        engines.append(name)
        works.append(work)
        shares.append(work / _limit(name, dev))
        probes.append(probe)
        probe_units.append(sweep_work(probe, dev, name))
    return SweepPlan(engines=tuple(engines), work=tuple(works), share=tuple(shares), probes=tuple(probes),
                     probe_work=tuple(probe_units))


def partial_lengths(spec: SweepSpec, device: torch.device | str, engine: str | None = None
                    ) -> tuple[int, ...]:
    """The longest n finished at each partial report of a staged run of ``spec`` alone.

    (:func:`run_sweep_set` with ``partial``: the torch engine reports after about 1/16 and 1/4
    of its blocks, the fused kernels after about 1/16 and 1/4 of their random numbers.) Empty
    when the run has no report before its end.
    """
    dev = torch.device(device)
    lengths = sorted({int(n) for n in spec.lengths})
    if choose_engine(engine, dev, spec) == "fused":
        passes = spec.passes()
        out = []
        for pi, ci in report_points(spec):
            done = [n for _, lens in passes[:pi] for n in lens] + list(passes[pi][1][: ci + 1])
            out.append(max(done))
        return tuple(out)
    keys = stage_keys(spec, dev)[:-1]
    return tuple(max(n for n in lengths if n <= k) for k in keys if any(n <= k for n in lengths))


# --------------------------------------------------------------------------- entry points


def entropy_vs_length(
    lengths: Sequence[int],
    *,
    d: int = 64,
    queries: int = 64,
    scale_rule: str = "sqrt_d",
    temperature: float = 1.0,
    normalizer: str = "softmax",
    method: str = "logits",
    seed: int = 0,
    device: str | torch.device | None = None,
    progress: Progress | None = None,
    ssmax_s: float = 0.43,
    value_dim: int = 16,
    dtype: str = "float32",
    workers: int | None = None,
    cancel: threading.Event | None = None,
    engine: str | None = None,
) -> pd.DataFrame:
    """Row statistics of attention against the number of keys n, streamed (see :mod:`attncore.sweeps`).

    Args:
        lengths: the key counts n to report, each in ``[1, max_sweep_n(device)]``: ``2**24``
            with the torch engine, ``2**30`` with the fused kernels on CUDA.
        d: query/key dimension. queries: query rows L (independent queries) averaged per n.
        scale_rule: ``sqrt_d``, ``none``, ``ssmax`` (factor ``s log n`` on top of
            ``1/sqrt d``) or ``llama4``. temperature: divides the logits (> 0).
        normalizer: ``softmax``, ``softmax1`` or ``sigmoid`` (bias ``-log n``).
        method: ``logits`` (exact-distribution shortcut) or ``vectors`` (real q, k, v).
        seed: seeds every draw; the same seed, device, engine and spec give the same numbers.
        device: ``None`` = CUDA if present, else CPU. ssmax_s: SSMax's s.
        value_dim: Ev of the values (vectors method; the output spread is measured over L x Ev).
        dtype: ``float32`` (default) or ``float64`` samples; sums are float64 either way.
        workers: CPU worker threads (default: torch's intra-op thread count, at most 16);
            each runs single-threaded with its own generators. CUDA uses one.
        progress: ``progress(fraction_done, message)`` called from the calling thread about
            every 0.1 s; returning ``False`` (or raising) stops the sweep between chunks.
        cancel: an optional event; setting it stops the sweep between chunks.
        engine: ``None``/``"auto"`` (:func:`engine_choice`: by device, dtype, method and the
            largest n), ``"torch"`` or ``"fused"`` (on the CPU only through Triton's
            interpreter, for tests). The engines draw other random numbers: the same
            statistics within their standard errors, not to the digit.

    Returns:
        A DataFrame, one row per distinct n (ascending), columns :data:`COLUMNS`: means over
        the L rows with standard errors (``*_sem``) of entropy (nats, of the row renormalised
        to sum 1), entropy / log n, max weight, effective support ``exp(mean H)`` (the
        perplexity of the average row, error by the delta method), output std,
        ``sum p^2`` and row sum; ``logit_std`` (rms over rows of the logits' std) and
        ``logit_factor`` (the factor on ``q . k`` at that n).

    Raises:
        AttnInputError / ResourceLimitError: bad or too large arguments (plain message).
        SweepCancelled: the progress callback returned False or ``cancel`` was set.
    """
    spec = SweepSpec(lengths=tuple(int(n) if isinstance(n, (int, np.integer)) and not isinstance(n, bool)
                                   else n for n in lengths),
                     d=d, queries=queries, scale_rule=scale_rule, temperature=temperature,
                     normalizer=normalizer, method=method, seed=seed, ssmax_s=ssmax_s,
                     value_dim=value_dim, dtype=dtype)
    return run_sweep(spec, device=device, progress=progress, workers=workers, cancel=cancel, engine=engine)


def run_sweep(spec: SweepSpec, *, device: str | torch.device | None = None, progress: Progress | None = None,
              workers: int | None = None, cancel: threading.Event | None = None,
              engine: str | None = None) -> pd.DataFrame:
    """:func:`entropy_vs_length` for a ready :class:`SweepSpec` (``engine`` as there)."""
    return run_sweep_set([spec], device=device, progress=progress, workers=workers, cancel=cancel,
                         engine=engine)[0]


def run_sweep_set(specs: Sequence[SweepSpec], *, device: str | torch.device | None = None,
                  progress: Progress | None = None, workers: int | None = None,
                  cancel: threading.Event | None = None, engine: str | None = None,
                  partial: Partial | None = None) -> list[pd.DataFrame]:
    """Several sweeps at once, each on the engine :func:`engine_choice` picks for it.

    On the torch engine, specs with equal :func:`~attncore.sweeps.engine.stream_key` (the same
    method, seed, d, query rows, value dim and dtype: e.g. curves that differ only in
    temperature, scale rule or normaliser) share one streaming pass over their common draws,
    each reduced with its own factor, so the random numbers (about half of a CPU sweep's time)
    are drawn once. Each result equals :func:`run_sweep` of that spec alone.

    Args:
        specs: the sweeps. device, progress, workers, cancel, engine: as :func:`entropy_vs_length`
            (``progress`` covers each engine's share in turn).
        partial: if given, called from the calling thread as a sweep finishes its short lengths
            (:func:`partial_lengths`), with one frame per spec of the lengths done so far (None
            where a spec has none yet); the final frames are the return value.

    Returns:
        One DataFrame per spec, in order, as :func:`entropy_vs_length` returns.
    """
    dev = resolve_device(device)
    specs = list(specs)
    names = [check_sweep(s, dev, engine) for s in specs]
    out: list[pd.DataFrame | None] = [None] * len(specs)

    def shown(idx: Sequence[int], frames: Sequence[pd.DataFrame | None]) -> None:
        if partial is not None:
            now = list(out)
            for i, f in zip(idx, frames, strict=True):
                now[i] = f
            partial(now)

    fused = [i for i, name in enumerate(names) if name == "fused"]
    if partial is None:
        for i in fused:
            out[i] = run_fused_sweep(specs[i], device=dev, progress=progress, cancel=cancel)
    else:
        # staged: each fused sweep in turn to its next report, then one partial view of them all (as the
        # torch engine reports the curves it streams together)
        steps = {i: fused_sweep_steps(specs[i], device=dev, progress=progress, cancel=cancel) for i in fused}
        now: dict[int, pd.DataFrame] = {}
        while steps:
            for i in list(steps):
                finished, now[i] = advance(steps[i])
                if finished:
                    out[i] = now[i]
                    del steps[i]
            if steps:
                shown(fused, [now[i] for i in fused])
    idx = [i for i, name in enumerate(names) if name == "torch"]
    if idx:
        frames = run_torch_sweeps([specs[i] for i in idx], dev, progress=progress, workers=workers,
                                  cancel=cancel,
                                  partial=None if partial is None else lambda fs: shown(idx, fs))
        for i, f in zip(idx, frames, strict=True):
            out[i] = f
    return [f for f in out if f is not None]
