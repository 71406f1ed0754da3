"""The cache boundary for the real decoder's measurements (SmolLM2: sink heads, first-token variants and
ablations, deletion, Gu et al.'s inputs, induction, entropy by position), keyed by the text's digest
(:func:`text_key`). Shared helpers in :mod:`ui.cached`.
"""

from __future__ import annotations

from typing import Any

import streamlit as st
import torch

from attncore import models as _models
from attncore.decoder import entropy as _dec_entropy
from attncore.decoder import induction as _dec_induction
from attncore.decoder import plans as _plans
from attncore.decoder import position as _dec_position
from attncore.decoder import probe as _dec_probe
from attncore.decoder import sinks as _dec_sinks
from attncore.decoder import stream_run as _dec_stream_run
from attncore.decoder import streaming as _dec_stream
from attncore.decoder import text as _dec_text
from attncore.plan import Plan
from ui.cached import Planned, Timed, text_key
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
]



# --------------------------------------------------------------------------- a real decoder (SmolLM2)


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


def _sinks_plan(L: int, eps: float, device: str, key: str, text: str | None) -> Plan[_dec_sinks.DecoderSinks]:
    lm = language_model("smollm2", device)
    tt = _decoder_tokens(L, device, key, text)
    return _plans.sinks_plan(lm.model, tt.ids, tt.texts, eps)


_decoder_sinks = Planned("decoder_sinks", _sinks_plan)


def decoder_sinks(L: int, eps: float, device: str, text: str | None = None,
                  where: Any = None) -> Timed[_dec_sinks.DecoderSinks]:
    """Sink heads, attractors, value drain and massive activations of SmolLM2 on the first ``L`` tokens of
    ``text`` (None: the shipped text; a text with fewer tokens is read whole)."""
    return _decoder_sinks(L, eps, device, text_key(text), text, where=where)


def _variants_plan(shift: int, eps: float, device: str, length: int, key: str,
                   text: str | None) -> Plan[tuple[_dec_sinks.SinkVariant, ...]]:
    lm = language_model("smollm2", device)
    tt = _decoder_tokens(length + shift, device, key, text)
    other = int(lm.tokenizer(" the", add_special_tokens=False)["input_ids"][0])
    return _plans.variants_plan(lm.model, tt.ids, tt.texts, other_first=other, other_text=" the", shift=shift,
                                length=length, eps=eps)


_decoder_variants = Planned("decoder_variants", _variants_plan)


def decoder_variants(shift: int, eps: float, device: str, text: str | None = None,
                     length: int = _dec_sinks.GU_TOKENS,
                     where: Any = None) -> Timed[tuple[_dec_sinks.SinkVariant, ...]]:
    """First-token scores at ``length`` tokens of ``text`` (None: the shipped text): as written, another
    first token, shifted by ``shift``."""
    return _decoder_variants(shift, eps, device, length, text_key(text), text, where=where)


def _ablations_plan(windows: int, L: int, device: str) -> Plan[tuple[_dec_stream.Ablation, ...]]:
    lm, ids, texts = _smollm2_ids(_dec_probe.MAX_DECODER_TOKENS, device)
    return _plans.ablations_plan(lm.model, ids, texts, lambda: _dec_text.text_windows(ids, L, windows), L,
                                 windows)


decoder_ablations = Planned("decoder_ablations", _ablations_plan)
"""decoder_ablations(windows, L, device): the first-token ablations on ``windows`` windows of ``L`` tokens;
the massive dims are the first token's 4 largest where its residual norm peaks, edited after the layer where
it first passes half (:func:`attncore.decoder.plans.ablations_plan`)."""


def _deletion_plan(L: int, device: str) -> Plan[_dec_position.FirstTokenDeletion]:
    lm, ids, _ = _smollm2_ids(L, device)
    return _plans.deletion_plan(lm.model, ids)


decoder_deletion = Planned("decoder_deletion", _deletion_plan)
"""decoder_deletion(L, device): the shipped text's first ``L`` tokens with the first masked from every later
query and deleted; the residual read after the layer where the first token's norm peaks."""


def _gu_plan(L: int, seed: int, device: str) -> Plan[tuple[_dec_position.GuRow, ...]]:
    lm, ids, _ = _smollm2_ids(L, device)
    newline = int(lm.tokenizer("\n", add_special_tokens=False)["input_ids"][0])
    return _plans.gu_plan(lm.model, ids, seed=seed, prefix_id=newline, prefix_text="\n",
                          exclude=tuple(lm.tokenizer.all_special_ids))


decoder_gu_inputs = Planned("decoder_gu_inputs", _gu_plan)
"""decoder_gu_inputs(L, seed, device): Gu et al.'s three inputs of ``L`` tokens (the shipped text, seeded
random tokens, one token repeated), each as is and with a newline put first."""


def _induction_plan(T: int, seed: int, device: str) -> Plan[_dec_induction.Induction]:
    lm = language_model("smollm2", device)
    return _plans.induction_plan(lm.model, T, seed, exclude=tuple(lm.tokenizer.all_special_ids))


decoder_induction = Planned("decoder_induction", _induction_plan)
"""decoder_induction(T, seed, device): induction scores of SmolLM2's heads on T seeded random tokens repeated
once."""


def _entropy_plan(L: int, device: str) -> Plan[_dec_entropy.EntropyProfile]:
    lm, ids, _ = _smollm2_ids(L, device)
    return _plans.entropy_plan(lm.model, ids)


decoder_entropy = Planned("decoder_entropy", _entropy_plan)
"""decoder_entropy(L, device): entropy by position of every SmolLM2 head on the shipped text's first L
tokens."""


INDUCTION_SETS = 20  # random head sets per size (issue 40 item 6: at least 20)


def _induction_ablation_plan(T: int, seed: int, device: str) -> Plan[_dec_induction.InductionAblation]:
    lm = language_model("smollm2", device)
    ind = decoder_induction(T, seed, device).value  # its own plan, admitted first
    return _plans.induction_ablation_plan(lm.model, ind, sets=INDUCTION_SETS, seed=seed)


decoder_induction_ablation = Planned("decoder_induction_ablation", _induction_ablation_plan)
"""decoder_induction_ablation(T, seed, device): the top 1% and 3% of SmolLM2's heads by induction score
zeroed, against 20 random sets of each size, on the T seeded random tokens repeated once (the loss on the
second copy)."""
