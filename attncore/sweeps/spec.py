"""What a sweep is and what the torch engine makes of it: :class:`SweepSpec`, its block plan and cost.

Shapes (see the package legend): ``L`` query rows (``spec.queries``), ``n`` keys a row
sees, ``d`` query/key dim, ``Ev`` value dim, ``K`` keys per streamed block, ``Lt`` rows per
logit tile.

Cost of the torch engine (:func:`torch_work`): one work unit is about one Gaussian sample's
time on a CPU; matmul flops count 1/128 unit each (0.2 G samples/s against ~25 GFLOP/s per
two cores). Which engine runs a sweep, and its cost there, is :mod:`attncore.sweeps.dispatch`'s.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from attncore.budget import check_limit
from attncore.dtypes import DTYPES, SAMPLE_DTYPES
from attncore.errors import AttnInputError
from attncore.scale_rules import SCALE_RULES, base_scale, logit_multiplier

__all__ = [
    "COLUMNS",
    "MAX_SWEEP_D",
    "MAX_SWEEP_N",
    "MAX_SWEEP_QUERIES",
    "MAX_SWEEP_WORK",
    "MAX_VALUE_DIM",
    "METHODS",
    "PROBE_WORK",
    "SWEEP_DTYPES",
    "SWEEP_NORMALIZERS",
    "SweepSpec",
    "block_keys",
    "plan_blocks",
    "torch_work",
    "units_per_key",
]

METHODS: tuple[str, ...] = ("logits", "vectors")
SWEEP_NORMALIZERS: tuple[str, ...] = ("softmax", "softmax1", "sigmoid")
SWEEP_DTYPES: dict[str, torch.dtype] = {name: DTYPES[name] for name in SAMPLE_DTYPES}

MAX_SWEEP_N = 1 << 24  # 16.8M keys per row
MAX_SWEEP_QUERIES = 1024
MAX_SWEEP_D = 4096
MAX_VALUE_DIM = 256
# Random numbers (plus matmul work in the same unit) one sweep may cost: about a minute
# on a 2-core CPU at ~0.2 G samples/s.
MAX_SWEEP_WORK = 1 << 33
MAX_SSMAX_S = 10.0
MAX_TEMPERATURE = 1000.0
PROBE_WORK = 1 << 24  # work units of a calibration probe (about 0.1 s on a 2-core CPU)

COLUMNS: tuple[str, ...] = (
    "n", "entropy", "entropy_sem", "normalized_entropy", "normalized_entropy_sem",
    "max_weight", "max_weight_sem", "effective_support", "effective_support_sem",
    "output_std", "output_std_sem", "sum_sq", "sum_sq_sem", "row_sum", "row_sum_sem",
    "logit_std", "logit_factor",
)



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

    def validate(self, max_n: int = MAX_SWEEP_N, check_work: bool = True) -> None:
        """Raise :class:`AttnInputError` / ``ResourceLimitError`` with a plain message.

        ``max_n``: the cap on n of the engine that runs it (the torch engine's 2^24 by default;
        :func:`attncore.sweeps.max_sweep_n` gives a device's). ``check_work``: check the torch
        engine's work limit (the fused engine checks its own,
        :func:`attncore.sweeps.fused_plan.validate_fused`).
        """
        if not self.lengths:
            raise AttnInputError("give at least one sequence length n.")
        for n in self.lengths:
            if isinstance(n, bool) or not isinstance(n, (int, np.integer)):
                raise AttnInputError(f"sequence lengths must be whole numbers; got {n!r}.")
        lo, hi = min(self.lengths), max(self.lengths)
        if lo < 1:
            raise AttnInputError(f"a row needs at least one key; got n = {lo}.")
        if hi > max_n:
            why = ("beyond it a sweep takes minutes on a CPU" if max_n <= MAX_SWEEP_N else
                   "the fused kernels' cap on this GPU")
            raise AttnInputError(
                f"n = {hi:,} is above the cap of {max_n:,} (2^{max_n.bit_length() - 1}) keys per row: "
                f"{why}. Lower the largest n."
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
        if not check_work:
            return
        check_limit(torch_work(self), MAX_SWEEP_WORK, "this sweep's work (random numbers drawn)",
                    "(about a minute on a 2-core CPU)",
                    "Lower the largest n, the query rows or d, or use the logits method.")

    @property
    def base_scale(self) -> float:
        """``1/sqrt(d)`` (every rule but ``none``) or 1 (:func:`attncore.scale_rules.base_scale`)."""
        return base_scale(self.scale_rule, self.d)

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




def plan_blocks(spec: SweepSpec, device: torch.device) -> tuple[int, int]:
    """(keys per block K, rows per logit tile Lt) for a device."""
    cuda = device.type == "cuda"
    if spec.method == "logits":
        rt = min(spec.queries, 16)
        # 2^16 keys: fewer, longer torch calls (two worker threads share one GIL; 2^14-key blocks
        # measured 20-40% slower). Short sweeps still use both workers through ROW_GROUPS. 16-row
        # tiles (4 MB): the Entropy page's comparison at a new d 0.16 -> 0.13 s against 4-row tiles.
        keys = (1 << 16) if not cuda else (1 << 20)
        return keys, rt
    per_key = max(1, spec.d + spec.value_dim)
    target = (1 << 23) if cuda else (1 << 20)
    keys = 1 << int(max(8, min(16, math.floor(math.log2(max(1, target // per_key))))))
    return keys, min(spec.queries, 64)


def block_keys(spec: SweepSpec, device: torch.device | str = "cpu") -> int:
    """Keys per streamed block on ``device`` (work is done, and can be stopped, per block)."""
    return plan_blocks(spec, torch.device(device))[0]


def torch_work(spec: SweepSpec, device: torch.device | str = "cpu") -> int:
    """Work units the torch engine spends on a sweep: random numbers drawn plus matmul flops / 128.

    On a CPU one Gaussian sample costs about as much as 128 flops of matmul (0.2 G samples/s
    against ~25 GFLOP/s per two cores), so a unit is roughly one sample's time. The estimate
    of :mod:`ui.sweep` multiplies this by a measured seconds-per-unit rate.
    """
    block, _ = plan_blocks(spec, torch.device(device))
    total = 0
    for _, lens in spec.passes():
        keys = -(-max(lens) // block) * block
        total += keys * units_per_key(spec)
    return int(total)


def units_per_key(spec: SweepSpec) -> int:
    """Work units per key of one pass: L logits, or d + Ev samples plus the matmul share."""
    if spec.method == "logits":
        return spec.queries
    per_key = spec.d + spec.value_dim
    return per_key + (2 * spec.queries * per_key) // 128
