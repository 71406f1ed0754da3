"""The fused kernels' random numbers replayed outside a sweep: the draws materialised, the reference
sweep on those draws (the test of :func:`attncore.sweeps.fused.run_fused_sweep`), the generator's normals
and the floor kernel (what no fused sweep can skip; bench).

Shape legend as in :mod:`attncore.sweeps.fused`: ``R`` query rows, ``n`` keys, ``d`` query/key dim,
``Dv`` value dim, ``P`` programs (key chunks) of one launch.
"""

from __future__ import annotations

import pandas as pd
import torch
from torch import Tensor

from attncore.attention import attention_stages
from attncore.budget import check_limit
from attncore.device import resolve_device
from attncore.errors import AttnInputError
from attncore.normalizers import Sigmoid, Softmax, SoftmaxWithSink, SSMax
from attncore.scale_rules import logit_multiplier
from attncore.stats import entropy, max_weight, row_sum, sum_squares
from attncore.sweeps.fused import key_batches
from attncore.sweeps.fused_plan import (
    BN,
    GROUP,
    OPTS,
    RB,
    STREAM_KEYS,
    STREAM_LOGITS,
    STREAM_VALUES,
    LaunchPlan,
    fused_unavailable_reason,
    kernels_module,
    launch_plan,
    mix64,
)
from attncore.sweeps.reduce import (
    batch_outputs,
    frame,
    summarise,
)
from attncore.sweeps.rng import draw_queries
from attncore.sweeps.spec import SweepSpec

__all__ = [
    "fused_draws",
    "fused_floor",
    "fused_normals",
    "fused_reference_sweep",
]


def fused_draws(spec: SweepSpec, n: int, device: str | torch.device | None = None) -> dict[str, Tensor]:
    """The random numbers the fused kernels use for keys [0, n), materialised (tests, reference).

    logits: ``{"z": (R, n)}`` unit-std logits (row r's logits are ``z[r] * |q_r| * factor``);
    vectors: ``{"keys": (n, d), "values": (n, Dv)}`` (tf32 numbers, as the kernel uses them).
    Limited to 16M numbers.
    """
    dev = resolve_device(device)
    why = fused_unavailable_reason(dev)
    if why is not None:
        raise AttnInputError(f"the fused kernels cannot run here: {why}")
    k = kernels_module()
    plan = launch_plan(spec)
    R = spec.queries
    if spec.method == "logits":
        check_limit(R * n, 1 << 24, "the replayed logits", "numbers", "Lower n or the rows.")
        z = torch.empty(R, n, device=dev, dtype=torch.float32)
        k._draw_logits_kernel[(plan.row_programs, -(-n // GROUP))](z, mix64(spec.seed, STREAM_LOGITS), n, R,
                                                                  RB=RB, GROUP=GROUP, **OPTS)
        return {"z": z}
    check_limit(n * (plan.dch * plan.n_dch + plan.dvp), 1 << 24, "the replayed keys and values", "numbers",
                "Lower n or d.")
    kp = torch.empty(n, plan.dch * plan.n_dch, device=dev, dtype=torch.float32)
    vp = torch.empty(n, plan.dvp, device=dev, dtype=torch.float32)
    seeds = mix64(spec.seed, STREAM_KEYS), mix64(spec.seed, STREAM_VALUES)
    k._draw_vectors_kernel[(-(-n // BN),)](kp, vp, *seeds, n, plan.n_dch, BN=BN, DCH=plan.dch, DVP=plan.dvp,
                                          FAST=dev.type == "cuda", **OPTS)
    return {"keys": kp[:, : spec.d], "values": vp[:, : spec.value_dim]}


def fused_reference_sweep(spec: SweepSpec, device: str | torch.device | None = None,
                          draws: dict[str, Tensor] | None = None) -> pd.DataFrame:
    """The materialised reference on the fused kernels' own draws (same columns as the sweep).

    Materialises the logits ``(R, n)`` (or keys/values and :func:`attncore.attention.attention_stages`),
    normalises whole rows with attncore's normalisers and reduces them with :mod:`attncore.stats`,
    as :func:`attncore.sweeps.reference_sweep` does with the torch engine's draws.
    """
    dev = resolve_device(device)
    n_max = max(spec.lengths)
    if draws is None:
        draws = fused_draws(spec, n_max, dev)
    q = draw_queries(spec, dev, torch.float32)
    q_norm = torch.linalg.vector_norm(q.to(torch.float64), dim=1)
    plain = {"softmax": Softmax(), "softmax1": SoftmaxWithSink(0.0), "sigmoid": Sigmoid()}
    records = []
    for n in sorted(set(spec.lengths)):
        factor = spec.logit_factor(n)
        batches = None
        if spec.method == "logits":
            x = draws["z"][:, :n] * (q_norm * factor).to(torch.float32)[:, None]  # (R, n), as the kernel
            w = plain[spec.normalizer](x)
        else:
            keys, vals = draws["keys"][:n], draws["values"][:n]
            if spec.scale_rule == "ssmax" and spec.normalizer == "softmax":
                norm, scale = SSMax(spec.ssmax_s), spec.base_scale
            else:
                norm = plain[spec.normalizer]
                scale = spec.base_scale * float(logit_multiplier(spec.scale_rule, n, spec.ssmax_s))
            st = attention_stages(q[None], keys[None], vals[None], scale=scale, normalizer=norm,
                                  temperature=spec.temperature)
            w = st.weights[0]  # (R, n)
            lens = next(lens for f, lens in spec.passes() if n in lens and f == factor)
            batches = batch_outputs(w, vals, key_batches(spec, lens, n).to(w.device))
        w64 = w.to(torch.float64)
        rows = {"entropy": entropy(w64), "max_weight": max_weight(w64), "sum_sq": sum_squares(w64),
                "row_sum": row_sum(w64)}
        if batches is not None:
            rows["out_b"], rows["sq_b"] = batches
        records.append(summarise(n, {k: v.cpu() for k, v in rows.items()}, spec, factor, q_norm.cpu()))
    return frame(records)


def fused_normals(n: int, seed: int = 0, device: str | torch.device | None = None, *, stream: int = 99,
                  vectors: bool = False) -> Tensor:
    """``4 n`` standard normals from the kernels' generator (Philox + 40-bit Box-Muller), float32.

    Output ``s`` of counter ``i`` is element ``s n + i``; the Philox key is ``(seed, stream)``
    mixed as the sweeps mix theirs. ``vectors``: the vectors kernels' transform (on CUDA the
    fast special functions; see ``fused_kernels._box_muller``), else the logits kernels'.
    """
    dev = resolve_device(device)
    k = kernels_module()
    out = torch.empty(4 * n, device=dev, dtype=torch.float32)
    block = 1024
    k._normals_kernel[(-(-n // block),)](out, mix64(seed, stream), n, BLOCK=block,
                                         FAST=vectors and dev.type == "cuda", **OPTS)
    return out


def fused_floor(rows: int, n: int, device: str | torch.device | None = None, *, fast: bool = False) -> Tensor:
    """The floor kernel: ``rows x n`` Philox Gaussians and one exp each, summed per row chunk.

    What no fused sweep can skip (bench); returns the per-chunk sums (P, rows) so nothing is
    optimised away. Queued, not synchronised. ``fast``: with the vectors kernels' transform
    (the GPU's one-instruction log, sin and cos; compiled on CUDA only).
    """
    dev = resolve_device(device)
    k = kernels_module()
    plan = LaunchPlan(row_block=RB, row_programs=-(-rows // RB), n_dch=0, dch=0, dvp=0, key_align=GROUP,
                 samples_per_key=rows)
    chunk = plan.chunk(n)
    programs = -(-n // chunk)
    out = torch.empty(programs, rows, device=dev, dtype=torch.float32)
    std = torch.full((rows,), 0.5, device=dev, dtype=torch.float32)
    k._logits_floor_kernel[(plan.row_programs, programs)](out, std, 12345, n, chunk, rows, RB=RB, GROUP=GROUP,
                                                         FAST=fast and dev.type == "cuda", **OPTS)
    return out
