"""The calls a probe makes: each SDPA backend forced with ``sdpa_kernel``, torch's default
dispatch, and the two materialised baselines (attncore with its weights, the notebook version).

:data:`SDPA_LOCK` is held around every SDPA call in attncore: the backend switches are
process-wide flags, not per thread.
"""

from __future__ import annotations

import contextlib
import gc
import re
import threading
import warnings
from collections.abc import Iterator, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.nn.attention import SDPBackend, sdpa_kernel

from attncore.attention import attention
from attncore.kernels.spec import KernelInputs, KernelSpec
from attncore.synthetic import make_generator

__all__ = [
    "BACKENDS",
    "BASELINES",
    "LABELS",
    "MATERIALISING",
    "SDPA_BACKENDS",
    "SDPA_LOCK",
    "call",
    "clean_message",
    "default_choice",
    "free",
    "is_oom",
    "kernels_here",
    "notebook_attention",
    "refusal",
    "run_once",
    "sync",
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
# How the page, the bench and the claims name each path.
LABELS: dict[str, str] = {
    "flash": "flash (FLASH_ATTENTION)",
    "efficient": "memory-efficient (EFFICIENT_ATTENTION)",
    "cudnn": "cuDNN (CUDNN_ATTENTION)",
    "math": "math (MATH)",
    "default": "default dispatch",
    "attncore": "attncore.attention (with weights)",
    "notebook": "notebook softmax(QKᵀ)V",
}
# Paths that form the whole (B, H, L, S) score matrix (and so are checked against the budget).
MATERIALISING: frozenset[str] = frozenset({"math", *BASELINES})

# torch's SDPA backend switches (``sdpa_kernel``) are process-wide flags, not per thread: while
# one request runs the "efficient" backend alone, another thread's plain SDPA call on the CPU
# finds no backend enabled ("No viable backend for scaled_dot_product_attention"). Every SDPA
# call in attncore holds this lock, so a backend choice never leaks into another thread's call.
SDPA_LOCK = threading.RLock()


def kernels_here(device: torch.device) -> tuple[str, ...]:
    """Backends whose kernels can exist on this device type (the rest refuse at once)."""
    return BACKENDS if device.type == "cuda" else ("flash", "math")


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


def call(name: str, x: KernelInputs, dropout: float, generator: torch.Generator | None) -> Tensor:
    """One forward pass of backend / baseline ``name`` (``"default"`` = torch's own dispatch).

    Returns the output (B, H, L, E); a backend torch will not run raises its RuntimeError.
    """
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


def _dropout_rng(device: torch.device, seed: int) -> contextlib.AbstractContextManager[Any]:
    """SDPA's dropout draws from the global RNG: fork it, so the caller's state is untouched."""
    devices = [device] if device.type == "cuda" else []

    @contextlib.contextmanager
    def forked() -> Iterator[None]:
        with torch.random.fork_rng(devices=devices):
            torch.manual_seed(seed)
            yield

    return forked()


def run_once(name: str, x: KernelInputs, spec: KernelSpec, device: torch.device) -> Tensor:
    """:func:`call` with the spec's dropout, its random numbers seeded from ``spec.seed + 1``."""
    gen = make_generator(spec.seed + 1, device) if spec.dropout > 0 else None
    if spec.dropout > 0:
        with _dropout_rng(device, spec.seed + 1):
            return call(name, x, spec.dropout, gen)
    return call(name, x, spec.dropout, gen)


_TRIGGERED = re.compile(r"\s*\(Triggered internally at [^)]*\)\s*")


def clean_message(message: str) -> str:
    """torch's message on one line, without its "(Triggered internally at ...)" source location."""
    return " ".join(_TRIGGERED.sub(" ", message).split())


def refusal(exc: BaseException, caught: Sequence[warnings.WarningMessage]) -> str:
    """torch's reason: the warnings it emitted while choosing, else the error itself."""
    said = [clean_message(str(w.message)) for w in caught]
    said = [s for s in said if s]
    error = clean_message(str(exc))
    return " ".join(said) + (f" ({error})" if said else error)


def is_oom(exc: BaseException) -> bool:
    """Whether ``exc`` says the device ran out of memory."""
    if isinstance(exc, MemoryError | torch.OutOfMemoryError):
        return True
    text = str(exc)
    return "out of memory" in text or "can't allocate memory" in text


def free(device: torch.device) -> None:
    """Collect garbage and, on CUDA, return cached blocks to the driver."""
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def sync(device: torch.device) -> None:
    """Wait for the device's queued work (CUDA); nothing elsewhere."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


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
