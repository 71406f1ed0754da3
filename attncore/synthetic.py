"""Seeded synthetic inputs.

Shape legend: ``B`` batch, ``Hq`` query heads, ``Hkv`` key/value heads, ``L``
queries, ``S`` keys, ``E`` query/key dim, ``Ev`` value dim.
All randomness goes through one ``torch.Generator`` seeded with ``seed``. Small inputs a
user looks at cell by cell are drawn on the CPU generator and moved to the target device
(:func:`randn`), so the same seed gives the same tensors on every device: a URL shows the
same picture on a laptop and on a GPU server. Monte Carlo draws too large for that use a
generator on the device (:func:`make_generator` with a device), and the page says so.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from attncore.errors import AttnInputError

__all__ = ["CPU_DRAW_LIMIT", "QKV", "gaussian_qkv", "make_generator", "randn"]

# Draws up to this many numbers are made on the CPU generator and moved to the device (about
# 0.1 s on one core): the same numbers everywhere. Larger Monte Carlo draws use the device's.
CPU_DRAW_LIMIT = 1 << 24


def make_generator(seed: int, device: torch.device | str = "cpu") -> torch.Generator:
    """A ``torch.Generator`` on ``device`` (default the CPU) seeded with ``seed``."""
    g = torch.Generator(device=torch.device(device))
    g.manual_seed(int(seed))
    return g


def randn(*shape: int, generator: torch.Generator, device: torch.device | str = "cpu",
          dtype: torch.dtype = torch.float32) -> Tensor:
    """N(0, 1) samples of ``shape`` from ``generator``, returned on ``device``.

    With a CPU generator the numbers are drawn on the CPU and moved, so they do not depend on
    ``device``; a generator on the device draws there (large Monte Carlo draws).
    """
    dev = torch.device(device)
    if generator.device.type == "cpu" and dev.type != "cpu":
        return torch.randn(*shape, generator=generator, dtype=dtype).to(dev)
    return torch.randn(*shape, generator=generator, device=dev, dtype=dtype)


@dataclass(frozen=True)
class QKV:
    """query (B, Hq, L, E), key (B, Hkv, S, E), value (B, Hkv, S, Ev)."""

    query: Tensor
    key: Tensor
    value: Tensor


def gaussian_qkv(
    *,
    batch: int = 1,
    heads: int = 1,
    kv_heads: int | None = None,
    L: int = 8,
    S: int | None = None,
    d_k: int = 16,
    d_v: int | None = None,
    d_q: int | None = None,
    std: float = 1.0,
    seed: int = 0,
    device: torch.device | str = "cpu",
    dtype: torch.dtype = torch.float32,
) -> QKV:
    """Gaussian Q, K, V with entries ~ N(0, std^2), the same numbers on every ``device``.

    ``kv_heads`` defaults to ``heads`` (plain multi-head); fewer gives grouped-query
    attention. ``d_q`` (default ``d_k``) lets additive scoring use a different
    query dim. Samples are drawn in float32 (float64 for float64) and cast to ``dtype``.
    """
    S = L if S is None else S
    kv_heads = heads if kv_heads is None else kv_heads
    d_v = d_k if d_v is None else d_v
    d_q = d_k if d_q is None else d_q
    if min(batch, heads, kv_heads, L, S, d_k, d_v, d_q) < 1:
        raise AttnInputError("all sizes (batch, heads, L, S, dims) must be at least 1.")
    if heads % kv_heads != 0:
        raise AttnInputError(
            f"query heads ({heads}) must be a multiple of key/value heads ({kv_heads})."
        )
    if not (math.isfinite(std) and std > 0):
        raise AttnInputError(f"the input std must be a positive number; got {std}.")
    dev = torch.device(device)
    g = make_generator(seed)  # on the CPU: the draws do not depend on the device
    sample_dtype = torch.float64 if dtype == torch.float64 else torch.float32

    def draw(*shape: int) -> Tensor:
        return (randn(*shape, generator=g, device=dev, dtype=sample_dtype) * std).to(dtype)

    return QKV(
        query=draw(batch, heads, L, d_q),
        key=draw(batch, kv_heads, S, d_k),
        value=draw(batch, kv_heads, S, d_v),
    )
