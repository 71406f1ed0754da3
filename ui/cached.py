"""The cache boundary between pages and attncore.

Cached functions take plain hashable arguments (numbers, strings, frozen specs
and the device name), never read widgets, and their results are treated as
read-only. Heavy tensors live in ``st.cache_resource`` (no copy on every hit);
small tables in ``st.cache_data``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

import streamlit as st

from attncore.attention import AttentionStages
from attncore.explore import SyntheticSpec, draw_pool, synthetic_stages
from attncore.synthetic import QKV

__all__ = ["Timed", "heatmap_stages", "timed"]

T = TypeVar("T")


@dataclass(frozen=True)
class Timed(Generic[T]):
    """A result with the seconds its first computation took."""

    value: T
    seconds: float


def timed(fn: Callable[[], T]) -> Timed[T]:
    """Run ``fn`` and record how long it took."""
    t0 = time.perf_counter()
    out = fn()
    return Timed(out, time.perf_counter() - t0)


@st.cache_resource(max_entries=2, show_spinner=False)
def _input_pool(heads: int, kv_heads: int, d_k: int, seed: int, dtype: str, device: str) -> QKV:
    spec = SyntheticSpec(heads=heads, kv_heads=kv_heads, d_k=d_k, seed=seed, dtype=dtype)
    return draw_pool(spec, device)


@st.cache_resource(max_entries=4, show_spinner=False)
def heatmap_stages(spec: SyntheticSpec, device: str) -> Timed[AttentionStages]:
    """All stages of the synthetic attention described by ``spec`` on ``device``.

    The Gaussian inputs come from a cached pool, so moving L, S, the mask, the
    scoring or the normaliser never redraws them.
    """
    spec.validate()
    pool = _input_pool(spec.heads, spec.kv_heads, spec.d_k, spec.seed, spec.dtype, device)
    return timed(lambda: synthetic_stages(spec, device, pool))


# ---------------------------------------------------------------------------- Attention sinks page

from dataclasses import replace as _replace  # noqa: E402

import numpy as _np  # noqa: E402

from attncore import models as _models  # noqa: E402
from attncore import sinks as _sinks  # noqa: E402

SWEEP_POINTS = 41


@st.cache_resource(max_entries=2, show_spinner="Loading the model (once per process)…")
def language_model(source: str, device: str) -> _models.LoadedModel:
    """A transformer for attention maps (``"minilm"`` or a local folder), loaded once per process."""
    return _models.load_model(source, device)


@st.cache_resource(max_entries=6, show_spinner="Running the model…")
def text_attention(source: str, text: str, device: str) -> Timed[_models.TextAttention]:
    """Every attention map of the model ``source`` on ``text`` (the forward pass is timed)."""
    lm = language_model(source, device)
    return timed(lambda: _models.run_text(lm, text))


@st.cache_resource(max_entries=4, show_spinner=False)
def sink_zoo(spec: _sinks.SinkSpec, device: str) -> Timed[dict[str, _sinks.ZooEntry]]:
    """The synthetic head through every normaliser of :data:`attncore.sinks.ZOO`."""
    return timed(lambda: _sinks.normaliser_zoo(spec, device))


_SWEEPS = {"strength": (_sinks.strength_sweep, _sinks.STRENGTH_RANGE),
           "content": (_sinks.content_sweep, _sinks.CONTENT_RANGE)}


@st.cache_resource(max_entries=8, show_spinner=False)
def _sink_sweep(kind: str, spec: _sinks.SinkSpec, device: str) -> Timed[_sinks.SweepResult]:
    fn, span = _SWEEPS[kind]
    grid = _np.linspace(*span, SWEEP_POINTS)
    return timed(lambda: fn(spec, grid, device))


def sink_strength_sweep(spec: _sinks.SinkSpec, device: str) -> Timed[_sinks.SweepResult]:
    """Sink weight and output RMS over the strength range, cached on the fields that matter
    (moving the strength, the sink logit or the gate reuses it)."""
    d = _sinks.SinkSpec()
    key = _replace(spec, sink=True, strength=d.strength, sink_logit=d.sink_logit, gate_bias=d.gate_bias,
                   gate=d.gate)
    return _sink_sweep("strength", key, device)


def sink_content_sweep(spec: _sinks.SinkSpec, device: str) -> Timed[_sinks.SweepResult]:
    """Every normaliser over the content range (no sink), cached on the fields that matter
    (moving the sink's strength, value or the content level reuses it)."""
    d = _sinks.SinkSpec()
    key = _replace(spec, sink=False, strength=d.strength, sink_value=d.sink_value, content=d.content)
    return _sink_sweep("content", key, device)
