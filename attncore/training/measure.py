"""Measurements of a trained character model: first-token sinks and the StreamingLLM test.

Shape legend: ``N`` layers, ``H`` heads, ``L`` characters, ``E`` head dim, ``D`` width.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from attncore.errors import AttnInputError
from attncore.sinks import sink_scores, uniform_attention
from attncore.training.inspect import attention_maps, encode
from attncore.training.model import CharTransformer, apply_rotary, rotary_angles

__all__ = [
    "SinkMeasure",
    "StreamingResult",
    "first_token_sinks",
    "kept_keys",
    "stream_nll",
    "streaming_test",
]


@dataclass(frozen=True)
class SinkMeasure:
    """The sink metric (Gu et al. 2024, :func:`attncore.sinks.sink_scores`) on the first token.

    Attributes:
        alpha: (N, H) mean weight that the queries give key 0 (all of them see it under the
            causal mask), averaged over the texts.
        alpha_uniform: the same under uniform causal attention (mean of 1/(i+1)): the baseline.
        share: (N,) share of each layer's heads with ``alpha > eps`` (sink heads).
        eps: the threshold (0.3 as in Gu et al.).
        length: characters per text.
    """

    alpha: Tensor
    alpha_uniform: float
    share: Tensor
    eps: float
    length: int


def first_token_sinks(model: CharTransformer, texts: str | Sequence[str], eps: float = 0.3) -> SinkMeasure:
    """Sink scores of every layer and head for key 0, averaged over ``texts`` (equal lengths)."""
    items = [texts] if isinstance(texts, str) else list(texts)
    if not items or len({len(t) for t in items}) != 1:
        raise AttnInputError("give one text or several texts of the same length.")
    if not 0.0 <= eps < 1.0:
        raise AttnInputError(f"the sink threshold eps must lie in [0, 1); got {eps}.")
    L = len(items[0])
    allowed = torch.ones(L, L, dtype=torch.bool).tril()
    alphas = [sink_scores(attention_maps(model, t), allowed)[..., 0] for t in items]  # each (N, H)
    alpha = torch.stack(alphas).mean(dim=0)
    base = float(sink_scores(uniform_attention(L, causal=True), allowed)[0])
    return SinkMeasure(alpha=alpha, alpha_uniform=base, share=(alpha > eps).float().mean(dim=-1),
                       eps=float(eps), length=L)


def kept_keys(t: int, policy: str, window: int, sinks: int) -> list[int]:
    """Token indices a KV cache keeps when token ``t`` is the newest (``t`` itself included).

    ``policy``: ``"full"`` (every token 0..t), ``"window"`` (the last ``window`` tokens) or
    ``"window_sinks"`` (the first ``sinks`` tokens plus the last ``window``: StreamingLLM).
    """
    recent = list(range(max(0, t - window + 1), t + 1))
    if policy == "full":
        return list(range(t + 1))
    if policy == "window":
        return recent
    if policy == "window_sinks":
        head = [i for i in range(min(sinks, t + 1)) if i < recent[0]]
        return head + recent
    raise AttnInputError(f"unknown cache policy {policy!r}; use full, window or window_sinks.")


@torch.no_grad()
def stream_nll(model: CharTransformer, ids: Tensor, policy: str, window: int, sinks: int = 4) -> Tensor:
    """Per-token loss of predicting ``ids[..., t+1]``, decoding one token at a time: ``ids`` (L,)
    gives (L-1,), a batch of sequences (B, L) gives (B, L-1).

    Keys and values are cached before the rotary rotation, as computed when their token
    was the newest; at each step the kept ones (:func:`kept_keys`) get rotary positions
    0..n-1 by their place in the cache (as StreamingLLM assigns them), the query n-1.
    ``full`` therefore uses the true positions and runs past the training context.
    """
    if model.config.positions != "rotary":
        raise AttnInputError("the streaming test places cached keys by rotary position; this model learned "
                             "absolute positions.")
    single = ids.dim() == 1
    batch = ids[None] if single else ids  # (B, L)
    B, L = (int(s) for s in batch.shape)
    dev = model.device
    batch = batch.to(dev)
    H, E = model.config.n_head, model.config.d_head
    K = [torch.empty(B, H, L, E, device=dev) for _ in model.blocks]  # pre-rotary keys
    V = [torch.empty(B, H, L, E, device=dev) for _ in model.blocks]
    nll = torch.empty(B, L - 1, dtype=torch.float64)
    for t in range(L - 1):
        keep = torch.tensor(kept_keys(t, policy, window, sinks), device=dev)
        n = int(keep.shape[0])
        cos, sin = rotary_angles(torch.arange(n, device=dev), E)  # (n, E/2)
        allowed = torch.ones(1, n, dtype=torch.bool, device=dev)
        x = model.tok(batch[:, t : t + 1])  # (B, 1, D)
        for li, blk in enumerate(model.blocks):
            h = blk.ln1(x)
            q, k, v = blk.attn.split_heads(h)  # (B, H, 1, E)
            K[li][:, :, t] = k[:, :, 0]
            V[li][:, :, t] = v[:, :, 0]
            kk = apply_rotary(K[li][:, :, keep], cos, sin)  # (B, H, n, E)
            qq = apply_rotary(q, cos[-1:], sin[-1:])
            out, _ = blk.attn.core(qq, kk, V[li][:, :, keep], h, allowed, False)
            x = x + blk.attn.proj(out)
            x = x + blk.mlp(blk.ln2(x))
        logits = model.ln_f(x)[:, 0] @ model.tok.weight.t()  # (B, V)
        nll[:, t] = F.cross_entropy(logits.float(), batch[:, t + 1], reduction="none").double().cpu()
    return nll[0] if single else nll


@dataclass(frozen=True)
class StreamingResult:
    """Loss (nats/char) on one long text under three KV-cache policies.

    Attributes:
        window, sinks: the cache sizes (recent tokens, first tokens kept).
        n_tokens: characters of the text (``n_tokens - 1`` predictions).
        context: the model's training context.
        full_loss, window_loss, window_sinks_loss: mean over every prediction.
        *_beyond: mean over the predictions of tokens at positions >= context (where the
            full cache runs past the training length and the window has evicted the start).
        chunks: policy -> mean loss per block of ``context`` predictions (for a curve).
    """

    window: int
    sinks: int
    n_tokens: int
    context: int
    full_loss: float
    window_loss: float
    window_sinks_loss: float
    full_beyond: float
    window_beyond: float
    window_sinks_beyond: float
    chunks: dict[str, list[float]]

    def to_dict(self) -> dict[str, object]:
        """JSON-able fields."""
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def streaming_test(model: CharTransformer, text: str, *, window: int, sinks: int = 4) -> StreamingResult:
    """StreamingLLM's comparison (Xiao et al. 2023) on ``text``: a sliding window of ``window``
    keys, the same window plus the first ``sinks`` tokens, and the full cache.

    ``text`` needs more than ``context`` characters (the issue uses 8x the context) and at most
    16x the context; ``1 <= window < context``, ``0 <= sinks <= 16``.
    """
    ctx = model.config.context
    if not 1 <= int(window) < ctx:
        raise AttnInputError(f"the window must lie in 1..{ctx - 1} (below the context); got {window}.")
    if not 0 <= int(sinks) <= 16:
        raise AttnInputError(f"keep 0 to 16 first tokens; got {sinks}.")
    if not ctx < len(text) <= 16 * ctx:
        raise AttnInputError(
            f"the streaming test needs a text longer than the context ({ctx}) and at most {16 * ctx} "
            f"characters; got {len(text)}."
        )
    ids = encode(model, text)
    losses = {p: stream_nll(model, ids, p, int(window), int(sinks))
              for p in ("full", "window", "window_sinks")}
    beyond = slice(ctx - 1, None)  # prediction t is of token t+1
    chunks = {p: [float(c.mean()) for c in v.split(ctx)] for p, v in losses.items()}
    return StreamingResult(
        window=int(window), sinks=int(sinks), n_tokens=len(text), context=ctx,
        full_loss=float(losses["full"].mean()), window_loss=float(losses["window"].mean()),
        window_sinks_loss=float(losses["window_sinks"].mean()),
        full_beyond=float(losses["full"][beyond].mean()),
        window_beyond=float(losses["window"][beyond].mean()),
        window_sinks_beyond=float(losses["window_sinks"][beyond].mean()),
        chunks=chunks,
    )
