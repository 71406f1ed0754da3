"""Float overflow: the naive softmax ``e^x / sum e^x`` against the stable one, per dtype.

``exp`` overflows once a logit passes the log of the dtype's largest finite value
(:func:`attncore.theory.exp_overflow_logit`); the naive softmax then returns inf/inf = NaN,
while subtracting the row maximum first keeps every exponent <= 0. ``P`` points on the logit
axis, ``T`` dtypes, ``n`` entries of the row ``[x, 0, ..., 0]``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from numpy.typing import NDArray

from attncore.dtypes import DTYPES
from attncore.errors import AttnInputError
from attncore.gradients import naive_softmax, stable_softmax

__all__ = ["OVERFLOW_DTYPES", "OverflowRow", "OverflowSweep", "overflow_rows", "overflow_sweep"]

OVERFLOW_DTYPES: tuple[str, ...] = ("float16", "bfloat16", "float32", "float64")


@dataclass(frozen=True)
class OverflowSweep:
    """Naive vs stable softmax of ``[x, 0, ..., 0]`` per dtype along x.

    Arrays are (T, P) for T = len(dtypes): the largest absolute error against a
    float64 stable softmax of the same (dtype-rounded) logits, NaN where the output
    is not finite, and the count of non-finite outputs per row.
    """

    x: NDArray[np.float64]
    dtypes: tuple[str, ...]
    naive_error: NDArray[np.float64]
    stable_error: NDArray[np.float64]
    naive_nonfinite: NDArray[np.int64]
    stable_nonfinite: NDArray[np.int64]
    n: int


def overflow_sweep(x: Sequence[float], n: int = 4, dtypes: Sequence[str] = OVERFLOW_DTYPES,
                   device: torch.device | str = "cpu") -> OverflowSweep:
    """Run :func:`naive_softmax` and :func:`stable_softmax` on ``[x, 0, ..., 0]`` in each dtype.

    The reference is the stable softmax in float64 of the logits as rounded to the
    dtype, so the error measures the softmax arithmetic alone.
    """
    xs = np.asarray(x, dtype=np.float64)
    if xs.ndim != 1 or xs.size == 0 or xs.size > 10_000 or not np.all(np.isfinite(xs)):
        raise AttnInputError("the overflow sweep needs 1 to 10,000 finite logits.")
    if not 2 <= int(n) <= 1024:
        raise AttnInputError(f"the row needs 2 to 1024 entries; got {n}.")
    bad = [t for t in dtypes if t not in DTYPES]
    if bad:
        raise AttnInputError(f"unknown dtype(s) {bad}; choose from {', '.join(OVERFLOW_DTYPES)}.")
    dev = torch.device(device)
    base = torch.zeros(xs.size, int(n), dtype=torch.float64, device=dev)  # (P, n)
    base[:, 0] = torch.as_tensor(xs, device=dev)
    res: dict[str, list[NDArray]] = {"ne": [], "se": [], "nn": [], "sn": []}
    for name in dtypes:
        logits = base.to(DTYPES[name])  # (P, n)
        ref = stable_softmax(logits.to(torch.float64))
        for key, fn in (("n", naive_softmax), ("s", stable_softmax)):
            p = fn(logits).to(torch.float64)
            finite = torch.isfinite(p).all(-1)
            err = torch.where(finite, (p - ref).abs().amax(-1), torch.full_like(finite, float("nan"),
                                                                                dtype=torch.float64))
            res[key + "e"].append(err.cpu().numpy())
            res[key + "n"].append((~torch.isfinite(p)).sum(-1).cpu().numpy())
    return OverflowSweep(x=xs, dtypes=tuple(dtypes), naive_error=np.stack(res["ne"]),
                         stable_error=np.stack(res["se"]), naive_nonfinite=np.stack(res["nn"]),
                         stable_nonfinite=np.stack(res["sn"]), n=int(n))


@dataclass(frozen=True)
class OverflowRow:
    """Naive or stable softmax of ``[x, 0, ..., 0]`` in one dtype, for a table."""

    dtype: str
    method: str
    exp_x: float  # exp(x) as computed in the dtype (inf once it overflows)
    weights: tuple[float, ...]
    row_sum: float
    max_error: float  # against float64 stable; NaN when the output is not finite
    finite: bool


def overflow_rows(x: float, n: int = 4, dtypes: Sequence[str] = OVERFLOW_DTYPES) -> list[OverflowRow]:
    """Both softmax forms of ``[x, 0, ..., 0]`` in every dtype (see :func:`overflow_sweep`)."""
    if not math.isfinite(x) or abs(x) > 1e4:
        raise AttnInputError(f"x must be a finite number within ±10,000; got {x}.")
    rows = []
    for name in dtypes:
        sweep = overflow_sweep([x], n, (name,))
        logits = torch.zeros(int(n), dtype=DTYPES[name])
        logits[0] = x
        for method, fn, err in (("naive", naive_softmax, sweep.naive_error),
                                ("stable", stable_softmax, sweep.stable_error)):
            p = fn(logits).to(torch.float64)
            rows.append(OverflowRow(dtype=name, method=method, exp_x=float(torch.exp(logits[0])),
                                    weights=tuple(float(v) for v in p), row_sum=float(p.sum()),
                                    max_error=float(err[0, 0]), finite=bool(torch.isfinite(p).all())))
    return rows
