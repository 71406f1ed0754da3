"""Closed forms for the dot product q·k of random vectors: its variance, law and kurtosis, sample errors."""

from __future__ import annotations

import math

import numpy as np
import torch
from numpy.typing import ArrayLike, NDArray

from attncore.theory._common import scalar as _scalar

__all__ = [
    "INITS",
    "dot_product_density",
    "dot_product_kurtosis",
    "dot_product_std",
    "dot_product_variance",
    "init_score_ratio",
    "init_weight_variance",
    "normal_density",
    "sample_std_error",
    "scaled_logit_std",
    "uniform_entropy",
]


def dot_product_variance(d: ArrayLike, var_q: float = 1.0, var_k: float = 1.0) -> NDArray[np.float64] | float:
    """``Var(q·k) = d · var_q · var_k`` for independent zero-mean q, k with d coordinates."""
    out = np.asarray(d, dtype=np.float64) * var_q * var_k
    return _scalar(out)


# Common initialisations of a projection weight (d_out, d_in), by their names in init_weight_variance.
INITS: tuple[str, ...] = ("xavier", "torch_linear", "normal_0.02")


def init_weight_variance(init: str, d_in: int, d_out: int) -> float:
    """Variance of one weight entry of a (d_out, d_in) projection under a common initialisation.

    ``"xavier"`` (Glorot): 2 / (d_in + d_out), uniform or normal alike. ``"torch_linear"``: torch's
    default ``nn.Linear`` (``kaiming_uniform_(a=√5)``, U(−1/√d_in, 1/√d_in)): 1 / (3 d_in).
    ``"normal_0.02"``: GPT-2's N(0, 0.02²): 0.0004.
    """
    if init == "xavier":
        return 2.0 / (d_in + d_out)
    if init == "torch_linear":
        return 1.0 / (3.0 * d_in)
    if init == "normal_0.02":
        return 0.02**2
    raise ValueError(f"unknown initialisation {init!r}; known: {', '.join(INITS)}.")


def init_score_ratio(weight_var: float, d_in: int, input_var: float = 1.0) -> float:
    """``Var(q·k) / E`` for q = W_q x, k = W_k x' at initialisation: ``(d_in · weight_var · input_var)²``.

    x, x' are different tokens with independent zero-mean entries of variance ``input_var`` (a
    LayerNorm's output at initialisation has 1), W_q, W_k independent with entries of variance
    ``weight_var``: each q and k entry then has variance d_in · weight_var · input_var, and
    Var(q·k) = E · Var(q_j) · Var(k_j) over a head's E coordinates.
    """
    return float((d_in * weight_var * input_var) ** 2)


def dot_product_std(d: ArrayLike, var_q: float = 1.0, var_k: float = 1.0) -> NDArray[np.float64] | float:
    """``std(q·k) = sqrt(d · var_q · var_k)``; d=64 with unit variances gives 8."""
    out = np.sqrt(np.asarray(dot_product_variance(d, var_q, var_k), dtype=np.float64))
    return _scalar(out)


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
    return _scalar(out)


def uniform_entropy(n: ArrayLike) -> NDArray[np.float64] | float:
    """Entropy of a uniform row over n keys: ``log n`` nats (the maximum)."""
    out = np.log(np.asarray(n, dtype=np.float64))
    return _scalar(out)






def normal_density(x: ArrayLike, var: float = 1.0) -> NDArray[np.float64] | float:
    """Density of N(0, var) at x."""
    x_arr = np.asarray(x, dtype=np.float64)
    return _scalar(np.exp(-0.5 * x_arr**2 / var) / math.sqrt(2.0 * math.pi * var))


def _log_bessel_k(twice_nu: int, x: NDArray[np.float64]) -> NDArray[np.float64]:
    """``log K_nu(x)`` for ``nu = twice_nu / 2 >= 0`` and x > 0, by upward recurrence.

    Starts from K_0, K_1 (integer orders, torch's exponentially scaled Bessel
    functions) or K_{1/2} (half-integer orders, elementary) and steps the ratio
    ``r_nu = K_{nu+1} / K_nu = 1 / r_{nu-1} + 2 nu / x`` upwards, which is stable for K.
    Working with logs keeps orders in the thousands free of overflow.
    """
    if twice_nu % 2:
        nu = 0.5
        log_k = 0.5 * np.log(np.pi / (2.0 * x)) - x
        ratio = 1.0 + 1.0 / x
    else:
        xt = torch.from_numpy(x)
        k0 = torch.special.scaled_modified_bessel_k0(xt).numpy()
        k1 = torch.special.scaled_modified_bessel_k1(xt).numpy()
        nu = 0.0
        log_k = np.log(k0) - x
        ratio = k1 / k0
    while nu < twice_nu / 2:
        log_k = log_k + np.log(ratio)
        nu += 1.0
        ratio = 1.0 / ratio + 2.0 * nu / x
    return log_k


def dot_product_density(
    x: ArrayLike, d: int, var_q: float = 1.0, var_k: float = 1.0
) -> NDArray[np.float64] | float:
    r"""Exact density of ``q·k`` for independent q ~ N(0, var_q I_d), k ~ N(0, var_k I_d).

    ``q·k`` is a sum of d products of two Gaussians; its characteristic function is
    :math:`(1 + s^2 t^2)^{-d/2}` with :math:`s = \sqrt{var_q var_k}`, the symmetric
    variance-gamma law

    .. math:: f(x) = \frac{|u|^{\nu} K_{\nu}(|u|)}{s\,\sqrt{\pi}\,\Gamma(d/2)\,2^{\nu}},
              \quad u = x/s,\ \nu = (d-1)/2.

    d = 1 gives the product-normal density K_0(|x|)/π (infinite at 0); as d grows
    it tends to N(0, d s^2), the central-limit picture the page draws next to it.
    """
    if int(d) < 1:
        raise ValueError("d must be at least 1.")
    d = int(d)
    s = math.sqrt(var_q * var_k)
    x_arr = np.asarray(x, dtype=np.float64)
    u = np.abs(x_arr) / s
    out = np.empty_like(u)
    zero = u == 0
    if zero.any():
        out[zero] = np.inf if d == 1 else math.exp(
            math.lgamma((d - 1) / 2) - math.lgamma(d / 2)) / (2.0 * math.sqrt(math.pi) * s)
    pos = ~zero
    if pos.any():
        nu = (d - 1) / 2
        up = u[pos]
        log_f = (nu * np.log(up) + _log_bessel_k(d - 1, up) - 0.5 * math.log(math.pi)
                 - math.lgamma(d / 2) - nu * math.log(2.0) - math.log(s))
        out[pos] = np.exp(log_f)
    return _scalar(out)


def dot_product_kurtosis(d: ArrayLike) -> NDArray[np.float64] | float:
    """Kurtosis ``E[x^4] / Var(x)^2`` of q·k: ``3 + 6/d`` (each product q_i k_i has kurtosis 9)."""
    return _scalar(3.0 + 6.0 / np.asarray(d, dtype=np.float64))


def sample_std_error(
    d: ArrayLike, n: int, var_q: float = 1.0, var_k: float = 1.0
) -> NDArray[np.float64] | float:
    r"""Standard error of the sample std of q·k from n samples (delta method).

    :math:`\mathrm{SE}(\hat\sigma) \approx \sigma \sqrt{(\kappa - 1)/n}\,/\,2` with
    kurtosis :math:`\kappa = 3 + 6/d`; tests derive their tolerances from it.
    """
    d_arr = np.asarray(d, dtype=np.float64)
    sigma = np.sqrt(d_arr * var_q * var_k)
    return _scalar(sigma * np.sqrt((2.0 + 6.0 / d_arr) / n) / 2.0)
