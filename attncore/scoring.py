"""Scoring functions ``a(q, k)``: the raw score of every query against every key.

Shape legend: ``...`` leading dims (B, H), ``L`` queries, ``S`` keys, ``E``
query/key dim (``Dq``/``Dk`` when they differ, additive only), ``h`` hidden
size of the additive scorer.

* ``scaled_dot``: :math:`q^\\top k / \\sqrt{E}` (the Transformer's choice);
* ``dot``: :math:`q^\\top k` (Luong et al. 2015), whose variance grows like E;
* ``additive``: :math:`w_v^\\top \\tanh(W_q q + W_k k)` (Bahdanau et al. 2015), a
  small MLP with seeded parameters; query and key dims may differ.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from attncore.errors import AttnInputError
from attncore.synthetic import randn

__all__ = ["SCORING_NAMES", "AdditiveScorer", "default_scale", "dot_scores"]

SCORING_NAMES: tuple[str, ...] = ("scaled_dot", "dot", "additive")


def default_scale(scoring: str, head_dim: int) -> float:
    """The factor a scoring applies to its raw scores: ``1/sqrt(E)`` or 1."""
    if scoring not in SCORING_NAMES:
        raise AttnInputError(f"unknown scoring {scoring!r}; choose one of {SCORING_NAMES}.")
    return 1.0 / math.sqrt(head_dim) if scoring == "scaled_dot" else 1.0


def dot_scores(query: Tensor, key: Tensor) -> Tensor:
    """Raw dot products ``query @ key^T``: (..., L, E), (..., S, E) -> (..., L, S)."""
    if query.shape[-1] != key.shape[-1]:
        raise AttnInputError(
            f"dot-product scores need equal query and key dims; got {query.shape[-1]} "
            f"and {key.shape[-1]} (additive scoring allows different dims)."
        )
    return query @ key.transpose(-2, -1)


@dataclass(frozen=True)
class AdditiveScorer:
    """Bahdanau scoring ``w_v^T tanh(W_q q + W_k k)``.

    Attributes:
        w_q: (h, Dq) query projection.
        w_k: (h, Dk) key projection.
        w_v: (h,) output vector.
    """

    w_q: Tensor
    w_k: Tensor
    w_v: Tensor

    @classmethod
    def init(
        cls,
        d_q: int,
        d_k: int,
        hidden: int = 16,
        *,
        generator: torch.Generator | None = None,
        device: torch.device | str | None = None,
        dtype: torch.dtype = torch.float32,
    ) -> AdditiveScorer:
        """Gaussian parameters scaled so ``W_q q`` and ``W_k k`` each have unit variance per entry.

        For inputs with unit-variance entries, the tanh input ``W_q q + W_k k`` is the sum of
        the two, so its entries have variance 2 (not 1); averaged over the parameters, the
        scores ``w_v^T tanh(...)`` then have variance ``E[tanh(Z sqrt 2)^2] = 0.52``
        (Z standard normal).
        """
        if min(d_q, d_k, hidden) < 1:
            raise AttnInputError("additive scoring needs d_q, d_k and hidden >= 1.")
        g = generator if generator is not None else torch.default_generator
        dev = torch.device("cpu") if device is None else torch.device(device)

        def draw(*shape: int, fan_in: int) -> Tensor:
            # A CPU generator's draws are drawn and scaled on the CPU, then moved: the same numbers on
            # every device (CUDA divides by a scalar as a multiplication by its reciprocal, which can
            # differ from the CPU's division in the last bit). A device generator draws there.
            at = torch.device("cpu") if g.device.type == "cpu" else dev
            return (randn(*shape, generator=g, device=at, dtype=dtype) / math.sqrt(fan_in)).to(dev)

        return cls(
            w_q=draw(hidden, d_q, fan_in=d_q),
            w_k=draw(hidden, d_k, fan_in=d_k),
            w_v=draw(hidden, fan_in=hidden),
        )

    @property
    def hidden(self) -> int:
        return int(self.w_v.shape[0])

    def __call__(self, query: Tensor, key: Tensor, *, chunk_elems: int = 1 << 24) -> Tensor:
        """Scores (..., L, S) from query (..., L, Dq) and key (..., S, Dk).

        The (..., L, S, h) pre-activation is built in query chunks of at most
        ``chunk_elems`` elements, so memory stays bounded for long sequences.
        """
        qp = query @ self.w_q.T.to(query)  # (..., L, h)
        kp = key @ self.w_k.T.to(key)  # (..., S, h)
        w_v = self.w_v.to(query)
        L, S, h = qp.shape[-2], kp.shape[-2], self.hidden
        batch = math.prod(torch.broadcast_shapes(qp.shape[:-2], kp.shape[:-2]))
        rows = max(1, chunk_elems // max(1, batch * S * h))
        parts = []
        for start in range(0, L, rows):
            q_blk = qp[..., start : start + rows, None, :]  # (..., l, 1, h)
            feats = torch.tanh(q_blk + kp[..., None, :, :])  # (..., l, S, h)
            parts.append(feats @ w_v)  # (..., l, S)
        return torch.cat(parts, dim=-2)
