"""Closed forms for softmax saturation: a row with one large score, the Jacobian's norm in its two
limits, the unscaled large-d limit, and the logit at which exp overflows in each dtype."""

from __future__ import annotations

import functools
import math
from functools import lru_cache

import numpy as np
import torch
from numpy.typing import ArrayLike, NDArray

from attncore.dtypes import DTYPES
from attncore.theory._common import scalar as _scalar

__all__ = [
    "exp_overflow_logit",
    "expected_max_normal",
    "inverse_chi_mean",
    "jacobian_norm_large_scale",
    "jacobian_norm_small_scale",
    "max_weight_large_scale",
    "max_weight_small_scale",
    "saturated_jacobian_bound",
    "saturation_jacobian_norm",
    "saturation_other_weight",
    "saturation_threshold",
    "saturation_top_weight",
    "top2_gap_density_at_zero",
    "uniform_row_jacobian_norm",
    "unscaled_jacobian_norm_large_d",
    "unscaled_max_weight_large_d",
]


def saturation_top_weight(x: ArrayLike, n: int) -> NDArray[np.float64] | float:
    """Top weight of ``softmax([x, 0, ..., 0])`` over n entries: ``1 / (1 + (n-1) e^{-x})``."""
    x_arr = np.asarray(x, dtype=np.float64)
    return _scalar(np.exp(x_arr - np.logaddexp(x_arr, math.log(n - 1))))


def saturation_other_weight(x: ArrayLike, n: int) -> NDArray[np.float64] | float:
    """Each of the n-1 other weights of ``softmax([x, 0, ..., 0])``: ``1 / (e^x + n - 1)``."""
    x_arr = np.asarray(x, dtype=np.float64)
    return _scalar(np.exp(-np.logaddexp(x_arr, math.log(n - 1))))


def saturation_threshold(n: int, level: float = 0.99) -> float:
    """The x at which the top weight of ``softmax([x, 0, ..., 0])`` reaches ``level``.

    ``x* = log(level (n-1) / (1-level))``: 5.69 for n = 4 and level 0.99.
    """
    if n < 2 or not 0.0 < level < 1.0:
        raise ValueError("need n >= 2 and 0 < level < 1.")
    return math.log(level * (n - 1) / (1.0 - level))


def saturation_jacobian_norm(x: ArrayLike, n: int) -> NDArray[np.float64] | float:
    r"""``||J||_F`` of ``softmax([x, 0, ..., 0])`` over n entries, in closed form.

    With top weight p, the m = n-1 other weights q each and ``1 - p = m q``:
    :math:`\|J\|_F^2 = (p\,m q)^2 + 2m(pq)^2 + m\,q^2(p + (m-1)q)^2 + m(m-1)q^4`;
    ``2pq`` for n = 2. Written without differences, so it stays exact far into saturation.
    """
    p = np.asarray(saturation_top_weight(x, n))
    q = np.asarray(saturation_other_weight(x, n))
    m = n - 1
    sq = (p * m * q) ** 2 + 2 * m * (p * q) ** 2 + m * (q * (p + (m - 1) * q)) ** 2 + m * (m - 1) * q**4
    return _scalar(np.sqrt(sq))


def uniform_row_jacobian_norm(n: ArrayLike) -> NDArray[np.float64] | float:
    """``||J||_F`` of a uniform row over n keys: ``sqrt(n-1)/n``, which vanishes like ``1/sqrt(n)``."""
    n_arr = np.asarray(n, dtype=np.float64)
    return _scalar(np.sqrt(n_arr - 1.0) / n_arr)


@functools.cache
def _grid() -> torch.Tensor:
    """The z grid of the quadratures below, built on first use: nothing runs torch at import (an
    import-time op starts torch's thread pool, and a process forked after that hangs in its first
    parallel op: the Kernels page forks its memory-measuring processes from an importer)."""
    return torch.linspace(-12.0, 12.0, 48001, dtype=torch.float64)


@lru_cache(maxsize=256)
def top2_gap_density_at_zero(n: int) -> float:
    r"""Density at 0 of the gap between the two largest of n iid N(0, 1) draws.

    :math:`f_G(0) = n(n-1)\int \varphi(x)^2\,\Phi(x)^{n-2}\,dx` (1-D quadrature);
    ``1/sqrt(pi)`` for n = 2. It sets how often a saturated row still has a near tie.
    """
    if n < 2:
        raise ValueError("a gap needs n >= 2.")
    grid = _grid()
    phi = torch.exp(-0.5 * grid**2) / math.sqrt(2.0 * math.pi)
    integrand = phi**2 * torch.special.ndtr(grid) ** (n - 2)
    return float(n * (n - 1) * torch.trapezoid(integrand, grid))


@lru_cache(maxsize=256)
def expected_max_normal(n: int) -> float:
    r"""``E[max of n iid N(0, 1)]`` = :math:`n \int x\,\varphi(x)\,\Phi(x)^{n-1}\,dx` (0 for n = 1)."""
    grid = _grid()
    phi = torch.exp(-0.5 * grid**2) / math.sqrt(2.0 * math.pi)
    return float(n * torch.trapezoid(grid * phi * torch.special.ndtr(grid) ** (n - 1), grid))


def jacobian_norm_small_scale(sigma: ArrayLike, n: int) -> NDArray[np.float64] | float:
    r"""``E||J||_F`` for softmax of n iid N(0, sigma^2) logits, to second order in sigma.

    :math:`\sqrt{\tfrac{n-1}{n^2}\,(1 + \sigma^2 \tfrac{n-4}{n})}`: starts at the uniform
    row's value and, for n > 4, first grows as the row sharpens. Valid for sigma ≲ 0.5.
    """
    s = np.asarray(sigma, dtype=np.float64)
    return _scalar(np.sqrt(np.maximum((n - 1) / n**2 * (1.0 + s**2 * (n - 4) / n), 0.0)))


def jacobian_norm_large_scale(sigma: ArrayLike, n: int) -> NDArray[np.float64] | float:
    r"""``E||J||_F`` for large sigma: ``f_G(0) / sigma``.

    A saturated row has ``||J|| ≈ 2 p_1 p_2``, set by the gap G between its two
    largest logits; averaging ``2σ(u)σ(-u)`` over ``u = sigma·G`` gives
    :math:`f_G(0)/\sigma` (:func:`top2_gap_density_at_zero`). Decays like 1/sigma, not
    exponentially: rare near ties keep the mean alive while the typical row is flat.
    """
    s = np.asarray(sigma, dtype=np.float64)
    with np.errstate(divide="ignore"):
        return _scalar(top2_gap_density_at_zero(n) / s)


def max_weight_small_scale(sigma: ArrayLike, n: int) -> NDArray[np.float64] | float:
    """``E[max weight]`` to first order in sigma: ``(1 + sigma · E[max of n normals]) / n``."""
    s = np.asarray(sigma, dtype=np.float64)
    return _scalar((1.0 + s * expected_max_normal(n)) / n)


def max_weight_large_scale(sigma: ArrayLike, n: int) -> NDArray[np.float64] | float:
    """``E[max weight]`` for large sigma: ``1 - log(2) f_G(0) / sigma``."""
    s = np.asarray(sigma, dtype=np.float64)
    with np.errstate(divide="ignore"):
        return _scalar(1.0 - math.log(2.0) * top2_gap_density_at_zero(n) / s)


def inverse_chi_mean(d: ArrayLike) -> NDArray[np.float64] | float:
    r"""``E[1/|q|]`` for q ~ N(0, I_d), d >= 2: :math:`\Gamma(\frac{d-1}{2}) / (\sqrt2\,\Gamma(\frac d2))`."""
    d_arr = np.atleast_1d(np.asarray(d, dtype=np.float64))
    out = np.array([math.exp(math.lgamma((k - 1) / 2) - math.lgamma(k / 2)) / math.sqrt(2.0)
                    if k >= 2 else np.inf for k in d_arr])
    return _scalar(out.reshape(np.shape(d)))


def unscaled_jacobian_norm_large_d(d: ArrayLike, n: int) -> NDArray[np.float64] | float:
    """Mean ``||J||_F`` of unscaled unit-Gaussian attention over n keys at large d.

    Given the query, the unscaled logits are iid N(0, |q|^2), so
    :func:`jacobian_norm_large_scale` at sigma = |q| averages to ``f_G(0) E[1/|q|] ≈ f_G(0)/sqrt(d)``.
    """
    return _scalar(top2_gap_density_at_zero(n) * np.asarray(inverse_chi_mean(d)))


def unscaled_max_weight_large_d(d: ArrayLike, n: int) -> NDArray[np.float64] | float:
    """Mean max weight of unscaled unit-Gaussian attention at large d: ``1 - log 2 f_G(0) E[1/|q|]``."""
    return _scalar(1.0 - math.log(2.0) * np.asarray(unscaled_jacobian_norm_large_d(d, n)))


def exp_overflow_logit(dtype: str) -> float:
    """The logit above which ``exp`` overflows to inf in ``dtype``: ``log(largest finite value)``.

    11.09 for float16, 88.72 for bfloat16 and float32, 709.78 for float64. A naive
    softmax ``e^x / sum e^x`` turns into inf/inf = NaN there; subtracting the row
    maximum first keeps every exponent <= 0.
    """
    if dtype not in DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}; choose one of {', '.join(DTYPES)}.")
    return math.log(float(torch.finfo(DTYPES[dtype]).max))


def saturated_jacobian_bound(level: float) -> float:
    """Largest ‖J‖_F of any softmax row whose top weight is at least ``level``: at most 2(1 − level).

    With J = diag(p) − ppᵀ, ‖J‖_F² = Σᵢ pᵢ²((1 − pᵢ)² + Σ_{j≠i} pⱼ²) ≤ 2 Σᵢ pᵢ²(1 − pᵢ)²; the top
    entry adds at most ε² (ε = 1 − level), the others at most Σ_{i>1} pᵢ² ≤ ε²: ‖J‖_F ≤ 2ε, whatever
    the number of keys.
    """
    return 2.0 * (1.0 - float(level))
