"""Where and how large a fused entropy sweep runs: whether the Triton kernels can run on a device, the
limits (n, random numbers per sweep), and the launch plan of a spec (tile sizes, keys per program and per
launch, the Philox streams).

Shape legend as in :mod:`attncore.sweeps.fused`: ``R`` query rows, ``n`` keys, ``d`` query/key dim,
``Dv`` value dim.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from types import ModuleType

import torch

from attncore.budget import check_limit
from attncore.errors import AttnInputError
from attncore.sweeps.rng import splitmix64
from attncore.sweeps.spec import MAX_SWEEP_N, SweepSpec

__all__ = [
    "BN",
    "OPTS",
    "DCH",
    "GROUP",
    "MAX_FUSED_WORK",
    "MAX_INTERPRETED_WORK",
    "MAX_SWEEP_N_CUDA",
    "RB",
    "ROWS_PER_WARP",
    "STREAM_KEYS",
    "STREAM_LOGITS",
    "STREAM_VALUES",
    "LaunchPlan",
    "fused_available",
    "fused_cap",
    "fused_unavailable_reason",
    "fused_work",
    "fused_work_limit",
    "kernels_module",
    "launch_plan",
    "mix64",
    "probe_length",
    "validate_fused",
]

MAX_SWEEP_N_CUDA = 1 << 30  # a billion keys per row on a GPU
# Random numbers one fused sweep may draw: about 6 s at the logits kernel's 196 G samples/s on an
# H200 (issue 25; 198 G/s on an H100, 27 Nov 2026), 4.6 s at the reworked vectors kernel's 241 G/s
# (H100, 2^30 keys, python -m bench.entropy_cuda).
MAX_FUSED_WORK = 1 << 40
FUSED_PROBE_WORK = 1 << 30  # random numbers of a calibration probe on CUDA (~10 ms, estimate)
MAX_INTERPRETED_WORK = 1 << 22  # the same on the CPU through Triton's interpreter: ~40 s (tests use far less)
LAUNCH_SAMPLES = 1 << 32  # random numbers per kernel launch: ~22 ms (logits) to ~18 ms (vectors) on an H100
TARGET_PROGRAMS = 4096  # programs per launch to aim for (an H100 has 132 SMs)
GROUP = 1024  # logits: keys per Philox group (fixed: part of the index map of the draws)
RB = 4  # logits: rows per program
# vectors kernel tiles (sm_90 build with 16-byte aligned arguments, as the launches get them:
# 163 registers and no spill at 64 rows, so three programs share an SM; 64-key tiles take
# 253 registers, 64-wide head-dim chunks 240, both two programs per SM). Timed on an H100
# (`python -m bench.entropy_cuda --tune`, 2^24 keys, 27 Nov 2026): 32 keys x 32 dims x 4 warps 11.1 ms,
# 64-key tiles 11.5, 16-key 15.3, 64-wide chunks 12.2, 16-wide 12.5, 8 warps 28.4: the defaults are the best.
BN = 32  # vectors: keys per tile (drawn once, shared by every row of the program); 16 from a value
# dim of 128 on (the output accumulator takes 128 registers at 256: 32-key tiles spill 320 bytes)
DCH = 32  # vectors: head-dim chunk of one key draw and its two tf32 products (16 where d <= 16)
ROWS_PER_WARP = 16  # vectors: each warp owns 16 whole rows (row max and sums stay in the warp)
MAX_CHUNK = 1 << 16  # keys per program at most (float32 partial sums, as the engine's blocks)
STREAM_LOGITS, STREAM_KEYS, STREAM_VALUES = 2, 3, 4
# compile options of every launch: FMA contraction on, said explicitly (triton 3.9 warns when unset)
OPTS: dict = {"enable_fp_fusion": True}
INTERPRET_ENV = "TRITON_INTERPRET"


# --------------------------------------------------------------------------- availability


def _triton_interpreting() -> bool:
    """True when triton is (or, once imported, will be) in interpreter mode."""
    import sys

    mod = sys.modules.get("triton")
    if mod is not None:
        return bool(mod.knobs.runtime.interpret)
    return os.environ.get(INTERPRET_ENV, "0").strip().lower() in {"1", "true", "on", "yes"}


def fused_unavailable_reason(device: torch.device | str) -> str | None:
    """None when the fused kernels can run on ``device``; else a plain sentence why not."""
    dev = torch.device(device)
    try:
        import triton  # noqa: F401
    except ImportError:
        return ("the fused kernels need triton (it ships with CUDA builds of torch; on a CPU machine "
                "install requirements-dev.txt).")
    interp = _triton_interpreting()
    if dev.type == "cuda":
        if interp:
            return f"{INTERPRET_ENV}=1 is set: triton runs its interpreter, not the GPU."
        return None
    if dev.type == "cpu":
        if interp:
            return None
        return (f"on the CPU the fused kernels run only in Triton's interpreter ({INTERPRET_ENV}=1 set "
                "before triton is imported); the torch engine is the CPU path.")
    return f"the fused kernels run on CUDA (or interpreted on the CPU), not on {dev.type}."


def fused_available(device: torch.device | str) -> bool:
    """Whether :func:`run_fused_sweep` can run on ``device`` in this process."""
    return fused_unavailable_reason(device) is None


def fused_cap(device: torch.device | str) -> int:
    """The largest n the fused kernels take on ``device``: 2^30 on CUDA (memory stays flat in n),
    the torch engine's 2^24 when interpreted."""
    return MAX_SWEEP_N_CUDA if torch.device(device).type == "cuda" else MAX_SWEEP_N


def fused_work_limit(device: torch.device | str) -> int:
    """Random numbers one fused sweep may draw on ``device`` (compiled on CUDA, or interpreted)."""
    return MAX_FUSED_WORK if torch.device(device).type == "cuda" else MAX_INTERPRETED_WORK


def probe_length(spec: SweepSpec, device: torch.device | str) -> int:
    """n of a calibration probe for the fused engine: about FUSED_PROBE_WORK random numbers."""
    dev = torch.device(device)
    work = FUSED_PROBE_WORK if dev.type == "cuda" else 1 << 14
    keys = work // max(1, launch_plan(spec).samples_per_key)
    return int(max(GROUP, min(fused_cap(dev), keys) // GROUP * GROUP))


def kernels_module() -> ModuleType:
    """:mod:`attncore.sweeps.fused_kernels`, imported on first use (it imports triton)."""
    from attncore.sweeps import fused_kernels

    return fused_kernels


# --------------------------------------------------------------------------- plan


def mix64(*parts: int) -> int:
    """splitmix64 over the parts, kept to 63 bits (a non-negative int64 kernel argument)."""
    return splitmix64(*parts) & ((1 << 63) - 1)


def _pow2_at_least(x: int) -> int:
    return 1 << max(0, math.ceil(math.log2(max(1, x))))


@dataclass(frozen=True)
class LaunchPlan:
    """Launch geometry of one spec (tile sizes, chunk of keys per program, keys per launch)."""

    row_block: int  # RB (logits) or BR (vectors)
    row_programs: int
    n_dch: int  # vectors: DCH-wide chunks of the padded head dim (0 for logits)
    dch: int  # vectors: head-dim chunk (0 for logits)
    dvp: int  # vectors: padded value dim (0 for logits)
    key_align: int  # chunk sizes are multiples of this (vectors: the key tile BN)
    samples_per_key: int  # random numbers drawn per key (all row programs together)
    warps: int = 4

    def chunk(self, keys: int, override: int | None = None) -> int:
        """Keys per program for a segment of ``keys`` keys."""
        if override is not None:
            return max(self.key_align, -(-override // self.key_align) * self.key_align)
        want = -(-keys * self.row_programs // TARGET_PROGRAMS)
        c = _pow2_at_least(want)
        return int(min(MAX_CHUNK, max(self.key_align, c)))

    def launch_keys(self, chunk: int, override: int | None = None) -> int:
        """Keys per launch: a multiple of ``chunk`` drawing about LAUNCH_SAMPLES numbers."""
        want = override if override is not None else LAUNCH_SAMPLES // max(1, self.samples_per_key)
        return max(chunk, (want // chunk) * chunk)


def launch_plan(spec: SweepSpec) -> LaunchPlan:
    """The launch geometry of ``spec``: logits ``RB`` rows per program; vectors 64 or 128 rows, ``DCH``-wide
    head-dim chunks, ``BN``-key tiles (16 from a padded value dim of 128 on)."""
    R = spec.queries
    if spec.method == "logits":
        return LaunchPlan(row_block=RB, row_programs=-(-R // RB), n_dch=0, dch=0, dvp=0, key_align=GROUP,
                     samples_per_key=-(-R // RB) * RB)
    # 64 rows per program (one warp group: the M side of every tensor-core product), 128 from
    # 65 rows on (two warp groups: the keys are drawn once per 128 rows instead of twice)
    br = 64 if R <= 64 else 128
    tiles = -(-R // br)
    dch = 16 if spec.d <= 16 else DCH
    n_dch = -(-spec.d // dch)
    dvp = max(16, _pow2_at_least(spec.value_dim))
    bn = BN if dvp < 128 else 16
    return LaunchPlan(row_block=br, row_programs=tiles, n_dch=n_dch, dch=dch, dvp=dvp, key_align=bn,
                 samples_per_key=tiles * (dch * n_dch + dvp), warps=br // ROWS_PER_WARP)


def fused_work(spec: SweepSpec) -> int:
    """Random numbers a fused sweep draws (all passes, all row programs)."""
    p = launch_plan(spec)
    return sum(max(lens) * p.samples_per_key for _, lens in spec.passes())


def validate_fused(spec: SweepSpec, device: torch.device) -> None:
    """The spec's checks with the device's n cap and the fused work limit (plain messages)."""
    # the spec's checks with this cap (the torch engine's work limit is the CPU's: not here)
    spec.validate(max_n=fused_cap(device), check_work=False)
    if spec.dtype != "float32":
        raise AttnInputError("the fused kernels sample in float32; use the torch engine for float64.")
    if device.type == "cuda":
        check_limit(fused_work(spec), fused_work_limit(device), "this sweep's random numbers",
                    "(seconds of GPU time)", "Lower the largest n, the query rows or d.")
    else:
        check_limit(fused_work(spec), fused_work_limit(device), "this interpreted sweep's random numbers",
                    "(Triton's interpreter draws about 0.1 M per second)", "Lower the largest n or the rows.")
