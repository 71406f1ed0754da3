"""Why a rotary head attends where it does: one query's logits taken apart, exactly.

Shape legend: ``L`` queries, ``S`` keys (a decoder reads one text, ``S = L``), ``n`` keys the query sees
(``n = i + 1`` under the causal mask), ``E`` head dim, ``P = E / 2`` rotary frequency pairs.

For query ``i`` of one head and every key ``j <= i``, the scaled logit ``s_ij = q_i . k_j / sqrt(E)``
(``q``, ``k`` after rotary positions, as the scores see them) is written three ways, each a sum that
equals ``s_ij`` exactly in float64 (rounding only):

(a) **norm against angle**: ``s_ij = |q_i| |k_j| cos(theta_ij) / sqrt(E)``. Against a reference key ``r``
    (the median key by logit among keys 1..i), the difference ``s_ij - s_ir`` splits exactly into a
    norm part ``(|k_j| - |k_r|)(c_j + c_r)/2`` and an angle part ``(c_j - c_r)(|k_j| + |k_r|)/2`` (both times
    ``|q_i| / sqrt(E)``; ``c`` the cosines): the symmetric (Shapley) split of a product's change.
(b) **by frequency pair**: ``s_ij = sum_p (q_a k_a + q_b k_b) / sqrt(E)`` over the model's rotary pairs
    ``(a, b)``. Hugging Face's Llama/Qwen2 ``rotate_half`` pairs dim ``p`` with ``p + E/2`` (not adjacent
    dims); :func:`rotary_of` checks the pairing against the family's own ``apply_rotary_pos_emb``. Pairs are
    ordered by their inverse frequency ``theta_p = base^(-2p/E)``, low to high.
(c) **content against position**: writing each pair as a complex number, the rotated vectors are
    ``z = A_m z~`` with ``z~`` the pre-rotary (content) vector and ``A_m = cos_m + i sin_m`` the model's own
    rotary factor at position ``m`` (``|A_m| = 1`` unless the model scales its rotary embedding), so pair
    ``p`` scores ``Re(z~q conj(z~k) A_i conj(A_j))``. Its **content** part is the same pair at relative
    distance 0, ``|A_i||A_j| Re(z~q conj(z~k))`` (for plain Llama rotary: ``q~_p . k~_p``, the score
    without positions); its **position** part is the rest. The two sum to the pair's contribution by
    definition, so to ``s_ij`` exactly; what is a *statement about the model* is that the content part
    equals the pre-rotary dot product, which ``tests/test_why.py`` checks against ``q_proj``/``k_proj``
    outputs captured from the model (:func:`capture_layer`), and that the position part is 0 at ``i = j``.
    ``z~`` is recovered from the cached post-rotary vectors by undoing ``A_m`` with the model's own float32
    ``cos``/``sin`` (no new forward).

:func:`sink_summary` holds the first token's key against the others' and names, by a rule, what carries
its margin over the median key: its norm or its direction, content or position, and which band of pairs.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from attncore.decoder.probe import _layers, decoder_shape, layer_attention
from attncore.errors import AttnInputError
from attncore.models.modules import exclusive

__all__ = [
    "BANDS",
    "HeadWhy",
    "LayerQK",
    "Rotary",
    "SinkWhy",
    "capture_layer",
    "content_vectors",
    "decompose",
    "rotary_of",
    "sink_sentence",
    "sink_summary",
]

# Frequency bands of the sink rule: the pairs cut into this many equal groups, low to high frequency.
BANDS = 4


# ---------------------------------------------------------------------------- rotary convention


@dataclass(frozen=True)
class Rotary:
    """A model's rotary embedding over positions 0..L-1, in its own pairing.

    Attributes:
        inv_freq: (P,) float64, ``theta_p`` of pair ``p`` (dims ``p`` and ``p + P``).
        cos: (L, P) float64, the real part of ``A_m`` per pair, the model's own float32 values.
        sin: (L, P) float64, the imaginary part.
        base: the rotary base (``rope_theta``), NaN when the model does not say.
    """

    inv_freq: Tensor
    cos: Tensor
    sin: Tensor
    base: float

    @property
    def pairs(self) -> int:
        """P."""
        return int(self.inv_freq.numel())

    @property
    def order(self) -> Tensor:
        """(P,) pair indices by inverse frequency, low to high (ties by index)."""
        return torch.tensor(sorted(range(self.pairs), key=lambda p: (float(self.inv_freq[p]), p)))


def _backbone(model: Any) -> Any:
    return getattr(model, "model", model)


def rotary_of(model: Any, L: int) -> Rotary:
    """The rotary factors of ``model`` (a transformers Llama-family causal LM) at positions 0..L-1.

    Calls the model's own rotary embedding module (no forward pass) and checks, on a seeded random vector,
    that the family's ``apply_rotary_pos_emb`` is the complex rotation of the half-split pairs
    ``(p, p + E/2)`` by these factors; raises :class:`AttnInputError` if it is not (another convention).
    """
    body = _backbone(model)
    rot = getattr(body, "rotary_emb", None)
    layers = _layers(model)
    attn = layers[0].self_attn
    apply = getattr(sys.modules[type(attn).__module__], "apply_rotary_pos_emb", None)
    if rot is None or apply is None:
        raise AttnInputError("this model has no rotary embedding to take its logits apart by frequency.")
    E = decoder_shape(model).head_dim
    P = E // 2
    param = next(model.parameters())
    x = torch.zeros(1, L, 1, device=param.device, dtype=torch.float32)
    pos = torch.arange(L, device=param.device)[None]
    with torch.inference_mode():
        cos, sin = rot(x, pos)  # (1, L, E) each
        g = torch.Generator().manual_seed(0)
        v = torch.randn(1, 1, L, E, generator=g).to(param.device)
        got, _ = apply(v, v, cos, sin)  # (1, 1, L, E)
    cos, sin = cos[0].double().cpu(), sin[0].double().cpu()  # (L, E)
    c, s = cos[:, :P], sin[:, :P]
    v64 = v[0, 0].double().cpu()
    z = torch.complex(v64[:, :P], v64[:, P:]) * torch.complex(c, s)  # (L, P)
    want = torch.cat([z.real, z.imag], dim=-1)
    same_halves = torch.allclose(cos[:, :P], cos[:, P:]) and torch.allclose(sin[:, :P], sin[:, P:])
    if not same_halves or not torch.allclose(got[0, 0].double().cpu(), want, atol=1e-5, rtol=1e-5):
        raise AttnInputError("this model's rotary embedding does not pair dims p and p + E/2 as Llama's "
                             "rotate_half does; its logits are not taken apart by frequency here.")
    inv = getattr(rot, "inv_freq", None)
    inv_freq = inv.double().cpu() if inv is not None else torch.full((P,), float("nan"), dtype=torch.float64)
    base = _rope_base(getattr(model, "config", None))
    return Rotary(inv_freq=inv_freq, cos=c.contiguous(), sin=s.contiguous(), base=base)


def _rope_base(config: Any) -> float:
    """``rope_theta`` from ``config.rope_parameters`` (transformers 5) or ``config.rope_theta``; NaN if
    absent."""
    params = getattr(config, "rope_parameters", None)
    if isinstance(params, dict) and "rope_theta" in params:
        return float(params["rope_theta"])
    try:
        return float(config.rope_theta)
    except (AttributeError, TypeError):
        return float("nan")


def _complex(x: Tensor) -> Tensor:
    """(..., E) real -> (..., P) complex, pair p = dims (p, p + P)."""
    P = x.shape[-1] // 2
    return torch.complex(x[..., :P], x[..., P:])


def content_vectors(x: Tensor, rot: Rotary) -> Tensor:
    """The pre-rotary (content) vectors of rotated ``x`` (..., L, E): each pair divided by ``A_m``
    (float64)."""
    z = _complex(x.double().cpu())  # (..., L, P)
    a = torch.complex(rot.cos[: x.shape[-2]], rot.sin[: x.shape[-2]])  # (L, P)
    w = z / a
    return torch.cat([w.real, w.imag], dim=-1)


# ---------------------------------------------------------------------------- one query


@dataclass(frozen=True)
class HeadWhy:
    """One query's logits over the keys it sees, taken apart (all float64, keys 0..i).

    Attributes:
        query: i.
        logits: (n,) ``q_i . k_j * scale``.
        scale: the factor on q.k (``1/sqrt(E)``).
        q_norm: ``|q_i|``.
        k_norm: (n,) ``|k_j|``.
        cos: (n,) cosine of q_i and k_j.
        pair: (n, P) each pair's contribution, pairs low to high frequency (columns follow ``pair_index``).
        content: (n, P) its content part (the pair at relative distance 0).
        position: (n, P) its position part, ``pair - content``.
        pair_index: (P,) the model's pair index p of each column (dims p and p + P).
        inv_freq: (P,) theta_p of each column, ascending.
        ref: the reference key: the median key by logit among keys 1..i (0 when i = 0).
        norm_part: (n,) the norm part of ``logits - logits[ref]``.
        angle_part: (n,) the angle part; ``norm_part + angle_part = logits - logits[ref]``.
    """

    query: int
    logits: Tensor
    scale: float
    q_norm: float
    k_norm: Tensor
    cos: Tensor
    pair: Tensor
    content: Tensor
    position: Tensor
    pair_index: Tensor
    inv_freq: Tensor
    ref: int
    norm_part: Tensor
    angle_part: Tensor

    @property
    def winner(self) -> int:
        """The key with the largest logit (lowest index on ties)."""
        return int(torch.argmax(self.logits))

    def wins_by(self, j: int) -> str:
        """``"norm"`` or ``"angle"``: the part that carries most of key ``j``'s difference from the reference
        key (the larger part of a lead, the more negative part of a deficit)."""
        a, b = float(self.norm_part[j]), float(self.angle_part[j])
        return "norm" if (a > b if a + b >= 0 else a < b) else "angle"

    def bands(self, j: int, bands: int = BANDS) -> Tensor:
        """(bands,) key ``j``'s pair contributions minus the reference key's, summed in equal groups of
        pairs, low to high frequency."""
        d = self.pair[j] - self.pair[self.ref]
        return torch.stack([c.sum() for c in torch.tensor_split(d, bands)])


def _median_key(logits: Tensor) -> int:
    """The key among 1..n-1 holding the lower median logit (0 when n = 1)."""
    n = logits.numel()
    if n < 2:
        return 0
    others = sorted(range(1, n), key=lambda j: (float(logits[j]), j))
    return others[(len(others) - 1) // 2]


def decompose(q: Tensor, k: Tensor, rot: Rotary, query: int, *, scale: float | None = None) -> HeadWhy:
    """Take apart the logits of ``query`` over keys 0..query for one head.

    ``q`` (L, E) and ``k`` (S, E) are that head's rotated queries and keys (its key/value head's keys under
    grouped-query attention); ``scale`` defaults to ``1/sqrt(E)``. CPU float64 throughout.
    """
    L, E = q.shape
    if not 0 <= query < L:
        raise AttnInputError(f"the query token must lie in [0, {L}); got {query}.")
    if E % 2 or rot.pairs != E // 2 or rot.cos.shape[0] < L or k.shape[0] < query + 1:
        raise AttnInputError("q, k and the rotary factors disagree in size.")
    sc = 1.0 / math.sqrt(E) if scale is None else float(scale)
    n = query + 1
    qi = q[query].double().cpu()  # (E,)
    kj = k[:n].double().cpu()  # (n, E)
    logits = (kj @ qi) * sc  # (n,)
    q_norm = float(qi.norm())
    k_norm = kj.norm(dim=-1)
    cos = (kj @ qi) / (k_norm * q_norm).clamp_min(1e-300)
    order = rot.order
    pair = (qi[None, : E // 2] * kj[:, : E // 2] + qi[None, E // 2:] * kj[:, E // 2:]) * sc  # (n, P)
    zq = _complex(content_vectors(q[query: query + 1], _shift(rot, query)))[0]  # (P,)
    zk = _complex(content_vectors(kj, rot))  # (n, P)
    mod_q = torch.complex(rot.cos[query], rot.sin[query]).abs()  # (P,)
    mod_k = torch.complex(rot.cos[:n], rot.sin[:n]).abs()  # (n, P)
    content = (zq[None] * zk.conj()).real * mod_q[None] * mod_k * sc  # (n, P)
    position = pair - content
    ref = _median_key(logits)
    f = q_norm * sc
    c_r, n_r = cos[ref], k_norm[ref]
    norm_part = f * (k_norm - n_r) * (cos + c_r) / 2
    angle_part = f * (cos - c_r) * (k_norm + n_r) / 2
    return HeadWhy(query=query, logits=logits, scale=sc, q_norm=q_norm, k_norm=k_norm, cos=cos,
                   pair=pair[:, order], content=content[:, order], position=position[:, order],
                   pair_index=order, inv_freq=rot.inv_freq[order], ref=ref, norm_part=norm_part,
                   angle_part=angle_part)


def _shift(rot: Rotary, m: int) -> Rotary:
    """``rot`` starting at position ``m`` (so row 0 is position m's factor)."""
    return Rotary(inv_freq=rot.inv_freq, cos=rot.cos[m:], sin=rot.sin[m:], base=rot.base)


# ---------------------------------------------------------------------------- the first token


@dataclass(frozen=True)
class SinkWhy:
    """The first token's key against the others' for one head, and what carries its margin for one query.

    Attributes:
        key_norm: ``|k_0|``.
        others_norm: median ``|k_j|`` over keys 1..L-1.
        cos_mean_query: cosine of ``k_0`` with the mean query over queries 1..L-1.
        others_cos_mean_query: median of the same cosine over keys 1..L-1.
        query: the query the margin is read for (i >= 1).
        margin: ``s_i0 - s_ir``, r the median key.
        norm_part, angle_part: its split (a); they sum to ``margin``.
        content_part, position_part: its split (c); they sum to ``margin``.
        bands: (BANDS,) its split over equal groups of pairs, low to high frequency; they sum to ``margin``.
        band_freq: (BANDS, 2) the lowest and highest theta_p in each band.
    """

    key_norm: float
    others_norm: float
    cos_mean_query: float
    others_cos_mean_query: float
    query: int
    ref: int
    margin: float
    norm_part: float
    angle_part: float
    content_part: float
    position_part: float
    bands: Tensor
    band_freq: Tensor


def sink_summary(q: Tensor, k: Tensor, why: HeadWhy) -> SinkWhy:
    """Key 0 against keys 1..L-1 of one head (``q`` (L, E), ``k`` (S, E) rotated), and the split of key 0's
    margin over the median key in ``why`` (a :func:`decompose` of a query i >= 1 of the same head)."""
    L = q.shape[0]
    if L < 2 or why.query < 1:
        raise AttnInputError("the first token is compared with the others from the second token on.")
    qd, kd = q.double().cpu(), k[:L].double().cpu()
    mean_q = qd[1:].mean(dim=0)  # (E,)
    norms = kd.norm(dim=-1)  # (L,)
    cq = (kd @ mean_q) / (norms * mean_q.norm()).clamp_min(1e-300)  # (L,)
    r = why.ref
    margin = float(why.logits[0] - why.logits[r])
    content = float(why.content[0].sum() - why.content[r].sum())
    bands = why.bands(0)
    freq = torch.stack([torch.stack([c.min(), c.max()]) for c in torch.tensor_split(why.inv_freq, BANDS)])
    return SinkWhy(key_norm=float(norms[0]), others_norm=float(norms[1:].median()),
                   cos_mean_query=float(cq[0]), others_cos_mean_query=float(cq[1:].median()),
                   query=why.query, ref=r, margin=margin, norm_part=float(why.norm_part[0]),
                   angle_part=float(why.angle_part[0]), content_part=content, position_part=margin - content,
                   bands=bands, band_freq=freq)


BAND_NAMES = ("lowest", "lower-middle", "upper-middle", "highest")


def sink_sentence(s: SinkWhy, tokens: tuple[str, ...] | None = None) -> str:
    """A rule-based reading of :class:`SinkWhy`: whether key 0 wins, and by its norm or its direction, by
    content or position, and which band of frequency pairs carries most of its margin."""
    ref = f"key {s.ref}" if tokens is None else f"key {s.ref} ({tokens[s.ref]})"
    head = (f"|k_0| = {s.key_norm:.2f} against a median {s.others_norm:.2f} for the other keys; cosine with "
            f"the mean query {s.cos_mean_query:+.2f} against a median {s.others_cos_mean_query:+.2f}. ")
    if s.margin <= 0:
        return head + (f"For query {s.query} the first token does not beat the median key, {ref}: its "
                       f"logit is {-s.margin:.2f} lower.")
    by = "its key's norm" if s.norm_part > s.angle_part else "its key's direction"
    src = "content" if s.content_part > s.position_part else "position"
    b = int(torch.argmax(s.bands))
    name = BAND_NAMES[b] if len(s.bands) == len(BAND_NAMES) else f"band {b + 1}"
    lo, hi = (float(x) for x in s.band_freq[b])
    return head + (
        f"For query {s.query} the first token's logit leads the median key, {ref}, by {s.margin:.2f}: "
        f"{s.norm_part:+.2f} from the norms and {s.angle_part:+.2f} from the angle, so it wins by {by}; "
        f"{s.content_part:+.2f} from content and {s.position_part:+.2f} from position, so mostly by {src}. "
        f"The {name} frequency quarter of the pairs (theta from {lo:.2g} to {hi:.2g}) gives the most, "
        f"{float(s.bands[b]):+.2f} ({float(s.bands[b]) / s.margin:.0%} of the margin).")


# ---------------------------------------------------------------------------- capture


@dataclass(frozen=True)
class LayerQK:
    """One layer's queries and keys before and after rotary positions, float32 CPU.

    Attributes:
        q: (H, L, E) rotated queries. k: (Hkv, L, E) rotated keys.
        q_pre: (H, L, E) queries before rotary. k_pre: (Hkv, L, E) keys before rotary.
    """

    q: Tensor
    k: Tensor
    q_pre: Tensor
    k_pre: Tensor


class _Stop(Exception):
    """Raised inside the hook: the layer's q and k are read, the rest of the pass is not needed."""


def capture_layer(model: Any, ids: Tensor, layer: int) -> LayerQK:
    """q and k of ``layer`` before and after the family's own ``apply_rotary_pos_emb``, from a pass that
    stops at that layer's attention (layers after it never run). ``ids`` (1, L)."""
    ids, shape, attn, rotary = layer_attention(model, ids, layer)
    got: dict[str, Tensor] = {}
    L, E = int(ids.shape[1]), shape.head_dim

    def pre(_mod: Any, args: Any, kwargs: dict[str, Any]) -> None:
        x = kwargs.get("hidden_states", args[0] if args else None)
        cos, sin = kwargs["position_embeddings"]
        q = attn.q_proj(x).view(1, L, -1, E)
        k = attn.k_proj(x).view(1, L, -1, E)
        if isinstance(getattr(attn, "q_norm", None), torch.nn.Module):
            q, k = attn.q_norm(q), attn.k_norm(k)
        q, k = q.transpose(1, 2), k.transpose(1, 2)  # (1, H, L, E), (1, Hkv, L, E)
        qr, kr = rotary(q, k, cos, sin)
        got.update(q=qr[0].float().cpu(), k=kr[0].float().cpu(), q_pre=q[0].float().cpu(),
                   k_pre=k[0].float().cpu())
        raise _Stop

    with exclusive(model):
        h = attn.register_forward_pre_hook(pre, with_kwargs=True)
        try:
            with torch.inference_mode():
                model(input_ids=ids.to(next(model.parameters()).device), use_cache=False)
        except _Stop:
            pass
        finally:
            h.remove()
    return LayerQK(**got)
