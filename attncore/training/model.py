"""A small decoder-only character transformer whose attention goes through attncore.

Pre-LayerNorm blocks, rotary position embeddings (so the model can run past its
training context), tied input/output embeddings, a 4x GELU MLP, optional dropout on
the embeddings and on each residual branch (``TrainConfig.dropout``). The attention
variant is fixed per model (:data:`attncore.training.config.VARIANTS`).

Shape legend: ``B`` batch, ``H`` heads, ``L`` queries, ``S`` keys, ``T`` tokens,
``D`` model width, ``E`` head dim, ``V`` vocabulary size, ``N`` layers.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attncore.attention import attention_stages
from attncore.errors import AttnInputError
from attncore.kernels import SDPA_LOCK
from attncore.normalizers import Normalizer, ReLUNorm, Sigmoid, Softmax, SoftmaxWithSink, Softpick
from attncore.training.config import TrainConfig

__all__ = ["FUSED_VARIANTS", "GATED_VARIANTS", "CharTransformer", "apply_rotary", "rotary_angles"]

# Variants whose weights are a plain softmax of scaled dot products: torch's fused SDPA
# computes the same function (the output factor or gate is applied after it).
FUSED_VARIANTS = frozenset({"standard", "unscaled", "fully_scaled", "fully_scaled_rows", "gated",
                            "gated_headwise", "gated_control"})
# Qiu et al.'s output gates after SDPA (o ⊙ gate(x)): elementwise σ(x W_g) (one gate per channel), headwise
# σ(x W_g) with one scalar per head, and the non-sparse control 0.5 + 0.5 σ(x W_g) (elementwise)
GATED_VARIANTS = frozenset({"gated", "gated_headwise", "gated_control"})
ROPE_BASE = 10000.0


def rotary_angles(positions: Tensor, dim: int) -> tuple[Tensor, Tensor]:
    """cos and sin ``(T, E/2)`` of the rotary angles ``pos * base^(-2j/E)`` for ``positions`` (T,)."""
    inv = ROPE_BASE ** (-torch.arange(0, dim, 2, device=positions.device, dtype=torch.float32) / dim)
    ang = positions.to(torch.float32)[:, None] * inv[None, :]  # (T, E/2)
    return ang.cos(), ang.sin()


def apply_rotary(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotate coordinate pairs ``(x_j, x_{j+E/2})`` of ``x`` (..., T, E) by the angles (T, E/2)."""
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    c, s = cos.to(x.dtype), sin.to(x.dtype)
    return torch.cat([x1 * c - x2 * s, x1 * s + x2 * c], dim=-1)


def _drop(x: Tensor, p: float, training: bool) -> Tensor:
    """Dropout with probability ``p`` while training; ``p == 0`` returns ``x`` itself (no operation,
    no random draw), which keeps runs without dropout bit-identical to those made before it existed."""
    return F.dropout(x, p, training=True) if p > 0 and training else x


class CausalSelfAttention(nn.Module):
    """Multi-head causal self-attention with one of the training variants.

    ``forward(x, positions, allowed)`` takes the block's normalised input ``x`` (B, T, D)
    and returns the projected output (B, T, D).
    """

    def __init__(self, config: TrainConfig) -> None:
        super().__init__()
        D, H = config.d_model, config.n_head
        self.variant = config.variant
        self.n_head = H
        self.d_head = config.d_head
        self.qkv = nn.Linear(D, 3 * D, bias=False)
        self.proj = nn.Linear(D, D, bias=False)
        if self.variant in ("gated", "gated_control"):
            self.gate = nn.Linear(D, D, bias=False)
        if self.variant == "gated_headwise":
            self.gate = nn.Linear(D, H, bias=False)
        if self.variant == "ssmax":
            self.ssmax_s = nn.Parameter(torch.empty(H))
        if self.variant == "sink_logit":
            self.sink = nn.Parameter(torch.empty(H))
        self.fused = True  # use SDPA for the FUSED_VARIANTS unless weights are asked for
        self.context = config.context

    def split_heads(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """q, k, v (B, H, T, E) before rotary, from the normalised input x (B, T, D)."""
        B, T, _ = x.shape
        qkv = self.qkv(x).view(B, T, 3, self.n_head, self.d_head)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)  # each (B, H, T, E)
        return q, k, v

    def gate_values(self, x: Tensor) -> Tensor | None:
        """The output gate (B, L, D) that multiplies the merged heads, from the queries' normalised input
        x (B, L, D): σ(x W_g) (gated), σ(x W_g) (B, L, H) repeated over each head's E channels
        (gated_headwise), 0.5 + 0.5 σ(x W_g) (gated_control, in [0.5, 1]); None for a variant without
        a gate."""
        if self.variant not in GATED_VARIANTS:
            return None
        g = torch.sigmoid(self.gate(x))  # (B, L, D), or (B, L, H) headwise
        if self.variant == "gated_headwise":
            return g.repeat_interleave(self.d_head, dim=-1)  # (B, L, D): head h's gate on its E channels
        if self.variant == "gated_control":
            return 0.5 + 0.5 * g
        return g

    def core(
        self, q: Tensor, k: Tensor, v: Tensor, x: Tensor, allowed: Tensor | None, want_weights: bool
    ) -> tuple[Tensor, Tensor | None]:
        """Attention of rotated q (B, H, L, E) over rotated k, v (B, H, S, E).

        ``allowed`` (L, S) boolean, or None for the causal mask (L == S). ``x`` (B, L, D) is
        the normalised input of the queries (the gate reads it). Returns the merged heads
        (B, L, D) before the output projection, and the weights (B, H, L, S) when asked.
        """
        B, H, L, E = q.shape
        S = k.shape[-2]
        variant = self.variant
        if allowed is None:
            counts = torch.arange(1, L + 1, device=q.device, dtype=q.dtype)[:, None]  # (L, 1)
        else:
            counts = allowed.sum(dim=-1, keepdim=True).to(q.dtype)  # (L, 1)
        scale = 1.0 if variant == "unscaled" else 1.0 / math.sqrt(E)
        weights: Tensor | None = None
        if variant in FUSED_VARIANTS and self.fused and not want_weights:
            with SDPA_LOCK:  # another thread's sdpa_kernel choice must not apply here
                out = F.scaled_dot_product_attention(
                    q, k, v, attn_mask=allowed, is_causal=allowed is None, scale=scale
                )  # (B, H, L, E)
        else:
            normalizer: Normalizer = Softmax()
            scorer = None
            if variant == "softmax1":
                normalizer = SoftmaxWithSink(0.0)
            elif variant == "sink_logit":
                normalizer = SoftmaxWithSink(self.sink.view(H, 1, 1))
            elif variant == "sigmoid":
                normalizer = Sigmoid()  # bias -log n_i, n_i = keys row i sees
            elif variant == "relu":
                normalizer = ReLUNorm()
            elif variant == "softpick":
                normalizer = Softpick()
            elif variant == "ssmax":
                factor = self.ssmax_s.view(H, 1, 1) * torch.log(counts) * scale  # (H, L, 1)

                def scorer(a: Tensor, b: Tensor) -> Tensor:
                    return (a @ b.transpose(-2, -1)) * factor  # (B, H, L, S)

                scale = None  # type: ignore[assignment]
            st = attention_stages(
                q, k, v, attn_mask=allowed, is_causal=allowed is None, scale=scale,
                normalizer=normalizer, scorer=scorer,
            )
            out, weights = st.output, st.weights
        if variant == "fully_scaled":
            out = out * math.sqrt(S / math.e)
        elif variant == "fully_scaled_rows":
            out = out * torch.sqrt(counts / math.e)  # (L, 1) broadcasts over (B, H, L, E)
        out = out.transpose(1, 2).reshape(B, L, H * E)  # (B, L, D)
        gate = self.gate_values(x)
        if gate is not None:
            out = out * gate
        return out, weights

    def forward(
        self, x: Tensor, cos: Tensor, sin: Tensor, allowed: Tensor | None = None,
        want_weights: bool = False,
    ) -> tuple[Tensor, Tensor | None]:
        """x (B, T, D) normalised; cos/sin (T, E/2) rotary angles; returns (B, T, D) and weights."""
        q, k, v = self.split_heads(x)
        q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        out, w = self.core(q, k, v, x, allowed, want_weights)
        return self.proj(out), w


class Block(nn.Module):
    """Pre-LayerNorm transformer block: ``x + attn(ln1 x)``, then ``x + mlp(ln2 x)``."""

    def __init__(self, config: TrainConfig) -> None:
        super().__init__()
        D = config.d_model
        self.ln1 = nn.LayerNorm(D)
        self.attn = CausalSelfAttention(config)
        self.ln2 = nn.LayerNorm(D)
        self.fc = nn.Linear(D, 4 * D)
        self.out = nn.Linear(4 * D, D)
        self.dropout = config.dropout

    def mlp(self, x: Tensor) -> Tensor:
        """The 4x GELU MLP on x (..., D)."""
        return self.out(F.gelu(self.fc(x)))

    def forward(
        self, x: Tensor, cos: Tensor, sin: Tensor, allowed: Tensor | None, want_weights: bool
    ) -> tuple[Tensor, Tensor | None]:
        """x (B, T, D) -> (B, T, D) and the attention weights (B, H, T, S) when asked."""
        a, w = self.attn(self.ln1(x), cos, sin, allowed, want_weights)
        x = x + _drop(a, self.dropout, self.training)
        return x + _drop(self.mlp(self.ln2(x)), self.dropout, self.training), w


class CharTransformer(nn.Module):
    """Decoder-only character model; ``vocab`` is the string of its characters (index = id).

    Build it with :meth:`create` (seeded initialisation) or
    :func:`attncore.training.io.load_model`. ``meta`` holds free-form facts about how it
    was trained (losses, the command that made it).
    """

    def __init__(self, config: TrainConfig, vocab: str, meta: dict[str, Any] | None = None) -> None:
        super().__init__()
        if len(vocab) < 1 or len(set(vocab)) != len(vocab):
            raise AttnInputError("the vocabulary must be a non-empty string of distinct characters.")
        self.config = config
        self.vocab = vocab
        self.meta: dict[str, Any] = dict(meta or {})
        self.tok = nn.Embedding(len(vocab), config.d_model)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.n_layer))
        self.ln_f = nn.LayerNorm(config.d_model)
        if config.positions == "learned":  # after ln_f: a rotary model's initial draws are unchanged
            self.pos = nn.Embedding(config.context, config.d_model)

    @classmethod
    def create(cls, config: TrainConfig, vocab: str, generator: torch.Generator) -> CharTransformer:
        """A freshly initialised model on the CPU; every draw comes from ``generator`` (CPU).

        Linear and embedding weights ~ N(0, 0.02²); the residual projections (attention
        output, MLP output) ~ N(0, (0.02/sqrt(2N))²); biases 0; LayerNorm gains 1; the
        gates' weights N(0, 0.02²) (σ ≈ 0.5 at start; the control gate ≈ 0.75); the sink logits
        ``config.sink_init`` (0: softmax1 at start); SSMax's s = 1/log(T) (the last row of a training
        sequence starts as standard).
        """
        with torch.device("meta"):
            model = cls(config, vocab)
        model.to_empty(device="cpu")
        std = 0.02
        resid = std / math.sqrt(2 * config.n_layer)
        with torch.no_grad():
            for name, p in model.named_parameters():
                if name.endswith("attn.proj.weight") or name.endswith(".out.weight"):
                    p.normal_(0.0, resid, generator=generator)
                elif name.endswith("ln1.weight") or name.endswith("ln2.weight") or name == "ln_f.weight":
                    p.fill_(1.0)
                elif name.endswith("ssmax_s"):
                    p.fill_(1.0 / math.log(config.context))
                elif name.endswith("attn.sink"):
                    p.fill_(float(config.sink_init))
                elif name.endswith("bias"):
                    p.zero_()
                else:
                    p.normal_(0.0, std, generator=generator)
        return model

    @property
    def device(self) -> torch.device:
        """Where the weights live."""
        return self.tok.weight.device

    def angles(self, positions: Tensor) -> tuple[Tensor, Tensor]:
        """cos and sin (T, E/2) that q and k are rotated by at ``positions`` (T,): the rotary angles,
        or no rotation (cos 1, sin 0) for a model with learned absolute positions, whose
        ``positions`` must lie in 0..context-1 (:class:`AttnInputError` otherwise)."""
        if self.config.positions == "rotary":
            return rotary_angles(positions, self.config.d_head)
        if positions.numel() and (int(positions.min()) < 0 or int(positions.max()) >= self.config.context):
            raise AttnInputError(f"this model learned positions 0..{self.config.context - 1} only; got "
                                 f"{int(positions.min())}..{int(positions.max())}.")
        shape = (positions.shape[0], self.config.d_head // 2)
        return (torch.ones(shape, device=positions.device), torch.zeros(shape, device=positions.device))

    def set_fused(self, fused: bool) -> None:
        """Use torch's fused SDPA where it is the same function (True) or attncore's
        materialised attention everywhere (False, a reference for tests)."""
        for blk in self.blocks:
            blk.attn.fused = fused

    def forward(
        self, idx: Tensor, *, positions: Tensor | None = None, allowed: Tensor | None = None,
        return_attn: bool = False,
    ) -> tuple[Tensor, list[Tensor]]:
        """Logits (B, T, V) for token ids ``idx`` (B, T), and each layer's weights when asked.

        ``positions`` (T,) rotary positions (default 0..T-1); ``allowed`` (T, T) boolean
        mask (default causal). ``return_attn`` computes every layer through attncore's
        materialised attention and returns its weights (B, H, T, T); otherwise the list is empty.
        """
        B, T = idx.shape
        if positions is None:
            positions = torch.arange(T, device=idx.device)
        cos, sin = self.angles(positions)  # (T, E/2)
        x = self.tok(idx)  # (B, T, D)
        if self.config.positions == "learned":
            x = x + self.pos(positions)
        x = _drop(x, self.config.dropout, self.training)
        maps: list[Tensor] = []
        for blk in self.blocks:
            x, w = blk(x, cos, sin, allowed, return_attn)
            if w is not None:
                maps.append(w)
        x = self.ln_f(x)
        return x @ self.tok.weight.t(), maps  # (B, T, V)
