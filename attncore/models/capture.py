"""Running text through a loaded model: tokens, and every attention map of one forward pass.

Shape legend: ``N`` layers, ``H`` heads, ``L`` tokens (queries and keys).

Attention weights come from transformers' eager attention with ``output_attentions=True``; the
same contract (:class:`TextAttention`) holds for every architecture: BERT-style encoders, local
folders, the bundled SmolLM2 decoder and the shipped character model
(:func:`attncore.training.text_attention`).
"""

from __future__ import annotations

import inspect
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from attncore.budget import check_bytes, check_limit, fmt_count
from attncore.errors import AttnInputError
from attncore.models.loading import MAX_MODEL_CELLS, MAX_TEXT_CHARS, LoadedModel, first_line
from attncore.models.modules import attention_implementation, attention_modules, exclusive, hooked_run
from attncore.models.tokens import display_tokens, tokenizer_kind

__all__ = ["PASS_OVERHEAD_BYTES", "THUMB", "HeadSummary", "TextAttention", "Tokenized", "attention_modules",
           "decoder_pass_bytes", "row_entropy", "run_text", "summary_of",
           "summarize", "token_kinds", "tokenize"]

# What one forward pass of a model makes resident whatever its length, beyond the tensors the estimates count:
# the matrix library's per-thread packing buffers and the allocator's arena growth (measured 4-10 MB above the
# counted tensors at 64 tokens by tests/plan_peaks.py, SmolLM2 on a CPU). Every pass estimate adds it once.
PASS_OVERHEAD_BYTES = 16 * 1024**2
THUMB = 24  # side of the block-mean thumbnail of every head kept for the layers x heads overview


@dataclass(frozen=True)
class HeadSummary:
    """Per-head numbers of every layer, kept even when the maps themselves are not.

    Attributes:
        first: (N, H) mean weight on key 0 over the queries (Gu et al.'s first-token score).
        previous: (N, H) mean weight on key i - 1 over the queries i >= 1 (1 query: 0).
        entropy: (N, H) mean entropy of a query's weights, nats.
        max_weight: (N, H) mean of each query's largest weight.
        thumbs: (N, H, T, T) each map as T x T block means (T = min(:data:`THUMB`, L)): what the
            layers x heads overview draws.
    """

    first: Tensor
    previous: Tensor
    entropy: Tensor
    max_weight: Tensor
    thumbs: Tensor


ROW_BLOCK = 64  # rows per block of :func:`row_entropy` (a block's products stay in the CPU's cache)
_TINY = torch.finfo(torch.float32).tiny


def row_entropy(w: Tensor, causal: bool = False, rest: bool = False,
                block: int = ROW_BLOCK) -> tuple[Tensor, Tensor | None]:
    """Entropy -Σ_j p_j ln p_j (nats) of every row of ``w`` (..., L, S) float32: (..., L), and with
    ``rest`` the sum Σ_{j>0} p_j ln p_j over the keys after key 0 (..., L) (else None).

    Computed ``block`` rows at a time; with ``causal`` (L = S and nothing above the diagonal) a block of
    rows r0..r1-1 reads only keys 0..r1-1, half the work. ``p ln p`` is taken as ``p ln max(p, tiny)``:
    exactly 0 for p = 0, and for subnormal p off by at most p x 87, below float32's resolution of the sum.
    """
    *lead, L, S = w.shape
    ent = torch.empty(*lead, L, dtype=w.dtype, device=w.device)
    rst = torch.empty_like(ent) if rest else None
    for r0 in range(0, L, block):
        r1 = min(L, r0 + block)
        p = w[..., r0:r1, : (min(r1, S) if causal else S)]  # (..., rows, keys)
        t = p.clamp_min(_TINY)
        t.log_()
        t.mul_(p)  # p ln p
        ent[..., r0:r1] = -t.sum(dim=-1)
        if rst is not None:
            rst[..., r0:r1] = t[..., 1:].sum(dim=-1)
    return ent, rst


def summarize(w: Tensor, thumb: int = THUMB,
              causal: bool = False) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """(first, previous, entropy, max_weight, thumbs) of one layer's maps ``w`` (H, L, S), float32 CPU:
    four (H,) vectors and (H, T, T) block means (see :class:`HeadSummary`). ``causal``: nothing above
    the diagonal (a decoder's maps), which halves the entropy's work."""
    w = w.float()
    H, L, S = w.shape
    first = w[:, :, 0].mean(-1)  # (H,)
    prev = w[:, 1:, :].diagonal(dim1=-2, dim2=-1).mean(-1) if L > 1 else torch.zeros(H, device=w.device)
    ent = row_entropy(w, causal=causal and L == S)[0].mean(-1)  # (H,)
    mx = w.amax(-1).mean(-1)  # (H,)
    T = min(thumb, L, S)
    thumbs = torch.nn.functional.adaptive_avg_pool2d(w[None], (T, T))[0]  # (H, T, T)
    return tuple(t.cpu() for t in (first, prev, ent, mx, thumbs))  # type: ignore[return-value]


def _stack_summary(rows: list[tuple[Tensor, ...]]) -> HeadSummary:
    parts = [torch.stack([r[i] for r in rows]) for i in range(5)]
    return HeadSummary(first=parts[0], previous=parts[1], entropy=parts[2], max_weight=parts[3],
                       thumbs=parts[4])


def summary_of(att: TextAttention) -> HeadSummary:
    """``att.summary``, or computed from its maps (every layer kept) for a model that gave none."""
    if att.summary is not None:
        return att.summary
    return _stack_summary([summarize(att.attentions[n]) for n in range(att.attentions.shape[0])])


def decoder_pass_bytes(lm: LoadedModel, L: int, kept_layers: int, copies: int = 1) -> int:
    """Peak bytes of one forward pass that keeps ``kept_layers`` layers' maps: the maps kept
    (N_kept x H x L^2 float32, ``copies`` times: 2 where transformers returns them and they are then
    stacked), one layer's scores, weights and softmax temporary (3 x H x L^2), the activations (about
    16 x L x width floats) and :data:`PASS_OVERHEAD_BYTES`; the model's weights already in memory excluded."""
    cfg = lm.model.config
    width = int(getattr(cfg, "hidden_size", 0) or getattr(cfg, "n_embd", 0) or 1024)
    per_map = lm.heads * L * L * 4
    return copies * kept_layers * per_map + 3 * per_map + 16 * L * width * 4 + PASS_OVERHEAD_BYTES


@dataclass(frozen=True)
class TextAttention:
    """Tokens of one text and every attention map of the model on it.

    Attributes:
        tokens: (L,) the tokens for display (:func:`attncore.models.tokens.display_tokens`: ``␣head``,
            ``↵``, split bytes decoded), one per position.
        attentions: (N, H, L, L) float32 on the CPU; rows sum to 1 over the keys a query sees. For a
            decoder text past the model's ``map_limit``: (len(kept), H, L, L), the layers in ``kept``.
        causal: True when every map is lower triangular (a decoder).
        special: (L,) bool, special tokens ([CLS], [SEP], BOS, EOS, ...).
        punctuation: (L,) bool, tokens made only of punctuation.
        dropped: tokens cut off because the text was longer than ``token_limit``.
        chars_cut: characters cut off before tokenising (text over :data:`MAX_TEXT_CHARS`).
        token_limit: the limit that applied.
        kept: None when every layer's maps are kept, else the layers :attr:`attentions` holds.
        summary: per-head numbers and thumbnails of every layer (:class:`HeadSummary`).
        raw_tokens: (L,) the tokens as the tokenizer writes them (``Ġhead``, ``Ċ``); empty when the
            display form is the raw form (the character model).
    """

    tokens: tuple[str, ...]
    attentions: Tensor
    causal: bool
    special: Tensor
    punctuation: Tensor
    dropped: int
    chars_cut: int
    token_limit: int
    kept: tuple[int, ...] | None = None
    summary: HeadSummary | None = None
    raw_tokens: tuple[str, ...] = ()

    @property
    def layers(self) -> int:
        """N, the model's layers (those with a summary; every layer when all maps are kept)."""
        return int(self.summary.first.shape[0]) if self.summary is not None else int(self.attentions.shape[0])

    @property
    def all_maps(self) -> bool:
        """True when :attr:`attentions` holds every layer (index = layer)."""
        return self.kept is None

    def maps(self, layer: int) -> Tensor:
        """(H, L, L) maps of ``layer``; :class:`AttnInputError` for a layer whose maps were not kept."""
        if self.kept is None:
            return self.attentions[layer]
        if layer not in self.kept:
            raise AttnInputError(f"layer {layer}'s maps were not kept for this long text (only "
                                 f"{', '.join(map(str, self.kept))}); its per-head summary was.")
        return self.attentions[self.kept.index(layer)]

    @property
    def allowed(self) -> Tensor | None:
        """(L, L) bool mask of the keys each query sees (None for an encoder: all)."""
        if not self.causal:
            return None
        L = len(self.tokens)
        return torch.ones(L, L, dtype=torch.bool).tril()

    def categories(self) -> dict[str, Tensor]:
        """Key sets where sinks are looked for: name -> (L,) bool.

        ``first``: position 0 (``[CLS]`` in BERT, BOS or just the first token in a
        decoder); ``special``: the other special tokens (``[SEP]``, EOS);
        ``punct``: punctuation. :meth:`category_labels` names them for display.
        """
        first = torch.zeros(len(self.tokens), dtype=torch.bool)
        first[0] = True
        return {"first": first, "special": self.special & ~first, "punct": self.punctuation & ~first}

    def category_labels(self) -> dict[str, str]:
        """Display names of :meth:`categories`, e.g. ``[CLS]``, ``[SEP]``, ``punctuation``."""
        others = sorted({t for t, s in zip(self.tokens[1:], self.special[1:].tolist(), strict=True) if s})
        first = self.tokens[0] if bool(self.special[0]) else f"first token ({self.tokens[0]})"
        return {"first": first, "special": " ".join(others) or "other special tokens",
                "punct": "punctuation"}


def _is_punctuation(token: str) -> bool:
    core = token.removeprefix("##").lstrip("Ġ▁ ").strip()
    return bool(core) and all(unicodedata.category(c).startswith("P") for c in core)


def token_kinds(tokens: Sequence[str], special_ids: Sequence[int],
                ids: Sequence[int]) -> tuple[Tensor, Tensor]:
    """(special, punctuation): two (L,) boolean masks for the tokens of one text.

    A special token has an id in ``special_ids``; a punctuation token is made only of
    Unicode punctuation (wordpiece ``##`` and BPE space markers ignored).
    """
    special_set = set(int(i) for i in special_ids)
    special = torch.tensor([int(i) in special_set for i in ids], dtype=torch.bool)
    punct = torch.tensor([(not s) and _is_punctuation(t) for t, s in zip(tokens, special.tolist(),
                                                                           strict=True)],
                         dtype=torch.bool)
    return special, punct


@dataclass(frozen=True)
class Tokenized:
    """One text as a model reads it (the input of :func:`run_text` and :func:`attncore.qkv.capture`).

    Attributes:
        ids: (1, L) int64 token ids on the CPU.
        inputs: every tensor the tokenizer returned (``input_ids``, ``attention_mask``, ...), CPU.
        dropped: tokens cut off past ``limit``; chars_cut: characters cut before tokenising.
        limit: the token limit that applied.
    """

    ids: Tensor
    inputs: dict[str, Tensor]
    dropped: int
    chars_cut: int
    limit: int

    @property
    def length(self) -> int:
        """L, the tokens the model reads."""
        return int(self.ids.shape[-1])


def tokenize(lm: LoadedModel, text: str, max_tokens: int | None = None) -> Tokenized:
    """``text`` cut to :data:`MAX_TEXT_CHARS` characters and tokenised, truncated to ``max_tokens``
    (default and cap: ``lm.token_limit``; special tokens kept).

    Raises :class:`AttnInputError` for empty text, text the tokenizer cannot read, or text that
    gives only special tokens.
    """
    if not isinstance(text, str) or not text.strip():
        raise AttnInputError("type some text: the model needs at least one word to attend over.")
    limit = lm.token_limit if max_tokens is None else max(2, min(int(max_tokens), lm.token_limit))
    chars_cut = max(0, len(text) - MAX_TEXT_CHARS)
    text = text[:MAX_TEXT_CHARS]
    tok = lm.tokenizer
    try:
        full = tok(text, add_special_tokens=True, truncation=False, verbose=False)["input_ids"]
        enc = tok(text, add_special_tokens=True, truncation=True, max_length=limit, return_tensors="pt")
    except Exception as exc:
        raise AttnInputError(f"the tokenizer could not read this text: {first_line(exc)}") from exc
    ids = enc["input_ids"]  # (1, L)
    if ids.shape[-1] == 0:
        raise AttnInputError("the text gave no tokens; type some words.")
    structural_ids = set(tok.all_special_ids) - {tok.unk_token_id}
    if structural_ids and all(int(i) in structural_ids for i in ids[0].tolist()):
        raise AttnInputError("the text gave only special tokens; type some words.")
    inputs = {k: v for k, v in enc.items() if isinstance(v, Tensor)}
    return Tokenized(ids=ids, inputs=inputs, dropped=max(0, len(full) - ids.shape[-1]), chars_cut=chars_cut,
                     limit=limit)


def run_text(lm: LoadedModel, text: str, max_tokens: int | None = None,
             layers: tuple[int, ...] | None = None) -> TextAttention:
    """Tokenise ``text``, run the model once and return its attention maps with a per-head summary.

    Text longer than :data:`MAX_TEXT_CHARS` characters is cut first; token sequences
    longer than ``max_tokens`` (default and cap: ``lm.token_limit``) are truncated
    (special tokens kept) and :attr:`TextAttention.dropped` says how many tokens went.
    Up to ``lm.map_limit`` tokens every layer's maps are kept (``layers`` is ignored); past it (a
    decoder reads up to ``lm.token_limit``) only the maps of ``layers`` (default: layer 0) are kept,
    and every head's :class:`HeadSummary` is computed layer by layer inside the forward pass, so the
    maps not shown are never held together. Memory is estimated before running.
    Raises :class:`AttnInputError` for empty text or a model that returns no attentions.
    """
    enc = tokenize(lm, text, max_tokens)
    L = enc.length
    keep_all = lm.full_map_limit >= L
    if keep_all:
        check_limit(lm.layers * lm.heads * L * L, MAX_MODEL_CELLS, "layers × heads × tokens²",
                    f"attention cells ({fmt_count(MAX_MODEL_CELLS * 4)}B in float32)", "Use a shorter text.")
        kept = None
    else:
        kept = tuple(sorted({int(x) for x in (layers or (0,))}))
        if any(not 0 <= x < lm.layers for x in kept):
            raise AttnInputError(f"{lm.name} has layers 0–{lm.layers - 1}; asked for {kept}.")
    # a Llama/Qwen-family decoder's maps are caught layer by layer by hooks, each summarised and copied
    # once into the result; another model's come back from ``output_attentions`` and are then stacked
    hooked = len(attention_modules(lm.model)) == lm.layers
    check_bytes(decoder_pass_bytes(lm, L, lm.layers if keep_all else len(kept or ()), 1 if hooked else 2),
                f"one pass of {lm.name} over {L} tokens", "Use a shorter text.")
    ids, tok = enc.ids, lm.tokenizer
    dev = torch.device(lm.device)
    inputs = {k: v.to(dev) for k, v in enc.inputs.items()}
    if hooked:
        attn, summary = _kept_maps(lm, inputs, tuple(range(lm.layers)) if keep_all else (kept or (0,)))
        causal = L > 1
    elif keep_all:
        attn = _all_maps(lm, inputs, L)
        # a decoder's maps are causal at every layer, an encoder's at none: layer 0 tells which
        causal = L > 1 and bool((attn[0].triu(diagonal=1) == 0).all())
        summary = _stack_summary([summarize(attn[n], causal=causal) for n in range(attn.shape[0])])
    else:
        raise AttnInputError(f"{lm.name}: long texts (past {lm.full_map_limit} tokens) are read from "
                             "Llama/Qwen-family decoders only; use a shorter text.")
    id_list = ids[0].tolist()
    raw = tuple(str(t) for t in tok.convert_ids_to_tokens(id_list))
    structural = [i for i in tok.all_special_ids if i != tok.unk_token_id]  # [UNK] is text the model lacks
    special, punct = token_kinds(raw, structural, id_list)
    return TextAttention(tokens=display_tokens(raw, tokenizer_kind(tok)), attentions=attn, causal=causal,
                         special=special, punctuation=punct, dropped=enc.dropped, chars_cut=enc.chars_cut,
                         token_limit=enc.limit, kept=kept, summary=summary, raw_tokens=raw)


def _forward_kwargs(model: nn.Module) -> dict[str, Any]:
    """``logits_to_keep=1`` for a causal LM that accepts it (the maps need no (L, V) logits)."""
    try:
        params = inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        return {}
    return {"logits_to_keep": 1} if "logits_to_keep" in params else {}


def _all_maps(lm: LoadedModel, inputs: dict[str, Tensor], L: int) -> Tensor:
    """(N, H, L, L) float32 CPU: every map, from ``output_attentions``."""
    try:
        with exclusive(lm.model), torch.inference_mode():
            out = lm.model(**inputs, output_attentions=True, **_forward_kwargs(lm.model))
    except Exception as exc:
        raise AttnInputError(f"{lm.name} could not run on this text: {first_line(exc)}") from exc
    atts = getattr(out, "attentions", None)
    if not atts or any(a is None for a in atts):
        raise AttnInputError(f"{lm.name} does not return attention weights (output_attentions).")
    try:
        attn = torch.stack([a[0] for a in atts]).float().cpu()  # (N, H, L, L)
    except RuntimeError as exc:
        raise AttnInputError(f"{lm.name} returns attention maps of different shapes: {exc}") from exc
    if attn.dim() != 4 or attn.shape[-1] != L or attn.shape[-2] != L:
        raise AttnInputError(f"{lm.name} returned attentions of shape {tuple(attn.shape)}, not (N, H, L, L).")
    return attn


def _kept_maps(lm: LoadedModel, inputs: dict[str, Tensor],
               kept: tuple[int, ...]) -> tuple[Tensor, HeadSummary]:
    """Maps of the ``kept`` layers and every layer's summary, one layer at a time inside the pass (each
    attention module returns its (1, H, L, L) weights to a hook that summarises them and drops them)."""
    mods = attention_modules(lm.model)
    L = int(inputs["input_ids"].shape[-1])
    rows: dict[int, tuple[Tensor, ...]] = {}
    maps = torch.empty(len(kept), lm.heads, L, L)  # (len(kept), H, L, L): each kept map copied in once
    slot = {layer: j for j, layer in enumerate(kept)}

    def hook(layer: int) -> Any:
        def fn(_m: nn.Module, _args: Any, out: Any) -> Any:
            w = out[1]
            if w is None:
                raise AttnInputError(f"{lm.name} does not return attention weights (eager attention).")
            w = w[0].detach()  # (H, L, L)
            rows[layer] = summarize(w, causal=True)  # the Llama family: causal maps
            if layer in slot:
                maps[slot[layer]].copy_(w)
            return (out[0], None)  # the decoder layer drops the weights anyway

        return fn

    with exclusive(lm.model), attention_implementation(lm.model, "eager"):
        handles = [m.register_forward_hook(hook(i)) for i, m in enumerate(mods)]
        with hooked_run(lm.name, handles), torch.inference_mode():
            lm.model(**inputs, **_forward_kwargs(lm.model))
    return maps, _stack_summary([rows[i] for i in range(lm.layers)])
