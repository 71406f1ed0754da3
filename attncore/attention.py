"""Materialised attention with the contract of ``torch.nn.functional.scaled_dot_product_attention``.

Shape legend: ``...`` leading dims (usually ``B, H``), ``L`` queries, ``S`` keys,
``E`` query/key dim, ``Ev`` value dim, ``Hq``/``Hkv`` query and key/value heads
(the third-from-last dim) under grouped-query attention.

Unlike torch's fused kernels this reference keeps every intermediate, so it can
return the weights and the stages that make them (raw, scaled and masked
scores). It is the plain reference that the fast paths in :mod:`attncore.sweeps`
are tested against, and it is itself tested against torch's SDPA.

Numerics: float16/bfloat16 inputs are scored and normalised in float32 (as fused
kernels accumulate) and the output and weights are cast back to the input dtype.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from attncore.errors import AttnInputError
from attncore.masks import causal_mask, combine, sliding_window_mask, valid_lens_mask
from attncore.normalizers import Normalizer, get_normalizer
from attncore.scoring import dot_scores

__all__ = ["AttentionStages", "attention", "attention_stages", "compute_dtype"]

Scorer = Callable[[Tensor, Tensor], Tensor]


@dataclass(frozen=True)
class AttentionStages:
    """Every stage of one attention call (tensors in :func:`compute_dtype` of the input).

    Attributes:
        raw: (..., L, S) scores ``a(q, k)`` before any scaling.
        scaled: (..., L, S) ``raw * scale / temperature``.
        masked: (..., L, S) ``scaled`` plus any float mask, ``-inf`` where a key is hidden.
        allowed: (..., L, S) boolean, broadcastable: True where the query may see the key;
            None when nothing is masked.
        weights: (..., L, S) normalised weights (after dropout, if any); hidden keys get 0.
        output: (..., L, Ev) ``weights @ value``.
        scale: the factor applied to ``raw`` (before the temperature).
    """

    raw: Tensor
    scaled: Tensor
    masked: Tensor
    allowed: Tensor | None
    weights: Tensor
    output: Tensor
    scale: float


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """float32 for half types (accumulate as fused kernels do), else the dtype itself."""
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


def _expand_gqa(query: Tensor, key: Tensor, value: Tensor) -> tuple[Tensor, Tensor]:
    if query.dim() < 3 or key.dim() < 3:
        raise AttnInputError("enable_gqa needs a heads dimension: tensors (..., H, L, E).")
    hq, hkv = query.shape[-3], key.shape[-3]
    if value.shape[-3] != hkv:
        raise AttnInputError("key and value must have the same number of heads.")
    if hq % hkv != 0:
        raise AttnInputError(
            f"grouped-query attention needs query heads ({hq}) to be a multiple of "
            f"key/value heads ({hkv})."
        )
    rep = hq // hkv
    return key.repeat_interleave(rep, dim=-3), value.repeat_interleave(rep, dim=-3)


def _check_shapes(query: Tensor, key: Tensor, value: Tensor, custom_scorer: bool) -> None:
    if query.dim() < 2 or key.dim() < 2 or value.dim() < 2:
        raise AttnInputError("query, key and value need at least 2 dims: (..., L, E).")
    if key.shape[-2] != value.shape[-2]:
        raise AttnInputError(
            f"key and value must have the same length S; got {key.shape[-2]} and "
            f"{value.shape[-2]}."
        )
    if not custom_scorer and query.shape[-1] != key.shape[-1]:
        raise AttnInputError(
            f"query and key dims differ ({query.shape[-1]} vs {key.shape[-1]})."
        )
    if query.shape[-1] < 1 or query.shape[-2] < 1 or key.shape[-2] < 1:
        raise AttnInputError("L, S and E must all be at least 1.")


def attention_stages(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attn_mask: Tensor | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
    *,
    valid_lens: Tensor | None = None,
    window: int | None = None,
    normalizer: str | Normalizer = "softmax",
    scorer: Scorer | None = None,
    temperature: float = 1.0,
    generator: torch.Generator | None = None,
) -> AttentionStages:
    """Attention with every intermediate kept; see :func:`attention` for the arguments.

    Extra arguments:
        scorer: ``(query, key) -> raw scores (..., L, S)``; default the dot product.
            With a custom scorer ``scale`` defaults to 1.
        temperature: the scaled scores are divided by it (> 0).
    """
    _check_shapes(query, key, value, scorer is not None)
    if not (0.0 <= dropout_p < 1.0):
        raise AttnInputError(f"dropout_p must be in [0, 1); got {dropout_p}.")
    if not (math.isfinite(temperature) and temperature > 0):
        raise AttnInputError(f"the temperature must be a positive number; got {temperature}.")
    if window is not None and int(window) < 1:
        raise AttnInputError(f"the sliding window must be at least 1 key; got {window}.")
    norm = get_normalizer(normalizer)
    if enable_gqa:
        key, value = _expand_gqa(query, key, value)

    ct = compute_dtype(query.dtype)
    q, k, v = query.to(ct), key.to(ct), value.to(ct)
    L, S = q.shape[-2], k.shape[-2]
    if scale is None:
        scale = 1.0 / math.sqrt(q.shape[-1]) if scorer is None else 1.0
    if not math.isfinite(scale):
        raise AttnInputError(f"scale must be finite; got {scale}.")

    raw = dot_scores(q, k) if scorer is None else scorer(q, k)  # (..., L, S)
    scaled = raw * (scale / temperature)

    bool_mask = float_mask = None
    if attn_mask is not None:
        attn_mask = attn_mask.to(q.device)
        if attn_mask.dtype == torch.bool:
            bool_mask = attn_mask
        elif attn_mask.dtype.is_floating_point:
            float_mask = attn_mask.to(ct)
        else:
            raise AttnInputError(
                f"attn_mask must be boolean (True = may attend) or floating point (added to the "
                f"scores); got {attn_mask.dtype}. Convert a 0/1 keep-mask with mask.bool()."
            )
    structural = None
    if is_causal or window is not None:
        structural = (
            sliding_window_mask(L, S, int(window), q.device)
            if window is not None
            else causal_mask(L, S, q.device)
        )
    pad = None
    if valid_lens is not None:
        pad = valid_lens_mask(torch.as_tensor(valid_lens).to(q.device), L, S, q.dim())
    allowed = combine(bool_mask, structural, pad)  # (..., L, S) broadcastable

    masked = scaled if float_mask is None else scaled + float_mask
    if allowed is not None:
        masked = masked.masked_fill(~allowed, float("-inf"))
    weights = norm(masked, allowed)  # (..., L, S)
    if dropout_p > 0.0:
        rng_device = weights.device if generator is None else generator.device
        keep = torch.rand(weights.shape, generator=generator, device=rng_device) >= dropout_p
        keep = keep.to(weights.device)  # (..., L, S)
        weights = weights * keep / (1.0 - dropout_p)
    output = weights @ v  # (..., L, Ev)
    return AttentionStages(
        raw=raw,
        scaled=scaled,
        masked=masked,
        allowed=allowed,
        weights=weights,
        output=output,
        scale=float(scale),
    )


def attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attn_mask: Tensor | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
    *,
    valid_lens: Tensor | None = None,
    window: int | None = None,
    normalizer: str | Normalizer = "softmax",
    return_weights: bool = False,
    generator: torch.Generator | None = None,
) -> Tensor | tuple[Tensor, Tensor]:
    """Scaled dot-product attention, the same function as torch's SDPA plus weights and masks.

    Fully masked rows (a query that may see no key) are the one place where torch's SDPA
    kernels disagree: the math and memory-efficient kernels return a zero output, as
    attncore does, but the fused cuDNN kernel on CUDA (float16/bfloat16) returns a non-zero
    output for such a row. "The same function" holds everywhere else.

    Args:
        query: (..., L, E); with ``enable_gqa`` (..., Hq, L, E).
        key: (..., S, E); with ``enable_gqa`` (..., Hkv, S, E).
        value: (..., S, Ev); with ``enable_gqa`` (..., Hkv, S, Ev).
        attn_mask: broadcastable to (..., L, S). Boolean: True = may attend.
            Float: added to the scaled scores (``-inf`` hides a key).
        dropout_p: dropout probability applied to the weights (uses ``generator``).
        is_causal: lower-triangular mask aligned top-left, as torch's ``is_causal``;
            may be combined with ``attn_mask``.
        scale: factor on ``q·k``; default ``1/sqrt(E)``.
        enable_gqa: share each key/value head with ``Hq/Hkv`` query heads.
        valid_lens: (B,) or (B, L) padding lengths with d2l's meaning: keys at
            positions ``>= valid_len`` get weight 0. ``B`` is the query's first dim. Whole
            numbers only (a fraction raises :class:`AttnInputError`). Where they differ:
            for ``valid_len = 0`` attncore gives zero weights and a zero output, like
            torch's SDPA on the CPU, whereas d2l's ``masked_softmax`` (the "Attention
            Scoring Functions" chapter) masks with ``-1e6`` instead of ``-inf`` and so
            gives that row uniform weights ``1/S``.
        window: causal sliding window; query ``i`` sees keys ``i-window+1 .. i``.
        normalizer: ``"softmax"``, ``"softmax1"``, ``"ssmax"``, ``"sigmoid"`` or a
            :class:`~attncore.normalizers.Normalizer`.
        return_weights: also return the weights (..., L, S).
        generator: random source for dropout (it may live on another device than the inputs).

    Returns:
        output (..., L, Ev) in the query's dtype and device, or ``(output, weights)``
        with weights (..., L, S) when ``return_weights``. A query that may see no key
        gets zero weights and a zero output (see the note on fully masked rows above).
    """
    st = attention_stages(
        query,
        key,
        value,
        attn_mask,
        dropout_p,
        is_causal,
        scale,
        enable_gqa,
        valid_lens=valid_lens,
        window=window,
        normalizer=normalizer,
        generator=generator,
    )
    out = st.output.to(query.dtype)
    if return_weights:
        return out, st.weights.to(query.dtype)
    return out
