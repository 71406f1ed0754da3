"""The sources' 1/sqrt(E) on a real decoder: how its scaled logits spread, and what changing the scale does.

Shape legend: ``N`` layers, ``H`` query heads, ``Hkv`` key/value heads, ``L`` tokens (queries and keys), ``E``
head dim, ``C`` scale factors.

The seed's argument for dividing by sqrt(E): with q and k of independent unit-variance entries,
``Var(q . k) = E`` (:func:`attncore.theory.dot_variance`), so ``q . k / sqrt(E)`` is about N(0, 1) and the
softmax neither saturates nor flattens. :func:`logit_spread` holds that law against a trained model: per
layer x head, over the causal entries (key ``j <= i``) of one text, the scaled logits ``s_ij = q_i . k_j *
scaling`` (``scaling`` the attention module's own, ``E^-1/2`` for Llama/Qwen2/SmolLM2; q and k after rotary,
as the scores see them): their mean and standard deviation, the gap between each row's largest and second
logit, the share of rows whose largest weight passes 0.9 and 0.99, and each row's softmax Jacobian norm
(:func:`attncore.gradients.jacobian_frobenius`, the Saturation page's own). Rows are queries ``i >= 1`` (query
0 sees one key: weight 1 whatever its logit).

:func:`scaled_run` is the intervention: every head's logits multiplied by ``c`` at inference (the model's
``self_attn.scaling`` set to ``c / sqrt(E)`` for the pass and restored after it), one forward per ``c``. It is
equivalent to running the model at softmax temperature ``1 / c`` in every head; ``c = sqrt(E)`` (8 for
SmolLM2's E = 64) is attention without its 1/sqrt(E). It measures the trained model at inference; it says
nothing about training without the scale, the seed's other claim (gradients stall).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from attncore.budget import check_bytes
from attncore.decoder.probe import (
    MAX_DECODER_TOKENS,
    _layers,
    check_ids,
    decoder_shape,
    forward_bytes,
    layer_attention,
)
from attncore.decoder.sinks import GU_EPS
from attncore.errors import AttnInputError
from attncore.gradients import jacobian_frobenius
from attncore.models.capture import row_entropy
from attncore.models.modules import attention_implementation, exclusive, hooked_run
from attncore.stats import entropy
from attncore.synthetic import make_generator, randn

__all__ = [
    "FACTORS",
    "STAT_NAMES",
    "LEVELS",
    "MAX_FACTOR",
    "LogitSpread",
    "ScaledRun",
    "gaussian_rows",
    "logit_spread",
    "row_statistics",
    "scaled_logits",
    "scaled_run",
    "scaled_runs",
    "scaling",
    "spread_bytes",
]

FACTORS: tuple[float, ...] = (0.125, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0)
LEVELS: tuple[float, float] = (0.9, 0.99)  # a row is saturated when its largest weight passes the level
MAX_FACTOR = 64.0


# ----------------------------------------------------------------------------- statistics of rows


def row_statistics(s: Tensor) -> dict[str, Tensor]:
    """Statistics of causal logit rows: ``s`` (H, L, L) scaled logits (entries above the diagonal ignored).

    Returns (H,) tensors in s's dtype: ``mean`` and ``std`` (population) of the causal entries ``j <= i``
    (all L (L + 1) / 2 of them), and over the rows ``i >= 1``: ``gap`` the mean of (largest - second largest
    logit), ``gap_max`` its largest value, ``above90`` / ``above99`` the share of rows whose largest softmax
    weight is above 0.9 / 0.99, ``max_weight`` the mean largest weight, ``jac`` the mean
    ``||diag(p) - p p^T||_F``, ``entropy`` the mean row entropy (nats).
    """
    H, L, _ = s.shape
    if L < 2:
        raise AttnInputError("the logit statistics need at least 2 tokens.")
    causal = torch.ones(L, L, dtype=torch.bool, device=s.device).tril()  # (L, L)
    count = L * (L + 1) / 2
    sm = torch.where(causal, s, torch.zeros((), dtype=s.dtype, device=s.device))  # (H, L, L)
    mean = sm.sum(dim=(-2, -1)) / count  # (H,)
    dev = torch.where(causal, s - mean[:, None, None], torch.zeros((), dtype=s.dtype, device=s.device))
    std = (dev.square().sum(dim=(-2, -1)) / count).sqrt()  # (H,)
    masked = s.masked_fill(~causal, -math.inf)[:, 1:]  # (H, L - 1, L): rows with at least 2 keys
    top2 = masked.topk(2, dim=-1).values  # (H, L - 1, 2)
    gap = top2[..., 0] - top2[..., 1]  # (H, L - 1)
    p = torch.softmax(masked, dim=-1)  # (H, L - 1, L)
    mw = p.amax(dim=-1)  # (H, L - 1)
    return {
        "mean": mean, "std": std, "gap": gap.mean(dim=-1), "gap_max": gap.amax(dim=-1),
        "above90": (mw > LEVELS[0]).to(s.dtype).mean(dim=-1),
        "above99": (mw > LEVELS[1]).to(s.dtype).mean(dim=-1),
        "max_weight": mw.mean(dim=-1), "jac": jacobian_frobenius(p).mean(dim=-1),
        "entropy": entropy(p).mean(dim=-1),
    }


STAT_NAMES: tuple[str, ...] = ("mean", "std", "gap", "gap_max", "above90", "above99", "max_weight", "jac",
                               "entropy")


def gaussian_rows(sigmas: Sequence[float], L: int, *, heads: int = 4, seed: int = 0) -> dict[str, Tensor]:
    """The seed's law as a prediction: :func:`row_statistics` of causal (L, L) logits drawn i.i.d. from
    N(0, sigma^2), ``heads`` draws per sigma (the same standard-normal draws, scaled, for every sigma),
    float64.

    Returns name -> (P,) means over the draws, one per sigma. sigma = 1 is the seed's unit-variance scaled
    logit; sigma = c is that law with every logit times c (the intervention's prediction).
    """
    sig = [float(x) for x in sigmas]
    if not sig or not all(math.isfinite(x) and x >= 0 for x in sig):
        raise AttnInputError("the logit scales must be finite and non-negative.")
    if not 2 <= int(L) <= MAX_DECODER_TOKENS or not 1 <= int(heads) <= 64:
        raise AttnInputError(f"L must lie in [2, {MAX_DECODER_TOKENS}] and heads in [1, 64].")
    check_bytes(8.0 * 16 * int(heads) * int(L) ** 2, f"the Gaussian rows of {int(L):,} keys",
                "Use fewer tokens.")
    z = randn(int(heads), int(L), int(L), generator=make_generator(seed), dtype=torch.float64)  # (h, L, L)
    rows = [row_statistics(z * x) for x in sig]
    return {n: torch.stack([r[n].mean() for r in rows]) for n in STAT_NAMES}  # (P,) each


@dataclass(frozen=True)
class LogitSpread:
    """The scaled logits of every head on one text (float64 on the CPU).

    Attributes:
        length: L.
        head_dim: E.
        scale: the model's own scaling of q . k (``E^-1/2``).
        stats: name -> (N, H), the names of :func:`row_statistics`.
    """

    length: int
    head_dim: int
    scale: float
    stats: dict[str, Tensor]

    def __getitem__(self, name: str) -> Tensor:
        return self.stats[name]


def spread_bytes(shape: Any, L: int) -> float:
    """Peak bytes of :func:`logit_spread` at L tokens: a pass without weights
    (:func:`~attncore.decoder.probe.forward_bytes`) and one layer's logits with the statistics' temporaries
    (about 14 (H, L, L) float32 tensors: the logits, the masked copies, the softmax and the Jacobian norm's
    prefix sums)."""
    return forward_bytes(shape, L, weights=False) + 4.0 * 14 * shape.heads * L * L


def scaled_logits(q: Tensor, k: Tensor, scale: float) -> Tensor:
    """``q`` (H, L, E), ``k`` (Hkv, L, E) -> (H, L, L) ``q k^T * scale``, each key head shared by H / Hkv
    query heads (grouped-query attention, consecutive query heads per key head as in transformers)."""
    k = k.repeat_interleave(q.shape[0] // k.shape[0], dim=0)  # (H, L, E)
    return (q @ k.transpose(-1, -2)) * scale  # (H, L, L)


def logit_spread(model: Any, ids: Tensor) -> LogitSpread:
    """Per layer x head statistics of the scaled logits q . k * scaling of ``ids`` (1, L), one causal pass.

    q and k are rebuilt in a pre-hook of each layer's attention from its input, with the family's own
    ``apply_rotary_pos_emb`` (as :func:`attncore.decoder.probe.layer_qkv`); the statistics are
    :func:`row_statistics` in the model's dtype (float32 at least), kept as float64.
    """
    ids, shape, _, rotary = layer_attention(model, ids, 0)
    L = int(ids.shape[1])
    check_bytes(spread_bytes(shape, L), f"the logit statistics of {L:,} tokens", "Use a shorter text.")
    layers = _layers(model)
    got: list[dict[str, Tensor] | None] = [None] * shape.layers
    scales: list[float] = []

    def pre(i: int, attn: Any) -> Callable[..., None]:
        def hook(_mod: Any, args: Any, kwargs: dict[str, Any]) -> None:
            x = kwargs.get("hidden_states", args[0] if args else None)
            cos, sin = kwargs["position_embeddings"]
            q = attn.q_proj(x).view(1, L, shape.heads, shape.head_dim).transpose(1, 2)  # (1, H, L, E)
            k = attn.k_proj(x).view(1, L, shape.kv_heads, shape.head_dim).transpose(1, 2)  # (1, Hkv, L, E)
            q, k = rotary(q, k, cos, sin)
            dt = torch.promote_types(q.dtype, torch.float32)
            s = scaled_logits(q[0].to(dt), k[0].to(dt), float(attn.scaling))  # (H, L, L)
            got[i] = {n: v.detach().to(torch.float64).cpu() for n, v in row_statistics(s).items()}
        return hook

    handles: list[Any] = []
    with exclusive(model), hooked_run("the model", handles):
        for i, layer in enumerate(layers):
            scales.append(float(layer.self_attn.scaling))
            handles.append(layer.self_attn.register_forward_pre_hook(pre(i, layer.self_attn),
                                                                     with_kwargs=True))
        with torch.inference_mode():
            model(input_ids=ids.to(next(model.parameters()).device), use_cache=False)
    stats = {n: torch.stack([g[n] for g in got if g is not None]) for n in STAT_NAMES}  # (N, H) each
    return LogitSpread(length=L, head_dim=shape.head_dim, scale=scales[0], stats=stats)


# ----------------------------------------------------------------------------- the intervention


@contextmanager
def scaling(model: Any, factor: float) -> Iterator[list[float]]:
    """Every layer's ``self_attn.scaling`` multiplied by ``factor`` for the block (holding the model
    alone), restored however the block ends. Yields the original scalings."""
    f = float(factor)
    if not (math.isfinite(f) and 0 < f <= MAX_FACTOR):
        raise AttnInputError(f"the scale factor must lie in (0, {MAX_FACTOR:g}]; got {factor!r}.")
    attns = [layer.self_attn for layer in _layers(model)]
    if not all(isinstance(getattr(a, "scaling", None), float | int) for a in attns):
        raise AttnInputError("this model's attention has no numeric `scaling` to change.")
    with exclusive(model):
        old = [float(a.scaling) for a in attns]
        try:
            for a, s in zip(attns, old, strict=True):
                a.scaling = s * f
            yield old
        finally:
            for a, s in zip(attns, old, strict=True):
                a.scaling = s


@dataclass(frozen=True)
class ScaledRun:
    """One forward pass with every head's logits multiplied by ``factor`` (float32 on the CPU).

    Attributes:
        factor: c.
        nll: (L - 1,) negative log-likelihood of token i + 1 given tokens 0..i (nats).
        entropy: (N, H) mean entropy of the rows i >= 1 (nats).
        first_score: (N, H) mean weight on the first token over all L queries (Gu et al.'s score, as
            :class:`attncore.decoder.sinks.DecoderSinks`); a sink head has it above ``eps``.
        above90, above99: (N, H) share of rows i >= 1 whose largest weight is above 0.9 / 0.99.
        eps: the sink-head threshold.
        seconds: the pass's wall time.
    """

    factor: float
    nll: Tensor
    entropy: Tensor
    first_score: Tensor
    above90: Tensor
    above99: Tensor
    eps: float
    seconds: float

    @property
    def loss(self) -> float:
        """Mean nll, nats per token."""
        return float(self.nll.double().mean())

    @property
    def perplexity(self) -> float:
        """exp(mean nll)."""
        return math.exp(self.loss)

    @property
    def mean_entropy(self) -> float:
        """Mean over heads of each head's mean row entropy (nats)."""
        return float(self.entropy.double().mean())

    @property
    def sink_share(self) -> float:
        """Share of the N x H heads with a first-token score above eps."""
        return float((self.first_score > self.eps).double().mean())

    @property
    def saturated90(self) -> float:
        """Share of all rows i >= 1 (every head) whose largest weight is above 0.9."""
        return float(self.above90.double().mean())

    @property
    def saturated99(self) -> float:
        """Share of all rows i >= 1 (every head) whose largest weight is above 0.99."""
        return float(self.above99.double().mean())


def scaled_run(model: Any, ids: Tensor, factor: float, *, eps: float = GU_EPS) -> ScaledRun:
    """One eager forward of ``ids`` (1, L) with every head's logits times ``factor``; its loss and per-head
    summaries of the weights (entropy, first-token score, saturated rows), read in a hook on each layer's
    attention (one layer's (H, L, L) weights at a time). Memory is checked first."""
    ids = check_ids(ids, model)
    shape = decoder_shape(model)
    L = int(ids.shape[1])
    check_bytes(forward_bytes(shape, L), f"a {L:,}-token pass of the decoder", "Use a shorter text.")
    N = shape.layers
    keep: dict[str, list[Tensor | None]] = {k: [None] * N for k in ("entropy", "first", "a90", "a99")}

    def hook(i: int) -> Callable[..., None]:
        def run(_mod: Any, _args: Any, out: Any) -> None:
            w = out[1] if isinstance(out, tuple) and len(out) > 1 else None
            if w is None:
                raise AttnInputError("the model returned no attention weights (eager attention is needed).")
            w = w[0].float()  # (H, L, L)
            ent, _ = row_entropy(w, causal=True)  # (H, L)
            mw = w[:, 1:].amax(dim=-1)  # (H, L - 1)
            keep["entropy"][i] = ent[:, 1:].mean(dim=-1).cpu()
            keep["first"][i] = w[..., 0].mean(dim=-1).cpu()
            keep["a90"][i] = (mw > LEVELS[0]).float().mean(dim=-1).cpu()
            keep["a99"][i] = (mw > LEVELS[1]).float().mean(dim=-1).cpu()
        return run

    dev = next(model.parameters()).device
    handles: list[Any] = []
    t0 = time.perf_counter()
    with scaling(model, factor), attention_implementation(model, "eager"), hooked_run("the model", handles):
        for i, layer in enumerate(_layers(model)):
            handles.append(layer.self_attn.register_forward_hook(hook(i)))
        with torch.inference_mode():
            out = model(input_ids=ids.to(dev), use_cache=False)
            logits = out.logits[0, :-1].float()  # (L - 1, V)
            nll = torch.nn.functional.cross_entropy(logits, ids[0, 1:].to(dev), reduction="none").cpu()
    k = {n: torch.stack([t for t in v if t is not None]) for n, v in keep.items()}  # (N, H) each
    return ScaledRun(factor=float(factor), nll=nll, entropy=k["entropy"], first_score=k["first"],
                     above90=k["a90"], above99=k["a99"], eps=float(eps), seconds=time.perf_counter() - t0)


def scaled_runs(model: Any, ids: Tensor, factors: Sequence[float] = FACTORS, *, eps: float = GU_EPS,
                progress: Callable[[int, int, ScaledRun], None] | None = None,
                cancel: Callable[[], bool] | None = None) -> tuple[ScaledRun, ...]:
    """:func:`scaled_run` for each factor in order; ``progress(done, total, run)`` after each; stops before
    the next factor when ``cancel()`` is True and returns the runs finished so far."""
    if not factors or len(factors) > 16:
        raise AttnInputError(f"choose 1 to 16 scale factors; got {len(factors)}.")
    done: list[ScaledRun] = []
    for c in factors:
        if cancel is not None and cancel():
            break
        done.append(scaled_run(model, ids, c, eps=eps))
        if progress is not None:
            progress(len(done), len(factors), done[-1])
    return tuple(done)
