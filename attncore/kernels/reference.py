"""What a kernel's output is compared with: attncore's float64 attention on a sample of query
rows (fully masked rows always included), and the online softmax the fused kernels follow,
written out step by step as the Kernels page states it (:func:`online_softmax_attention`)."""

from __future__ import annotations

import math

import torch
from torch import Tensor

from attncore.attention import attention
from attncore.errors import AttnInputError
from attncore.kernels.spec import KernelInputs, KernelSpec

__all__ = ["REF_CELLS", "online_softmax_attention", "reference", "reference_error", "reference_rows"]

# float64 reference cells per comparison: the reference is computed on a sample of query rows.
REF_CELLS = 1 << 23


def reference_rows(spec: KernelSpec, L: int, S: int, masked: list[int]) -> list[int]:
    """The query rows compared: all of them up to :data:`REF_CELLS` reference cells, else an evenly
    spread sample; the fully masked rows ``masked`` always."""
    n = int(min(L, max(8, REF_CELLS // max(1, spec.batch * spec.heads * S))))
    rows = {round(i * (L - 1) / max(1, n - 1)) for i in range(n)} if n < L else set(range(L))
    return sorted(rows | set(masked))


def reference(x: KernelInputs, rows: list[int]) -> Tensor:
    """attncore's float64 output for the query rows ``rows``: (B, H, len(rows), E)."""
    idx = torch.tensor(rows, dtype=torch.long, device=x.query.device)
    q = x.query.index_select(-2, idx).double()
    S = x.key.shape[-2]
    mask = None if x.attn_mask is None else x.attn_mask.index_select(0, idx)
    if mask is not None and mask.dtype.is_floating_point:
        mask = mask.double()
    if x.is_causal:  # row i of the full causal mask: keys j <= i
        causal = torch.arange(S, device=idx.device)[None, :] <= idx[:, None]  # (rows, S)
        mask = causal if mask is None else mask & causal
    out = attention(q, x.key.double(), x.value.double(), mask, enable_gqa=x.enable_gqa)
    assert isinstance(out, Tensor)
    return out


def reference_error(
    out: Tensor, x: KernelInputs, rows: list[int] | None = None, ref: Tensor | None = None
) -> tuple[float, float | None, int, int]:
    """Compare an output (B, H, L, E) with attncore's float64 reference on ``rows`` (default all).

    ``ref`` (B, H, len(rows), E) is that reference when the caller already has it.

    Returns:
        ``(max_err, masked_err, nonfinite_rows, rows_compared)``: the largest |difference| over
        finite entries, the largest |out| on fully masked rows (NaN if any is NaN; None when
        none is compared), the number of compared rows with a non-finite entry, and the
        number of rows compared.
    """
    L = out.shape[-2]
    rows = list(range(L)) if rows is None else rows
    ref = reference(x, rows) if ref is None else ref  # (B, H, R, E)
    got = out.index_select(-2, torch.tensor(rows, dtype=torch.long, device=out.device)).double()
    finite = torch.isfinite(got)
    diff = (got - ref).abs().where(finite, torch.zeros((), dtype=torch.float64, device=got.device))
    bad_rows = int((~finite).reshape(-1, len(rows), got.shape[-1]).any(dim=(0, 2)).sum())
    masked_set = set(x.masked_rows.tolist())
    masked = [i for i, r in enumerate(rows) if r in masked_set]
    masked_err: float | None = None
    if masked:
        m = got[..., masked, :].abs()
        masked_err = float("nan") if not bool(torch.isfinite(m).all()) else float(m.max())
    return float(diff.max()), masked_err, bad_rows, len(rows)


def online_softmax_attention(query: Tensor, key: Tensor, value: Tensor, block: int = 64,
                             final_division: bool = True) -> Tensor:
    """softmax(QK^T/sqrt(E))V by the fused kernels' online softmax, one key block at a time.

    For each block of keys ``j`` with scores ``s_ij = q_i·k_j/sqrt(E)``::

        m_i <- max(m_i, max_j s_ij)
        l_i <- l_i·exp(m_old - m_i) + sum_j exp(s_ij - m_i)
        o_i <- o_i·exp(m_old - m_i) + sum_j exp(s_ij - m_i)·v_j

    and after the last block ``o_i <- o_i / l_i``. No (L, S) matrix is formed: the largest
    temporary is one (..., L, block) block of scores.

    Args:
        query: (..., L, E); key, value: (..., S, E) (same leading dims).
        block: keys per block.
        final_division: False leaves out the last step (what the page's formula once did): the
            result is then the unnormalised sum, wrong by the factor ``l_i``.

    Returns:
        (..., L, E) in the query's dtype.
    """
    if block < 1:
        raise AttnInputError(f"block must be at least 1 key; got {block}.")
    if key.shape[-2] < 1:
        raise AttnInputError("the online softmax needs at least one key.")
    scale = 1.0 / math.sqrt(query.shape[-1])
    shape = (*query.shape[:-1], 1)
    m = torch.full(shape, float("-inf"), dtype=query.dtype, device=query.device)  # (..., L, 1)
    ell = torch.zeros(shape, dtype=query.dtype, device=query.device)  # (..., L, 1)
    o = torch.zeros_like(query)  # (..., L, E)
    for j in range(0, key.shape[-2], block):
        s = query @ key[..., j:j + block, :].transpose(-2, -1) * scale  # (..., L, block)
        m_new = torch.maximum(m, s.amax(-1, keepdim=True))
        shrink = torch.exp(m - m_new)
        p = torch.exp(s - m_new)  # (..., L, block)
        ell = ell * shrink + p.sum(-1, keepdim=True)
        o = o * shrink + p @ value[..., j:j + block, :]
        m = m_new
    return o / ell if final_division else o
