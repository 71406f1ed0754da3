"""The cache boundary between pages and attncore.

Cached functions take plain hashable arguments (numbers, strings, frozen specs
and the device name), never read widgets, and their results are treated as
read-only. Heavy tensors live in ``st.cache_resource`` (no copy on every hit);
small tables in ``st.cache_data``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Generic, TypeVar

import numpy as np
import pandas as pd
import streamlit as st
import torch
from streamlit.runtime.scriptrunner_utils.script_run_context import get_script_run_ctx

from attncore import dot_products as _dot
from attncore import evidence as _evidence
from attncore import gradients as _grad
from attncore import kernels as _kernels
from attncore import models as _models
from attncore import overflow as _overflow
from attncore import qkv as _qkv
from attncore import sinks as _sinks
from attncore import training as _training
from attncore.attention import AttentionStages
from attncore.budget import env_bytes
from attncore.decoder import entropy as _dec_entropy
from attncore.decoder import induction as _dec_induction
from attncore.decoder import lens as _dec_lens
from attncore.decoder import plans as _plans
from attncore.decoder import position as _dec_position
from attncore.decoder import probe as _dec_probe
from attncore.decoder import sinks as _dec_sinks
from attncore.decoder import stream_run as _dec_stream_run
from attncore.decoder import streaming as _dec_stream
from attncore.decoder import text as _dec_text
from attncore.decoder import why as _dec_why
from attncore.dropout import DropoutDraws
from attncore.dtypes import DTYPES, sampling_dtype
from attncore.errors import AttnInputError
from attncore.explore import SyntheticSpec, draw_pool, synthetic_dropout, synthetic_stages
from attncore.models import generation as _generation
from attncore.normalizers import peak_weight_sweep
from attncore.plan import Plan
from attncore.row_theory import check_sweep_theory, sweep_theory, sweep_theory_given_queries
from attncore.sweeps import SweepSpec, query_norms, run_sweep
from attncore.synthetic import QKV
from attncore.training import bbm as _bbm
from attncore.training import io as _training_io
from attncore.training import null_attention as _null
from attncore.training import sink_grid as _sink_grid
from attncore.training import sink_verdicts as _sink_verdicts
from ui.admission import admit, heavy

__all__ = [
    "SCALE_POINTS",
    "RESULT_CACHE_BYTES",
    "SWEEP_POINTS",
    "ByteCache",
    "Planned",
    "Timed",
    "causal_attention",
    "causal_head_vectors",
    "causal_model",
    "causal_next_chars",
    "decoder_ablations",
    "decoder_deletion",
    "decoder_entropy",
    "decoder_gu_inputs",
    "decoder_induction",
    "decoder_induction_ablation",
    "decoder_sinks",
    "decoder_tokens",
    "decoder_variants",
    "evidence_measurement",
    "training_result",
    "entropy_theory",
    "entropy_theory_given_queries",
    "heatmap_dropout",
    "heatmap_stages",
    "result_cache",
    "value_bytes",
    "head_vectors",
    "kernel_memory",
    "kernel_probe",
    "generation",
    "language_model",
    "next_logits",
    "token_count",
    "learned_model",
    "learned_task",
    "learned_view",
    "peak_weights",
    "sat_dot_histograms",
    "sat_gradient_sweep",
    "sat_overflow_rows",
    "sat_overflow_sweep",
    "sat_saturation_curve",
    "sat_scale_sweep",
    "sat_std_sweep",
    "sat_temperature_rows",
    "sink_claims",
    "sink_content_sweep",
    "sink_strength_sweep",
    "shipped_ids",
    "sink_zoo",
    "text_attention",
    "text_key",
    "timed",
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


def _key_part(a: object) -> object:
    return text_key(a) if isinstance(a, str) and len(a) > 64 else a


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
        if hit is not None:
            return hit
        plan = self.plan(*args)
        with plan.holding():  # the model first: waiting for it holds no admission place
            hit = cache.get(key)  # another session may have computed it meanwhile
            if hit is None:
                with heavy(plan.nbytes, plan.seconds, label=plan.label, where=where):
                    hit = timed(plan.run)
                cache.put(key, hit)
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


def training_result(name: str) -> dict:
    """A shipped experiment result (:data:`attncore.training.RESULT_NAMES`) as a dict, read again when its
    file changes."""
    path = Path(_training_io.RESULTS_DIR) / f"{name}.json"
    return _training_result(name, str(path), path.stat().st_mtime if path.is_file() else 0.0)


@st.cache_data(max_entries=8, show_spinner=False)
def _training_result(name: str, path: str, mtime: float) -> dict:
    return _training_io.load_result(name, Path(path).parent)


# ------------------------------------------------- the models that learned the Bigram-Backcopy task (Sinks)


def learned_task() -> _bbm.BigramBackcopy:
    """The Bigram-Backcopy task the shipped null_attention models learned."""
    return _learned_task(str(_training_io.RESULTS_DIR))


@st.cache_resource(max_entries=2, show_spinner=False)
def _learned_task(results: str) -> _bbm.BigramBackcopy:
    return _null.shipped_task(results)


@st.cache_resource(max_entries=8, show_spinner=False)
def _learned_model(name: str, device: str, results: str) -> Timed[_training.CharTransformer]:
    return timed(lambda: _null.shipped_model(name, device, results))


def learned_model(name: str, device: str) -> Timed[_training.CharTransformer]:
    """The shipped seed-0 model of one variant (:data:`attncore.training.null_attention.SHIPPED`)."""
    return _learned_model(name, device, str(_training_io.RESULTS_DIR))


def learned_view(name: str, ids: tuple[int, ...], device: str) -> Timed[_bbm.SequenceView]:
    """One shipped model on one sequence of token ids (BOS first)."""
    return _learned_view(name, ids, device, str(_training_io.RESULTS_DIR))


@st.cache_resource(max_entries=16, show_spinner=False)
def _learned_view(name: str, ids: tuple[int, ...], device: str, results: str) -> Timed[_bbm.SequenceView]:
    model = _learned_model(name, device, results).value
    task = _learned_task(results)
    return timed(lambda: _bbm.sequence_view(model, task, torch.tensor(ids, dtype=torch.int64)))


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


# ---------------------------------------------------------------------------- Kernels page (issue 13)
# Interleaved timed rounds after a warm-up: 9 where they are cheap (order statistics that hold the median
# with 96%), never fewer than 5 (min-max holds it with 94%), and no round starts once the paths have spent
# 0.2 s each on average, so that the default view opens within issue 11's 5 s (9 rounds everywhere took
# its first render from ~6 to ~9 s of script time on this 2-core machine).
KERNEL_REPEATS = 9
KERNEL_MIN_ROUNDS = 5
KERNEL_ROUND_SECONDS = 0.2
# A kernel_probe call that took longer than this was measured now, not served from the cache: the page then
# draws the sizes done so far while it times the rest (a cached size comes back in ~1-3 ms).
KERNEL_PARTIAL_AFTER_S = 0.05
# After drawing a partial chart the page waits this long before timing the next size: on a machine where the
# browser shares the cores (a laptop running the app), its redraw (~50-100 ms of Plotly) would otherwise run
# during the next size's timed rounds and slow them.
KERNEL_DRAW_PAUSE_S = 0.1


@st.cache_data(max_entries=64, show_spinner=False)
def kernel_probe(spec: _kernels.KernelSpec, T: int, device: str) -> Timed[_kernels.SizeResult]:
    """Every SDPA backend, the default dispatch and both baselines at L = S = T (no memory yet)."""
    return timed(lambda: _kernels.probe(spec, T, device, repeats=KERNEL_REPEATS, min_rounds=KERNEL_MIN_ROUNDS,
                                        max_seconds=KERNEL_ROUND_SECONDS, measure_memory=False))


@st.cache_data(max_entries=16, show_spinner=False)
def kernel_memory(spec: _kernels.KernelSpec, lengths: tuple[int, ...],
                  device: str) -> Timed[tuple[tuple[_kernels.SizeResult, ...], str]]:
    """The probes of ``lengths`` with peak memory filled in (CPU: one fresh measuring process)."""
    sizes = [kernel_probe(spec, T, device).value for T in lengths]

    def run() -> tuple[tuple[_kernels.SizeResult, ...], str]:
        out, note = _kernels.measure_memory(sizes, spec, device)
        return tuple(out), note

    return timed(run)


# ---------------------------------------------------------------------------- Evidence page (issue 24)

EVIDENCE_SLOW_BYTES = 512 * 1024**2  # a slower claim's admission estimate: a model or a gradient sweep
EVIDENCE_SLOW_SECONDS = 5.0


@st.cache_data(max_entries=512, show_spinner=False)
def evidence_measurement(key: str, device: str, seed: int, dtype: str,
                         results_stamp: float) -> Timed[_evidence.Measurement]:
    """One claim's test (:mod:`attncore.evidence`) on this device, seed and dtype. ``results_stamp`` (the
    shipped results' latest modification time) makes a rewritten result file count as new input."""
    c = _evidence.claim(key)
    # The slower claims (timings, models, the gradient sweep: seconds each) queue in the server's admission
    # control like sweeps do, so that several sessions measuring them at once do not starve other pages.
    nbytes, seconds = (EVIDENCE_SLOW_BYTES, EVIDENCE_SLOW_SECONDS) if c.slow else (0, 0.0)
    with admit(nbytes, seconds, label=f"the Evidence measurement {key}"):
        return timed(lambda: _evidence.evaluate(c, _evidence.Setting(device, seed, dtype)).measurement)


@st.cache_resource(show_spinner=False)
def evidence_slow_measured() -> set[tuple[str, int, str, float]]:
    """The settings (device, seed, dtype, results stamp) at which some session of this server has measured
    the slower Evidence claims, so that :func:`evidence_measurement` holds them: a new tab at such a setting
    draws the page once, with every row, not first without them and again with them (issue 34: the chart
    and the 52-row table were sent and drawn twice in every new tab). Shared by all sessions; an entry that
    the measurement cache has since dropped only costs that one run its early draw."""
    return set()



def sink_claims() -> tuple[_sink_verdicts.SinkClaims, dict]:
    """The sink claims judged over settings (the shipped sink grid and null_attention.json) and the grid
    file's header (the command, machine and commit that made it; {} without one), read again when either
    file changes."""
    grid = Path(_training_io.RESULTS_DIR) / _sink_grid.FILE
    null = Path(_training_io.RESULTS_DIR) / "null_attention.json"
    return _sink_claims(str(grid), grid.stat().st_mtime if grid.is_file() else 0.0,
                        null.stat().st_mtime if null.is_file() else 0.0)


@st.cache_resource(max_entries=2, show_spinner=False)
def _sink_claims(grid: str, grid_mtime: float, null_mtime: float) -> tuple[_sink_verdicts.SinkClaims, dict]:
    header, runs = _sink_grid.load_grid(grid)
    try:
        shipped = _training_io.load_result("null_attention")
    except AttnInputError:
        shipped = None
    return _sink_verdicts.sink_claims(header, runs, shipped), header




def results_stamp() -> float:
    """The latest modification time of the shipped result files (a rewritten file is measured again)."""
    return max((p.stat().st_mtime for p in Path(_training_io.RESULTS_DIR).glob("*.json")), default=0.0)


# ---------------------------------------------------------------------------- the Tour (issue 34)


@st.cache_data(max_entries=8, show_spinner=False)
def tour_entropy_sweep(spec: SweepSpec, device: str) -> Timed[pd.DataFrame]:
    """One small entropy sweep (the Tour's step: a few query rows, n up to 2^14), no progress bar."""
    spec.validate()
    return timed(lambda: run_sweep(spec, device=device))


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
