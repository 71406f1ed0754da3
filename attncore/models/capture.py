"""Running text through a loaded model: tokens, and every attention map of one forward pass.

Shape legend: ``N`` layers, ``H`` heads, ``L`` tokens (queries and keys).

Attention weights come from transformers' eager attention with ``output_attentions=True``; the
same contract (:class:`TextAttention`) holds for every architecture: BERT-style encoders, local
folders, the bundled SmolLM2 decoder and the shipped character model
(:func:`attncore.training.text_attention`).
"""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from attncore.budget import check_limit, fmt_count
from attncore.errors import AttnInputError
from attncore.models.loading import MAX_MODEL_CELLS, MAX_TEXT_CHARS, LoadedModel, first_line

__all__ = ["TextAttention", "Tokenized", "run_text", "token_kinds", "tokenize"]


@dataclass(frozen=True)
class TextAttention:
    """Tokens of one text and every attention map of the model on it.

    Attributes:
        tokens: (L,) token strings as the tokenizer writes them.
        attentions: (N, H, L, L) float32 on the CPU; rows sum to 1 over the keys a query sees.
        causal: True when every map is lower triangular (a decoder).
        special: (L,) bool, special tokens ([CLS], [SEP], BOS, EOS, ...).
        punctuation: (L,) bool, tokens made only of punctuation.
        dropped: tokens cut off because the text was longer than ``token_limit``.
        chars_cut: characters cut off before tokenising (text over :data:`MAX_TEXT_CHARS`).
        token_limit: the limit that applied.
    """

    tokens: tuple[str, ...]
    attentions: Tensor
    causal: bool
    special: Tensor
    punctuation: Tensor
    dropped: int
    chars_cut: int
    token_limit: int

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


def run_text(lm: LoadedModel, text: str, max_tokens: int | None = None) -> TextAttention:
    """Tokenise ``text``, run the model once and return every attention map.

    Text longer than :data:`MAX_TEXT_CHARS` characters is cut first; token sequences
    longer than ``max_tokens`` (default and cap: ``lm.token_limit``) are truncated
    (special tokens kept) and :attr:`TextAttention.dropped` says how many tokens went.
    Raises :class:`AttnInputError` for empty text or a model that returns no attentions.
    """
    enc = tokenize(lm, text, max_tokens)
    L = enc.length
    check_limit(lm.layers * lm.heads * L * L, MAX_MODEL_CELLS, "layers × heads × tokens²",
                f"attention cells ({fmt_count(MAX_MODEL_CELLS * 4)}B in float32)", "Use a shorter text.")
    ids, tok = enc.ids, lm.tokenizer
    dev = torch.device(lm.device)
    inputs = {k: v.to(dev) for k, v in enc.inputs.items()}
    try:
        with torch.inference_mode():
            out = lm.model(**inputs, output_attentions=True)
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
    causal = L > 1 and bool((attn.triu(diagonal=1) == 0).all())
    id_list = ids[0].tolist()
    tokens = tuple(tok.convert_ids_to_tokens(id_list))
    structural = [i for i in tok.all_special_ids if i != tok.unk_token_id]  # [UNK] is text the model lacks
    special, punct = token_kinds(tokens, structural, id_list)
    return TextAttention(tokens=tokens, attentions=attn, causal=causal, special=special, punctuation=punct,
                         dropped=enc.dropped, chars_cut=enc.chars_cut, token_limit=enc.limit)
