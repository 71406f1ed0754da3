"""The quadrature of attncore.row_theory as it was before it was chunked (frozen copy, for tests).

It keeps every (u, z) cell in memory at once (O(sigma^3) cells); tests compare the chunked,
budgeted code against it at ordinary settings, where it is cheap.
"""

# ruff: noqa
from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike, NDArray

from attncore.errors import AttnInputError

F64 = NDArray[np.float64]
_LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)
_U_STEP = 0.2
_TAIL = 40.0  # neglect probabilities below e^-40
_erfc = np.frompyfunc(math.erfc, 1, 1)


def chi2_nodes(d: int, k: int = 6) -> tuple[F64, F64]:
    """Nodes x and weights w with ``E f(chi2_d / d) ~= sum w f(x)`` (Gauss-Laguerre, Golub-Welsch).

    ``chi2_d / d`` is Gamma(shape d/2, scale 2/d) with mean 1; k nodes integrate polynomials
    of degree ``2k - 1`` exactly.
    """
    if d < 1 or k < 1:
        raise AttnInputError("chi2_nodes needs d >= 1 and k >= 1.")
    alpha = d / 2.0 - 1.0
    i = np.arange(k, dtype=np.float64)
    diag = 2.0 * i + alpha + 1.0
    off = np.sqrt(i[1:] * (i[1:] + alpha))
    vals, vecs = np.linalg.eigh(np.diag(diag) + np.diag(off, 1) + np.diag(off, -1))
    w = vecs[0] ** 2
    return vals * 2.0 / d, w / w.sum()


_Z_STEP = 0.1  # z step for sigma <= 2; 0.2/sigma above (max weight to ~1e-5, the rest to ~1e-12)


def _grid_z(n_max: float, sigma: float) -> tuple[F64, float, F64]:
    """z grid covering every z with ``n_max * P(|Z| > z) > e^-40``; returns z, dz, log N(z) + log dz."""
    zmax = math.sqrt(2.0 * (math.log(max(n_max, 1.0)) + _TAIL))
    dz = min(_Z_STEP, 2.0 * _Z_STEP / max(sigma, 1e-9))
    m = int(math.ceil(zmax / dz))
    z = np.arange(-m, m + 1, dtype=np.float64) * dz
    return z, dz, -0.5 * z * z - _LOG_SQRT_2PI + math.log(dz)


def _upper_tail(z: F64) -> F64:
    """P(Z > z) for the standard normal, accurate in the far tail."""
    return np.asarray(_erfc(z / math.sqrt(2.0)), dtype=np.float64) * 0.5


def _cumulative(f: F64, dz: float) -> F64:
    """Cumulative integral along the last axis, third-order (local) rule, starting at 0."""
    inc = np.empty_like(f)
    inc[..., 0] = 0.0
    inc[..., 1] = dz / 12.0 * (5.0 * f[..., 0] + 8.0 * f[..., 1] - f[..., 2])
    inc[..., 2:] = dz / 12.0 * (-f[..., :-2] + 8.0 * f[..., 1:-1] + 5.0 * f[..., 2:])
    return np.cumsum(inc, axis=-1)


def _log1m(a: F64) -> F64:
    """log(1 - a) for a in [0, 1], -inf at 1."""
    with np.errstate(divide="ignore"):
        return np.log1p(-np.minimum(a, 1.0))


def _softmax_family(ns: F64, sigma: float, sink: float, want_max: bool) -> dict[str, F64]:
    """Exact E[H], E[max p], E[sum p^2], E[row sum] for fixed sigma and several n."""
    out = {k: np.empty(len(ns)) for k in ("entropy", "max_weight", "sum_sq", "row_sum")}
    if sigma < 1e-9:  # all logits equal: uniform row
        c = sink
        out["entropy"] = np.log(ns)
        out["max_weight"] = 1.0 / (ns + c)
        out["sum_sq"] = ns / (ns + c) ** 2
        out["row_sum"] = ns / (ns + c)
        return out
    z, dz, logwz = _grid_z(float(ns.max()), sigma)
    x = sigma * z
    log_mean_w = min(0.5 * sigma * sigma, float(x[-1]))
    n_min = float(ns.min())
    # the smallest plausible row maximum bounds log W from below
    upper = _upper_tail(z)
    with np.errstate(divide="ignore"):
        log_cdf = np.log1p(-upper)
    zq = z[np.argmax(n_min * log_cdf > -_TAIL)] if n_min > 1 else z[0]
    # t = e^-u from well above 1 (e^{-t} ~ 0 needs u < -4.5) down to t W << 1
    u = np.arange(min(sigma * zq - 8.0, -4.6), math.log(ns.max()) + log_mean_w + 36.0, _U_STEP)
    y = np.minimum(x[None, :] - u[:, None], 700.0)  # (U, Z): log(t w)
    ey = np.exp(y)
    nz = np.exp(logwz)[None, :]
    a_term = nz * -np.expm1(-ey)  # N(z)(1 - e^{-tw}) dz
    A = a_term.sum(axis=1)  # 1 - phi(t)
    log_phi = _log1m(A)  # (U,)
    ker = np.exp(y - ey)  # t w e^{-tw}
    B = (nz * x[None, :] * ker).sum(axis=1)  # E[t w log w e^{-tw}] dz-weighted
    C = (nz * np.exp(np.minimum(2 * y, 1400.0) - ey)).sum(axis=1)  # E[(t w)^2 e^{-tw}]
    D = (nz * ker).sum(axis=1)  # E[t w e^{-tw}]
    t = np.exp(-u)
    sink_f = np.exp(-sink * t) if sink > 0 else np.ones_like(u)
    e_minus_t = np.exp(-t)
    if want_max:
        # rows of u that can matter for the max (psi <= phi): the cumulative integral only there
        reach = (ns.min() - 1.0) * log_phi if ns.min() > 1 else np.zeros_like(u)
        live = np.flatnonzero((reach > -45.0) & (u < x[-1] + 45.0))
        first = int(live[0]) if live.size else 0
        acum = _cumulative(a_term[first:] / dz, dz)  # (U - first, Z): int_{-inf}^{z} N (1 - e^{-tw})
    for i, n in enumerate(ns):
        pw = np.exp((n - 1.0) * log_phi) if n > 1 else np.ones_like(u)
        eln_w = _U_STEP * np.sum(e_minus_t - pw * np.exp(log_phi))
        ewlw = n * _U_STEP * np.sum(B * pw)
        out["entropy"][i] = max(eln_w - ewlw, 0.0)
        out["sum_sq"][i] = n * _U_STEP * np.sum(C * pw * sink_f)
        out["row_sum"][i] = n * _U_STEP * np.sum(D * pw * sink_f) if sink > 0 else 1.0
        if want_max:
            if n == 1:
                out["max_weight"][i] = out["row_sum"][i]
                continue
            # psi <= phi, so rows with phi^(n-1) < e^-45 add nothing; nor do z with a tiny max density
            lo = int(np.argmax(n * log_cdf > -_TAIL))
            rows = np.flatnonzero(((n - 1.0) * log_phi > -45.0) & (u < x[-1] + 45.0))
            rows = rows[rows >= first]
            sl = slice(lo, None)
            log_psi = _log1m(upper[None, sl] + acum[rows - first, sl])  # (Ur, Zw)
            integrand = nz[:, sl] * ker[rows, sl] * np.exp((n - 1.0) * log_psi)
            out["max_weight"][i] = n * _U_STEP * np.sum(integrand.sum(axis=1) * sink_f[rows])
    if not want_max:
        out["max_weight"][:] = np.nan
    return out


def _sigmoid_one(n: float, sigma: float) -> dict[str, float]:
    """Exact expectations for a sigmoid row (bias -log n), one n."""
    z, dz, logwz = _grid_z(n, max(sigma, 1e-3))
    v = sigma * z - math.log(n)
    logw = -np.logaddexp(0.0, -v)  # log sigmoid(v)
    w = np.exp(logw)
    nz = np.exp(logwz)
    upper = _upper_tail(z)
    with np.errstate(divide="ignore"):
        log_cdf = np.log1p(-upper)
    # max of n iid: density n N(z) Phi(z)^(n-1)
    max_w = float(np.sum(nz * n * np.exp((n - 1.0) * log_cdf) * w))
    res = {"max_weight": max_w, "sum_sq": float(n * np.sum(nz * w * w)), "row_sum": float(n * np.sum(nz * w))}
    if n == 1:
        res["entropy"] = 0.0
        return res
    zq = z[np.argmax(n * log_cdf > -_TAIL)]
    lw_lo = float(-np.logaddexp(0.0, -(sigma * zq - math.log(n))))
    u = np.arange(min(lw_lo - 8.0, -4.6), math.log(n) + float(logw[-1]) + 36.0, _U_STEP)
    y = np.minimum(logw[None, :] - u[:, None], 700.0)
    ey = np.exp(y)
    A = (nz[None, :] * -np.expm1(-ey)).sum(axis=1)
    log_phi = _log1m(A)
    B = (nz[None, :] * logw[None, :] * np.exp(y - ey)).sum(axis=1)
    pw = np.exp((n - 1.0) * log_phi)
    t = np.exp(-u)
    eln_w = _U_STEP * np.sum(np.exp(-t) - pw * np.exp(log_phi))
    res["entropy"] = max(float(eln_w - n * _U_STEP * np.sum(B * pw)), 0.0)
    return res


def gaussian_row_expectations(
    n: ArrayLike, sigma2: float, *, normalizer: str = "softmax", want_max: bool = True
) -> dict[str, F64]:
    """Exact ``E[H]``, ``E[max p]``, ``E[sum p^2]``, ``E[sum p]`` for n iid N(0, sigma2) logits.

    Args:
        n: lengths (array of integers >= 1). sigma2: the logits' variance (fixed).
        normalizer: ``softmax``, ``softmax1`` (sink logit 0) or ``sigmoid`` (bias ``-log n``).
        want_max: skip the (costlier) max-weight integral when False (NaN returned).

    Returns:
        dict of arrays shaped like ``n``: ``entropy`` (nats, of the row renormalised to
        sum 1), ``max_weight``, ``sum_sq`` and ``row_sum`` (of the raw weights).
    """
    ns = np.atleast_1d(np.asarray(n, dtype=np.float64))
    if np.any(ns < 1) or not np.all(np.isfinite(ns)):
        raise AttnInputError("lengths must be at least 1.")
    if not (math.isfinite(sigma2) and sigma2 >= 0):
        raise AttnInputError(f"sigma2 must be a finite non-negative number; got {sigma2}.")
    sigma = math.sqrt(sigma2)
    if normalizer in ("softmax", "softmax1"):
        return _softmax_family(ns, sigma, 1.0 if normalizer == "softmax1" else 0.0, want_max)
    if normalizer == "sigmoid":
        rows = [_sigmoid_one(float(v), sigma) for v in ns]
        return {k: np.array([r[k] for r in rows]) for k in ("entropy", "max_weight", "sum_sq", "row_sum")}
    raise AttnInputError(f"unknown normaliser {normalizer!r}.")


