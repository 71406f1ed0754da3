"""Logit lens and direct logit attribution of one position of a Llama-family decoder, from one pass.

Shape legend as in :mod:`attncore`: ``N`` layers, ``H`` query heads, ``E`` head dim, ``D`` residual width,
``V`` vocabulary, ``L`` tokens, ``P`` = N + 1 reading points (the embeddings, then after each layer),
``K`` top tokens.

**Logit lens** (nostalgebraist 2020): the residual stream of position ``p`` after every layer (and the
embeddings, point "emb"), read through the model's own final norm and unembedding (``lm_head``, tied to
the embeddings in SmolLM2) as if it were the last layer: the top tokens and their probabilities, and
the rank and probability of the model's final prediction, per point. After the last layer this is the
model's own next-token distribution.

**Massive activations** (Sun et al. 2024): a position whose residual norm is many times the median
position's (the attention sink, usually the first token) is a few huge dims; the final norm divides the
whole vector by that norm, so its lens reads those dims, not a guess of the next token. Such positions
are flagged by a rule on the measured norms (:func:`massive_positions`) and :meth:`LensPass.note` says
why in words built from the numbers.

**Direct logit attribution.** The last residual of a Llama block is a sum of parts: the embedding, each
layer's attention output (one term per head, ``W_O[:, hE:(h+1)E] z_h`` with ``z_h`` the head's slice of
the attention output before ``o_proj``, plus ``o_proj``'s bias if any) and each layer's MLP output. With
the final norm's scale frozen at this position (``w_norm / rms(x_final)``), the logit of token t is
linear in the residual, so each part's direct contribution is ``(W_U[t] * w_norm / rms) . part``, and
the parts sum to the model's logit (plus ``lm_head``'s bias, if any). "Direct" means through the
residual stream straight to the unembedding: what a head does through later layers is not counted.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from attncore.budget import check_bytes
from attncore.decoder.probe import MAX_DECODER_TOKENS, DecoderShape, _layers, check_ids, decoder_shape
from attncore.errors import AttnInputError
from attncore.models.capture import PASS_OVERHEAD_BYTES
from attncore.models.modules import attention_implementation, hooked_run

__all__ = [
    "MASSIVE_RATIO",
    "MAX_TOP",
    "DirectAttribution",
    "LensPass",
    "lens_bytes",
    "logit_lens",
    "massive_positions",
    "point_label",
]

# A position is flagged when its residual norm, at some reading point, is at least this many times the
# median position's norm there. Measured: the tiny random decoders of the tests stay under 1.5x; SmolLM2's
# first token reaches 154x ("The capital of France is") and 184x (the shipped text's first 256 tokens, where
# the text's first " the", position 71, a secondary sink, reaches 10.3x and the rest at most 2.6x).
MASSIVE_RATIO = 10.0
MAX_TOP = 50  # most top tokens per reading point


def point_label(point: int) -> str:
    """Reading point ``point`` (0: the embeddings, i: after layer i - 1) as shown: "emb", "0", ..."""
    return "emb" if point == 0 else str(point - 1)


def massive_positions(residual_norm: Tensor, ratio: float = MASSIVE_RATIO) -> tuple[Tensor, Tensor, Tensor]:
    """The positions whose residual is dominated by massive activations, by a rule on measured norms.

    ``residual_norm`` (P, L): each position's residual norm at each reading point. For every point the
    norms are divided by that point's median over the positions; a position's ratio is its largest over
    the points. Returns ``(ratio (L,), peak (L,) the point where it peaks, flagged (L,) bool = ratio >=
    ``ratio``)``.
    """
    if residual_norm.dim() != 2 or residual_norm.shape[1] < 1:
        raise AttnInputError(f"residual norms must be (P, L); got {tuple(residual_norm.shape)}.")
    if not ratio > 1.0:
        raise AttnInputError(f"the massive-activation ratio must exceed 1; got {ratio}.")
    med = residual_norm.double().median(dim=1, keepdim=True).values.clamp_min(1e-30)  # (P, 1)
    rel = residual_norm.double() / med  # (P, L)
    best, peak = rel.max(dim=0)  # (L,), (L,)
    return best, peak, best >= ratio


@dataclass(frozen=True)
class DirectAttribution:
    """Direct contributions of every part of the residual to the logit of one token at one position.

    Attributes:
        token: the token id whose logit is attributed.
        logit: the model's own logit of ``token`` at the position (its dtype, as a float).
        embedding: the token embedding's contribution.
        heads: (N, H) float64, each head's contribution (its slice of the attention output times
            ``o_proj``'s columns for that head).
        attn_bias: (N,) float64, ``o_proj``'s bias per layer (zeros when it has none).
        mlps: (N,) float64, each MLP's contribution.
        unembed_bias: ``lm_head``'s bias of ``token`` (0 without one).
    """

    token: int
    logit: float
    embedding: float
    heads: Tensor
    attn_bias: Tensor
    mlps: Tensor
    unembed_bias: float

    @property
    def total(self) -> float:
        """Embedding + every head + every bias + every MLP: equals :attr:`logit` up to rounding."""
        return float(self.embedding + self.heads.sum() + self.attn_bias.sum() + self.mlps.sum()
                     + self.unembed_bias)

    @property
    def layers(self) -> Tensor:
        """(N,) float64: each layer's direct contribution (its heads, its bias and its MLP)."""
        return self.heads.sum(dim=1) + self.attn_bias + self.mlps


@dataclass(frozen=True)
class LensPass:
    """The logit lens and the direct logit attribution of one position (float32/float64 on the CPU).

    Attributes:
        position: p, the position read (its logits predict token p + 1).
        top_ids: (P, K) int64, the K likeliest tokens at each reading point (point 0: the embeddings).
        top_probs: (P, K) their probabilities.
        target: the model's final prediction at p (the argmax of its logits).
        target_rank: (P,) int64, the target's rank at each point (0: on top).
        target_prob: (P,) its probability there.
        residual_norm: (P, L) every position's residual norm at every point.
        norm_ratio: (L,) each position's largest norm over the median position's (see
            :func:`massive_positions`); ``peak``: (L,) the point where it peaks.
        flagged: (L,) bool, positions whose lens is dominated by massive activations.
        ratio: the threshold the flags used.
        scale: the frozen final-norm scale 1 / rms(x_final) at p.
        attribution: the target's :class:`DirectAttribution`.
        contrast: the second token's (by default the model's runner-up, its second likeliest token).
    """

    position: int
    top_ids: Tensor
    top_probs: Tensor
    target: int
    target_rank: Tensor
    target_prob: Tensor
    residual_norm: Tensor
    norm_ratio: Tensor
    peak: Tensor
    flagged: Tensor
    ratio: float
    scale: float
    attribution: DirectAttribution
    contrast: DirectAttribution

    @property
    def points(self) -> tuple[str, ...]:
        """(P,) labels of the reading points: "emb", "0", ..., "N-1"."""
        return tuple(point_label(i) for i in range(int(self.top_ids.shape[0])))

    @property
    def meaningful(self) -> bool:
        """False when the position read is flagged (its lens reads massive activations)."""
        return not bool(self.flagged[self.position])

    def difference(self) -> Tensor:
        """(N, H) float64: each head's direct contribution to logit(target) - logit(contrast)."""
        return self.attribution.heads - self.contrast.heads

    def note(self, position: int | None = None) -> str:
        """Why the lens of ``position`` (default: the one read) is or is not meaningful, from the norms."""
        i = self.position if position is None else int(position)
        L = int(self.flagged.shape[0])
        if not 0 <= i < L:
            raise AttnInputError(f"position must lie in [0, {L}); got {i}.")
        r = float(self.norm_ratio[i])
        pk = int(self.peak[i])
        norm = float(self.residual_norm[pk, i])
        med = float(self.residual_norm[pk].double().median())
        where = "at the embeddings" if pk == 0 else f"after layer {pk - 1}"
        if bool(self.flagged[i]):
            return (f"Position {i}'s lens is not a prediction: its residual norm {where} is {norm:,.1f}, "
                    f"{r:,.1f}x the median position's {med:,.1f} (flagged at {self.ratio:g}x). A few massive "
                    "activations (the attention sink's) make up that norm, so the final norm divides every "
                    "other direction by it and the lens reads those few dims, not a guess of the next token.")
        return (f"Position {i}'s largest residual norm relative to the median position is {r:,.2f}x "
                f"({where}), under the {self.ratio:g}x at which massive activations are flagged.")


def lens_bytes(shape: DecoderShape, L: int, top: int = 10) -> float:
    """Peak bytes of :func:`logit_lens` at L tokens, beyond the model's weights.

    The pass (the residual stream and the MLP's activations, about 12 L D floats; one layer's scores
    and weights in eager attention, 3 H L^2; the residual norms (N + 1) L), the lens logits and their
    softmax at the P = N + 1 points (2 P V floats, plus the rank comparison P V bytes), what is kept at
    the position in float64 (the residual at P points, every head's output N H D, the MLPs N D), the
    unembedding rows scaled for two tokens (4 D) and one pass's fixed overhead
    (:data:`attncore.models.capture.PASS_OVERHEAD_BYTES`; without it the estimate at 64 tokens, 16 MiB, was
    under the 28 MiB measured by ``tests/plan_peaks.py``).
    """
    P = shape.layers + 1
    floats = (12.0 * L * shape.hidden + 3.0 * shape.heads * L * L + P * L + 2.0 * P * shape.vocab)
    doubles = (P + shape.layers * shape.heads + shape.layers + 4) * shape.hidden + 2.0 * P * top
    return 4.0 * floats + P * shape.vocab + 8.0 * doubles + PASS_OVERHEAD_BYTES


def _first(out: Any) -> Tensor:
    return out[0] if isinstance(out, tuple) else out


def _norm_eps(norm: Any) -> float:
    for name in ("variance_epsilon", "eps"):
        v = getattr(norm, name, None)
        if isinstance(v, float):
            return v
    raise AttnInputError("the final norm has no epsilon (variance_epsilon): not a Llama-family RMSNorm.")


def _attribute(token: int, logit: float, unembed: Tensor, bias: Tensor | None, emb: Tensor, heads: Tensor,
               o_bias: Tensor, mlps: Tensor) -> DirectAttribution:
    """``unembed`` (D,) float64: the token's unembedding row times the frozen norm scale; parts float64."""
    return DirectAttribution(
        token=token, logit=logit, embedding=float(emb @ unembed), heads=heads @ unembed,  # (N, H)
        attn_bias=o_bias @ unembed, mlps=mlps @ unembed,  # (N,), (N,)
        unembed_bias=0.0 if bias is None else float(bias[token]))


def logit_lens(model: Any, ids: Tensor, position: int | None = None, *, top: int = 10,
               contrast: int | None = None, ratio: float = MASSIVE_RATIO,
               max_tokens: int = MAX_DECODER_TOKENS) -> LensPass:
    """Logit lens and direct logit attribution of ``position`` (default: the last) of ``ids`` (1, L).

    One forward pass of a Llama-family causal LM (torch's fused SDPA attention; no weights are needed)
    with hooks on the embeddings (point 0), every decoder layer's output (points 1..N), every
    ``o_proj``'s input (the heads' outputs) and every MLP's output. ``top`` (1..:data:`MAX_TOP`) tokens
    per point; ``contrast``: a second token id for a logit difference (default: the runner-up, the
    model's second likeliest token at the position); ``ratio``: the massive-activation
    threshold (:func:`massive_positions`). Memory is checked first (:func:`lens_bytes`).
    """
    ids = check_ids(ids, model, max_tokens)
    shape = decoder_shape(model)
    L = int(ids.shape[1])
    p = L - 1 if position is None else position
    if isinstance(p, bool) or not isinstance(p, int) or not 0 <= p < L:
        raise AttnInputError(f"the position must be a whole number in [0, {L}); got {position!r}.")
    if isinstance(top, bool) or not isinstance(top, int) or not 1 <= top <= min(MAX_TOP, shape.vocab):
        raise AttnInputError(f"the number of top tokens must lie in [1, {min(MAX_TOP, shape.vocab)}]; "
                             f"got {top!r}.")
    if contrast is not None and (isinstance(contrast, bool) or not isinstance(contrast, int)
                                 or not 0 <= contrast < shape.vocab):
        raise AttnInputError(f"the second token must be an id in [0, {shape.vocab}); got {contrast!r}.")
    check_bytes(lens_bytes(shape, L, top), f"the logit lens over {L:,} tokens", "Use a shorter text.")
    layers = _layers(model)
    base = model.model
    norm, head = base.norm, model.get_output_embeddings()
    eps = _norm_eps(norm)
    N, H, E, D = shape.layers, shape.heads, shape.head_dim, shape.hidden
    resid: list[Tensor | None] = [None] * (N + 1)  # (D,) at p, model dtype
    norms: list[Tensor | None] = [None] * (N + 1)  # (L,) float32
    z: list[Tensor | None] = [None] * N  # (H E,) at p
    mlp: list[Tensor | None] = [None] * N  # (D,) at p

    def resid_hook(i: int) -> Callable[..., None]:
        def fn(_m: Any, _a: Any, out: Any) -> None:
            h = _first(out)[0]  # (L, D)
            resid[i] = h[p].detach().clone()
            norms[i] = h.float().norm(dim=-1).cpu()
        return fn

    def z_hook(i: int) -> Callable[..., None]:
        def fn(_m: Any, args: Any) -> None:
            z[i] = args[0][0, p].detach().clone()  # (H E,)
        return fn

    def mlp_hook(i: int) -> Callable[..., None]:
        def fn(_m: Any, _a: Any, out: Any) -> None:
            mlp[i] = _first(out)[0, p].detach().clone()  # (D,)
        return fn

    handles: list[Any] = []
    with attention_implementation(model, "sdpa"):
        with hooked_run("the decoder", handles):
            handles.append(model.get_input_embeddings().register_forward_hook(resid_hook(0)))
            for i, blk in enumerate(layers):
                handles.append(blk.register_forward_hook(resid_hook(i + 1)))
                handles.append(blk.self_attn.o_proj.register_forward_pre_hook(z_hook(i)))
                handles.append(blk.mlp.register_forward_hook(mlp_hook(i)))
            dev = next(model.parameters()).device
            with torch.inference_mode():
                base(input_ids=ids.to(dev), use_cache=False)
        with torch.inference_mode():
            x = torch.stack([r for r in resid if r is not None])  # (P, D) model dtype
            if x.shape[0] != N + 1 or any(t is None for t in z) or any(t is None for t in mlp):
                raise AttnInputError("the decoder's modules did not all run: not a Llama-family layout.")
            logits = head(norm(x[None]))[0]  # (P, V): the model's own norm and unembedding
            logits = logits.to(torch.promote_types(logits.dtype, torch.float32))
            logp = logits.log_softmax(dim=-1)  # (P, V)
            target, runner_up = (int(t) for t in logits[-1].topk(2).indices)
            second = runner_up if contrast is None else contrast
            t_logit = logits[:, target]  # (P,)
            rank = (logits > t_logit[:, None]).sum(dim=-1).cpu()  # (P,)
            tp, ti = logp.topk(top, dim=-1)  # (P, K)
            top_probs, top_ids = tp.exp().float().cpu(), ti.cpu()
            t_prob = logp[:, target].exp().float().cpu()
            final_logits = logits[-1].cpu()
            del logits, logp
            # direct logit attribution at p, in float64
            xf = x[-1].double()
            scale = float(torch.rsqrt(xf.pow(2).mean() + eps))
            w_norm = norm.weight.double()
            W_U, b_U = head.weight, getattr(head, "bias", None)
            emb = x[0].double().cpu()
            zz = torch.stack([t for t in z if t is not None]).double().view(N, H, E)  # (N, H, E)
            heads = torch.stack([  # (N, H, D): each head's output in the residual
                torch.einsum("dhe,he->hd", blk.self_attn.o_proj.weight.double().view(D, H, E), zz[i])
                for i, blk in enumerate(layers)]).cpu()
            o_bias = torch.stack([
                blk.self_attn.o_proj.bias.double() if blk.self_attn.o_proj.bias is not None
                else torch.zeros(D, dtype=torch.float64, device=dev) for blk in layers]).cpu()  # (N, D)
            mlps = torch.stack([t for t in mlp if t is not None]).double().cpu()  # (N, D)
            bias = None if b_U is None else b_U.double().cpu()

            def attrib(tok: int) -> DirectAttribution:
                u = (W_U[tok].double() * w_norm * scale).cpu()  # (D,)
                return _attribute(tok, float(final_logits[tok]), u, bias, emb, heads, o_bias, mlps)

            target_attr = attrib(target)
            contrast_attr = attrib(second)
    res_norm = torch.stack([n for n in norms if n is not None])  # (P, L)
    nr, peak, flagged = massive_positions(res_norm, ratio)
    return LensPass(position=p, top_ids=top_ids, top_probs=top_probs, target=target, target_rank=rank,
                    target_prob=t_prob, residual_norm=res_norm, norm_ratio=nr.float(), peak=peak,
                    flagged=flagged, ratio=float(ratio), scale=scale, attribution=target_attr,
                    contrast=contrast_attr)
