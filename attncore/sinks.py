"""Attention sinks: a head that wants to attend to nothing, the normalisers that let it, and the sink metric.

Shape legend: ``...`` leading dims (layers, heads), ``N`` layers, ``H`` heads,
``L`` queries, ``S`` keys, ``E`` query/key dim, ``Ev`` value dim, ``D`` gate
input dim, ``G`` gate width (``Ev`` elementwise, 1 headwise), ``P`` points of a sweep.

Softmax must spend a total weight of 1 on the keys a query sees. A head that
has nothing useful to read therefore dumps its weight on a token whose value
is (close to) zero: the *attention sink* (Xiao et al. 2023, "Efficient
Streaming Language Models with Attention Sinks"). This module builds that
situation from real queries, keys and values (:func:`sink_sequence`), runs the
same logits through the proposed fixes (:func:`normaliser_zoo`: softmax1, a
learned sink logit, sigmoid attention, ReLU attention, an output gate), and measures sinks in
any attention tensor with the metric of Gu et al. 2024, "When Attention Sink
Emerges in Language Models: An Empirical View" (:func:`sink_scores`,
:func:`sink_head_share`).

Construction of the synthetic sequence (head dim ``E``, direction ``u = e_0``):

* every query has ``q_i = sqrt(E) u + a z_i`` with ``z_i`` Gaussian in the other
  ``E - 1`` coordinates;
* the sink key is ``k_0 = strength * u``, so every query scores it exactly
  ``q_i . k_0 / sqrt(E) = strength``;
* real keys are ``k_j = content * u + a g_j``, so their scaled logits are
  ``content + eps_ij`` with ``eps_ij`` of mean 0 and std ``spread``
  (``a^2 = spread * sqrt(E / (E - 1))``);
* real values are standard Gaussian; the sink's value is a Gaussian direction rescaled
  to RMS ``sink_value`` (0 = a zero vector, 1 = as large as a typical real value).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
import torch
from torch import Tensor

from attncore import theory as T
from attncore.attention import attention_stages
from attncore.budget import check_bytes, check_limit
from attncore.dtypes import DTYPES, sampling_dtype
from attncore.errors import AttnInputError
from attncore.normalizers import Normalizer, ReLUNorm, Sigmoid, Softmax, SoftmaxWithSink
from attncore.synthetic import make_generator, randn

__all__ = [
    "CONTENT_RANGE",
    "GATE_KINDS",
    "STRENGTH_RANGE",
    "HEAD_DIM",
    "MAX_SWEEP_CELLS",
    "MAX_TOKENS",
    "SWEEP_QUERIES",
    "ZOO",
    "SinkSequence",
    "SinkSpec",
    "SweepResult",
    "ZooEntry",
    "category_mass",
    "content_sweep",
    "gated_attention",
    "output_gate",
    "output_rms",
    "sink_column_softmax",
    "sink_head_share",
    "sink_scores",
    "sink_sequence",
    "strength_sweep",
    "normaliser_zoo",
    "ZooTheory",
    "zoo_content_theory",
    "zoo_theory",
    "SinkReport",
    "sink_report",
    "uniform_attention",
    "uniform_sink_scores",
]

HEAD_DIM = 64  # E and Ev of the synthetic head
MAX_TOKENS = 1024  # real tokens n of the synthetic sequence
SWEEP_QUERIES = 64  # queries averaged in a sweep (the key count n is kept in full)
MAX_SWEEP_CELLS = 16 * 1024 * 1024  # points x queries x keys of one batched sweep (4 stages kept)
GATE_KINDS: tuple[str, ...] = ("elementwise", "headwise")
STRENGTH_RANGE = (-4.0, 16.0)  # sink logit range of the page's slider and sweep
CONTENT_RANGE = (-10.0, 6.0)  # mean real-logit range of the page's slider and sweep
ZOO: tuple[str, ...] = ("softmax", "softmax1", "sink_logit", "sigmoid", "relu", "gated")


@dataclass(frozen=True)
class SinkSpec:
    """One synthetic head with an optional sink token at key position 0 (all plain values).

    Attributes:
        n: real tokens; they are the queries and the keys after the sink.
        sink: whether key 0 is a sink token.
        strength: scaled logit every query gives the sink.
        sink_value: RMS of the sink's value (0 = a zero vector, 1 = like a real value).
        content: mean scaled logit of the real keys (how relevant they are).
        spread: std of the real keys' scaled logits.
        sink_logit: the learned per-head logit b of the sink-logit normaliser.
        gate_bias: bias of the output gate ``sigmoid(x W_g + b_g)``.
        gate: ``"elementwise"`` (one gate per value dim) or ``"headwise"`` (one per query).
        seed, dtype: the random draws and the compute dtype name.
    """

    n: int = 32
    sink: bool = True
    strength: float = 6.0
    sink_value: float = 0.0
    content: float = 0.0
    spread: float = 1.0
    sink_logit: float = 1.0
    gate_bias: float = -2.0
    gate: str = "elementwise"
    seed: int = 0
    dtype: str = "float32"

    def validate(self) -> None:
        """Raise :class:`AttnInputError` with a plain message for out-of-range values."""
        if not 1 <= int(self.n) <= MAX_TOKENS:
            raise AttnInputError(
                f"the synthetic sequence takes 1 to {MAX_TOKENS} real tokens; got {self.n}."
            )
        for name, lim in (("strength", 50.0), ("content", 50.0), ("sink_logit", 50.0),
                          ("gate_bias", 50.0)):
            v = float(getattr(self, name))
            if not (math.isfinite(v) and abs(v) <= lim):
                raise AttnInputError(f"{name} must be a number in [-{lim:g}, {lim:g}]; got {v}.")
        if not (math.isfinite(self.spread) and 0.0 <= self.spread <= 10.0):
            raise AttnInputError(f"the logit spread must lie in [0, 10]; got {self.spread}.")
        if not (math.isfinite(self.sink_value) and 0.0 <= self.sink_value <= 10.0):
            raise AttnInputError(f"the sink value scale must lie in [0, 10]; got {self.sink_value}.")
        if self.gate not in GATE_KINDS:
            raise AttnInputError(f"the gate is one of {', '.join(GATE_KINDS)}; got {self.gate!r}.")
        if self.dtype not in DTYPES:
            raise AttnInputError(f"unknown dtype {self.dtype!r}.")


@dataclass(frozen=True)
class SinkSequence:
    """The tensors of one synthetic head.

    Attributes:
        query: (L, E) with L = n.
        key: (S, E) with S = n + 1 when there is a sink (key 0), else n.
        value: (S, Ev).
        gate_input: (L, D) the tokens' hidden states fed to the output gate.
        gate_weight: (D, G) the gate projection.
        sink: whether key 0 is the sink.
    """

    query: Tensor
    key: Tensor
    value: Tensor
    gate_input: Tensor
    gate_weight: Tensor
    sink: bool


def _noise_scale(spread: float, dim: int) -> float:
    """Entry std ``a`` so that ``a^2 z.g / sqrt(dim)`` over ``dim - 1`` coordinates has std ``spread``."""
    return math.sqrt(spread * math.sqrt(dim / (dim - 1)))


def sink_sequence(spec: SinkSpec, device: torch.device | str = "cpu") -> SinkSequence:
    """Queries, keys and values of the synthetic head described by ``spec`` (module docstring).

    The random parts depend only on ``n`` and ``seed`` (CPU draws, on any device), so moving a
    strength, content or spread slider moves the same tokens. Tensors are in
    ``spec.dtype`` on ``device``.
    """
    spec.validate()
    dev = torch.device(device)
    dtype = DTYPES[spec.dtype]
    n, E = int(spec.n), HEAD_DIM
    g = make_generator(spec.seed)  # CPU: the same tokens on every device
    sample = sampling_dtype(dtype)

    def draw(*shape: int) -> Tensor:
        return randn(*shape, generator=g, device=dev, dtype=sample)

    z, keys_noise, values = draw(n, E - 1), draw(n, E - 1), draw(n, E)
    v_sink, x, w_g = draw(1, E), draw(n, E), draw(E, E)
    a = _noise_scale(spec.spread, E)
    q = torch.cat([torch.full((n, 1), math.sqrt(E), device=dev, dtype=sample), a * z], dim=1)
    k = torch.cat([torch.full((n, 1), float(spec.content), device=dev, dtype=sample),
                   a * keys_noise], dim=1)  # (n, E)
    v = values
    if spec.sink:
        k_sink = torch.zeros(1, E, device=dev, dtype=sample)
        k_sink[0, 0] = float(spec.strength)
        k = torch.cat([k_sink, k], dim=0)  # (n + 1, E)
        v_sink = v_sink / v_sink.pow(2).mean().sqrt()  # RMS exactly 1, then scaled
        v = torch.cat([spec.sink_value * v_sink, values], dim=0)  # (n + 1, Ev)
    w = w_g if spec.gate == "elementwise" else w_g[:, :1]  # (D, G)
    return SinkSequence(query=q.to(dtype), key=k.to(dtype), value=v.to(dtype),
                        gate_input=x.to(dtype), gate_weight=w.to(dtype), sink=spec.sink)


# ---------------------------------------------------------------------------- normalisers


def sink_column_softmax(scores: Tensor, sink_logit: float | Tensor, allowed: Tensor | None = None) -> Tensor:
    """The gpt-oss form, kept as a plain reference: append a column of logit b, softmax, drop it.

    ``scores`` (..., L, S); ``sink_logit`` a float or broadcastable to (..., L, 1), e.g.
    (H, 1, 1) per head; ``allowed`` (..., L, S) boolean. Returns weights (..., L, S)
    that sum to less than 1. :class:`~attncore.normalizers.SoftmaxWithSink` computes
    the same thing without building the extra column; the tests hold them equal.
    """
    x = scores if allowed is None else scores.masked_fill(~allowed, float("-inf"))
    b = torch.as_tensor(sink_logit, dtype=x.dtype, device=x.device)
    col = b.expand(*x.shape[:-1], 1) if b.dim() else torch.full((*x.shape[:-1], 1), float(b),
                                                                 dtype=x.dtype, device=x.device)
    full = torch.cat([x, col], dim=-1)  # (..., L, S + 1)
    return torch.softmax(full, dim=-1)[..., :-1]


def output_gate(x: Tensor, weight: Tensor, bias: float | Tensor = 0.0) -> Tensor:
    """The output gate of gated attention: ``sigmoid(x W / sqrt(D) + b)``.

    ``x`` (..., L, D) the tokens' hidden states, ``weight`` (D, G) with ``G = Ev``
    (elementwise gate) or 1 (headwise gate). Returns (..., L, G) in (0, 1).
    Gated attention (Qiu et al. 2025, "Gated Attention for Large Language
    Models", used in Qwen3-Next) multiplies the attention output by it.
    """
    if x.shape[-1] != weight.shape[0]:
        raise AttnInputError(f"the gate weight needs {x.shape[-1]} input rows; got {weight.shape[0]}.")
    return torch.sigmoid(x @ weight / math.sqrt(x.shape[-1]) + bias)  # (..., L, G)


def gated_attention(
    query: Tensor, key: Tensor, value: Tensor, gate: Tensor, **kwargs: object
) -> tuple[Tensor, Tensor]:
    """Softmax attention whose output is multiplied by ``gate`` (..., L, G), G = Ev or 1.

    ``query`` (..., L, E), ``key`` (..., S, E), ``value`` (..., S, Ev); ``kwargs`` go to
    :func:`attncore.attention.attention_stages`. Returns ``(output (..., L, Ev),
    weights (..., L, S))``: the weights are untouched softmax weights (rows sum to 1);
    the gate scales what the head writes, per query.
    """
    st = attention_stages(query, key, value, **kwargs)  # type: ignore[arg-type]
    if gate.shape[-1] not in (1, st.output.shape[-1]):
        raise AttnInputError("the gate must have one column or one per value dim.")
    return st.output * gate.to(st.output.dtype), st.weights


def output_rms(output: Tensor) -> Tensor:
    """Root mean square over the value dim: (..., Ev) -> (...). 1 for a standard Gaussian value."""
    return output.pow(2).mean(dim=-1).sqrt()


@dataclass(frozen=True)
class ZooEntry:
    """One normaliser applied to the synthetic head.

    Attributes:
        name: one of :data:`ZOO`.
        weights: (L, S) attention weights (for ``gated``, the softmax weights).
        row_sum: (L,) weight each query spends (for ``gated``: 1).
        sink_weight: (L,) weight on key 0 when it is a sink, else zeros.
        output_rms: (L,) RMS of the output (after the gate for ``gated``).
        gate_mean: (L,) mean gate per query (``gated`` only, else ones).
    """

    name: str
    weights: Tensor
    row_sum: Tensor
    sink_weight: Tensor
    output_rms: Tensor
    gate_mean: Tensor


def _zoo_normalizer(name: str, spec: SinkSpec) -> Normalizer:
    return {"softmax": Softmax(), "softmax1": SoftmaxWithSink(0.0), "gated": Softmax(),
            "sink_logit": SoftmaxWithSink(float(spec.sink_logit)), "sigmoid": Sigmoid(),
            "relu": ReLUNorm()}[name]


def normaliser_zoo(spec: SinkSpec, device: torch.device | str = "cpu",
                   seq: SinkSequence | None = None) -> dict[str, ZooEntry]:
    """The same logits through softmax, softmax1, a sink logit b, sigmoid (b = -log n), ReLU (÷ n) and
    gated softmax.

    Returns one :class:`ZooEntry` per name in :data:`ZOO`, all with ``L = n`` queries
    and ``S`` keys as in :class:`SinkSequence`, on ``device`` in the compute dtype.
    """
    seq = sink_sequence(spec, device) if seq is None else seq
    out: dict[str, ZooEntry] = {}
    for name in ZOO:
        st = attention_stages(seq.query, seq.key, seq.value, normalizer=_zoo_normalizer(name, spec))
        w, o = st.weights, st.output  # (L, S), (L, Ev)
        gate_mean = torch.ones(w.shape[0], dtype=w.dtype, device=w.device)
        if name == "gated":
            gate = output_gate(seq.gate_input.to(o.dtype), seq.gate_weight.to(o.dtype), spec.gate_bias)
            o = o * gate
            gate_mean = gate.mean(dim=-1)
        sink_w = w[:, 0] if seq.sink else torch.zeros_like(gate_mean)
        out[name] = ZooEntry(name=name, weights=w, row_sum=w.sum(-1), sink_weight=sink_w,
                             output_rms=output_rms(o), gate_mean=gate_mean)
    return out


# ---------------------------------------------------------------------------- sweeps


@dataclass(frozen=True)
class SweepResult:
    """Per-query statistics at each point of a sweep.

    Attributes:
        x: (P,) the swept values.
        series: name -> (P, Lq) statistic per point and per query (Lq <= SWEEP_QUERIES).
    """

    x: np.ndarray
    series: dict[str, np.ndarray]

    def mean(self, name: str) -> np.ndarray:
        """(P,) the mean over queries."""
        return self.series[name].mean(axis=1)

    def std(self, name: str) -> np.ndarray:
        """(P,) the spread over queries (population std)."""
        return self.series[name].std(axis=1)


def _check_sweep(spec: SinkSpec, points: int) -> int:
    if not 2 <= points <= 401:
        raise AttnInputError(f"a sweep takes 2 to 401 points; got {points}.")
    lq = min(int(spec.n), SWEEP_QUERIES)
    cells = points * lq * (int(spec.n) + 1)
    check_limit(cells, MAX_SWEEP_CELLS, "points × queries × keys of the sweep",
                "cells (about 256 MB for the stages kept)",
                "Use fewer points or tokens.")
    return lq


def strength_sweep(spec: SinkSpec, strengths: np.ndarray, device: torch.device | str = "cpu") -> SweepResult:
    """Softmax weight on the sink and output RMS as the sink's key strength moves.

    Every point keeps the tokens of ``spec`` (same seed) and changes only the sink
    key; the sink is switched on whatever ``spec.sink`` says. The first
    ``min(n, SWEEP_QUERIES)`` queries are measured. Series: ``sink_weight`` and
    ``output_rms``, each (P, Lq), plus ``output_rms_nosink`` (1, Lq): the same
    queries with no sink token at all.
    """
    spec = replace(spec, sink=True)
    xs = np.asarray(strengths, dtype=np.float64)
    lq = _check_sweep(spec, len(xs))
    seq = sink_sequence(spec, device)
    q = seq.query[:lq]
    keys = seq.key.unsqueeze(0).repeat(len(xs), 1, 1)  # (P, S, E)
    keys[:, 0, 0] = torch.as_tensor(xs, dtype=keys.dtype, device=keys.device)
    st = attention_stages(q.unsqueeze(0), keys, seq.value.unsqueeze(0))  # (P, Lq, S)
    nosink = attention_stages(q, seq.key[1:], seq.value[1:])
    return SweepResult(x=xs, series={
        "sink_weight": st.weights[..., 0].double().cpu().numpy(),
        "output_rms": output_rms(st.output).double().cpu().numpy(),
        "output_rms_nosink": output_rms(nosink.output).double().cpu().numpy()[None, :],
    })


def content_sweep(spec: SinkSpec, contents: np.ndarray, device: torch.device | str = "cpu") -> SweepResult:
    """The "nothing relevant" case: every normaliser as the real keys' logits fall, with no sink token.

    Moves the mean logit ``content`` of the real keys over ``contents`` (the
    noise and the values stay fixed) and measures, per query, the weight each
    normaliser of :data:`ZOO` spends (``mass_<name>``; gated spends 1) and its output
    RMS (``rms_<name>``), for the first ``min(n, SWEEP_QUERIES)`` queries.
    """
    spec = replace(spec, sink=False)
    xs = np.asarray(contents, dtype=np.float64)
    lq = _check_sweep(spec, len(xs))
    seq = sink_sequence(spec, device)
    q = seq.query[:lq].unsqueeze(0)  # (1, Lq, E)
    keys = seq.key.unsqueeze(0).repeat(len(xs), 1, 1)  # (P, n, E)
    keys[:, :, 0] = torch.as_tensor(xs, dtype=keys.dtype, device=keys.device)[:, None]
    gate = output_gate(seq.gate_input[:lq], seq.gate_weight, spec.gate_bias)  # (Lq, G)
    series: dict[str, np.ndarray] = {}
    for name in ZOO:
        st = attention_stages(q, keys, seq.value.unsqueeze(0), normalizer=_zoo_normalizer(name, spec))
        o = st.output * gate.to(st.output.dtype) if name == "gated" else st.output  # (P, Lq, Ev)
        series[f"mass_{name}"] = st.weights.sum(-1).double().cpu().numpy()
        series[f"rms_{name}"] = output_rms(o).double().cpu().numpy()
    return SweepResult(x=xs, series=series)


# ---------------------------------------------------------------------------- sink metric


def _visible(attn: Tensor, allowed: Tensor | None) -> Tensor:
    if allowed is None:
        return torch.ones(attn.shape[-2:], dtype=torch.bool, device=attn.device)
    if allowed.dtype != torch.bool:
        raise AttnInputError("the 'allowed' mask must be boolean (True = the query may see the key).")
    return allowed.to(attn.device)


def sink_scores(attn: Tensor, allowed: Tensor | None = None) -> Tensor:
    """alpha_k: the mean weight that the queries which can see key k give it.

    ``attn`` (..., L, S), ``allowed`` (L, S) or broadcastable to ``attn`` (True = query i
    may see key k; None = every query sees every key, as in an encoder; a causal model
    passes its lower-triangular mask). Returns (..., S). A key no query can see gets 0.
    This is the per-head score of Gu et al. 2024: a head is a sink head for key
    ``k`` when ``alpha_k > eps``.
    """
    if allowed is None:
        return attn.mean(dim=-2)
    vis = _visible(attn, allowed)
    total = (attn * vis).sum(dim=-2)  # (..., S); the mask broadcasts, nothing L x S is copied per head
    count = vis.sum(dim=-2).to(attn.dtype).expand(total.shape)  # (..., S)
    return torch.where(count > 0, total / count.clamp_min(1), torch.zeros_like(total))


def _share(alpha: Tensor, eps: float) -> Tensor:
    if not (math.isfinite(eps) and 0.0 <= eps < 1.0):
        raise AttnInputError(f"the sink threshold eps must lie in [0, 1); got {eps}.")
    return (alpha > eps).to(alpha.dtype).mean(dim=1)  # (N, S)


def sink_head_share(attn: Tensor, eps: float = 0.3, allowed: Tensor | None = None) -> Tensor:
    """Share of heads that are sink heads for each key, per layer.

    ``attn`` (N, H, L, S) -> (N, S): the fraction of the H heads of each layer with
    ``alpha_k > eps`` (:func:`sink_scores`). ``eps`` is 0.3 in Gu et al. 2024.
    """
    if attn.dim() != 4:
        raise AttnInputError(
            f"the sink metric needs attentions (layers, heads, L, S); got {tuple(attn.shape)}.")
    return _share(sink_scores(attn, allowed), eps)  # (N, H, S) -> (N, S)


def category_mass(attn: Tensor, keys: Tensor) -> Tensor:
    """Mean over queries of the weight each query puts on a set of keys.

    ``attn`` (..., L, S), ``keys`` (S,) boolean (True = the key is in the set, e.g.
    [CLS], [SEP] or punctuation). Returns (...), e.g. (N, H) for a whole model.
    """
    if keys.dtype != torch.bool or keys.shape != attn.shape[-1:]:
        raise AttnInputError(f"the key set must be a boolean vector of length {attn.shape[-1]}.")
    # A matrix-vector product with the 0/1 indicator: one BLAS pass, no (..., L, S) temporary.
    return (attn @ keys.to(device=attn.device, dtype=attn.dtype)).mean(dim=-1)  # (..., L) -> (...)


# ---------------------------------------------------------------------------- theory for the zoo


@dataclass(frozen=True)
class ZooTheory:
    """Mean-field predictions for one normaliser of :func:`normaliser_zoo` (floats, NaN = no closed form)."""

    row_sum: float
    sink_weight: float
    output_rms: float


def zoo_theory(spec: SinkSpec) -> dict[str, ZooTheory]:
    """Closed forms (:mod:`attncore.theory`) for every entry of :func:`normaliser_zoo`.

    Real logits are ``content + spread * Z``; the sink (when present) has logit
    ``strength`` and value scale ``sink_value``; sigmoid uses ``b = -log S``;
    ReLU divides by the S keys of the row; the gate's pre-activations are unit Gaussian, so
    it scales the output RMS by ``sqrt(E[σ(b_g + Z)²])``.
    """
    spec.validate()
    n, c, sd, nu = float(spec.n), float(spec.content), float(spec.spread), float(spec.sink_value)
    s = float(spec.strength) if spec.sink else None
    out: dict[str, ZooTheory] = {}
    for name, extra in (("softmax", None), ("softmax1", 0.0), ("sink_logit", float(spec.sink_logit))):
        real = float(T.real_mass_theory(n, c, sd, s, extra))
        sink = float(T.sink_weight_theory(s, n, c, sd, extra)) if s is not None else 0.0
        rms = float(T.softmax_output_rms_theory(n, c, sd, s, extra, nu))
        out[name] = ZooTheory(row_sum=real + sink, sink_weight=sink, output_rms=rms)
    keys = n + (1 if spec.sink else 0)
    bias = -math.log(keys)
    sig_sink = 1.0 / (1.0 + math.exp(-(s + bias))) if s is not None else 0.0
    real_sig = float(T.sigmoid_mass_theory(n, c, sd, bias))
    rms_sig = float(T.sigmoid_output_rms_theory(n, c, sd, bias))
    out["sigmoid"] = ZooTheory(row_sum=real_sig + sig_sink, sink_weight=sig_sink,
                               output_rms=math.sqrt(rms_sig**2 + (sig_sink * nu) ** 2))
    relu_sink = max(s, 0.0) / keys if s is not None else 0.0
    real_relu = float(T.relu_mass_theory(n, c, sd, keys))
    rms_relu = float(T.relu_output_rms_theory(n, c, sd, keys))
    out["relu"] = ZooTheory(row_sum=real_relu + relu_sink, sink_weight=relu_sink,
                            output_rms=math.sqrt(rms_relu**2 + (relu_sink * nu) ** 2))
    soft = out["softmax"]
    out["gated"] = ZooTheory(row_sum=1.0, sink_weight=soft.sink_weight,
                             output_rms=soft.output_rms * float(T.gate_rms_theory(spec.gate_bias)))
    return out


def zoo_content_theory(name: str, spec: SinkSpec, content: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(real mass, output RMS) of zoo entry ``name`` over content levels ``content`` (P,), no sink key.

    The closed forms of :func:`zoo_theory` along the content sweep (:func:`content_sweep`):
    sigmoid with ``b = -log n``, ReLU over n keys, the softmax family with its extra logit (none, 0 for
    softmax1, ``sink_logit``), the gate scaling softmax's output RMS.
    """
    n, sd, x = spec.n, spec.spread, np.asarray(content, dtype=np.float64)
    if name == "sigmoid":
        return np.asarray(T.sigmoid_mass_theory(n, x, sd)), np.asarray(T.sigmoid_output_rms_theory(n, x, sd))
    if name == "relu":
        return np.asarray(T.relu_mass_theory(n, x, sd)), np.asarray(T.relu_output_rms_theory(n, x, sd))
    if name not in ZOO:
        raise AttnInputError(f"unknown normaliser {name!r}; choose one of {', '.join(ZOO)}.")
    extra = {"softmax": None, "gated": None, "softmax1": 0.0, "sink_logit": spec.sink_logit}[name]
    mass = np.asarray(T.real_mass_theory(n, x, sd, extra_logit=extra)) * np.ones_like(x)
    rms = np.asarray(T.softmax_output_rms_theory(n, x, sd, extra_logit=extra)) * np.ones_like(x)
    if name == "gated":
        rms = rms * float(T.gate_rms_theory(spec.gate_bias))
    return mass, rms


# ---------------------------------------------------------------------------- a whole model


def uniform_attention(L: int, causal: bool, device: torch.device | str = "cpu") -> Tensor:
    """(L, L) uniform weights over the keys each query sees: the no-preference baseline."""
    if isinstance(L, bool) or not isinstance(L, int) or L < 1:
        raise AttnInputError(f"L must be a whole number of positions, at least 1; got {L!r}.")
    check_bytes(float(L) * L * 10, f"an ({L:,}, {L:,}) uniform attention map", "Use a shorter text.")
    allowed = torch.ones(L, L, dtype=torch.bool, device=device)
    if causal:
        allowed = allowed.tril()
    w = allowed.to(torch.float32)
    return w / w.sum(dim=-1, keepdim=True)


def uniform_sink_scores(L: int, causal: bool) -> Tensor:
    """alpha_k of :func:`sink_scores` for :func:`uniform_attention`: the score every key gets
    from a head with no preference, (L,) float64.

    Without a mask every query gives every key 1/L. Under the causal mask query ``i`` gives
    ``1/(i+1)`` to each key it sees and key ``k`` is seen by queries ``k .. L-1``, so
    ``alpha_k = (H_L - H_k) / (L - k)`` with ``H_n`` the n-th harmonic number: ``H_L / L``
    for the first key, ``1/L`` for the last.
    """
    if isinstance(L, bool) or not isinstance(L, int) or L < 1:
        raise AttnInputError(f"L must be a whole number of positions, at least 1; got {L!r}.")
    if not causal:
        return torch.full((L,), 1.0 / L, dtype=torch.float64)
    harmonic = torch.cat([torch.zeros(1, dtype=torch.float64),
                          torch.cumsum(1.0 / torch.arange(1, L + 1, dtype=torch.float64), 0)])  # (L + 1,)
    k = torch.arange(L, dtype=torch.float64)
    return (harmonic[L] - harmonic[:L]) / (L - k)


@dataclass(frozen=True)
class SinkReport:
    """Where a model's attention goes, for one text.

    Attributes:
        mass: category name -> (N, H) mean weight a query puts on that key set.
        uniform: category name -> the same mass under uniform attention (the baseline).
        alpha: (N, H, L) sink score alpha_k of every head for every key.
        share: (N, L) share of each layer's heads that are sink heads for key k.
        eps: the threshold used.
    """

    mass: dict[str, Tensor]
    uniform: dict[str, float]
    alpha: Tensor
    share: Tensor
    eps: float

    def sink_heads(self, key: int = 0) -> int:
        """How many heads (all layers) have alpha_key > eps."""
        return int((self.alpha[..., key] > self.eps).sum())


def sink_report(attn: Tensor, categories: dict[str, Tensor], *, causal: bool = False,
                eps: float = 0.3) -> SinkReport:
    """Category masses, their uniform baselines and the sink metric of attentions (N, H, L, L).

    ``categories`` maps a name to an (L,) boolean key set (e.g. [CLS], [SEP],
    punctuation). ``causal`` restricts each query to keys at or before it.
    """
    if attn.dim() != 4 or attn.shape[-1] != attn.shape[-2]:
        raise AttnInputError(f"attentions must be (layers, heads, L, L); got {tuple(attn.shape)}.")
    L = attn.shape[-1]
    allowed = torch.ones(L, L, dtype=torch.bool, device=attn.device).tril() if causal else None
    uni = uniform_attention(L, causal, attn.device)
    alpha = sink_scores(attn, allowed)  # (N, H, L), one pass over the maps
    return SinkReport(
        mass={k: category_mass(attn, m) for k, m in categories.items()},
        uniform={k: float(category_mass(uni, m)) for k, m in categories.items()},
        alpha=alpha,
        share=_share(alpha, eps),
        eps=float(eps),
    )
