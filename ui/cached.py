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


# --------------------------------------------------------------------------------------
# Entropy vs length page (issue 3). The sweeps themselves are cached by ui.sweep (they
# draw a progress bar, which a cached function may not); theory and the figure-1 panel here.
# --------------------------------------------------------------------------------------

import pandas as pd  # noqa: E402

from attncore.row_theory import sweep_theory  # noqa: E402
from attncore.sweeps import peak_weight_sweep  # noqa: E402

__all__ += ["entropy_theory", "peak_weights"]


@st.cache_data(max_entries=64, show_spinner=False)
def entropy_theory(lengths: tuple[int, ...], d: int, scale_rule: str, temperature: float,
                   normalizer: str, ssmax_s: float) -> Timed[pd.DataFrame]:
    """Exact expectations and closed forms for one curve (see attncore.row_theory.sweep_theory)."""
    return timed(lambda: sweep_theory(lengths, d=d, scale_rule=scale_rule, temperature=temperature,
                                      normalizer=normalizer, ssmax_s=ssmax_s))


@st.cache_data(max_entries=32, show_spinner=False)
def peak_weights(lengths: tuple[int, ...], peak: float, rest: float, s: float,
                 device: str) -> Timed[pd.DataFrame]:
    """The SSMax figure-1 rows measured with attncore's normalisers."""
    return timed(lambda: peak_weight_sweep(lengths, peak=peak, rest=rest, s=s, device=device))
