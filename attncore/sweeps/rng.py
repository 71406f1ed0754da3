"""Random streams of a sweep: lanes, row groups, seeding, and exact Gaussian tails.

Blocks of keys are dealt to :data:`LANES` lanes (block ``b`` to lane ``b mod LANES``); the
``logits`` method also splits its ``L`` query rows into :data:`ROW_GROUPS` contiguous
groups. Each (lane, group) has its own ``torch.Generator`` seeded from
``(seed, stream, lane[, group])`` and consumes its blocks in order, so results do not depend
on how many worker threads run (up to ``LANES x ROW_GROUPS``), and a one-block sweep still
keeps two workers busy.

torch's float32 ``normal_`` uses 24-bit uniforms in Box-Muller and never returns more than
5.77 standard deviations; at ``n = 2**24`` the largest of a row's logits would sit on that
cap about 7% of the time, so the ``logits`` method redraws every sample above
:data:`TAIL_Z` standard deviations from the exact Gaussian tail (in float64).
"""

from __future__ import annotations

import torch
from torch import Tensor

from attncore.sweeps.spec import SWEEP_DTYPES, SweepSpec

__all__ = ["LANES", "ROW_GROUPS", "TAIL_Z", "draw_queries", "fill_logit_tile", "gauss_tail", "query_norms",
           "row_groups", "splitmix64", "unit_generator"]

LANES = 16  # fixed random-stream lanes: block b belongs to lane b % LANES
ROW_GROUPS = 2  # logits: the rows split into this many groups, each with its own streams
TAIL_Z = 5.0  # float32 samples above this many std are redrawn from the exact tail

_STREAM_QUERIES, _STREAM_LOGITS, _STREAM_KEYS = 1, 2, 3


def splitmix64(*parts: int) -> int:
    """splitmix64 over the parts: a well-spread unsigned 64-bit seed (callers keep the bits they need)."""
    x = 0x9E3779B97F4A7C15
    mask = (1 << 64) - 1
    for p in parts:
        x = (x ^ (int(p) & mask)) & mask
        x = (x + 0x9E3779B97F4A7C15) & mask
        z = x
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & mask
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & mask
        x = z ^ (z >> 31)
    return x


def _mix(*parts: int) -> int:
    """A well-spread 32-bit seed from the parts (mt19937 keeps 32 bits)."""
    return splitmix64(*parts) & 0xFFFFFFFF


def _generator(seed: int, stream: int, lane: int, device: torch.device, group: int | None = None
               ) -> torch.Generator:
    """A generator on ``device`` for one stream of one lane (and row group)."""
    g = torch.Generator(device=device)
    g.manual_seed(_mix(seed, stream, lane) if group is None else _mix(seed, stream, lane, group))
    return g


def row_groups(spec: SweepSpec) -> list[tuple[int, int]]:
    """Contiguous row ranges ``[(start, stop)]`` that draw from their own random streams.

    The logits method's rows are independent, so ``ROW_GROUPS`` groups let two workers share
    even a one-block sweep; the vectors method's rows share their keys (one group).
    """
    L = spec.queries
    if spec.method != "logits":
        return [(0, L)]
    g = min(ROW_GROUPS, L)
    return [(i * L // g, (i + 1) * L // g) for i in range(g)]


def unit_generator(spec: SweepSpec, lane: int, group: int, device: torch.device) -> torch.Generator:
    """The stream of one (lane, row group): logits streams are per group, vectors per lane."""
    if spec.method == "logits":
        return _generator(spec.seed, _STREAM_LOGITS, lane, device, group)
    return _generator(spec.seed, _STREAM_KEYS, lane, device)


def gauss_tail(k: int, a: float, g: torch.Generator, device: torch.device) -> Tensor:
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


def draw_queries(spec: SweepSpec, device: torch.device, dtype: torch.dtype) -> Tensor:
    """Queries ``(L, d)``, N(0, 1), the same for both methods."""
    g = _generator(spec.seed, _STREAM_QUERIES, 0, device)
    return torch.randn(spec.queries, spec.d, generator=g, device=device, dtype=dtype)


def query_norms(spec: SweepSpec, device: torch.device | str = "cpu") -> Tensor:
    """``|q_r|`` of the sweep's L query rows (L,), float64: the queries the engine draws on ``device``.

    The same seed gives the same queries for both methods; for the exact expectation given these
    queries see :func:`attncore.row_theory.sweep_theory_given_queries`.
    """
    q = draw_queries(spec, torch.device(device), SWEEP_DTYPES[spec.dtype])  # (L, d)
    return torch.linalg.vector_norm(q.to(torch.float64), dim=1)


def fill_logit_tile(tile: Tensor, std: Tensor, g: torch.Generator, fix_tail: bool) -> Tensor:
    """Fill ``tile`` (Lt, K) with N(0, std_r^2) rows; returns the row maxima (Lt,).

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
                row[idx] = (gauss_tail(idx.numel(), TAIL_Z, g, tile.device) * float(std[r])).to(tile.dtype)
                mx[r] = row.max()
        else:
            mask = tile > thr[:, None]
            k = int(mask.sum())
            if k:
                scale = std.to(torch.float64)[:, None].expand_as(tile)[mask]
                tile[mask] = (gauss_tail(k, TAIL_Z, g, tile.device) * scale).to(tile.dtype)
                mx = tile.amax(dim=1)
    return mx


