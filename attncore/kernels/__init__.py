"""What ``torch.nn.functional.scaled_dot_product_attention`` really runs, and what it saves.

For one configuration (device, dtype, shape, mask kind, dropout) this package asks each of
torch's SDPA backends to run it under ``torch.nn.attention.sdpa_kernel``, records the
reason torch gives when a backend refuses (the warnings it emits, else its error), finds
the backend the default dispatch picks (``torch._fused_sdp_choice`` where torch exposes it,
checked against the outputs), and for every backend that ran measures the time (every one of
several interleaved rounds, with the machine's load; CUDA events on a GPU), the peak extra
memory (``torch.cuda.max_memory_allocated`` on CUDA; on the CPU the peak resident-set increase
measured in a fresh process, forked from a long-lived helper that has imported torch:
:func:`warm_memory_measurement`) and the largest difference from attncore's float64
reference, fully masked query rows included. Two materialised baselines run beside them:
:func:`attncore.attention` with its weights, and softmax(QK^T/sqrt(E))V written the notebook
way (:func:`notebook_attention`). What the reference page "Scaled Dot-Product Attention" says
of FlashAttention is checked against the measurements by stated rules (:func:`check_claims`).

Shape vocabulary (the package's): ``B`` batch, ``H`` query heads, ``Hkv`` key/value heads
(``H / groups``), ``L`` queries, ``S`` keys, ``E`` head dim (values have the same dim). A
sweep runs self-attention sizes ``L = S`` over a list of lengths (the page calls them T).

Limits: every size is checked against a memory budget before anything is allocated; a
materialised path (torch's math backend and both baselines) whose L x S matrices would not
fit is skipped with a note while the fused kernels still run; a whole sweep whose work
exceeds :data:`MAX_SWEEP_FLOPS` raises :class:`~attncore.errors.ResourceLimitError`.

Modules by concept: :mod:`~attncore.kernels.spec` (the configuration, its limits and the
seeded inputs), :mod:`~attncore.kernels.calls` (each backend's call, the dispatch's choice,
:data:`SDPA_LOCK`), :mod:`~attncore.kernels.cost` (flops as each path does them, memory
estimates, budgets), :mod:`~attncore.kernels.reference` (the float64 reference and the online
softmax written out), :mod:`~attncore.kernels.results`, :mod:`~attncore.kernels.probe` (one
size, timed rounds), :mod:`~attncore.kernels.memory` (the forked CPU measurement),
:mod:`~attncore.kernels.sweep` and :mod:`~attncore.kernels.claims` (verdicts by rule).
"""

from attncore.kernels.calls import (
    BACKENDS,
    BASELINES,
    LABELS,
    MATERIALISING,
    SDPA_BACKENDS,
    SDPA_LOCK,
    default_choice,
    notebook_attention,
)
from attncore.kernels.claims import (
    CLAIMED_SPEEDUP,
    RULES,
    VERDICTS,
    Claim,
    PowerFit,
    check_claims,
    fmt_ratio,
    growth_fit,
    noise_flags,
)
from attncore.kernels.cost import (
    DEFAULT_BUDGET_BYTES,
    MAX_SWEEP_FLOPS,
    call_flops,
    causal_pairs,
    check_inputs,
    check_sweep,
    cpu_flash_bytes,
    default_budget_bytes,
    full_flops,
    materialised_bytes,
    sweep_flops,
    tolerance,
)
from attncore.kernels.memory import measure_memory, proc_status_kib, reset_peak_rss, warm_memory_measurement
from attncore.kernels.probe import probe
from attncore.kernels.reference import online_softmax_attention, reference_error
from attncore.kernels.results import BackendResult, MachineLoad, SizeResult, Spread, SweepResult, paired_ratio
from attncore.kernels.spec import (
    FULLY_MASKED_EVERY,
    GROUP_CHOICES,
    HEAD_CHOICES,
    HEAD_DIM_CHOICES,
    LENGTH_CHOICES,
    MASK_KINDS,
    MAX_BATCH,
    MAX_GROUPS,
    MAX_HEAD_DIM,
    MAX_HEADS,
    MAX_T,
    MIN_T,
    SHAPE_PRESETS,
    KernelInputs,
    KernelSpec,
    ShapePreset,
    fully_masked_rows,
    input_bytes,
    make_inputs,
)
from attncore.kernels.sweep import sweep

__all__ = [
    "BACKENDS",
    "BASELINES",
    "CLAIMED_SPEEDUP",
    "DEFAULT_BUDGET_BYTES",
    "FULLY_MASKED_EVERY",
    "GROUP_CHOICES",
    "HEAD_CHOICES",
    "HEAD_DIM_CHOICES",
    "LABELS",
    "LENGTH_CHOICES",
    "MASK_KINDS",
    "SHAPE_PRESETS",
    "ShapePreset",
    "MATERIALISING",
    "MAX_BATCH",
    "MAX_GROUPS",
    "MAX_HEADS",
    "MAX_HEAD_DIM",
    "MAX_SWEEP_FLOPS",
    "MAX_T",
    "MIN_T",
    "RULES",
    "SDPA_BACKENDS",
    "SDPA_LOCK",
    "VERDICTS",
    "BackendResult",
    "Claim",
    "KernelInputs",
    "KernelSpec",
    "MachineLoad",
    "PowerFit",
    "SizeResult",
    "Spread",
    "SweepResult",
    "call_flops",
    "causal_pairs",
    "check_claims",
    "check_inputs",
    "check_sweep",
    "cpu_flash_bytes",
    "default_budget_bytes",
    "default_choice",
    "fmt_ratio",
    "fully_masked_rows",
    "full_flops",
    "growth_fit",
    "input_bytes",
    "make_inputs",
    "materialised_bytes",
    "measure_memory",
    "noise_flags",
    "notebook_attention",
    "online_softmax_attention",
    "paired_ratio",
    "probe",
    "proc_status_kib",
    "reference_error",
    "reset_peak_rss",
    "sweep",
    "sweep_flops",
    "tolerance",
    "warm_memory_measurement",
]
