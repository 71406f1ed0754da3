"""The cache boundary between pages and attncore.

Cached functions take plain hashable arguments (numbers, strings, frozen specs
and the device name), never read widgets, and their results are treated as
read-only. Heavy tensors live in ``st.cache_resource`` (no copy on every hit);
small tables in ``st.cache_data``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any, Generic, TypeVar

import numpy as np
import pandas as pd
import streamlit as st
import torch
from streamlit.runtime.scriptrunner_utils.script_run_context import get_script_run_ctx

from attncore import dot_products as _dot
from attncore import gradients as _grad
from attncore import overflow as _overflow
from attncore import sinks as _sinks
from attncore.attention import AttentionStages
from attncore.budget import env_bytes
from attncore.dropout import DropoutDraws
from attncore.dtypes import DTYPES, sampling_dtype
from attncore.explore import SyntheticSpec, draw_pool, synthetic_dropout, synthetic_stages
from attncore.models.modules import model_lock
from attncore.normalizers import peak_weight_sweep
from attncore.plan import Plan
from attncore.row_theory import check_sweep_theory, sweep_theory, sweep_theory_given_queries
from attncore.sweeps import SweepSpec, query_norms, run_sweep
from attncore.synthetic import QKV
from ui import model_queue
from ui.admission import heavy

__all__ = [
    "ByteCache",
    "check_entropy_theory",
    "entropy_theory",
    "entropy_theory_given_queries",
    "heatmap_dropout",
    "heatmap_stages",
    "peak_weights",
    "Planned",
    "rerun_pending",
    "result_cache",
    "RESULT_CACHE_BYTES",
    "RESULT_CACHE_ENV",
    "sat_dot_histograms",
    "sat_gradient_sweep",
    "sat_overflow_rows",
    "sat_overflow_sweep",
    "sat_saturation_curve",
    "sat_scale_sweep",
    "sat_std_sweep",
    "sat_temperature_rows",
    "text_key",
    "SCALE_POINTS",
    "sink_content_sweep",
    "sink_strength_sweep",
    "sink_zoo",
    "SWEEP_POINTS",
    "Timed",
    "timed",
    "tour_entropy_sweep",
    "value_bytes",
]

SWEEP_POINTS = 41  # points of the sink strength and content sweeps
SCALE_POINTS = 49  # logit scales of sat_scale_sweep

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


# --------------------------------------------------------------------------- planned real-model results
# The real models' results (maps of every head, generated rows, per-head summaries) are large and their sizes
# vary with the text by 100x, so they are not in st.cache_* (capped by entry count only) but in one
# process-wide LRU capped in bytes, keyed as st.cache keys (the function's name and its plain arguments; a
# typed text by its SHA-256). A miss admits the computation's plan (attncore.plan.Plan: its estimate beside
# its work) through ui.admission, holding the model first: a session waiting for a busy model holds no place.

RESULT_CACHE_ENV = "ATTNLAB_RESULT_CACHE"
RESULT_CACHE_BYTES = 512 * 1024**2  # the default cap of the real models' results, all sessions together


def value_bytes(value: object, _seen: set[int] | None = None, _depth: int = 0) -> int:
    """Bytes of the tensors, arrays and strings ``value`` holds (dataclasses, tuples, lists, dicts walked; a
    tensor's storage counted once however many views share it)."""
    seen = set() if _seen is None else _seen
    if _depth > 8:
        return 0
    if isinstance(value, torch.Tensor):
        st_ = value.untyped_storage()
        key = st_.data_ptr()
        if key in seen:
            return 0
        seen.add(key)
        return int(st_.nbytes())
    if isinstance(value, np.ndarray):
        return int(value.nbytes)
    if isinstance(value, (str, bytes)):
        return len(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return sum(value_bytes(getattr(value, f.name), seen, _depth + 1) for f in dataclasses.fields(value))
    if isinstance(value, dict):
        return sum(value_bytes(k, seen, _depth + 1) + value_bytes(v, seen, _depth + 1)
                   for k, v in value.items())
    if isinstance(value, (tuple, list)):
        return sum(value_bytes(v, seen, _depth + 1) for v in value)
    return 0


class ByteCache:
    """Least recently used entries, at most ``capacity`` bytes together (:func:`value_bytes`); an entry
    larger than the whole cap is returned to its caller and not kept. Thread-safe."""

    def __init__(self, capacity: int) -> None:
        self.capacity = max(0, int(capacity))
        self._d: OrderedDict[tuple[Any, ...], tuple[Any, int]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    @property
    def nbytes(self) -> int:
        """Bytes held now."""
        with self._lock:
            return self._bytes

    def __len__(self) -> int:
        with self._lock:
            return len(self._d)

    def get(self, key: tuple[Any, ...]) -> Any | None:
        with self._lock:
            hit = self._d.get(key)
            if hit is None:
                return None
            self._d.move_to_end(key)
            return hit[0]

    def put(self, key: tuple[Any, ...], value: Any) -> None:
        size = value_bytes(value)
        with self._lock:
            old = self._d.pop(key, None)
            if old is not None:
                self._bytes -= old[1]
            if size > self.capacity:
                return
            self._d[key] = (value, size)
            self._bytes += size
            while self._bytes > self.capacity:
                _, (_, n) = self._d.popitem(last=False)
                self._bytes -= n

    def clear(self, kind: str | None = None) -> None:
        """Drop every entry (``kind``: only the entries whose key starts with it)."""
        with self._lock:
            for key in [k for k in self._d if kind is None or k[0] == kind]:
                self._bytes -= self._d.pop(key)[1]


@st.cache_resource(show_spinner=False)
def result_cache() -> ByteCache:
    """The process-wide cache of the real models' results (``ATTNLAB_RESULT_CACHE`` bytes, default
    512 MiB)."""
    return ByteCache(env_bytes(RESULT_CACHE_ENV, RESULT_CACHE_BYTES))


def text_key(text: str | None) -> str:
    """The cache key of a decoder text: ``"shipped"`` for the shipped text (None), else the SHA-256 of the
    text (a typed text is up to 20,000 characters; its digest keys the cache, the text itself is passed
    unhashed beside it)."""
    if text is None:
        return "shipped"
    return "sha256:" + hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def _key_part(a: object) -> object:
    return text_key(a) if isinstance(a, str) and len(a) > 64 else a


@contextlib.contextmanager
def _model_queue(plan: Plan[Any], kind: str, slot: Any) -> Iterator[None]:
    """Hold ``plan``'s model in its queue (:data:`ui.model_queue.QUEUE`), the wait's place and estimate
    shown in ``slot`` and cleared when the pass starts; nothing to wait for without a model."""
    if plan.model is None:
        yield
        return
    shown = [False]

    def show(p: model_queue.Place) -> None:
        slot.info(model_queue.waiting_message(p, plan.label), icon=":material/hourglass_top:")
        shown[0] = True

    with model_queue.QUEUE.holding(plan.model, model_lock(plan.model), kind, plan.seconds, show):
        if shown[0]:
            slot.empty()
        yield


class Planned(Generic[T]):
    """A cached real-model computation: ``make(*args)`` gives its plan; calling it returns the cached result
    or admits the plan (its model held first, then its place in ui.admission) and keeps the result in
    :func:`result_cache`. ``args`` are plain values; a long text is keyed by its digest."""

    def __init__(self, kind: str, make: Callable[..., Plan[T]]) -> None:
        self.kind = kind
        self._make = make

    def key(self, *args: Any) -> tuple[Any, ...]:
        return (self.kind, *(_key_part(a) for a in args))

    def plan(self, *args: Any) -> Plan[T]:
        """The computation's plan (cheap: nothing runs)."""
        return self._make(*args)

    def peek(self, *args: Any) -> Timed[T] | None:
        """The cached result, or None."""
        return result_cache().get(self.key(*args))

    def __call__(self, *args: Any, where: Any = None) -> Timed[T]:
        key = self.key(*args)
        cache = result_cache()
        hit = cache.get(key)
        if hit is None:
            plan = self.plan(*args)
            slot = (where or st).empty()  # the waiting messages (the model's queue, then admission) go here
            # the model first: waiting for it holds no admission place; the wait shows its place in line
            with _model_queue(plan, self.kind, slot):
                hit = cache.get(key)  # another session may have computed it meanwhile
                if hit is None:
                    with heavy(plan.nbytes, plan.seconds, label=plan.label, where=slot):
                        hit = timed(plan.run)
                    cache.put(key, hit)
                    if plan.model is not None:
                        model_queue.QUEUE.record(self.kind, plan.seconds, hit.seconds)
                    return hit
            return hit
        # A cached result draws the one empty element heavy() draws for its waiting message, so the page
        # has the same elements whether it was computed or cached: a nested fragment's identity follows the
        # elements before it, and a fragment rerun after a computing full run (Heatmaps' head views after
        # the first pass) otherwise lost the sidebar slot its Head slider writes to.
        (where or st).empty()
        return hit

    def clear(self) -> None:
        """Forget this computation's cached results."""
        result_cache().clear(self.kind)


# --------------------------------------------------------------------------- synthetic attention (Heatmaps)


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


@st.cache_resource(max_entries=4, show_spinner=False)
def heatmap_dropout(spec: SyntheticSpec, p: float, head: int, device: str) -> Timed[DropoutDraws]:
    """Seeded dropout draws on one head of the synthetic attention (training mode)."""
    spec.validate()
    pool = _input_pool(spec.heads, spec.kv_heads, spec.d_k, spec.seed, spec.dtype, device)
    return timed(lambda: synthetic_dropout(spec, p, head, device, pool))


# --------------------------------------------------------------------------- Monte Carlo (Saturation)
# Every result is small (numpy summaries), so st.cache_data holds it; dtypes travel as names.


@st.cache_data(max_entries=16, show_spinner=False)
def sat_dot_histograms(d: int, n: int, bins: int, var_q: float, var_k: float, seed: int,
                       device: str, dtype: str) -> Timed[_dot.DotHistograms]:
    """Histograms of n samples of q·k in d dims (raw and scaled)."""
    return timed(lambda: _dot.dot_histograms(d, n, bins, var_q=var_q, var_k=var_k, seed=seed,
                                              device=device, dtype=sampling_dtype(dtype)))


@st.cache_data(max_entries=8, show_spinner=False)
def sat_std_sweep(n: int, var_q: float, var_k: float, seed: int, device: str,
                  dtype: str) -> Timed[_dot.StdSweep]:
    """std of q·k against every d of the grid, n samples per d."""
    return timed(lambda: _dot.dot_std_sweep(_dot.D_GRID, n, var_q=var_q, var_k=var_k, seed=seed,
                                             device=device, dtype=sampling_dtype(dtype)))


@st.cache_data(max_entries=16, show_spinner=False)
def sat_saturation_curve(n: int, x_max: float, points: int = 81) -> Timed[_grad.SaturationCurve]:
    """softmax([x, 0, ..., 0]) for x in [0, x_max] (float64, CPU: a handful of numbers)."""
    return timed(lambda: _grad.saturation_curve(torch.linspace(0.0, x_max, points, dtype=torch.float64), n))


@st.cache_data(max_entries=32, show_spinner=False)
def sat_temperature_rows(scores: tuple[float, ...], d: int) -> Timed[_grad.TemperatureRows]:
    """The score row unscaled and divided by 0.5, 1 and 2 times sqrt(d)."""
    return timed(lambda: _grad.temperature_rows(scores, d))


@st.cache_data(max_entries=8, show_spinner=False)
def sat_scale_sweep(n: int, trials: int, sigma_max: float, seed: int, device: str,
                    dtype: str) -> Timed[_grad.ScaleSweep]:
    """E||J|| and E[max weight] against the logit scale sigma in [0.01, sigma_max] (SCALE_POINTS scales)."""
    sigmas = np.geomspace(0.01, sigma_max, SCALE_POINTS)
    return timed(lambda: _grad.jacobian_vs_scale(sigmas, n, trials, seed=seed, device=device,
                                                 dtype=sampling_dtype(dtype)))


@st.cache_data(max_entries=8, show_spinner=False)
def sat_gradient_sweep(d_max: int, keys: int, batch: int, level: float, seed: int, device: str,
                       dtype: str) -> Timed[_grad.GradientSweep]:
    """Saturation and gradient norms through attncore.attention for d = 1, 2, 4, ..., d_max."""
    ds = tuple(d for d in _dot.D_GRID if d <= d_max)
    return timed(lambda: _grad.gradient_sweep(ds, keys, batch, level=level, seed=seed, device=device,
                                              dtype=DTYPES[dtype]))


@st.cache_data(max_entries=4, show_spinner=False)
def sat_overflow_sweep(n: int, device: str) -> Timed[_overflow.OverflowSweep]:
    """Naive vs stable softmax of [x, 0, ..., 0] in four dtypes for x from 1 to 10,000."""
    return timed(lambda: _overflow.overflow_sweep(np.geomspace(1.0, 1e4, 241), n, device=device))


@st.cache_data(max_entries=16, show_spinner=False)
def sat_overflow_rows(x: float, n: int) -> list[_overflow.OverflowRow]:
    """Naive and stable softmax of [x, 0, ..., 0] in each dtype, for the table."""
    return _overflow.overflow_rows(x, n)


# --------------------------------------------------------------------------- the synthetic sink head (Sinks)


@st.cache_resource(max_entries=4, show_spinner=False)
def sink_zoo(spec: _sinks.SinkSpec, device: str) -> Timed[dict[str, _sinks.ZooEntry]]:
    """The synthetic head through every normaliser of :data:`attncore.sinks.ZOO`."""
    return timed(lambda: _sinks.normaliser_zoo(spec, device))


_SWEEPS = {"strength": (_sinks.strength_sweep, _sinks.STRENGTH_RANGE),
           "content": (_sinks.content_sweep, _sinks.CONTENT_RANGE)}


@st.cache_resource(max_entries=8, show_spinner=False)
def _sink_sweep(kind: str, spec: _sinks.SinkSpec, device: str) -> Timed[_sinks.SweepResult]:
    fn, span = _SWEEPS[kind]
    grid = np.linspace(*span, SWEEP_POINTS)
    return timed(lambda: fn(spec, grid, device))


def sink_strength_sweep(spec: _sinks.SinkSpec, device: str) -> Timed[_sinks.SweepResult]:
    """Sink weight and output RMS over the strength range, cached on the fields that matter
    (moving the strength, the sink logit or the gate reuses it)."""
    d = _sinks.SinkSpec()
    key = replace(spec, sink=True, strength=d.strength, sink_logit=d.sink_logit, gate_bias=d.gate_bias,
                   gate=d.gate)
    return _sink_sweep("strength", key, device)


def sink_content_sweep(spec: _sinks.SinkSpec, device: str) -> Timed[_sinks.SweepResult]:
    """Every normaliser over the content range (no sink), cached on the fields that matter
    (moving the sink's strength, value or the content level reuses it)."""
    d = _sinks.SinkSpec()
    key = replace(spec, sink=False, strength=d.strength, sink_value=d.sink_value, content=d.content)
    return _sink_sweep("content", key, device)


# --------------------------------------------------------------------------- rows against length (Entropy)
# The sweeps themselves are cached by ui.sweep (they draw a progress bar, which a cached
# function may not); theory and the figure-1 panel here.


def rerun_pending() -> bool:
    """True once the user moved a control or pressed Stop: this run is about to be replaced.

    Long attncore loops take it as their ``cancel`` callback, so a click ends them between
    chunks (as a sweep's progress bar does); the page then shows "stopped" and reruns.
    Streamlit keeps the pending request on the run's ScriptRequests; outside a script run
    (tests, bare mode) nothing is ever pending.
    """
    ctx = get_script_run_ctx(suppress_warning=True)
    state = getattr(getattr(ctx, "script_requests", None), "_state", None)
    return state is not None and getattr(state, "name", "CONTINUE") != "CONTINUE"


def check_entropy_theory(lengths: tuple[int, ...], d: int, scale_rule: str, temperature: float,
                         normalizer: str, ssmax_s: float) -> float:
    """Refuse (ResourceLimitError) a theory curve that is too big, before its sweep starts; its cells."""
    return check_sweep_theory(lengths, d=d, scale_rule=scale_rule, temperature=temperature,
                              normalizer=normalizer, ssmax_s=ssmax_s)


@st.cache_data(max_entries=64, show_spinner=False)
def entropy_theory(lengths: tuple[int, ...], d: int, scale_rule: str, temperature: float,
                   normalizer: str, ssmax_s: float) -> Timed[pd.DataFrame]:
    """Exact expectations and closed forms for one curve (see attncore.row_theory.sweep_theory)."""
    return timed(lambda: sweep_theory(lengths, d=d, scale_rule=scale_rule, temperature=temperature,
                                      normalizer=normalizer, ssmax_s=ssmax_s, cancel=rerun_pending))


@st.cache_data(max_entries=32, show_spinner=False)
def peak_weights(lengths: tuple[int, ...], peak: float, rest: float, s: float,
                 device: str) -> Timed[pd.DataFrame]:
    """The SSMax figure-1 rows measured with attncore's normalisers."""
    return timed(lambda: peak_weight_sweep(lengths, peak=peak, rest=rest, s=s, device=device))


@st.cache_data(max_entries=32, show_spinner=False)
def entropy_theory_given_queries(spec: SweepSpec, n: int, device: str) -> Timed[pd.DataFrame]:
    """The exact expectation at length n given the sweep's own queries (drawn as the engine draws them)."""
    def compute() -> pd.DataFrame:
        qn = query_norms(spec, device).cpu().numpy()
        return sweep_theory_given_queries([n], qn, d=spec.d, scale_rule=spec.scale_rule,
                                          temperature=spec.temperature, normalizer=spec.normalizer,
                                          ssmax_s=spec.ssmax_s, cancel=rerun_pending)
    return timed(compute)


# ---------------------------------------------------------------------------- the Tour (issue 34)


@st.cache_data(max_entries=8, show_spinner=False)
def tour_entropy_sweep(spec: SweepSpec, device: str) -> Timed[pd.DataFrame]:
    """One small entropy sweep (the Tour's step: a few query rows, n up to 2^14), no progress bar."""
    spec.validate()
    return timed(lambda: run_sweep(spec, device=device))
