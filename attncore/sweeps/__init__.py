"""Streaming statistics of attention rows against sequence length: no n x n matrix, ever.

Shapes (the package legend, plus two sweep letters): ``L`` query rows, ``n`` keys a row
sees, ``d`` query/key dim (``E``), ``Ev`` value dim, ``K`` keys per streamed block, ``Lt``
rows per logit tile. The largest tensors held are one block: logits ``(Lt, K)`` or
``(L, K)``, keys ``(K, d)``, values ``(K, Ev)``; a sweep to ``n = 2**24`` needs a few MB.

Two methods give the same statistics:

``vectors``
    The real thing. Gaussian queries ``q`` ``(L, d)``, keys ``k_j`` ``(d,)`` and values
    ``v_j`` ``(Ev,)``, all N(0, 1), are drawn block by block; each block's logits
    ``q_r . k_j * scale`` are reduced in one streaming pass with the online
    max / log-sum-exp rescaling of FlashAttention (:mod:`attncore.sweeps.reduce`). From the
    running sums, at any length: entropy, max weight, ``sum p^2`` and the output, whose
    spread is measured directly.

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

Scale rules (:mod:`attncore.scale_rules`) multiply the logits ``q . k``; the temperature
divides them. Normalisers: ``softmax``; ``softmax1`` (``e^{x_i}/(1 + sum_j e^{x_j})``, rows
may sum to less than 1); ``sigmoid`` (``sigma(x_i - log n)``, no competition). As in
:mod:`attncore.stats`, the entropy family is computed on the row renormalised to sum 1;
max weight, ``sum p^2``, row sum and the output use the raw weights.

Random numbers: float32 samples, float64 accumulation, in per-lane streams
(:mod:`attncore.sweeps.rng`; the fused kernels: Philox in-kernel). The materialised
references (:func:`reference_sweep`, :func:`attncore.sweeps.fused_replay.fused_reference_sweep`)
use each engine's own draws.

Modules, in layers (each imports only the ones above it; ``tests/test_sweeps_architecture.py``):
:mod:`~attncore.sweeps.spec` (what a sweep is, the torch engine's blocks and cost),
:mod:`~attncore.sweeps.progress` (progress, partial results, stopping);
:mod:`~attncore.sweeps.rng`, :mod:`~attncore.sweeps.draws` (draws kept between sweeps),
:mod:`~attncore.sweeps.reduce`; the two engines, :mod:`~attncore.sweeps.engine` (torch) and
:mod:`~attncore.sweeps.fused` (Triton kernels that draw their random numbers in-kernel: n up
to 2^30 on CUDA), and :mod:`~attncore.sweeps.reference`; last :mod:`~attncore.sweeps.dispatch`,
the one place that picks an engine (:func:`engine_choice`: by device, dtype, method and the
largest n, at the measured :data:`CROSSOVERS`), prices sweeps (:func:`plan`) and runs them
(:func:`run_sweep`, :func:`run_sweep_set`, :func:`entropy_vs_length`).
"""

from attncore.normalizers import peak_weight_sweep
from attncore.scale_rules import (
    LLAMA4_ATTN_SCALE,
    LLAMA4_FLOOR_SCALE,
    SCALE_RULES,
    llama4_multiplier,
    logit_multiplier,
)
from attncore.sweeps.dispatch import (
    CROSSOVERS,
    ENGINE_ENV,
    ENGINES,
    Crossover,
    EngineChoice,
    SweepPlan,
    check_sweep,
    choose_engine,
    engine_choice,
    entropy_vs_length,
    fused_from,
    max_sweep_n,
    max_sweep_work,
    partial_lengths,
    plan,
    run_sweep,
    run_sweep_set,
    sweep_work,
)
from attncore.sweeps.fused_plan import MAX_FUSED_WORK, MAX_SWEEP_N_CUDA
from attncore.sweeps.progress import Partial, Progress, SweepCancelled
from attncore.sweeps.reference import reference_sweep
from attncore.sweeps.rng import query_norms
from attncore.sweeps.spec import (
    COLUMNS,
    MAX_SWEEP_D,
    MAX_SWEEP_N,
    MAX_SWEEP_QUERIES,
    MAX_SWEEP_WORK,
    MAX_VALUE_DIM,
    METHODS,
    SWEEP_DTYPES,
    SWEEP_NORMALIZERS,
    SweepSpec,
    block_keys,
)

__all__ = [
    "COLUMNS",
    "CROSSOVERS",
    "ENGINES",
    "ENGINE_ENV",
    "LLAMA4_ATTN_SCALE",
    "LLAMA4_FLOOR_SCALE",
    "MAX_FUSED_WORK",
    "MAX_SWEEP_D",
    "MAX_SWEEP_N",
    "MAX_SWEEP_N_CUDA",
    "MAX_SWEEP_QUERIES",
    "MAX_SWEEP_WORK",
    "MAX_VALUE_DIM",
    "METHODS",
    "SCALE_RULES",
    "SWEEP_DTYPES",
    "SWEEP_NORMALIZERS",
    "Crossover",
    "EngineChoice",
    "Partial",
    "Progress",
    "SweepCancelled",
    "SweepPlan",
    "SweepSpec",
    "block_keys",
    "check_sweep",
    "choose_engine",
    "engine_choice",
    "entropy_vs_length",
    "fused_from",
    "llama4_multiplier",
    "logit_multiplier",
    "max_sweep_n",
    "max_sweep_work",
    "partial_lengths",
    "peak_weight_sweep",
    "plan",
    "query_norms",
    "reference_sweep",
    "run_sweep",
    "run_sweep_set",
    "sweep_work",
]
