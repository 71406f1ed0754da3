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
from numbers import Real

import torch
from torch import Tensor

from attncore.budget import check_bytes
from attncore.errors import AttnInputError
from attncore.masks import causal_mask, combine, sliding_window_mask, valid_lens_mask
from attncore.normalizers import Normalizer, get_normalizer
from attncore.scoring import dot_scores

__all__ = ["MAX_LOGIT_FACTOR", "AttentionStages", "attention", "attention_stages", "compute_dtype",
           "estimate_attention_bytes"]

# |scale / temperature| above this turns any ordinary score into inf (and the weights into NaN)
MAX_LOGIT_FACTOR = 1e6

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


def _check_tensor(x: object, name: str) -> Tensor:
    """A floating-point torch tensor, or a plain AttnInputError saying what was given."""
    if not isinstance(x, Tensor):
        raise AttnInputError(f"{name} must be a torch.Tensor; got {type(x).__name__}. Convert it with "
                             "torch.as_tensor(x, dtype=torch.float32).")
    if x.is_complex() or not x.dtype.is_floating_point:
        raise AttnInputError(f"{name} must hold floating-point numbers; got {x.dtype}. Convert it with "
                             f"{name}.float().")
    return x


def _batch_shape(query: Tensor, key: Tensor, value: Tensor, enable_gqa: bool) -> torch.Size:
    """The broadcast leading dims (..., H) of the scores, or a plain error when they do not match."""
    kq, vq = list(key.shape[:-2]), list(value.shape[:-2])
    if enable_gqa:
        hq, hkv = query.shape[-3], key.shape[-3]
        if value.shape[-3] != hkv:
            raise AttnInputError("key and value must have the same number of heads.")
        if hq % hkv != 0:
            raise AttnInputError(f"grouped-query attention needs query heads ({hq}) to be a multiple of "
                                 f"key/value heads ({hkv}).")
        kq[-1] = vq[-1] = hq
    try:
        return torch.broadcast_shapes(query.shape[:-2], torch.Size(kq), torch.Size(vq))
    except RuntimeError:
        raise AttnInputError(
            f"the batch and head dims of query {tuple(query.shape[:-2])}, key {tuple(key.shape[:-2])} and "
            f"value {tuple(value.shape[:-2])} do not match (or broadcast). With fewer key/value heads "
            "than query heads pass enable_gqa=True."
        ) from None


def estimate_attention_bytes(batch: int, L: int, S: int, E: int, Ev: int, dtype: torch.dtype,
                             dropout: bool = False) -> float:
    """Peak bytes of :func:`attention_stages`: every (..., L, S) stage kept, plus inputs and output.

    ``batch`` is the product of the broadcast leading dims. Stages: raw, scaled, masked, weights
    and ~2 normaliser temporaries in the compute dtype, ~2 boolean masks, dropout's draws.
    """
    item = torch.tensor([], dtype=compute_dtype(dtype)).element_size()
    cells = float(batch) * L * S
    per_cell = 6 * item + 2 + (5 if dropout else 0)
    return cells * per_cell + float(batch) * (L * E + S * (E + Ev) + L * Ev) * item * 2


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
    for x, name in ((query, "query"), (key, "key"), (value, "value")):
        _check_tensor(x, name)
    if not (key.device == query.device == value.device):
        raise AttnInputError(f"query, key and value must be on one device; got {query.device}, {key.device} "
                             f"and {value.device}.")
    _check_shapes(query, key, value, scorer is not None)
    if enable_gqa and (query.dim() < 3 or key.dim() < 3):
        raise AttnInputError("enable_gqa needs a heads dimension: tensors (..., H, L, E).")
    batch_shape = _batch_shape(query, key, value, enable_gqa)
    if not (isinstance(dropout_p, Real) and 0.0 <= dropout_p < 1.0):
        raise AttnInputError(f"dropout_p must be in [0, 1); got {dropout_p}.")
    if not (isinstance(temperature, Real) and math.isfinite(temperature) and temperature > 0):
        raise AttnInputError(f"the temperature must be a positive number; got {temperature}.")
    if window is not None and (isinstance(window, bool) or not isinstance(window, Real)
                               or not math.isfinite(window) or window < 1 or window != int(window)):
        raise AttnInputError(f"the sliding window must be a whole number, at least 1 key; got {window}.")
    if scale is not None:
        if isinstance(scale, bool) or not isinstance(scale, Real) or not math.isfinite(scale):
            raise AttnInputError(f"scale must be finite; got {scale}.")
        if abs(scale / temperature) > MAX_LOGIT_FACTOR:
            raise AttnInputError(f"scale / temperature = {scale / temperature:.3g} would turn every score "
                                 f"into ±inf; use a factor of at most {MAX_LOGIT_FACTOR:g} in magnitude.")
    if valid_lens is not None:
        vl = torch.as_tensor(valid_lens)
        if query.dim() >= 3 and vl.dim() >= 1 and vl.shape[0] != query.shape[0]:
            raise AttnInputError(f"valid_lens must have one entry (or row) per batch element: the query's "
                                 f"batch is {query.shape[0]}, valid_lens has shape {tuple(vl.shape)}.")
    norm = get_normalizer(normalizer)
    L, S = query.shape[-2], key.shape[-2]
    check_bytes(estimate_attention_bytes(math.prod(batch_shape), L, S, query.shape[-1], value.shape[-1],
                                         query.dtype, dropout_p > 0),
                f"attention over {math.prod(batch_shape):,} x {L:,} x {S:,} scores (all stages kept)",
                "Use shorter sequences, fewer heads or a smaller batch.")
    if enable_gqa:
        key, value = _expand_gqa(query, key, value)

    ct = compute_dtype(query.dtype)
    q, k, v = query.to(ct), key.to(ct), value.to(ct)
    if scale is None:
        scale = 1.0 / math.sqrt(q.shape[-1]) if scorer is None else 1.0
        if abs(scale / temperature) > MAX_LOGIT_FACTOR:
            raise AttnInputError(f"1 / temperature = {1 / temperature:.3g} would turn every score into ±inf; "
                                 "use a larger temperature.")

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
