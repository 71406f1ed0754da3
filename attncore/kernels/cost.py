"""What a call costs before it runs: its flops (as each path does them), the memory of the
materialised paths and of torch's CPU flash kernel, the budgets, and the sweep's work limit.

Flops: a path that forms the score matrix does ``4·B·H·L·S·E`` (two matmuls of ``2·L·S·E``
per head), mask or no mask. Under ``is_causal`` the fused kernels skip the key blocks above
the diagonal: torch's CPU flash kernel stops each query block at its last row's key (whole
key blocks of 512), the CUDA kernels at the tile that holds the diagonal; both do about half
the work at large ``T``. :func:`call_flops` counts each path's own work, so a speed ratio can
be split into "less work" and "faster per flop".
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from attncore.budget import check_bytes, check_limit, fmt_bytes
from attncore.errors import AttnInputError, ResourceLimitError
from attncore.kernels.calls import BACKENDS, BASELINES, MATERIALISING, kernels_here
from attncore.kernels.spec import KernelSpec, check_lengths, input_bytes

__all__ = [
    "CPU_FLASH_KV_BLOCK",
    "DEFAULT_BUDGET_BYTES",
    "MAX_SWEEP_FLOPS",
    "causal_pairs",
    "call_flops",
    "check_inputs",
    "check_sweep",
    "converted_mask_bytes",
    "cpu_flash_blocks",
    "cpu_flash_bytes",
    "cpu_flash_workspace_bytes",
    "default_budget_bytes",
    "full_flops",
    "materialised_bytes",
    "sweep_flops",
    "tolerance",
]

# Materialised L x S work the page may ask for, per device type (4 * B * H * L * S * E flops
# per call, summed over every call a sweep makes): ~7 s on the 2-core development CPU.
MAX_SWEEP_FLOPS: dict[str, float] = {"cpu": 1.0e12, "cuda": 5.0e14, "mps": 1.0e12}
# Memory the materialised paths may use on the CPU (the machine is shared).
DEFAULT_BUDGET_BYTES = 1 << 30
# torch's CPU flash kernel (aten/src/ATen/native/cpu/FlashAttentionKernel.cpp): key blocks of 512,
# query blocks of 256 rows from L = 768 on, 64 from 192, else 32.
CPU_FLASH_KV_BLOCK = 512


def tolerance(dtype: str) -> float:
    """Max |difference| expected between a correct kernel and the float64 reference (unit inputs)."""
    return {"float64": 1e-10, "float32": 2e-5, "float16": 4e-3, "bfloat16": 3e-2}[dtype]


def full_flops(spec: KernelSpec, L: int, S: int) -> float:
    """``4·B·H·L·S·E``: the two matmuls over every (query, key) pair (multiply-adds counted as 2)."""
    return 4.0 * spec.batch * spec.heads * L * S * spec.head_dim


def causal_pairs(L: int, S: int) -> int:
    """(query, key) pairs ``is_causal`` leaves visible: key ``j <= i`` for query ``i`` (torch's
    top-left alignment), ``sum_i min(i + 1, S)``; ``L (L + 1) / 2`` when ``L = S``."""
    full = min(L, S)  # rows 0 .. S-1 see i + 1 keys, the rest all S
    return full * (full + 1) // 2 + max(0, L - S) * S


def cpu_flash_blocks(L: int, S: int) -> tuple[int, int]:
    """(query rows, keys) per block of torch's CPU flash kernel at ``L`` queries, ``S`` keys."""
    q = 256 if L >= 768 else 64 if L >= 192 else 32
    return min(q, L), min(CPU_FLASH_KV_BLOCK, S)


def _cpu_flash_causal_keys(L: int, S: int) -> int:
    """Keys the CPU flash kernel scores over all query rows under ``is_causal``: each query block
    runs whole key blocks up to its last row's diagonal."""
    qb, kb = cpu_flash_blocks(L, S)
    total = 0
    for m in range(0, L, qb):
        rows = min(qb, L - m)
        last = min(m + rows, S)  # keys the block needs
        done = sum(min(kb, S - n) for n in range(0, last, kb))
        total += rows * done
    return total


def call_flops(name: str, spec: KernelSpec, L: int, S: int, device: torch.device | str,
               chosen: str | None = None) -> float:
    """The flops path ``name`` does at ``L`` queries, ``S`` keys on ``device``.

    The materialised paths (``math``, ``attncore``, ``notebook``) and every path without
    ``is_causal``: :func:`full_flops`. Fused kernels under ``is_causal``: ``4·B·H·E`` times the
    pairs they score: on the CPU torch's flash kernel's whole key blocks up to each query block's
    diagonal; on CUDA the visible pairs (:func:`causal_pairs`; the diagonal tiles add a little).
    ``"default"`` counts as the backend it dispatched to (``chosen``; unknown: as fused).
    """
    if name == "default":
        name = chosen or "flash"
    if name not in (*BACKENDS, *BASELINES):
        raise AttnInputError(f"unknown path {name!r}.")
    if spec.mask != "causal" or name in MATERIALISING:
        return full_flops(spec, L, S)
    kind = torch.device(device).type
    pairs = _cpu_flash_causal_keys(L, S) if kind == "cpu" else causal_pairs(L, S)
    return 4.0 * spec.batch * spec.heads * spec.head_dim * pairs


def materialised_bytes(name: str, spec: KernelSpec, L: int, S: int) -> float:
    """Bytes of the (B, H, L, S) matrices a materialised path keeps at once (an upper estimate).

    ``math``: scores, weights and a temporary in at least float32 (torch's math path upcasts
    half types); ``attncore``: its five stages in the compute dtype plus the weights returned
    in the input dtype; ``notebook``: scores, scaled scores and weights in the input dtype.
    Dropout adds a random draw and a keep mask per cell. Fused kernels: 0.
    """
    if name not in MATERIALISING:
        return 0.0
    cells = float(spec.batch * spec.heads * L * S)
    isz = spec.itemsize
    if name == "math":
        per = 3 * max(isz, 4)
    elif name == "attncore":
        per = 5 * max(isz, 4) + (isz if isz < 4 else 0)
    else:
        per = 3 * isz
    if spec.dropout > 0:
        per += 5
    return cells * per


def cpu_flash_workspace_bytes(spec: KernelSpec, L: int, S: int) -> float:
    """One thread's workspace in torch's CPU flash kernel: a query block's scores against a key block,
    its running max and sum and a query block x E accumulator (accumulation dtype), plus a
    half-precision copy of the scores for half types. It grows with T only until the blocks reach
    their largest size (256 query rows from L = 768, 512 keys from S = 512)."""
    qb, kb = cpu_flash_blocks(L, S)
    isz = spec.itemsize
    acc = max(isz, 4)
    return float((qb * kb + 2 * qb + qb * spec.head_dim) * acc + (qb * kb * isz if isz < 4 else 0))


def cpu_flash_bytes(spec: KernelSpec, L: int, S: int, threads: int) -> float:
    """Upper estimate of the memory torch's CPU flash kernel allocates for one call.

    The output (B, L, H, E) in the input dtype, the log-sum-exp (B, L, H) in the accumulation
    dtype, and one workspace per thread: a query block's scores against a key block, its running
    max and sum, and a query block x E accumulator (accumulation dtype: float32 for half types),
    plus a half-precision copy of the block's scores for half types. Half types may also pack K
    and V (2·B·H·S·E); grouped-query calls may expand K and V to all heads: both are counted.
    Nothing here grows with ``L x S`` but a boolean mask's additive copy
    (:func:`converted_mask_bytes`): the kernel never forms the score matrix.
    """
    isz = spec.itemsize
    acc = max(isz, 4)
    B, H, E = spec.batch, spec.heads, spec.head_dim
    per_thread = cpu_flash_workspace_bytes(spec, L, S)
    out = B * L * H * E * isz + B * L * H * acc
    extra = 0
    if isz < 4:
        extra += 2 * B * H * S * E * isz  # packed K and V
    if spec.groups > 1:
        extra += 2 * B * H * S * E * isz  # K and V repeated to every query head
    return float(out + max(1, threads) * per_thread + extra + converted_mask_bytes(spec, L, S))


def converted_mask_bytes(spec: KernelSpec, L: int, S: int) -> float:
    """Bytes of the additive (L, S) mask torch makes from a boolean one before any backend runs
    (0 where True, -inf where False, in the input dtype): memory of order L x S that every path,
    fused or not, pays for a boolean ``attn_mask``. 0 for the other mask kinds."""
    return float(L * S * spec.itemsize) if spec.mask == "boolean" else 0.0


def default_budget_bytes(device: torch.device | str) -> float:
    """The memory budget for materialised paths: 1 GiB on the CPU, half the free GPU memory on CUDA."""
    device = torch.device(device)
    if device.type == "cuda":
        free, _total = torch.cuda.mem_get_info(device)
        return float(free) / 2
    return float(DEFAULT_BUDGET_BYTES)


def sweep_flops(spec: KernelSpec, lengths: Sequence[int], device: torch.device | str, repeats: int,
                budget_bytes: float) -> float:
    """Upper estimate of the flops a sweep will spend (:func:`full_flops` per call).

    Counts, for every backend that has a kernel on the device, the default dispatch and the
    baselines that fit ``budget_bytes``: a warm-up, up to 3 timed rounds and two calls for the
    memory measurement (a warm-up and the measured call). Rounds beyond the third run only while
    the paths have spent less than the probe's ``max_seconds`` each: they add bounded time, and
    calls slow enough to matter stop them.
    """
    device = torch.device(device)
    total = 0.0
    for n_len in lengths:
        names = [*kernels_here(device), "default", *BASELINES]
        calls = sum(1 for n in names if materialised_bytes(n, spec, n_len, n_len) <= budget_bytes)
        total += full_flops(spec, n_len, n_len) * calls * (min(repeats, 3) + 3)
    return total


def check_inputs(spec: KernelSpec, L: int, S: int, device: torch.device | str = "cpu") -> None:
    """Raise :class:`~attncore.errors.ResourceLimitError` before :func:`make_inputs` would allocate
    more than the budget for Q, K, V and the mask: half the free GPU memory on CUDA, the
    per-computation budget (:func:`attncore.budget.max_bytes`) elsewhere."""
    need = input_bytes(spec, L, S)
    what = f"The inputs at T = {L} (Q, K, V and the {spec.mask} mask)"
    fix = "Lower the largest T, the heads or the head dim."
    if torch.device(device).type == "cuda":
        budget = default_budget_bytes(device)
        if not need <= budget:
            raise ResourceLimitError(f"{what} would need about {fmt_bytes(need)}; half the free GPU memory "
                                     f"is {fmt_bytes(budget)}. {fix}")
        return
    check_bytes(need, what, fix)


def check_sweep(spec: KernelSpec, lengths: Sequence[int], device: torch.device | str, repeats: int,
                budget_bytes: float) -> None:
    """Raise :class:`~attncore.errors.ResourceLimitError` when a sweep's work exceeds
    :data:`MAX_SWEEP_FLOPS` for the device or its largest inputs exceed the memory budget (and
    :class:`AttnInputError` for a bad spec or length)."""
    spec.validate()
    device = torch.device(device)
    check_lengths(list(lengths))
    flops = sweep_flops(spec, lengths, device, repeats, budget_bytes)
    limit = MAX_SWEEP_FLOPS.get(device.type, MAX_SWEEP_FLOPS["cpu"])
    check_limit(flops, limit, "The sweep's work (flops)",
                f"on {device.type.upper()} to keep a run within seconds",
                "Lower the largest T, the heads or the head dim.")
    if lengths:
        t = max(int(t) for t in lengths)
        check_inputs(spec, t, t, device)

