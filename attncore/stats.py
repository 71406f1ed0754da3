"""Statistics of attention rows, reduced over the last (key) dimension.

Shape legend: weights ``(..., S)`` (typically ``(..., L, S)``); every function
returns ``(...)``. Hidden keys carry weight 0 and so drop out of every sum.

For normalisers whose rows need not sum to 1 (softmax1, sigmoid) the entropy
family is computed on the row renormalised to sum 1 (``normalize=True``, the
default); :func:`row_sum` reports how much mass the row actually spends. An
all-zero row has entropy 0, max weight 0 and effective support 0.

Intervals over samples (seeds, text windows): :func:`t_critical`, the 95% t quantile every margin
``t(0.975, n - 1) x standard error`` uses (the training verdicts and the decoder's ablations).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor

from attncore.errors import AttnInputError

__all__ = [
    "effective_support",
    "entropy",
    "mass_on",
    "max_weight",
    "normalized_entropy",
    "row_sum",
    "sum_squares",
    "t_critical",
]


def row_sum(weights: Tensor) -> Tensor:
    """Total weight each row spends: (..., S) -> (...)."""
    return weights.sum(dim=-1)


def _renormalize(weights: Tensor) -> Tensor:
    total = weights.sum(dim=-1, keepdim=True)
    return weights / torch.where(total > 0, total, torch.ones_like(total))


def entropy(weights: Tensor, *, normalize: bool = True) -> Tensor:
    """Shannon entropy in nats, ``-sum p log p`` with ``0 log 0 = 0``: (..., S) -> (...).

    0 for a one-hot row, ``log S`` for a uniform row over S keys.
    """
    p = _renormalize(weights) if normalize else weights
    logp = torch.log(torch.where(p > 0, p, torch.ones_like(p)))
    return -(p * logp).sum(dim=-1)


def normalized_entropy(weights: Tensor, n: Tensor | int | None = None) -> Tensor:
    """Entropy divided by ``log n`` (n = visible keys, default the nonzero count), in [0, 1].

    Rows with ``n <= 1`` give 0.
    """
    h = entropy(weights)
    if n is None:
        n = (weights > 0).sum(dim=-1)
    n_t = torch.as_tensor(n, device=weights.device, dtype=h.dtype)
    log_n = torch.log(n_t.clamp_min(1.0))
    return torch.where(log_n > 0, h / torch.where(log_n > 0, log_n, torch.ones_like(log_n)), 0.0)


def max_weight(weights: Tensor) -> Tensor:
    """Largest weight of each row: (..., S) -> (...)."""
    return weights.amax(dim=-1)


def effective_support(weights: Tensor) -> Tensor:
    """``exp(H)``: how many keys the row effectively spreads over (0 for an empty row)."""
    h = entropy(weights)
    nonempty = row_sum(weights) > 0
    return torch.where(nonempty, torch.exp(h), torch.zeros_like(h))


def sum_squares(weights: Tensor) -> Tensor:
    """``sum_j p_j^2`` of the raw weights; its square root is the output std for iid unit values."""
    return (weights * weights).sum(dim=-1)


def mass_on(weights: Tensor, positions: Sequence[int] | Tensor) -> Tensor:
    """Total weight each row puts on the given key positions: (..., S) -> (...).

    Negative positions count from the end; duplicates count once.
    """
    S = weights.shape[-1]
    idx = torch.as_tensor(positions, dtype=torch.long, device=weights.device).flatten()
    if idx.numel() == 0:
        return torch.zeros(weights.shape[:-1], dtype=weights.dtype, device=weights.device)
    if bool(((idx < -S) | (idx >= S)).any()):
        raise AttnInputError(f"key positions must lie in [-{S}, {S - 1}].")
    sel = torch.zeros(S, dtype=torch.bool, device=weights.device)
    sel[idx % S] = True
    return (weights * sel).sum(dim=-1)


# ---------------------------------------------------------------------- intervals over samples

# Two-sided 95% critical values of Student's t for 1..30 degrees of freedom (t(0.975, df)).
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160,
         2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056,
         2.052, 2.048, 2.045, 2.042)


def t_critical(df: float) -> float:
    """t(0.975, df): the two-sided 95% critical value; a fractional df (Welch) is rounded down,
    which makes the margin wider (the conservative side); df above 30 uses 1.96 + the 30's gap."""
    if not math.isfinite(df) or df < 1:
        return math.inf
    k = int(math.floor(df))
    return _T975[k - 1] if k <= len(_T975) else 1.96 + (_T975[-1] - 1.96) * 30 / k
