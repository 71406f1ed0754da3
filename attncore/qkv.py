"""The query, key and value vectors of a real model's heads, captured from its own forward pass.

Shape legend: ``N`` layers, ``H`` heads, ``L`` queries, ``S`` keys (``S = L``: the text attends
to itself), ``E`` query/key head dim, ``Ev`` value head dim.

:func:`capture` runs the model once with forward hooks and keeps, for every layer and head,
the vectors the attention scores are made of (``q``, ``k``, after rotary positions in the
character model), the values ``v`` and the head's output exactly as the model computed it
(the merged heads before the output projection, split back per head). From those,

.. math:: w_{ij} = \\mathrm{softmax}_j\\big(q_i\\cdot k_j/\\sqrt{E} + m_{ij}\\big),\\qquad
          o_i = \\sum_j w_{ij}\\,v_j

(:meth:`HeadVectors.weights`, :meth:`HeadVectors.mix`) reproduce the model's own attention maps
and outputs, which ``tests/test_qkv.py`` checks against the model.

Models (one contract, :class:`HeadVectors`, for every architecture): BERT-style encoders whose
self-attention modules hold ``query``, ``key`` and ``value`` linear layers (the bundled
all-MiniLM-L6-v2 and most local BERT folders); Llama/Qwen-family decoders with grouped-query
attention (the bundled SmolLM2: ``q_proj``, ``k_proj``, ``v_proj``, ``o_proj``, rotary positions),
whose ``Hkv`` key/value heads are each shared by ``H / Hkv`` query heads: ``k`` and ``v`` are given
per query head (head ``h`` reads key/value head ``h // (H / Hkv)``, :meth:`HeadVectors.group`), after
rotary positions, as the scores see them; and the shipped causal character transformer
(:mod:`attncore.training`) with its standard attention.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from attncore.budget import check_bytes
from attncore.errors import AttnInputError
from attncore.models import LoadedModel, tokenize
from attncore.models.capture import attention_modules
from attncore.models.modules import exclusive, hooked_run
from attncore.models.tokens import display_tokens, tokenizer_kind
from attncore.training.inspect import MAX_INSPECT_CHARS, char_label, encode
from attncore.training.model import CharTransformer, apply_rotary

__all__ = ["CHAR_VARIANTS", "HeadVectors", "capture", "capture_bytes", "capture_char", "top_keys"]

# Character-model variants whose weights are softmax(q k^T * scale + causal mask) and whose
# merged-head output is exactly weights @ v (the others rescale, gate or add a sink term).
CHAR_VARIANTS = frozenset({"standard", "unscaled"})


@dataclass(frozen=True)
class HeadVectors:
    """Every head's q, k, v on one text and the output the model computed from them.

    Attributes:
        tokens: (L,) the tokens for display, as the attention maps label them (``TextAttention.tokens``).
        q: (N, H, L, E) float32 CPU, the queries as the scores see them.
        k: (N, H, S, E) float32 CPU, the keys.
        v: (N, H, S, Ev) float32 CPU, the values.
        output: (N, H, L, Ev) float32 CPU, each head's output as the model computed it
            (its slice of the merged heads before the output projection).
        scale: the factor on q·k (``1/sqrt(E)``; 1 for the unscaled character variant).
        causal: True when query i sees keys j <= i only.
        kv_heads: Hkv, the key/value heads (0: one per query head, no grouping).
    """

    tokens: tuple[str, ...]
    q: Tensor
    k: Tensor
    v: Tensor
    output: Tensor
    scale: float
    causal: bool
    kv_heads: int = 0

    @property
    def groups(self) -> int:
        """Query heads per key/value head (1 without grouped-query attention)."""
        return self.heads // self.kv_heads if self.kv_heads else 1

    def group(self, head: int) -> int:
        """The key/value head that query head ``head`` shares with its group (``head // groups``)."""
        return int(head) // self.groups

    @property
    def layers(self) -> int:
        """N."""
        return int(self.q.shape[0])

    @property
    def heads(self) -> int:
        """H."""
        return int(self.q.shape[1])

    def scores(self, layer: int) -> Tensor:
        """Scaled, masked scores q k^T * scale (H, L, S) of ``layer``, float64; masked cells -inf."""
        q = self.q[layer].double()  # (H, L, E)
        k = self.k[layer].double()  # (H, S, E)
        s = (q @ k.transpose(-2, -1)) * self.scale  # (H, L, S)
        if self.causal:
            L, S = s.shape[-2:]
            allowed = torch.ones(L, S, dtype=torch.bool).tril()
            s = s.masked_fill(~allowed, float("-inf"))
        return s

    def weights(self, layer: int) -> Tensor:
        """softmax of :meth:`scores` over the keys: (H, L, S) float64, rows sum to 1."""
        return torch.softmax(self.scores(layer), dim=-1)

    def mix(self, weights: Tensor, layer: int) -> Tensor:
        """``weights @ v``: (H, L, Ev) float64 for ``weights`` (H, L, S) of ``layer``."""
        return weights.double() @ self.v[layer].double()


def capture_bytes(layers: int, heads: int, L: int, E: int, Ev: int) -> int:
    """Bytes the captured vectors take: N x H x L x (2E + 2Ev) float32 (q, k, v, output), kept twice
    while the hooks copy them."""
    return 2 * 4 * layers * heads * L * (2 * E + 2 * Ev)


def top_keys(weights_row: Tensor, k: int) -> list[tuple[int, float]]:
    """The ``k`` keys with the largest weight in one row (S,): (key index, weight), largest first,
    ties by lower index."""
    w = weights_row.double()
    order = sorted(range(w.numel()), key=lambda j: (-float(w[j]), j))[: max(1, int(k))]
    return [(j, float(w[j])) for j in order]


def _self_attentions(model: nn.Module) -> list[nn.Module]:
    """The self-attention modules (with ``query``/``key``/``value`` linear layers) in layer order."""
    found = []
    for m in model.modules():
        if all(isinstance(getattr(m, name, None), nn.Linear) for name in ("query", "key", "value")) \
                and hasattr(m, "attention_head_size") and "Cross" not in type(m).__name__:
            found.append(m)
    return found


def _split(x: Tensor, heads: int) -> Tensor:
    """(1, L, H*E) -> (H, L, E) float32 CPU."""
    _, L, D = x.shape
    return x[0].reshape(L, heads, D // heads).transpose(0, 1).float().cpu().contiguous()


def _capture_bert(lm: LoadedModel, text: str, max_tokens: int | None = None) -> HeadVectors:
    mods = _self_attentions(lm.model)
    if len(mods) != lm.layers:
        raise AttnInputError(
            f"{lm.name}: q, k and v can be read from BERT-style encoders (self-attention with query, key "
            f"and value layers) and from the character transformer; this model has {len(mods)} such "
            f"layers for {lm.layers} attention layers."
        )
    enc = tokenize(lm, text, max_tokens)
    L = enc.length
    H = lm.heads
    E = int(mods[0].attention_head_size)
    check_bytes(capture_bytes(lm.layers, H, L, E, E), "the q, k and v vectors of every head",
                "Use a shorter text.")
    store: dict[tuple[int, str], Tensor] = {}

    def keep(layer: int, name: str) -> Callable[..., None]:
        def hook(_m: nn.Module, _inp: Any, out: Any) -> None:
            t = out[0] if isinstance(out, tuple) else out  # the attention module returns (output, weights)
            store[(layer, name)] = _split(t.detach(), H)

        return hook

    handles = []
    with exclusive(lm.model), hooked_run(lm.name, handles):
        for i, m in enumerate(mods):
            for name in ("query", "key", "value"):
                handles.append(getattr(m, name).register_forward_hook(keep(i, name)))
            handles.append(m.register_forward_hook(keep(i, "output")))
        dev = torch.device(lm.device)
        with torch.inference_mode():
            lm.model(**{k: v.to(dev) for k, v in enc.inputs.items()})
    stack = {name: torch.stack([store[(i, name)] for i in range(lm.layers)])
             for name in ("query", "key", "value", "output")}  # each (N, H, L, E)
    causal = bool(getattr(lm.model.config, "is_decoder", False))
    tokens = display_tokens(lm.tokenizer.convert_ids_to_tokens(enc.ids[0].tolist()),
                            tokenizer_kind(lm.tokenizer))
    return HeadVectors(tokens=tokens, q=stack["query"], k=stack["key"], v=stack["value"],
                       output=stack["output"], scale=1.0 / math.sqrt(E), causal=causal)


def capture_char(model: CharTransformer, text: str) -> HeadVectors:
    """:func:`capture` for the character transformer itself (``text``: vocabulary characters only)."""
    if model.config.variant not in CHAR_VARIANTS:
        raise AttnInputError(
            f"q, k and v are read from standard attention; this model uses the {model.config.variant} "
            "variant, whose weights are not a plain softmax of q·k."
        )
    if len(text) > MAX_INSPECT_CHARS:
        raise AttnInputError(f"the text has {len(text)} characters; the limit is {MAX_INSPECT_CHARS}.")
    ids = encode(model, text).to(model.device)
    c = model.config
    L, H, E = len(text), c.n_head, c.d_head
    check_bytes(capture_bytes(c.n_layer, H, L, E, E), "the q, k and v vectors of every head",
                "Use a shorter text.")
    store: dict[tuple[int, str], Tensor] = {}

    def qkv_hook(layer: int) -> Callable[..., None]:
        def hook(m: nn.Module, args: tuple[Any, ...]) -> None:
            x, cos, sin = args[0], args[1], args[2]  # the block's normalised input and rotary angles
            q, k, v = m.split_heads(x)  # each (1, H, L, E)
            store[(layer, "q")] = apply_rotary(q, cos, sin)[0].float().cpu()
            store[(layer, "k")] = apply_rotary(k, cos, sin)[0].float().cpu()
            store[(layer, "v")] = v[0].float().cpu()

        return hook

    def out_hook(layer: int) -> Callable[..., None]:
        def hook(_m: nn.Module, args: tuple[Any, ...]) -> None:
            store[(layer, "o")] = _split(args[0].detach(), H)  # merged heads (1, L, H*E) before proj

        return hook

    handles = []
    with exclusive(model):
        try:
            for i, blk in enumerate(model.blocks):
                handles.append(blk.attn.register_forward_pre_hook(qkv_hook(i)))
                handles.append(blk.attn.proj.register_forward_pre_hook(out_hook(i)))
            with torch.no_grad():
                model(ids[None], return_attn=True)
        finally:
            for h in handles:
                h.remove()
    stack = {name: torch.stack([store[(i, name)] for i in range(c.n_layer)]) for name in "qkvo"}
    scale = 1.0 if c.variant == "unscaled" else 1.0 / math.sqrt(E)
    return HeadVectors(tokens=tuple(char_label(ch) for ch in text), q=stack["q"], k=stack["k"], v=stack["v"],
                       output=stack["o"], scale=scale, causal=True)


def _capture_decoder(lm: LoadedModel, text: str, mods: list[nn.Module],
                     max_tokens: int | None = None) -> HeadVectors:
    """q, k (after rotary positions), v and each head's output of a Llama/Qwen-family decoder.

    Hooks read the projections' outputs (``q_norm`` / ``k_norm`` outputs where the family normalises
    q and k, as Qwen3 does), the rotary angles the attention module receives, and the merged heads
    entering ``o_proj``; rotary positions are applied with the family's own ``apply_rotary_pos_emb``.
    """
    enc = tokenize(lm, text, max_tokens)
    L, H, Hkv = enc.length, lm.heads, lm.kv_heads or lm.heads
    E = int(getattr(mods[0], "head_dim", 0) or lm.model.config.hidden_size // H)
    check_bytes(capture_bytes(lm.layers, H, L, E, E), "the q, k and v vectors of every head",
                "Use a shorter text.")
    family = sys.modules[type(mods[0]).__module__]
    rotate = getattr(family, "apply_rotary_pos_emb", None)
    if rotate is None:
        raise AttnInputError(f"{lm.name}: its attention has no rotary-position function to read q and k "
                             "with.")
    store: dict[tuple[int, str], Tensor] = {}

    def keep(layer: int, name: str) -> Callable[..., None]:
        def hook(_m: nn.Module, _inp: Any, out: Any) -> None:
            store[(layer, name)] = out.detach().reshape(1, L, -1, E).transpose(1, 2)  # (1, heads, L, E)

        return hook

    def angles(layer: int) -> Callable[..., None]:
        def hook(_m: nn.Module, _args: Any, kwargs: dict[str, Any]) -> None:
            store[(layer, "cos")], store[(layer, "sin")] = kwargs["position_embeddings"]

        return hook

    def merged(layer: int) -> Callable[..., None]:
        def hook(_m: nn.Module, args: tuple[Any, ...]) -> None:
            store[(layer, "o")] = _split(args[0].detach(), H)  # (H, L, E)

        return hook

    handles = []
    with exclusive(lm.model), hooked_run(lm.name, handles):
        for i, m in enumerate(mods):
            q_src = m.q_norm if isinstance(getattr(m, "q_norm", None), nn.Module) else m.q_proj
            k_src = m.k_norm if isinstance(getattr(m, "k_norm", None), nn.Module) else m.k_proj
            handles += [q_src.register_forward_hook(keep(i, "q")), k_src.register_forward_hook(keep(i, "k")),
                        m.v_proj.register_forward_hook(keep(i, "v")),
                        m.register_forward_pre_hook(angles(i), with_kwargs=True),
                        m.o_proj.register_forward_pre_hook(merged(i))]
        dev = torch.device(lm.device)
        with torch.inference_mode():
            lm.model(**{k: v.to(dev) for k, v in enc.inputs.items()}, logits_to_keep=1)
    groups = H // Hkv
    qs, ks, vs = [], [], []
    for i in range(lm.layers):
        # (1, H, L, E) and (1, Hkv, L, E)
        q, k = rotate(store[(i, "q")], store[(i, "k")], store[(i, "cos")], store[(i, "sin")])
        qs.append(q[0].float().cpu())
        ks.append(k[0].repeat_interleave(groups, dim=0).float().cpu())  # (H, L, E): head h reads h // groups
        vs.append(store[(i, "v")][0].repeat_interleave(groups, dim=0).float().cpu())
    tokens = display_tokens(lm.tokenizer.convert_ids_to_tokens(enc.ids[0].tolist()),
                            tokenizer_kind(lm.tokenizer))
    scale = float(getattr(mods[0], "scaling", 1.0 / math.sqrt(E)))
    return HeadVectors(tokens=tokens, q=torch.stack(qs), k=torch.stack(ks), v=torch.stack(vs),
                       output=torch.stack([store[(i, "o")] for i in range(lm.layers)]), scale=scale,
                       causal=True, kv_heads=Hkv)


def capture(lm: LoadedModel, text: str, max_tokens: int | None = None) -> HeadVectors:
    """Run ``lm`` once on ``text`` and keep every head's q, k, v and output.

    ``text`` is read as :func:`attncore.models.run_text` reads it (same cut and truncation to
    ``max_tokens``, so the tokens match its attention maps); for the character transformer it must hold only
    vocabulary characters (:func:`attncore.training.known_text`). Raises
    :class:`AttnInputError` for a model whose q, k and v cannot be read, and
    :class:`attncore.errors.ResourceLimitError` before running when the vectors would not fit.
    """
    if isinstance(lm.model, CharTransformer):
        return capture_char(lm.model, text)
    mods = attention_modules(lm.model)
    if mods and len(mods) == lm.layers:
        return _capture_decoder(lm, text, mods, max_tokens)
    return _capture_bert(lm, text, max_tokens)
