r"""Exact expected statistics of a row of n iid Gaussian logits, by quadrature (numpy only).

For logits :math:`x_j = \sigma z_j`, :math:`z_j \sim N(0,1)` iid, :math:`j = 1..n`, and
unnormalised weights :math:`w_j = e^{x_j}` (softmax family, denominator
:math:`D = c + W`, :math:`W = \sum_j w_j`, sink :math:`c = e^{b}`: 0 for softmax, 1 for
softmax1) or :math:`w_j = \sigma(x_j - \log n)` (sigmoid), every expectation the page draws
reduces to one- and two-dimensional integrals through :math:`1/D^k = \frac{1}{\Gamma(k)}
\int_0^\infty t^{k-1} e^{-tD}\,dt`, :math:`E\log W = \int_0^\infty (e^{-t} - E e^{-tW})\,dt/t`
(Frullani) and independence, :math:`E e^{-tW} = \varphi(t)^n` with
:math:`\varphi(t) = E e^{-t w(x)}`:

* :math:`E[H] = E\log W - n\int_0^\infty E[w\log w\,e^{-tw}]\,\varphi^{n-1}\,dt` (renormalised row);
* :math:`E\sum p^2 = n\int_0^\infty t\,e^{-tc} E[w^2 e^{-tw}]\,\varphi^{n-1}\,dt`;
* :math:`E\sum p = n\int_0^\infty e^{-tc} E[w e^{-tw}]\,\varphi^{n-1}\,dt`;
* :math:`E\max p = n\int_0^\infty e^{-tc} E[w\,e^{-tw}\,\psi(t, x)^{n-1}]\,dt`, with
  :math:`\psi(t, x) = E[e^{-tw(X)}\,1\{X < x\}]` (the others all below the maximum).

With :math:`t = e^{-u}` the integrands are smooth in u and z, so the trapezoid rule on
uniform grids converges exponentially; only :math:`\psi` needs a cumulative integral,
done with a third-order rule. Accuracy is better than 1e-6 relative for sigma up to ~30
and n up to 2**24 (tested against closed forms, limits and Monte Carlo).

For sigmoid the raw weights do not compete, so max weight, ``sum p^2`` and row sum are
one-dimensional integrals; only the entropy needs the t-integral.

Averaging over the query: with ``q ~ N(0, I_d)`` the logit variance of a row is
``sigma^2 = f^2 |q|^2`` with ``|q|^2 ~ chi2_d``; :func:`chi2_nodes` gives Gauss nodes for it.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike, NDArray

from attncore.budget import check_limit
from attncore.errors import AttnInputError, Cancelled
from attncore.scale_rules import base_scale, check_scale_rule, logit_multiplier
from attncore.theory import (
    asymptote_valid_from,
    entropy_asymptote,
    entropy_corrected,
    freezing_length,
    gaussian_max_moment,
)

__all__ = ["CHUNK_CELLS", "MAX_THEORY_CELLS", "TheoryCancelled", "check_sweep_theory", "chi2_nodes",
           "gaussian_row_expectations", "quadrature_cells", "sweep_theory", "sweep_theory_given_queries"]

Cancel = Callable[[], bool]
# (u, z) cells evaluated at once: ~6 float64 arrays of this many cells, ~13 MB in all
CHUNK_CELLS = 1 << 18
# (u, z) cells of one theory request (all its quadratures; bounded by quadrature_cells):
# about 25 s on one CPU core at ~2.4e7 cells/s. Logit spreads up to sigma ~ 150 fit.
MAX_THEORY_CELLS = 1 << 29


class TheoryCancelled(Cancelled):
    """The ``cancel`` callback asked the quadrature to stop between chunks."""

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


def _chunks(n_rows: int, n_cols: int, cancel: Cancel | None) -> Iterator[slice]:
    """Row slices of at most :data:`CHUNK_CELLS` cells each; ``cancel`` is asked before each."""
    step = max(1, CHUNK_CELLS // max(1, n_cols))
    for r0 in range(0, n_rows, step):
        if cancel is not None and cancel():
            raise TheoryCancelled("the theory computation was stopped.")
        yield slice(r0, min(n_rows, r0 + step))


def quadrature_cells(n: ArrayLike, sigma2: float, *, normalizer: str = "softmax",
                     want_max: bool = True) -> float:
    """An upper bound on the (u, z) cells :func:`gaussian_row_expectations` evaluates (closed form).

    Nothing is allocated: the grids' ends are bounded from their formulas (z within
    ``±zmax``, steps ``min(0.1, 0.2/sigma)`` in z and 0.2 in u), so callers can budget a whole
    theory curve before computing any of it.
    """
    ns = np.atleast_1d(np.asarray(n, dtype=np.float64))
    if ns.size == 0 or not math.isfinite(sigma2) or sigma2 < 1e-18:
        return 0.0
    sigma = math.sqrt(sigma2)

    def grid(n_max: float, sig: float) -> tuple[float, float]:
        zmax = math.sqrt(2.0 * (math.log(max(n_max, 1.0)) + _TAIL))
        dz = min(_Z_STEP, 2.0 * _Z_STEP / max(sig, 1e-9))
        return zmax, 2.0 * math.ceil(zmax / dz) + 1.0

    if normalizer == "sigmoid":
        total = 0.0
        for v in ns:
            zmax, z_size = grid(float(v), max(sigma, 1e-3))
            span = 2.0 * math.log(max(float(v), 1.0)) + sigma * zmax + 45.0
            total += (span / _U_STEP + 2.0) * z_size if v > 1 else 0.0
        return total
    n_max = float(ns.max())
    zmax, z_size = grid(n_max, sigma)
    span = sigma * zmax + 8.0 + math.log(n_max) + min(0.5 * sigma2, sigma * zmax) + 36.0
    return (span / _U_STEP + 2.0) * z_size * (2.0 if want_max else 1.0)


def _check_cells(cells: float) -> None:
    """Refuse quadrature work beyond :data:`MAX_THEORY_CELLS` (before any grid is built)."""
    check_limit(cells, MAX_THEORY_CELLS, "the quadrature for this logit spread (grid cells evaluated)",
                "(about half a minute on one CPU core)",
                "Lower d, raise the temperature, or use a scale rule that keeps the logits' spread "
                "moderate (the row is one-hot long before such spreads).")


def _softmax_family(ns: F64, sigma: float, sink: float, want_max: bool,
                    cancel: Cancel | None = None) -> dict[str, F64]:
    """Exact E[H], E[max p], E[sum p^2], E[row sum] for fixed sigma and several n.

    The (u, z) grid has O(sigma^3) cells (u spans ~sigma^2/2 in steps of 0.2, z needs steps
    of 0.2/sigma); it is evaluated in row chunks of :data:`CHUNK_CELLS` cells, so memory stays
    O(CHUNK_CELLS + U + Z) whatever sigma is, and the total work is budgeted beforehand.
    """
    out = {k: np.empty(len(ns)) for k in ("entropy", "max_weight", "sum_sq", "row_sum")}
    if sigma < 1e-9:  # all logits equal: uniform row
        c = sink
        out["entropy"] = np.log(ns)
        out["max_weight"] = 1.0 / (ns + c)
        out["sum_sq"] = ns / (ns + c) / (ns + c)  # no overflow at huge n
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
    nz1 = np.exp(logwz)
    nz = nz1[None, :]
    A, B, C, D = (np.empty(u.size) for _ in range(4))
    for r in _chunks(u.size, z.size, cancel):
        y = np.minimum(x[None, :] - u[r, None], 700.0)  # (rows, Z): log(t w)
        ey = np.exp(y)
        A[r] = (nz * -np.expm1(-ey)).sum(axis=1)  # 1 - phi(t)
        ker = np.exp(y - ey)  # t w e^{-tw}
        B[r] = (nz * x[None, :] * ker).sum(axis=1)  # E[t w log w e^{-tw}] dz-weighted
        C[r] = (nz * np.exp(np.minimum(2 * y, 1400.0) - ey)).sum(axis=1)  # E[(t w)^2 e^{-tw}]
        D[r] = (nz * ker).sum(axis=1)  # E[t w e^{-tw}]
    log_phi = _log1m(A)  # (U,)
    t = np.exp(-u)
    sink_f = np.exp(-sink * t) if sink > 0 else np.ones_like(u)
    e_minus_t = np.exp(-t)
    for i, n in enumerate(ns):
        pw = np.exp((n - 1.0) * log_phi) if n > 1 else np.ones_like(u)
        eln_w = _U_STEP * np.sum(e_minus_t - pw * np.exp(log_phi))
        ewlw = n * _U_STEP * np.sum(B * pw)
        out["entropy"][i] = max(eln_w - ewlw, 0.0)
        out["sum_sq"][i] = n * _U_STEP * np.sum(C * pw * sink_f)
        out["row_sum"][i] = n * _U_STEP * np.sum(D * pw * sink_f) if sink > 0 else 1.0
    if not want_max:
        out["max_weight"][:] = np.nan
        return out
    _softmax_max(ns, out, x, z, upper, log_cdf, nz1, dz, u, log_phi, sink_f, cancel)
    return out


def _softmax_max(ns: F64, out: dict[str, F64], x: F64, z: F64, upper: F64, log_cdf: F64, nz: F64,
                 dz: float, u: F64, log_phi: F64, sink_f: F64, cancel: Cancel | None) -> None:
    """E[max p] for every n into ``out`` (the psi cumulative integral, chunked over u rows)."""
    # psi <= phi, so rows with phi^(n-1) < e^-45 add nothing; nor do z with a tiny max density
    near = u < x[-1] + 45.0
    sel = [np.flatnonzero(((n - 1.0) * log_phi > -45.0) & near) if n > 1 else np.empty(0, np.int64)
           for n in ns]
    los = [int(np.argmax(n * log_cdf > -_TAIL)) for n in ns]
    live = np.unique(np.concatenate(sel)) if len(sel) else np.empty(0, np.int64)
    member = np.zeros((len(ns), u.size), dtype=bool)  # member[i, row]: row is in sel[i]
    for i, rows_i in enumerate(sel):
        member[i, rows_i] = True
    row_int = np.zeros((len(ns), u.size))  # per n, per u row: the z-integral of the max integrand
    for r in _chunks(live.size, z.size, cancel):
        rows = live[r]
        y = np.minimum(x[None, :] - u[rows, None], 700.0)
        ey = np.exp(y)
        acum = _cumulative(nz[None, :] * -np.expm1(-ey) / dz, dz)  # int_{-inf}^{z} N (1 - e^{-tw})
        nz_ker = nz[None, :] * np.exp(y - ey)
        log_psi_all = _log1m(upper[None, :] + acum)  # the same for every n: computed once per chunk
        for i, n in enumerate(ns):
            if n == 1:
                continue
            mine = member[i, rows]
            if not mine.any():
                continue
            sl = slice(los[i], None)
            integrand = nz_ker[mine, sl] * np.exp((n - 1.0) * log_psi_all[mine, sl])
            row_int[i, rows[mine]] = integrand.sum(axis=1)
    for i, n in enumerate(ns):
        if n == 1:
            out["max_weight"][i] = out["row_sum"][i]
        else:
            rows = sel[i]
            out["max_weight"][i] = n * _U_STEP * np.sum(row_int[i, rows] * sink_f[rows])


def _sigmoid_one(n: float, sigma: float, cancel: Cancel | None = None) -> dict[str, float]:
    """Exact expectations for a sigmoid row (bias -log n), one n (the t-integral chunked over u)."""
    z, dz, logwz = _grid_z(n, max(sigma, 1e-3))
    v = sigma * z - math.log(n)
    logw = -np.logaddexp(0.0, -v)  # log sigmoid(v)
    w = np.exp(logw)
    nz = np.exp(logwz)
    upper = _upper_tail(z)
    with np.errstate(divide="ignore"):
        log_cdf = np.log1p(-upper)
    # max of n iid: density n N(z) Phi(z)^(n-1); for n = 1 the power is 1 (0 * log 0 would be NaN)
    power = np.exp((n - 1.0) * log_cdf) if n > 1 else 1.0
    max_w = float(np.sum(nz * n * power * w))
    res = {"max_weight": max_w, "sum_sq": float(n * np.sum(nz * w * w)), "row_sum": float(n * np.sum(nz * w))}
    if n == 1:
        res["entropy"] = 0.0
        return res
    zq = z[np.argmax(n * log_cdf > -_TAIL)]
    lw_lo = float(-np.logaddexp(0.0, -(sigma * zq - math.log(n))))
    u = np.arange(min(lw_lo - 8.0, -4.6), math.log(n) + float(logw[-1]) + 36.0, _U_STEP)
    A, B = np.empty(u.size), np.empty(u.size)
    for r in _chunks(u.size, z.size, cancel):
        y = np.minimum(logw[None, :] - u[r, None], 700.0)
        ey = np.exp(y)
        A[r] = (nz[None, :] * -np.expm1(-ey)).sum(axis=1)
        B[r] = (nz[None, :] * logw[None, :] * np.exp(y - ey)).sum(axis=1)
    log_phi = _log1m(A)
    pw = np.exp((n - 1.0) * log_phi)
    t = np.exp(-u)
    eln_w = _U_STEP * np.sum(np.exp(-t) - pw * np.exp(log_phi))
    res["entropy"] = max(float(eln_w - n * _U_STEP * np.sum(B * pw)), 0.0)
    return res


def gaussian_row_expectations(
    n: ArrayLike, sigma2: float, *, normalizer: str = "softmax", want_max: bool = True,
    cancel: Cancel | None = None,
) -> dict[str, F64]:
    """Exact ``E[H]``, ``E[max p]``, ``E[sum p^2]``, ``E[sum p]`` for n iid N(0, sigma2) logits.

    Args:
        n: lengths (array of integers >= 1). sigma2: the logits' variance (fixed).
        normalizer: ``softmax``, ``softmax1`` (sink logit 0) or ``sigmoid`` (bias ``-log n``).
        want_max: skip the (costlier) max-weight integral when False (NaN returned).
        cancel: asked between chunks of the grid; returning True stops with
            :class:`TheoryCancelled`.

    Returns:
        dict of arrays shaped like ``n``: ``entropy`` (nats, of the row renormalised to
        sum 1), ``max_weight``, ``sum_sq`` and ``row_sum`` (of the raw weights).

    Raises:
        AttnInputError: bad lengths or sigma2. ResourceLimitError: the grid for this sigma2
            would exceed :data:`MAX_THEORY_CELLS` (checked before any grid is built).
        TheoryCancelled: ``cancel()`` returned True.
    """
    ns = np.atleast_1d(np.asarray(n, dtype=np.float64))
    if np.any(ns < 1) or not np.all(np.isfinite(ns)):
        raise AttnInputError("lengths must be at least 1.")
    if not (math.isfinite(sigma2) and sigma2 >= 0):
        raise AttnInputError(f"sigma2 must be a finite non-negative number; got {sigma2}.")
    if normalizer not in ("softmax", "softmax1", "sigmoid"):
        raise AttnInputError(f"unknown normaliser {normalizer!r}.")
    _check_cells(quadrature_cells(ns, sigma2, normalizer=normalizer, want_max=want_max))
    sigma = math.sqrt(sigma2)
    if normalizer in ("softmax", "softmax1"):
        return _softmax_family(ns, sigma, 1.0 if normalizer == "softmax1" else 0.0, want_max, cancel)
    if normalizer == "sigmoid":
        rows = [_sigmoid_one(float(v), sigma, cancel) for v in ns]
        return {k: np.array([r[k] for r in rows]) for k in ("entropy", "max_weight", "sum_sq", "row_sum")}
    raise AttnInputError(f"unknown normaliser {normalizer!r}.")


def _nodes_for(d: int, s2_mean: float) -> int:
    """Gauss nodes for the chi2_d average of a curve whose mean logit variance is ``s2_mean``.

    Within 1e-5 relative of a 24-node rule (entropy, max weight, sum p^2; worst 8.3e-6 over
    d = 8..1024 and tau = 0.25..4 under 1/sqrt(d), tested): small d needs many nodes (chi2_d / d
    has mass near 0, where the row statistics are not smooth in sigma), and so does a wide
    spread of sigma^2, ``s = s2_mean * sqrt(2/d)``. A fixed 4 nodes at d >= 32 was off by up to
    1.3e-4 at tau = 0.25; 2-3 nodes suffice at large d.
    """
    s = s2_mean * math.sqrt(2.0 / d)
    if d < 16:
        return 16
    if d < 32:
        return 6 if s < 0.5 else 8 if s < 2.0 else 12
    if d < 64:
        return 4 if s < 0.5 else 6 if s < 1.5 else 8
    if d < 128:
        return 3 if s < 0.3 else 4 if s < 1.0 else 5
    if d < 256:
        return 3 if s < 0.3 else 4
    if d < 512:
        return 2 if s < 0.05 else 3 if s < 0.5 else 4
    return 2 if s < 0.05 else 3


def _logit_factors(lengths: Sequence[int] | ArrayLike, d: int, scale_rule: str, temperature: float,
                   ssmax_s: float) -> tuple[NDArray[np.int64], F64]:
    """Sorted distinct lengths and the factor on ``q.k`` at each (base scale x multiplier / temperature)."""
    check_scale_rule(scale_rule)
    if d < 1:
        raise AttnInputError("d must be at least 1.")
    if not (math.isfinite(temperature) and temperature > 0):
        raise AttnInputError("the temperature must be a positive number.")
    ns = np.unique(np.asarray(lengths, dtype=np.int64))
    if ns.size == 0 or ns[0] < 1:
        raise AttnInputError("lengths must be at least 1.")
    mult = np.atleast_1d(np.asarray(logit_multiplier(scale_rule, ns, ssmax_s), dtype=np.float64))
    return ns, base_scale(scale_rule, d) * mult / temperature


def _theory_plan(lengths: Sequence[int] | ArrayLike, d: int, scale_rule: str, temperature: float,
                 ssmax_s: float, nodes: int | None
                 ) -> tuple[NDArray[np.int64], F64, F64, F64, dict[float, list[int]]]:
    """Lengths, mean logit variance per length, chi2 nodes and weights, lengths grouped by variance."""
    ns, factor = _logit_factors(lengths, d, scale_rule, temperature, ssmax_s)
    f2d = factor**2 * d  # mean logit variance at each n
    xs, ws = chi2_nodes(d, nodes or _nodes_for(d, float(np.max(f2d))))  # the widest spread decides
    groups: dict[float, list[int]] = {}
    for i, v in enumerate(f2d):
        groups.setdefault(float(v), []).append(i)
    return ns, f2d, xs, ws, groups


def _plan_cells(ns: NDArray[np.int64], xs: F64, groups: dict[float, list[int]], normalizer: str,
                want_max: bool) -> float:
    return sum(quadrature_cells(ns[idx], s2_mean * x, normalizer=normalizer, want_max=want_max)
               for s2_mean, idx in groups.items() for x in xs)


def sweep_theory(
    lengths: Sequence[int] | ArrayLike,
    *,
    d: int = 64,
    scale_rule: str = "sqrt_d",
    temperature: float = 1.0,
    normalizer: str = "softmax",
    ssmax_s: float = 0.43,
    nodes: int | None = None,
    want_max: bool = True,
    cancel: Cancel | None = None,
) -> pd.DataFrame:
    """Theory for :func:`attncore.sweeps.entropy_vs_length` with the same arguments.

    The logits of a row are iid ``N(0, sigma2)`` with ``sigma2 = f(n)^2 |q|^2``, ``f`` the
    factor on ``q.k`` and ``|q|^2 ~ chi2_d``; expectations are averaged over ``|q|`` with
    Gauss nodes. Columns (one row per n):

    * exact expectations: ``entropy``, ``normalized_entropy``, ``max_weight``,
      ``effective_support`` (``exp E[H]``, what the engine reports as ``exp(mean H)``),
      ``output_std`` (``sqrt E sum p^2``), ``sum_sq``, ``row_sum``;
    * closed forms: ``entropy_asymptote`` (``log n - E sigma2 / 2``), ``entropy_corrected``
      (with its 1/n term), ``max_weight_asymptote``, ``effective_support_asymptote``,
      ``output_std_asymptote`` (Graphcore's ``sqrt(E e^{sigma2} / n)``; ``sqrt(E e^{2 sigma2})/sqrt n``
      for sigmoid's raw weights);
    * ``sigma2`` (mean logit variance), ``valid_from`` (``e^{sigma2}``) and ``frozen_below``
      (``e^{sigma2/2}``).

    ``cancel`` is asked between chunks of every quadrature (True stops with
    :class:`TheoryCancelled`); grids beyond :data:`MAX_THEORY_CELLS` raise ResourceLimitError.
    """
    ns, f2d, xs, ws, groups = _theory_plan(lengths, d, scale_rule, temperature, ssmax_s, nodes)
    _check_cells(_plan_cells(ns, xs, groups, normalizer, want_max))  # what check_sweep_theory checks
    keys = ("entropy", "max_weight", "sum_sq", "row_sum")
    acc = {k: np.zeros(ns.size) for k in keys}
    asym_max = np.zeros(ns.size)
    mgf = np.zeros(ns.size)
    for s2_mean, idx in groups.items():
        sub = ns[idx].astype(np.float64)
        for x, w in zip(xs, ws, strict=True):
            s2 = s2_mean * x
            res = gaussian_row_expectations(sub, s2, normalizer=normalizer, want_max=want_max, cancel=cancel)
            for k in keys:
                acc[k][idx] += w * res[k]
            with np.errstate(over="ignore", invalid="ignore"):
                if normalizer == "sigmoid":
                    asym_max[idx] += w * np.asarray(gaussian_max_moment(sub, math.sqrt(s2))) / sub
                    mgf[idx] += w * math.exp(min(2.0 * s2, 700.0))
                else:
                    asym_max[idx] += w * np.asarray(gaussian_max_moment(sub, math.sqrt(s2))) / (
                        sub * math.exp(min(0.5 * s2, 700.0)))
                    mgf[idx] += w * math.exp(min(s2, 700.0))
    nf = ns.astype(np.float64)
    ln_n = np.log(nf)
    df = pd.DataFrame({"n": ns})
    for k in keys:
        df[k] = acc[k]
    df["normalized_entropy"] = np.where(nf > 1, df["entropy"] / np.where(nf > 1, ln_n, 1.0), 0.0)
    df["effective_support"] = np.exp(df["entropy"])
    df["output_std"] = np.sqrt(df["sum_sq"])
    df["sigma2"] = f2d
    df["entropy_asymptote"] = entropy_asymptote(nf, f2d)
    df["entropy_corrected"] = entropy_corrected(nf, f2d)
    df["effective_support_asymptote"] = np.exp(df["entropy_asymptote"])
    df["max_weight_asymptote"] = asym_max
    df["output_std_asymptote"] = np.sqrt(mgf / nf)
    df["valid_from"] = asymptote_valid_from(f2d)
    df["frozen_below"] = freezing_length(f2d)
    return df


def check_sweep_theory(lengths: Sequence[int] | ArrayLike, **options: Any) -> float:
    """Raise what :func:`sweep_theory` would raise for its size, without computing anything.

    Takes :func:`sweep_theory`'s keyword arguments with its defaults (``cancel`` is not
    used; an unknown keyword is a TypeError, as for :func:`sweep_theory`). Returns the (u, z)
    cells it would evaluate (an upper bound; ~2.4e7 cells/s on one core).

    Raises:
        AttnInputError: bad arguments. ResourceLimitError: the quadratures together exceed
            :data:`MAX_THEORY_CELLS` (so a page can refuse before it starts a sweep).
    """
    bound = inspect.signature(sweep_theory).bind(lengths, **options)
    bound.apply_defaults()
    a = bound.arguments
    ns, _, xs, _, groups = _theory_plan(lengths, a["d"], a["scale_rule"], a["temperature"], a["ssmax_s"],
                                        a["nodes"])
    cells = _plan_cells(ns, xs, groups, a["normalizer"], a["want_max"])
    _check_cells(cells)
    return cells


GIVEN_NODES = 10  # Chebyshev nodes in sigma^2 for the given-queries expectation (see its docstring)
GIVEN_RTOL = 1e-6  # the interpolant must match two rows computed directly this closely
GIVEN_SPREAD = 0.6  # wider relative spreads of sigma^2 (d < 32 at 32 rows) skip the nodes


def _mean_over_rows(ns: NDArray[np.int64], s2s: F64, normalizer: str, want_max: bool,
                    cancel: Cancel | None, nodes: int | None) -> dict[str, F64]:
    """Mean over rows of :func:`gaussian_row_expectations` at each row's ``sigma_r^2`` (``s2s``)."""
    keys = ("entropy", "max_weight", "sum_sq", "row_sum")

    def at(s2: float) -> dict[str, F64]:
        res = gaussian_row_expectations(ns, float(s2), normalizer=normalizer, want_max=want_max,
                                        cancel=cancel)
        return {k: np.asarray(res[k], dtype=np.float64) for k in keys}

    s2s = np.asarray(s2s, dtype=np.float64)
    a, b = float(s2s.min()), float(s2s.max())
    # a spread wider than (b - a) / (b + a) = GIVEN_SPREAD rarely passes the check: every row at once
    if nodes is None or s2s.size <= nodes or b - a <= 1e-12 * max(1.0, b) or b - a > GIVEN_SPREAD * (b + a):
        rows = [at(v) for v in s2s]
        return {k: np.mean([r[k] for r in rows], axis=0) for k in keys}
    t = np.cos(np.pi * (np.arange(nodes) + 0.5) / nodes)  # Chebyshev points in (-1, 1)
    vals = [at(0.5 * (a + b) + 0.5 * (b - a) * ti) for ti in t]
    x = (2.0 * s2s - (a + b)) / (b - a)
    coefs = {}
    for k in keys:
        y = np.stack([v[k] for v in vals])  # (nodes, lengths)
        # the max weight when not asked for is NaN (as without nodes): kept NaN
        coefs[k] = np.polynomial.chebyshev.chebfit(t, y, nodes - 1) if np.all(np.isfinite(y)) else None
    # checked at the two rows farthest from any node; a spread too wide for the nodes: every row
    far = np.argsort(np.min(np.abs(x[:, None] - t[None, :]), axis=1))[-2:]
    for r in far:
        exact = at(s2s[r])
        for k, c in coefs.items():
            if c is not None and not np.allclose(np.polynomial.chebyshev.chebval(x[r], c), exact[k],
                                                 rtol=GIVEN_RTOL, atol=0.0):
                return _mean_over_rows(ns, s2s, normalizer, want_max, cancel, None)
    return {k: (np.full(ns.size, np.nan) if c is None else
                np.polynomial.chebyshev.chebval(x, c).mean(axis=-1))  # (lengths, rows) -> mean
            for k, c in coefs.items()}


def sweep_theory_given_queries(
    lengths: Sequence[int] | ArrayLike,
    q_norms: ArrayLike,
    *,
    d: int = 64,
    scale_rule: str = "sqrt_d",
    temperature: float = 1.0,
    normalizer: str = "softmax",
    ssmax_s: float = 0.43,
    want_max: bool = True,
    cancel: Cancel | None = None,
    nodes: int | None = GIVEN_NODES,
) -> pd.DataFrame:
    """The exact expectation of a sweep's row averages given the queries actually drawn.

    :func:`sweep_theory` averages over ``|q|^2 ~ chi2_d`` as well; a sweep's L rows are one draw
    of it, so with few rows the two can differ by more than the keys' sampling error (seed 0's
    64 queries at d = 64 have rms ``|q|/sqrt(d)`` = 0.975). Here each row keeps its own logit
    variance ``sigma_r^2 = f(n)^2 |q_r|^2`` and only the keys are averaged over: the result is
    what the engine's means estimate, with the keys as the only source of error.

    Args:
        lengths: key counts n. q_norms: ``|q_r|`` of the L query rows, shape (L,)
            (:func:`attncore.sweeps.query_norms` gives the engine's).
        d, scale_rule, temperature, normalizer, ssmax_s: as in :func:`sweep_theory`.
        want_max: also the max weight (the costlier integral; NaN otherwise).
        cancel: asked between chunks (True stops with :class:`TheoryCancelled`).
        nodes: with more rows than this, the per-row expectations (smooth in ``sigma_r^2``) are
            computed at this many Chebyshev nodes spanning the rows' ``sigma_r^2`` and
            interpolated to each row; two rows are also computed directly and, unless the
            interpolant matches them to :data:`GIVEN_RTOL`, every row is (a spread too wide for
            the nodes). None: one quadrature per row.

    Returns:
        One row per n: ``entropy``, ``normalized_entropy``, ``max_weight``, ``sum_sq``,
        ``row_sum`` (means over the rows of the exact per-row expectations), ``output_std``
        (``sqrt`` of the mean ``sum p^2``, as the engine reports) and ``effective_support``
        (``exp`` of the mean entropy).
    """
    qn = np.asarray(q_norms, dtype=np.float64).reshape(-1)
    if qn.size == 0 or not np.all(np.isfinite(qn)) or np.any(qn < 0):
        raise AttnInputError("q_norms must be finite non-negative numbers, one per query row.")
    ns, factor = _logit_factors(lengths, d, scale_rule, temperature, ssmax_s)
    keys = ("entropy", "max_weight", "sum_sq", "row_sum")
    acc = {k: np.zeros(ns.size) for k in keys}
    groups: dict[float, list[int]] = {}
    for i, f in enumerate(factor):
        groups.setdefault(float(f), []).append(i)
    _check_cells(sum(quadrature_cells(ns[idx], float(s2), normalizer=normalizer, want_max=want_max)
                     for f, idx in groups.items() for s2 in (f * qn) ** 2))
    for f, idx in groups.items():
        mean = _mean_over_rows(ns[idx], (f * qn) ** 2, normalizer, want_max, cancel, nodes)
        for k in keys:
            acc[k][idx] = mean[k]
    nf = ns.astype(np.float64)
    df = pd.DataFrame({"n": ns, **acc})
    df["normalized_entropy"] = np.where(nf > 1, df["entropy"] / np.log(np.where(nf > 1, nf, 2.0)), 0.0)
    df["effective_support"] = np.exp(df["entropy"])
    df["output_std"] = np.sqrt(df["sum_sq"])
    return df
