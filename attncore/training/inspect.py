"""Look inside a trained character model: next-character distribution, sampling, attention maps.

Shape legend: ``N`` layers, ``H`` heads, ``L`` characters of the text, ``V`` vocabulary.
"""

from __future__ import annotations

import math
import unicodedata
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from attncore.device import resolve_device
from attncore.errors import AttnInputError
from attncore.models import TextAttention
from attncore.models.modules import exclusive
from attncore.training.config import TrainConfig
from attncore.training.model import CharTransformer, apply_rotary, rotary_angles
from attncore.training.train import build_vocab, encode_text

__all__ = [
    "MAX_INSPECT_CHARS",
    "MAX_VIEW_CHARS",
    "KnownText",
    "QKStatistics",
    "attention_maps",
    "char_label",
    "encode",
    "generate",
    "init_qk_statistics",
    "known_text",
    "next_char_distribution",
    "qk_statistics",
    "text_attention",
]

MAX_INSPECT_CHARS = 1024  # attention maps: N x H x L x L weights are kept
MAX_VIEW_CHARS = 256  # characters the app's views read (4x the shipped model's training context)


def encode(model: CharTransformer, text: str) -> Tensor:
    """Token ids (L,) int64 of ``text`` in the model's vocabulary (unknown characters -> error)."""
    if not isinstance(text, str) or not text:
        raise AttnInputError("type at least one character.")
    return encode_text(text, model.vocab)


def _check_temperature(temperature: float) -> float:
    t = float(temperature)
    if not (math.isfinite(t) and 0.0 < t <= 10.0):
        raise AttnInputError(f"the temperature must lie in (0, 10]; got {temperature}.")
    return t


@torch.no_grad()
def next_char_probs(model: CharTransformer, text: str, temperature: float = 1.0) -> Tensor:
    """Probabilities (V,) float64 of the character after ``text`` at ``temperature``.

    The model reads the last ``context`` characters (the length it was trained on).
    """
    t = _check_temperature(temperature)
    ids = encode(model, text)[-model.config.context :].to(model.device)
    with exclusive(model):  # a shared model: another thread's capture hooks must not see this pass
        logits, _ = model(ids[None])
    return torch.softmax(logits[0, -1].double() / t, dim=-1).cpu()  # (V,)


def next_char_distribution(
    model: CharTransformer, text: str, temperature: float = 1.0
) -> list[tuple[str, float]]:
    """Every vocabulary character with its probability of coming next, most likely first."""
    p = next_char_probs(model, text, temperature)
    order = torch.argsort(p, descending=True, stable=True)
    return [(model.vocab[i], float(p[i])) for i in order.tolist()]


@torch.no_grad()
def generate(model: CharTransformer, prompt: str, n_chars: int, *, temperature: float = 1.0,
             seed: int = 0) -> str:
    """``n_chars`` (1..2000) characters sampled after ``prompt`` (seeded; a sliding context window)."""
    if not 1 <= int(n_chars) <= 2000:
        raise AttnInputError(f"generate 1 to 2000 characters; got {n_chars}.")
    t = _check_temperature(temperature)
    ids = encode(model, prompt).tolist()
    gen = torch.Generator(device="cpu")
    gen.manual_seed(int(seed))
    out = []
    ctx = model.config.context
    for _ in range(int(n_chars)):
        x = torch.tensor(ids[-ctx:], device=model.device)[None]
        with exclusive(model):
            logits, _ = model(x)
        p = torch.softmax(logits[0, -1].double().cpu() / t, dim=-1)
        nxt = int(torch.multinomial(p, 1, generator=gen))
        ids.append(nxt)
        out.append(model.vocab[nxt])
    return "".join(out)


@torch.no_grad()
def attention_maps(model: CharTransformer, text: str) -> Tensor:
    """Every layer's and head's causal attention weights for ``text``: (N, H, L, L) float32 CPU.

    Computed through attncore's materialised attention (the variant's own normaliser);
    entries above the diagonal are 0. ``text`` may be longer than the training context
    (rotary positions), up to :data:`MAX_INSPECT_CHARS` characters.
    """
    if isinstance(text, str) and len(text) > MAX_INSPECT_CHARS:
        raise AttnInputError(
            f"the text has {len(text)} characters; attention maps are limited to {MAX_INSPECT_CHARS}."
        )
    ids = encode(model, text).to(model.device)
    with exclusive(model):
        _, maps = model(ids[None], return_attn=True)
    return torch.stack([w[0] for w in maps]).float().cpu()  # (N, H, L, L)


# ---------------------------------------------------------------------------- text for the views


@dataclass(frozen=True)
class KnownText:
    """A user's text prepared for a character model.

    Attributes:
        text: the characters the model reads: those of its vocabulary, in order, at most
            ``limit`` of them (the first ones).
        unknown: the distinct characters outside the vocabulary that were dropped, in order
            of first appearance.
        n_unknown: how many characters were dropped for that reason (with repeats).
        cut: known characters past ``limit`` that were cut off the end.
        limit: the most characters kept.
    """

    text: str
    unknown: tuple[str, ...]
    n_unknown: int
    cut: int
    limit: int


def known_text(model: CharTransformer, text: str, limit: int = MAX_VIEW_CHARS) -> KnownText:
    """Drop the characters of ``text`` that are not in the model's vocabulary, keep the first ``limit``.

    Raises AttnInputError when the text is empty or has no character the model knows.
    """
    if not isinstance(text, str) or not text:
        raise AttnInputError("type at least one character.")
    if not 1 <= int(limit) <= MAX_INSPECT_CHARS:
        raise AttnInputError(f"the character limit must lie in 1..{MAX_INSPECT_CHARS}; got {limit}.")
    vocab = set(model.vocab)
    kept = "".join(c for c in text if c in vocab)
    unknown = tuple(dict.fromkeys(c for c in text if c not in vocab))
    if not kept:
        raise AttnInputError(
            f"none of the {len(text)} characters is in the model's vocabulary (the {len(model.vocab)} "
            "characters of the text it was trained on); type some plain English letters."
        )
    return KnownText(text=kept[: int(limit)], unknown=unknown, n_unknown=len(text) - len(kept),
                     cut=max(0, len(kept) - int(limit)), limit=int(limit))


_VISIBLE = {" ": "␣", "\n": "↵", "\t": "⇥", "\r": "␍"}


def char_label(c: str) -> str:
    """A character as an axis label: space, newline and other invisible characters made visible."""
    if c in _VISIBLE:
        return _VISIBLE[c]
    if not c.isprintable():
        return f"U+{ord(c):04X}"
    return c


def text_attention(model: CharTransformer, text: str) -> TextAttention:
    """Every causal attention map of ``model`` on ``text`` as a :class:`attncore.models.TextAttention`.

    ``text`` must hold only vocabulary characters (see :func:`known_text`), at most
    :data:`MAX_INSPECT_CHARS`. Tokens are the characters (:func:`char_label`); none is a
    special token; punctuation is Unicode category P*. ``attentions``: (N, H, L, L).
    """
    attn = attention_maps(model, text)  # (N, H, L, L)
    punct = torch.tensor([unicodedata.category(c).startswith("P") for c in text], dtype=torch.bool)
    return TextAttention(tokens=tuple(char_label(c) for c in text), attentions=attn, causal=True,
                         special=torch.zeros(len(text), dtype=torch.bool), punctuation=punct,
                         dropped=0, chars_cut=0, token_limit=MAX_INSPECT_CHARS)


@dataclass(frozen=True)
class QKStatistics:
    """Spread of the first layer's queries and keys on some texts (see :func:`qk_statistics`).

    Attributes:
        var_q, var_k: variance of one entry of q and of k (over texts, heads, positions, entries).
        var_dot: variance of the dot products q_i · k_j over every query-key pair of each text.
        d_head: the head dim E.
        n_dots: how many dot products ``var_dot`` is taken over.
    """

    var_q: float
    var_k: float
    var_dot: float
    d_head: int
    n_dots: int

    @property
    def dot_per_dim(self) -> float:
        """``var_dot / d_head``: 1 for independent unit-variance entries, ``var_q x var_k`` for
        independent entries of those variances."""
        return self.var_dot / self.d_head


@torch.no_grad()
def qk_statistics(model: CharTransformer, texts: list[str]) -> QKStatistics:
    """Variance of the first layer's q and k entries and of their dot products on ``texts``.

    The statement ``Var(q·k) = d`` holds for independent unit-variance entries; a model's q and
    k have the variance its weights give them (at initialisation, width D and weights
    N(0, σ²) after a LayerNorm: about ``D σ²`` per entry), and this measures it. Each text
    (at most the model's context, equal lengths) runs through the embedding and the first
    block's LayerNorm and q, k projection with rotary positions, as in training.
    """
    if not texts or len({len(t) for t in texts}) != 1:
        raise AttnInputError("give one text or several texts of the same length.")
    if len(texts[0]) > model.config.context or len(texts) > 64:
        raise AttnInputError(f"at most 64 texts of at most {model.config.context} characters.")
    ids = torch.stack([encode(model, t) for t in texts]).to(model.device)  # (B, L)
    L = ids.shape[1]
    blk = model.blocks[0]
    q, k, _ = blk.attn.split_heads(blk.ln1(model.tok(ids)))  # each (B, H, L, E)
    cos, sin = rotary_angles(torch.arange(L, device=ids.device), model.config.d_head)
    q, k = apply_rotary(q, cos, sin).double(), apply_rotary(k, cos, sin).double()
    dots = q @ k.transpose(-2, -1)  # (B, H, L, L)
    return QKStatistics(float(q.var()), float(k.var()), float(dots.var()), model.config.d_head, dots.numel())


def init_qk_statistics(config: TrainConfig | dict[str, Any], text: str, device: str | torch.device = "cpu",
                       windows: int = 8) -> QKStatistics:
    """:func:`qk_statistics` of a freshly initialised model (``config``'s seed, vocabulary of
    ``text``) on ``windows`` evenly spaced windows of ``text`` of the model's context length."""
    cfg = config if isinstance(config, TrainConfig) else TrainConfig.from_dict(config)
    vocab = build_vocab(text)
    T = cfg.context
    if len(text) < T:
        raise AttnInputError(f"the text needs at least {T} characters; it has {len(text)}.")
    gen = torch.Generator().manual_seed(cfg.seed)
    model = CharTransformer.create(cfg, vocab, gen).to(resolve_device(device)).eval()
    step = max((len(text) - T) // max(windows, 1), 1)
    return qk_statistics(model, [text[i * step : i * step + T] for i in range(windows)])
