"""One forward pass of a causal decoder LM, every head summarised inside hooks.

Shape legend: ``N`` layers, ``H`` query heads, ``Hkv`` key/value heads, ``L`` tokens (queries and
keys: a decoder reads one text), ``E`` head dim, ``D`` residual width, ``V`` vocabulary.

The model is any transformers causal LM of the Llama family (``model.model.layers[i].self_attn``
with ``q_proj``/``k_proj``/``v_proj``; Llama, Qwen2, Mistral, SmolLM2). :func:`decoder_pass` runs it
once on ``ids`` (1, L) under an optional (L, L) mask of the keys each query may see (passed to the
model as a 4-D additive mask, so positions stay the true ones) and keeps only per-head summaries
(the mean weight each key receives, each query's entropy with and without the first token, its
weight on the first token and on its nearest keys, an induction stripe), the value norms, the
residual stream's norms and the first token's residual vector per layer, and the maps of the heads
asked for. Each layer's (H, L, L) weights live only inside its hook, so a 1,024-token pass holds one
layer's maps at a time, never all N x H of them.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from attncore.budget import check_bytes
from attncore.errors import AttnInputError
from attncore.models.capture import PASS_OVERHEAD_BYTES, row_entropy
from attncore.models.modules import attention_implementation, exclusive

__all__ = [
    "LOCAL_KEYS",
    "MAX_DECODER_TOKENS",
    "DecoderPass",
    "DecoderShape",
    "ResidualEdit",
    "additive_mask",
    "band_allowed",
    "check_ids",
    "decoder_pass",
    "decoder_shape",
    "forward_bytes",
    "layer_attention",
    "layer_qkv",
]

MAX_DECODER_TOKENS = 2048
# A query's "local" weight: on itself and the LOCAL_KEYS - 1 keys just before it.
LOCAL_KEYS = 4


@dataclass(frozen=True)
class DecoderShape:
    """The sizes of a decoder: N layers, H query heads, Hkv key/value heads, E head dim, D width, V vocab."""

    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    hidden: int
    vocab: int


def _layers(model: Any) -> Sequence[Any]:
    base = getattr(model, "model", None)
    layers = getattr(base, "layers", None)
    if layers is None or len(layers) == 0 or not hasattr(layers[0], "self_attn"):
        raise AttnInputError(
            "this model is not a Llama-family causal LM (model.model.layers[i].self_attn); "
            "the decoder measurements need one.")
    return layers


def decoder_shape(model: Any) -> DecoderShape:
    """N, H, Hkv, E, D and V of a Llama-family causal LM, read from its config."""
    _layers(model)
    cfg = model.config
    heads = int(cfg.num_attention_heads)
    hidden = int(cfg.hidden_size)
    head_dim = int(getattr(cfg, "head_dim", None) or hidden // heads)
    return DecoderShape(layers=int(cfg.num_hidden_layers), heads=heads,
                        kv_heads=int(getattr(cfg, "num_key_value_heads", None) or heads),
                        head_dim=head_dim, hidden=hidden, vocab=int(cfg.vocab_size))


def check_ids(ids: Tensor, model: Any, max_tokens: int = MAX_DECODER_TOKENS) -> Tensor:
    """``ids`` as a (1, L) int64 tensor with 2 <= L <= ``max_tokens`` and every id inside the vocabulary."""
    if not isinstance(ids, Tensor):
        raise AttnInputError("token ids must be a tensor.")
    if ids.dim() == 1:
        ids = ids[None]
    if ids.dim() != 2 or ids.shape[0] != 1:
        raise AttnInputError(f"token ids must be (1, L); got {tuple(ids.shape)}.")
    L = int(ids.shape[1])
    if L < 2:
        raise AttnInputError("the text gave fewer than 2 tokens; a decoder needs at least 2 to predict one.")
    if max_tokens < L:
        raise AttnInputError(f"the text has {L:,} tokens; the limit is {max_tokens:,}. Use a shorter text.")
    vocab = decoder_shape(model).vocab
    if ids.dtype not in (torch.int64, torch.int32) or int(ids.min()) < 0 or int(ids.max()) >= vocab:
        raise AttnInputError(f"token ids must be whole numbers in [0, {vocab}).")
    return ids.to(torch.int64)


def band_allowed(L: int, window: int | None = None, sinks: int = 0,
                 device: torch.device | str = "cpu") -> Tensor:
    """(L, L) bool: query i may see key j when ``j <= i`` and (``i - j < window`` or ``j < sinks``).

    ``window=None`` is the dense causal mask. ``window`` counts the query itself, so a window of W
    keys plus ``sinks`` first tokens is StreamingLLM's cache of ``sinks + W`` entries.
    """
    if isinstance(L, bool) or not isinstance(L, int) or L < 1:
        raise AttnInputError(f"L must be a whole number of tokens, at least 1; got {L!r}.")
    if window is not None and (isinstance(window, bool) or not isinstance(window, int) or window < 1):
        raise AttnInputError(f"the window must be a whole number of keys, at least 1; got {window!r}.")
    if isinstance(sinks, bool) or not isinstance(sinks, int) or sinks < 0:
        raise AttnInputError(f"the number of kept first tokens must be a whole number >= 0; got {sinks!r}.")
    i = torch.arange(L, device=device)[:, None]
    j = torch.arange(L, device=device)[None, :]
    allowed = j <= i
    if window is not None:
        allowed = allowed & ((i - j < window) | (j < sinks))
    return allowed


def additive_mask(allowed: Tensor, dtype: torch.dtype = torch.float32) -> Tensor:
    """(L, L) bool -> (1, 1, L, L) additive mask: 0 where allowed, the dtype's lowest number elsewhere."""
    low = torch.finfo(dtype).min
    zero = torch.zeros((), dtype=dtype, device=allowed.device)
    return torch.where(allowed, zero, torch.full((), low, dtype=dtype, device=allowed.device))[None, None]


def forward_bytes(shape: DecoderShape, L: int, weights: bool = True, maps: int = 0) -> float:
    """Peak bytes of :func:`decoder_pass` at L tokens (float32), beyond the weights of the model.

    The logits and their log-softmax (2 L V), the residual stream and the MLP's activations
    (about 12 L D), the residual kept per layer and its stacked copy (2 (N + 1) L D), the mask (L^2), one
    layer's weights with the hook's temporary (3 H L^2), the summaries (6 N H L), the kept maps
    (``maps`` L^2) and one pass's fixed overhead (:data:`attncore.models.capture.PASS_OVERHEAD_BYTES`).
    Held against the measured peak by ``tests/test_plan_memory.py``.
    """
    cells = (2.0 * L * shape.vocab + (12.0 + 2 * (shape.layers + 1)) * L * shape.hidden + L * L
             + 6.0 * shape.layers * shape.heads * L)
    if weights:
        cells += 3.0 * shape.heads * L * L
    cells += maps * float(L) * L
    return 4.0 * cells + PASS_OVERHEAD_BYTES


@dataclass(frozen=True)
class ResidualEdit:
    """Overwrite dims ``dims`` of token ``token``'s residual stream at the output of layer ``layer``.

    ``mode`` "zero" sets them to 0; "set" to ``values`` (one per dim), e.g. their mean over many texts
    (Sun et al. 2024's ablations of massive activations). ``layer`` -1 edits the embeddings.
    """

    layer: int
    dims: tuple[int, ...]
    mode: str = "zero"
    values: tuple[float, ...] = ()
    token: int = 0

    def apply(self, hidden: Tensor) -> Tensor:
        """hidden (1, L, D) -> a copy with the edit made."""
        if self.mode not in ("zero", "set"):
            raise AttnInputError(f"a residual edit is 'zero' or 'set'; got {self.mode!r}.")
        if self.mode == "set" and len(self.values) != len(self.dims):
            raise AttnInputError(f"'set' needs one value per dim; got {len(self.values)} for "
                                 f"{len(self.dims)}.")
        out = hidden.clone()
        idx = torch.tensor(self.dims, dtype=torch.long, device=hidden.device)
        if self.mode == "zero":
            out[:, self.token, idx] = 0.0
        else:
            out[:, self.token, idx] = torch.tensor(self.values, dtype=hidden.dtype, device=hidden.device)
        return out


@dataclass(frozen=True)
class DecoderPass:
    """What :func:`decoder_pass` keeps of one forward pass (float32 on the CPU).

    Attributes:
        nll: (L - 1,) negative log-likelihood of token i + 1 given tokens 0..i (nats).
        alpha: (N, H, L) mean weight key k receives from the queries that see it (Gu et al.'s score;
            column 0 is the first-token score), None without weights.
        alpha_rest: (N, H, L) the same with the first token taken out: each query's weights on keys
            1..i re-summed to 1 (``w_ik / sum_{j>0} w_ij``), then averaged over the queries that see key k;
            column 0 is NaN. A row with no weight left off key 0 (float underflow) adds 0. None without
            weights.
        entropy: (N, H, L) entropy of query i's weights (nats).
        entropy_rest: (N, H, L) the same without key 0, renormalised; NaN for query 0 (no other key).
        first_weight: (N, H, L) weight query i puts on key 0.
        local_weight: (N, H, L) weight query i puts on itself and the :data:`LOCAL_KEYS` - 1 keys before it.
        stripe: (N, H) mean weight of queries i >= ``stripe_from`` on key i - ``stripe_offset`` (the
            induction stripe), None when not asked.
        value_norm: (N, Hkv, L) L2 norm of each token's value vector per key/value head.
        residual_norm: (N + 1, L) L2 norm of each token's residual stream after the embeddings (row 0)
            and after each layer.
        first_residual: (N + 1, D) the first token's residual vector at the same points.
        rest_residual_mean: (N + 1, D) the mean residual vector of tokens 1..L-1.
        maps: (layer, head) -> (L, L) weights of the heads asked for.
        allowed: (L, L) bool mask the pass ran under.
    """

    nll: Tensor
    alpha: Tensor | None
    entropy: Tensor | None
    entropy_rest: Tensor | None
    first_weight: Tensor | None
    local_weight: Tensor | None
    stripe: Tensor | None
    value_norm: Tensor
    residual_norm: Tensor
    first_residual: Tensor
    rest_residual_mean: Tensor
    maps: dict[tuple[int, int], Tensor]
    allowed: Tensor
    alpha_rest: Tensor | None = None

    @property
    def length(self) -> int:
        """L."""
        return int(self.allowed.shape[0])


def _first(out: Any) -> Tensor:
    return out[0] if isinstance(out, tuple) else out


def _row_entropies(w: Tensor, causal: bool = False) -> tuple[Tensor, Tensor]:
    """(H, L, S) weights -> (H, L) entropy of each row, and (H, L) the same without key 0, renormalised.

    With ``t_j = p_j ln p_j`` and ``r = sum_{j>0} p_j``, the renormalised entropy is
    ``-(sum_{j>0} t_j) / r + ln r`` (sums taken directly, so nothing cancels when p_0 is near 1); the t_j
    are formed a block of rows at a time (:func:`attncore.models.capture.row_entropy`; ``causal``: no
    weight above the diagonal, only the keys up to each block's last row are read). NaN for query 0 (no
    other key) and rows with (almost) no weight off key 0.
    """
    ent, rest_t = row_entropy(w, causal=causal, rest=True)  # (H, L) each
    assert rest_t is not None
    r = w[..., 1:].sum(dim=-1)  # (H, L)
    ok = r > 1e-6
    rs = torch.where(ok, r, torch.ones_like(r))
    rest = (-rest_t / rs + torch.log(rs)).clamp_min(0.0)
    rest = torch.where(ok, rest, torch.full_like(rest, math.nan))
    rest[..., 0] = math.nan
    return ent, rest


def decoder_pass(model: Any, ids: Tensor, *, allowed: Tensor | None = None, weights: bool = True,
                 maps: Sequence[tuple[int, int]] = (), stripe_offset: int | None = None,
                 stripe_from: int = 0, edits: Sequence[ResidualEdit] = (),
                 max_tokens: int = MAX_DECODER_TOKENS) -> DecoderPass:
    """Run a Llama-family causal LM once on ``ids`` (1, L) and keep per-head summaries.

    ``allowed`` (L, L) bool (default: causal) is the mask each query sees, given to the model as a
    4-D additive mask with the true positions 0..L-1. ``weights`` False skips every weight summary
    (the loss alone, with any attention implementation); True needs eager attention (the weights).
    ``maps`` lists (layer, head) pairs whose full (L, L) maps are kept. ``stripe_offset`` asks for the
    induction stripe. ``edits`` overwrite residual dims (ablations). Memory is checked first
    (:func:`forward_bytes`).
    """
    ids = check_ids(ids, model, max_tokens)
    shape = decoder_shape(model)
    L = int(ids.shape[1])
    layers = _layers(model)
    for layer, head in maps:
        if not (0 <= layer < shape.layers and 0 <= head < shape.heads):
            raise AttnInputError(f"no head ({layer}, {head}): the model has {shape.layers} layers x "
                                 f"{shape.heads} heads.")
    for e in edits:
        if not -1 <= e.layer < shape.layers or not all(0 <= d < shape.hidden for d in e.dims):
            raise AttnInputError(f"a residual edit must name a layer in [-1, {shape.layers}) and dims in "
                                 f"[0, {shape.hidden}).")
    if stripe_offset is not None and not (1 <= stripe_offset < L and 0 <= stripe_from < L):
        raise AttnInputError(f"the stripe offset must lie in [1, {L}); got {stripe_offset}.")
    check_bytes(forward_bytes(shape, L, weights, len(maps)), f"a {L:,}-token pass of the decoder",
                "Use a shorter text.")
    param = next(model.parameters())
    dev, dtype = param.device, param.dtype
    if allowed is None:
        allowed = band_allowed(L)
    if allowed.shape != (L, L) or allowed.dtype != torch.bool:
        raise AttnInputError(f"the mask must be ({L}, {L}) bool; got {tuple(allowed.shape)} {allowed.dtype}.")
    allowed = allowed.to(dev)
    seen = allowed.sum(dim=0).clamp_min(1).to(torch.float32)  # (L,) queries that see each key
    causal = not bool(allowed.triu(diagonal=1).any())  # no key after its query: row blocks read less
    N = shape.layers
    keep: dict[str, list[Tensor | None]] = {k: [None] * N for k in (
        "alpha", "alpha_rest", "entropy", "entropy_rest", "first", "local", "stripe", "value")}
    resid: list[Tensor | None] = [None] * (N + 1)
    kept_maps: dict[tuple[int, int], Tensor] = {}
    wanted = {(int(a), int(b)) for a, b in maps}
    edit_at: dict[int, list[ResidualEdit]] = {}
    for e in edits:
        edit_at.setdefault(e.layer, []).append(e)

    def attn_hook(i: int) -> Callable[..., None]:
        def hook(_mod: Any, _args: Any, out: Any) -> None:
            w = out[1] if isinstance(out, tuple) and len(out) > 1 else None
            if w is None:
                raise AttnInputError("the model returned no attention weights: load it with eager attention "
                                     "(attn_implementation='eager') to measure heads.")
            w = w[0].float()  # (H, L, L)
            # masked keys get exactly 0 weight, so a column sum over the queries that see the key is
            # the sum over all queries: no (H, L, L) product with the mask
            keep["alpha"][i] = (w.sum(dim=-2) / seen).cpu()  # (H, L)
            # without key 0: row i re-summed over keys 1..i; sum_i w_ik / r_i as one batched product,
            # no second (H, L, L) tensor
            r = w[..., 1:].sum(dim=-1)  # (H, L)
            inv = torch.where(r > 0, 1.0 / r.clamp_min(torch.finfo(r.dtype).tiny), torch.zeros_like(r))
            a_rest = (inv[:, None, :] @ w).squeeze(1) / seen  # (H, L)
            a_rest[:, 0] = math.nan
            keep["alpha_rest"][i] = a_rest.cpu()
            ent, ent_rest = _row_entropies(w, causal)  # (H, L) each
            w0 = w[..., 0]  # (H, L)
            keep["entropy"][i] = ent.cpu()
            keep["entropy_rest"][i] = ent_rest.cpu()
            # a copy: w0 is a view of w, and keeping the view would keep every layer's (H, L, L) weights
            # alive to the end of the pass (N H L^2 more: 1.1 GB at 1,024 tokens, issue 44 F2)
            keep["first"][i] = w0.clone().cpu()
            loc = torch.zeros_like(w0)
            for d in range(min(LOCAL_KEYS, L)):
                loc[:, d:] += torch.diagonal(w, offset=-d, dim1=-2, dim2=-1)  # (H, L - d)
            keep["local"][i] = loc.cpu()
            if stripe_offset is not None:
                diag = torch.diagonal(w, offset=-stripe_offset, dim1=-2, dim2=-1)  # (H, L - offset)
                start = max(stripe_from, stripe_offset) - stripe_offset
                keep["stripe"][i] = diag[:, start:].mean(dim=-1).cpu()  # (H,)
            for (li, hi) in wanted:
                if li == i:
                    kept_maps[(li, hi)] = w[hi].cpu().clone()
        return hook

    def value_hook(i: int) -> Callable[..., None]:
        def hook(_mod: Any, _args: Any, out: Any) -> None:
            v = _first(out)[0].float().view(L, shape.kv_heads, shape.head_dim)  # (L, Hkv, E)
            keep["value"][i] = v.norm(dim=-1).T.cpu()  # (Hkv, L)
        return hook

    def resid_hook(i: int) -> Callable[..., Any]:
        def hook(_mod: Any, _args: Any, out: Any) -> Any:
            h = _first(out)
            for e in edit_at.get(i - 1, ()):
                h = e.apply(h)
            x = h[0].float()  # (L, D)
            resid[i] = x.detach().cpu()
            if h is not _first(out):
                return (h, *out[1:]) if isinstance(out, tuple) else h
            return None
        return hook

    handles = []
    # weights: eager attention (the maps the hooks summarise); none: torch's fused SDPA, the same losses
    # without materialising a map (about twice as fast at 1,024 tokens on a CPU)
    with attention_implementation(model, "eager" if weights else "sdpa"):
        try:
            handles.append(model.get_input_embeddings().register_forward_hook(resid_hook(0)))
            for i, layer in enumerate(layers):
                if weights:
                    handles.append(layer.self_attn.register_forward_hook(attn_hook(i)))
                handles.append(layer.self_attn.v_proj.register_forward_hook(value_hook(i)))
                handles.append(layer.register_forward_hook(resid_hook(i + 1)))
            mask = additive_mask(allowed, dtype)
            with torch.inference_mode():
                out = model(input_ids=ids.to(dev), attention_mask=mask, use_cache=False)
                logits = out.logits[0, :-1].float()  # (L - 1, V)
                nll = torch.nn.functional.cross_entropy(logits, ids[0, 1:].to(dev), reduction="none").cpu()
        except AttnInputError:
            raise
        except RuntimeError as exc:
            first = (str(exc).splitlines() or [type(exc).__name__])[0][:300]
            raise AttnInputError(f"the decoder could not run on these tokens: {first}") from exc
        finally:
            for h in handles:
                h.remove()
    res = torch.stack([r for r in resid if r is not None])  # (N + 1, L, D)
    rest = res[:, 1:].mean(dim=1) if L > 1 else torch.zeros_like(res[:, 0])
    summaries = {k: (torch.stack(v) if all(t is not None for t in v) else None) for k, v in keep.items()}
    return DecoderPass(
        nll=nll, alpha=summaries["alpha"], entropy=summaries["entropy"],
        entropy_rest=summaries["entropy_rest"],
        first_weight=summaries["first"], local_weight=summaries["local"], stripe=summaries["stripe"],
        value_norm=summaries["value"], residual_norm=res.norm(dim=-1), first_residual=res[:, 0].clone(),
        rest_residual_mean=rest, maps=kept_maps, allowed=allowed.cpu(), alpha_rest=summaries["alpha_rest"],
    )


def layer_attention(model: Any, ids: Tensor,
                    layer: int) -> tuple[Tensor, DecoderShape, Any, Callable[..., Any]]:
    """``ids`` (1, L) checked, the model's shape, ``layer``'s attention module and its family's own
    ``apply_rotary_pos_emb`` (what a hook on that layer rebuilds q and k with); a plain error for a layer out
    of range or a family without one."""
    ids = check_ids(ids, model)
    shape = decoder_shape(model)
    if not 0 <= layer < shape.layers:
        raise AttnInputError(f"layer must lie in [0, {shape.layers}); got {layer}.")
    attn = _layers(model)[layer].self_attn
    rotary = getattr(sys.modules[type(attn).__module__], "apply_rotary_pos_emb", None)
    if rotary is None:
        raise AttnInputError("this model's attention has no apply_rotary_pos_emb to rebuild q and k with.")
    return ids, shape, attn, rotary


def layer_qkv(model: Any, ids: Tensor, layer: int) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Queries, keys (after rotary) and values of one layer as the model computes them, and its output.

    Returns ``q`` (1, H, L, E), ``k`` (1, Hkv, L, E), ``v`` (1, Hkv, L, E) and the attention's output
    before ``o_proj`` (1, L, H E), all float32 on the model's device, from one causal pass. The rotary
    embedding is the model's own ``apply_rotary_pos_emb``.
    """
    ids, shape, attn, rotary = layer_attention(model, ids, layer)
    got: dict[str, Tensor] = {}
    L = int(ids.shape[1])

    def pre(_mod: Any, args: Any, kwargs: dict[str, Any]) -> None:
        x = kwargs.get("hidden_states", args[0] if args else None)
        cos, sin = kwargs["position_embeddings"]
        q = attn.q_proj(x).view(1, L, shape.heads, shape.head_dim).transpose(1, 2)  # (1, H, L, E)
        k = attn.k_proj(x).view(1, L, shape.kv_heads, shape.head_dim).transpose(1, 2)  # (1, Hkv, L, E)
        v = attn.v_proj(x).view(1, L, shape.kv_heads, shape.head_dim).transpose(1, 2)  # (1, Hkv, L, E)
        q, k = rotary(q, k, cos, sin)
        got.update(q=q.float(), k=k.float(), v=v.float())

    def o_pre(_mod: Any, args: Any) -> None:
        got["out"] = args[0].float()  # (1, L, H E)

    with exclusive(model):
        h1 = attn.register_forward_pre_hook(pre, with_kwargs=True)
        h2 = attn.o_proj.register_forward_pre_hook(o_pre)
        try:
            with torch.inference_mode():
                model(input_ids=ids.to(next(model.parameters()).device), use_cache=False)
        finally:
            h1.remove()
            h2.remove()
    return got["q"], got["k"], got["v"], got["out"]
