"""Attention sinks in a real decoder: sink heads, what else draws weight, value drain, massive activations.

Shape legend: ``N`` layers, ``H`` query heads, ``Hkv`` key/value heads, ``L`` tokens, ``D`` residual
width, ``K`` dims reported, ``P`` variants.

* Gu et al. 2024 ("When Attention Sink Emerges in Language Models"): a head's first-token score is the
  mean weight the queries give the first token; the head is a *sink head* above ``eps = 0.3``; they
  measure at 64 tokens.
* What else draws weight: with the first token taken out of every query's weights (re-summed to 1 over
  keys 1..i), the mean score of each kind of token (line breaks, punctuation, English function words,
  other words) against uniform attention over the same keys, and the keys that draw most (the secondary
  attractors). Taking the first token out matters: a sink that takes most of each row pushes every other
  key below uniform attention's weight by construction.
* Value-state drain: the sink token's value vector is small next to the others' (its weight adds
  little to the output).
* Massive activations (Sun et al. 2024, "Massive Activations in Large Language Models"): a few residual
  dimensions of the first token grow to values orders of magnitude above the others' and stay there.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from attncore.decoder.probe import DecoderPass, check_ids, decoder_pass
from attncore.errors import AttnInputError

__all__ = [
    "FUNCTION_WORDS",
    "GU_EPS",
    "GU_TOKENS",
    "KINDS",
    "KIND_LABELS",
    "Attractor",
    "DecoderSinks",
    "SinkVariant",
    "decoder_sinks",
    "massive_dims",
    "ranked_keys",
    "sink_variants",
    "token_kind",
    "uniform_rest_alpha",
    "value_drain",
]

GU_EPS = 0.3
GU_TOKENS = 64
KINDS: tuple[str, ...] = ("newline", "punctuation", "function", "word")
KIND_LABELS: dict[str, str] = {"newline": "line breaks", "punctuation": "punctuation",
                               "function": "function words", "word": "other words"}
# English function words (closed classes): articles and determiners, pronouns and possessives, prepositions,
# conjunctions, auxiliary and modal verbs, and the particles "to", "not", "there". A token is one when its
# display form (the token decoded alone), stripped of spaces and lower-cased, is in this list.
_FUNCTION_WORDS = """
a an the this that these those some any no every each either neither all both
i me my mine we us our ours you your yours he him his she her hers it its they them their theirs
myself yourself himself herself itself ourselves themselves who whom whose which what
of in on at to for from by with about into onto upon over under after before between through during
without within against among around across toward towards off out up down than as like
and or but nor so yet if because though although while when where whether then
is am are was were be been being have has had having do does did done
will would shall should can could may might must
not there
"""
FUNCTION_WORDS: frozenset[str] = frozenset(_FUNCTION_WORDS.split())


def token_kind(text: str) -> str:
    """'newline' (contains a line break), 'punctuation' (no letter or digit), 'function' (its display form,
    stripped and lower-cased, is in :data:`FUNCTION_WORDS`) or 'word'."""
    if "\n" in text:
        return "newline"
    if not any(ch.isalnum() for ch in text):
        return "punctuation"
    if text.strip().lower() in FUNCTION_WORDS:
        return "function"
    return "word"


@dataclass(frozen=True)
class Attractor:
    """A key other than the first that draws weight: position, text, kind, mean score over heads (Gu et
    al.'s alpha_k) and ``rest_score``, the same with the first token taken out of the weights (what it is
    ranked by)."""

    position: int
    text: str
    kind: str
    score: float
    rest_score: float


@dataclass(frozen=True)
class DecoderSinks:
    """Sink measurements of one text.

    Attributes:
        length: L.
        eps: the sink-head threshold.
        first_score: (N, H) mean weight on the first token over the queries (Gu et al.'s score).
        share: (N,) share of each layer's heads with ``first_score > eps``.
        kind_score: kind -> mean over heads and over the ranked keys of that kind (:func:`ranked_keys`:
            neither the first token nor the late keys) of the key's score with the first token taken out
            (``DecoderPass.alpha_rest``); ``kind_uniform`` the same under uniform causal attention over
            keys 1..i (:func:`uniform_rest_alpha`).
        attractors: the ranked keys with the highest mean ``rest_score`` over all heads (the secondary
            attractors), strongest first.
        value_ratio: (N, Hkv) the first token's value norm over the median of the other tokens'.
        first_norm: (N + 1,) the first token's residual norm after the embeddings and each layer.
        rest_norm: (N + 1,) the median residual norm of the other tokens.
        top_dims: (N + 1, K) the first token's K largest |residual| dims per layer;
            ``top_values`` their values.
        rest_top_abs: (N + 1, K) |mean| of the other tokens' residuals in the same dims.
    """

    length: int
    eps: float
    first_score: Tensor
    share: Tensor
    kind_score: dict[str, float]
    kind_uniform: dict[str, float]
    attractors: tuple[Attractor, ...]
    value_ratio: Tensor
    first_norm: Tensor
    rest_norm: Tensor
    top_dims: Tensor
    top_values: Tensor
    rest_top_abs: Tensor

    @property
    def sink_heads(self) -> int:
        """Heads (all layers) with a first-token score above eps."""
        return int((self.first_score > self.eps).sum())

    @property
    def heads(self) -> int:
        """N x H."""
        return int(self.first_score.numel())

    @property
    def lead(self) -> float:
        """How far the strongest secondary attractor stands out: its ``rest_score`` over the runner-up's
        (NaN with fewer than two attractors)."""
        if len(self.attractors) < 2 or not self.attractors[1].rest_score > 0:
            return float("nan")
        return self.attractors[0].rest_score / self.attractors[1].rest_score

    @property
    def peak_layer(self) -> int:
        """The residual point (0 = embeddings, i = after layer i) where the first token's norm is largest."""
        return int(self.first_norm.argmax())


def _uniform_alpha(L: int) -> Tensor:
    """alpha_k of uniform causal attention: (H_L - H_k) / (L - k), float64 (L,)."""
    harmonic = torch.cat([torch.zeros(1, dtype=torch.float64),
                          torch.cumsum(1.0 / torch.arange(1, L + 1, dtype=torch.float64), 0)])  # (L + 1,)
    k = torch.arange(L, dtype=torch.float64)
    return (harmonic[L] - harmonic[:L]) / (L - k)


def uniform_rest_alpha(L: int) -> Tensor:
    """(L,) float64: the mean weight key k gets, over the queries that see it, from uniform causal attention
    with the first token taken out (query i >= 1 gives 1/i to each of keys 1..i): ``(H_{L-1} - H_{k-1}) /
    (L - k)`` for k >= 1 (``uniform_sink_scores(L - 1)`` shifted by one key); NaN for key 0."""
    out = torch.full((L,), float("nan"), dtype=torch.float64)
    if L >= 2:
        out[1:] = _uniform_alpha(L - 1)
    return out


def ranked_keys(L: int) -> range:
    """The keys whose scores are compared: 1..last-1, those that at least an eighth of the queries see
    (a late key's score averages few queries: the last key's, one); at least key 1."""
    return range(1, max(2, L - max(1, L // 8)))


def value_drain(value_norm: Tensor) -> Tensor:
    """(N, Hkv, L) value norms -> (N, Hkv) the first token's norm over the median of the others'."""
    rest = value_norm[..., 1:].median(dim=-1).values
    return value_norm[..., 0] / rest.clamp_min(1e-12)


def massive_dims(first_residual: Tensor, k: int) -> tuple[Tensor, Tensor]:
    """(N + 1, D) first-token residuals -> the K dims with the largest |value| per row and their values."""
    if not 1 <= k <= first_residual.shape[-1]:
        raise AttnInputError(f"the number of dims must lie in [1, {first_residual.shape[-1]}]; got {k}.")
    idx = first_residual.abs().topk(k, dim=-1).indices  # (N + 1, K)
    return idx, first_residual.gather(-1, idx)


def decoder_sinks(model: Any, ids: Tensor, texts: Sequence[str], *, eps: float = GU_EPS, top: int = 4,
                  attractors: int = 8, run: DecoderPass | None = None) -> DecoderSinks:
    """Sink heads, attractor tokens, value drain and massive activations of ``ids`` (1, L) in one pass.

    ``texts`` (L,) are the tokens as text (for their kinds). ``run`` reuses a pass already made.
    """
    ids = check_ids(ids, model)
    L = int(ids.shape[1])
    if len(texts) != L:
        raise AttnInputError(f"{len(texts)} token texts for {L} tokens.")
    if not 0.0 <= eps < 1.0:
        raise AttnInputError(f"the sink threshold must lie in [0, 1); got {eps}.")
    p = run if run is not None else decoder_pass(model, ids)
    if p.alpha is None or p.first_weight is None or p.alpha_rest is None:
        raise AttnInputError("the pass kept no weights; run it with weights=True.")
    first = p.alpha[..., 0]  # (N, H)
    share = (first > eps).float().mean(dim=-1)  # (N,)
    mean_alpha = p.alpha.mean(dim=(0, 1))  # (L,)
    mean_rest = p.alpha_rest.double().mean(dim=(0, 1))  # (L,); NaN at key 0
    uni = uniform_rest_alpha(L)
    kinds = [token_kind(t) for t in texts]
    keys = ranked_keys(L)
    kind_score: dict[str, float] = {}
    kind_uniform: dict[str, float] = {}
    for kind in KINDS:
        sel = [i for i in keys if kinds[i] == kind]
        if sel:
            kind_score[kind] = float(mean_rest[sel].mean())
            kind_uniform[kind] = float(uni[sel].mean())
    order = mean_rest[keys.start:keys.stop].argsort(descending=True)[:attractors] + keys.start
    attr = tuple(Attractor(int(i), texts[int(i)], kinds[int(i)], float(mean_alpha[int(i)]),
                           float(mean_rest[int(i)])) for i in order.tolist())
    rest_norm = p.residual_norm[:, 1:].median(dim=-1).values  # (N + 1,); L >= 2 (check_ids)
    kk = min(top, p.first_residual.shape[-1])
    dims, vals = massive_dims(p.first_residual, kk)
    rest_abs = p.rest_residual_mean.abs().gather(-1, dims)  # (N + 1, K): |mean| of the others there
    return DecoderSinks(length=L, eps=float(eps), first_score=first, share=share, kind_score=kind_score,
                        kind_uniform=kind_uniform, attractors=attr, value_ratio=value_drain(p.value_norm),
                        first_norm=p.residual_norm[:, 0].clone(), rest_norm=rest_norm, top_dims=dims,
                        top_values=vals, rest_top_abs=rest_abs)


@dataclass(frozen=True)
class SinkVariant:
    """The first-token score of one variant of the text: its name, its first token, the scores (N, H)."""

    name: str
    first_text: str
    first_score: Tensor
    eps: float

    @property
    def sink_heads(self) -> int:
        """Heads with a first-token score above eps."""
        return int((self.first_score > self.eps).sum())

    @property
    def mean_score(self) -> float:
        """Mean first-token score over all heads."""
        return float(self.first_score.mean())


def sink_variants(model: Any, ids: Tensor, texts: Sequence[str], *, other_first: int, other_text: str = "",
                  shift: int = 3,
                  length: int = GU_TOKENS, eps: float = GU_EPS) -> tuple[SinkVariant, ...]:
    """Does content matter? First-token scores (N, H) on ``length`` tokens for three variants.

    "as written" (tokens 0..length-1), "another first token" (token 0 replaced by ``other_first``) and
    "shifted by s" (tokens s..s+length-1: the first token is a different, mid-text token). ``ids`` (1, T)
    needs ``T >= length + shift`` (later tokens are not read).
    """
    ids = check_ids(ids[..., : length + max(shift, 0)], model)
    T = int(ids.shape[1])
    if not shift >= 1 or length + shift > T or length < 2:
        raise AttnInputError(f"the variants need {length} + {shift} tokens and a shift >= 1; "
                             f"the text has {T}.")
    base = ids[:, :length]
    swapped = base.clone()
    swapped[0, 0] = int(other_first)
    shifted = ids[:, shift:shift + length]
    out = []
    for name, x, first in (("as written", base, texts[0]), ("another first token", swapped, other_text),
                           (f"shifted by {shift} tokens", shifted, texts[shift])):
        p = decoder_pass(model, x)
        assert p.alpha is not None
        out.append(SinkVariant(name=name, first_text=first, first_score=p.alpha[..., 0],
                               eps=float(eps)))
    return tuple(out)
