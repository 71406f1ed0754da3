"""Streaming reduction of logit tiles into per-row sums, and the per-row / per-length statistics.

The online max / log-sum-exp rescaling of FlashAttention (Dao et al. 2022): per row (of
``L`` query rows) we keep the running max ``m``, ``s0 = sum e^{x-m}``,
``s1 = sum (x-m) e^{x-m}``, ``s2 = sum e^{2(x-m)}`` and ``o = sum e^{x-m} v`` ``(L, Ev)``.
When a new block raises the max from ``m`` to ``m'`` the old sums are multiplied by
``e^{m-m'}`` (``s2`` by its square, and ``s1`` also gains ``(m-m') s0``). From these, at
any length: entropy ``H = log s0 - s1/s0``, max weight ``1/s0``, ``sum p^2 = s2/s0^2`` and
the output ``o/s0``. Tiles are ``(Lt, K)``: ``Lt`` rows by ``K`` keys of one block.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import torch
from torch import Tensor

from attncore.sweeps.spec import COLUMNS, SweepSpec

__all__ = ["EXP_FLOOR", "VALUE_BATCHES", "Acc", "Reducer", "batch_outputs", "exp_into", "frame", "merge_into",
           "new_acc", "output_ms_sem", "row_stats", "summarise"]

LOG2E = 1.0 / math.log(2.0)
# Shifted logits below this are raised to it before exp: torch's float32 exp on the CPU takes
# ~40 ns instead of ~0.3 ns per element once its result underflows (x < -87.3), which made
# sweeps with wide logit ranges (unscaled, low temperature, large d) up to 100x slower. A key
# at -87 adds e^-87 = 1.6e-38 (and -87 e^-87 to s1) against s0 >= 1: far below float64 epsilon.
EXP_FLOOR = -87.0


def exp_into(x: Tensor, e: Tensor) -> Tensor:
    """``e = exp(x)`` as ``exp2(x log2 e)``: two passes at ~0.4 ns per element against ~0.83 ns for
    torch's float32 ``exp`` on one CPU core (the sweeps' largest cost after drawing; both are within
    about an ulp, and the argument's extra rounding is ~1e-7 relative for the |x| <= 87 used here).
    """
    torch.mul(x, LOG2E, out=e)
    return torch.exp2(e, out=e)

# The vectors method's output is kept in this many batches of keys (the torch engine: key j in
# batch j mod 8; the fused kernels: program p of a launch in batch p mod 8). Given the weights the
# batches' outputs are independent (disjoint values), which is what the output's standard error
# rests on (:func:`output_ms_sem`).
VALUE_BATCHES = 8


@dataclass
class Acc:
    """Streaming sums for one segment of keys, per row, float64.

    softmax family: ``m`` running max, ``a`` = s0, ``b`` = s1, ``c`` = s2 (relative to m);
    sigmoid: ``m`` max weight, ``a`` = sum w, ``b`` = sum w log w, ``c`` = sum w^2.
    ``o`` (L, B, Ev): the unnormalised output per batch of keys (vectors method) or None, and
    ``cb`` (L, B) the batches' shares of ``c``. ``B`` = :data:`VALUE_BATCHES`.
    """

    m: Tensor
    a: Tensor
    b: Tensor
    c: Tensor
    o: Tensor | None = None
    cb: Tensor | None = None
    empty: bool = True
    filled: list[tuple[int, int]] = field(default_factory=list)  # row ranges merged into so far


def new_acc(rows: int, dv: int | None, device: torch.device, sigmoid: bool) -> Acc:
    """Empty sums for ``rows`` rows (and per-batch outputs ``(rows, B, dv)`` when ``dv`` is given)."""
    f64 = torch.float64
    start = 0.0 if sigmoid else float("-inf")
    B = VALUE_BATCHES
    return Acc(m=torch.full((rows,), start, dtype=f64, device=device),
                a=torch.zeros(rows, dtype=f64, device=device), b=torch.zeros(rows, dtype=f64, device=device),
                c=torch.zeros(rows, dtype=f64, device=device),
                o=None if dv is None else torch.zeros(rows, B, dv, dtype=f64, device=device),
                cb=None if dv is None else torch.zeros(rows, B, dtype=f64, device=device))


def merge_into(dst: Acc, src: Acc, sigmoid: bool, rows: slice = slice(None)) -> None:
    """dst[rows] <- dst[rows] (+) src, in place (src covers the rows ``rows`` of dst)."""
    if src.empty:
        return
    lo, hi, _ = rows.indices(dst.m.shape[0])
    if not any(a < hi and lo < b for a, b in dst.filled):
        # nothing merged into these rows yet: the merge below would return src itself, to the bit
        # (max(-inf, m) = m, weights 0 and e^0 = 1), so copy it (a block partial meets an empty
        # lane's sums in most flushes; ~4 small calls instead of ~20)
        dst.m[rows], dst.a[rows], dst.b[rows], dst.c[rows] = src.m, src.a, src.b, src.c
        if dst.o is not None and src.o is not None and dst.cb is not None and src.cb is not None:
            dst.o[rows], dst.cb[rows] = src.o, src.cb
        dst.filled.append((lo, hi))
        dst.empty = False
        return
    dst.filled.append((lo, hi))
    if sigmoid:
        dst.m[rows] = torch.maximum(dst.m[rows], src.m)
        dst.a[rows] += src.a
        dst.b[rows] += src.b
        dst.c[rows] += src.c
        if dst.o is not None and src.o is not None and dst.cb is not None and src.cb is not None:
            dst.o[rows] += src.o
            dst.cb[rows] += src.cb
        dst.empty = False
        return
    m0 = dst.m[rows]
    m = torch.maximum(m0, src.m)
    live0 = dst.a[rows] > 0
    al0 = torch.where(live0, torch.exp(m0 - m), torch.zeros_like(m))
    al1 = torch.exp(src.m - m)
    b0 = torch.where(live0, dst.b[rows] + (m0 - m) * dst.a[rows], torch.zeros_like(m))
    dst.b[rows] = al0 * b0 + al1 * (src.b + (src.m - m) * src.a)
    dst.a[rows] = al0 * dst.a[rows] + al1 * src.a
    dst.c[rows] = al0 * al0 * dst.c[rows] + al1 * al1 * src.c
    if dst.o is not None and src.o is not None and dst.cb is not None and src.cb is not None:
        dst.o[rows] = al0[:, None, None] * dst.o[rows] + al1[:, None, None] * src.o
        dst.cb[rows] = (al0 * al0)[:, None] * dst.cb[rows] + (al1 * al1)[:, None] * src.cb
    dst.m[rows] = m
    dst.empty = False


class Reducer:
    """Reduces tiles of logits into float32 per-block partial sums; owns the scratch buffers.

    A tile's logits x (Lt, K) and their exponentials e live in one buffer ``[x; e]``
    (2 Lt, K). Each row is shifted by its own tile maximum, so a tile needs nothing from the
    running sums; ``sum e``, ``sum x e`` and ``sum e^2`` are three row-wise reductions (one
    GEMM ``e @ [x; e; 1]^T`` measured 2.4x slower than the three on one core for 4-row tiles),
    and the block partial (per row: max, s0, s1, s2, output) is merged into the float64
    accumulator once per block and segment by :func:`merge_into`.
    """

    def __init__(self, spec: SweepSpec, rt: int, block: int, device: torch.device, dtype: torch.dtype):
        self.sigmoid = spec.normalizer == "sigmoid"
        self.rt = rt
        self.y = torch.zeros(2 * rt, block, device=device, dtype=dtype)
        self.rows, self.dv, self.device, self.dtype = spec.queries, spec.value_dim, device, dtype
        self.vectors = spec.method == "vectors"
        self.parts: dict[Hashable, Tensor] = {}

    @property
    def x(self) -> Tensor:
        """Where the caller writes a tile's logits: (Lt, K)."""
        return self.y[: self.rt]

    def part(self, s: Hashable) -> Tensor:
        """The float32 partial of segment key s: (L, 4 + B Ev + B) = [max, s0, s1, s2, per-batch
        outputs (B, Ev), per-batch s2 (B)] (logits: the first 4)."""
        if s not in self.parts:
            width = 4 + ((self.dv + 1) * VALUE_BATCHES if self.vectors else 0)
            self.parts[s] = torch.zeros(self.rows, width, device=self.device, dtype=self.dtype)
        return self.parts[s]

    def add(self, s: Hashable, a: int, b: int, rt: int, mx: Tensor, values: Tensor | None, bias: float,
            r0: int, floor_needed: bool = True, sigmoid: bool | None = None,
            offset: Tensor | None = None, key0: int = 0) -> None:
        """Reduce columns [a, b) of the first ``rt`` logit rows (overwritten) into rows r0.. of part s.

        ``mx`` (Lt,): the rows' maxima over the columns, which the softmax family subtracts.
        ``values`` (b - a, Ev): the keys' values (vectors), their outputs kept per batch of keys;
        ``key0``: the index of key ``a`` in the row (key j belongs to batch j mod B).
        ``floor_needed=False`` promises that no shifted logit is below :data:`EXP_FLOOR`.
        ``sigmoid``: the normaliser family of this part (default: the spec's).
        ``offset`` (Lt,): what the logits were already shifted by (softmax family: the part's max
        is ``mx + offset``); None for unshifted logits.
        """
        sigmoid = self.sigmoid if sigmoid is None else sigmoid
        p = self.part(s)[r0: r0 + rt]
        x = self.y[:rt, a:b]
        e = self.y[self.rt: self.rt + rt, a:b]
        if sigmoid:
            x.add_(bias)  # x + b with b = -log n
            torch.sigmoid(x, out=e)
            torch.amax(e, dim=1, out=p[:, 0])
            torch.sum(e, dim=1, out=p[:, 1])
            torch.sum(torch.special.xlogy(e, e, out=x), dim=1, out=p[:, 2])
            torch.sum(torch.mul(e, e, out=x), dim=1, out=p[:, 3])
        else:
            p[:, 0] = mx if offset is None else mx + offset
            x.sub_(mx[:, None])  # x - max <= 0
            if self.vectors or floor_needed:
                x.clamp_(min=EXP_FLOOR)  # see EXP_FLOOR: keeps exp off its slow underflow path
            exp_into(x, e)
            torch.sum(e, dim=1, out=p[:, 1])
            p[:, 2] = torch.linalg.vecdot(x, e, dim=1)
            p[:, 3] = torch.linalg.vecdot(e, e, dim=1)
        if values is not None:
            B, Ev = VALUE_BATCHES, values.shape[1]
            o = p[:, 4: 4 + B * Ev].view(rt, B, Ev)
            for beta in range(B):
                first = (beta - key0) % B  # the first column of batch beta
                eb = e[:, first::B]
                o[:, beta] = eb @ values[first::B]
                p[:, 4 + B * Ev + beta] = torch.linalg.vecdot(eb, eb, dim=1)

    def add_segments(self, keys: Sequence[Hashable], bounds: Sequence[tuple[int, int]], rt: int, bias: float,
                     r0: int, floor_needed: bool = True, sigmoid: bool | None = None,
                     offset: Tensor | None = None) -> None:
        """:meth:`add` for many adjacent segments of one logit tile at once (logits only, no values).

        ``bounds[i] = (a, b)`` are contiguous column ranges of the first ``rt`` logit rows
        (overwritten); segment i goes to rows r0.. of part ``keys[i]``. Each segment is shifted
        by its own maximum, as :meth:`add` does, but the whole span is reduced by a handful of
        segmented torch calls instead of several calls per segment: a block that holds dozens of
        short lengths (every length up to 2^16 sits in the first block) costs about two blocks,
        not fifty. ``offset``: as in :meth:`add`.
        """
        sigmoid = self.sigmoid if sigmoid is None else sigmoid
        a0, b1 = bounds[0][0], bounds[-1][1]
        x = self.y[:rt, a0:b1]
        e = self.y[self.rt: self.rt + rt, a0:b1]
        sizes = torch.tensor([b - a for a, b in bounds], device=x.device)
        lens = sizes.expand(rt, -1)  # segment_reduce wants one length per row and segment
        ends = torch.cumsum(sizes, 0) - 1  # last column of each segment

        def seg(t: Tensor, how: str) -> Tensor:
            """Per-segment max, or sum (a float64 running sum differenced at the segment ends:
            as accurate as the one-segment path's float32 sums, unlike a sequential float32 one)."""
            if how == "max":
                return torch.segment_reduce(t, "max", lengths=lens, axis=1)  # (rt, S)
            c = torch.cumsum(t, dim=1, dtype=torch.float64)[:, ends]
            return torch.diff(c, dim=1, prepend=torch.zeros_like(c[:, :1])).to(t.dtype)

        if sigmoid:
            x.add_(bias)
            torch.sigmoid(x, out=e)
            stats = (seg(e, "max"), seg(e, "sum"), seg(torch.special.xlogy(e, e, out=x), "sum"),
                     seg(torch.mul(e, e, out=x), "sum"))
        else:
            m = seg(x, "max")
            x.sub_(torch.repeat_interleave(m, sizes, dim=1))  # each segment minus its own max
            if floor_needed:
                x.clamp_(min=EXP_FLOOR)
            exp_into(x, e)
            s0 = seg(e, "sum")
            s1 = seg(x.mul_(e), "sum")
            stats = (m if offset is None else m + offset[:, None], s0, s1, seg(torch.mul(e, e, out=x), "sum"))
        block = torch.stack(stats, dim=2)  # (rt, S, 4)
        for i, key in enumerate(keys):
            self.part(key)[r0: r0 + rt, :4] = block[:, i]

    def add_shifted(self, s: Hashable, zs: Tensor, std: Tensor, mx: Tensor, r0: int,
                    floor_needed: bool = True) -> None:
        """A whole tile of the ``logits`` method into rows r0.. of part s (softmax family).

        ``zs`` (Lt, K): the tile's unit draws shifted by their row maxima (``z - max z <= 0``,
        shared by every job of the tile, read only); ``std`` (Lt,): the rows' logit spreads;
        ``mx`` (Lt,): the rows' largest logits (``std * max z``). The shifted logits are
        ``std * zs``, so a job needs one multiply before its exponentials and no subtraction,
        and ``s1 = std * sum zs e``.
        """
        rt = zs.shape[0]
        p = self.part(s)[r0: r0 + rt]
        e = self.y[self.rt: self.rt + rt, : zs.shape[1]]
        torch.mul(zs, (std * LOG2E)[:, None], out=e)  # log2 of the weights
        if floor_needed:
            e.clamp_(min=EXP_FLOOR * LOG2E)  # see EXP_FLOOR
        torch.exp2(e, out=e)
        p[:, 0] = mx
        torch.sum(e, dim=1, out=p[:, 1])
        torch.mul(torch.linalg.vecdot(zs, e, dim=1), std, out=p[:, 2])
        torch.linalg.vecdot(e, e, dim=1, out=p[:, 3])

    def flush(self, s: Hashable, acc: Acc, rows: slice = slice(None), sigmoid: bool | None = None) -> None:
        """Merge rows ``rows`` of the block partial of segment key s into the float64 accumulator."""
        p = self.part(s)[rows].to(torch.float64)
        B = VALUE_BATCHES
        o = p[:, 4: 4 + B * self.dv].reshape(-1, B, self.dv) if self.vectors else None
        part = Acc(m=p[:, 0], a=p[:, 1], b=p[:, 2], c=p[:, 3], o=o,
                   cb=p[:, 4 + B * self.dv:] if self.vectors else None, empty=False)
        merge_into(acc, part, self.sigmoid if sigmoid is None else sigmoid, rows)


def batch_outputs(w: Tensor, values: Tensor, batch: Tensor) -> tuple[Tensor, Tensor]:
    """Materialised weights ``w`` (L, n) and ``values`` (n, Ev) split by ``batch`` (n,) (ids < B):
    each row's output per batch (L, B, Ev) and each batch's share of ``sum p^2`` (L, B), float64.

    What :func:`row_stats` gives from the streamed sums (the references use it).
    """
    w64, v64 = w.to(torch.float64), values.to(torch.float64)
    L, Ev, B = w.shape[0], values.shape[1], VALUE_BATCHES
    out = torch.zeros(L, B, Ev, dtype=torch.float64, device=w.device)
    sq = torch.zeros(L, B, dtype=torch.float64, device=w.device)
    for b in range(B):
        pick = (batch == b).nonzero().squeeze(1)
        wb = w64.index_select(1, pick)
        out[:, b] = wb @ v64.index_select(0, pick)
        sq[:, b] = (wb * wb).sum(dim=1)
    return out, sq


def row_stats(acc: Acc, n: int, spec: SweepSpec) -> dict[str, Tensor]:
    """Per-row statistics (L,) at length n from merged sums."""
    f64 = torch.float64
    if spec.normalizer == "sigmoid":
        w = acc.a
        ok = w > 0
        safe = torch.where(ok, w, torch.ones_like(w))
        h = torch.where(ok, torch.log(safe) - acc.b / safe, torch.zeros_like(w))
        out = {"entropy": h, "max_weight": acc.m, "sum_sq": acc.c, "row_sum": w}
        o, cb = acc.o, acc.cb
    else:
        sink = 1.0 if spec.normalizer == "softmax1" else 0.0
        s0 = acc.a
        h = torch.log(s0) - acc.b / s0
        denom = s0 + sink * torch.exp(torch.clamp(-acc.m, max=700.0))
        out = {"entropy": h, "max_weight": 1.0 / denom, "sum_sq": acc.c / denom**2, "row_sum": s0 / denom}
        o = None if acc.o is None else acc.o / denom[:, None, None]
        cb = None if acc.cb is None else acc.cb / (denom**2)[:, None]
    if o is not None and cb is not None:
        out["out_b"] = o  # (L, B, Ev): each row's output from each batch of keys
        out["sq_b"] = cb  # (L, B): each batch's share of the row's sum p^2
    # a single key has entropy 0 exactly (rounding in w log w / w would leave ~1e-9)
    out["entropy"] = torch.zeros_like(w if spec.normalizer == "sigmoid" else acc.a) if n <= 1 else \
        torch.clamp(out["entropy"], min=0.0).to(f64)
    return out




def summarise(n: int, rows: dict[str, Tensor], spec: SweepSpec, factor: float, q_norm: Tensor) -> dict:
    """Means and standard errors over the L rows for one length: one record of :data:`COLUMNS`.

    ``rows``: per-row statistics (L,) from :func:`row_stats`, and for the vectors method
    ``out_sq`` (L, Ev), the squared outputs. Standard errors are the spread over the rows,
    which are independent given the queries for the logits method. The vectors method's rows
    share their keys and values, so the output's spread is estimated by
    :func:`output_ms_sem` instead.
    """
    L = spec.queries

    def mean_sem(a: np.ndarray) -> tuple[float, float]:
        m = float(a.mean())
        sem = float(a.std(ddof=1) / math.sqrt(L)) if L > 1 else float("nan")
        return m, sem

    h = rows["entropy"].numpy()
    ln_n = math.log(n) if n > 1 else 0.0
    norm_h = h / ln_n if n > 1 else np.zeros_like(h)
    rec: dict[str, float | int] = {"n": int(n)}
    for name, arr in (("entropy", h), ("normalized_entropy", norm_h),
                      ("max_weight", rows["max_weight"].numpy()),
                      ("sum_sq", rows["sum_sq"].numpy()), ("row_sum", rows["row_sum"].numpy())):
        rec[name], rec[f"{name}_sem"] = mean_sem(arr)
    # exp of the mean entropy (perplexity of the average row; E exp H would carry a Jensen gap)
    rec["effective_support"] = math.exp(rec["entropy"])
    rec["effective_support_sem"] = rec["effective_support"] * rec["entropy_sem"]
    if "out_b" in rows:
        out_b = rows["out_b"].numpy().astype(np.float64, copy=False)  # (L, B, Ev)
        mean_ms = float((out_b.sum(axis=1) ** 2).mean())
        sem_ms = output_ms_sem(out_b, rows["sq_b"].numpy().astype(np.float64, copy=False), rec["sum_sq_sem"])
    else:  # logits: Var(o | p) = sum p^2 exactly, rows independent
        mean_ms, sem_ms = rec["sum_sq"], rec["sum_sq_sem"]
    std = math.sqrt(max(mean_ms, 0.0))
    rec["output_std"] = std
    rec["output_std_sem"] = sem_ms / (2 * std) if std > 0 else float("nan")
    rec["logit_std"] = float(torch.sqrt((q_norm**2).mean()) * factor)
    rec["logit_factor"] = factor
    return rec


def output_ms_sem(out_b: np.ndarray, sq_b: np.ndarray, sum_sq_sem: float) -> float:
    """Standard error of the output's mean square ``mean(o^2)`` over rows and value columns (vectors).

    ``out_b`` (L, B, Ev): each row's output from each batch of keys (they add up to the
    output); ``sq_b`` (L, B): each batch's share of the row's ``sum_j p_j^2``; ``sum_sq_sem``:
    the standard error of the rows' mean ``sum_j p_j^2``. Given the queries the error has two
    parts (Var = E Var(. | keys) + Var E(. | keys)):

    * the values. Every row reads the same values, so the rows' outputs are correlated (for
      flat rows by about ``e^{-sigma^2}``: 0.37 at sigma = 1) and their spread understates
      the error (3x at 64 rows and Ev = 16). Given the weights, the output column
      ``o_c = P v_c`` (L,) is Gaussian with covariance ``G = P P^T`` and
      ``Var(mean o^2 | P) = 2 tr(G^2) / (L^2 Ev)``. Each batch b of keys gives an independent
      ``o_c^b`` with covariance ``G_b`` (``G = sum_b G_b``), so ``tr(G^2) = sum_{b,b'}
      tr(G_b G_b')`` is estimated without bias by ``(o_c^b . o_c^b')^2`` for ``b != b'`` and
      ``((o_c^b . o_c^b)^2 - tr(G_b)^2) / 2`` for ``b = b'`` (``tr(G_b)`` from ``sq_b``),
      averaged over the columns: about B x Ev samples of the dominant (common) part where the
      columns alone give Ev (their spread covered 88-93% at Ev = 16 where this covers 95%).
    * the keys: ``E[o_rc^2 | keys] = sum_j p_rj^2`` for unit-variance values, whose mean over
      the rows has the error ``sum_sq_sem`` (the rows' spread, which also holds their
      different query norms: on the safe side).
    """
    L, _, Ev = out_b.shape
    M = np.einsum("lbc,lkc->cbk", out_b, out_b)  # (Ev, B, B): o_c^b . o_c^b'
    diag = np.diagonal(M, axis1=1, axis2=2)  # (Ev, B)
    tr_b = sq_b.sum(axis=0)  # (B,): tr(G_b)
    per_column = (M**2).sum(axis=(1, 2)) - (diag**2).sum(axis=1) + ((diag**2 - tr_b**2) / 2).sum(axis=1)
    values = 2.0 * max(float(per_column.mean()), 0.0) / (L * L * Ev)
    return math.sqrt(values + sum_sq_sem**2)


def frame(records: list[dict]) -> pd.DataFrame:
    """One row per record, ascending n (built from numpy columns: from_records took ~4 ms)."""
    order = np.argsort([int(r["n"]) for r in records], kind="stable")
    cols = {c: np.array([records[i][c] for i in order], dtype=np.int64 if c == "n" else np.float64)
            for c in COLUMNS}
    return pd.DataFrame(cols)


