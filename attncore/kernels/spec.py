"""What one SDPA configuration is: :class:`KernelSpec`, its limits and the seeded inputs of one call.

The limits here are the only ones: the Kernels page builds its controls' options from
:data:`HEAD_CHOICES`, :data:`GROUP_CHOICES`, :data:`HEAD_DIM_CHOICES` and :data:`LENGTH_CHOICES`,
so it never offers a value :meth:`KernelSpec.validate` refuses.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from attncore.dtypes import DTYPES
from attncore.errors import AttnInputError
from attncore.synthetic import make_generator

__all__ = [
    "FULLY_MASKED_EVERY",
    "FULLY_MASKED_FIRST",
    "GROUP_CHOICES",
    "HEAD_CHOICES",
    "HEAD_DIM_CHOICES",
    "LENGTH_CHOICES",
    "MASK_KEEP",
    "MASK_KINDS",
    "SHAPE_PRESETS",
    "ShapePreset",
    "MAX_BATCH",
    "MAX_GROUPS",
    "MAX_HEADS",
    "MAX_HEAD_DIM",
    "MAX_T",
    "MIN_HEAD_DIM",
    "MIN_T",
    "KernelInputs",
    "KernelSpec",
    "check_lengths",
    "fully_masked_rows",
    "input_bytes",
    "make_inputs",
]

MASK_KINDS: tuple[str, ...] = ("none", "causal", "boolean", "float")
# Boolean and float masks hide every key from query rows 3, 3 + 64, 3 + 128, ...
FULLY_MASKED_EVERY = 64
FULLY_MASKED_FIRST = 3
# Each (query, key) pair survives the boolean / float mask with this probability.
MASK_KEEP = 0.9

# Query heads per key/value head can be anything from 1 (MHA) to H (MQA): its bound is the heads'.
MAX_HEADS, MAX_HEAD_DIM, MAX_BATCH = 64, 256, 8
MAX_GROUPS = MAX_HEADS
MIN_HEAD_DIM = 16
MIN_T, MAX_T = 16, 1 << 16


def _powers_of_two(lo: int, hi: int) -> tuple[int, ...]:
    return tuple(1 << i for i in range(hi.bit_length()) if lo <= 1 << i <= hi)


HEAD_CHOICES: tuple[int, ...] = _powers_of_two(1, MAX_HEADS)
GROUP_CHOICES: tuple[int, ...] = _powers_of_two(1, MAX_GROUPS)
HEAD_DIM_CHOICES: tuple[int, ...] = _powers_of_two(MIN_HEAD_DIM, MAX_HEAD_DIM)
LENGTH_CHOICES: tuple[int, ...] = _powers_of_two(MIN_T, MAX_T)


@dataclass(frozen=True)
class ShapePreset:
    """The attention shape of a real model, for the Kernels page's preset control.

    Attributes:
        label: the model, in words. heads: H; groups: query heads per key/value head (Hkv = H / groups);
        head_dim: E; mask: its mask kind (``"causal"`` for a decoder).
    """

    label: str
    heads: int
    groups: int
    head_dim: int
    mask: str

    @property
    def kv_heads(self) -> int:
        """Hkv."""
        return self.heads // self.groups


# The bundled decoder's attention (tests/test_smollm2.py checks it against the loaded model's config).
SHAPE_PRESETS: dict[str, ShapePreset] = {
    "smollm2": ShapePreset("SmolLM2-135M-Instruct, 4-bit (Q4_1) weights dequantised to float32",
                           heads=9, groups=3, head_dim=64, mask="causal"),
}


@dataclass(frozen=True)
class KernelSpec:
    """One SDPA configuration; the lengths ``L``, ``S`` are given per call.

    Attributes:
        heads: query heads ``H`` (1 to :data:`MAX_HEADS`).
        groups: query heads per key/value head (GQA); ``Hkv = H / groups``; 1 = plain MHA,
            ``groups = H`` = multi-query attention.
        head_dim: ``E`` (query, key and value dim; 1 to :data:`MAX_HEAD_DIM`).
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

    @property
    def itemsize(self) -> int:
        """Bytes per element of :attr:`dtype`."""
        return self.torch_dtype.itemsize

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


def check_lengths(lengths: tuple[int, ...] | list[int]) -> None:
    """Raise :class:`AttnInputError` unless every length is within [:data:`MIN_T`, :data:`MAX_T`]."""
    for t in lengths:
        if not MIN_T <= int(t) <= MAX_T:
            raise AttnInputError(f"T (= L = S) must be between {MIN_T} and {MAX_T}; got {t}.")


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


def input_bytes(spec: KernelSpec, L: int, S: int) -> float:
    """Peak bytes :func:`make_inputs` allocates: Q, K, V in float32 and in ``spec.dtype``, and for
    the boolean / float masks the ``(L, S)`` uniform draw (4 B a cell), the keep mask (1 B) and,
    for the float mask, the distance bias and the masked result (4 B each, plus ``spec.dtype``)."""
    qkv = spec.batch * (spec.heads * L + 2 * spec.kv_heads * S) * spec.head_dim * (4 + spec.itemsize)
    per_cell = {"boolean": 4 + 1, "float": 4 + 1 + 4 + 4 + spec.itemsize}.get(spec.mask, 0)
    return float(qkv + per_cell * L * S)


def make_inputs(spec: KernelSpec, L: int, S: int, device: torch.device | str) -> KernelInputs:
    """Seeded standard-Gaussian Q, K, V (drawn in float32, cast to ``spec.dtype``) and the mask.

    The masks: ``"boolean"`` keeps each (query, key) pair with probability 0.9 (seeded) and
    hides every key from the rows of :func:`fully_masked_rows`; ``"float"`` is the same
    pattern as ``-inf`` plus a distance bias ``-|i - j| / S`` on the visible pairs (an
    ALiBi-like slope). Callers check :func:`input_bytes` against their budget first.
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
