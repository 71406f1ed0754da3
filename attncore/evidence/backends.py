"""Claims of the SDPA reference page about FlashAttention, MQA and GQA, measured with attncore.kernels.

Every number comes from :mod:`attncore.kernels` (its probe, timing and memory measurement) at the
Kernels page's default call: batch 1, 4 heads, head dim 64, no mask, T = L = S up to 1024, in the
page's dtype. On a CPU torch's "flash" backend is its own blocked CPU kernel, not Dao et al.'s CUDA
FlashAttention; the rows say so where it matters.
"""

from __future__ import annotations

import os
from dataclasses import replace

import numpy as np
import torch
import torch.nn.functional as F

from attncore.evidence.records import (
    CAVEAT,
    FAILS,
    HOLDS,
    Claim,
    Judgement,
    Measurement,
    Setting,
    fmt,
)
from attncore.kernels import (
    SDPA_LOCK,
    KernelSpec,
    SizeResult,
    default_choice,
    make_inputs,
    measure_memory,
    probe,
    tolerance,
)

__all__ = ["CLAIMS", "MEMORY_LENGTHS", "SPEED_T", "kernel_spec"]

SPEED_T = 1024  # the Kernels page's default largest T
MEMORY_LENGTHS = (256, 512, 1024)
ROUNDS = 3  # independent probes of the speed row: their spread is the ratio's uncertainty
REPEATS = 3  # timed calls per backend in each probe (the Kernels page's KERNEL_REPEATS)
SPEEDUP = (2.0, 4.0)  # "2-4x"
OUTPUT_FACTOR = 4.0  # O(T): the default's extra memory at the largest T at most this many outputs (B·H·T·E)
QUADRATIC_MIN = 1.7  # O(T²): the math path's log-log memory slope at least this
GQA_T, GQA_HEADS = 256, 4


def kernel_spec(setting: Setting, **changes: object) -> KernelSpec:
    """The Kernels page's default call (4 heads, head dim 64, no mask) in the page's dtype and seed."""
    return replace(
        KernelSpec(heads=4, groups=1, head_dim=64, dtype=setting.dtype, seed=setting.seed), **changes
    )


def _where(setting: Setting) -> str:
    return f"B = 1, H = 4, E = 64, {setting.dtype}, {setting.device}"


def _default(setting: Setting) -> Measurement:
    x = make_inputs(kernel_spec(setting), SPEED_T, SPEED_T, setting.device)
    chosen = default_choice(x, 0.0) or "unknown"
    return Measurement(
        {
            "backend": chosen,
            "device_type": torch.device(setting.device).type,
            "T": SPEED_T,
            "dtype": setting.dtype,
        },
        scale=f"torch._fused_sdp_choice for the Kernels page's default call at T = {SPEED_T} "
        f"({_where(setting)})",
    )


def _default_judge(m: Measurement) -> Judgement:
    backend, dev = str(m["backend"]), str(m["device_type"])
    if backend == "flash" and dev == "cuda":
        return Judgement(
            HOLDS,
            "torch dispatches this call to its FlashAttention kernel; other dtypes, masks or head dims can "
            "change that (the Kernels page shows which).",
        )
    if backend == "flash":
        return Judgement(
            CAVEAT,
            "torch picks the backend it calls “flash”, but on a CPU that is torch's own blocked CPU kernel, "
            "not Dao et al.'s CUDA FlashAttention.",
        )
    return Judgement(
        FAILS,
        f"for this call ({m['dtype']} on {dev}) torch's default dispatch picks “{backend}”, not "
        "FlashAttention.",
    )


FLASH_DEFAULT = Claim(
    key="flash_default",
    source="sdpa",
    quote="FlashAttention … is now the default backend in PyTorch's F.scaled_dot_product_attention. (“Uses "
    "FlashAttention under the hood.”)",
    test="The backend torch's default dispatch picks for the Kernels page's default call.",
    tolerance="the chosen backend is FlashAttention",
    measure=_default,
    describe=lambda m: (
        f"default dispatch: {m['backend']} ({m['dtype']}, T = {int(m.num('T'))}, {m['device_type']})."
    ),
    judge=_default_judge,
)


def _probes(setting: Setting, T: int, rounds: int) -> list[SizeResult]:
    spec = kernel_spec(setting)
    return [
        probe(spec, T, setting.device, repeats=REPEATS, max_seconds=1.0, measure_memory=False, compare=False)
        for _ in range(rounds)
    ]


def _speed(setting: Setting) -> Measurement:
    ratios, math_s, default_s, backend = [], [], [], "unknown"
    for res in _probes(setting, SPEED_T, ROUNDS):
        slow, fast = res.row("math"), res.row("default")
        if slow.seconds is None or fast.seconds is None:
            return Measurement(
                missing=f"torch's math path or the default dispatch did not run at T = {SPEED_T} "
                f"({slow.reason or fast.reason or slow.status})."
            )
        ratios.append(slow.seconds / fast.seconds)
        math_s.append(slow.seconds)
        default_s.append(fast.seconds)
        backend = res.default_backend or backend
    return Measurement(
        {
            "ratio": float(np.median(ratios)),
            "lo": min(ratios),
            "hi": max(ratios),
            "math_ms": 1e3 * float(np.median(math_s)),
            "default_ms": 1e3 * float(np.median(default_s)),
            "backend": backend,
            "T": SPEED_T,
            "rounds": ROUNDS,
            "device_type": torch.device(setting.device).type,
        },
        scale=f"median of {REPEATS} calls per probe, {ROUNDS} probes, T = {SPEED_T} ({_where(setting)})"
        + (
            f"; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores"
            if torch.device(setting.device).type == "cpu"
            else ""
        ),
    )


def _speed_judge(m: Measurement) -> Judgement:
    lo, hi, r = m.num("lo"), m.num("hi"), m.num("ratio")
    where = (
        f"at T = {int(m.num('T'))} on this {m['device_type']} (the default dispatch ran {m['backend']}"
        + (", torch's CPU kernel" if m["device_type"] == "cpu" else "")
        + ")"
    )
    if lo >= SPEEDUP[0] and hi <= SPEEDUP[1]:
        return Judgement(CAVEAT, f"{r:.2g}× {where}; the ratio grows with T and differs by machine.")
    if lo > SPEEDUP[1]:
        return Judgement(CAVEAT, f"faster than stated: {r:.2g}× {where}.")
    if hi < SPEEDUP[0]:
        return Judgement(
            FAILS, f"only {r:.2g}× {where}; the gap grows with T (the Kernels page goes to 16k)."
        )
    return Judgement(
        CAVEAT,
        f"{lo:.2g}–{hi:.2g}× over {int(m.num('rounds'))} probes {where}: the spread straddles the stated "
        "range.",
    )


FLASH_SPEED = Claim(
    key="flash_speed",
    source="sdpa",
    slow=True,
    quote="FlashAttention (Dao et al., 2022) … providing 2-4x wall-clock speedups.",
    test=f"Time of torch's math (materialising) path ÷ the default dispatch at T = {SPEED_T}, the Kernels "
    f"page's default call, {ROUNDS} independent probes.",
    tolerance=f"every probe's ratio between {SPEEDUP[0]:g} and {SPEEDUP[1]:g}",
    measure=_speed,
    describe=lambda m: (
        f"math {m.num('math_ms'):.3g} ms, default {m.num('default_ms'):.3g} ms: {m.num('ratio'):.2g}× "
        f"(probes {m.num('lo'):.2g}–{m.num('hi'):.2g}×)."
    ),
    judge=_speed_judge,
)


def _slope(ts: list[int], ys: list[float]) -> float:
    return float(np.polyfit(np.log(np.asarray(ts, dtype=np.float64)), np.log(np.asarray(ys)), 1)[0])


def _memory(setting: Setting) -> Measurement:
    spec = kernel_spec(setting)
    sizes = []
    for T in MEMORY_LENGTHS:
        res = probe(spec, T, setting.device, repeats=1, max_seconds=0.2, measure_memory=False, compare=False)
        sizes.append(replace(res, rows=tuple(r for r in res.rows if r.name in ("default", "math"))))
    measured, note = measure_memory(sizes, spec, setting.device)
    peaks: dict[str, list[float]] = {"default": [], "math": []}
    for s in measured:
        for r in s.rows:
            if r.peak_bytes is not None and r.peak_bytes > 0:
                peaks[r.name].append(r.peak_bytes)
    if any(len(v) < len(MEMORY_LENGTHS) for v in peaks.values()):
        return Measurement(missing=f"peak memory was not measured at every T here ({note}).")
    ts = list(MEMORY_LENGTHS)
    out_bytes = (
        spec.batch
        * spec.heads
        * ts[-1]
        * spec.head_dim
        * torch.empty((), dtype=spec.torch_dtype).element_size()
    )
    return Measurement(
        {
            "default_slope": _slope(ts, peaks["default"]),
            "math_slope": _slope(ts, peaks["math"]),
            "default_mib": peaks["default"][-1] / 2**20,
            "math_mib": peaks["math"][-1] / 2**20,
            "outputs": peaks["default"][-1] / out_bytes,
            "T": ts[-1],
            "backend": measured[-1].default_backend or "unknown",
            "device_type": torch.device(setting.device).type,
        },
        scale=f"T = {', '.join(map(str, ts))} ({_where(setting)}); {note.split(' (', 1)[0]}",
    )


def _memory_judge(m: Measurement) -> Judgement:
    a, b, k = m.num("default_slope"), m.num("math_slope"), m.num("outputs")
    big = f"at T = {int(m.num('T'))}: {m.num('default_mib'):.3g} MiB against {m.num('math_mib'):.3g} MiB"
    if k > OUTPUT_FACTOR:
        return Judgement(FAILS, f"the default dispatch needs {k:.2g}× its output's memory ({big}).")
    if b < QUADRATIC_MIN:
        return Judgement(
            CAVEAT,
            f"the default needs about its output's memory, but the math path grows only like T^{b:.2f} at "
            f"these sizes ({big}).",
        )
    cpu = ", torch's CPU kernel" if m["device_type"] == "cpu" else ""
    return Judgement(
        HOLDS,
        f"the default dispatch ({m['backend']}{cpu}) keeps no T × T matrix: {k:.2g}× its output ({big}); "
        f"over these small sizes its memory still grows like T^{a:.2f}.",
    )


FLASH_MEMORY = Claim(
    key="flash_memory",
    source="sdpa",
    slow=True,
    quote="FlashAttention … reorganised the computation to be IO-aware, reducing memory usage from O(T^2) to "
    "O(T)",
    test="Peak extra memory of the default dispatch and of torch's math path at T = 256, 512, 1024 "
    "(attncore.kernels.measure_memory): the default's against its output's size, and each one's log-log "
    "slope.",
    tolerance=f"O(T): the default's extra memory at most {OUTPUT_FACTOR:g} × its output (B·H·T·E values) at "
    f"the largest T; O(T²): the math path's log-log slope ≥ {QUADRATIC_MIN:g}",
    measure=_memory,
    describe=lambda m: (
        f"peak memory ∝ T^{m.num('default_slope'):.2f} (default) and T^{m.num('math_slope'):.2f} (math); at "
        f"T = {int(m.num('T'))}: {m.num('default_mib'):.3g} MiB ({m.num('outputs'):.2g}× the output) vs "
        f"{m.num('math_mib'):.3g} MiB."
    ),
    judge=_memory_judge,
)


def _gqa(setting: Setting) -> Measurement:
    spec = kernel_spec(setting, heads=GQA_HEADS, groups=GQA_HEADS)  # multi-query: one K/V head
    x = make_inputs(spec, GQA_T, GQA_T, setting.device)
    rep = spec.groups
    k, v = x.key.repeat_interleave(rep, dim=-3), x.value.repeat_interleave(rep, dim=-3)
    with SDPA_LOCK, torch.no_grad():
        shared = F.scaled_dot_product_attention(x.query, x.key, x.value, enable_gqa=True)
        full = F.scaled_dot_product_attention(x.query, k, v)
    plain = replace(x, key=k, value=v, enable_gqa=False)
    return Measurement(
        {
            "diff": float((shared.float() - full.float()).abs().max()),
            "tol": tolerance(setting.dtype),
            "kv_ratio": x.key.numel() / k.numel(),
            "backend_gqa": default_choice(x, 0.0) or "unknown",
            "backend_mha": default_choice(plain, 0.0) or "unknown",
            "heads": spec.heads,
            "kv_heads": spec.kv_heads,
        },
        scale=f"{spec.heads} query heads sharing {spec.kv_heads} key/value head, T = {GQA_T}, E = 64, "
        f"{setting.dtype}, {setting.device}",
    )


def _gqa_judge(m: Measurement) -> Judgement:
    if m.num("diff") > m.num("tol"):
        return Judgement(FAILS, f"sharing K, V changes the output by {fmt(m.num('diff'))}.")
    same = m["backend_gqa"] == m["backend_mha"]
    note = (
        "the same backend runs both"
        if same
        else f"torch dispatches them differently ({m['backend_gqa']} vs {m['backend_mha']})"
    )
    return Judgement(
        HOLDS if same else CAVEAT,
        f"sharing changes the K/V cache ({m.num('kv_ratio'):.2g}× the size), not the output; {note}.",
    )


GQA_SAME = Claim(
    key="gqa_same",
    source="sdpa",
    quote="Multi-query attention (MQA) and grouped-query attention (GQA) … reduce the KV cache size for "
    "inference, but the core scaled dot-product computation remains identical.",
    test="SDPA with 4 query heads sharing one K/V head (enable_gqa) against the same call with K and V "
    "copied to every head; the K/V tensors' sizes; the backend torch picks for each.",
    tolerance="outputs within the dtype's tolerance (2e-5 in float32)",
    measure=_gqa,
    describe=lambda m: (
        f"largest difference {fmt(m.num('diff'), 2)}; K/V {m.num('kv_ratio'):.2g}× the size; backend "
        f"{m['backend_gqa']} (shared) vs {m['backend_mha']} (copied)."
    ),
    judge=_gqa_judge,
)


CLAIMS: tuple[Claim, ...] = (FLASH_DEFAULT, FLASH_SPEED, FLASH_MEMORY, GQA_SAME)
