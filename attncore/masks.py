"""Boolean attention masks. ``True`` means the query may attend to the key.

Shape legend: ``B`` batch, ``L`` queries, ``S`` keys. Every builder creates its
tensor on the ``device`` it is given; combine masks with :func:`combine`.
"""

from __future__ import annotations

import math
from numbers import Real

import torch
from torch import Tensor

from attncore.budget import check_bytes
from attncore.errors import AttnInputError

__all__ = [
    "MASK_KINDS",
    "block_diagonal_mask",
    "causal_mask",
    "combine",
    "float_to_bool",
    "sliding_window_mask",
    "valid_lens_mask",
]

# "padding": one valid length per sequence (d2l's 1-D valid_lens); "padding2d": one per query
# (d2l's 2-D valid_lens, shape (B, L)).
MASK_KINDS: tuple[str, ...] = ("none", "causal", "padding", "window", "blocks", "padding2d")


def causal_mask(L: int, S: int, device: torch.device | str | None = None) -> Tensor:
    """Lower-triangular ``(L, S)`` mask aligned top-left, as torch's ``is_causal``.

    Query ``i`` sees keys ``0..i``. With ``L != S`` the diagonal starts at the
    top-left corner (torch's convention), not the bottom-right.
    """
    _check_sizes(L, S, 2)
    return torch.ones(L, S, dtype=torch.bool, device=device).tril(diagonal=0)


def sliding_window_mask(
    L: int, S: int, window: int, device: torch.device | str | None = None
) -> Tensor:
    """Causal sliding window ``(L, S)``: query ``i`` sees keys ``i-window+1 .. i``.

    ``window >= 1``. A window of at least ``L`` keys equals :func:`causal_mask`
    (so does ``window >= S`` when ``L <= S``); with ``L > S`` a window of ``S``
    still hides the early keys from queries ``i >= S``.
    """
    _check_sizes(L, S, 5)
    if isinstance(window, bool) or not isinstance(window, Real) or not math.isfinite(window) \
            or window < 1:
        raise AttnInputError(f"the sliding window must be at least 1 key; got {window}.")
    w = min(int(window), int(L) + int(S))  # any wider window is the causal mask
    return causal_mask(L, S, device) & ~torch.ones(
        L, S, dtype=torch.bool, device=device
    ).tril(diagonal=-w)


def block_diagonal_mask(
    L: int, S: int, block: int, device: torch.device | str | None = None
) -> Tensor:
    """Packed-documents mask ``(L, S)``: query ``i`` sees keys in the same block of size ``block``.

    Models the "document packing" mask used when several sequences share one row.
    """
    _check_sizes(L, S, 1)
    if isinstance(block, bool) or not isinstance(block, Real) or not math.isfinite(block) \
            or block < 1:
        raise AttnInputError(f"the block size must be at least 1; got {block}.")
    size = min(int(block), max(int(L), int(S)))  # any larger block holds every position
    qi = torch.arange(L, device=device) // size
    kj = torch.arange(S, device=device) // size
    return qi[:, None] == kj[None, :]


def valid_lens_mask(valid_lens: Tensor, L: int, S: int, query_ndim: int) -> Tensor:
    """Padding mask from d2l's ``valid_lens``: key ``j`` is kept when ``j < valid_len``.

    ``valid_len = 0`` (or less) hides every key of the row. Lengths must be whole numbers
    (integer tensors, or floats with whole values); anything else raises
    :class:`AttnInputError` instead of being rounded.

    Args:
        valid_lens: ``(B,)`` one length per sequence, or ``(B, L)`` one per query.
        L, S: query and key lengths.
        query_ndim: ``query.dim()``; the batch dim ``B`` is the query's first dim.

    Returns:
        Boolean mask ``(B, 1, ..., 1, L or 1, S)`` with ``query_ndim`` dims, ready
        to broadcast against scores ``(B, ..., L, S)``.
    """
    if query_ndim < 3:
        raise AttnInputError(
            "valid_lens needs a batch dimension: query must be (B, ..., L, E)."
        )
    vl = torch.as_tensor(valid_lens)
    if vl.is_complex():
        raise AttnInputError("valid_lens must be whole numbers of keys; got complex numbers.")
    if vl.dtype.is_floating_point:
        whole = torch.isfinite(vl) & (vl == vl.round())
        if not bool(whole.all()):
            raise AttnInputError(f"valid_lens must be whole numbers of keys; got {vl[~whole][0].item():g}. "
                                 "A fraction of a key has no meaning, and attncore does not round it.")
    vl = vl.long()
    if vl.dim() in (1, 2):
        _check_sizes(L, S, 1)
        check_bytes(float(vl.shape[0]) * L * S, f"a ({vl.shape[0]}, {L}, {S}) padding mask",
                    "Use shorter sequences or a smaller batch.")
    if vl.dim() == 1:
        keep = torch.arange(S, device=vl.device)[None, :] < vl[:, None]  # (B, S)
        keep = keep[:, None, :]  # (B, 1, S)
    elif vl.dim() == 2:
        if vl.shape[1] != L:
            raise AttnInputError(
                f"valid_lens of shape (B, L) must have L = {L} columns; got {tuple(vl.shape)}."
            )
        keep = torch.arange(S, device=vl.device)[None, None, :] < vl[:, :, None]  # (B, L, S)
    else:
        raise AttnInputError(f"valid_lens must be (B,) or (B, L); got shape {tuple(vl.shape)}.")
    middle = [1] * (query_ndim - 3)
    return keep.reshape(keep.shape[0], *middle, keep.shape[1], S)


def float_to_bool(mask: Tensor) -> Tensor:
    """Boolean view of an additive float mask: ``-inf`` entries are disallowed."""
    return mask != float("-inf")


def combine(*masks: Tensor | None) -> Tensor | None:
    """Logical AND of boolean masks (broadcasting); ``None`` entries are skipped."""
    out: Tensor | None = None
    for m in masks:
        if m is None:
            continue
        if m.dtype != torch.bool:
            raise AttnInputError("only boolean masks can be combined.")
        out = m if out is None else out & m
    return out


def _check_sizes(L: int, S: int, bytes_per_cell: int = 1) -> None:
    """Whole positive lengths, and an (L, S) mask that fits the memory budget (checked before allocating)."""
    for name, v in (("L", L), ("S", S)):
        whole = hasattr(v, "__index__") or (isinstance(v, float) and v == v and abs(v) != float("inf")
                                              and v == int(v))
        if isinstance(v, bool) or not whole:
            raise AttnInputError(f"{name} must be a whole number of positions; got {v!r}.")
    if int(L) < 1 or int(S) < 1:
        raise AttnInputError(f"query and key lengths must be at least 1; got L={L}, S={S}.")
    check_bytes(float(L) * float(S) * bytes_per_cell, f"an ({L:,}, {S:,}) mask", "Use shorter sequences.")
