"""The one scalar-or-array return rule of every closed form in :mod:`attncore.theory`."""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

__all__ = ["scalar"]


def scalar(a: ArrayLike) -> NDArray[np.float64] | float:
    """A 0-d result as a Python float, an array as a float64 array (every closed form ends so)."""
    a = np.asarray(a, dtype=np.float64)
    return float(a) if a.ndim == 0 else a
