"""What ``torch.nn.functional.scaled_dot_product_attention`` really runs, and what it saves.

For one configuration (device, dtype, shape, mask kind, dropout) this module asks each of
torch's SDPA backends to run it under ``torch.nn.attention.sdpa_kernel``, records the
reason torch gives when a backend refuses (the warnings it emits, else its error), finds
the backend the default dispatch picks (``torch._fused_sdp_choice`` where torch exposes it,
checked against the outputs), and for every backend that ran measures the time (median of
repeats; CUDA events on a GPU), the peak extra memory (``torch.cuda.max_memory_allocated``
on CUDA; on the CPU the peak resident-set increase measured in a fresh process, forked from a
long-lived helper that has imported torch: :func:`warm_memory_measurement`) and the
largest difference from attncore's float64 reference, fully masked query rows included.
Two materialised baselines run beside them: :func:`attncore.attention` with its weights,
and softmax(QK^T/sqrt(E))V written the notebook way (:func:`notebook_attention`).

Shape vocabulary (the package's): ``B`` batch, ``H`` query heads, ``Hkv`` key/value heads
(``H / groups``), ``L`` queries, ``S`` keys, ``E`` head dim (values have the same dim). A
sweep runs self-attention sizes ``L = S`` over a list of lengths (the page calls them T).

Limits: every size is checked against a memory budget before anything is allocated; a
materialised path (torch's math backend and both baselines) whose L x S matrices would not
fit is skipped with a note while the fused kernels still run; a whole sweep whose work
exceeds :data:`MAX_SWEEP_FLOPS` raises :class:`~attncore.errors.ResourceLimitError`.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import json
import math
import os
import re
import statistics
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.nn.attention import SDPBackend, sdpa_kernel

from attncore.attention import attention
from attncore.budget import check_limit
from attncore.dtypes import DTYPES
from attncore.errors import AttnInputError
from attncore.synthetic import make_generator

__all__ = [
    "BACKENDS",
    "SDPA_LOCK",
    "BASELINES",
    "DEFAULT_BUDGET_BYTES",
    "FULLY_MASKED_EVERY",
    "MASK_KINDS",
    "MATERIALISING",
    "MAX_SWEEP_FLOPS",
    "BackendResult",
    "KernelInputs",
    "KernelSpec",
    "SizeResult",
    "SweepResult",
    "check_sweep",
    "default_budget_bytes",
    "default_choice",
    "fully_masked_rows",
    "make_inputs",
    "materialised_bytes",
    "measure_memory",
    "notebook_attention",
    "probe",
    "proc_status_kib",
    "reference_error",
    "reset_peak_rss",
    "sweep",
    "sweep_flops",
    "tolerance",
]

# The four backends torch's public SDPA dispatch knows, in torch's own priority order on CUDA.
# (SDPBackend.OVERRIDEABLE exists for out-of-tree device back ends and is not tried here.)
SDPA_BACKENDS: dict[str, SDPBackend] = {
    "flash": SDPBackend.FLASH_ATTENTION,
    "efficient": SDPBackend.EFFICIENT_ATTENTION,
    "cudnn": SDPBackend.CUDNN_ATTENTION,
    "math": SDPBackend.MATH,
}
BACKENDS: tuple[str, ...] = tuple(SDPA_BACKENDS)
BASELINES: tuple[str, ...] = ("attncore", "notebook")
# Paths that form the whole (B, H, L, S) score matrix (and so are checked against the budget).
MATERIALISING: frozenset[str] = frozenset({"math", *BASELINES})
MASK_KINDS: tuple[str, ...] = ("none", "causal", "boolean", "float")
# Boolean and float masks hide every key from query rows 3, 3 + 64, 3 + 128, ...
FULLY_MASKED_EVERY = 64
FULLY_MASKED_FIRST = 3
# Each (query, key) pair survives the boolean / float mask with this probability.
MASK_KEEP = 0.9

# Materialised L x S work the page may ask for, per device type (4 * B * H * L * S * E flops
# per call, summed over every call a sweep makes): ~7 s on the 2-core development CPU.
MAX_SWEEP_FLOPS: dict[str, float] = {"cpu": 1.0e12, "cuda": 5.0e14, "mps": 1.0e12}
# Memory the materialised paths may use on the CPU (the machine is shared).
DEFAULT_BUDGET_BYTES = 1 << 30
# float64 reference cells per comparison: the reference is computed on a sample of query rows.
REF_CELLS = 1 << 23
MAX_HEADS, MAX_GROUPS, MAX_HEAD_DIM, MAX_BATCH = 64, 16, 256, 8
MIN_T, MAX_T = 16, 1 << 16

Progress = Callable[[float, str], None]
Cancel = Callable[[], bool]


def _itemsize(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


@dataclass(frozen=True)
class KernelSpec:
    """One SDPA configuration; the lengths ``L``, ``S`` are given per call.

    Attributes:
        heads: query heads ``H``.
        groups: query heads per key/value head (GQA); ``Hkv = H / groups``; 1 = plain MHA,
            ``groups = H`` = multi-query attention.
        head_dim: ``E`` (query, key and value dim).
        mask: ``"none"``, ``"causal"`` (``is_causal=True``), ``"boolean"`` or ``"float"``
            (an ``(L, S)`` ``attn_mask``; see :func:`make_inputs`).
        dropout: ``dropout_p`` passed to SDPA (training mode); the output is random then.
        dtype: ``"float32"``, ``"float64"``, ``"float16"`` or ``"bfloat16"``.
        batch: ``B``.
        seed: seeds the inputs and the masks.
    """

    heads: int = 16
    groups: int = 1
    head_dim: int = 64
    mask: str = "none"
    dropout: float = 0.0
    dtype: str = "float32"
    batch: int = 1
    seed: int = 0

    @property
    def kv_heads(self) -> int:
        """``Hkv``: key/value heads."""
        return self.heads // self.groups

    @property
    def torch_dtype(self) -> torch.dtype:
        """The dtype as a ``torch.dtype``."""
        return DTYPES[self.dtype]

    def validate(self) -> None:
        """Raise :class:`AttnInputError` with a plain message when a field is out of range."""
        if self.dtype not in DTYPES:
            raise AttnInputError(f"unknown dtype {self.dtype!r}; use one of {', '.join(DTYPES)}.")
        if self.mask not in MASK_KINDS:
            raise AttnInputError(f"unknown mask kind {self.mask!r}; use one of {', '.join(MASK_KINDS)}.")
        for name, v, hi in (("heads", self.heads, MAX_HEADS), ("groups", self.groups, MAX_GROUPS),
                            ("head_dim", self.head_dim, MAX_HEAD_DIM), ("batch", self.batch, MAX_BATCH)):
            if not 1 <= int(v) <= hi:
                raise AttnInputError(f"{name} must be between 1 and {hi}; got {v}.")
        if self.heads % self.groups:
            raise AttnInputError(
                f"grouped-query attention needs the heads ({self.heads}) to be a multiple of the "
                f"group size ({self.groups})."
            )
        if not (math.isfinite(self.dropout) and 0.0 <= self.dropout < 1.0):
            raise AttnInputError(f"dropout must be in [0, 1); got {self.dropout}.")


@dataclass(frozen=True)
class KernelInputs:
    """Inputs of one SDPA call.

    Attributes:
        query: (B, H, L, E).
        key, value: (B, Hkv, S, E).
        attn_mask: (L, S) boolean (True = may attend) or float (added to the scores), or None.
        is_causal: the ``is_causal`` flag (mask kind ``"causal"``).
        enable_gqa: True when ``Hkv < H``.
        masked_rows: indices of query rows that see no key at all.
    """

    query: Tensor
    key: Tensor
    value: Tensor
    attn_mask: Tensor | None
    is_causal: bool
    enable_gqa: bool
    masked_rows: Tensor


def fully_masked_rows(kind: str, L: int) -> list[int]:
    """Query rows that the ``kind`` mask hides from every key: 3, 67, 131, ... (< L).

    Only the ``"boolean"`` and ``"float"`` kinds hide whole rows; ``"causal"`` never does
    (query ``i`` always sees key 0).
    """
    if kind not in ("boolean", "float"):
        return []
    return list(range(FULLY_MASKED_FIRST, L, FULLY_MASKED_EVERY))


def make_inputs(spec: KernelSpec, L: int, S: int, device: torch.device | str) -> KernelInputs:
    """Seeded standard-Gaussian Q, K, V (drawn in float32, cast to ``spec.dtype``) and the mask.

    The masks: ``"boolean"`` keeps each (query, key) pair with probability 0.9 (seeded) and
    hides every key from the rows of :func:`fully_masked_rows`; ``"float"`` is the same
    pattern as ``-inf`` plus a distance bias ``-|i - j| / S`` on the visible pairs (an
    ALiBi-like slope).
    """
    spec.validate()
    device = torch.device(device)
    g = make_generator(spec.seed, device)
    dt = spec.torch_dtype
    B, H, Hkv, E = spec.batch, spec.heads, spec.kv_heads, spec.head_dim

    def draw(*shape: int) -> Tensor:
        return torch.randn(*shape, generator=g, device=device, dtype=torch.float32).to(dt)

    q, k, v = draw(B, H, L, E), draw(B, Hkv, S, E), draw(B, Hkv, S, E)
    rows = fully_masked_rows(spec.mask, L)
    mask: Tensor | None = None
    if spec.mask in ("boolean", "float"):
        keep = torch.rand(L, S, generator=g, device=device) < MASK_KEEP  # (L, S)
        if rows:
            keep[rows] = False
        if spec.mask == "boolean":
            mask = keep
        else:
            i = torch.arange(L, device=device, dtype=torch.float32)[:, None]
            j = torch.arange(S, device=device, dtype=torch.float32)[None, :]
            bias = -(i - j).abs() / S  # (L, S)
            mask = bias.masked_fill(~keep, float("-inf")).to(dt)
    return KernelInputs(q, k, v, mask, spec.mask == "causal", Hkv != H,
                        torch.tensor(rows, dtype=torch.long, device=device))


# ---------------------------------------------------------------------------- the calls


def notebook_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attn_mask: Tensor | None = None,
    is_causal: bool = False,
    dropout_p: float = 0.0,
    generator: torch.Generator | None = None,
) -> Tensor:
    """softmax(QK^T / sqrt(E)) V the way a notebook writes it (the manual version tutorials show).

    Args:
        query: (B, H, L, E); key, value: (B, Hkv, S, E) with ``H`` a multiple of ``Hkv``.
        attn_mask: (L, S) boolean (True = may attend) or float (added), or None.
        is_causal: hide keys ``j > i`` (``masked_fill_`` with ``-inf``, as the source does).
        dropout_p: dropout on the weights, drawn from ``generator``.

    Returns:
        (B, H, L, E) in the input dtype, computed in it too (no float32 accumulation). A
        query row that sees no key comes out NaN: softmax of a row of ``-inf``.
    """
    rep = query.shape[-3] // key.shape[-3]
    if rep > 1:
        key, value = key.repeat_interleave(rep, dim=-3), value.repeat_interleave(rep, dim=-3)
    L, S = query.shape[-2], key.shape[-2]
    scores = torch.matmul(query, key.transpose(-2, -1))  # (B, H, L, S)
    scores = scores / (query.size(-1) ** 0.5)
    if is_causal:
        hide = torch.triu(torch.ones(L, S, dtype=torch.bool, device=query.device), diagonal=1)
        scores.masked_fill_(hide, float("-inf"))
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            scores.masked_fill_(~attn_mask, float("-inf"))
        else:
            scores = scores + attn_mask
    weights = F.softmax(scores, dim=-1)  # (B, H, L, S)
    if dropout_p > 0:
        keep = torch.rand(weights.shape, generator=generator, device=weights.device) >= dropout_p
        weights = weights * keep / (1.0 - dropout_p)
    return torch.matmul(weights, value)  # (B, H, L, E)


# torch's SDPA backend switches (``sdpa_kernel``) are process-wide flags, not per thread: while
# one request runs the "efficient" backend alone, another thread's plain SDPA call on the CPU
# finds no backend enabled ("No viable backend for scaled_dot_product_attention"). Every SDPA
# call in attncore holds this lock, so a backend choice never leaks into another thread's call.
SDPA_LOCK = threading.RLock()


def _call(name: str, x: KernelInputs, dropout: float, generator: torch.Generator | None) -> Tensor:
    """One forward pass of backend / baseline ``name`` (``"default"`` = torch's own dispatch)."""
    if name == "attncore":
        out, _weights = attention(x.query, x.key, x.value, x.attn_mask, dropout, x.is_causal,
                                  enable_gqa=x.enable_gqa, return_weights=True, generator=generator)
        return out
    if name == "notebook":
        return notebook_attention(x.query, x.key, x.value, x.attn_mask, x.is_causal, dropout, generator)

    def sdpa() -> Tensor:
        return F.scaled_dot_product_attention(x.query, x.key, x.value, attn_mask=x.attn_mask,
                                              dropout_p=dropout, is_causal=x.is_causal,
                                              enable_gqa=x.enable_gqa)

    with SDPA_LOCK:
        if name == "default":
            return sdpa()
        with sdpa_kernel(SDPA_BACKENDS[name]):
            return sdpa()


_TRIGGERED = re.compile(r"\s*\(Triggered internally at [^)]*\)\s*")


def _clean(message: str) -> str:
    return " ".join(_TRIGGERED.sub(" ", message).split())


def _refusal(exc: BaseException, caught: Sequence[warnings.WarningMessage]) -> str:
    """torch's reason: the warnings it emitted while choosing, else the error itself."""
    said = [_clean(str(w.message)) for w in caught]
    said = [s for s in said if s]
    error = _clean(str(exc))
    return " ".join(said) + (f" ({error})" if said else error)


def _is_oom(exc: BaseException) -> bool:
    if isinstance(exc, MemoryError | torch.OutOfMemoryError):
        return True
    text = str(exc)
    return "out of memory" in text or "can't allocate memory" in text


def _free(device: torch.device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _dropout_rng(device: torch.device, seed: int) -> contextlib.AbstractContextManager[Any]:
    """SDPA's dropout draws from the global RNG: fork it, so the caller's state is untouched."""
    devices = [device] if device.type == "cuda" else []

    @contextlib.contextmanager
    def forked() -> Iterator[None]:
        with torch.random.fork_rng(devices=devices):
            torch.manual_seed(seed)
            yield

    return forked()


def _run_once(name: str, x: KernelInputs, spec: KernelSpec, device: torch.device) -> Tensor:
    gen = make_generator(spec.seed + 1, device) if spec.dropout > 0 else None
    if spec.dropout > 0:
        with _dropout_rng(device, spec.seed + 1):
            return _call(name, x, spec.dropout, gen)
    return _call(name, x, spec.dropout, gen)


def _time_one(fn: Callable[[], Tensor], device: torch.device) -> float:
    """Seconds of one call (CUDA events on a GPU, the wall clock on the CPU)."""
    if device.type == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize(device)
        return start.elapsed_time(end) / 1e3
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


# ---------------------------------------------------------------------------- results


@dataclass(frozen=True)
class BackendResult:
    """One backend (or baseline) at one size.

    Attributes:
        name: ``"flash"``, ``"efficient"``, ``"cudnn"``, ``"math"`` (forced with
            ``sdpa_kernel``), ``"default"`` (torch's own dispatch), ``"attncore"`` or
            ``"notebook"`` (the materialised baselines).
        L, S: queries and keys.
        status: ``"ran"``, ``"refused"`` (torch would not run it; ``reason`` is torch's),
            ``"skipped"`` (the materialised matrices would exceed the budget; ``reason``
            says by how much), ``"out of memory"`` or ``"failed"``.
        reason: torch's refusal, the budget note or the error; empty when it ran.
        chosen: torch's default dispatch runs this backend (False for baselines).
        same_as_default: the output equals the default dispatch's bit for bit (None: not
            compared, e.g. baselines or a refusal).
        seconds: median time of ``repeats`` calls after one warm-up call.
        peak_bytes: peak memory above what was allocated before the call (inputs, mask),
            output included; None when not measured.
        max_err: max |out - reference| over the compared query rows' finite entries,
            fully masked rows included (the reference gives them 0); None with dropout.
        masked_err: max |out| over the fully masked rows (NaN when the output is NaN there);
            None when no row is fully masked or with dropout.
        nonfinite_rows: compared query rows with a NaN or infinite output.
        rows_compared: query rows compared with the reference (all rows when ``L`` is small).
        estimated_bytes: for materialised paths, the budget estimate of their L x S matrices.
    """

    name: str
    L: int
    S: int
    status: str
    reason: str = ""
    chosen: bool = False
    same_as_default: bool | None = None
    seconds: float | None = None
    repeats: int = 0
    peak_bytes: float | None = None
    max_err: float | None = None
    masked_err: float | None = None
    nonfinite_rows: int = 0
    rows_compared: int = 0
    estimated_bytes: float | None = None

    @property
    def accepted(self) -> bool | None:
        """True when it ran, False when torch refused it, None when not tried (budget)."""
        if self.status == "refused":
            return False
        if self.status == "skipped":
            return None
        return True


@dataclass(frozen=True)
class SizeResult:
    """Every backend and baseline at one size ``L x S``.

    Attributes:
        default_backend: the backend torch's default dispatch picks (a key of ``BACKENDS``),
            or None when it could not be told.
        choice_source: how it was told: ``"torch._fused_sdp_choice"`` or ``"output match"``.
    """

    L: int
    S: int
    rows: tuple[BackendResult, ...]
    default_backend: str | None
    choice_source: str

    def row(self, name: str) -> BackendResult:
        """The result of one backend / baseline."""
        for r in self.rows:
            if r.name == name:
                return r
        raise KeyError(name)


@dataclass(frozen=True)
class SweepResult:
    """A sweep over lengths ``L = S``.

    Attributes:
        sizes: one :class:`SizeResult` per length reached (all of them unless cancelled).
        memory_note: how the memory column was measured (and any failure of that).
        cancelled: the cancel callback stopped the sweep early.
    """

    spec: KernelSpec
    device: str
    lengths: tuple[int, ...]
    budget_bytes: float
    sizes: tuple[SizeResult, ...]
    memory_note: str
    cancelled: bool = False
    notes: tuple[str, ...] = field(default_factory=tuple)


# ---------------------------------------------------------------------------- budget


def tolerance(dtype: str) -> float:
    """Max |difference| expected between a correct kernel and the float64 reference (unit inputs)."""
    return {"float64": 1e-10, "float32": 2e-5, "float16": 4e-3, "bfloat16": 3e-2}[dtype]


def materialised_bytes(name: str, spec: KernelSpec, L: int, S: int) -> float:
    """Bytes of the (B, H, L, S) matrices a materialised path keeps at once (an upper estimate).

    ``math``: scores, weights and a temporary in at least float32 (torch's math path upcasts
    half types); ``attncore``: its five stages in the compute dtype plus the weights returned
    in the input dtype; ``notebook``: scores, scaled scores and weights in the input dtype.
    Dropout adds a random draw and a keep mask per cell. Fused kernels: 0.
    """
    if name not in MATERIALISING:
        return 0.0
    cells = float(spec.batch * spec.heads * L * S)
    isz = _itemsize(spec.torch_dtype)
    if name == "math":
        per = 3 * max(isz, 4)
    elif name == "attncore":
        per = 5 * max(isz, 4) + (isz if isz < 4 else 0)
    else:
        per = 3 * isz
    if spec.dropout > 0:
        per += 5
    return cells * per


def default_budget_bytes(device: torch.device | str) -> float:
    """The memory budget for materialised paths: 1 GiB on the CPU, half the free GPU memory on CUDA."""
    device = torch.device(device)
    if device.type == "cuda":
        free, _total = torch.cuda.mem_get_info(device)
        return float(free) / 2
    return float(DEFAULT_BUDGET_BYTES)


def _kernels_here(device: torch.device) -> tuple[str, ...]:
    """Backends whose kernels can exist on this device type (the rest refuse at once)."""
    return BACKENDS if device.type == "cuda" else ("flash", "math")


def sweep_flops(spec: KernelSpec, lengths: Sequence[int], device: torch.device | str, repeats: int,
                budget_bytes: float) -> float:
    """Upper estimate of the flops a :func:`sweep` will spend (4 B H L S E per call).

    Counts a warm-up and ``repeats`` timed calls for every backend that has a kernel on the
    device, the default dispatch and the baselines that fit ``budget_bytes``, plus one call
    each for the memory measurement.
    """
    device = torch.device(device)
    total = 0.0
    for n_len in lengths:
        per_call = 4.0 * spec.batch * spec.heads * n_len * n_len * spec.head_dim
        names = [*_kernels_here(device), "default", *BASELINES]
        calls = sum(1 for n in names if materialised_bytes(n, spec, n_len, n_len) <= budget_bytes)
        total += per_call * calls * (repeats + 2)
    return total


# ---------------------------------------------------------------------------- one size


def _reference_rows(spec: KernelSpec, L: int, S: int, masked: list[int]) -> list[int]:
    n = int(min(L, max(8, REF_CELLS // max(1, spec.batch * spec.heads * S))))
    rows = {round(i * (L - 1) / max(1, n - 1)) for i in range(n)} if n < L else set(range(L))
    return sorted(rows | set(masked))


def _reference(x: KernelInputs, rows: list[int]) -> Tensor:
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
    ref = _reference(x, rows) if ref is None else ref  # (B, H, R, E)
    got = out.index_select(-2, torch.tensor(rows, dtype=torch.long, device=out.device)).double()
    finite = torch.isfinite(got)
    diff = (got - ref).abs().where(finite, torch.zeros((), dtype=torch.float64, device=got.device))
    bad_rows = int((~finite).reshape(-1, len(rows), got.shape[-1]).any(dim=(0, 2)).sum())
    masked = [i for i, r in enumerate(rows) if r in set(x.masked_rows.tolist())]
    masked_err: float | None = None
    if masked:
        m = got[..., masked, :].abs()
        masked_err = float("nan") if not bool(torch.isfinite(m).all()) else float(m.max())
    return float(diff.max()), masked_err, bad_rows, len(rows)


def default_choice(x: KernelInputs, dropout: float) -> str | None:
    """The backend torch's default dispatch picks, from ``torch._fused_sdp_choice`` (None if unknown)."""
    choose = getattr(torch, "_fused_sdp_choice", None)
    if choose is None:
        return None
    try:
        code = int(choose(x.query, x.key, x.value, attn_mask=x.attn_mask, dropout_p=dropout,
                          is_causal=x.is_causal, enable_gqa=x.enable_gqa))
        backend = SDPBackend(code)
    except (RuntimeError, ValueError, TypeError):
        return None
    for name, b in SDPA_BACKENDS.items():
        if b == backend:
            return name
    return None


def probe(
    spec: KernelSpec,
    L: int,
    device: torch.device | str,
    *,
    S: int | None = None,
    repeats: int = 3,
    max_seconds: float = 2.0,
    budget_bytes: float | None = None,
    measure_memory: bool = True,
    compare: bool = True,
    progress: Progress | None = None,
) -> SizeResult:
    """Try every SDPA backend, the default dispatch and both baselines at ``L`` queries, ``S`` keys.

    Args:
        spec: the configuration.
        L: queries.
        device: where to run.
        S: keys (default ``L``).
        repeats: timed calls per backend after one warm-up, in interleaved rounds (fewer rounds
            once the backends have spent ``max_seconds`` each on average).
        budget_bytes: memory budget for the materialised paths (default
            :func:`default_budget_bytes`).
        measure_memory: measure peak memory (CUDA: in process; CPU: a fresh forked process).
        compare: compute the max error against the float64 reference.
        progress: called with (fraction of this size done, what runs next).

    Returns:
        A :class:`SizeResult` with one row per backend (``BACKENDS``), ``"default"`` and the
        ``BASELINES``, in that order.
    """
    res = _probe_size(spec, L, L if S is None else S, torch.device(device), repeats, max_seconds,
                      default_budget_bytes(device) if budget_bytes is None else budget_bytes,
                      compare, progress)
    if measure_memory:
        res = _with_memory([res], spec, torch.device(device))[0][0]
    return res


def _probe_size(spec: KernelSpec, L: int, S: int, device: torch.device, repeats: int, max_seconds: float,
                budget: float, compare: bool, progress: Progress | None) -> SizeResult:
    spec.validate()
    if not (MIN_T <= L <= MAX_T and MIN_T <= S <= MAX_T):
        raise AttnInputError(f"L and S must be between {MIN_T} and {MAX_T}; got L={L}, S={S}.")
    x = make_inputs(spec, L, S, device)
    chosen = default_choice(x, spec.dropout)
    source = "torch._fused_sdp_choice"
    masked = fully_masked_rows(spec.mask, L)
    ref_rows = _reference_rows(spec, L, S, masked)
    names = [*BACKENDS, "default", *BASELINES]
    outputs: dict[str, Tensor] = {}
    rows: list[BackendResult] = []
    for i, name in enumerate(names):
        if progress is not None:
            progress(0.5 * i / len(names), name)
        est = materialised_bytes(name, spec, L, S) if name in MATERIALISING else None
        if est is not None and est > budget:
            rows.append(BackendResult(
                name, L, S, "skipped", estimated_bytes=est,
                reason=(f"materialising the {spec.batch}×{spec.heads}×{L}×{S} score matrices would need "
                        f"about {_fmt_bytes(est)}; the budget is {_fmt_bytes(budget)}")))
            continue
        rows.append(_warm_up(name, x, spec, device, est, outputs))
    rows = _timed_rounds(rows, x, spec, device, repeats, max_seconds, outputs, progress)
    # Bitwise agreement with the default dispatch (random outputs under dropout: not compared).
    default_out = outputs.get("default")
    final: list[BackendResult] = []
    for r in rows:
        same = None
        if r.name in BACKENDS and r.status == "ran" and default_out is not None and spec.dropout == 0:
            same = bool(torch.equal(outputs[r.name], default_out))
        final.append(replace(r, same_as_default=same))
    if chosen is None and default_out is not None and spec.dropout == 0:
        matches = [r.name for r in final if r.same_as_default]
        chosen = matches[0] if len(matches) == 1 else None
        source = "output match"
    final = [replace(r, chosen=(r.name == chosen)) for r in final]
    if compare and spec.dropout == 0:
        compared = []
        ref = _reference(x, ref_rows)  # (B, H, rows, E), once for every backend
        for r in final:
            if r.status == "ran":
                err, merr, bad, n = reference_error(outputs[r.name], x, ref_rows, ref)
                r = replace(r, max_err=err, masked_err=merr, nonfinite_rows=bad, rows_compared=n)
            compared.append(r)
        final = compared
    outputs.clear()
    del x
    _free(device)
    if progress is not None:
        progress(1.0, "done")
    return SizeResult(L, S, tuple(final), chosen, source)


def _warm_up(name: str, x: KernelInputs, spec: KernelSpec, device: torch.device, est: float | None,
             outputs: dict[str, Tensor]) -> BackendResult:
    """First call of ``name``: torch's refusal (with its reason) or the output that is compared."""
    L, S = x.query.shape[-2], x.key.shape[-2]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            outputs[name] = _run_once(name, x, spec, device)
            _sync(device)
        except Exception as exc:  # torch refuses with RuntimeError; anything else is reported too
            _free(device)
            if _is_oom(exc):
                return BackendResult(name, L, S, "out of memory", reason=_clean(str(exc))[:300],
                                     estimated_bytes=est)
            status = "refused" if name in SDPA_BACKENDS and isinstance(exc, RuntimeError) else "failed"
            return BackendResult(name, L, S, status, reason=_refusal(exc, caught), estimated_bytes=est)
    return BackendResult(name, L, S, "ran", estimated_bytes=est)


def _timed_rounds(rows: list[BackendResult], x: KernelInputs, spec: KernelSpec, device: torch.device,
                  repeats: int, max_seconds: float, outputs: dict[str, Tensor],
                  progress: Progress | None) -> list[BackendResult]:
    """Time every backend that ran in interleaved rounds (one call each per round), so a drift in
    the machine's speed hits them alike; median per backend. CUDA: then the peak memory."""
    names = [r.name for r in rows if r.status == "ran"]
    times: dict[str, list[float]] = {n: [] for n in names}
    lost: dict[str, str] = {}
    spent = 0.0
    for k in range(max(1, repeats)):
        if progress is not None:
            progress(0.5 + 0.5 * k / max(1, repeats), f"timing, round {k + 1}")
        for n in names:
            if n in lost:
                continue
            try:
                t = _time_one(lambda n=n: _run_once(n, x, spec, device), device)
            except Exception as exc:
                if not _is_oom(exc):
                    raise
                outputs.pop(n, None)
                _free(device)
                lost[n] = _clean(str(exc))[:300]
                continue
            times[n].append(t)
            spent += t
        if spent >= max_seconds * max(1, len(names)):
            break
    out = []
    for r in rows:
        if r.name in lost:
            r = replace(r, status="out of memory", reason=lost[r.name])
        elif r.name in times and times[r.name]:
            peak = None
            if device.type == "cuda":
                try:
                    peak = _cuda_peak(r.name, x, spec, device)
                except Exception as exc:
                    if not _is_oom(exc):
                        raise
                    _free(device)
            r = replace(r, seconds=statistics.median(times[r.name]), repeats=len(times[r.name]),
                        peak_bytes=peak)
        out.append(r)
    return out


def _cuda_peak(name: str, x: KernelInputs, spec: KernelSpec, device: torch.device) -> float:
    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    base = torch.cuda.memory_allocated(device)
    out = _run_once(name, x, spec, device)
    torch.cuda.synchronize(device)
    peak = torch.cuda.max_memory_allocated(device) - base
    del out
    return float(peak)


def _fmt_bytes(n: float) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return f"{n:.0f} B"


# ---------------------------------------------------------------------------- CPU memory


def proc_status_kib(field_name: str) -> int:
    """A field of this process's /proc/self/status in KiB (``"VmRSS"``: resident now, ``"VmHWM"``:
    the peak since start or since :func:`reset_peak_rss`). Linux only: OSError elsewhere."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field_name + ":"):
                return int(line.split()[1])
    raise OSError(f"{field_name} not in /proc/self/status")


def reset_peak_rss() -> bool:
    """Reset the kernel's peak-RSS mark (VmHWM) to the current RSS; False where Linux refuses."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _memory_jobs(payload: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """In a fresh process: the peak RSS increase of each (L, S, name) job, in order, as it is measured.

    Where the peak mark cannot be reset only the first job is measured (the parent starts a
    new process for the rest).
    """
    torch.set_num_threads(int(payload["threads"]))
    spec = KernelSpec(**payload["spec"])
    libc = ctypes.CDLL(None) if sys.platform.startswith("linux") else None
    device = torch.device("cpu")
    warmed: set[str] = set()
    measured = False
    inputs: dict[tuple[int, int], KernelInputs] = {}
    for L, S, name in payload["jobs"]:
        if name not in warmed:  # thread pools, lazy init: paid at a tiny size, not counted
            _run_once(name, make_inputs(spec, MIN_T, MIN_T, device), spec, device)
            warmed.add(name)
        if (L, S) not in inputs:
            inputs.clear()
            gc.collect()
            inputs[(L, S)] = make_inputs(spec, L, S, device)
        x = inputs[(L, S)]
        gc.collect()
        if libc is not None:
            libc.malloc_trim(0)
        reset = reset_peak_rss()
        if not reset and measured:
            break
        base = proc_status_kib("VmRSS")
        if not reset:
            base = max(base, proc_status_kib("VmHWM"))
        try:
            out = _run_once(name, x, spec, device)
            peak = max(0, proc_status_kib("VmHWM") - base) * 1024
            del out
            yield {"job": [L, S, name], "bytes": peak}
        except Exception as exc:
            yield {"job": [L, S, name], "error": _clean(str(exc))[:200]}
        measured = True
        if not reset:
            break


# The measuring processes are forked from a long-lived helper process that imported torch and
# this module once (about 2 s) and never ran an operation: each measurement still starts in a
# fresh process (a fork of it), without paying for the imports again.
_HELPER_LOCK = threading.Lock()
_helper: subprocess.Popen[bytes] | None = None


def _helper_env() -> dict[str, str]:
    root = str(Path(__file__).resolve().parents[1])
    return {**os.environ, "PYTHONPATH": root + os.pathsep + os.environ.get("PYTHONPATH", ""),
            "MALLOC_MMAP_THRESHOLD_": "65536", "ATTNCORE_DEVICE": "cpu"}


def _start_helper() -> subprocess.Popen[bytes]:
    """The measuring helper (``python -m attncore.kernels --serve``), started if not running."""
    global _helper
    if _helper is None or _helper.poll() is not None:
        root = str(Path(__file__).resolve().parents[1])
        _helper = subprocess.Popen([sys.executable, "-m", "attncore.kernels", "--serve"], cwd=root,
                                   env=_helper_env(), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                   stderr=subprocess.DEVNULL)
    return _helper


def warm_memory_measurement() -> None:
    """Start the measuring helper now (a server does it at start-up, off the first visitor's clock)."""
    with _HELPER_LOCK:
        _start_helper()


def _stop_helper() -> None:
    global _helper
    if _helper is not None:
        with contextlib.suppress(OSError):
            _helper.kill()
        with contextlib.suppress(Exception):
            _helper.wait(timeout=5)
    _helper = None


def _serve() -> None:
    """``python -m attncore.kernels --serve``: one JSON payload per stdin line; for each, fork a
    process that measures its jobs (one JSON line per job on stdout), then say ``{"exit": code}``.

    Before the first payload it says ``{"ready": true}``. Nothing but imports happens before a fork
    (no torch thread pool exists yet), so forking is safe.
    """
    out = sys.stdout
    out.write(json.dumps({"ready": True}) + "\n")
    out.flush()
    for line in sys.stdin:
        if not line.strip():
            continue
        payload = json.loads(line)
        pid = os.fork()
        if pid == 0:  # the measuring process
            code = 0
            try:
                gc.freeze()  # the inherited heap (torch, this module) is not garbage: cheap gc.collect()
                for item in _memory_jobs(payload):
                    out.write(json.dumps(item) + "\n")
                    out.flush()
            except BaseException:  # noqa: BLE001 - reported as its exit code
                code = 1
            finally:
                os._exit(code)
        out.write(json.dumps({"pid": pid}) + "\n")
        out.flush()
        _, status = os.waitpid(pid, 0)
        out.write(json.dumps({"exit": os.waitstatus_to_exitcode(status)}) + "\n")
        out.flush()


def _read_lines(proc: subprocess.Popen[bytes], deadline: float, buf: bytearray) -> Iterator[dict[str, Any]]:
    """JSON lines from the helper's stdout until the deadline (select: never blocks past it)."""
    import select

    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    while True:
        while b"\n" in buf:
            line, _, rest = bytes(buf).partition(b"\n")
            buf[:] = rest
            if line.strip():
                yield json.loads(line)
        left = deadline - time.monotonic()
        if left <= 0:
            return
        ready, _, _ = select.select([fd], [], [], min(left, 0.25))
        if ready:
            chunk = os.read(fd, 1 << 16)
            if not chunk:  # the helper is gone
                return
            buf += chunk


def _measure_in_child(payload: dict[str, Any], deadline: float) -> tuple[list[dict[str, Any]], str | None]:
    """One measuring process forked by the helper: the results it gave before it ended or the
    deadline, and why it stopped early (None: it finished)."""
    with _HELPER_LOCK:
        proc = _start_helper()
        assert proc.stdin is not None
        buf = bytearray()
        done: list[dict[str, Any]] = []
        pid: int | None = None
        ready = False
        try:
            proc.stdin.write((json.dumps(payload) + "\n").encode())
            proc.stdin.flush()
        except OSError:
            _stop_helper()
            return [], "could not be started"
        for msg in _read_lines(proc, deadline, buf):
            if "ready" in msg:
                ready = True
            elif "pid" in msg:
                pid = int(msg["pid"])
            elif "exit" in msg:
                code = int(msg["exit"])
                return done, None if code == 0 else f"failed (exit code {code})"
            else:
                done.append(msg)
        # the deadline passed (or the helper died): stop the measuring process, keep the helper if it answers
        if pid is not None:
            with contextlib.suppress(OSError):
                os.kill(pid, 9)
            for msg in _read_lines(proc, time.monotonic() + 5, buf):
                if "exit" in msg:
                    break
                if "pid" not in msg and "ready" not in msg:
                    done.append(msg)
            else:
                _stop_helper()
        else:
            _stop_helper()  # still importing, or gone: the next measurement starts a new one
        if time.monotonic() < deadline:
            return done, "failed (the measuring helper stopped)"
        return done, "passed its time limit" if ready or pid is not None else \
            "passed its time limit before it was ready"


def _cpu_memory(
    spec: KernelSpec, jobs: list[tuple[int, int, str]], timeout: float
) -> tuple[dict[tuple[int, int, str], float], str]:
    """Peak RSS increase per job, measured in fresh (forked) processes within ``timeout`` seconds."""
    found: dict[tuple[int, int, str], float] = {}
    problems: list[str] = []
    deadline = time.monotonic() + timeout
    todo = list(jobs)
    spec_fields = {k: getattr(spec, k) for k in spec.__dataclass_fields__}
    while todo:
        left = deadline - time.monotonic()
        if left <= 0.05:
            problems.append(f"time limit ({timeout:.3g} s) reached before {len(todo)} measurement(s)")
            break
        payload = {"spec": spec_fields, "jobs": todo, "threads": torch.get_num_threads()}
        try:
            done, why = _measure_in_child(payload, deadline)
        except OSError as exc:  # could not start a process at all
            done, why = [], f"could not start ({_clean(str(exc))[:120]})"
        stop = None if why is None else f"the measuring process {why}"
        if why == "passed its time limit":
            stop = f"the measuring process passed its time limit ({timeout:.3g} s)"
        if not done and stop is None:
            stop = "the measuring process returned nothing"
        for item in done:
            L, S, name = item["job"]
            if "bytes" in item:
                found[(int(L), int(S), str(name))] = float(item["bytes"])
            else:
                problems.append(f"{name} at {L}: {item['error']}")
        todo = todo[len(done):]
        if stop is not None:
            problems.append(stop + (f"; {len(todo)} measurement(s) left" if todo else ""))
            break
    note = ("peak resident-set increase over the call, measured in a fresh Python process "
            "(forked from a helper that imported torch and attncore and ran nothing; Linux's peak mark "
            "reset before each call; inputs and mask allocated before it)")
    if problems:
        note += "; not measured: " + "; ".join(problems)
    return found, note


def _with_memory(sizes: list[SizeResult], spec: KernelSpec, device: torch.device,
                 timeout: float | None = None) -> tuple[list[SizeResult], str]:
    if device.type == "cuda":
        return sizes, ("torch.cuda.max_memory_allocated during one call, minus what was allocated "
                       "before it (inputs and mask)")
    if device.type != "cpu":
        return sizes, "not measured on this device"
    jobs = [(s.L, s.S, r.name) for s in sizes for r in s.rows if r.status == "ran"]
    if not jobs:
        return sizes, "nothing ran"
    if timeout is None:
        flops = sum(4.0 * spec.batch * spec.heads * L * S * spec.head_dim for L, S, _ in jobs)
        timeout = 30.0 + flops / 5e9  # ~1/4 of the development CPU's math-path rate: room for load
    found, note = _cpu_memory(spec, jobs, timeout)
    out = [replace(s, rows=tuple(replace(r, peak_bytes=found.get((s.L, s.S, r.name), r.peak_bytes))
                                 for r in s.rows)) for s in sizes]
    return out, note


# ---------------------------------------------------------------------------- sweep


def check_sweep(spec: KernelSpec, lengths: Sequence[int], device: torch.device | str, repeats: int,
                budget_bytes: float) -> None:
    """Raise :class:`~attncore.errors.ResourceLimitError` when a sweep's work exceeds
    :data:`MAX_SWEEP_FLOPS` for the device (and :class:`AttnInputError` for a bad length)."""
    spec.validate()
    device = torch.device(device)
    for t in lengths:
        if not MIN_T <= int(t) <= MAX_T:
            raise AttnInputError(f"T (= L = S) must be between {MIN_T} and {MAX_T}; got {t}.")
    flops = sweep_flops(spec, lengths, device, repeats, budget_bytes)
    limit = MAX_SWEEP_FLOPS.get(device.type, MAX_SWEEP_FLOPS["cpu"])
    check_limit(flops, limit, "The sweep's work (flops)",
                f"on {device.type.upper()} to keep a run within seconds",
                "Lower the largest T, the heads or the head dim.")


def measure_memory(sizes: Sequence[SizeResult], spec: KernelSpec,
                   device: torch.device | str) -> tuple[list[SizeResult], str]:
    """Fill ``peak_bytes`` of every row that ran; returns the sizes and how memory was measured.

    CUDA: already measured in process by :func:`probe`. CPU: one fresh (forked) process measures
    every (size, backend) in turn (bounded in time; what it could not measure stays None).
    """
    return _with_memory(list(sizes), spec, torch.device(device))


def sweep(
    spec: KernelSpec,
    lengths: Sequence[int],
    device: torch.device | str,
    *,
    repeats: int = 3,
    max_seconds: float = 2.0,
    budget_bytes: float | None = None,
    measure_memory: bool = True,
    compare: bool = True,
    progress: Progress | None = None,
    cancel: Cancel | None = None,
) -> SweepResult:
    """:func:`probe` at each length in ``lengths`` (``L = S``), smallest first.

    Before anything runs, the whole sweep's work is checked against
    :data:`MAX_SWEEP_FLOPS` (raises :class:`~attncore.errors.ResourceLimitError`), and each
    size's materialised paths against ``budget_bytes`` (skipped with a note; fused kernels
    still run).

    Args:
        progress: called with (fraction done, a short note) before each step.
        cancel: polled between steps; returning True stops the sweep (``cancelled=True``;
            the sizes finished so far are kept).
    """
    spec.validate()
    device = torch.device(device)
    Ts = tuple(sorted({int(t) for t in lengths}))
    if not Ts:
        raise AttnInputError("the sweep needs at least one length T.")
    for t in Ts:
        if not MIN_T <= t <= MAX_T:
            raise AttnInputError(f"T (= L = S) must be between {MIN_T} and {MAX_T}; got {t}.")
    budget = default_budget_bytes(device) if budget_bytes is None else float(budget_bytes)
    check_sweep(spec, Ts, device, repeats, budget)
    # Timing counts for 80% of the progress bar, the memory pass for the rest.
    share = 0.8 if (measure_memory and device.type == "cpu") else 1.0
    weights = [float(t) * t for t in Ts]
    done_w, total_w = 0.0, sum(weights)
    sizes: list[SizeResult] = []
    cancelled = False
    for t, w in zip(Ts, weights, strict=True):
        if cancel is not None and cancel():
            cancelled = True
            break

        def step(frac: float, what: str, t: int = t, w: float = w, base: float = done_w) -> None:
            if progress is not None:
                progress(share * (base + frac * w) / total_w, f"T = {t}: {what}")

        sizes.append(_probe_size(spec, t, t, device, repeats, max_seconds, budget, compare, step))
        done_w += w
    note = "not measured"
    if measure_memory and sizes and not (cancel is not None and cancel()):
        if progress is not None:
            progress(share, "measuring memory")
        sizes, note = _with_memory(sizes, spec, device)
    elif measure_memory:
        cancelled = True
    if progress is not None:
        progress(1.0, "done")
    notes = [f"T = {s.L}: {r.name} skipped ({r.reason})"
             for s in sizes for r in s.rows if r.status == "skipped"]
    return SweepResult(spec, str(device), Ts, budget, tuple(sizes), note, cancelled, tuple(notes))


def _main() -> None:
    if sys.argv[1:] != ["--serve"]:
        sys.exit("usage: python -m attncore.kernels --serve  (the memory-measuring helper)")
    _serve()


if __name__ == "__main__":
    _main()

