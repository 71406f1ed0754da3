"""The cache boundary for the real-model passes: a transformer loaded once per process (a bundled key or a
local folder) and its attention maps, head vectors, next-token logits and generations on a text; the shipped
causal character model; one head's logits taken apart (:func:`head_why`). Shared helpers in :mod:`ui.cached`.
"""

from __future__ import annotations

from typing import Any

import streamlit as st
import torch

from attncore import models as _models
from attncore import qkv as _qkv
from attncore import training as _training
from attncore.decoder import lens as _dec_lens
from attncore.decoder import plans as _plans
from attncore.decoder import why as _dec_why
from attncore.models import generation as _generation
from attncore.plan import Plan
from ui.cached import Planned, Timed, timed

__all__ = [
    "causal_attention",
    "causal_head_vectors",
    "causal_model",
    "causal_next_chars",
    "generation",
    "head_vectors",
    "head_why",
    "language_model",
    "logit_lens",
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


def text_attention(source: str, text: str, device: str, layer: int | None = None,
                   where: Any = None) -> Timed[_models.TextAttention]:
    """The attention maps of the model ``source`` on ``text`` (the forward pass is timed), cached by
    (model, text): moving between layers, heads and tokens reuses it.

    ``layer`` None: every layer's maps, the text cut to the model's map limit. With ``layer``, a decoder
    reads up to its token limit; a text past the map limit keeps every head's summary and only this
    layer's maps (the cache key then holds the layer, so another layer runs another pass)."""
    canonical = _models.canonical_source(source)
    lm = _language_model(canonical, device)
    if layer is None or lm.token_limit <= lm.full_map_limit or \
            token_count(canonical, text, device) <= lm.full_map_limit:
        return _text_attention(canonical, text, device, None, where=where)
    return _text_attention(canonical, text, device, int(layer), where=where)


@st.cache_data(max_entries=64, show_spinner=False)
def token_count(canonical: str, text: str, device: str) -> int:
    """L, the tokens the model ``canonical`` reads of ``text`` (up to its token limit)."""
    return _models.tokenize(_language_model(canonical, device), text).length


def _text_plan(canonical: str, text: str, device: str, layer: int | None) -> Plan[_models.TextAttention]:
    lm = _language_model(canonical, device)
    if layer is None:
        return _plans.text_plan(lm, text, max_tokens=lm.full_map_limit)
    return _plans.text_plan(lm, text, layers=(layer,))


_text_attention = Planned("text_attention", _text_plan)


def head_vectors(source: str, text: str, device: str, max_tokens: int | None = None,
                 where: Any = None) -> Timed[_qkv.HeadVectors]:
    """Every head's q, k, v and output of the model ``source`` on ``text`` (one hooked forward pass), the
    text cut to ``max_tokens`` as the maps shown beside it were."""
    return _head_vectors(_models.canonical_source(source), text, device, max_tokens, where=where)


def _head_vectors_plan(canonical: str, text: str, device: str,
                       max_tokens: int | None) -> Plan[_qkv.HeadVectors]:
    return _plans.qkv_plan(_language_model(canonical, device), text, max_tokens)


_head_vectors = Planned("head_vectors", _head_vectors_plan)


_next_logits = Planned("next_logits", lambda canonical, text, device: _plans.next_logits_plan(
    _language_model(canonical, device), text))


def next_logits(source: str, text: str, device: str, where: Any = None) -> Timed[torch.Tensor]:
    """(V,) the logits of the token after ``text`` (a bundled or local decoder)."""
    return _next_logits(_models.canonical_source(source), text, device, where=where)


def _generation_plan(canonical: str, text: str, n_new: int, greedy: bool, temperature: float, seed: int,
                     device: str) -> Plan[_generation.Generation]:
    lm = _language_model(canonical, device)
    return _plans.generation_plan(lm, text, n_new, greedy=greedy, temperature=temperature, seed=seed)


_generation_planned = Planned("generation", _generation_plan)


def _lens_plan(canonical: str, text: str, device: str, position: int,
               max_tokens: int) -> Plan[_dec_lens.LensPass]:
    lm = _language_model(canonical, device)
    return _plans.lens_plan(lm.model, _models.tokenize(lm, text, max_tokens).ids, position)


_logit_lens = Planned("logit_lens", _lens_plan)


def logit_lens(source: str, text: str, device: str, position: int,
               max_tokens: int) -> Timed[_dec_lens.LensPass]:
    """The logit lens and direct logit attribution of token ``position`` of ``text`` (cut to ``max_tokens``,
    as the maps beside it were): one hooked pass of the decoder ``source``, admitted by its plan."""
    return _logit_lens(_models.canonical_source(source), text, device, position, max_tokens)


def generation(source: str, text: str, n_new: int, greedy: bool, temperature: float, seed: int,
               device: str, where: Any = None) -> Timed[_generation.Generation]:
    """Up to ``n_new`` tokens after ``text`` and the attention of every step (greedy, or sampled from
    ``seed``); admitted by its plan."""
    return _generation_planned(_models.canonical_source(source), text, n_new, greedy, temperature, seed,
                               device, where=where)


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
