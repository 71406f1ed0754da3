"""Scale rules: the factor a rule puts on the logits ``q . k`` of a query that sees ``n`` keys.

Every rule is a base scale times a length-dependent multiplier, divided by the temperature:

* ``sqrt_d``: ``1/sqrt(d)`` (Vaswani et al. 2017);
* ``none``: 1 (unscaled dot products);
* ``ssmax``: ``s log(n) / sqrt(d)`` (Nakanishi 2025, "Scalable-Softmax Is Superior for
  Attention"; the paper's figure uses ``s = 0.43``);
* ``llama4``: ``(1 + 0.1 log(floor((pos + 1) / 8192) + 1)) / sqrt(d)``, the query temperature
  tuning of Llama 4's NoPE layers, for the query at position ``pos = n - 1``.

``d`` is the query/key dim ``E`` of the package's shape legend. The streaming sweeps
(:mod:`attncore.sweeps`) and their exact theory (:mod:`attncore.row_theory`) both read the
rules from here.
"""

from __future__ import annotations

import math

import numpy as np

from attncore.errors import AttnInputError

__all__ = [
    "LLAMA4_ATTN_SCALE",
    "LLAMA4_FLOOR_SCALE",
    "SCALE_RULES",
    "base_scale",
    "check_scale_rule",
    "llama4_multiplier",
    "logit_multiplier",
]

SCALE_RULES: tuple[str, ...] = ("sqrt_d", "none", "ssmax", "llama4")

LLAMA4_FLOOR_SCALE = 8192
LLAMA4_ATTN_SCALE = 0.1


def check_scale_rule(scale_rule: str) -> None:
    """Raise :class:`AttnInputError` for a name that is not in :data:`SCALE_RULES`."""
    if scale_rule not in SCALE_RULES:
        raise AttnInputError(f"unknown scale rule {scale_rule!r}; choose one of {', '.join(SCALE_RULES)}.")


def base_scale(scale_rule: str, d: int) -> float:
    """The rule's length-independent factor: ``1/sqrt(d)`` for every rule but ``none`` (1)."""
    check_scale_rule(scale_rule)
    return 1.0 if scale_rule == "none" else 1.0 / math.sqrt(d)


def llama4_multiplier(n: int | np.ndarray) -> float | np.ndarray:
    """Llama 4's NoPE query multiplier for the query at position ``n - 1``.

    ``1 + 0.1 * log(floor((pos + 1) / 8192) + 1)``: 1 below 8192 keys, 1.07 at 8192,
    1.76 at 2**24.
    """
    nn = np.floor(np.asarray(n, dtype=np.float64) / LLAMA4_FLOOR_SCALE)
    out = 1.0 + LLAMA4_ATTN_SCALE * np.log(nn + 1.0)
    return float(out) if out.ndim == 0 else out


def logit_multiplier(scale_rule: str, n: int | np.ndarray, ssmax_s: float = 0.43) -> float | np.ndarray:
    """The length-dependent factor a scale rule puts on top of its base scale (1 for most)."""
    check_scale_rule(scale_rule)
    n_arr = np.asarray(n, dtype=np.float64)
    if scale_rule == "ssmax":
        out = ssmax_s * np.log(np.maximum(n_arr, 1.0))
    elif scale_rule == "llama4":
        out = np.asarray(llama4_multiplier(n_arr))
    else:
        out = np.ones_like(n_arr)
    return float(out) if out.ndim == 0 else out
