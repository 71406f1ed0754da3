"""The cache boundary for the real decoder's measurements (SmolLM2: sink heads, first-token variants and
ablations, deletion, Gu et al.'s inputs, induction, entropy by position), keyed by the text's digest
(:func:`text_key`). Shared helpers in :mod:`ui.cached`.
"""

from __future__ import annotations

import hashlib

import streamlit as st
import torch

from attncore import models as _models
from attncore.decoder import entropy as _dec_entropy
from attncore.decoder import induction as _dec_induction
from attncore.decoder import position as _dec_position
from attncore.decoder import probe as _dec_probe
from attncore.decoder import sinks as _dec_sinks
from attncore.decoder import stream_run as _dec_stream_run
from attncore.decoder import streaming as _dec_stream
from attncore.decoder import text as _dec_text
from ui.cached import Timed, timed
from ui.cached_models import language_model

__all__ = [
    "decoder_ablations",
    "decoder_deletion",
    "decoder_entropy",
    "decoder_gu_inputs",
    "decoder_induction",
    "decoder_induction_ablation",
    "decoder_sinks",
    "decoder_tokens",
    "decoder_variants",
    "INDUCTION_SETS",
    "shipped_ids",
    "shipped_stream_run",
    "text_key",
]


# --------------------------------------------------------------------------- a real decoder (SmolLM2)


def text_key(text: str | None) -> str:
    """The cache key of a decoder text: ``"shipped"`` for the shipped text (None), else the SHA-256 of the
    text (a typed text is up to 20,000 characters; its digest keys the cache, the text itself is passed
    unhashed beside it)."""
    if text is None:
        return "shipped"
    return "sha256:" + hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def _smollm2_tokens(L: int, device: str, text: str | None = None,
                    ) -> tuple[_models.LoadedModel, _dec_text.TextTokens]:
    """SmolLM2 and the first ``L`` tokens (or all, when fewer) of ``text`` (None: the shipped text)."""
    lm = language_model("smollm2", device)
    if text is None:
        return lm, _dec_text.text_tokens(lm.tokenizer, _dec_text.shipped_text(), L, min_tokens=2)
    return lm, _dec_text.text_tokens(lm.tokenizer, text, L)


def _smollm2_ids(L: int, device: str) -> tuple[_models.LoadedModel, torch.Tensor, list[str]]:
    """SmolLM2 and the first ``L`` tokens of the shipped text (ids (1, L) on the CPU, token texts)."""
    lm, tt = _smollm2_tokens(L, device)
    return lm, tt.ids, list(tt.texts)


@st.cache_resource(max_entries=1, show_spinner=False)
def shipped_stream_run() -> _dec_stream_run.StreamRun:
    """The StreamingLLM run shipped with the package (2,048 tokens, 16 settings), read once per process;
    raises :class:`AttnInputError` when its file is missing."""
    return _dec_stream_run.load_stream_run()


@st.cache_resource(max_entries=4, show_spinner=False)
def shipped_ids(L: int, device: str) -> torch.Tensor:
    """(1, L) ids of the shipped text's first L tokens (SmolLM2's tokenizer)."""
    return _smollm2_ids(L, device)[1]


def decoder_tokens(L: int, device: str, text: str | None = None) -> _dec_text.TextTokens:
    """The first ``L`` tokens of ``text`` (None: the shipped text) under SmolLM2's tokenizer, and how many
    the whole text has; raises :class:`AttnInputError` for an empty text or one under 16 tokens."""
    return _decoder_tokens(L, device, text_key(text), text)


@st.cache_resource(max_entries=8, show_spinner=False)
def _decoder_tokens(L: int, device: str, key: str, _text: str | None) -> _dec_text.TextTokens:
    return _smollm2_tokens(L, device, _text)[1]


def decoder_sinks(L: int, eps: float, device: str, text: str | None = None) -> Timed[_dec_sinks.DecoderSinks]:
    """Sink heads, attractors, value drain and massive activations of SmolLM2 on the first ``L`` tokens of
    ``text`` (None: the shipped text; a text with fewer tokens is read whole)."""
    return _decoder_sinks(L, eps, device, text_key(text), text)


@st.cache_resource(max_entries=6, show_spinner="Running SmolLM2…")
def _decoder_sinks(L: int, eps: float, device: str, key: str,
                   _text: str | None) -> Timed[_dec_sinks.DecoderSinks]:
    lm = language_model("smollm2", device)
    tt = _decoder_tokens(L, device, key, _text)
    return timed(lambda: _dec_sinks.decoder_sinks(lm.model, tt.ids, tt.texts, eps=eps))


def decoder_variants(shift: int, eps: float, device: str, text: str | None = None,
                     length: int = _dec_sinks.GU_TOKENS) -> Timed[tuple[_dec_sinks.SinkVariant, ...]]:
    """First-token scores at ``length`` tokens of ``text`` (None: the shipped text): as written, another
    first token, shifted by ``shift``."""
    return _decoder_variants(shift, eps, device, length, text_key(text), text)


@st.cache_resource(max_entries=6, show_spinner="Running SmolLM2 on three variants…")
def _decoder_variants(shift: int, eps: float, device: str, length: int, key: str,
                      _text: str | None) -> Timed[tuple[_dec_sinks.SinkVariant, ...]]:
    lm = language_model("smollm2", device)
    tt = _decoder_tokens(length + shift, device, key, _text)
    other = int(lm.tokenizer(" the", add_special_tokens=False)["input_ids"][0])
    return timed(lambda: _dec_sinks.sink_variants(lm.model, tt.ids, tt.texts, other_first=other,
                                                  other_text=" the", shift=shift, length=length, eps=eps))


@st.cache_resource(max_entries=4, show_spinner="Running the ablations…")
def decoder_ablations(windows: int, L: int, device: str) -> Timed[tuple[_dec_stream.Ablation, ...]]:
    """The first-token ablations on ``windows`` windows of ``L`` tokens; the massive dims are the first
    token's 4 largest where its residual norm peaks, edited after the layer where it first passes half."""
    lm, ids, _ = _smollm2_ids(_dec_probe.MAX_DECODER_TOKENS, device)
    layer, dims = _dec_stream.massive_point(lm.model, ids[:, :L])
    wins = _dec_text.text_windows(ids, L, windows)
    return timed(lambda: _dec_stream.ablations(lm.model, wins, layer, dims))


@st.cache_resource(max_entries=4, show_spinner="Deleting the first token…")
def decoder_deletion(L: int, device: str) -> Timed[_dec_position.FirstTokenDeletion]:
    """The shipped text's first ``L`` tokens with the first masked from every later query and deleted;
    the residual read after the layer where the first token's norm peaks."""
    lm, ids, _ = _smollm2_ids(L, device)
    return timed(lambda: _dec_position.delete_first_token(lm.model, ids))


@st.cache_resource(max_entries=4, show_spinner="Running SmolLM2 on Gu et al.'s inputs…")
def decoder_gu_inputs(L: int, seed: int, device: str) -> Timed[tuple[_dec_position.GuRow, ...]]:
    """Gu et al.'s three inputs of ``L`` tokens (the shipped text, seeded random tokens, one token
    repeated), each as is and with a newline put first."""
    lm, ids, _ = _smollm2_ids(L, device)
    newline = int(lm.tokenizer("\n", add_special_tokens=False)["input_ids"][0])
    return timed(lambda: _dec_position.gu_inputs(lm.model, ids, seed=seed, prefix_id=newline,
                                                 prefix_text="\n", exclude=lm.tokenizer.all_special_ids))


@st.cache_resource(max_entries=4, show_spinner="Running SmolLM2 on repeated random tokens…")
def decoder_induction(T: int, seed: int, device: str) -> Timed[_dec_induction.Induction]:
    """Induction scores of SmolLM2's heads on T seeded random tokens repeated once."""
    lm = language_model("smollm2", device)
    return timed(lambda: _dec_induction.induction(lm.model, T, seed, exclude=lm.tokenizer.all_special_ids))


INDUCTION_SETS = 20  # random head sets per size (issue 40 item 6: at least 20)


@st.cache_resource(max_entries=4, show_spinner="Zeroing the top induction heads and random sets…")
def decoder_induction_ablation(T: int, seed: int, device: str) -> Timed[_dec_induction.InductionAblation]:
    """The top 1% and 3% of SmolLM2's heads by induction score zeroed, against 20 random sets of each size,
    on the T seeded random tokens repeated once (the loss on the second copy)."""
    lm = language_model("smollm2", device)
    ind = decoder_induction(T, seed, device).value
    return timed(lambda: _dec_induction.ablate_induction_heads(lm.model, ind, sets=INDUCTION_SETS, seed=seed))


@st.cache_resource(max_entries=4, show_spinner="Running SmolLM2…")
def decoder_entropy(L: int, device: str) -> Timed[_dec_entropy.EntropyProfile]:
    """Entropy by position of every SmolLM2 head on the shipped text's first L tokens."""
    lm, ids, _ = _smollm2_ids(L, device)
    return timed(lambda: _dec_entropy.entropy_profile(_dec_probe.decoder_pass(lm.model, ids)))
