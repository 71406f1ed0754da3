"""The plain materialised reference for the streaming engine: same draws, same columns.

It replays the engine's random blocks (:mod:`attncore.sweeps.rng`) in key order, materialises
every row, normalises it with the foundation's normalisers and reduces it with
:mod:`attncore.stats`. Shapes as in the package legend: ``L`` query rows, ``n`` keys,
``K`` keys per block.
"""

from __future__ import annotations

import pandas as pd
import torch
from torch import Tensor

from attncore.attention import attention_stages
from attncore.budget import MAX_ATTENTION_CELLS, check_limit
from attncore.normalizers import Sigmoid, Softmax, SoftmaxWithSink, SSMax
from attncore.scale_rules import logit_multiplier
from attncore.stats import entropy as row_entropy
from attncore.stats import max_weight as row_max_weight
from attncore.stats import row_sum as row_total
from attncore.stats import sum_squares
from attncore.sweeps.reduce import VALUE_BATCHES, batch_outputs, frame, summarise
from attncore.sweeps.rng import LANES, draw_queries, fill_logit_tile, row_groups, unit_generator
from attncore.sweeps.spec import SWEEP_DTYPES, SweepSpec, plan_blocks

__all__ = ["reference_sweep"]


def _replay_lane_blocks(spec: SweepSpec, n: int, device: torch.device) -> list[Tensor]:
    """The engine's random blocks for keys [0, n), in key order, for the reference.

    logits: per block the full ``(L, K)`` standard-normal draws scaled to unit std per row
    (returned as z; the caller multiplies by std). vectors: per block ``(K, d + Ev)``.
    """
    dt = SWEEP_DTYPES[spec.dtype]
    block, rt = plan_blocks(spec, device)
    n_blocks = -(-n // block)
    groups = row_groups(spec)
    gens: dict[tuple[int, int], torch.Generator] = {}
    out = []
    for b in range(n_blocks):
        lane = b % LANES
        for gi in range(len(groups)):
            if (lane, gi) not in gens:
                gens[(lane, gi)] = unit_generator(spec, lane, gi, device)
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
                    fill_logit_tile(tile, torch.ones(r1 - r0, dtype=torch.float64, device=device),
                                     gens[(lane, gi)], dt == torch.float32)
                    parts.append(tile)
            out.append(torch.cat(parts, dim=0))
    return out


def _plain_normalizer(name: str) -> Softmax | SoftmaxWithSink | Sigmoid:
    """The foundation's normaliser for a sweep normaliser name (sigmoid's bias -log n)."""
    return {"softmax": Softmax(), "softmax1": SoftmaxWithSink(0.0), "sigmoid": Sigmoid()}[name]


def reference_sweep(spec: SweepSpec, device: str | torch.device = "cpu") -> pd.DataFrame:
    """The plain materialised reference for :func:`entropy_vs_length`, same draws, same columns.

    For each n it materialises the logits ``(L, n)`` (or the keys ``(n, d)`` and values
    ``(n, Ev)`` and calls :func:`attncore.attention.attention_stages`), normalises whole
    rows with the foundation's normalisers (SSMax through :class:`~attncore.normalizers.SSMax`)
    and reduces them with :mod:`attncore.stats`. Limited to ``L x n <= 16M`` cells.

    Note: for ``logits`` the unit-std draws are rescaled per row, which equals drawing at
    the row's std up to float32 rounding (the engine draws at the row's std directly).
    """
    spec.validate()
    dev = torch.device(device)
    dt = SWEEP_DTYPES[spec.dtype]
    n_max = max(spec.lengths)
    check_limit(spec.queries * n_max, MAX_ATTENTION_CELLS, "query rows x n of the materialised reference",
                "cells", "Use entropy_vs_length for long rows.")
    q = draw_queries(spec, dev, dt)
    q_norm = torch.linalg.vector_norm(q.to(torch.float64), dim=1)
    blocks = torch.cat(_replay_lane_blocks(spec, n_max, dev), dim=1 if spec.method == "logits" else 0)
    records = []
    for n in sorted(set(spec.lengths)):
        factor = spec.logit_factor(n)
        if spec.method == "logits":
            x = (blocks[:, :n].to(torch.float64) * (q_norm * factor)[:, None]).to(dt)  # (L, n)
            w = _plain_normalizer(spec.normalizer)(x)
            batches = None
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
            w = st.weights[0]  # (L, n)
            key_batch = torch.arange(n, device=w.device) % VALUE_BATCHES  # key j: batch j mod B (the engine)
            batches = batch_outputs(w, vals, key_batch)
        w64 = w.to(torch.float64)
        rows = {"entropy": row_entropy(w64), "max_weight": row_max_weight(w64),
                "sum_sq": sum_squares(w64), "row_sum": row_total(w64)}
        if batches is not None:
            rows["out_b"], rows["sq_b"] = batches
        rows = {k: v.cpu() for k, v in rows.items()}
        records.append(summarise(n, rows, spec, factor, q_norm.cpu()))
    return frame(records)


