"""Which tokens to keep: decoding token by token with a KV cache of a fixed budget under eviction policies.

Shape legend: ``N`` layers, ``H`` query heads, ``Hkv`` key/value heads, ``E`` head dim, ``L`` tokens of the
text, ``T`` = L - 1 decoding steps (one per predicted token), ``Bk`` the budget (keys a query attends to),
``n`` keys in the cache at one step (``n = min(t + 1, Bk)``), ``P`` settings, ``R`` layers recorded.

The model (a Llama-family causal LM: Llama, Qwen2 without sliding windows, Mistral, SmolLM2) is run one
token at a time by :func:`evict_decode`, which calls the model's own modules (embeddings, norms,
projections, rotary embedding, MLPs, head) and computes each layer's attention itself over its cache, so
the weights each policy reads are the ones the query used. The budget ``Bk`` is the number of keys a query
attends to, its own included (as a window of W keys in :func:`attncore.decoder.probe.band_allowed`): at
step t the new token's key and value enter the cache, the query attends over the ``n <= Bk`` cached keys,
and once the cache holds ``Bk`` entries the policy evicts one, using what it knows up to step t, so the
next query again sees ``Bk`` keys (``Bk - 1`` kept plus its own). The same budget holds for every layer
and every policy; each layer evicts for itself (one choice per layer, shared by its heads):

* ``window``: the oldest key (the last ``Bk`` keys; equals the banded mask of a window of ``Bk``).
* ``streaming``: StreamingLLM (Xiao et al. 2023): the first ``sinks`` tokens are never evicted, otherwise
  the oldest (the first k plus the last ``Bk - k``).
* ``h2o``: H2O (Zhang et al. 2023): half the budget (``Bk // 2``) for heavy hitters, half for recent
  tokens: the last ``Bk - Bk // 2`` positions (the query included) are kept, and among the older keys the
  one with the smallest accumulated attention (the sum of the weights it received from every query since
  it entered the cache, averaged over the layer's heads) is evicted. The paper's code keeps a set per
  head; here a layer keeps one set for all its heads (as TOVA does), so every policy keeps one set per
  layer and the cache maps compare.
* ``tova``: TOVA (Oren et al. 2024): the key with the lowest weight from the current query, averaged over
  the layer's heads (the newest key may be evicted too). The authors' code (``src/tova_cache.py``) counts
  its cache size c after the reduction, so its query attends to c + 1 keys: their cache of c is a budget
  of c + 1 here.

Ties go to the lowest position. Positions are the true ones, as in :mod:`attncore.decoder.streaming`:
each key is stored after its rotary embedding at its own position, so a kept first token is seen at its
true distance. StreamingLLM's cache instead re-indexes positions inside the cache (keys stored before the
rotary embedding and rotated by their slot), so the kept first tokens sit just before the window; with
rotary positions a window alone is the same either way, and only the kept first tokens differ.

Outputs: the per-token loss, and for the recorded layers the positions in the cache at every step
(``kept`` (R, T, Bk) int16, sorted, -1 for empty slots: the keys query t attended to).
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from attncore.budget import check_bytes
from attncore.decoder.probe import DecoderShape, check_ids, decoder_shape
from attncore.errors import AttnInputError, Cancelled

__all__ = [
    "MAX_EVICTION_SETTINGS",
    "POLICIES",
    "SINKS",
    "Decoded",
    "EvictionCost",
    "EvictionResult",
    "EvictionSetting",
    "eviction_cost",
    "evict_decode",
    "evict_losses",
    "h2o_recent",
    "victim",
]

POLICIES: tuple[str, ...] = ("dense", "window", "streaming", "h2o", "tova")
SINKS = 4  # StreamingLLM's first tokens kept (the paper's default)
MAX_EVICTION_SETTINGS = 24
# Seconds per decoded token beyond the matrix products, and seconds per multiply-add, of the cost model in
# :func:`eviction_cost`: round figures (about 20 ms a token for SmolLM2), not fitted; an estimate for the
# admission queue, not a measurement (``python -m bench.eviction`` measures).
STEP_OVERHEAD_S = 2.5e-3
SECONDS_PER_MAC = 1.0e-10


@dataclass(frozen=True)
class EvictionSetting:
    """One policy at one budget: ``policy`` in :data:`POLICIES`, ``budget`` keys a query attends to (None
    for dense), ``sinks`` first tokens StreamingLLM keeps (ignored by the other policies)."""

    policy: str
    budget: int | None = None
    sinks: int = SINKS

    @property
    def label(self) -> str:
        """'dense', 'window 128', 'StreamingLLM 128 (first 4)', 'H2O 128', 'TOVA 128'."""
        if self.policy == "dense":
            return "dense"
        name = {"window": "window", "streaming": "StreamingLLM", "h2o": "H2O", "tova": "TOVA"}[self.policy]
        return f"{name} {self.budget}" + (f" (first {self.sinks})" if self.policy == "streaming" else "")

    def check(self) -> None:
        """Raise :class:`AttnInputError` for an unknown policy or a budget that cannot hold it."""
        if self.policy not in POLICIES:
            raise AttnInputError(f"unknown eviction policy {self.policy!r}; choose one of "
                                 f"{', '.join(POLICIES)}.")
        if self.policy == "dense":
            return
        b = self.budget
        if isinstance(b, bool) or not isinstance(b, int) or b < 2:
            raise AttnInputError(f"{self.policy}: the budget must be a whole number of keys, at least 2; "
                                 f"got {b!r}.")
        if self.policy == "streaming":
            k = self.sinks
            if isinstance(k, bool) or not isinstance(k, int) or not 0 <= k < b:
                need = k + 1 if isinstance(k, int) else k
                raise AttnInputError(f"StreamingLLM keeps the first k tokens and at least one recent one: "
                                     f"the budget ({b}) must be at least k + 1 = {need}.")


def h2o_recent(budget: int) -> int:
    """Recent positions H2O keeps (the query included): ``budget - budget // 2``; the rest: heavy hitters."""
    return budget - budget // 2


def victim(setting: EvictionSetting, pos: Tensor, t: int, now: Tensor, acc: Tensor) -> int:
    """The slot to evict from a full cache after step ``t``.

    ``pos`` (n,) the true positions in the cache's slots (position ``t`` among them), ``now`` (n,) the
    current query's weights averaged over the layer's heads, ``acc`` (n,) the weights each key accumulated
    since it entered (step t included). Ties go to the lowest position.
    """
    big = torch.iinfo(torch.int64).max
    p = pos.to(torch.int64)
    if setting.policy == "window":
        return int(p.argmin())
    if setting.policy == "streaming":
        return int(torch.where(p >= setting.sinks, p, big).argmin())
    if setting.policy == "h2o":
        assert setting.budget is not None
        # after eviction the next query t + 1 must see the last h2o_recent positions, itself included:
        # positions t + 2 - recent .. t are protected
        cand = p < t + 2 - h2o_recent(setting.budget)
        score = acc
    elif setting.policy == "tova":
        cand = torch.ones_like(p, dtype=torch.bool)
        score = now
    else:
        raise AttnInputError(f"the policy {setting.policy!r} never evicts.")
    s = torch.where(cand, score.double(), math.inf)
    lowest = s.min()
    return int(torch.where(cand & (s == lowest), p, big).argmin())


@dataclass(frozen=True)
class Decoded:
    """One setting decoded: ``nll`` (T,) float32 loss of token t + 1 at step t (nats), ``kept`` (R, T, Bk)
    int16 positions in each recorded layer's cache at step t (sorted, -1 = empty slot), ``logits`` (T, V)
    float32 when asked for, else None; ``seconds`` of the decode."""

    nll: Tensor
    kept: Tensor
    logits: Tensor | None
    seconds: float


def _rotary(attn: Any) -> Callable[..., tuple[Tensor, Tensor]]:
    fn = getattr(sys.modules[type(attn).__module__], "apply_rotary_pos_emb", None)
    if fn is None:
        raise AttnInputError("this model's attention has no apply_rotary_pos_emb; the eviction decoder "
                             "needs one.")
    return fn  # type: ignore[no-any-return]


def _check_model(model: Any) -> None:
    decoder_shape(model)  # a Llama-family causal LM (model.model.layers[i].self_attn), else a plain message
    for layer in model.model.layers:
        a = layer.self_attn
        if any(hasattr(a, n) for n in ("q_norm", "k_norm")) or getattr(a, "sliding_window", None):
            raise AttnInputError("this model's attention normalises q/k or uses a sliding window; the "
                                 "eviction decoder handles plain Llama/Qwen2/Mistral attention only.")
    for name in ("embed_tokens", "rotary_emb", "norm"):
        if not hasattr(model.model, name):
            raise AttnInputError(f"this model has no model.{name}; the eviction decoder needs a "
                                 "Llama-family LM.")


def evict_decode(model: Any, ids: Tensor, setting: EvictionSetting, *, record: Sequence[int] | None = None,
                 logits: bool = False, cancel: Callable[[], bool] | None = None) -> Decoded:
    """Decode ``ids`` (1, L) one token at a time under ``setting``; losses (T,) and the cache's positions.

    ``record``: the layers whose cache contents are kept (default: every layer). ``logits``: also keep the
    (T, V) logits (tests). ``cancel()`` is polled every 32 steps and raises :class:`Cancelled`.
    Memory is checked first (:func:`eviction_cost`).
    """
    setting.check()
    ids = check_ids(ids, model)
    _check_model(model)
    shape = decoder_shape(model)
    L = int(ids.shape[1])
    T = L - 1
    rec = tuple(range(shape.layers)) if record is None else tuple(int(r) for r in record)
    if any(not 0 <= r < shape.layers for r in rec):
        raise AttnInputError(f"recorded layers must lie in [0, {shape.layers}); got {rec}.")
    Bk = L if setting.budget is None else min(int(setting.budget), L)
    cost = eviction_cost(shape, L, (setting,), len(rec))
    check_bytes(cost.nbytes, f"decoding {L:,} tokens with a cache of {Bk:,}", "Use a shorter text or budget.")
    layers = model.model.layers
    base = model.model
    param = next(model.parameters())
    dev, dtype = param.device, param.dtype
    N, H, Hkv, E = shape.layers, shape.heads, shape.kv_heads, shape.head_dim
    G = H // Hkv
    K = torch.zeros(N, Hkv, Bk, E, dtype=dtype, device=dev)  # (N, Hkv, Bk, E) keys after rotary
    Vc = torch.zeros(N, Hkv, Bk, E, dtype=dtype, device=dev)  # (N, Hkv, Bk, E)
    pos = torch.full((N, Bk), -1, dtype=torch.int64, device=dev)  # (N, Bk) true positions, -1 empty
    acc = torch.zeros(N, Bk, dtype=torch.float32, device=dev)  # (N, Bk) accumulated weight (H2O)
    free = [0] * N  # the slot the next token's key goes to, per layer
    kept = torch.full((len(rec), T, Bk), -1, dtype=torch.int16)  # (R, T, Bk)
    slot_of = {r: j for j, r in enumerate(rec)}
    nll = torch.empty(T, dtype=torch.float32)
    out_logits = torch.empty(T, shape.vocab, dtype=torch.float32) if logits else None
    rotary = _rotary(layers[0].self_attn)
    ids_d = ids.to(dev)
    t0 = time.perf_counter()
    with torch.inference_mode():
        for t in range(T):
            if cancel is not None and t % 32 == 0 and cancel():
                raise Cancelled("stopped")
            x = base.embed_tokens(ids_d[:, t:t + 1])  # (1, 1, D)
            cos, sin = base.rotary_emb(x, torch.tensor([[t]], device=dev))
            n = min(t + 1, Bk)
            for i, layer in enumerate(layers):
                a = layer.self_attn
                h = layer.input_layernorm(x)
                q = a.q_proj(h).view(1, 1, H, E).transpose(1, 2)  # (1, H, 1, E)
                k = a.k_proj(h).view(1, 1, Hkv, E).transpose(1, 2)  # (1, Hkv, 1, E)
                v = a.v_proj(h).view(1, 1, Hkv, E).transpose(1, 2)  # (1, Hkv, 1, E)
                q, k = rotary(q, k, cos, sin)
                s = free[i]
                K[i, :, s] = k[0, :, 0]
                Vc[i, :, s] = v[0, :, 0]
                pos[i, s] = t
                acc[i, s] = 0.0
                qg = q[0, :, 0].view(Hkv, G, E)  # (Hkv, G, E)
                scores = torch.matmul(qg, K[i, :, :n].transpose(-1, -2)) * a.scaling  # (Hkv, G, n)
                w = torch.softmax(scores, dim=-1, dtype=torch.float32).to(dtype)  # (Hkv, G, n)
                o = torch.matmul(w, Vc[i, :, :n])  # (Hkv, G, E)
                x = x + a.o_proj(o.reshape(1, 1, H * E))
                x = x + layer.mlp(layer.post_attention_layernorm(x))
                if i in slot_of:
                    kept[slot_of[i], t, :n] = pos[i, :n].sort().values.to(torch.int16).cpu()
                if setting.policy in ("dense", "window", "streaming"):
                    wm = None
                else:
                    wm = w.float().reshape(H, n).mean(0)  # (n,) averaged over the layer's heads
                    acc[i, :n] += wm
                if n == Bk and t + 1 < T:  # dense: Bk = L, never full before the last step
                    free[i] = victim(setting, pos[i, :n], t, wm if wm is not None else acc[i, :n], acc[i, :n])
                    pos[i, free[i]] = -1
                else:
                    free[i] = n
            lg = model.lm_head(base.norm(x))[0, 0].float()  # (V,)
            nll[t] = (torch.logsumexp(lg, -1) - lg[ids_d[0, t + 1]]).cpu()
            if out_logits is not None:
                out_logits[t] = lg.cpu()
    return Decoded(nll=nll, kept=kept, logits=out_logits, seconds=time.perf_counter() - t0)


@dataclass(frozen=True)
class EvictionResult:
    """Per-token losses and cache contents of several settings on one text.

    Attributes:
        settings: (P,) the settings run, in order (a stopped run has fewer than asked).
        nll: (P, T) loss of token t + 1 at step t (nats).
        kept: (P,) each setting's (R, T, Bk) int16 positions in the recorded layers' caches.
        layers: (R,) the recorded layers.
        length: L.
        seconds: (P,) seconds per setting.
    """

    settings: tuple[EvictionSetting, ...]
    nll: Tensor
    kept: tuple[Tensor, ...]
    layers: tuple[int, ...]
    length: int
    seconds: tuple[float, ...] = field(default=())

    def index(self, setting: EvictionSetting) -> int:
        """Row of ``setting``."""
        return self.settings.index(setting)

    def ppl(self, setting: EvictionSetting, start: int = 0) -> float:
        """exp(mean loss) over steps ``start``..T-1."""
        return math.exp(float(self.nll[self.index(setting), start:].double().mean()))

    def keep_map(self, setting: EvictionSetting, layer: int) -> Tensor:
        """(L, T) bool: position j is in ``layer``'s cache at step t (the keys query t attends to)."""
        kp = self.kept[self.index(setting)][self.layers.index(layer)].long()  # (T, Bk)
        T = kp.shape[0]
        m = torch.zeros(T, self.length + 1, dtype=torch.bool)
        m.scatter_(1, torch.where(kp < 0, self.length, kp), True)
        return m[:, : self.length].T.contiguous()

    def first_share(self, setting: EvictionSetting, k: int = SINKS) -> float:
        """Share of the cache's slots holding one of the first ``k`` positions, over the recorded layers and
        the steps where the cache is full (NaN when it never is)."""
        kp = self.kept[self.index(setting)].long()  # (R, T, Bk)
        full = (kp >= 0).all(dim=-1)  # (R, T)
        if not bool(full.any()):
            return math.nan
        rows = kp[full]  # (steps, Bk)
        return float(((rows >= 0) & (rows < k)).double().mean())


def evict_losses(model: Any, ids: Tensor, settings: Sequence[EvictionSetting], *,
                 record: Sequence[int] | None = None,
                 progress: Callable[[int, int, EvictionSetting], None] | None = None,
                 cancel: Callable[[], bool] | None = None) -> EvictionResult:
    """:func:`evict_decode` for each setting over ``ids`` (1, L): losses (P, T) and caches.

    ``progress(done, total, setting)`` after each setting. When ``cancel()`` says stop, :class:`Cancelled`
    is raised with the settings done so far as ``partial`` (an :class:`EvictionResult`).
    """
    ids = check_ids(ids, model)
    if not settings or len(settings) > MAX_EVICTION_SETTINGS:
        raise AttnInputError(f"choose 1 to {MAX_EVICTION_SETTINGS} settings; got {len(settings)}.")
    for s in settings:
        s.check()
    shape = decoder_shape(model)
    L = int(ids.shape[1])
    rec = tuple(range(shape.layers)) if record is None else tuple(int(r) for r in record)
    check_bytes(eviction_cost(shape, L, settings, len(rec)).nbytes,
                f"{len(settings)} eviction settings over {L:,} tokens",
                "Use fewer settings or a shorter text.")
    rows: list[Tensor] = []
    kept: list[Tensor] = []
    secs: list[float] = []

    def partial() -> EvictionResult:
        nll = torch.stack(rows) if rows else torch.zeros(0, L - 1)  # (P, T)
        return EvictionResult(tuple(settings[: len(rows)]), nll, tuple(kept), rec, L, tuple(secs))

    for s in settings:
        try:
            if cancel is not None and cancel():
                raise Cancelled("stopped")
            d = evict_decode(model, ids, s, record=rec, cancel=cancel)
        except Cancelled as exc:
            exc.partial = partial()  # type: ignore[attr-defined]
            raise
        rows.append(d.nll)
        kept.append(d.kept)
        secs.append(d.seconds)
        if progress is not None:
            progress(len(rows), len(settings), s)
    return partial()


@dataclass(frozen=True)
class EvictionCost:
    """What a request costs before it runs: peak ``nbytes`` beyond the model's weights, and ``seconds``
    estimated from the multiply-adds (a coarse model for admission control, not a measurement)."""

    nbytes: float
    seconds: float


def eviction_cost(shape: DecoderShape, L: int, settings: Sequence[EvictionSetting],
                  recorded: int) -> EvictionCost:
    """Peak bytes and estimated seconds of decoding L tokens under ``settings``, ``recorded`` layers' caches
    kept.

    Bytes: one setting's cache at a time (keys and values 2 N Hkv Bk E, positions and scores 3 N Bk) in
    float32, the kept positions of every setting (P R T Bk int16), the losses (P T) and two (V,) logits.
    Seconds: per step, the weights' multiply-adds (about the parameters outside the embeddings) and the
    attention's (2 N H E n), times :data:`SECONDS_PER_MAC`, plus :data:`STEP_OVERHEAD_S` per step and layer
    group of 30.
    """
    T = max(L - 1, 1)
    N, H, Hkv, E, D, V = shape.layers, shape.heads, shape.kv_heads, shape.head_dim, shape.hidden, shape.vocab
    peak_cache = 0.0
    kept = 0.0
    secs = 0.0
    weight_macs = N * (D * (H + 2 * Hkv) * E + H * E * D + 3 * D * 4 * D) + D * V  # per token (MLP ~ 4D)
    for s in settings:
        Bk = L if s.budget is None else min(int(s.budget or L), L)
        peak_cache = max(peak_cache, 4.0 * (2 * N * Hkv * Bk * E + 3 * N * Bk))
        kept += 2.0 * recorded * T * Bk
        mean_n = sum(min(t + 1, Bk) for t in range(0, T, max(1, T // 64))) / len(range(0, T, max(1, T // 64)))
        macs = T * (weight_macs + 2 * N * H * E * mean_n)
        secs += macs * SECONDS_PER_MAC + T * STEP_OVERHEAD_S * max(1.0, N / 30)
    nbytes = peak_cache + kept + 4.0 * len(settings) * T + 8.0 * V + 16.0 * D
    return EvictionCost(nbytes=nbytes, seconds=secs)
