"""Synthetic attention for the Heatmaps page: one spec in, every stage out.

Shape legend: ``H`` query heads, ``Hkv`` key/value heads, ``L`` queries, ``S``
keys, ``E`` query/key dim. The batch is 1 and is squeezed away: stage tensors
are ``(H, L, S)``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from attncore.attention import AttentionStages, attention_stages
from attncore.budget import MAX_ADDITIVE_OPS, MAX_ATTENTION_CELLS, check_bytes, check_limit
from attncore.dropout import DropoutDraws, dropout_draws
from attncore.dtypes import DTYPES, sampling_dtype
from attncore.errors import AttnInputError
from attncore.masks import MASK_KINDS, block_diagonal_mask
from attncore.normalizers import NORMALIZER_NAMES, get_normalizer
from attncore.scoring import SCORING_NAMES, AdditiveScorer, default_scale
from attncore.stats import entropy, max_weight, row_sum
from attncore.synthetic import QKV, gaussian_qkv, make_generator

__all__ = [
    "POOL_LEN",
    "RowStats",
    "SyntheticSpec",
    "check_row_lengths",
    "draw_pool",
    "dropout_draw_count",
    "float16_overflow",
    "parse_row_lengths",
    "row_stats",
    "row_valid_lens",
    "synthetic_dropout",
    "synthetic_stages",
]

ADDITIVE_HIDDEN = 16
POOL_LEN = 1024  # longest L and S: inputs are drawn at this length and sliced
VALUE_DIM = 16  # the page shows weights, not outputs, so values stay small


@dataclass(frozen=True)
class SyntheticSpec:
    """Everything that determines one synthetic attention computation (all plain values)."""

    L: int = 16
    S: int = 16
    d_k: int = 64
    heads: int = 4
    kv_heads: int = 4
    scoring: str = "scaled_dot"
    temperature: float = 1.0
    mask: str = "none"
    valid_len: int = 12  # padding: keys >= valid_len are hidden
    valid_lens_rows: tuple[int, ...] = (1, 3, 2, 4)  # padding2d: query i sees keys < entry i % len
    window: int = 4  # sliding window width
    block: int = 8  # packed-documents block size
    normalizer: str = "softmax"
    ssmax_s: float = 0.43
    input_std: float = 1.0
    seed: int = 0
    dtype: str = "float32"

    def validate(self) -> None:
        """Raise :class:`AttnInputError` / :class:`ResourceLimitError` with a plain message."""
        if min(self.L, self.S) < 1:
            raise AttnInputError("query and key lengths must be at least 1.")
        if self.d_k < 1:
            raise AttnInputError("d_k must be at least 1: a 0-dimensional key has no dot product.")
        if self.heads < 1 or self.kv_heads < 1:
            raise AttnInputError("there must be at least one head.")
        if self.heads % self.kv_heads:
            raise AttnInputError(
                f"{self.heads} query heads cannot be split evenly over {self.kv_heads} key/value "
                "heads; pick a divisor of the head count."
            )
        if self.scoring not in SCORING_NAMES:
            raise AttnInputError(f"unknown scoring {self.scoring!r}.")
        if self.mask not in MASK_KINDS:
            raise AttnInputError(f"unknown mask {self.mask!r}.")
        if self.normalizer not in NORMALIZER_NAMES:
            raise AttnInputError(f"unknown normaliser {self.normalizer!r}.")
        if self.dtype not in DTYPES:
            raise AttnInputError(f"unknown dtype {self.dtype!r}.")
        if not (math.isfinite(self.temperature) and self.temperature > 0):
            raise AttnInputError("the temperature must be a positive number.")
        if not (math.isfinite(self.input_std) and self.input_std > 0):
            raise AttnInputError("the input std must be a positive number.")
        if self.mask == "padding2d":
            check_row_lengths(self.valid_lens_rows)
        item = 8 if self.dtype == "float64" else 4
        pool = float(POOL_LEN) * ((self.heads + self.kv_heads) * self.d_k + self.kv_heads * VALUE_DIM)
        check_bytes(pool * item * 2,
                    f"the input pool ({self.heads} query heads x {POOL_LEN} x d_k = {self.d_k:,})",
                    "Lower d_k or the number of heads.")
        cells = self.heads * self.L * self.S
        check_limit(cells, MAX_ATTENTION_CELLS, "heads × L × S", "cells (about 320 MB for all stages)",
                    "Reduce the heads or the lengths.")
        if self.scoring == "additive":
            check_limit(cells * ADDITIVE_HIDDEN, MAX_ADDITIVE_OPS,
                        f"heads × L × S × {ADDITIVE_HIDDEN} hidden units for additive scoring",
                        "tanh evaluations, to answer within about a second",
                        "Reduce heads or lengths, or use a dot-product scoring.")

    def scale(self) -> float:
        return default_scale(self.scoring, self.d_k)


def draw_pool(spec: SyntheticSpec, device: str | torch.device = "cpu") -> QKV:
    """Unit Gaussian inputs at the longest length, for :func:`synthetic_stages` to slice.

    query (1, H, POOL_LEN, E), key (1, Hkv, POOL_LEN, E), value (1, Hkv, POOL_LEN, VALUE_DIM),
    in float64 for ``spec.dtype == "float64"``, else float32. Depends only on
    ``heads, kv_heads, d_k, seed, dtype``: slicing a prefix keeps the first rows
    fixed, so growing L or S adds queries and keys without redrawing the others.
    """
    sample = sampling_dtype(spec.dtype)
    return gaussian_qkv(heads=spec.heads, kv_heads=spec.kv_heads, L=POOL_LEN, S=POOL_LEN,
                        d_k=spec.d_k, d_v=VALUE_DIM, std=1.0, seed=spec.seed,
                        device=torch.device(device), dtype=sample)


def _inputs(spec: SyntheticSpec, dev: torch.device, pool: QKV | None) -> QKV:
    """The first L (S) rows of the pool times ``input_std``, in ``spec.dtype``: (1, H or Hkv, L or S, ·)."""
    if max(spec.L, spec.S) > POOL_LEN:
        raise AttnInputError(f"L and S are limited to {POOL_LEN} on this view.")
    dtype = DTYPES[spec.dtype]
    pool = draw_pool(spec, dev) if pool is None else pool
    std = spec.input_std
    return QKV(query=(pool.query[..., : spec.L, :] * std).to(dtype),
               key=(pool.key[..., : spec.S, :] * std).to(dtype),
               value=(pool.value[..., : spec.S, :] * std).to(dtype))


def synthetic_stages(
    spec: SyntheticSpec, device: str | torch.device = "cpu", pool: QKV | None = None
) -> AttentionStages:
    """Gaussian Q, K, V per ``spec`` pushed through attention, every stage kept.

    Q, K, V are the first L (S) rows of :func:`draw_pool` (pass ``pool`` to reuse
    one), times ``spec.input_std``, cast to ``spec.dtype``. Returns
    :class:`AttentionStages` with tensors ``(H, L, S)`` (output ``(H, L, VALUE_DIM)``)
    on ``device``, in float32 for half dtypes, else in ``spec.dtype``.
    """
    spec.validate()
    if max(spec.L, spec.S) > POOL_LEN:
        raise AttnInputError(f"L and S are limited to {POOL_LEN} on this view.")
    dev = torch.device(device)
    qkv = _inputs(spec, dev, pool)
    scorer = None
    if spec.scoring == "additive":
        scorer = AdditiveScorer.init(spec.d_k, spec.d_k, ADDITIVE_HIDDEN,
                                     generator=make_generator(spec.seed + 1), device=dev)
    attn_mask: Tensor | None = None
    valid_lens = window = None
    is_causal = False
    if spec.mask == "causal":
        is_causal = True
    elif spec.mask == "window":
        window = max(1, int(spec.window))
    elif spec.mask == "padding":
        valid_lens = torch.tensor([max(0, min(int(spec.valid_len), spec.S))], device=dev)
    elif spec.mask == "blocks":
        attn_mask = block_diagonal_mask(spec.L, spec.S, max(1, int(spec.block)), dev)
    elif spec.mask == "padding2d":
        valid_lens = row_valid_lens(spec.valid_lens_rows, spec.L, dev)
    norm = get_normalizer(spec.normalizer, s=spec.ssmax_s) if spec.normalizer == "ssmax" \
        else get_normalizer(spec.normalizer)
    st = attention_stages(
        qkv.query, qkv.key, qkv.value, attn_mask=attn_mask, is_causal=is_causal,
        scale=spec.scale(), enable_gqa=spec.kv_heads != spec.heads, valid_lens=valid_lens,
        window=window, normalizer=norm, scorer=scorer, temperature=spec.temperature,
    )
    allowed = None if st.allowed is None else st.allowed.expand(st.weights.shape)[0]
    return AttentionStages(raw=st.raw[0], scaled=st.scaled[0], masked=st.masked[0],
                           allowed=allowed, weights=st.weights[0], output=st.output[0],
                           scale=st.scale)


MAX_ROW_LENGTHS = 64  # entries of the per-query valid-length pattern


def check_row_lengths(lengths: tuple[int, ...]) -> None:
    """Raise :class:`AttnInputError` unless ``lengths`` holds 1 to 64 whole numbers in [0, POOL_LEN]."""
    if not 1 <= len(lengths) <= MAX_ROW_LENGTHS:
        raise AttnInputError(f"give 1 to {MAX_ROW_LENGTHS} valid lengths; got {len(lengths)}.")
    for v in lengths:
        if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= POOL_LEN:
            raise AttnInputError(f"valid lengths must be whole numbers from 0 to {POOL_LEN}; got {v!r}.")


def parse_row_lengths(text: str) -> tuple[int, ...]:
    """``"1, 3 2,4"`` -> ``(1, 3, 2, 4)``; anything else raises :class:`AttnInputError` in plain words."""
    items = [t for t in text.replace(",", " ").split() if t]
    try:
        lengths = tuple(int(t) for t in items)
    except ValueError:
        raise AttnInputError(
            f"valid lengths must be whole numbers separated by commas (e.g. 1, 3, 2, 4); got {text[:80]!r}."
        ) from None
    check_row_lengths(lengths)
    return lengths


def row_valid_lens(lengths: tuple[int, ...], L: int, device: torch.device | str = "cpu") -> Tensor:
    """d2l's 2-D ``valid_lens`` (1, L): query ``i`` sees keys ``j < lengths[i % len(lengths)]``."""
    check_row_lengths(lengths)
    pattern = torch.tensor(lengths, dtype=torch.long, device=device)
    return pattern[torch.arange(L, device=device) % len(lengths)][None, :]  # (1, L)


DROPOUT_DRAW_CELLS = 1 << 25  # draws x L x S of one dropout view (~0.5 s on 2 CPU cores)
MAX_DROPOUT_DRAWS = 400


def dropout_draw_count(L: int, S: int) -> int:
    """Draws of the dropout view: as many as fit :data:`DROPOUT_DRAW_CELLS`, between 16 and 400."""
    return int(min(MAX_DROPOUT_DRAWS, max(16, DROPOUT_DRAW_CELLS // max(1, L * S))))


def synthetic_dropout(
    spec: SyntheticSpec, p: float, head: int, device: str | torch.device = "cpu", pool: QKV | None = None
) -> DropoutDraws:
    """Dropout (training mode) on head ``head`` of :func:`synthetic_stages`: seeded draws.

    The weights (L, S) before dropout are the stages' weights; each of
    :func:`dropout_draw_count` draws drops them (seed ``spec.seed + 2``) and mixes the head's
    values (S, Ev) (its key/value head under GQA). Returns :class:`DropoutDraws` with the
    no-dropout output, the mean over draws and the closed-form std of one draw, each (L, Ev).
    """
    if not 0 <= head < spec.heads:
        raise AttnInputError(f"head must be between 0 and {spec.heads - 1}; got {head}.")
    dev = torch.device(device)
    stages = synthetic_stages(spec, dev, pool)
    w = stages.weights[head]  # (L, S)
    value = _inputs(spec, dev, pool).value[0, head // (spec.heads // spec.kv_heads)].to(w.dtype)  # (S, Ev)
    return dropout_draws(w, value, p, dropout_draw_count(spec.L, spec.S), seed=spec.seed + 2)


@dataclass(frozen=True)
class RowStats:
    """Per-query statistics of one head, each ``(L,)``."""

    entropy: Tensor
    max_weight: Tensor
    row_sum: Tensor
    visible: Tensor  # keys the query may see


def row_stats(weights: Tensor, allowed: Tensor | None) -> RowStats:
    """Entropy (nats), max weight, row sum and visible-key count per row of ``weights`` (L, S)."""
    if allowed is None:
        visible = torch.full(weights.shape[:-1], weights.shape[-1], device=weights.device)
    else:
        visible = allowed.expand(weights.shape).sum(-1)
    return RowStats(entropy=entropy(weights), max_weight=max_weight(weights),
                    row_sum=row_sum(weights), visible=visible)


def float16_overflow(raw: Tensor) -> int:
    """How many raw scores would be ±inf if they were stored in float16.

    float16's largest finite value is 65504, but round-to-nearest maps everything
    below 65520 (half an ulp above it) back to 65504; from |x| >= 65520 on it is ±inf.
    """
    return int((raw.abs() >= _FLOAT16_OVERFLOW).sum())


# Midpoint between float16's max (65504) and the next power of two (65536): the
# round-to-nearest-even overflow threshold.
_FLOAT16_OVERFLOW = torch.finfo(torch.float16).max + 16.0
