"""Softmax saturation and its gradients: the Jacobian of a row, and how it fades as logits grow.

Shape legend (see the package docstring): ``n`` entries of one softmax row (keys), ``P``
points on a logit-scale axis, ``B`` batch, ``L`` queries, ``S`` keys, ``E`` head dim. The
spread of ``q·k`` itself is in :mod:`attncore.dot_products`, float overflow in
:mod:`attncore.overflow`.

Everything here is measured; :mod:`attncore.theory` holds the closed forms the
measurements are drawn against. Sweeps return small frozen dataclasses of numpy
arrays (summaries for plots and CSV); functions on rows return tensors on the
input's device and dtype. Randomness goes through a seeded ``torch.Generator``
created on the target device.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from numpy.typing import NDArray
from torch import Tensor

from attncore.attention import attention
from attncore.budget import MAX_ATTENTION_CELLS, check_limit, fmt_count
from attncore.dot_products import MAX_MC_ELEMENTS, check_d
from attncore.dtypes import check_sample_dtype, sampling_dtype
from attncore.errors import AttnInputError
from attncore.normalizers import Softmax
from attncore.stats import entropy, max_weight
from attncore.synthetic import make_generator, randn

__all__ = [
    "MAX_KEYS",
    "MAX_SCALE_ENTRIES",
    "MAX_SCORES",
    "GradientSweep",
    "RowSummary",
    "SaturationCurve",
    "ScaleSweep",
    "TemperatureRows",
    "gradient_sweep",
    "jacobian_frobenius",
    "jacobian_vs_scale",
    "max_scale_trials",
    "naive_softmax",
    "parse_scores",
    "saturation_crossing",
    "saturation_curve",
    "softmax_jacobian",
    "softmax_vjp",
    "stable_softmax",
    "temperature_rows",
]

MAX_KEYS = 4096
_CHUNK = 1 << 22  # softmax entries per op in jacobian_vs_scale: bounded memory
MAX_SCORES = 64
MAX_SCORE_CHARS = 2000
MAX_SCORE_ABS = 1e6




# --------------------------------------------------------------------------- softmax rows


def softmax_jacobian(p: Tensor) -> Tensor:
    """Jacobian of softmax at its output p: ``diag(p) - p p^T``, batched.

    Args:
        p: (..., n) softmax rows (an all-zero, fully masked row gives a zero Jacobian).

    Returns:
        (..., n, n) with ``J[..., i, j] = d p_i / d x_j``; symmetric, rows sum to 0.
    """
    n = p.shape[-1]
    check_limit(p.numel() * n, MAX_ATTENTION_CELLS, "Jacobian entries (rows × n × n)",
                "(a few hundred MB)", "Use jacobian_frobenius for norms of long rows.")
    jac = p[..., :, None] * p[..., None, :]  # (..., n, n)
    jac.neg_()
    jac.diagonal(dim1=-2, dim2=-1).add_(p)
    return jac


def _exclusive_sum(x: Tensor) -> Tensor:
    """``sum_{j != i} x_j`` for each i over the last dim, (..., n) -> (..., n), without subtracting."""
    zero = torch.zeros_like(x[..., :1])
    before = torch.cat([zero, x[..., :-1].cumsum(-1)], dim=-1)
    after = torch.cat([x[..., 1:].flip(-1).cumsum(-1).flip(-1), zero], dim=-1)
    return before + after


def jacobian_frobenius(p: Tensor) -> Tensor:
    r"""``||diag(p) - p p^T||_F`` for each row of p (..., n) -> (...), in O(n) per row.

    Equal to :math:`\sqrt{\sum p^2 - 2\sum p^3 + (\sum p^2)^2}`, but evaluated as
    :math:`\sum_i p_i^2\big((\sum_{j\ne i} p_j)^2 + \sum_{j\ne i} p_j^2\big)` with
    1 − p_i taken as the sum of the other weights: the short form cancels
    catastrophically for a nearly one-hot row (in float32 it returns 0 once the
    runner-up weight is below ~1e-4), this one keeps full relative precision.
    Checked against the materialised :func:`softmax_jacobian` in the tests.
    """
    sq = p * p
    rest, rest_sq = _exclusive_sum(p), _exclusive_sum(sq)  # (..., n)
    return (sq * (rest * rest + rest_sq)).sum(-1).sqrt()


def softmax_vjp(p: Tensor, grad_p: Tensor) -> Tensor:
    """Chain rule through softmax: ``J^T grad_p = p * (grad_p - <p, grad_p>)``; (..., n) -> (..., n)."""
    return p * (grad_p - (p * grad_p).sum(-1, keepdim=True))


def stable_softmax(x: Tensor) -> Tensor:
    """Softmax with the row maximum subtracted first (attncore's normaliser), in x's dtype: (..., n)."""
    return Softmax()(x)


def naive_softmax(x: Tensor) -> Tensor:
    """Textbook ``exp(x) / sum exp(x)`` in x's dtype: (..., n). Overflows to inf/NaN for large x."""
    e = torch.exp(x)
    return e / e.sum(-1, keepdim=True)


@dataclass(frozen=True)
class SaturationCurve:
    """``softmax([x, 0, ..., 0])`` along x (P,): top weight, each other weight and ``||J||_F``."""

    x: Tensor
    top: Tensor
    other: Tensor
    jac_norm: Tensor
    n: int


def saturation_curve(x: Tensor, n: int) -> SaturationCurve:
    """Softmax of the row ``[x, 0, ..., 0]`` (n entries) for each x in x (P,), via attncore.

    Tensors follow x's device and dtype.
    """
    if not 2 <= int(n) <= MAX_KEYS:
        raise AttnInputError(f"the row needs 2 to {MAX_KEYS} entries; got {n}.")
    check_limit(x.numel() * int(n), MAX_ATTENTION_CELLS, "points × entries", "cells", "Use fewer points.")
    logits = torch.zeros(x.numel(), int(n), device=x.device, dtype=x.dtype)  # (P, n)
    logits[:, 0] = x
    p = stable_softmax(logits)  # (P, n)
    return SaturationCurve(x=x, top=p[:, 0], other=p[:, 1], jac_norm=jacobian_frobenius(p), n=int(n))


def saturation_crossing(x: Tensor, top: Tensor, level: float) -> float | None:
    """First x where the measured top weight reaches ``level`` (linear interpolation); None if never."""
    above = torch.nonzero(top >= level).flatten()
    if above.numel() == 0:
        return None
    i = int(above[0])
    if i == 0:
        return float(x[0])
    x0, x1, y0, y1 = float(x[i - 1]), float(x[i]), float(top[i - 1]), float(top[i])
    return x0 + (level - y0) * (x1 - x0) / (y1 - y0)


_NUMBER = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$")


def parse_scores(text: str, *, max_len: int = MAX_SCORES) -> list[float]:
    """Parse comma- (or space-) separated scores such as ``"9.2, -3.1, 8.8"``.

    Raises:
        AttnInputError: empty text, a token that is not a plain finite number (NaN and
            inf are refused), more than ``max_len`` entries, fewer than 2, or a value
            beyond ±1e6; the message names the offending entry.
    """
    if text is None or not str(text).strip():
        raise AttnInputError("Enter at least two scores, separated by commas (e.g. 9.2, -3.1, 8.8).")
    text = str(text)
    if len(text) > MAX_SCORE_CHARS:
        raise AttnInputError(f"The scores text is {len(text):,} characters long; the limit is "
                             f"{MAX_SCORE_CHARS:,} (at most {max_len} scores).")
    tokens = [t for t in re.split(r"[,;\s]+", text.strip()) if t]
    if len(tokens) > max_len:
        raise AttnInputError(f"{len(tokens)} scores were given; the limit is {max_len}, so that every "
                             "weight stays readable on the charts.")
    values = []
    for i, tok in enumerate(tokens, start=1):
        if not _NUMBER.match(tok):
            kind = "not a finite number" if tok.lower().lstrip("+-") in {"nan", "inf", "infinity"} \
                else "not a number"
            raise AttnInputError(f"Score {i} ({tok[:20]!r}) is {kind}; use plain numbers such as -3.1 or 8.")
        v = float(tok)
        if not math.isfinite(v) or abs(v) > MAX_SCORE_ABS:
            raise AttnInputError(f"Score {i} ({tok[:20]}) is beyond ±{fmt_count(MAX_SCORE_ABS)}; "
                                 "any row is one-hot long before that.")
        values.append(v)
    if len(values) < 2:
        raise AttnInputError("A softmax row needs at least two scores to compare.")
    return values


@dataclass(frozen=True)
class TemperatureRows:
    """One score row divided by several temperatures; tensors (P, n) / (P,) in float64 on the CPU."""

    labels: tuple[str, ...]
    divisors: tuple[float, ...]
    logits: Tensor
    weights: Tensor
    entropy: Tensor
    max_weight: Tensor
    jac_norm: Tensor


def temperature_rows(scores: Sequence[float], d: int,
                     multipliers: Sequence[float] = (0.5, 1.0, 2.0)) -> TemperatureRows:
    r"""Softmax of ``scores / tau`` for tau = 1 (unscaled) and tau = m·sqrt(d), m in ``multipliers``.

    With the "Why √d Matters" tutorial's scores ``[9.2, -3.1, 8.8, -5.4, 1.2]`` and d = 64, tau = 1
    gives ≈ [0.599, 0.000, 0.401, 0.000, 0.000] and tau = sqrt(64) = 8 gives
    ≈ [0.371, 0.080, 0.353, 0.060, 0.136] (which sums to 1).
    """
    d = check_d(d)
    s = torch.tensor([float(v) for v in scores], dtype=torch.float64)  # (n,)
    if s.dim() != 1 or s.numel() < 2 or not bool(torch.isfinite(s).all()):
        raise AttnInputError("temperature rows need at least two finite scores.")
    root = math.sqrt(d)
    divisors = (1.0, *(float(m) * root for m in multipliers))
    labels = ("unscaled (τ = 1)", *(f"τ = {_mult(m)}√d = {m * root:.3g}" for m in multipliers))
    logits = s[None, :] / torch.tensor(divisors, dtype=torch.float64)[:, None]  # (P, n)
    w = stable_softmax(logits)  # (P, n)
    return TemperatureRows(labels=labels, divisors=divisors, logits=logits, weights=w,
                           entropy=entropy(w), max_weight=max_weight(w), jac_norm=jacobian_frobenius(w))


def _mult(m: float) -> str:
    return "" if m == 1 else f"{m:g}·"


# --------------------------------------------------------------------------- Monte Carlo sweeps


@dataclass(frozen=True)
class ScaleSweep:
    """``||J||_F`` and max weight of softmax(sigma·z), z ~ N(0, I_n), against sigma (each (P,))."""

    sigma: NDArray[np.float64]
    jac_mean: NDArray[np.float64]
    jac_se: NDArray[np.float64]
    max_mean: NDArray[np.float64]
    max_se: NDArray[np.float64]
    n: int
    trials: int


MAX_SCALE_ENTRIES = MAX_MC_ELEMENTS // 2  # trials x keys x scales per jacobian_vs_scale (about a second)


def max_scale_trials(n: int, points: int) -> int:
    """The most trials :func:`jacobian_vs_scale` accepts for rows of ``n`` keys at ``points`` scales.

    The limit is on softmax entries, trials x n x points <= :data:`MAX_SCALE_ENTRIES` (a budget of
    time, about a second, not of memory: the sweep already runs in bounded chunks).
    """
    return MAX_SCALE_ENTRIES // (max(1, int(n)) * max(1, int(points)))


def jacobian_vs_scale(
    sigmas: Sequence[float],
    n: int,
    trials: int,
    *,
    seed: int = 0,
    device: torch.device | str = "cpu",
    dtype: torch.dtype = torch.float32,
) -> ScaleSweep:
    """Monte Carlo of ``E||J||_F`` and ``E[max weight]`` for rows of n logits ~ N(0, sigma^2).

    The same standard-normal rows z (trials, n) are reused for every sigma (common
    random numbers), so the curves are smooth; errors are standard errors over rows.
    """
    if not 2 <= int(n) <= MAX_KEYS:
        raise AttnInputError(f"the row needs 2 to {MAX_KEYS} keys; got {n}.")
    if int(trials) < 2:
        raise AttnInputError("at least 2 trials are needed for an error bar.")
    sig = np.asarray(sigmas, dtype=np.float64)
    if sig.ndim != 1 or sig.size == 0 or not np.all(np.isfinite(sig)) or np.any(sig < 0):
        raise AttnInputError("the logit scales must be finite and non-negative.")
    check_limit(int(trials) * int(n) * sig.size, MAX_SCALE_ENTRIES, "trials × keys × scales",
                "softmax entries per request (about a second)", "Reduce the trials or the keys.")
    dev = torch.device(device)
    dt = check_sample_dtype(dtype)
    z = randn(int(trials), int(n), generator=make_generator(seed), device=dev, dtype=dt)  # CPU draws, moved
    scales = torch.as_tensor(sig, device=dev, dtype=dt)
    per_block = max(1, _CHUNK // z.numel())  # several sigmas per op: few large ops, bounded memory
    rows = []
    for start in range(0, sig.size, per_block):
        p = stable_softmax(scales[start : start + per_block, None, None] * z)  # (c, trials, n)
        jn, mw = jacobian_frobenius(p), max_weight(p)  # (c, trials)
        root = math.sqrt(trials)
        rows.append(torch.stack([jn.mean(1), jn.std(1) / root, mw.mean(1), mw.std(1) / root], dim=1))
    out = torch.cat(rows).to(torch.float64).cpu().numpy()  # (P, 4)
    return ScaleSweep(sigma=sig, jac_mean=out[:, 0], jac_se=out[:, 1], max_mean=out[:, 2],
                      max_se=out[:, 3], n=int(n), trials=int(trials))


@dataclass(frozen=True)
class RowSummary:
    """Per-row values summarised over rows, for each d (each (D,)).

    ``se`` is the standard error of ``mean`` over the independent batch elements
    (rows inside one element share its keys).
    """

    mean: NDArray[np.float64]
    se: NDArray[np.float64]
    median: NDArray[np.float64]
    q25: NDArray[np.float64]
    q75: NDArray[np.float64]


GRADIENT_QUANTITIES: dict[str, str] = {
    "jac": "‖J‖_F of each query's row",
    "max": "max weight of each row",
    "saturated": "share of rows with max weight ≥ level",
    "grad_scores": "‖∂loss/∂logits‖ per query (softmax input)",
    "grad_q": "‖∂loss/∂q‖ per query",
    "grad_k": "‖∂loss/∂k‖ per key",
}
SETTINGS: tuple[str, ...] = ("scaled", "unscaled")


@dataclass(frozen=True)
class GradientSweep:
    """Softmax saturation and gradient norms through :func:`attncore.attention` against d.

    ``stats[(setting, quantity)]`` with setting in :data:`SETTINGS` and quantity in
    :data:`GRADIENT_QUANTITIES`. ``chain_rule_error`` is the largest relative
    difference between autograd's ∂loss/∂Q, ∂loss/∂K and the chain rule through
    ``J = diag(p) - p p^T`` over the whole sweep.
    """

    d: NDArray[np.int64]
    stats: dict[tuple[str, str], RowSummary]
    batch: int
    keys: int
    level: float
    chain_rule_error: float


def _summarise(values: Tensor) -> tuple[float, ...]:
    """values (B, rows) -> mean, SE over B, median, q25, q75 over all rows."""
    v = values.to(torch.float64)
    per_batch = v.mean(-1)  # (B,)
    se = float(per_batch.std() / math.sqrt(per_batch.numel())) if per_batch.numel() > 1 else 0.0
    q = torch.quantile(v.flatten(), torch.tensor([0.5, 0.25, 0.75], dtype=torch.float64, device=v.device))
    return float(v.mean()), se, float(q[0]), float(q[1]), float(q[2])


def _rel_err(a: Tensor, b: Tensor) -> float:
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


def gradient_sweep(
    ds: Sequence[int],
    keys: int,
    batch: int,
    *,
    level: float = 0.99,
    seed: int = 0,
    device: torch.device | str = "cpu",
    dtype: torch.dtype = torch.float32,
) -> GradientSweep:
    r"""Gradients of a random linear loss through :func:`attncore.attention`, scaled vs unscaled.

    For each d: Q, K, V ~ N(0, 1) of shape (B, S, E) with L = S = ``keys`` and E = d,
    and a fixed probe G ~ N(0, 1/d) of shape (B, L, E); loss = ``sum(out * G)``.
    The same draws go through the scaled (scale = 1/sqrt(d)) and the unscaled
    (scale = 1) attention, so the settings differ only in the scale. Per row it
    records ``||J||_F``, the max weight, whether the max weight reaches ``level``,
    and the gradient norms w.r.t. the scores (chain rule), each query and each key
    (autograd), in float32 for half inputs.

    Raises:
        ResourceLimitError: ``batch · keys · (sum of d)`` exceeds :data:`MAX_MC_ELEMENTS`.
    """
    ds = [check_d(d) for d in ds]
    if not ds or not 2 <= int(keys) <= 1024 or not 2 <= int(batch) <= 4096:
        raise AttnInputError("the gradient sweep needs some d, 2 to 1024 keys and 2 to 4096 batch elements.")
    if not 0.0 < level < 1.0:
        raise AttnInputError(f"the saturation level must lie in (0, 1); got {level}.")
    B, S = int(batch), int(keys)
    check_limit(B * S * sum(ds), MAX_MC_ELEMENTS, "batch × keys × (sum of d over the sweep)",
                "entries per tensor (about a second with autograd)", "Reduce the batch, keys or largest d.")
    dev = torch.device(device)
    g = make_generator(seed)  # CPU: the same inputs on every device
    sample = sampling_dtype(dtype)
    cols: dict[tuple[str, str], list[tuple[float, ...]]] = {}
    worst = 0.0
    for d in ds:
        q, k, v = (randn(B, S, d, generator=g, device=dev, dtype=sample).to(dtype) for _ in range(3))
        probe = randn(B, S, d, generator=g, device=dev, dtype=sample) / math.sqrt(d)  # (B, L, E)
        q.requires_grad_(True)
        k.requires_grad_(True)
        grad_w = probe @ v.to(sample).transpose(-2, -1)  # (B, L, S): d loss / d weights
        for setting in SETTINGS:
            scale = 1.0 / math.sqrt(d) if setting == "scaled" else 1.0
            out, w = attention(q, k, v, scale=scale, return_weights=True)  # (B, L, E), (B, L, S)
            gq, gk = torch.autograd.grad((out.to(probe.dtype) * probe).sum(), (q, k))
            gq, gk = gq.to(sample), gk.to(sample)
            w = w.detach().to(sample)  # (B, L, S)
            grad_s = softmax_vjp(w, grad_w)  # (B, L, S)
            if dtype in (torch.float32, torch.float64):
                chain_q = scale * grad_s @ k.detach().to(sample)  # (B, L, E)
                chain_k = scale * grad_s.transpose(-2, -1) @ q.detach().to(sample)  # (B, S, E)
                worst = max(worst, _rel_err(gq, chain_q), _rel_err(gk, chain_k))
            mw = max_weight(w)
            per_row = {"jac": jacobian_frobenius(w), "max": mw, "saturated": (mw >= level).to(sample),
                       "grad_scores": grad_s.norm(dim=-1), "grad_q": gq.norm(dim=-1),
                       "grad_k": gk.norm(dim=-1)}
            for name, vals in per_row.items():
                cols.setdefault((setting, name), []).append(_summarise(vals))
    stats = {key: RowSummary(*(np.asarray(c) for c in zip(*rows, strict=True))) for key, rows in cols.items()}
    return GradientSweep(d=np.asarray(ds, dtype=np.int64), stats=stats, batch=B, keys=S, level=float(level),
                         chain_rule_error=worst)




