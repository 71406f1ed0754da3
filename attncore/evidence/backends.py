"""Claims of the SDPA reference page about FlashAttention, MQA and GQA, measured with attncore.kernels.

The three FlashAttention claims (the default backend, "2-4x wall-clock speedups", "O(T) memory") are
judged by the Kernels page's own rules (:func:`attncore.kernels.check_claims`, stated in
:data:`attncore.kernels.RULES`) on the Kernels page's default call: batch 1, 4 heads, head dim 64, no
mask, T = L = S from 128 to 1024, in the page's dtype, interleaved timed rounds and the peak memory of
every path. The Evidence row and that page's table apply the same rule. On a CPU torch's "flash"
backend is its own blocked CPU kernel, not Dao et al.'s CUDA FlashAttention: the speed and memory rows
are then "not testable here" and show what the CPU kernel measured; the default-backend row says which
kernel ran.
"""

from __future__ import annotations

import functools
from dataclasses import replace

import torch

from attncore.evidence.masking import sdpa
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
    RULES,
    KernelSpec,
    SizeResult,
    check_claims,
    default_choice,
    make_inputs,
    measure_memory,
    probe,
    tolerance,
)
from attncore.kernels import Claim as KernelClaim

__all__ = ["CLAIMS", "KERNEL_LENGTHS", "judge_sizes", "kernel_sizes", "kernel_spec"]

KERNEL_LENGTHS = (128, 256, 512, 1024)  # the Kernels page's default T (k_tmin, k_tmax)
# Interleaved timed rounds per size, as the Kernels page takes them: up to 9 where they are cheap, never
# fewer than 5, and no round starts once the paths have spent 0.2 s each on average.
ROUNDS, MIN_ROUNDS, ROUND_SECONDS = 9, 5, 0.2
GQA_T, GQA_HEADS = 256, 4
TOPICS = {"flash_default": "default backend", "flash_speed": "speed", "flash_memory": "memory"}


def kernel_spec(setting: Setting, **changes: object) -> KernelSpec:
    """The Kernels page's default call (4 heads, head dim 64, no mask) in the page's dtype and seed."""
    return replace(
        KernelSpec(heads=4, groups=1, head_dim=64, dtype=setting.dtype, seed=setting.seed), **changes
    )


@functools.lru_cache(maxsize=4)
def kernel_sizes(device: str, dtype: str, seed: int) -> tuple[tuple[SizeResult, ...], str]:
    """Every backend probed at the Kernels page's default lengths, then each path's peak memory (one
    measurement shared by the three FlashAttention rows); how memory was measured."""
    spec = kernel_spec(Setting(device, seed, dtype))
    sizes = [
        probe(
            spec,
            T,
            device,
            repeats=ROUNDS,
            min_rounds=MIN_ROUNDS,
            max_seconds=ROUND_SECONDS,
            measure_memory=False,
            compare=False,
        )
        for T in KERNEL_LENGTHS
    ]
    measured, note = measure_memory(sizes, spec, device)
    return tuple(measured), note


def judge_sizes(key: str, m: Measurement) -> KernelClaim:
    """The Kernels page's rule for this row's topic, applied to the measurement's probes."""
    claims = check_claims(m["sizes"], m["spec"], str(m["device"]))  # type: ignore[arg-type]
    return next(c for c in claims if c.topic == TOPICS[key])


def _probed(key: str, setting: Setting) -> Measurement:
    sizes, note = kernel_sizes(setting.device, setting.dtype, setting.seed)
    return Measurement(
        {"sizes": sizes, "spec": kernel_spec(setting), "device": setting.device, "topic": TOPICS[key]},
        scale=f"the Kernels page's default call: B = 1, H = 4, E = 64, {setting.dtype}, {setting.device}, T "
        f"= {', '.join(map(str, KERNEL_LENGTHS))}, {MIN_ROUNDS} to {ROUNDS} interleaved timed rounds; "
        f"memory: {note.split(' (', 1)[0]}",
    )


def _kernel_judgement(key: str, m: Measurement) -> Judgement:
    c = judge_sizes(key, m)
    return Judgement(c.verdict, c.caveat or "measured at the Kernels page's default call; see its table.")


def _kernel_claim(key: str, quote: str, test: str) -> Claim:
    return Claim(
        key=key,
        source="sdpa",
        slow=True,
        quote=quote,
        test=test,
        tolerance=RULES[TOPICS[key]],
        measure=functools.partial(_probed, key),
        describe=lambda m: judge_sizes(key, m).measured,
        judge=functools.partial(_kernel_judgement, key),
        cites=("dao2022",),
    )


FLASH_DEFAULT = _kernel_claim(
    "flash_default",
    "FlashAttention … is now the default backend in PyTorch's F.scaled_dot_product_attention. (“Uses "
    "FlashAttention under the hood.”)",
    "The backend torch's default dispatch picks (torch._fused_sdp_choice, checked against the outputs) for "
    "the Kernels page's default call at every T.",
)
FLASH_SPEED = _kernel_claim(
    "flash_speed",
    "FlashAttention (Dao et al., 2022) … providing 2-4x wall-clock speedups.",
    "Time of torch's math (materialising) path over the default dispatch's, round by round, at the largest T "
    "of the Kernels page's default sweep.",
)
FLASH_MEMORY = _kernel_claim(
    "flash_memory",
    "FlashAttention … reorganised the computation to be IO-aware, reducing memory usage from O(T^2) to O(T)",
    "Peak extra memory of the default dispatch and of torch's math path over the Kernels page's default "
    "sweep (attncore.kernels.measure_memory), and the log-log slope of each over the largest sizes.",
)


def _gqa(setting: Setting) -> Measurement:
    spec = kernel_spec(setting, heads=GQA_HEADS, groups=GQA_HEADS)  # multi-query: one K/V head
    x = make_inputs(spec, GQA_T, GQA_T, setting.device)
    rep = spec.groups
    k, v = x.key.repeat_interleave(rep, dim=-3), x.value.repeat_interleave(rep, dim=-3)
    with torch.no_grad():
        shared = sdpa(x.query, x.key, x.value, enable_gqa=True)
        full = sdpa(x.query, k, v)
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
