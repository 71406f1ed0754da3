"""Training configuration: the variants, the validated :class:`TrainConfig`, the memory estimate.

Shape legend: ``B`` batch, ``H`` heads, ``T`` training sequence length (the context),
``D`` model width (``d_model``), ``E`` head dim (``D / H``), ``V`` vocabulary size.
"""

from __future__ import annotations

import math
import os
from dataclasses import asdict, dataclass, fields
from typing import Any

import torch

from attncore.budget import check_limit
from attncore.errors import AttnInputError

__all__ = [
    "EXPERIMENT_MEMORY_SHARE",
    "MAX_TRAIN_BYTES",
    "MAX_VOCAB",
    "MAX_WEIGHT_DECAY",
    "POSITIONS",
    "VARIANTS",
    "VARIANT_INFO",
    "TrainConfig",
    "check_train_budget",
    "device_train_budget",
    "estimate_train_bytes",
]

VARIANT_INFO: dict[str, dict[str, str]] = {
    "standard": {
        "label": "standard (1/√E)",
        "formula": r"o = \mathrm{softmax}\!\left(\frac{q k^\top}{\sqrt{E}}\right) v",
        "source": "Vaswani et al. 2017",
    },
    "unscaled": {
        "label": "unscaled",
        "formula": r"o = \mathrm{softmax}(q k^\top)\, v",
        "source": "the 'Why √d Matters' tutorial's scaling-ablation exercise",
    },
    "fully_scaled": {
        "label": "fully scaled (√(T/e))",
        "formula": r"o = \sqrt{T/e}\;\mathrm{softmax}\!\left(\frac{q k^\top}{\sqrt{E}}\right) v,"
        r"\quad T = \text{key length}",
        "source": ("Graphcore's 'Almost-scaled dot-product attention'; the unit-scaling library (key length "
                   "even under a causal mask)"),
    },
    "fully_scaled_rows": {
        "label": "fully scaled per row (√(nᵢ/e))",
        "formula": r"o_i = \sqrt{n_i/e}\;\mathrm{softmax}\!\left(\frac{q_i k^\top}{\sqrt{E}}\right) v,"
        r"\quad n_i = \text{keys row } i \text{ sees}",
        "source": "the causal-aware form of Graphcore's fix",
    },
    "ssmax": {
        "label": "SSMax (learned s per head)",
        "formula": r"o_i = \mathrm{softmax}\!\left(s_h \log(n_i)\,\frac{q_i k^\top}{\sqrt{E}}\right) v",
        "source": "Nakanishi 2025, 'Scalable-Softmax Is Superior for Attention'",
    },
    "softmax1": {
        "label": "softmax1 (off-by-one)",
        "formula": r"p_j = \frac{e^{x_j}}{1 + \sum_k e^{x_k}}",
        "source": "Evan Miller 2023, 'Attention Is Off By One'",
    },
    "sink_logit": {
        "label": "sink logit per head (gpt-oss)",
        "formula": r"p_j = \frac{e^{x_j}}{e^{b_h} + \sum_k e^{x_k}}",
        "source": "gpt-oss (OpenAI 2025): one learned logit per head, appended then dropped",
    },
    "gated": {
        "label": "gated output (σ(x W_g))",
        "formula": r"o = \mathrm{softmax}\!\left(\frac{q k^\top}{\sqrt{E}}\right) v \odot \sigma(x W_g)",
        "source": ("Qiu et al. 2025, 'Gated Attention for Large Language Models' (elementwise gate after "
                   "SDPA)"),
    },
    "gated_headwise": {
        "label": "gated output per head (σ(x w_h))",
        "formula": r"o_h = \mathrm{softmax}\!\left(\frac{q_h k_h^\top}{\sqrt{E}}\right) v_h \,\sigma(x w_h)",
        "source": ("Qiu et al. 2025, 'Gated Attention for Large Language Models' (headwise gate: one scalar "
                   "per head)"),
    },
    "gated_control": {
        "label": "gated output, non-sparse control (0.5 + 0.5σ)",
        "formula": r"o = \mathrm{softmax}\!\left(\frac{q k^\top}{\sqrt{E}}\right) v \odot "
        r"\left(\tfrac12 + \tfrac12\sigma(x W_g)\right)",
        "source": ("Qiu et al. 2025, 'Gated Attention for Large Language Models' (the non-sparse control: "
                   "the same non-linearity, a gate that never falls below 0.5)"),
    },
    "softpick": {
        "label": "softpick (rectified softmax)",
        "formula": r"p_{ij} = \frac{\mathrm{ReLU}(e^{x_{ij}} - 1)}{\sum_k |e^{x_{ik}} - 1| + \epsilon},"
        r"\quad x_{ij} = \frac{q_i k_j^\top}{\sqrt{E}}",
        "source": ("Zuhri, Fuadi & Aji 2025, 'Softpick: No Attention Sink, No Massive Activations with "
                   "Rectified Softmax'"),
    },
    "sigmoid": {
        "label": "sigmoid (b = −log n)",
        "formula": r"p_{ij} = \sigma\!\left(\frac{q_i k_j^\top}{\sqrt{E}} - \log n_i\right),"
        r"\quad n_i = \text{keys row } i \text{ sees}",
        "source": "Ramapuram et al. 2024, 'Theory, Analysis, and Best Practices for Sigmoid Self-Attention'",
    },
    "relu": {
        "label": "ReLU attention (÷ nᵢ)",
        "formula": r"p_{ij} = \frac{1}{n_i}\max\!\left(\frac{q_i k_j^\top}{\sqrt{E}}, 0\right),"
        r"\quad n_i = \text{keys row } i \text{ sees}",
        "source": ("Guo et al. 2024, 'Active-Dormant Attention Heads: Mechanistically Demystifying "
                   "Extreme-Token Phenomena in LLMs'"),
    },
}
VARIANTS: tuple[str, ...] = tuple(VARIANT_INFO)
POSITIONS: tuple[str, ...] = ("rotary", "learned")  # how the model knows where a token is

MAX_VOCAB = 1000  # distinct characters; the embedding is V x D
# Parameters, gradients, AdamW moments and the activations kept for backward: the budget of
# one training run inside the app (its live runs), which shares the machine with the pages.
MAX_TRAIN_BYTES = 6 * 1024**3
# The experiments command has the device to itself: it may plan for this share of the
# device's memory (CUDA: the GPU's total memory; CPU: the machine's physical memory).
EXPERIMENT_MEMORY_SHARE = 0.8
MAX_DROPOUT = 0.9
# AdamW's decoupled decay, with room for the weight-decay sweep up to 5 after Gu et al. (ICLR 2025, "When
# Attention Sink Emerges"); each step multiplies a decayed weight by 1 - lr x weight_decay.
MAX_WEIGHT_DECAY = 10.0

_BOUNDS: dict[str, tuple[float, float]] = {
    "n_layer": (1, 12),
    "n_head": (1, 16),
    "d_model": (8, 1024),
    "context": (2, 1024),
    "batch": (1, 512),
    "steps": (1, 100_000),
    "warmup": (0, 100_000),
    "seed": (0, 2**31 - 1),
    "eval_every": (1, 100_000),
}


@dataclass(frozen=True)
class TrainConfig:
    """One training run of the character transformer (validated on construction).

    Attributes:
        variant: the attention variant, one of :data:`VARIANTS`.
        n_layer, n_head, d_model: depth, heads per layer, width D (``D % H == 0``;
            the head dim ``E = D / H`` must be even for rotary embeddings).
        context: training sequence length T (the model may run past it: rotary positions).
        batch: sequences per step.
        steps: optimiser steps.
        lr: peak AdamW learning rate (linear warm-up over ``warmup`` steps, then cosine
            decay to ``lr / 10``).
        weight_decay: AdamW decay on 2-D weights (not on norms, biases, per-head scalars), in
            [0, :data:`MAX_WEIGHT_DECAY`] (each step multiplies a decayed weight by
            ``1 - lr * weight_decay``, decoupled from the gradient).
        seed: seeds every random draw (initialisation, batches, evaluation windows, dropout).
        eval_every: steps between evaluation points (one is also made at the last step).
        dropout: probability of zeroing an activation during training, on the embeddings
            and on each block's attention and MLP outputs before they join the residual
            stream (not on the attention weights, so that every variant is regularised
            alike); 0 (the default) adds no operation at all, so results made before this
            field existed are reproduced bit for bit.
        sink_init: the initial value of the ``sink_logit`` variant's per-head logit b
            (0: it starts as softmax1); ignored by the other variants.
        positions: ``"rotary"`` (the default: q and k rotated by their positions, so the
            model runs past its context) or ``"learned"`` (a learned absolute position
            embedding of ``context`` rows added to the token embedding, Guo et al.'s setting;
            the model then reads at most ``context`` positions).
    """

    variant: str = "standard"
    n_layer: int = 4
    n_head: int = 4
    d_model: int = 128
    context: int = 128
    batch: int = 32
    steps: int = 1500
    lr: float = 1e-3
    warmup: int = 100
    weight_decay: float = 0.1
    seed: int = 0
    eval_every: int = 100
    dropout: float = 0.0
    sink_init: float = 0.0
    positions: str = "rotary"

    def __post_init__(self) -> None:
        if self.variant not in VARIANTS:
            raise AttnInputError(
                f"unknown attention variant {self.variant!r}; choose one of {', '.join(VARIANTS)}."
            )
        for name, (lo, hi) in _BOUNDS.items():
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise AttnInputError(f"{name} must be a whole number; got {value!r}.")
            if not lo <= value <= hi:
                raise AttnInputError(f"{name} must lie in {lo}..{hi}; got {value}.")
        if self.d_model % self.n_head:
            raise AttnInputError(
                f"d_model ({self.d_model}) must be a multiple of n_head ({self.n_head})."
            )
        if self.d_head % 2:
            raise AttnInputError(
                f"the head dim d_model / n_head = {self.d_head} must be even (rotary embeddings "
                "rotate pairs of coordinates)."
            )
        if self.warmup > self.steps:
            raise AttnInputError(f"warmup ({self.warmup}) cannot exceed steps ({self.steps}).")
        for name in ("lr", "weight_decay"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
                raise AttnInputError(f"{name} must be a finite number; got {value!r}.")
        if not 0.0 < self.lr <= 100.0:
            raise AttnInputError(f"the learning rate must lie in (0, 100]; got {self.lr}.")
        if not 0.0 <= self.weight_decay <= MAX_WEIGHT_DECAY:
            raise AttnInputError(
                f"weight_decay must lie in [0, {MAX_WEIGHT_DECAY:g}]; got {self.weight_decay}.")
        if (isinstance(self.dropout, bool) or not isinstance(self.dropout, int | float)
                or not 0.0 <= self.dropout <= MAX_DROPOUT):
            raise AttnInputError(f"dropout must be a number in [0, {MAX_DROPOUT}]; got {self.dropout!r}.")
        if self.positions not in POSITIONS:
            raise AttnInputError(f"positions must be one of {', '.join(POSITIONS)}; got {self.positions!r}.")
        b = self.sink_init
        if isinstance(b, bool) or not isinstance(b, int | float) or not math.isfinite(b) or abs(b) > 20.0:
            raise AttnInputError(f"the initial sink logit must be a number in [-20, 20]; got {b!r}.")

    @property
    def d_head(self) -> int:
        """Head dim E = d_model / n_head."""
        return self.d_model // self.n_head

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able dict of the fields."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrainConfig:
        """Rebuild (and re-validate) a config from :meth:`to_dict`'s output; unknown keys -> error."""
        names = {f.name for f in fields(cls)}
        extra = set(data) - names
        if extra:
            raise AttnInputError(f"unknown training settings: {', '.join(sorted(extra))}.")
        return cls(**data)

    def replace(self, **changes: Any) -> TrainConfig:
        """A copy with some fields changed (validated)."""
        return TrainConfig(**{**self.to_dict(), **changes})


def n_params(config: TrainConfig, vocab: int) -> int:
    """Trainable parameters of the model for ``config`` and a vocabulary of ``vocab`` characters."""
    D, H, N = config.d_model, config.n_head, config.n_layer
    per_layer = 4 * D * D + 8 * D * D + 5 * D + 4 * D  # qkv+out, MLP (4x), MLP biases, two LayerNorms
    if config.variant in ("gated", "gated_control"):
        per_layer += D * D
    if config.variant == "gated_headwise":
        per_layer += D * H
    if config.variant in ("ssmax", "sink_logit"):
        per_layer += H
    pos = config.context * D if config.positions == "learned" else 0
    return vocab * D + pos + N * per_layer + 2 * D


def estimate_train_bytes(config: TrainConfig, vocab: int) -> int:
    """Bytes a training run needs: parameters x 4 (weights, gradients, two AdamW moments)
    plus the float32 activations kept for backward (B x T x D per sublayer output, the
    (B, H, T, T) attention maps the materialised variants keep, the B x T x V logits, and with
    dropout its masks and outputs), or the maps of one window that each evaluation inspects,
    if that is more.
    """
    B, T, D, H, N = config.batch, config.context, config.d_model, config.n_head, config.n_layer
    params = n_params(config, vocab)
    maps = 6 if config.variant not in ("standard", "unscaled", "fully_scaled", "fully_scaled_rows",
                                       "gated", "gated_headwise", "gated_control") else 0
    act = N * (B * T * D * 20 + B * H * T * T * maps) + B * T * vocab * 3
    if config.dropout > 0:  # the masks (and scaled copies) of 2N + 1 dropouts kept for backward
        act += (2 * N + 1) * B * T * D * 2
    inspect = (N + 6) * H * T * T  # evaluation: every layer's map of one window, one layer's stages
    act = max(act, inspect)
    return 4 * (4 * params + act)


def check_train_budget(config: TrainConfig, vocab: int, limit: int | None = None) -> None:
    """:class:`ResourceLimitError` when :func:`estimate_train_bytes` exceeds ``limit`` bytes
    (default :data:`MAX_TRAIN_BYTES`, the app's budget; the experiments command passes
    :func:`device_train_budget` of the device it trains on)."""
    budget = MAX_TRAIN_BYTES if limit is None else limit
    check_limit(
        estimate_train_bytes(config, vocab),
        budget,
        "the memory this training run needs (bytes)",
        "(weights, gradients, optimiser state and activations must fit beside the app)"
        if limit is None else "(weights, gradients, optimiser state and activations must fit on the device)",
        "Use a smaller batch, context, width or fewer layers.",
    )


def _physical_memory() -> int | None:
    """The machine's physical memory in bytes (None where the OS does not say)."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, OSError, ValueError):
        return None


def device_train_budget(device: str | torch.device, *, total_bytes: int | None = None) -> int:
    """Bytes one training run may plan for when it has ``device`` to itself (the experiments command).

    :data:`EXPERIMENT_MEMORY_SHARE` of the device's memory: a CUDA GPU's total memory
    (``torch.cuda.get_device_properties``), else the machine's physical memory (the app's
    :data:`MAX_TRAIN_BYTES` where the OS does not say). ``total_bytes`` overrides the
    device's memory (tests fake a GPU with it).
    """
    dev = torch.device(device)
    if total_bytes is None:
        if dev.type == "cuda":
            total_bytes = int(torch.cuda.get_device_properties(dev).total_memory)
        else:
            total_bytes = _physical_memory()
    if total_bytes is None:
        return MAX_TRAIN_BYTES
    return int(EXPERIMENT_MEMORY_SHARE * total_bytes)
