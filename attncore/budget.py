"""Size limits that keep every request inside memory and a responsive time budget.

The UI bounds its controls to these numbers; attncore checks them again so that
no caller (URL, test, notebook) can ask for a computation that cannot fit.
"""

from __future__ import annotations

import gc
from collections.abc import Callable
from typing import TypeVar

import torch

from attncore.errors import ResourceLimitError

__all__ = ["MAX_ATTENTION_CELLS", "MAX_ADDITIVE_OPS", "check_limit", "fmt_count", "free_gpu_memory",
           "oom_to_limit"]

T = TypeVar("T")

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
