"""Row normalisers: the function that turns a row of scores into attention weights.

Shape legend: ``...`` any leading dims (batch B, heads H), ``L`` queries,
``S`` keys. Every normaliser maps scores ``(..., L, S)`` and an optional boolean
``allowed`` mask (broadcastable to the scores, ``True`` = the query may see the
key) to weights ``(..., L, S)`` on the scores' device and dtype.

Contract shared by all of them:

* disallowed keys (``allowed == False`` or a score of ``-inf``) get weight exactly 0;
* a row with no allowed key gets all-zero weights, never NaN;
* ``n``, where a formula uses it, is the number of keys the row may see.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass

import pandas as pd
import torch
from torch import Tensor

from attncore.budget import check_limit
from attncore.errors import AttnInputError

__all__ = [
    "NORMALIZER_NAMES",
    "Normalizer",
    "ReLUNorm",
    "SSMax",
    "Sigmoid",
    "Softmax",
    "SoftmaxWithSink",
    "Softpick",
    "allowed_counts",
    "effective_allowed",
    "get_normalizer",
    "peak_weight_sweep",
]


_EXP32_FLOOR = -87.0  # float32 exp(-87) = 1.6e-38: still a normal number


def effective_allowed(scores: Tensor, allowed: Tensor | None) -> Tensor:
    """Boolean mask ``(..., L, S)``: allowed by the mask and not scored ``-inf``."""
    finite_or_pos = scores != float("-inf")
    if allowed is None:
        return finite_or_pos
    if allowed.dtype != torch.bool:
        raise AttnInputError("the 'allowed' mask must be boolean (True = may attend).")
    return finite_or_pos & allowed


def allowed_counts(allowed: Tensor) -> Tensor:
    """Keys each row may see, ``(..., L, 1)``, as the float dtype used for maths."""
    return allowed.sum(dim=-1, keepdim=True)


def _masked_softmax(x: Tensor, allowed: Tensor, extra_logit: Tensor | float | None) -> Tensor:
    """Softmax over allowed entries, optionally with one extra logit in the denominator.

    ``extra_logit`` b (broadcastable to ``(..., L, 1)``) gives
    ``exp(x_i) / (exp(b) + sum_j exp(x_j))``, computed with the max of the row and
    b subtracted so that nothing overflows.
    """
    x = x.masked_fill(~allowed, float("-inf"))
    row_max = x.amax(dim=-1, keepdim=True)  # (..., L, 1)
    if extra_logit is not None:
        b = torch.as_tensor(extra_logit, dtype=x.dtype, device=x.device)
        row_max = torch.maximum(row_max, b.expand_as(row_max) if b.dim() else b)
    row_max = torch.where(torch.isfinite(row_max), row_max, torch.zeros_like(row_max))
    z = x - row_max  # <= 0; disallowed -> -inf
    if z.dtype == torch.float32 and z.device.type == "cpu":
        # torch's float32 CPU exp is ~100x slower once its result underflows (z < -87.3; -inf
        # included): exp the clamped values, then zero what lay below (as exp would have)
        e = torch.exp(z.clamp(min=_EXP32_FLOOR))
        # in place only outside autograd: exp's backward reads its own output
        e = (e.masked_fill if e.requires_grad else e.masked_fill_)(z < _EXP32_FLOOR, 0.0)
    else:
        e = torch.exp(z)  # disallowed -> exp(-inf) = 0
    denom = e.sum(dim=-1, keepdim=True)
    if extra_logit is not None:
        denom = denom + torch.exp(b - row_max)
    return e / torch.where(denom > 0, denom, torch.ones_like(denom))


class Normalizer(ABC):
    """Maps scores ``(..., L, S)`` to weights ``(..., L, S)``; see the module docstring."""

    name: str = ""
    label: str = ""
    formula: str = ""  # LaTeX, for the UI
    source: str = ""
    sums_to_one: bool = True

    @abstractmethod
    def __call__(self, scores: Tensor, allowed: Tensor | None = None) -> Tensor:
        """Weights for ``scores`` (..., L, S) under the boolean ``allowed`` mask."""

    def params(self) -> dict[str, float]:
        """The normaliser's parameters, for captions and CSV headers."""
        return {}


@dataclass(frozen=True)
class Softmax(Normalizer):
    r"""Standard softmax: :math:`p_i = e^{x_i} / \sum_j e^{x_j}` over the allowed keys."""

    name = "softmax"
    label = "softmax"
    formula = r"p_i = \frac{e^{x_i}}{\sum_{j} e^{x_j}}"
    source = "Vaswani et al. 2017, 'Attention Is All You Need'"

    def __call__(self, scores: Tensor, allowed: Tensor | None = None) -> Tensor:
        if allowed is not None and allowed.dtype != torch.bool:
            raise AttnInputError("the 'allowed' mask must be boolean (True = may attend).")
        # Fast path: torch's fused softmax, then zero the rows that see no key at all
        # (torch would give NaN there: exp(-inf) / 0).
        x = scores if allowed is None else scores.masked_fill(~allowed, float("-inf"))
        weights = torch.softmax(x, dim=-1)  # (..., L, S)
        empty = x.amax(dim=-1, keepdim=True) == float("-inf")  # (..., L, 1)
        if bool(empty.any()):
            weights = weights.masked_fill(empty, 0.0)
        return weights


@dataclass(frozen=True)
class SoftmaxWithSink(Normalizer):
    r"""Softmax with one extra logit ``b`` in the denominator (a sink that is never read).

    :math:`p_i = e^{x_i} / (e^{b} + \sum_j e^{x_j})`. Equal to appending a column
    of logit ``b`` to the scores, taking the softmax and dropping that column.
    ``b = 0`` is softmax1, the "off-by-one" softmax (Evan Miller 2023, "Attention
    Is Off By One"); a learned ``b`` per head is the gpt-oss form (OpenAI 2025: one
    learned sink logit per head, appended to the scores and dropped after the softmax).
    Rows may sum to less than 1: a head can "attend to nothing".
    ``sink_logit`` may be a float or a tensor broadcastable to ``(..., L, 1)``,
    e.g. ``(H, 1, 1)`` for one logit per head.
    """

    sink_logit: float | Tensor = 0.0
    name = "softmax1"
    label = "softmax1 (off-by-one)"
    formula = r"p_i = \frac{e^{x_i}}{e^{b} + \sum_{j} e^{x_j}},\quad b = 0"
    source = "Evan Miller 2023, 'Attention Is Off By One'; sink logit b as in gpt-oss"
    sums_to_one = False

    def __call__(self, scores: Tensor, allowed: Tensor | None = None) -> Tensor:
        return _masked_softmax(scores, effective_allowed(scores, allowed), self.sink_logit)

    def params(self) -> dict[str, float]:
        b = self.sink_logit
        return {"b": float(b) if not isinstance(b, Tensor) or b.numel() == 1 else float("nan")}


@dataclass(frozen=True)
class SSMax(Normalizer):
    r"""Scalable softmax: softmax of :math:`s \log(n)\, x_i`, n = keys the row may see.

    Multiplying the logits by ``s * log n`` keeps the attention peak from fading as
    n grows (Nakanishi 2025, "Scalable-Softmax Is Superior for Attention",
    arXiv:2501.19399). ``s`` defaults to 0.43, the value used in that paper's
    figure 1. A row with one visible key gets weight 1 on it.
    """

    s: float = 0.43
    name = "ssmax"
    label = "SSMax (s·log n)"
    formula = r"p_i = \frac{e^{s \log(n)\, x_i}}{\sum_{j} e^{s \log(n)\, x_j}}"
    source = "Nakanishi 2025, 'Scalable-Softmax Is Superior for Attention'"

    def __post_init__(self) -> None:
        if not math.isfinite(self.s) or self.s <= 0 or self.s > 100:
            raise AttnInputError(f"SSMax needs 0 < s <= 100; got s = {self.s}.")

    def __call__(self, scores: Tensor, allowed: Tensor | None = None) -> Tensor:
        ok = effective_allowed(scores, allowed)
        n = allowed_counts(ok).to(scores.dtype).clamp_min(1.0)  # (..., L, 1)
        factor = self.s * torch.log(n)
        x = torch.where(ok, scores * factor, torch.zeros_like(scores))
        return _masked_softmax(x, ok, None)

    def params(self) -> dict[str, float]:
        return {"s": self.s}


@dataclass(frozen=True)
class Sigmoid(Normalizer):
    r"""Elementwise sigmoid attention: :math:`p_i = \sigma(x_i + b)`, default ``b = -\log n``.

    No competition between keys, so rows need not sum to 1; the ``-log n`` bias
    keeps the initial row sum near 1 (Ramapuram et al. 2024, "Theory, Analysis,
    and Best Practices for Sigmoid Self-Attention", arXiv:2409.04431).
    ``bias=None`` means ``-log n`` per row.
    """

    bias: float | None = None
    name = "sigmoid"
    label = "sigmoid (b = −log n)"
    formula = r"p_i = \sigma(x_i + b),\quad b = -\log n"
    source = "Ramapuram et al. 2024, 'Sigmoid Self-Attention'"
    sums_to_one = False

    def __post_init__(self) -> None:
        if self.bias is not None and not math.isfinite(self.bias):
            raise AttnInputError("the sigmoid bias must be a finite number.")

    def __call__(self, scores: Tensor, allowed: Tensor | None = None) -> Tensor:
        ok = effective_allowed(scores, allowed)
        if self.bias is None:
            b = -torch.log(allowed_counts(ok).to(scores.dtype).clamp_min(1.0))
        else:
            b = torch.tensor(self.bias, dtype=scores.dtype, device=scores.device)
        w = torch.sigmoid(scores + b)
        return torch.where(ok, w, torch.zeros_like(w))

    def params(self) -> dict[str, float]:
        return {"b": float("nan") if self.bias is None else self.bias}


@dataclass(frozen=True)
class ReLUNorm(Normalizer):
    r"""ReLU attention: :math:`p_i = \mathrm{ReLU}(x_i) / n`, n = keys the row may see.

    No exponential and no competition: a key scored at or below 0 gets weight exactly 0, so a
    row whose scores are all negative spends nothing (a head can attend to nothing). Dividing
    by n keeps a row of positive scores from growing with the row's length. This is the form of
    Guo et al. 2024, "Active-Dormant Attention Heads: Mechanistically Demystifying
    Extreme-Token Phenomena in LLMs" (their ``attn_use_relu``: ReLU of the scaled scores over
    the query's 1-based position, which under a causal mask is the keys it sees).
    """

    name = "relu"
    label = "ReLU (÷ n)"
    formula = r"p_i = \frac{\max(x_i, 0)}{n}"
    source = "Guo et al. 2024, 'Active-Dormant Attention Heads'"
    sums_to_one = False

    def __call__(self, scores: Tensor, allowed: Tensor | None = None) -> Tensor:
        ok = effective_allowed(scores, allowed)
        n = allowed_counts(ok).to(scores.dtype).clamp_min(1.0)  # (..., L, 1)
        w = torch.where(ok, torch.relu(scores), torch.zeros_like(scores)) / n
        return w


@dataclass(frozen=True)
class Softpick(Normalizer):
    r"""Softpick, the rectified softmax: ReLU(e^x - 1) over the sum of |e^x - 1| (plus epsilon).

    :math:`p_i = \mathrm{ReLU}(e^{x_i} - 1) / (\sum_j |e^{x_j} - 1| + \epsilon)`.

    Zuhri, Fuadi & Aji 2025, "Softpick: No Attention Sink, No Massive Activations with Rectified
    Softmax" (arXiv:2504.20966). Computed in the paper's numerically safe form, numerator and
    denominator multiplied by :math:`e^{-m}`:
    :math:`p_i = \mathrm{ReLU}(e^{x_i - m} - e^{-m}) / (\sum_j |e^{x_j - m} - e^{-m}| + \epsilon)`
    with ``eps`` = 1e-8 as in the authors' reference code (``naive_softpick_attn.py`` of
    zaydzuhri/softpick-attention), where m is the row's largest allowed score. Here m is that max
    clamped at 0 from below: a row whose max is below 0 has every :math:`e^{x_j} - 1 < 0`, so all its
    weights are 0 either way, and the clamp keeps :math:`e^{-m} \le 1` (no overflow for rows of very
    negative scores). A key scored at or below 0 gets weight exactly 0; disallowed keys count in
    neither sum. Rows sum to at most 1 (to 1 minus the share of the absolute mass that lies below 0),
    and a row whose scores are all <= 0 gets all-zero weights: the head attends to nothing.
    """

    eps: float = 1e-8
    name = "softpick"
    label = "softpick (rectified)"
    formula = r"p_i = \frac{\mathrm{ReLU}(e^{x_i} - 1)}{\sum_{j} |e^{x_j} - 1| + \epsilon}"
    source = "Zuhri, Fuadi & Aji 2025, 'Softpick: No Attention Sink, No Massive Activations'"
    sums_to_one = False

    def __post_init__(self) -> None:
        if not math.isfinite(self.eps) or not 0 < self.eps <= 1:
            raise AttnInputError(f"softpick needs 0 < eps <= 1; got eps = {self.eps}.")

    def __call__(self, scores: Tensor, allowed: Tensor | None = None) -> Tensor:
        ok = effective_allowed(scores, allowed)
        x = torch.where(ok, scores, torch.zeros_like(scores))  # hidden keys: any finite value
        m = x.masked_fill(~ok, float("-inf")).amax(dim=-1, keepdim=True).clamp_min(0.0)  # (..., L, 1)
        d = torch.exp(x - m) - torch.exp(-m)  # e^{-m} (e^x - 1), (..., L, S)
        zero = torch.zeros_like(d)
        num = torch.where(ok, torch.relu(d), zero)
        den = torch.where(ok, d.abs(), zero).sum(dim=-1, keepdim=True) + self.eps
        return num / den

    def params(self) -> dict[str, float]:
        return {"eps": self.eps}


_FACTORIES = {
    "softmax": Softmax,
    "softmax1": SoftmaxWithSink,
    "ssmax": SSMax,
    "sigmoid": Sigmoid,
    "relu": ReLUNorm,
    "softpick": Softpick,
}
NORMALIZER_NAMES: tuple[str, ...] = tuple(_FACTORIES)


def get_normalizer(spec: str | Normalizer, **params: float | None) -> Normalizer:
    """Return a normaliser object from a name (with parameters) or pass one through.

    Names: ``softmax``, ``softmax1`` (param ``sink_logit``), ``ssmax`` (``s``),
    ``sigmoid`` (``bias``), ``relu``, ``softpick`` (``eps``).
    """
    if isinstance(spec, Normalizer):
        if params:
            raise AttnInputError("parameters are only accepted with a normaliser name.")
        return spec
    key = str(spec).strip().lower()
    if key not in _FACTORIES:
        raise AttnInputError(
            f"unknown normaliser {spec!r}; choose one of {', '.join(NORMALIZER_NAMES)}."
        )
    try:
        return _FACTORIES[key](**params)
    except TypeError as exc:
        raise AttnInputError(f"bad parameters for normaliser {key!r}: {exc}") from exc


def peak_weight_sweep(
    lengths: Sequence[int],
    *,
    peak: float = 3.0,
    rest: float = -2.0,
    s: float = 0.43,
    device: str | torch.device = "cpu",
) -> pd.DataFrame:
    """The SSMax paper's figure-1 setup, measured: one logit at ``peak``, n-1 at ``rest``.

    For each n a row of logits ``(n,)`` is materialised on ``device`` and normalised by
    attncore's :class:`~attncore.normalizers.Softmax` and :class:`~attncore.normalizers.SSMax`
    (logits times ``s log n``); the weight on the peak key is reported. Columns ``n``,
    ``softmax``, ``ssmax``. Limited to n <= 2**20 per row.
    """
    ns = sorted(set(int(n) for n in lengths))
    if not ns or ns[0] < 2:
        raise AttnInputError("the figure needs rows of at least 2 keys.")
    check_limit(ns[-1], 1 << 20, "the longest row of the figure-1 panel", "keys", "Lower its largest n.")
    for name, v in (("peak", peak), ("rest", rest)):
        if not (math.isfinite(v) and abs(v) <= 100):
            raise AttnInputError(f"the {name} logit must be a number in [-100, 100]; got {v}.")
    ssmax = SSMax(s)  # validates s
    dev = torch.device(device)
    out = {"n": ns, "softmax": [], "ssmax": []}
    for n in ns:
        x = torch.full((1, n), float(rest), dtype=torch.float64, device=dev)  # (1, n)
        x[0, 0] = float(peak)
        out["softmax"].append(float(Softmax()(x)[0, 0]))
        out["ssmax"].append(float(ssmax(x)[0, 0]))
    return pd.DataFrame(out)
