"""Closed forms drawn next to the measurements.

Every function takes plain numbers (or numpy arrays) and returns the same kind,
so the UI can evaluate a curve on a grid without touching torch.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import lru_cache

import numpy as np
import torch
from numpy.typing import ArrayLike, NDArray

from attncore.dtypes import DTYPES

__all__ = [
    "asymptote_valid_from",
    "dot_product_density",
    "dot_product_kurtosis",
    "dot_product_std",
    "dot_product_variance",
    "entropy_asymptote",
    "entropy_corrected",
    "exp_overflow_logit",
    "expected_max_normal",
    "freezing_length",
    "fully_scaled_multiplier",
    "gate_bias_for_mean",
    "gate_mean_theory",
    "gate_rms_theory",
    "gaussian_expectation",
    "gaussian_max_moment",
    "inverse_chi_mean",
    "jacobian_norm_large_scale",
    "jacobian_norm_small_scale",
    "margin_for_half_weight",
    "max_weight_asymptote",
    "max_weight_large_scale",
    "max_weight_small_scale",
    "normal_density",
    "output_std_flat",
    "output_std_lognormal",
    "output_std_onehot",
    "peak_weight",
    "real_mass_theory",
    "sample_std_error",
    "saturation_jacobian_norm",
    "saturation_other_weight",
    "saturation_threshold",
    "saturation_top_weight",
    "scaled_chi2_mgf",
    "scaled_logit_std",
    "sigmoid_mass_theory",
    "sigmoid_output_rms_theory",
    "sink_weight_theory",
    "softmax_output_rms_theory",
    "ssmax_margin_for_half_weight",
    "top2_gap_density_at_zero",
    "uniform_entropy",
    "uniform_row_jacobian_norm",
    "uniform_share",
    "unscaled_jacobian_norm_large_d",
    "unscaled_max_weight_large_d",
]


def _scalar(a: ArrayLike) -> NDArray[np.float64] | float:
    """A 0-d result as a Python float, an array as a float64 array (every function here ends so)."""
    a = np.asarray(a, dtype=np.float64)
    return float(a) if a.ndim == 0 else a


# --------------------------------------------------------------------------- dot products and scale

def dot_product_variance(d: ArrayLike, var_q: float = 1.0, var_k: float = 1.0) -> NDArray[np.float64] | float:
    """``Var(q·k) = d · var_q · var_k`` for independent zero-mean q, k with d coordinates."""
    out = np.asarray(d, dtype=np.float64) * var_q * var_k
    return _scalar(out)


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


# --------------------------------------------------------------------------- the distribution of q·k




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


_GRID = torch.linspace(-12.0, 12.0, 48001, dtype=torch.float64)


@lru_cache(maxsize=256)
def top2_gap_density_at_zero(n: int) -> float:
    r"""Density at 0 of the gap between the two largest of n iid N(0, 1) draws.

    :math:`f_G(0) = n(n-1)\int \varphi(x)^2\,\Phi(x)^{n-2}\,dx` (1-D quadrature);
    ``1/sqrt(pi)`` for n = 2. It sets how often a saturated row still has a near tie.
    """
    if n < 2:
        raise ValueError("a gap needs n >= 2.")
    phi = torch.exp(-0.5 * _GRID**2) / math.sqrt(2.0 * math.pi)
    integrand = phi**2 * torch.special.ndtr(_GRID) ** (n - 2)
    return float(n * (n - 1) * torch.trapezoid(integrand, _GRID))


@lru_cache(maxsize=256)
def expected_max_normal(n: int) -> float:
    r"""``E[max of n iid N(0, 1)]`` = :math:`n \int x\,\varphi(x)\,\Phi(x)^{n-1}\,dx` (0 for n = 1)."""
    phi = torch.exp(-0.5 * _GRID**2) / math.sqrt(2.0 * math.pi)
    return float(n * torch.trapezoid(_GRID * phi * torch.special.ndtr(_GRID) ** (n - 1), _GRID))


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


# --------------------------------------------------------------------------- sinks and gates (mean field)


# Mean-field closed forms for one query over n real keys whose scaled logits are
# content + spread * Z (Z standard normal), optionally with a sink key of logit
# `strength` and an extra denominator logit b (softmax1: b = 0). The sum of the
# n exponentials is replaced by its expectation n * exp(content + spread^2 / 2)
# (a lognormal mean), which is exact as n grows.

_HERMITE_ORDER = 80


def gaussian_expectation(f: Callable[[NDArray[np.float64]], NDArray[np.float64]], mean: ArrayLike = 0.0,
                         std: ArrayLike = 1.0) -> NDArray[np.float64] | float:
    """``E[f(mean + std * Z)]`` for standard normal Z, by Gauss-Hermite quadrature (80 nodes).

    ``f`` maps a numpy array elementwise; ``mean`` and ``std`` broadcast.
    """
    nodes, weights = np.polynomial.hermite_e.hermegauss(_HERMITE_ORDER)
    m = np.asarray(mean, dtype=np.float64)[..., None]
    s = np.asarray(std, dtype=np.float64)[..., None]
    out = (f(m + s * nodes) * weights).sum(axis=-1) / np.sqrt(2 * np.pi)
    return _scalar(out)


def _log_real_sum(n: ArrayLike, content: ArrayLike, spread: ArrayLike) -> NDArray[np.float64]:
    """``log(n * exp(content + spread^2 / 2))``: the log of the expected sum of n exponentials."""
    return (np.log(np.asarray(n, dtype=np.float64)) + np.asarray(content, dtype=np.float64)
            + 0.5 * np.asarray(spread, dtype=np.float64) ** 2)


def _log_others(strength: ArrayLike | None, extra_logit: ArrayLike | None) -> NDArray[np.float64]:
    """log of the denominator's other terms: e^strength (a sink key) and e^b (an extra logit)."""
    out = np.asarray(-np.inf)
    if strength is not None:
        out = np.logaddexp(out, np.asarray(strength, dtype=np.float64))
    if extra_logit is not None:
        out = np.logaddexp(out, np.asarray(extra_logit, dtype=np.float64))
    return out


def sink_weight_theory(strength: ArrayLike, n: ArrayLike, content: ArrayLike = 0.0, spread: ArrayLike = 1.0,
                       extra_logit: ArrayLike | None = None) -> NDArray[np.float64] | float:
    """Softmax weight on a sink key of logit ``strength`` against n real keys (mean field).

    ``e^s / (e^s + n e^{c + σ²/2} [+ e^b])``: a logistic curve in s centred at
    ``c + log n + σ²/2`` (without b), the strength at which the sink takes half the weight.
    """
    rest = np.logaddexp(_log_real_sum(n, content, spread), _log_others(None, extra_logit))
    return _scalar(1.0 / (1.0 + np.exp(rest - np.asarray(strength, dtype=np.float64))))


def real_mass_theory(n: ArrayLike, content: ArrayLike = 0.0, spread: ArrayLike = 1.0,
                     strength: ArrayLike | None = None,
                     extra_logit: ArrayLike | None = None) -> NDArray[np.float64] | float:
    """Total softmax-family weight on the n real keys (mean field).

    ``R / (R + e^s + e^b)`` with ``R = n e^{c + σ²/2}``; 1 for plain softmax without a
    sink, ``R / (1 + R)`` for softmax1, ``R / (e^b + R)`` for a learned sink logit b.
    """
    log_real = _log_real_sum(n, content, spread)
    return _scalar(1.0 / (1.0 + np.exp(_log_others(strength, extra_logit) - log_real)))


def softmax_output_rms_theory(n: ArrayLike, content: ArrayLike = 0.0, spread: ArrayLike = 1.0,
                              strength: ArrayLike | None = None, extra_logit: ArrayLike | None = None,
                              sink_value: float = 0.0) -> NDArray[np.float64] | float:
    """RMS of the output for unit Gaussian real values and a sink value of scale ν (mean field).

    ``sqrt(M² e^{σ²} / n + p² ν²)`` with M the real mass and p the sink weight:
    the real weights are lognormal, so ``sum_j w_j² ≈ M² e^{σ²} / n``.
    """
    M = np.asarray(real_mass_theory(n, content, spread, strength, extra_logit))
    p = np.zeros_like(M) if strength is None else np.asarray(
        sink_weight_theory(strength, n, content, spread, extra_logit))
    sig2 = np.asarray(spread, dtype=np.float64) ** 2
    out = np.sqrt(M**2 * np.exp(sig2) / np.asarray(n, dtype=np.float64) + (p * sink_value) ** 2)
    return _scalar(out)


def _sigmoid(x: NDArray[np.float64]) -> NDArray[np.float64]:
    return 0.5 * (1.0 + np.tanh(0.5 * x))


def sigmoid_mass_theory(n: ArrayLike, content: ArrayLike = 0.0, spread: ArrayLike = 1.0,
                        bias: ArrayLike | None = None) -> NDArray[np.float64] | float:
    """Row sum of sigmoid attention over n keys: ``n E[σ(c + σZ + b)]``, default ``b = -log n``."""
    n_arr = np.asarray(n, dtype=np.float64)
    b = -np.log(n_arr) if bias is None else np.asarray(bias, dtype=np.float64)
    return _scalar(n_arr * np.asarray(gaussian_expectation(_sigmoid, np.asarray(content) + b, spread)))


def sigmoid_output_rms_theory(n: ArrayLike, content: ArrayLike = 0.0, spread: ArrayLike = 1.0,
                              bias: ArrayLike | None = None) -> NDArray[np.float64] | float:
    """Output RMS of sigmoid attention with unit Gaussian values: ``sqrt(n E[σ(c + σZ + b)²])``."""
    n_arr = np.asarray(n, dtype=np.float64)
    b = -np.log(n_arr) if bias is None else np.asarray(bias, dtype=np.float64)
    e2 = gaussian_expectation(lambda x: _sigmoid(x) ** 2, np.asarray(content) + b, spread)
    return _scalar(np.sqrt(n_arr * np.asarray(e2)))


def gate_mean_theory(bias: ArrayLike) -> NDArray[np.float64] | float:
    """Mean of the output gate ``σ(b + Z)``, Z standard normal (unit-variance pre-activations)."""
    return gaussian_expectation(_sigmoid, bias, 1.0)


def gate_bias_for_mean(mean: float) -> float:
    """The bias b with ``E[σ(b + Z)] = mean`` (inverse of :func:`gate_mean_theory`, by bisection)."""
    if not 0.0 < mean < 1.0:
        raise ValueError(f"a mean gate lies in (0, 1); got {mean}.")
    lo, hi = -60.0, 60.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if float(gate_mean_theory(mid)) < mean else (lo, mid)
    return 0.5 * (lo + hi)


def gate_rms_theory(bias: ArrayLike) -> NDArray[np.float64] | float:
    """RMS of the output gate ``σ(b + Z)``: the factor it applies to the output RMS."""
    return _scalar(np.sqrt(np.asarray(gaussian_expectation(lambda x: _sigmoid(x) ** 2, bias, 1.0))))


def uniform_share(n_keys: ArrayLike) -> NDArray[np.float64] | float:
    """Weight one key gets under uniform attention over n keys: ``1/n``."""
    return _scalar(1.0 / np.asarray(n_keys, dtype=np.float64))


# --------------------------------------------------------------------------- a row of n Gaussian logits
# x_j ~ N(0, sigma2) iid. Exact expectations (by quadrature) live in attncore.row_theory;
# these are the closed forms.




def entropy_asymptote(n: ArrayLike, sigma2: ArrayLike) -> NDArray[np.float64] | float:
    r"""Large-n entropy of a softmax row with iid N(0, sigma2) logits: ``log n - sigma2/2`` nats.

    Law of large numbers on :math:`H = \log\sum_j e^{x_j} - \sum_j x_j e^{x_j}/\sum_j e^{x_j}`
    with :math:`E e^{x} = e^{\sigma^2/2}` and :math:`E x e^{x} = \sigma^2 e^{\sigma^2/2}`.
    It holds once n is well past ``sigma2 * e^sigma2`` (see :func:`entropy_corrected`); below
    ``e^{sigma2/2}`` (``sigma2 > 2 log n``) the row is frozen onto a few keys and H is O(1).
    The uniform limit (sigma2 = 0) is ``log n``.
    """
    return _scalar(np.log(np.asarray(n, dtype=np.float64)) - 0.5 * np.asarray(sigma2, dtype=np.float64))


def entropy_corrected(n: ArrayLike, sigma2: ArrayLike) -> NDArray[np.float64] | float:
    r"""The asymptote plus its 1/n correction (second-order delta method).

    With :math:`Y = \frac1n\sum e^{x_j}`, :math:`X = \frac1n\sum x_j e^{x_j}`:
    :math:`E\log Y \approx \sigma^2/2 - (e^{\sigma^2}-1)/(2n)` and
    :math:`E[X/Y] \approx \sigma^2 - \sigma^2 e^{\sigma^2}/n`, so

    .. math:: E[H] \approx \log n - \frac{\sigma^2}{2} + \frac{\sigma^2 e^{\sigma^2} - (e^{\sigma^2}-1)/2}{n}.

    The correction is small once ``n >> sigma2 * e^sigma2``; it vanishes with sigma2.
    """
    s2 = np.asarray(sigma2, dtype=np.float64)
    nn = np.asarray(n, dtype=np.float64)
    es = np.exp(s2)
    return _scalar(np.log(nn) - 0.5 * s2 + (s2 * es - 0.5 * (es - 1.0)) / nn)


def asymptote_valid_from(sigma2: ArrayLike) -> NDArray[np.float64] | float:
    """The length ``e^{sigma2}`` past which the large-n formulas apply (the usual rule of thumb).

    The 1/n corrections are ``sigma2 e^{sigma2}/n`` for the entropy and about
    ``2 e^{2 sigma2}/n`` (relative) for the output scale, so "well past" means a factor
    of a few to tens for sigma2 near 1, and more for larger sigma2.
    """
    return _scalar(np.exp(np.asarray(sigma2, dtype=np.float64)))


def freezing_length(sigma2: ArrayLike) -> NDArray[np.float64] | float:
    """``e^{sigma2/2}``: below it (``sigma2 > 2 log n``) a few keys carry the whole row.

    The random-energy-model transition: the sum of ``e^{x_j}`` stops being a law-of-large-
    numbers sum and is dominated by its largest terms, so the entropy stays O(1).
    """
    return _scalar(np.exp(0.5 * np.asarray(sigma2, dtype=np.float64)))


def output_std_lognormal(n: ArrayLike, sigma2: ArrayLike) -> NDArray[np.float64] | float:
    r"""Graphcore's log-normal rule for the attention output: ``sqrt(e^{sigma2} / n)``.

    For iid unit-variance values independent of the weights, :math:`\mathrm{std}(z) =
    \sqrt{E\sum_j p_j^2}` and :math:`\sum_j p_j^2 \approx n E e^{2x}/(n E e^x)^2 = e^{\sigma^2}/n`.
    Relative correction about ``-(2e^{2\sigma^2} - 3e^{\sigma^2} + 1)/n``.
    """
    nn = np.asarray(n, dtype=np.float64)
    return _scalar(np.sqrt(np.exp(np.asarray(sigma2, dtype=np.float64)) / nn))


def output_std_flat(n: ArrayLike) -> NDArray[np.float64] | float:
    """Output std of a uniform row (temperature -> infinity): ``1/sqrt(n)``."""
    return _scalar(1.0 / np.sqrt(np.asarray(n, dtype=np.float64)))


def output_std_onehot(n: ArrayLike) -> NDArray[np.float64] | float:
    """Output std of a one-hot row (temperature -> 0): 1 whatever n."""
    return _scalar(np.ones_like(np.asarray(n, dtype=np.float64)))


def fully_scaled_multiplier(n: ArrayLike) -> NDArray[np.float64] | float:
    """``sqrt(n / e)``: Graphcore's "fully scaled attention" output factor (unit std at sigma2 = 1)."""
    return _scalar(np.sqrt(np.asarray(n, dtype=np.float64) / np.e))


def scaled_chi2_mgf(mean_sigma2: ArrayLike, d: int, t: float = 1.0) -> NDArray[np.float64] | float:
    r"""``E[e^{t sigma2}]`` when ``sigma2 = mean * chi2_d / d`` (logit variance of a random query).

    :math:`(1 - 2 t\,\mathrm{mean}/d)^{-d/2}`, infinite once ``2 t mean >= d``; tends to
    ``e^{t mean}`` as d grows. For q ~ N(0, I_d) the logits ``q.k/sqrt(d)`` have variance
    ``|q|^2/d``, which is of this form with mean 1.
    """
    m = np.asarray(mean_sigma2, dtype=np.float64)
    a = 2.0 * t * m / d
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        out = np.where(a < 1.0, np.power(np.maximum(1.0 - a, 1e-300), -0.5 * d), np.inf)
    return _scalar(out)


def margin_for_half_weight(n: ArrayLike) -> NDArray[np.float64] | float:
    """Logit margin a key needs over n-1 keys at 0 to keep weight 1/2: ``log(n - 1)``.

    ``e^a / (e^a + n - 1) = 1/2`` gives ``a = log(n - 1)``: 6.9 at n = 1000, 13.8 at 10^6.
    """
    return _scalar(np.log(np.asarray(n, dtype=np.float64) - 1.0))


def ssmax_margin_for_half_weight(n: ArrayLike, s: float = 0.43) -> NDArray[np.float64] | float:
    """The same margin under SSMax (logits times ``s log n``): ``log(n-1) / (s log n)`` -> ``1/s``."""
    nn = np.asarray(n, dtype=np.float64)
    return _scalar(np.log(nn - 1.0) / (s * np.log(nn)))


def peak_weight(
    n: ArrayLike, peak: float = 3.0, rest: float = -2.0, s: float | None = None
) -> NDArray[np.float64] | float:
    r"""Weight of one key at logit ``peak`` among n-1 keys at ``rest`` (SSMax paper, figure 1).

    Softmax: :math:`1/(1 + (n-1)e^{-(\mathrm{peak}-\mathrm{rest})})` -- 0.600 at n = 100 and
    0.129 at n = 1000 for (3, -2). With ``s`` (SSMax) the gap is multiplied by ``s log n``:
    :math:`1/(1 + (n-1) n^{-s(\mathrm{peak}-\mathrm{rest})})`, which tends to 1 when
    ``s (peak - rest) > 1``.
    """
    nn = np.asarray(n, dtype=np.float64)
    gap = (peak - rest) * (1.0 if s is None else s * np.log(nn))
    with np.errstate(divide="ignore"):
        return _scalar(1.0 / (1.0 + np.exp(np.log(nn - 1.0) - gap)))


def gaussian_max_moment(n: ArrayLike, sigma: ArrayLike) -> NDArray[np.float64] | float:
    r"""Gumbel approximation of ``E[e^{sigma z_max}]`` for the max of n iid N(0, 1).

    :math:`z_{max} \approx b_n + G/a_n` with :math:`a_n = \sqrt{2\log n}`,
    :math:`b_n = a_n - (\log\log n + \log 4\pi)/(2a_n)` and G standard Gumbel, so
    :math:`E e^{\sigma z_{max}} \approx e^{\sigma b_n}\,\Gamma(1 - \sigma/a_n)` for
    ``sigma < a_n`` (NaN otherwise, and for n < 3).
    """
    nn = np.asarray(n, dtype=np.float64)
    sg = np.broadcast_to(np.asarray(sigma, dtype=np.float64), nn.shape)
    with np.errstate(invalid="ignore", divide="ignore"):
        a = np.sqrt(2.0 * np.log(nn))
        b = a - (np.log(np.log(nn)) + np.log(4.0 * np.pi)) / (2.0 * a)
        arg = 1.0 - sg / a
        ok = (nn >= 3) & (arg > 0)
        flat = zip(np.ravel(arg), np.ravel(ok), strict=True)
        lg = np.array([math.lgamma(v) if o else np.nan for v, o in flat])
        out = np.where(ok, np.exp(sg * b + lg.reshape(nn.shape)), np.nan)
    return _scalar(out)


def max_weight_asymptote(n: ArrayLike, sigma2: ArrayLike) -> NDArray[np.float64] | float:
    """Large-n expected max weight of a softmax row: ``E[e^{sigma z_max}] / (n e^{sigma2/2})``.

    The denominator is the law-of-large-numbers value of ``sum_j e^{x_j}``; the numerator
    the Gumbel moment of :func:`gaussian_max_moment`. Valid where the entropy asymptote is.
    """
    nn = np.asarray(n, dtype=np.float64)
    s2 = np.broadcast_to(np.asarray(sigma2, dtype=np.float64), nn.shape)
    num = np.asarray(gaussian_max_moment(nn, np.sqrt(s2)))
    return _scalar(num / (nn * np.exp(0.5 * s2)))
