"""The cache boundary for the real-model passes: a transformer loaded once per process (a bundled key or a
local folder) and its attention maps, head vectors, next-token logits and generations on a text; the shipped
causal character model; one head's logits taken apart (:func:`head_why`). Shared helpers in :mod:`ui.cached`.
"""

from __future__ import annotations

import streamlit as st
import torch

from attncore import models as _models
from attncore import qkv as _qkv
from attncore import training as _training
from attncore.decoder import why as _dec_why
from attncore.models import generation as _generation
from ui.cached import Timed, timed

__all__ = [
    "causal_attention",
    "causal_head_vectors",
    "causal_model",
    "causal_next_chars",
    "generation",
    "head_vectors",
    "head_why",
    "language_model",
    "next_logits",
    "text_attention",
    "token_count",
]


# --------------------------------------------------------------------------- a real model (Heatmaps, Sinks)


def language_model(source: str, device: str,
                   progress: _models.Progress | None = None) -> _models.LoadedModel:
    """A transformer for attention maps (a bundled key or a local folder), loaded once per process.

    The cache key is the resolved folder (:func:`attncore.models.canonical_source`), so every
    spelling of one folder shares one load. ``progress(fraction, message)`` follows a slow first
    load (SmolLM2's conversion); it is not part of the key.
    """
    return _language_model(_models.canonical_source(source), device, progress)


@st.cache_resource(max_entries=3, show_spinner="Loading the model (once per process)…")
def _language_model(canonical: str, device: str,
                    _progress: _models.Progress | None = None) -> _models.LoadedModel:
    if _progress is None:
        return _models.load_model(canonical, device)
    return _models.load_model(canonical, device, progress=_progress)


def text_attention(source: str, text: str, device: str,
                   layer: int | None = None) -> Timed[_models.TextAttention]:
    """The attention maps of the model ``source`` on ``text`` (the forward pass is timed), cached by
    (model, text): moving between layers, heads and tokens reuses it.

    ``layer`` None: every layer's maps, the text cut to the model's map limit. With ``layer``, a decoder
    reads up to its token limit; a text past the map limit keeps every head's summary and only this
    layer's maps (the cache key then holds the layer, so another layer runs another pass)."""
    canonical = _models.canonical_source(source)
    lm = _language_model(canonical, device)
    if layer is None or lm.token_limit <= lm.full_map_limit or \
            token_count(canonical, text, device) <= lm.full_map_limit:
        return _text_attention(canonical, text, device, None)
    return _text_attention(canonical, text, device, int(layer))


@st.cache_data(max_entries=64, show_spinner=False)
def token_count(canonical: str, text: str, device: str) -> int:
    """L, the tokens the model ``canonical`` reads of ``text`` (up to its token limit)."""
    return _models.tokenize(_language_model(canonical, device), text).length


@st.cache_resource(max_entries=6, show_spinner="Running the model…")
def _text_attention(canonical: str, text: str, device: str,
                    layer: int | None) -> Timed[_models.TextAttention]:
    lm = _language_model(canonical, device)
    if layer is None:
        return timed(lambda: _models.run_text(lm, text, max_tokens=lm.full_map_limit))
    return timed(lambda: _models.run_text(lm, text, layers=(layer,)))


def head_vectors(source: str, text: str, device: str,
                 max_tokens: int | None = None) -> Timed[_qkv.HeadVectors]:
    """Every head's q, k, v and output of the model ``source`` on ``text`` (one hooked forward pass), the
    text cut to ``max_tokens`` as the maps shown beside it were."""
    return _head_vectors(_models.canonical_source(source), text, device, max_tokens)


@st.cache_resource(max_entries=4, show_spinner=False)
def _head_vectors(canonical: str, text: str, device: str, max_tokens: int | None) -> Timed[_qkv.HeadVectors]:
    lm = _language_model(canonical, device)
    return timed(lambda: _qkv.capture(lm, text, max_tokens))


@st.cache_resource(max_entries=8, show_spinner=False)
def next_logits(source: str, text: str, device: str) -> Timed[torch.Tensor]:
    """(V,) the logits of the token after ``text`` (a bundled or local decoder)."""
    lm = _language_model(_models.canonical_source(source), device)
    return timed(lambda: _generation.next_logits(lm, text))


@st.cache_resource(max_entries=8, show_spinner="Generating…")
def generation(source: str, text: str, n_new: int, greedy: bool, temperature: float, seed: int,
               device: str) -> Timed[_generation.Generation]:
    """Up to ``n_new`` tokens after ``text`` and the attention of every step (greedy, or sampled from
    ``seed``)."""
    lm = _language_model(_models.canonical_source(source), device)
    return timed(lambda: _generation.generate(lm, text, n_new, greedy=greedy, temperature=temperature,
                                              seed=seed))


# --------------------------------------------------------------- the shipped causal model (Heatmaps, Sinks)


@st.cache_resource(max_entries=2, show_spinner=False)
def causal_model(device: str) -> Timed[_training.CharTransformer]:
    """The shipped character transformer (a causal decoder), loaded once per process and device."""
    return timed(lambda: _training.load_shipped_model(device))


@st.cache_resource(max_entries=6, show_spinner=False)
def causal_attention(text: str, device: str) -> Timed[_models.TextAttention]:
    """Every causal attention map of the shipped model on ``text`` (vocabulary characters only)."""
    model = causal_model(device).value
    return timed(lambda: _training.text_attention(model, text))


@st.cache_resource(max_entries=4, show_spinner=False)
def causal_head_vectors(text: str, device: str) -> Timed[_qkv.HeadVectors]:
    """Every head's q, k, v and output of the shipped character model on ``text`` (vocabulary only)."""
    model = causal_model(device).value
    return timed(lambda: _qkv.capture_char(model, text))


@st.cache_data(max_entries=32, show_spinner=False)
def causal_next_chars(text: str, temperature: float, device: str) -> Timed[list[tuple[str, float]]]:
    """Every character with its probability of following ``text`` at ``temperature``, most likely first."""
    model = causal_model(device).value
    return timed(lambda: _training.next_char_distribution(model, text, temperature))



def head_why(source: str, text: str, device: str, max_tokens: int | None, layer: int, head: int,
             query: int) -> Timed[tuple[_dec_why.HeadWhy, _dec_why.SinkWhy | None]]:
    """One query's logits of one head taken apart (issue 40 item 1), from the cached q and k of
    :func:`head_vectors` (no new forward), and the first token's summary (None at query 0)."""
    return _head_why(_models.canonical_source(source), text, device, max_tokens, layer, head, query)


@st.cache_resource(max_entries=16, show_spinner=False)
def _head_why(canonical: str, text: str, device: str, max_tokens: int | None, layer: int, head: int,
              query: int) -> Timed[tuple[_dec_why.HeadWhy, _dec_why.SinkWhy | None]]:
    hv = _head_vectors(canonical, text, device, max_tokens).value
    lm = _language_model(canonical, device)

    def run() -> tuple[_dec_why.HeadWhy, _dec_why.SinkWhy | None]:
        rot = _dec_why.rotary_of(lm.model, len(hv.tokens))
        q, k = hv.q[layer, head], hv.k[layer, head]
        why = _dec_why.decompose(q, k, rot, query, scale=hv.scale)
        return why, (_dec_why.sink_summary(q, k, why) if query >= 1 else None)

    return timed(run)
