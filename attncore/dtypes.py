"""Floating-point dtypes by name, and the one rule for the dtype random samples are drawn in.

Pages and specs carry dtypes as plain names (``"float32"``); :data:`DTYPES` turns a name into
a torch dtype. Random inputs are always drawn in float32 or float64 (:func:`sampling_dtype`)
and then cast, so a float16 or bfloat16 computation sees the same numbers as the float32 one,
rounded.
"""

from __future__ import annotations

import torch

from attncore.errors import AttnInputError

__all__ = ["DTYPES", "SAMPLE_DTYPES", "check_sample_dtype", "sampling_dtype"]

DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "float64": torch.float64,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
}
SAMPLE_DTYPES: tuple[str, ...] = ("float32", "float64")  # what random numbers are drawn in


def _as_dtype(dtype: torch.dtype | str) -> torch.dtype:
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype not in DTYPES:
        raise AttnInputError(f"unknown dtype {dtype!r}; choose one of {', '.join(DTYPES)}.")
    return DTYPES[dtype]


def sampling_dtype(dtype: torch.dtype | str) -> torch.dtype:
    """The dtype random inputs for a ``dtype`` computation are drawn in: float64 for float64, else float32."""
    return torch.float64 if _as_dtype(dtype) == torch.float64 else torch.float32


def check_sample_dtype(dtype: torch.dtype | str) -> torch.dtype:
    """``dtype`` as a torch dtype if Monte Carlo sampling can run in it (float32 / float64), else raise."""
    dt = _as_dtype(dtype)
    if dt not in (torch.float32, torch.float64):
        raise AttnInputError(f"Monte Carlo sampling runs in float32 or float64; got {dt}.")
    return dt

