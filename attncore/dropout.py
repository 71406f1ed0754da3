"""Attention dropout: what it does to the weights, and why the output stays unbiased.

SDPA's ``dropout_p`` zeroes each weight with probability ``p`` and divides the survivors by
``1 - p`` (inverted dropout). A weight ``w`` becomes ``w m / (1 - p)`` with ``m`` a Bernoulli
(1 - p) draw, so ``E[w m / (1 - p)] = w`` and the output ``sum_j w_j m_j v_j / (1 - p)`` has
the no-dropout output as its expectation, with variance ``p / (1 - p) * sum_j w_j^2 v_j^2``
per output entry (closed forms in :mod:`attncore.theory.dropout`).
``F.scaled_dot_product_attention`` has no training flag: it drops weights whenever
``dropout_p > 0``, so a caller must pass 0 at inference.

Shape legend: ``...`` leading dims (``B, H``), ``L`` queries, ``S`` keys, ``Ev`` value dim.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from attncore.errors import AttnInputError
from attncore.theory import dropout_keep_scale, dropout_output_std

__all__ = ["DropoutDraws", "drop_weights", "dropout_draws"]

MAX_DRAWS = 4096


def _check_p(p: float) -> None:
    if not (math.isfinite(p) and 0.0 <= p < 1.0):
        raise AttnInputError(f"the dropout probability must be in [0, 1); got {p}.")


def drop_weights(weights: Tensor, p: float, generator: torch.Generator | None = None) -> Tensor:
    """Inverted dropout of attention weights (..., L, S): keep with probability 1 - p, divide by 1 - p.

    The same rule as :func:`attncore.attention.attention_stages` (and torch's math backend):
    uniform draws ``>= p`` survive. Drawn on the generator's device, returned on the weights'.
    """
    _check_p(p)
    if p == 0.0:
        return weights
    rng_device = weights.device if generator is None else generator.device
    keep = torch.rand(weights.shape, generator=generator, device=rng_device) >= p
    return weights * keep.to(weights.device) * dropout_keep_scale(p)  # (..., L, S)


@dataclass(frozen=True)
class DropoutDraws:
    """Many dropout draws of one attention's output against the no-dropout output.

    Attributes:
        exact: (..., L, Ev) output without dropout.
        mean: (..., L, Ev) mean output over ``n`` draws.
        std_one: (..., L, Ev) closed-form std of one draw
            (:func:`attncore.theory.dropout_output_std`).
        first_weights: (..., L, S) the weights after dropout in the first draw.
        n: number of draws.
    """

    exact: Tensor
    mean: Tensor
    std_one: Tensor
    first_weights: Tensor
    n: int

    @property
    def std_error(self) -> Tensor:
        """(..., L, Ev) standard error of ``mean``: ``std_one / sqrt(n)``."""
        return self.std_one / math.sqrt(self.n)

    def within(self, k: float) -> float:
        """Fraction of entries whose mean lies within ``k`` standard errors of ``exact``
        (entries with a zero standard error count when the mean equals ``exact``)."""
        gap = (self.mean - self.exact).abs()
        return float((gap <= k * self.std_error + 1e-12 * self.exact.abs().clamp(min=1)).double().mean())

    def max_z(self) -> float:
        """Largest |mean - exact| / standard error over entries with a non-zero standard error."""
        se = self.std_error
        ok = se > 0
        if not bool(ok.any()):
            return 0.0
        return float(((self.mean - self.exact).abs()[ok] / se[ok]).max())


def dropout_draws(weights: Tensor, value: Tensor, p: float, n: int, seed: int) -> DropoutDraws:
    """Apply dropout ``n`` times (seeded) to weights (..., L, S) and mix value (..., S, Ev).

    Draws are made one at a time from one CPU ``torch.Generator`` seeded with ``seed`` (moved to
    the weights' device, so every machine draws the same masks); memory stays at a few
    (..., L, S) tensors whatever ``n``.
    """
    _check_p(p)
    if not 1 <= int(n) <= MAX_DRAWS:
        raise AttnInputError(f"the number of dropout draws must be between 1 and {MAX_DRAWS}; got {n}.")
    g = torch.Generator()  # on the CPU: the same draws (and picture) on every device
    g.manual_seed(int(seed))
    exact = weights @ value  # (..., L, Ev)
    total = torch.zeros_like(exact)
    first = weights
    for i in range(int(n)):
        dropped = drop_weights(weights, p, g)  # (..., L, S)
        if i == 0:
            first = dropped
        total += dropped @ value
    return DropoutDraws(exact=exact, mean=total / n, std_one=dropout_output_std(weights, value, p),
                        first_weights=first, n=int(n))
