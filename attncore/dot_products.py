"""The dot product q·k of random vectors: Monte Carlo samples, histograms and its spread against d.

Shape legend (see the package docstring): ``M`` Monte Carlo samples, ``D`` values of the head
dim d (``E``). With zero-mean entries of variances ``var_q``, ``var_k``, ``q·k`` has variance
``d var_q var_k`` (:func:`attncore.theory.dot_product_variance`): the reason attention divides
by ``sqrt(d)``. Samples are drawn in blocks of a fixed size from a seeded generator, so the
same seed gives the same numbers for any sample count.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from numpy.typing import NDArray
from torch import Tensor

from attncore.budget import check_limit
from attncore.dtypes import check_sample_dtype
from attncore.errors import AttnInputError
from attncore.synthetic import make_generator, randn

__all__ = [
    "D_GRID",
    "MAX_D",
    "MAX_MC_ELEMENTS",
    "DotHistograms",
    "StdSweep",
    "check_d",
    "dot_histograms",
    "dot_product_samples",
    "dot_std_sweep",
    "histogram_density",
    "std_with_error",
]

MAX_D = 4096


# Products q_i k_i one Monte Carlo request may draw (two normals each, ~0.7 s on 2 CPU cores).
MAX_MC_ELEMENTS = 1 << 25


D_GRID: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096)


_CHUNK = 1 << 22  # elements per drawn block: bounded memory, same numbers for any n


def check_d(d: int) -> int:
    """``d`` as an int if it is a whole number in ``[1, MAX_D]``, else :class:`AttnInputError`."""
    if int(d) != d or not 1 <= int(d) <= MAX_D:
        raise AttnInputError(f"the head dim d must be a whole number from 1 to {MAX_D}; got {d}.")
    return int(d)


def _check_var(name: str, v: float) -> float:
    if not (math.isfinite(v) and 0.0 < v <= 1e4):
        raise AttnInputError(f"the {name} variance must be a positive number up to 10,000; got {v}.")
    return float(v)


def dot_product_samples(
    d: int,
    n: int,
    *,
    var_q: float = 1.0,
    var_k: float = 1.0,
    seed: int = 0,
    generator: torch.Generator | None = None,
    device: torch.device | str = "cpu",
    dtype: torch.dtype = torch.float32,
) -> Tensor:
    """M samples of ``q·k`` for independent q ~ N(0, var_q I_d), k ~ N(0, var_k I_d).

    Returns the raw (unscaled) dot products, shape (M,), on ``device``; divide by
    sqrt(d) for the scaled logits. Vectors are drawn in blocks of at most 4M
    entries, so memory stays bounded; ``generator`` (else one seeded with ``seed``
    on the CPU, whose draws are moved to ``device``: the same samples on every device)
    makes the draw reproducible.

    Raises:
        ResourceLimitError: ``n · d`` exceeds :data:`MAX_MC_ELEMENTS`.
    """
    d = check_d(d)
    if int(n) < 2:
        raise AttnInputError(f"at least 2 samples are needed for a spread; got {n}.")
    n = int(n)
    sq, sk = math.sqrt(_check_var("query", var_q)), math.sqrt(_check_var("key", var_k))
    check_limit(n * d, MAX_MC_ELEMENTS, "samples × d", "products q_i·k_i per request (about a second)",
                "Reduce the samples or d.")
    dev = torch.device(device)
    g = generator if generator is not None else make_generator(seed)  # CPU: the same on every device
    dt = check_sample_dtype(dtype)
    rows = max(1, _CHUNK // d)
    out = torch.empty(n, device=dev, dtype=dt)
    for start in range(0, n, rows):
        m = min(rows, n - start)
        q = randn(m, d, generator=g, device=dev, dtype=dt)  # (m, E)
        k = randn(m, d, generator=g, device=dev, dtype=dt)  # (m, E)
        out[start : start + m] = (q * k).sum(-1) * (sq * sk)
    return out


def std_with_error(x: Tensor) -> tuple[float, float]:
    r"""Sample std of x (M,) and its standard error from the sample's own fourth moment.

    :math:`\mathrm{SE} = \sqrt{(m_4 - s^4)/M} / (2s)` (delta method), so the error bars
    come from the measurement, not from the theory they are compared with.
    """
    x = x.to(torch.float64)
    c = x - x.mean()
    var = float((c * c).mean())
    m4 = float((c**4).mean())
    s = math.sqrt(var)
    se = math.sqrt(max(m4 - var * var, 0.0) / x.numel()) / (2.0 * s) if s > 0 else 0.0
    return s, se


def histogram_density(x: Tensor, bins: int, lo: float, hi: float) -> tuple[NDArray[np.float64],
                                                                          NDArray[np.float64], int]:
    """Density histogram of x (M,) over [lo, hi]: ``(edges (bins+1,), density (bins,), outside)``.

    ``density`` integrates to the fraction of samples inside the range; ``outside``
    counts the samples beyond it. Counted on x's device.
    """
    if not 1 <= int(bins) <= 1000:
        raise AttnInputError(f"the histogram needs 1 to 1000 bins; got {bins}.")
    if not (math.isfinite(lo) and math.isfinite(hi) and hi > lo):
        raise AttnInputError("the histogram range must be finite with hi > lo.")
    counts = torch.histc(x.to(torch.float64), bins=int(bins), min=lo, max=hi)  # (bins,)
    counts_np = counts.cpu().numpy()
    width = (hi - lo) / bins
    edges = np.linspace(lo, hi, int(bins) + 1)
    return edges, counts_np / (x.numel() * width), int(x.numel() - counts_np.sum())


@dataclass(frozen=True)
class DotHistograms:
    """Histograms of one Monte Carlo draw of q·k, raw and scaled by 1/sqrt(d).

    ``edges_*`` (bins+1,) and ``density_*`` (bins,); the raw range is ±``span``
    theoretical standard deviations and the scaled one the same range divided by
    sqrt(d). ``outside`` counts samples beyond the range.
    """

    d: int
    samples: int
    edges_raw: NDArray[np.float64]
    density_raw: NDArray[np.float64]
    edges_scaled: NDArray[np.float64]
    density_scaled: NDArray[np.float64]
    outside: int
    std_raw: float
    se_raw: float
    mean_raw: float

    @property
    def std_scaled(self) -> float:
        return self.std_raw / math.sqrt(self.d)

    @property
    def se_scaled(self) -> float:
        return self.se_raw / math.sqrt(self.d)


def dot_histograms(
    d: int,
    n: int,
    bins: int,
    *,
    var_q: float = 1.0,
    var_k: float = 1.0,
    span: float = 5.0,
    seed: int = 0,
    device: torch.device | str = "cpu",
    dtype: torch.dtype = torch.float32,
) -> DotHistograms:
    """Draw n samples of q·k (see :func:`dot_product_samples`) and histogram them, raw and scaled."""
    x = dot_product_samples(d, n, var_q=var_q, var_k=var_k, seed=seed, device=device, dtype=dtype)  # (M,)
    half = span * math.sqrt(d * var_q * var_k)
    edges, dens, outside = histogram_density(x, bins, -half, half)
    s, se = std_with_error(x)
    root = math.sqrt(d)
    return DotHistograms(d=int(d), samples=int(n), edges_raw=edges, density_raw=dens,
                         edges_scaled=edges / root, density_scaled=dens * root, outside=outside,
                         std_raw=s, se_raw=se, mean_raw=float(x.double().mean()))


@dataclass(frozen=True)
class StdSweep:
    """std of q·k against d (each (D,)): raw and scaled by 1/sqrt(d), with standard errors."""

    d: NDArray[np.int64]
    std_raw: NDArray[np.float64]
    se_raw: NDArray[np.float64]
    std_scaled: NDArray[np.float64]
    se_scaled: NDArray[np.float64]
    samples: int


def dot_std_sweep(
    ds: Sequence[int],
    n: int,
    *,
    var_q: float = 1.0,
    var_k: float = 1.0,
    seed: int = 0,
    device: torch.device | str = "cpu",
    dtype: torch.dtype = torch.float32,
) -> StdSweep:
    """Measured std of ``q·k`` and of ``q·k/sqrt(d)`` for each d in ``ds``, n samples each.

    One generator seeded with ``seed`` draws every d in turn (independent samples per d).
    The whole sweep must fit :data:`MAX_MC_ELEMENTS` products.
    """
    ds = [check_d(d) for d in ds]
    if not ds:
        raise AttnInputError("the sweep needs at least one d.")
    check_limit(int(n) * sum(ds), MAX_MC_ELEMENTS, "samples × (sum of d over the sweep)",
                "products per request (about a second)", "Reduce the samples per d.")
    g = make_generator(seed)  # CPU: the same samples on every device
    raw, se_raw = [], []
    for d in ds:
        s, se = std_with_error(dot_product_samples(d, n, var_q=var_q, var_k=var_k, generator=g,
                                                   device=device, dtype=dtype))
        raw.append(s)
        se_raw.append(se)
    root = np.sqrt(np.asarray(ds, dtype=np.float64))
    return StdSweep(d=np.asarray(ds, dtype=np.int64), std_raw=np.asarray(raw), se_raw=np.asarray(se_raw),
                    std_scaled=np.asarray(raw) / root, se_scaled=np.asarray(se_raw) / root, samples=int(n))
