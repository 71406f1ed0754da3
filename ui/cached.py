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
