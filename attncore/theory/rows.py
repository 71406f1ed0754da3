"""Closed forms for a row of n iid Gaussian logits x_j ~ N(0, sigma2): large-n entropy, max weight
and output scale, where they hold, and the SSMax figure-1 margins. The exact expectations (by
quadrature) are in :mod:`attncore.row_theory`."""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike, NDArray

from attncore.theory._common import scalar as _scalar

__all__ = [
    "asymptote_valid_from",
    "entropy_asymptote",
    "entropy_corrected",
    "freezing_length",
    "fully_scaled_multiplier",
    "gaussian_max_moment",
    "margin_for_half_weight",
    "max_weight_asymptote",
    "output_std_flat",
    "output_std_lognormal",
    "output_std_onehot",
    "peak_weight",
    "scaled_chi2_mgf",
    "ssmax_margin_for_half_weight",
]


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
