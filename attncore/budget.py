"""Size limits that keep every request inside memory and a responsive time budget.

The UI bounds its controls to these numbers; attncore checks them again so that
no caller (URL, test, notebook) can ask for a computation that cannot fit.
"""

from __future__ import annotations

import gc
import os
from collections.abc import Callable
from typing import TypeVar

import torch

from attncore.errors import ResourceLimitError

__all__ = ["DEFAULT_MAX_BYTES", "MAX_ADDITIVE_OPS", "MAX_ATTENTION_CELLS", "MAX_BYTES_ENV", "check_bytes",
           "check_limit", "env_bytes", "fmt_bytes", "fmt_count", "free_gpu_memory", "max_bytes",
           "oom_to_limit"]

T = TypeVar("T")

MAX_BYTES_ENV = "ATTNCORE_MAX_BYTES"
# Peak bytes one computation may allocate. The largest Heatmaps request measures ~1.65 GB
# (float64, all stages kept), so 2 GiB lets it through with a margin; a server for N
# concurrent heavy users needs about N x this (the app's admission control, ui.admission,
# keeps the sum of running estimates under its own process budget). Override with
# ATTNCORE_MAX_BYTES (bytes, or with a K/M/G suffix, powers of 1024).
DEFAULT_MAX_BYTES = 2 * 1024**3

# heads x L x S cells of one materialised attention map (5 stages kept: ~320 MB in float32).
MAX_ATTENTION_CELLS = 16 * 1024 * 1024
# heads x L x S x hidden tanh evaluations for additive scoring (~1 s on 2 CPU cores).
MAX_ADDITIVE_OPS = 1 << 26


def fmt_count(n: float) -> str:
    """1234567 -> '1.23M'."""
    for unit, size in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= size:
            return f"{n / size:.3g}{unit}"
    return f"{n:.0f}"


def check_limit(amount: float, limit: float, what: str, why: str, fix: str) -> None:
    """Raise :class:`ResourceLimitError` with a plain message when ``amount > limit``."""
    if amount > limit:
        raise ResourceLimitError(
            f"{what} would be {fmt_count(amount)}; the limit is {fmt_count(limit)} {why}. {fix}"
        )


def free_gpu_memory() -> None:
    """Return cached CUDA memory to the driver (after an out-of-memory error); no-op without CUDA."""
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def oom_to_limit(fn: Callable[[], T], what: str, fix: str) -> T:
    """``fn()``; a CUDA out-of-memory error becomes :class:`ResourceLimitError` after freeing memory.

    The error is left (and its frames, with their tensors, released) before the cache is emptied;
    the message names ``what`` ran out and the limit to lower (``fix``).
    """
    try:
        return fn()
    except torch.cuda.OutOfMemoryError:
        pass
    free_gpu_memory()
    raise ResourceLimitError(f"the GPU ran out of memory for {what}; the memory was freed. {fix}")


def fmt_bytes(n: float) -> str:
    """1536 -> '1.5 KiB'; 2**31 -> '2 GiB'."""
    for unit, size in (("TiB", 1024.0**4), ("GiB", 1024.0**3), ("MiB", 1024.0**2), ("KiB", 1024.0)):
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return f"{n:.0f} bytes"


def max_bytes() -> int:
    """The per-computation memory budget: ``ATTNCORE_MAX_BYTES`` or :data:`DEFAULT_MAX_BYTES`.

    Read on every call, so a test or a notebook can change it with the environment.
    A malformed value falls back to the default rather than disabling the budget.
    """
    return env_bytes(MAX_BYTES_ENV, DEFAULT_MAX_BYTES, minimum=1)


def env_bytes(name: str, default: int, minimum: int = 0) -> int:
    """Bytes from the environment variable ``name`` (a number, or with a K/M/G/T suffix, powers
    of 1024); ``default`` when unset, malformed or below ``minimum``."""
    raw = os.environ.get(name, "").strip().upper().removesuffix("B").removesuffix("I")
    if not raw:
        return default
    mult = {"K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4}.get(raw[-1], 1)
    try:
        value = float(raw[:-1] if mult > 1 else raw) * mult
    except ValueError:
        return default
    return int(value) if minimum <= value < float("inf") else default


def check_bytes(nbytes: float, what: str, fix: str) -> None:
    """Raise :class:`ResourceLimitError` when ``nbytes`` exceeds :func:`max_bytes` (before allocating)."""
    limit = max_bytes()
    if not nbytes <= limit:  # NaN counts as over
        raise ResourceLimitError(
            f"{what} would need about {fmt_bytes(nbytes)} of memory; the limit is {fmt_bytes(limit)} "
            f"per computation ({MAX_BYTES_ENV}). {fix}"
        )
