"""Mean-field closed forms for attention sinks and the fixes (softmax1, a sink logit, sigmoid, a gate).

One query over n real keys whose scaled logits are content + spread * Z (Z standard normal),
optionally with a sink key of logit ``strength`` and an extra denominator logit b (softmax1:
b = 0). The sum of the n exponentials is replaced by its expectation n * exp(content +
spread^2 / 2) (a lognormal mean), which is exact as n grows.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import lru_cache

import numpy as np
from numpy.typing import ArrayLike, NDArray

from attncore.theory._common import scalar as _scalar

__all__ = [
    "gate_bias_for_mean",
    "gate_mean_theory",
    "gate_rms_theory",
    "gaussian_expectation",
    "real_mass_theory",
    "relu_mass_theory",
    "relu_output_rms_theory",
    "sigmoid_mass_theory",
    "sigmoid_output_rms_theory",
    "sink_weight_theory",
    "softmax_output_rms_theory",
    "uniform_share",
]


_HERMITE_ORDER = 80


@lru_cache(maxsize=1)
def _hermite_nodes() -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Gauss-Hermite (probabilists') nodes and weights, computed once."""
    return np.polynomial.hermite_e.hermegauss(_HERMITE_ORDER)


def gaussian_expectation(f: Callable[[NDArray[np.float64]], NDArray[np.float64]], mean: ArrayLike = 0.0,
                         std: ArrayLike = 1.0) -> NDArray[np.float64] | float:
    """``E[f(mean + std * Z)]`` for standard normal Z, by Gauss-Hermite quadrature (80 nodes).

    ``f`` maps a numpy array elementwise; ``mean`` and ``std`` broadcast.
    """
    nodes, weights = _hermite_nodes()
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


def _relu_moments(content: ArrayLike, spread: ArrayLike) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """``E[max(X, 0)]`` and ``E[max(X, 0)²]`` for X ~ N(c, σ²), in closed form:
    ``c Φ(c/σ) + σ φ(c/σ)`` and ``(c² + σ²) Φ(c/σ) + c σ φ(c/σ)`` (σ = 0: max(c, 0) and its square)."""
    c, sd = np.broadcast_arrays(np.asarray(content, dtype=np.float64), np.asarray(spread, dtype=np.float64))
    safe = np.where(sd > 0, sd, 1.0)
    z = c / safe
    cdf = 0.5 * np.vectorize(math.erfc, otypes=[np.float64])(-z / math.sqrt(2.0))
    pdf = np.exp(-0.5 * z**2) / math.sqrt(2.0 * math.pi)
    m1 = np.where(sd > 0, c * cdf + sd * pdf, np.maximum(c, 0.0))
    m2 = np.where(sd > 0, (c**2 + sd**2) * cdf + c * sd * pdf, np.maximum(c, 0.0) ** 2)
    return m1, m2


def relu_mass_theory(n: ArrayLike, content: ArrayLike = 0.0, spread: ArrayLike = 1.0,
                     n_keys: ArrayLike | None = None) -> NDArray[np.float64] | float:
    """Weight ReLU attention (Guo et al. 2024: ``max(x, 0) / n_keys``) spends on n real keys:
    ``(n / n_keys) E[max(c + σZ, 0)]`` (:func:`_relu_moments`); ``n_keys`` defaults to n (no other
    key in the row)."""
    n_arr = np.asarray(n, dtype=np.float64)
    keys = n_arr if n_keys is None else np.asarray(n_keys, dtype=np.float64)
    return _scalar(n_arr / keys * _relu_moments(content, spread)[0])


def relu_output_rms_theory(n: ArrayLike, content: ArrayLike = 0.0, spread: ArrayLike = 1.0,
                           n_keys: ArrayLike | None = None) -> NDArray[np.float64] | float:
    """Output RMS of ReLU attention over n real keys with unit Gaussian values:
    ``sqrt(n E[max(c + σZ, 0)²]) / n_keys``."""
    n_arr = np.asarray(n, dtype=np.float64)
    keys = n_arr if n_keys is None else np.asarray(n_keys, dtype=np.float64)
    return _scalar(np.sqrt(n_arr * _relu_moments(content, spread)[1]) / keys)


def gate_mean_theory(bias: ArrayLike) -> NDArray[np.float64] | float:
    """Mean of the output gate ``σ(b + Z)``, Z standard normal (unit-variance pre-activations)."""
    return gaussian_expectation(_sigmoid, bias, 1.0)


def gate_bias_for_mean(mean: float) -> float:
    """The bias b with ``E[σ(b + Z)] = mean`` (inverse of :func:`gate_mean_theory`, by bisection)."""
    if not 0.0 < mean < 1.0:
        raise ValueError(f"a mean gate lies in (0, 1); got {mean}.")
    lo, hi = -60.0, 60.0
    for _ in range(64):  # 120 / 2^64: far below float64 resolution
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if float(gate_mean_theory(mid)) < mean else (lo, mid)
    return 0.5 * (lo + hi)


def gate_rms_theory(bias: ArrayLike) -> NDArray[np.float64] | float:
    """RMS of the output gate ``σ(b + Z)``: the factor it applies to the output RMS."""
    return _scalar(np.sqrt(np.asarray(gaussian_expectation(lambda x: _sigmoid(x) ** 2, bias, 1.0))))


def uniform_share(n_keys: ArrayLike) -> NDArray[np.float64] | float:
    """Weight one key gets under uniform attention over n keys: ``1/n``."""
    return _scalar(1.0 / np.asarray(n_keys, dtype=np.float64))
