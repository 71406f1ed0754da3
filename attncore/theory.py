"""Closed forms drawn next to the measurements.

Every function takes plain numbers (or numpy arrays) and returns the same kind,
so the UI can evaluate a curve on a grid without touching torch.
"""

from __future__ import annotations


import numpy as np
from numpy.typing import ArrayLike, NDArray

__all__ = [
    "dot_product_std",
    "dot_product_variance",
    "scaled_logit_std",
    "uniform_entropy",
]


def dot_product_variance(d: ArrayLike, var_q: float = 1.0, var_k: float = 1.0) -> NDArray[np.float64] | float:
    """``Var(q·k) = d · var_q · var_k`` for independent zero-mean q, k with d coordinates."""
    out = np.asarray(d, dtype=np.float64) * var_q * var_k
    return float(out) if out.ndim == 0 else out


def dot_product_std(d: ArrayLike, var_q: float = 1.0, var_k: float = 1.0) -> NDArray[np.float64] | float:
    """``std(q·k) = sqrt(d · var_q · var_k)``; d=64 with unit variances gives 8."""
    out = np.sqrt(np.asarray(dot_product_variance(d, var_q, var_k), dtype=np.float64))
    return float(out) if out.ndim == 0 else out


def scaled_logit_std(
    d: ArrayLike,
    var_q: float = 1.0,
    var_k: float = 1.0,
    scale: float | None = None,
    temperature: float = 1.0,
) -> NDArray[np.float64] | float:
    """std of ``scale · q·k / temperature``; ``scale`` defaults to ``1/sqrt(d)``.

    With the default scale this is ``sqrt(var_q · var_k) / temperature``, independent of d.
    """
    d_arr = np.asarray(d, dtype=np.float64)
    s = 1.0 / np.sqrt(d_arr) if scale is None else np.float64(scale)
    out = np.asarray(dot_product_std(d_arr, var_q, var_k)) * s / temperature
    return float(out) if out.ndim == 0 else out


def uniform_entropy(n: ArrayLike) -> NDArray[np.float64] | float:
    """Entropy of a uniform row over n keys: ``log n`` nats (the maximum)."""
    out = np.log(np.asarray(n, dtype=np.float64))
    return float(out) if out.ndim == 0 else out


