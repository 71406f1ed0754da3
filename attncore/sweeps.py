"""Streaming statistics of attention rows against sequence length: no n x n matrix, ever.

Shape legend: ``R`` query rows, ``n`` keys a row sees, ``d`` query/key dim, ``Dv`` value
dim, ``B`` keys per block, ``Rt`` rows per logit tile. The largest tensors held are one
block: logits ``(Rt, B)`` or ``(R, B)``, keys ``(B, d)``, values ``(B, Dv)``; a sweep to
``n = 2**24`` needs a few MB.

Two methods give the same statistics:

``vectors``
    The real thing. Gaussian queries ``q`` ``(R, d)``, keys ``k_j`` ``(d,)`` and values
    ``v_j`` ``(Dv,)``, all N(0, 1), are drawn block by block; each block's logits
    ``q_r . k_j * scale`` are reduced in one streaming pass with the online
    max / log-sum-exp rescaling of FlashAttention (Dao et al. 2022): per row we keep
    the running max ``m``, ``s0 = sum e^{x-m}``, ``s1 = sum (x-m) e^{x-m}``,
    ``s2 = sum e^{2(x-m)}`` and ``o = sum e^{x-m} v``. When a new block raises the max
    from ``m`` to ``m'`` the old sums are multiplied by ``e^{m-m'}`` (``s2`` by its
    square, and ``s1`` also gains ``(m-m') s0``). From these, at any length:
    entropy ``H = log s0 - s1/s0``, max weight ``1/s0``, ``sum p^2 = s2/s0^2`` and the
    output ``o/s0``, whose spread is measured directly.

``logits``
    An exact-distribution shortcut. Given ``q_r``, the scores ``q_r . k_j * scale`` for
    iid ``k_j ~ N(0, I_d)`` are iid ``N(0, |q_r|^2 scale^2)`` over ``j``; so the engine
    draws ``q_r`` (to get ``|q_r|``) and then the ``n`` logits of the row directly: ``n``
    random numbers per row instead of ``n * d``. The outputs are not drawn: for iid
    unit-variance values independent of the weights, ``Var(o_r | p) = sum_j p_j^2``, so
    ``output_std = sqrt(mean_r sum_j p_rj^2)`` is exact. What the shortcut loses is the
    weak correlation between rows that share keys (rows are independent here), so its
    standard errors are exact while those of ``vectors`` are a slight underestimate.

Both methods nest: the keys (logits) of length ``n`` are the first ``n`` of every longer
length, so a whole sweep over lengths whose logit scale does not depend on ``n`` is one
pass to the largest ``n`` with snapshots of the sums at every requested length.

Scale rules multiply the logits ``q . k``: ``sqrt_d`` by ``1/sqrt(d)``; ``none`` by 1;
``ssmax`` by ``s log(n) / sqrt(d)`` (Nakanishi 2025, "Scalable-Softmax Is Superior for
Attention"); ``llama4`` by ``(1 + 0.1 log(floor((pos+1)/8192) + 1)) / sqrt(d)``, the query
temperature tuning of Llama 4's NoPE layers, for the query at position ``pos = n - 1``.
The temperature divides the logits. Normalisers: ``softmax``; ``softmax1``
(``e^{x_i}/(1 + sum_j e^{x_j})``, rows may sum to less than 1); ``sigmoid``
(``sigma(x_i - log n)``, no competition). As in :mod:`attncore.stats`, the entropy family
is computed on the row renormalised to sum 1; max weight, ``sum p^2``, row sum and the
output use the raw weights.

Random numbers: float32 samples, float64 accumulation. Blocks are dealt to ``LANES``
lanes (block ``b`` to lane ``b mod LANES``); the ``logits`` method also splits its rows
into ``ROW_GROUPS`` contiguous groups. Each (lane, group) has its own ``torch.Generator``
seeded from ``(seed, stream, lane[, group])`` and consumes its blocks in order, so results
do not depend on how many worker threads run (up to ``LANES x ROW_GROUPS``), and a
one-block sweep still keeps two workers busy. torch's float32 ``normal_`` uses 24-bit
uniforms in Box-Muller and never returns more than 5.77 standard deviations; at
``n = 2**24`` the largest of a row's logits would sit on that cap about 7% of the time,
so the ``logits`` method redraws every sample above ``TAIL_Z`` standard deviations from
the exact Gaussian tail (in float64). The materialised reference :func:`reference_sweep` uses the same draws.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd
import torch
from torch import Tensor

from attncore.budget import MAX_ATTENTION_CELLS, check_limit, fmt_count
from attncore.device import resolve_device
from attncore.errors import AttnInputError
from attncore.normalizers import Sigmoid, Softmax, SoftmaxWithSink, SSMax
from attncore.stats import entropy as row_entropy
from attncore.stats import max_weight as row_max_weight
from attncore.stats import row_sum as row_total
from attncore.stats import sum_squares

__all__ = [
    "COLUMNS",
    "LLAMA4_ATTN_SCALE",
    "LLAMA4_FLOOR_SCALE",
    "MAX_SWEEP_D",
    "MAX_SWEEP_N",
    "MAX_SWEEP_QUERIES",
    "MAX_SWEEP_WORK",
    "MAX_VALUE_DIM",
    "METHODS",
    "SCALE_RULES",
    "SWEEP_NORMALIZERS",
    "SweepCancelled",
    "SweepSpec",
    "block_keys",
    "entropy_vs_length",
    "llama4_multiplier",
    "logit_multiplier",
    "peak_weight_sweep",
    "reference_sweep",
    "run_sweep",
    "sweep_work",
]

SCALE_RULES: tuple[str, ...] = ("sqrt_d", "none", "ssmax", "llama4")
METHODS: tuple[str, ...] = ("logits", "vectors")
SWEEP_NORMALIZERS: tuple[str, ...] = ("softmax", "softmax1", "sigmoid")
SWEEP_DTYPES: dict[str, torch.dtype] = {"float32": torch.float32, "float64": torch.float64}

MAX_SWEEP_N = 1 << 24  # 16.8M keys per row
MAX_SWEEP_QUERIES = 1024
MAX_SWEEP_D = 4096
MAX_VALUE_DIM = 256
# Random numbers (plus matmul work in the same unit) one sweep may cost: about a minute
# on a 2-core CPU at ~0.2 G samples/s.
MAX_SWEEP_WORK = 1 << 33
MAX_SSMAX_S = 10.0
MAX_TEMPERATURE = 1000.0

LLAMA4_FLOOR_SCALE = 8192
LLAMA4_ATTN_SCALE = 0.1

LANES = 16  # fixed random-stream lanes: block b belongs to lane b % LANES
ROW_GROUPS = 2  # logits: the rows split into this many groups, each with its own streams
TAIL_Z = 5.0  # float32 samples above this many std are redrawn from the exact tail
STACKED_ROWS = 8  # row tiles up to this size reduce with one stacked GEMM (see _Reducer)
# Shifted logits below this are raised to it before exp: torch's float32 exp on the CPU takes
# ~40 ns instead of ~0.3 ns per element once its result underflows (x < -87.3), which made
# sweeps with wide logit ranges (unscaled, low temperature, large d) up to 100x slower. A key
# at -87 adds e^-87 = 1.6e-38 (and -87 e^-87 to s1) against s0 >= 1: far below float64 epsilon.
EXP_FLOOR = -87.0

_STREAM_QUERIES, _STREAM_LOGITS, _STREAM_KEYS = 1, 2, 3

COLUMNS: tuple[str, ...] = (
    "n", "entropy", "entropy_sem", "normalized_entropy", "normalized_entropy_sem",
    "max_weight", "max_weight_sem", "effective_support", "effective_support_sem",
    "output_std", "output_std_sem", "sum_sq", "sum_sq_sem", "row_sum", "row_sum_sem",
    "logit_std", "logit_factor",
)

Progress = Callable[[float, str], "bool | None"]


class SweepCancelled(RuntimeError):
    """The progress callback returned False (or the cancel event was set) between chunks."""


# --------------------------------------------------------------------------- spec


def llama4_multiplier(n: int | np.ndarray) -> float | np.ndarray:
    """Llama 4's NoPE query multiplier for the query at position ``n - 1``.

    ``1 + 0.1 * log(floor((pos + 1) / 8192) + 1)``: 1 below 8192 keys, 1.07 at 8192,
    1.76 at 2**24.
    """
    nn = np.floor(np.asarray(n, dtype=np.float64) / LLAMA4_FLOOR_SCALE)
    out = 1.0 + LLAMA4_ATTN_SCALE * np.log(nn + 1.0)
    return float(out) if out.ndim == 0 else out


def logit_multiplier(scale_rule: str, n: int | np.ndarray, ssmax_s: float = 0.43) -> float | np.ndarray:
    """The length-dependent factor a scale rule puts on top of its base scale (1 for most)."""
    n_arr = np.asarray(n, dtype=np.float64)
    if scale_rule == "ssmax":
        out = ssmax_s * np.log(np.maximum(n_arr, 1.0))
    elif scale_rule == "llama4":
        out = np.asarray(llama4_multiplier(n_arr))
    elif scale_rule in SCALE_RULES:
        out = np.ones_like(n_arr)
    else:
        raise AttnInputError(f"unknown scale rule {scale_rule!r}; choose one of {', '.join(SCALE_RULES)}.")
    return float(out) if out.ndim == 0 else out


@dataclass(frozen=True)
class SweepSpec:
    """Everything that determines one sweep (plain, hashable values).

    ``lengths`` are the key counts n to report, each in ``[1, MAX_SWEEP_N]``; they are
    sorted and deduplicated by :func:`entropy_vs_length`.
    """

    lengths: tuple[int, ...]
    d: int = 64
    queries: int = 64
    scale_rule: str = "sqrt_d"
    temperature: float = 1.0
    normalizer: str = "softmax"
    method: str = "logits"
    seed: int = 0
    ssmax_s: float = 0.43
    value_dim: int = 16
    dtype: str = "float32"

    def validate(self) -> None:
        """Raise :class:`AttnInputError` / ``ResourceLimitError`` with a plain message."""
        if not self.lengths:
            raise AttnInputError("give at least one sequence length n.")
        for n in self.lengths:
            if isinstance(n, bool) or not isinstance(n, (int, np.integer)):
                raise AttnInputError(f"sequence lengths must be whole numbers; got {n!r}.")
        lo, hi = min(self.lengths), max(self.lengths)
        if lo < 1:
            raise AttnInputError(f"a row needs at least one key; got n = {lo}.")
        if hi > MAX_SWEEP_N:
            raise AttnInputError(
                f"n = {hi:,} is above the cap of {MAX_SWEEP_N:,} (2^24) keys per row: beyond it a "
                "sweep takes minutes on a CPU. Lower the largest n."
            )
        if self.d < 1:
            raise AttnInputError(f"the head dimension d must be at least 1; got d = {self.d}. "
                                 "A 0-dimensional key has no dot product.")
        if self.d > MAX_SWEEP_D:
            raise AttnInputError(f"d = {self.d} is above the limit of {MAX_SWEEP_D}.")
        if self.queries < 1:
            raise AttnInputError(f"at least one query row is needed; got {self.queries}.")
        if self.queries > MAX_SWEEP_QUERIES:
            raise AttnInputError(f"{self.queries} query rows is above the limit of {MAX_SWEEP_QUERIES}.")
        if not 1 <= self.value_dim <= MAX_VALUE_DIM:
            raise AttnInputError(f"the value dim must be in 1..{MAX_VALUE_DIM}; got {self.value_dim}.")
        if self.scale_rule not in SCALE_RULES:
            raise AttnInputError(f"unknown scale rule {self.scale_rule!r}; choose one of "
                                 f"{', '.join(SCALE_RULES)}.")
        if self.method not in METHODS:
            raise AttnInputError(f"unknown method {self.method!r}; choose one of {', '.join(METHODS)}.")
        if self.normalizer not in SWEEP_NORMALIZERS:
            hint = " (SSMax is a scale rule here: scale_rule='ssmax')" if self.normalizer == "ssmax" else ""
            raise AttnInputError(f"unknown normaliser {self.normalizer!r}{hint}; choose one of "
                                 f"{', '.join(SWEEP_NORMALIZERS)}.")
        if self.dtype not in SWEEP_DTYPES:
            raise AttnInputError(f"sweeps sample in float32 or float64; got {self.dtype!r}.")
        t = self.temperature
        if not (isinstance(t, (int, float)) and math.isfinite(t) and 0 < t <= MAX_TEMPERATURE):
            raise AttnInputError(f"the temperature must be a positive number up to {MAX_TEMPERATURE:g}; "
                                 f"got {t}. It divides the logits, so 0 or less has no meaning.")
        s = self.ssmax_s
        if not (isinstance(s, (int, float)) and math.isfinite(s) and 0 < s <= MAX_SSMAX_S):
            raise AttnInputError(f"the SSMax factor s must be in (0, {MAX_SSMAX_S:g}]; got {s}. "
                                 "The paper's figure uses s = 0.43.")
        if not 0 <= int(self.seed) < 2**63:
            raise AttnInputError(f"the seed must be a non-negative integer; got {self.seed}.")
        check_limit(sweep_work(self), MAX_SWEEP_WORK, "this sweep's work (random numbers drawn)",
                    "(about a minute on a 2-core CPU)",
                    "Lower the largest n, the query rows or d, or use the logits method.")

    @property
    def base_scale(self) -> float:
        """``1/sqrt(d)`` (every rule but ``none``) or 1."""
        return 1.0 if self.scale_rule == "none" else 1.0 / math.sqrt(self.d)

    def logit_factor(self, n: int) -> float:
        """Total factor on ``q . k`` at length n: base scale x rule multiplier / temperature."""
        return self.base_scale * float(logit_multiplier(self.scale_rule, n, self.ssmax_s)) / self.temperature

    def passes(self) -> list[tuple[float, tuple[int, ...]]]:
        """Group the lengths into streaming passes: ``[(logit factor, lengths), ...]``.

        Lengths whose logits share one factor (and, for sigmoid, one bias) nest in one pass.
        """
        groups: dict[tuple[float, int], list[int]] = {}
        for n in sorted(set(int(v) for v in self.lengths)):
            key = (self.logit_factor(n), n if self.normalizer == "sigmoid" else 0)
            groups.setdefault(key, []).append(n)
        return [(f, tuple(ns)) for (f, _), ns in sorted(groups.items(), key=lambda kv: kv[1][-1])]


def _plan_blocks(spec: SweepSpec, device: torch.device) -> tuple[int, int]:
    """(keys per block B, rows per logit tile Rt) for a device."""
    cuda = device.type == "cuda"
    if spec.method == "logits":
        rt = min(spec.queries, 16 if cuda else 4)
        # 2^16 keys: fewer, longer torch calls (two worker threads share one GIL; 2^14-key blocks
        # measured 20-40% slower). Short sweeps still use both workers through ROW_GROUPS.
        keys = (1 << 16) if not cuda else (1 << 20)
        return keys, rt
    per_key = max(1, spec.d + spec.value_dim)
    target = (1 << 23) if cuda else (1 << 20)
    keys = 1 << int(max(8, min(16, math.floor(math.log2(max(1, target // per_key))))))
    return keys, min(spec.queries, 64)


def block_keys(spec: SweepSpec, device: torch.device | str = "cpu") -> int:
    """Keys per streamed block on ``device`` (work is done, and can be stopped, per block)."""
    return _plan_blocks(spec, torch.device(device))[0]


def sweep_work(spec: SweepSpec, device: torch.device | str = "cpu") -> int:
    """Work units a sweep costs: random numbers drawn plus matmul flops / 128.

    On a CPU one Gaussian sample costs about as much as 128 flops of matmul (0.2 G samples/s
    against ~25 GFLOP/s per two cores), so a unit is roughly one sample's time. The estimate
    of :mod:`ui.sweep` multiplies this by a measured seconds-per-unit rate.
    """
    dev = torch.device(device)
    block, _ = _plan_blocks(spec, dev)
    total = 0
    for _, lens in spec.passes():
        keys = -(-max(lens) // block) * block
        total += keys * _units_per_key(spec)
    return int(total)


def _units_per_key(spec: SweepSpec) -> int:
    if spec.method == "logits":
        return spec.queries
    per_key = spec.d + spec.value_dim
    return per_key + (2 * spec.queries * per_key) // 128


# --------------------------------------------------------------------------- randomness


def _mix(*parts: int) -> int:
    """splitmix64 over the parts: a well-spread 32-bit seed (mt19937 keeps 32 bits)."""
    x = 0x9E3779B97F4A7C15
    mask = (1 << 64) - 1
    for p in parts:
        x = (x ^ (int(p) & mask)) & mask
        x = (x + 0x9E3779B97F4A7C15) & mask
        z = x
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & mask
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & mask
        x = z ^ (z >> 31)
    return x & 0xFFFFFFFF


def _generator(seed: int, stream: int, lane: int, device: torch.device, group: int | None = None
               ) -> torch.Generator:
    g = torch.Generator(device=device)
    g.manual_seed(_mix(seed, stream, lane) if group is None else _mix(seed, stream, lane, group))
    return g


def _row_groups(spec: SweepSpec) -> list[tuple[int, int]]:
    """Contiguous row ranges ``[(start, stop)]`` that draw from their own random streams.

    The logits method's rows are independent, so ``ROW_GROUPS`` groups let two workers share
    even a one-block sweep; the vectors method's rows share their keys (one group).
    """
    R = spec.queries
    if spec.method != "logits":
        return [(0, R)]
    g = min(ROW_GROUPS, R)
    return [(i * R // g, (i + 1) * R // g) for i in range(g)]


def _unit_generator(spec: SweepSpec, lane: int, group: int, device: torch.device) -> torch.Generator:
    """The stream of one (lane, row group): logits streams are per group, vectors per lane."""
    if spec.method == "logits":
        return _generator(spec.seed, _STREAM_LOGITS, lane, device, group)
    return _generator(spec.seed, _STREAM_KEYS, lane, device)


def _gauss_tail(k: int, a: float, g: torch.Generator, device: torch.device) -> Tensor:
    """k exact draws of Z ~ N(0, 1) conditioned on Z > a (Marsaglia's tail method), float64."""
    out: list[Tensor] = []
    need = k
    while need > 0:
        m = need + 8 + need // 4
        u = torch.rand(2, m, generator=g, device=device, dtype=torch.float64)
        x = torch.sqrt(a * a - 2.0 * torch.log1p(-u[0]))  # 1 - u in (0, 1]
        ok = u[1] * x < a
        acc = x[ok][:need]
        out.append(acc)
        need -= acc.numel()
    return torch.cat(out)


def _draw_queries(spec: SweepSpec, device: torch.device, dtype: torch.dtype) -> Tensor:
    """Queries ``(R, d)``, N(0, 1), the same for both methods."""
    g = _generator(spec.seed, _STREAM_QUERIES, 0, device)
    return torch.randn(spec.queries, spec.d, generator=g, device=device, dtype=dtype)


def _fill_logit_tile(tile: Tensor, std: Tensor, g: torch.Generator, fix_tail: bool) -> Tensor:
    """Fill ``tile`` (Rt, B) with N(0, std_r^2) rows; returns the row maxima (Rt,).

    Samples above ``TAIL_Z * std_r`` are redrawn from the exact Gaussian tail when
    ``fix_tail`` (float32 samples; see the module docstring).
    """
    if tile.device.type == "cpu":
        for row, sd in zip(tile, std.tolist(), strict=True):
            row.normal_(0.0, sd, generator=g)
    else:
        tile.normal_(generator=g).mul_(std.to(tile.dtype)[:, None])
    mx = tile.amax(dim=1)
    if fix_tail:
        thr = (std * TAIL_Z).to(tile.dtype)
        over = mx > thr
        if tile.device.type == "cpu":
            rows = over.nonzero().flatten().tolist() if bool(over.any()) else []
            for r in rows:
                row = tile[r]
                idx = (row > thr[r]).nonzero().flatten()
                row[idx] = (_gauss_tail(idx.numel(), TAIL_Z, g, tile.device) * float(std[r])).to(tile.dtype)
                mx[r] = row.max()
        else:
            mask = tile > thr[:, None]
            k = int(mask.sum())
            if k:
                scale = std.to(torch.float64)[:, None].expand_as(tile)[mask]
                tile[mask] = (_gauss_tail(k, TAIL_Z, g, tile.device) * scale).to(tile.dtype)
                mx = tile.amax(dim=1)
    return mx


# --------------------------------------------------------------------------- accumulators


@dataclass
class _Acc:
    """Streaming sums for one segment of keys, per row, float64.

    softmax family: ``m`` running max, ``a`` = s0, ``b`` = s1, ``c`` = s2 (relative to m);
    sigmoid: ``m`` max weight, ``a`` = sum w, ``b`` = sum w log w, ``c`` = sum w^2.
    ``o`` (R, Dv) the unnormalised output (vectors method) or None.
    """

    m: Tensor
    a: Tensor
    b: Tensor
    c: Tensor
    o: Tensor | None = None
    empty: bool = True


def _new_acc(rows: int, dv: int | None, device: torch.device, sigmoid: bool) -> _Acc:
    f64 = torch.float64
    start = 0.0 if sigmoid else float("-inf")
    return _Acc(m=torch.full((rows,), start, dtype=f64, device=device),
                a=torch.zeros(rows, dtype=f64, device=device), b=torch.zeros(rows, dtype=f64, device=device),
                c=torch.zeros(rows, dtype=f64, device=device),
                o=None if dv is None else torch.zeros(rows, dv, dtype=f64, device=device))


def _merge_into(dst: _Acc, src: _Acc, sigmoid: bool, rows: slice = slice(None)) -> None:
    """dst[rows] <- dst[rows] (+) src, in place (src covers the rows ``rows`` of dst)."""
    if src.empty:
        return
    if sigmoid:
        dst.m[rows] = torch.maximum(dst.m[rows], src.m)
        dst.a[rows] += src.a
        dst.b[rows] += src.b
        dst.c[rows] += src.c
        if dst.o is not None and src.o is not None:
            dst.o[rows] += src.o
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
    if dst.o is not None and src.o is not None:
        dst.o[rows] = al0[:, None] * dst.o[rows] + al1[:, None] * src.o
    dst.m[rows] = m
    dst.empty = False


class _Reducer:
    """Reduces tiles of logits into float32 per-block partial sums; owns the scratch buffers.

    The tile's logits x (Rt, Bc) and their exponentials e live in one stacked buffer
    ``Y = [x; e; 1]`` (2 Rt + 1, B). For a few rows one small GEMM ``e @ Y^T``
    (Rt, 2 Rt + 1) yields ``sum x e`` and ``sum e^2`` on its diagonals and ``sum e`` in its
    last column: one pass over the tile instead of three. Tall tiles (the vectors method's
    64 rows, whose scores come from one large GEMM) use row-wise dot products instead.
    Each row is shifted by its own tile maximum, so a tile needs nothing from the running
    sums; the block partial (per row: max, s0, s1, s2, output) is merged into the float64
    accumulator once per block and segment by :func:`_merge_into`.
    """

    def __init__(self, spec: SweepSpec, rt: int, block: int, device: torch.device, dtype: torch.dtype):
        self.sigmoid = spec.normalizer == "sigmoid"
        self.rt = rt
        # the stacked GEMM pays off for a few rows; for many it would compute rt x rt products
        self.stacked = rt <= STACKED_ROWS
        self.y = torch.zeros(2 * rt + 1, block, device=device, dtype=dtype)
        self.y[2 * rt] = 1.0
        self.idx = torch.arange(rt, device=device)
        self.rows, self.dv, self.device, self.dtype = spec.queries, spec.value_dim, device, dtype
        self.vectors = spec.method == "vectors"
        self.parts: dict[int, Tensor] = {}

    @property
    def x(self) -> Tensor:
        """Where the caller writes a tile's logits: (Rt, B)."""
        return self.y[: self.rt]

    def part(self, s: int) -> Tensor:
        """The float32 partial of segment s: (R, 4 + Dv) = [max, s0, s1, s2, output...]."""
        if s not in self.parts:
            width = 4 + (self.dv if self.vectors else 0)
            self.parts[s] = torch.zeros(self.rows, width, device=self.device, dtype=self.dtype)
        return self.parts[s]

    def add(self, s: int, a: int, b: int, rt: int, mx: Tensor, values: Tensor | None, bias: float,
            r0: int, floor_needed: bool = True) -> None:
        """Reduce columns [a, b) of the first ``rt`` logit rows (overwritten) into rows r0.. of part s.

        ``floor_needed=False`` promises that no shifted logit is below :data:`EXP_FLOOR`.
        """
        p = self.part(s)[r0: r0 + rt]
        x = self.y[:rt, a:b]
        e = self.y[self.rt: self.rt + rt, a:b]
        if self.sigmoid:
            x.add_(bias)  # x + b with b = -log n
            torch.sigmoid(x, out=e)
            torch.amax(e, dim=1, out=p[:, 0])
            torch.sum(e, dim=1, out=p[:, 1])
            torch.sum(torch.special.xlogy(e, e, out=x), dim=1, out=p[:, 2])
            torch.sum(torch.mul(e, e, out=x), dim=1, out=p[:, 3])
        else:
            p[:, 0] = mx
            x.sub_(mx[:, None])  # x - max <= 0
            if self.vectors or floor_needed:
                x.clamp_(min=EXP_FLOOR)  # see EXP_FLOOR: keeps exp off its slow underflow path
            torch.exp(x, out=e)
            if self.stacked:
                g = torch.mm(e, self.y[:, a:b].T)  # (rt, 2 Rt + 1): [e.x^T | e.e^T | e.1]
                i = self.idx[:rt]
                p[:, 1] = g[:, 2 * self.rt]
                p[:, 2] = g[i, i]
                p[:, 3] = g[i, self.rt + i]
            else:
                torch.sum(e, dim=1, out=p[:, 1])
                p[:, 2] = torch.linalg.vecdot(x, e, dim=1)
                p[:, 3] = torch.linalg.vecdot(e, e, dim=1)
        if values is not None:
            torch.matmul(e, values, out=p[:, 4:])

    def flush(self, s: int, acc: _Acc, rows: slice = slice(None)) -> None:
        """Merge rows ``rows`` of the block partial of segment s into the float64 accumulator."""
        p = self.part(s)[rows].to(torch.float64)
        part = _Acc(m=p[:, 0], a=p[:, 1], b=p[:, 2], c=p[:, 3], o=p[:, 4:] if self.vectors else None,
                    empty=False)
        _merge_into(acc, part, self.sigmoid, rows)


def _row_stats(acc: _Acc, n: int, spec: SweepSpec) -> dict[str, Tensor]:
    """Per-row statistics (R,) at length n from merged sums."""
    f64 = torch.float64
    if spec.normalizer == "sigmoid":
        w = acc.a
        ok = w > 0
        safe = torch.where(ok, w, torch.ones_like(w))
        h = torch.where(ok, torch.log(safe) - acc.b / safe, torch.zeros_like(w))
        out = {"entropy": h, "max_weight": acc.m, "sum_sq": acc.c, "row_sum": w}
        o = acc.o
    else:
        sink = 1.0 if spec.normalizer == "softmax1" else 0.0
        s0 = acc.a
        h = torch.log(s0) - acc.b / s0
        denom = s0 + sink * torch.exp(torch.clamp(-acc.m, max=700.0))
        out = {"entropy": h, "max_weight": 1.0 / denom, "sum_sq": acc.c / denom**2, "row_sum": s0 / denom}
        o = None if acc.o is None else acc.o / denom[:, None]
    if o is not None:
        out["out_ms"] = (o * o).mean(dim=1)
    # a single key has entropy 0 exactly (rounding in w log w / w would leave ~1e-9)
    out["entropy"] = torch.zeros_like(w if spec.normalizer == "sigmoid" else acc.a) if n <= 1 else \
        torch.clamp(out["entropy"], min=0.0).to(f64)
    return out


# --------------------------------------------------------------------------- workers


@dataclass
class _PassJob:
    """One streaming pass: keys [0, n_max) in blocks, snapshots at ``checkpoints``."""

    factor: float
    checkpoints: tuple[int, ...]
    n_blocks: int
    bias: float  # sigmoid's -log n bias (0 for the softmax family)


@dataclass
class _Shared:
    done: list[int] = field(default_factory=list)  # work units done per worker
    cancel: threading.Event = field(default_factory=threading.Event)


def _segments(lo: int, hi: int, checkpoints: Sequence[int]) -> list[tuple[int, int, int]]:
    """Split keys [lo, hi) at checkpoints: [(start, stop, segment index)]."""
    out = []
    start = lo
    for s, c in enumerate(checkpoints):
        prev = 0 if s == 0 else checkpoints[s - 1]
        if c <= start or prev >= hi:
            continue
        a, b = max(start, prev), min(hi, c)
        if b > a:
            out.append((a, b, s))
            start = b
    return out


class _Engine:
    """Runs passes for one spec on one device; the accumulators live per lane and segment."""

    def __init__(self, spec: SweepSpec, device: torch.device, workers: int):
        self.spec = spec
        self.device = device
        self.dtype = SWEEP_DTYPES[spec.dtype]
        self.block, self.rt = _plan_blocks(spec, device)
        self.workers = workers
        self.sigmoid = spec.normalizer == "sigmoid"
        self.dv = spec.value_dim if spec.method == "vectors" else None
        self.q = _draw_queries(spec, device, self.dtype)  # (R, d)
        self.q_norm = torch.linalg.vector_norm(self.q.to(torch.float64), dim=1)  # (R,)
        self.fix_tail = self.dtype == torch.float32

    # (lane, row group) units of one pass, pulled one at a time; each unit's blocks in order
    def _run_units(self, job: _PassJob, next_unit: Callable[[], tuple[int, int] | None],
                   accs: dict[tuple[int, int], _Acc], shared: _Shared, wid: int) -> None:
        spec, dev, dt = self.spec, self.device, self.dtype
        torch.set_flush_denormal(True)
        B = self.block
        n_max = job.checkpoints[-1]
        groups = _row_groups(spec)
        red = _Reducer(spec, self.rt, B, dev, dt)
        if spec.method == "vectors":
            keys = torch.empty(B, spec.d, device=dev, dtype=dt)
            vals = torch.empty(B, spec.value_dim, device=dev, dtype=dt)
            qf = (self.q.to(torch.float64) * job.factor).to(dt)  # (R, d)
        else:
            std = self.q_norm * job.factor  # (R,) float64
            # normal_ never returns below -5.77 std in float32 (24-bit Box-Muller), -8.6 in float64
            low = (5.8 if dt == torch.float32 else 8.7) * std
        while (unit := next_unit()) is not None:
            lane, gi = unit
            g = _unit_generator(spec, lane, gi, dev)
            r_lo, r_hi = groups[gi]
            unit_work = self.block_units * (r_hi - r_lo) // spec.queries
            for b in range(lane, job.n_blocks, LANES):
                if shared.cancel.is_set():
                    return
                lo, hi = b * B, min((b + 1) * B, n_max)
                segs = _segments(lo, hi, job.checkpoints)
                whole = len(segs) == 1 and segs[0][1] - segs[0][0] == B
                if spec.method == "vectors":
                    keys.normal_(generator=g)
                    vals.normal_(generator=g)
                for r0 in range(r_lo, r_hi, self.rt):
                    rt = min(r_hi, r0 + self.rt) - r0
                    x_full = red.x[:rt]
                    floor_needed = True
                    if spec.method == "vectors":
                        torch.matmul(qf[r0: r0 + rt], keys.T, out=x_full)  # (rt, B)
                        mx = None
                    else:
                        mx = _fill_logit_tile(x_full, std[r0: r0 + rt], g, self.fix_tail)
                        # the widest shifted logit of the tile is at least -(max + low)
                        widest = mx.to(torch.float64) + low[r0: r0 + rt]
                        floor_needed = bool((widest > -EXP_FLOOR - 1).any())
                    for a, e, s in segs:
                        m = mx if whole and mx is not None else x_full[:, a - lo: e - lo].amax(dim=1)
                        v = None if spec.method == "logits" else vals[a - lo: e - lo]
                        red.add(s, a - lo, e - lo, rt, m, v, job.bias, r0, floor_needed=floor_needed)
                for _, _, s in segs:
                    red.flush(s, accs[(lane, s)], slice(r_lo, r_hi))
                shared.done[wid] += unit_work

    @property
    def block_units(self) -> int:
        """Work units of one block (see :func:`sweep_work`)."""
        return self.block * _units_per_key(self.spec)

    def run_pass(self, job: _PassJob, shared: _Shared, pool: ThreadPoolExecutor,
                 poll: Callable[[], None]) -> list[dict[str, Tensor]]:
        """Stream one pass; return per-row stats at each checkpoint."""
        R = self.spec.queries
        lanes_used = sorted({b % LANES for b in range(job.n_blocks)})
        accs = {(lane, s): _new_acc(R, self.dv, self.device, self.sigmoid)
                for lane in lanes_used for s in range(len(job.checkpoints))}
        units = [(lane, gi) for lane in lanes_used for gi in range(len(_row_groups(self.spec)))]
        w = max(1, min(self.workers, len(units)))
        # Workers pull units as they finish (the two vCPUs here run normal_ at different
        # speeds, so a fixed split left one idle). A unit's numbers do not depend on who runs
        # it, and units write disjoint (lane, rows) sums, so results stay worker-independent.
        queue, lock = list(reversed(units)), threading.Lock()

        def next_unit() -> tuple[int, int] | None:
            with lock:
                return queue.pop() if queue else None

        futures: list[Future] = [pool.submit(self._run_units, job, next_unit, accs, shared, i)
                                 for i in range(w)]
        pending = set(futures)
        try:
            while pending:
                done, pending = wait(pending, timeout=0.1, return_when=FIRST_COMPLETED)
                for f in done:
                    f.result()  # re-raise worker errors
                poll()
        except BaseException:
            shared.cancel.set()
            wait(futures)
            raise
        if shared.cancel.is_set():
            raise SweepCancelled("the sweep was stopped.")
        # merge lanes (in lane order) per segment, then prefix over segments
        total = _new_acc(R, self.dv, self.device, self.sigmoid)
        out = []
        for s, n in enumerate(job.checkpoints):
            for lane in lanes_used:
                _merge_into(total, accs[(lane, s)], self.sigmoid)
            out.append({k: v.detach().to("cpu") for k, v in _row_stats(total, n, self.spec).items()})
        return out


def _summarise(n: int, rows: dict[str, Tensor], spec: SweepSpec, factor: float, q_norm: Tensor) -> dict:
    """Means and standard errors over rows for one length."""
    R = spec.queries

    def mean_sem(a: np.ndarray) -> tuple[float, float]:
        m = float(a.mean())
        sem = float(a.std(ddof=1) / math.sqrt(R)) if R > 1 else float("nan")
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
    ms = rows["out_ms"].numpy() if "out_ms" in rows else rows["sum_sq"].numpy()
    mean_ms, sem_ms = mean_sem(ms)
    std = math.sqrt(max(mean_ms, 0.0))
    rec["output_std"] = std
    rec["output_std_sem"] = sem_ms / (2 * std) if std > 0 else float("nan")
    rec["logit_std"] = float(torch.sqrt((q_norm**2).mean()) * factor)
    rec["logit_factor"] = factor
    return rec


def _frame(records: list[dict]) -> pd.DataFrame:
    """One row per record, ascending n (built from numpy columns: from_records took ~4 ms)."""
    order = np.argsort([int(r["n"]) for r in records], kind="stable")
    cols = {c: np.array([records[i][c] for i in order], dtype=np.int64 if c == "n" else np.float64)
            for c in COLUMNS}
    return pd.DataFrame(cols)


_THREADS_LOCK = threading.Lock()


def _worker_init() -> None:
    torch.set_num_threads(1)
    torch.set_flush_denormal(True)


def entropy_vs_length(
    lengths: Sequence[int],
    *,
    d: int = 64,
    queries: int = 64,
    scale_rule: str = "sqrt_d",
    temperature: float = 1.0,
    normalizer: str = "softmax",
    method: str = "logits",
    seed: int = 0,
    device: str | torch.device | None = None,
    progress: Progress | None = None,
    ssmax_s: float = 0.43,
    value_dim: int = 16,
    dtype: str = "float32",
    workers: int | None = None,
    cancel: threading.Event | None = None,
) -> pd.DataFrame:
    """Row statistics of attention against the number of keys n, streamed (see the module doc).

    Args:
        lengths: the key counts n to report, each in ``[1, 2**24]``.
        d: query/key dimension. queries: rows R (independent queries) averaged per n.
        scale_rule: ``sqrt_d``, ``none``, ``ssmax`` (factor ``s log n`` on top of
            ``1/sqrt d``) or ``llama4``. temperature: divides the logits (> 0).
        normalizer: ``softmax``, ``softmax1`` or ``sigmoid`` (bias ``-log n``).
        method: ``logits`` (exact-distribution shortcut) or ``vectors`` (real q, k, v).
        seed: seeds every draw; the same seed, device and spec give the same numbers.
        device: ``None`` = CUDA if present, else CPU. ssmax_s: SSMax's s.
        value_dim: Dv of the values (vectors method; the output spread is measured over R x Dv).
        dtype: ``float32`` (default) or ``float64`` samples; sums are float64 either way.
        workers: CPU worker threads (default: torch's intra-op thread count, at most 8);
            each runs single-threaded with its own generators. CUDA uses one.
        progress: ``progress(fraction_done, message)`` called from the calling thread about
            every 0.1 s; returning ``False`` (or raising) stops the sweep between chunks.
        cancel: an optional event; setting it stops the sweep between chunks.

    Returns:
        A DataFrame, one row per distinct n (ascending), columns :data:`COLUMNS`: means over
        the R rows with standard errors (``*_sem``) of entropy (nats, of the row renormalised
        to sum 1), entropy / log n, max weight, effective support ``exp(mean H)`` (the
        perplexity of the average row, error by the delta method), output std,
        ``sum p^2`` and row sum; ``logit_std`` (rms over rows of the logits' std) and
        ``logit_factor`` (the factor on ``q . k`` at that n).

    Raises:
        AttnInputError / ResourceLimitError: bad or too large arguments (plain message).
        SweepCancelled: the progress callback returned False or ``cancel`` was set.
    """
    spec = SweepSpec(lengths=tuple(int(n) if isinstance(n, (int, np.integer)) and not isinstance(n, bool)
                                   else n for n in lengths),
                     d=d, queries=queries, scale_rule=scale_rule, temperature=temperature,
                     normalizer=normalizer, method=method, seed=seed, ssmax_s=ssmax_s,
                     value_dim=value_dim, dtype=dtype)
    return run_sweep(spec, device=device, progress=progress, workers=workers, cancel=cancel)


def run_sweep(spec: SweepSpec, *, device: str | torch.device | None = None, progress: Progress | None = None,
              workers: int | None = None, cancel: threading.Event | None = None) -> pd.DataFrame:
    """:func:`entropy_vs_length` for a ready :class:`SweepSpec`."""
    spec.validate()
    dev = resolve_device(device)
    if workers is None:
        workers = 1 if dev.type != "cpu" else max(1, min(LANES, torch.get_num_threads()))
    workers = 1 if dev.type != "cpu" else max(1, min(LANES, int(workers)))
    engine = _Engine(spec, dev, workers)
    shared = _Shared(done=[0] * workers)
    if cancel is not None and cancel.is_set():
        raise SweepCancelled("the sweep was stopped before it started.")
    total_units = max(1, sum(-(-max(lens) // engine.block) * engine.block_units
                             for _, lens in spec.passes()))
    finished_units = 0
    t0 = time.perf_counter()
    last = [0.0]

    def poll() -> None:
        if cancel is not None and cancel.is_set():
            shared.cancel.set()
        if progress is None or shared.cancel.is_set():
            return
        now = time.perf_counter()
        if now - last[0] < 0.1:
            return
        last[0] = now
        frac = min(1.0, (finished_units + sum(shared.done)) / total_units)
        eta = (now - t0) * (1 - frac) / frac if frac > 0.02 else float("nan")
        msg = f"{frac:.0%} of {fmt_count(total_units)} random numbers" + \
            (f", about {eta:.0f} s left" if math.isfinite(eta) else "")
        if progress(frac, msg) is False:
            shared.cancel.set()

    records: list[dict] = []
    prev_threads = torch.get_num_threads()
    lock = _THREADS_LOCK if dev.type == "cpu" else threading.Lock()
    with lock:
        try:
            with ThreadPoolExecutor(max_workers=workers, initializer=_worker_init,
                                    thread_name_prefix="attncore-sweep") as pool:
                for factor, lens in spec.passes():
                    n_blocks = -(-max(lens) // engine.block)
                    bias = -math.log(max(lens)) if spec.normalizer == "sigmoid" else 0.0
                    job = _PassJob(factor=factor, checkpoints=lens, n_blocks=n_blocks, bias=bias)
                    shared.done = [0] * workers
                    stats = engine.run_pass(job, shared, pool, poll)
                    finished_units += n_blocks * engine.block_units
                    for n, rows in zip(lens, stats, strict=True):
                        records.append(_summarise(n, rows, spec, factor, engine.q_norm.cpu()))
        finally:
            torch.set_num_threads(prev_threads)
    if progress is not None:
        progress(1.0, "done")
    return _frame(records)


# --------------------------------------------------------------------------- reference


def _replay_lane_blocks(spec: SweepSpec, n: int, device: torch.device) -> list[Tensor]:
    """The engine's random blocks for keys [0, n), in key order, for the reference.

    logits: per block the full ``(R, B)`` standard-normal draws scaled to unit std per row
    (returned as z; the caller multiplies by std). vectors: per block ``(B, d + Dv)``.
    """
    dt = SWEEP_DTYPES[spec.dtype]
    block, rt = _plan_blocks(spec, device)
    n_blocks = -(-n // block)
    groups = _row_groups(spec)
    gens: dict[tuple[int, int], torch.Generator] = {}
    out = []
    for b in range(n_blocks):
        lane = b % LANES
        for gi in range(len(groups)):
            if (lane, gi) not in gens:
                gens[(lane, gi)] = _unit_generator(spec, lane, gi, device)
        if spec.method == "vectors":
            g = gens[(lane, 0)]
            keys = torch.empty(block, spec.d, device=device, dtype=dt).normal_(generator=g)
            vals = torch.empty(block, spec.value_dim, device=device, dtype=dt).normal_(generator=g)
            out.append(torch.cat([keys, vals], dim=1))
        else:
            parts = []
            for gi, (r_lo, r_hi) in enumerate(groups):
                for r0 in range(r_lo, r_hi, rt):
                    r1 = min(r_hi, r0 + rt)
                    tile = torch.empty(r1 - r0, block, device=device, dtype=dt)
                    _fill_logit_tile(tile, torch.ones(r1 - r0, dtype=torch.float64, device=device),
                                     gens[(lane, gi)], dt == torch.float32)
                    parts.append(tile)
            out.append(torch.cat(parts, dim=0))
    return out


def _plain_normalizer(name: str) -> Softmax | SoftmaxWithSink | Sigmoid:
    """The foundation's normaliser for a sweep normaliser name (sigmoid's bias -log n)."""
    return {"softmax": Softmax(), "softmax1": SoftmaxWithSink(0.0), "sigmoid": Sigmoid()}[name]


def reference_sweep(spec: SweepSpec, device: str | torch.device = "cpu") -> pd.DataFrame:
    """The plain materialised reference for :func:`entropy_vs_length`, same draws, same columns.

    For each n it materialises the logits ``(R, n)`` (or the keys ``(n, d)`` and values
    ``(n, Dv)`` and calls :func:`attncore.attention.attention_stages`), normalises whole
    rows with the foundation's normalisers (SSMax through :class:`~attncore.normalizers.SSMax`)
    and reduces them with :mod:`attncore.stats`. Limited to ``R x n <= 16M`` cells.

    Note: for ``logits`` the unit-std draws are rescaled per row, which equals drawing at
    the row's std up to float32 rounding (the engine draws at the row's std directly).
    """
    from attncore.attention import attention_stages

    spec.validate()
    dev = torch.device(device)
    dt = SWEEP_DTYPES[spec.dtype]
    n_max = max(spec.lengths)
    check_limit(spec.queries * n_max, MAX_ATTENTION_CELLS, "query rows x n of the materialised reference",
                "cells", "Use entropy_vs_length for long rows.")
    q = _draw_queries(spec, dev, dt)
    q_norm = torch.linalg.vector_norm(q.to(torch.float64), dim=1)
    blocks = torch.cat(_replay_lane_blocks(spec, n_max, dev), dim=1 if spec.method == "logits" else 0)
    records = []
    for n in sorted(set(spec.lengths)):
        factor = spec.logit_factor(n)
        if spec.method == "logits":
            x = (blocks[:, :n].to(torch.float64) * (q_norm * factor)[:, None]).to(dt)  # (R, n)
            w = _plain_normalizer(spec.normalizer)(x)
            out_ms = None
        else:
            keys, vals = blocks[:n, : spec.d], blocks[:n, spec.d:]
            if spec.scale_rule == "ssmax" and spec.normalizer == "softmax":
                norm_obj = SSMax(spec.ssmax_s)
                scale = spec.base_scale
            else:
                norm_obj = _plain_normalizer(spec.normalizer)
                scale = spec.base_scale * float(logit_multiplier(spec.scale_rule, n, spec.ssmax_s))
            st = attention_stages(q[None], keys[None], vals[None], scale=scale, normalizer=norm_obj,
                                  temperature=spec.temperature)
            w = st.weights[0]  # (R, n)
            out_ms = (st.output[0].to(torch.float64) ** 2).mean(dim=1)
        w64 = w.to(torch.float64)
        rows = {"entropy": row_entropy(w64), "max_weight": row_max_weight(w64),
                "sum_sq": sum_squares(w64), "row_sum": row_total(w64)}
        if out_ms is not None:
            rows["out_ms"] = out_ms
        rows = {k: v.cpu() for k, v in rows.items()}
        records.append(_summarise(n, rows, spec, factor, q_norm.cpu()))
    return _frame(records)


def with_lengths(spec: SweepSpec, lengths: Sequence[int]) -> SweepSpec:
    """A copy of ``spec`` with other lengths."""
    return replace(spec, lengths=tuple(int(n) for n in lengths))


# --------------------------------------------------------------------------- SSMax figure 1


def peak_weight_sweep(
    lengths: Sequence[int],
    *,
    peak: float = 3.0,
    rest: float = -2.0,
    s: float = 0.43,
    device: str | torch.device = "cpu",
) -> pd.DataFrame:
    """The SSMax paper's figure-1 setup, measured: one logit at ``peak``, n-1 at ``rest``.

    For each n a row of logits ``(n,)`` is materialised on ``device`` and normalised by
    attncore's :class:`~attncore.normalizers.Softmax` and :class:`~attncore.normalizers.SSMax`
    (logits times ``s log n``); the weight on the peak key is reported. Columns ``n``,
    ``softmax``, ``ssmax``. Limited to n <= 2**20 per row.
    """
    ns = sorted(set(int(n) for n in lengths))
    if not ns or ns[0] < 2:
        raise AttnInputError("the figure needs rows of at least 2 keys.")
    check_limit(ns[-1], 1 << 20, "the longest row of the figure-1 panel", "keys", "Lower its largest n.")
    for name, v in (("peak", peak), ("rest", rest)):
        if not (math.isfinite(v) and abs(v) <= 100):
            raise AttnInputError(f"the {name} logit must be a number in [-100, 100]; got {v}.")
    ssmax = SSMax(s)  # validates s
    dev = torch.device(device)
    out = {"n": ns, "softmax": [], "ssmax": []}
    for n in ns:
        x = torch.full((1, n), float(rest), dtype=torch.float64, device=dev)  # (1, n)
        x[0, 0] = float(peak)
        out["softmax"].append(float(Softmax()(x)[0, 0]))
        out["ssmax"].append(float(ssmax(x)[0, 0]))
    return pd.DataFrame(out)
