"""The Tour's steps: a registry of :class:`Step` objects, each a live view of one page at a small size.

A step declares its controls (:class:`~ui.state.Param`, at most two), the page behind it and a
``show`` function of the widgets -> cached call -> view shape: it draws its controls in the container
it is given, computes through :mod:`ui.cached` (the same entries as the page, so a step and its page
share results), builds its figures with the page's own builders (:mod:`ui.views`) and returns them with
one sentence of lesson made from the numbers they show (:mod:`ui.views.tour`) and the URL state of the
page behind it ("open this in full").

A new step is one more entry in :data:`STEPS`; the Tour page, its URL parameter and its tests follow the
registry.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import plotly.graph_objects as go

from attncore import theory
from attncore.decoder.probe import decoder_shape
from attncore.decoder.sinks import GU_TOKENS
from attncore.decoder.streaming import ABLATIONS
from attncore.errors import AttnInputError
from attncore.evidence import CLAIMS, SOURCES, Row, judge
from attncore.explore import SyntheticSpec
from attncore.gradients import MAX_SCALE_ENTRIES, max_scale_trials, saturation_crossing
from attncore.kernels.cost import cpu_flash_bytes, materialised_bytes
from attncore.kernels.spec import KernelSpec
from attncore.overflow import OVERFLOW_DTYPES
from attncore.sinks import SinkSpec, zoo_theory
from attncore.sweeps import SweepSpec
from attncore.training.bbm import SINK_THRESHOLD
from ui import cached, cached_decoder, cached_models, cached_results, eviction_tour, widgets
from ui.state import Param
from ui.tour_induction import show_induction
from ui.tour_scaling import show_real_scale
from ui.views import decoder as dec_view
from ui.views import evidence as ev_view
from ui.views import heatmaps as hm_view
from ui.views import learned_sinks as ls_view
from ui.views import saturation as sat_view
from ui.views import sink_position as pos_view
from ui.views import sinks as snk_view
from ui.views import tour as view
from ui.views import training as tr_view

__all__ = ["STEPS", "Shown", "Step", "step_params"]


@dataclass(frozen=True)
class Shown:
    """What a step drew: its figures (each with ``layout.meta.view``), the lesson, the page state."""

    figures: tuple[go.Figure, ...]
    lesson: str
    query: dict[str, str]  # the page behind the step, in this step's state
    caption: str = ""
    numbers: dict[str, Any] = field(default_factory=dict)  # what the lesson was made from (for tests)


@dataclass(frozen=True)
class Step:
    """One stop of the tour: a title, the page behind it, its controls and how it is drawn."""

    key: str
    title: str
    page: str  # script path of the page behind it (ui.nav.PAGES)
    params: tuple[Param, ...]
    show: Callable[[Any, Any], Shown]  # (PageContext, container for the controls) -> Shown


def _s(v: Any) -> str:
    return f"{v:g}" if isinstance(v, float) else str(v)


# ------------------------------------------------------------------------------ 1 · the stages fade

P_DK = Param("tour_dk", 64, options=(4, 16, 64, 256, 1024))
STAGES_SIDE = 12  # a 12 x 12 map: every cell visible, one head


def show_stages(ctx: Any, where: Any) -> Shown:
    d_k = int(widgets.select_slider(P_DK, "Head dim d_k", where=where))
    spec = SyntheticSpec(L=STAGES_SIDE, S=STAGES_SIDE, d_k=d_k, heads=1, kv_heads=1, seed=ctx.seed,
                         dtype=ctx.dtype)
    st_ = cached.heatmap_stages(spec, ctx.device).value
    raw = st_.raw[0].double().cpu().numpy()
    scaled = st_.scaled[0].double().cpu().numpy()
    top = float(st_.weights[0].double().max(dim=-1).values.mean())
    nums = {"raw_std": float(raw.std()), "scaled_std": float(scaled.std()), "scale": float(st_.scale),
            "top_weight": top}
    lesson = view.stages_lesson(d_k, nums["raw_std"], nums["scaled_std"], nums["scale"], top)
    query = {"L": str(STAGES_SIDE), "S": str(STAGES_SIDE), "dk": str(d_k), "heads": "1", "kv": "1"}
    fig = hm_view.stages_figure(st_, 0)
    short = ("1 · raw q·k", f"2 · × {st_.scale:.3g}", "3 · masked", "4 · weights")  # four maps in ~540 px
    for note in fig.layout.annotations:  # the page's titles ('1 · raw scores a(q, k) · ±26.8') ran together
        note.text = next((s for s in short if note.text.startswith(s[:4])), note.text)
    return Shown((fig,), lesson, query,
                 f"One head, {STAGES_SIDE} queries × {STAGES_SIDE} keys, q, k ~ N(0, 1) in {ctx.dtype}; "
                 "the three score maps share one colour range.", nums)


# ------------------------------------------------------------------------------ 2 · q·k histograms

P_D = Param("tour_d", 256, options=(1, 4, 16, 64, 256, 1024))
HIST_SAMPLES, HIST_BINS = 20_000, 60  # the Saturation page's defaults: the step and the page share the cache


def show_histograms(ctx: Any, where: Any) -> Shown:
    d = int(widgets.select_slider(P_D, "Head dim d", where=where))
    h = cached.sat_dot_histograms(d, HIST_SAMPLES, HIST_BINS, 1.0, 1.0, ctx.seed, ctx.device,
                                  ctx.sample_dtype).value
    lesson = view.histogram_lesson(d, HIST_SAMPLES, h.std_raw, h.se_raw, h.std_scaled, h.se_scaled)
    fig = sat_view.dot_histogram_figure(h, 1.0, 1.0, True).update_layout(meta={"view": "sat-hist"})
    return Shown((fig,), lesson, {"sat_tab": "Why √d", "sat_d": str(d)},
                 f"{HIST_SAMPLES:,} samples of q and k with unit-variance entries; both histograms on the "
                 "unscaled axis. Dashed: the central limit theorem's Gaussian.",
                 {"std_raw": h.std_raw, "std_scaled": h.std_scaled})


# ------------------------------------------------------------------------------ 3 · saturation

P_SN = Param("tour_sn", 4, options=(2, 4, 16, 64, 256, 1024))
LEVEL = 0.99


def show_saturation(ctx: Any, where: Any) -> Shown:
    n = int(widgets.select_slider(P_SN, "Entries n in the row", where=where))
    x_star = float(theory.saturation_threshold(n, LEVEL))
    x_max = min(40.0, max(10.0, math.ceil(x_star) + 2.0))  # the crossing always inside the range
    sc = cached.sat_saturation_curve(n, x_max).value
    crossing = saturation_crossing(sc.x, sc.top, LEVEL)
    assert crossing is not None  # x_max is past the closed-form threshold
    std_64 = float(theory.dot_product_std(64))
    fig = sat_view.saturation_figure(sc, n, LEVEL, x_star, x_max).update_layout(meta={"view": "sat-curve"})
    return Shown((fig,), view.saturation_lesson(n, LEVEL, crossing, x_star, std_64),
                 {"sat_tab": "Saturation", "sat_sn": str(n), "sat_xmax": f"{x_max:g}"},
                 f"softmax([x, 0, …, 0]) with {n} entries in float64 through attncore's softmax; dashed: the "
                 "closed forms, top weight 1/(1+(n−1)e^(−x)), each other weight 1/(eˣ+n−1).",
                 {"crossing": crossing, "x_star": x_star})


# ------------------------------------------------------------------------------ 4 · the Jacobian

P_KEYS = Param("tour_keys", 16, options=(4, 16, 64, 256))
J_TRIALS, J_SMAX, J_D = 2_000, 64.0, 64


def jacobian_trials(n: int) -> int:
    """The rows the step draws at ``n`` keys: :data:`J_TRIALS`, halved until trials x keys x scales fits
    attncore's limit (1,000 at 256 keys); each count is one of the Saturation page's own options."""
    trials = J_TRIALS
    while trials > 250 and trials > max_scale_trials(n, cached.SCALE_POINTS):
        trials //= 2
    return trials


def jacobian_caption(n: int, trials: int) -> str:
    """What the step drew: the rows per σ, and why fewer than :data:`J_TRIALS` when there are."""
    fewer = "" if trials == J_TRIALS else (
        f" ({J_TRIALS:,} at fewer keys; {trials:,} × {n} keys × {cached.SCALE_POINTS} scales = "
        f"{trials * n * cached.SCALE_POINTS:,} softmax entries stay within the {MAX_SCALE_ENTRIES:,} one "
        "request may compute)")
    return (f"{trials:,} rows of {n} logits σ·z, z ~ N(0, 1), per σ{fewer}; J = diag(p) − ppᵀ is the softmax "
            "Jacobian, the only path from the weights' gradient back to the scores; dashed: the small-σ "
            "expansion, the large-σ limit f_G(0)/σ and a flat row's √(n−1)/n.")


def show_jacobian(ctx: Any, where: Any) -> Shown:
    n = int(widgets.select_slider(P_KEYS, "Keys n per row", where=where))
    trials = jacobian_trials(n)
    sw = cached.sat_scale_sweep(n, trials, J_SMAX, ctx.seed, ctx.device, ctx.sample_dtype).value
    j1 = view.interpolate(sw.sigma, sw.jac_mean, 1.0)
    jd = view.interpolate(sw.sigma, sw.jac_mean, math.sqrt(J_D))
    i = int(np.argmax(sw.jac_mean))
    fig = sat_view.scale_figure(sw).update_layout(meta={"view": "sat-jscale"})
    return Shown((fig,), view.jacobian_lesson(n, j1, jd, J_D, float(sw.sigma[i]), float(sw.jac_mean[i])),
                 {"sat_tab": "Gradients", "sat_keys": str(n), "sat_trials": str(sw.trials)},
                 jacobian_caption(n, sw.trials), {"j_scaled": j1, "j_unscaled": jd, "trials": sw.trials})


# ------------------------------------------------------------------------------ 5 · overflow

P_ODT = Param("tour_odt", "float16", options=tuple(OVERFLOW_DTYPES))


def first_nonfinite(x: np.ndarray, bad: np.ndarray) -> float | None:
    """The first x with a non-finite output (None if there is none)."""
    hit = np.nonzero(bad > 0)[0]
    return float(x[hit[0]]) if hit.size else None


def show_overflow(ctx: Any, where: Any) -> Shown:
    dtype = str(widgets.select(P_ODT, "Precision", where=where))
    ov = cached.sat_overflow_sweep(4, ctx.device).value
    i = ov.dtypes.index(dtype)
    first = first_nonfinite(ov.x, ov.naive_nonfinite[i])
    stable_fails = bool(ov.stable_nonfinite[i].any())
    fig = sat_view.overflow_figure(ov, only=dtype)
    fig.update_layout(meta={"view": "sat-overflow", "dtype": dtype})
    limit = float(theory.exp_overflow_logit(dtype))
    return Shown((fig,), view.overflow_lesson(dtype, first, limit, stable_fails), {"sat_tab": "Gradients"},
                 f"softmax([x, 0, 0, 0]) for x from 1 to 10,000, naive and stable, in {dtype}; error "
                 "against a float64 stable softmax (the Saturation page draws the four precisions together).",
                 {"first_naive": first, "stable_fails": stable_fails})


# ------------------------------------------------------------------------------ 6 · entropy vs n

P_TAU = Param("tour_tau", 1.0, options=(0.5, 1.0, 2.0))
ENT_LENGTHS = tuple(2**k for k in range(4, 15))  # 16 ... 16,384 keys
ENT_QUERIES, ENT_D = 16, 64


def show_entropy(ctx: Any, where: Any) -> Shown:
    tau = float(widgets.select_slider(P_TAU, "Temperature τ (logits ÷ τ·√d)", where=where))
    spec = SweepSpec(lengths=ENT_LENGTHS, d=ENT_D, queries=ENT_QUERIES, temperature=tau, seed=ctx.seed,
                     dtype=ctx.sample_dtype)
    df = cached.tour_entropy_sweep(spec, ctx.device).value
    th_lengths = tuple(sorted({int(round(2.0 ** (k / 2))) for k in range(8, 29)} | set(ENT_LENGTHS)))
    th = cached.entropy_theory(th_lengths, ENT_D, "sqrt_d", tau, "softmax", SweepSpec.ssmax_s).value
    first, last = df.iloc[0], df.iloc[-1]
    lesson = view.entropy_lesson(int(first["n"]), int(last["n"]), float(first["entropy"]),
                                 float(last["entropy"]), 1.0 / tau, float(first["max_weight"]),
                                 float(last["max_weight"]))
    query = {"ent_lo": "4", "ent_hi": "14", "ent_q": str(ENT_QUERIES), "ent_vary": "none", "ent_tau": _s(tau)}
    return Shown((view.entropy_figure(df, th),), lesson, query,
                 f"{ENT_QUERIES} query rows of unit-variance q, k at d = {ENT_D}, scaled by 1/(τ√d), so the "
                 "logits have std σ = 1/τ; dashed: the exact expectation E[H] and uniform attention's log n.",
                 {"entropy": df["entropy"].to_numpy(), "n": df["n"].to_numpy()})


# ------------------------------------------------------------------------------ 7 · a synthetic sink

P_S = Param("tour_s", 6.0, lo=0.0, hi=12.0)


def show_sink(ctx: Any, where: Any) -> Shown:
    s = float(widgets.slider(P_S, "Sink logit s", step=0.5, where=where))
    spec = SinkSpec(strength=s, seed=ctx.seed, dtype=ctx.dtype)
    soft = cached.sink_zoo(spec, ctx.device).value["softmax"]
    alone = cached.sink_zoo(replace(spec, sink=False), ctx.device).value["softmax"]
    th = zoo_theory(spec)["softmax"]
    w, rms = float(soft.sink_weight.mean()), float(soft.output_rms.mean())
    rms0 = float(alone.output_rms.mean())
    fig = snk_view.sink_map_figure(soft.weights.cpu().numpy(), spec, True)
    return Shown((fig,), view.sink_lesson(s, w, th.sink_weight, rms, th.output_rms, rms0),
                 {"snk_s": _s(s)},
                 f"One head: {spec.n} queries over a sink token (key 0, value zero) and {spec.n} real keys "
                 "whose logits are N(0, 1); colour: log weight.",
                 {"sink_weight": w, "rms": rms, "rms_no_sink": rms0})


# ------------------------------------------------------------------------------ 8 · a sink forms in training


def show_learned(ctx: Any, where: Any) -> Shown:
    d = cached_results.training_result("null_attention")
    summary = ls_view.summary_of(d["runs"])
    rows = [(label, int(s["n_sink"]), int(s["n_usable"]), s["bos_end"]["mean"])
            for label, s in summary.items()]
    # 'A denominator bias (…) removes …' / 'No setting …'
    headline = cached_results.sink_claims()[0].fixes.headline
    over = "Over the Training lab's grid of settings, " + headline[:1].lower() + headline[1:]
    fig = ls_view.bos_curves_figure(summary)
    for note in fig.layout.annotations:  # two panels in ~540 px: the page's titles ran into each other
        note.text = note.text.replace(" (head not needed)", "").replace(" (head must copy)", " (must copy)")
    return Shown((fig,), view.learned_lesson(rows, SINK_THRESHOLD, over),
                 {"tr_tab": tr_view.TAB_TITLES["null_attention"]},
                 "The Training lab's shipped null-attention experiment: small transformers trained on the "
                 "Bigram-Backcopy task, one curve per attention variant (mean over seeds, band: their "
                 "range).",
                 {"rows": rows})


# ------------------------------------------------------------------------- 9 · the sink of a real decoder

REAL_WINDOWS, REAL_WINDOW = 4, 128  # the deletion's cost over four windows of 128 tokens (a t interval)
REAL_EPS = 0.3  # the Attention sinks page's default sink threshold (snk_eps)


def show_real_sink(ctx: Any, where: Any) -> Shown:
    lm = cached_models.language_model("smollm2", ctx.device)
    kv = decoder_shape(lm.model).kv_heads
    s = cached_decoder.decoder_sinks(GU_TOKENS, REAL_EPS, ctx.device).value
    d = cached_decoder.decoder_deletion(GU_TOKENS, ctx.device).value
    abl = cached_decoder.decoder_ablations(REAL_WINDOWS, REAL_WINDOW, ctx.device).value
    deleted = next(a for a in abl if a.name == ABLATIONS[0])
    try:
        evict = pos_view.eviction(cached_decoder.shipped_stream_run().result)
    except AttnInputError:  # the shipped run's file is missing: the lesson says the rest
        evict = None
    moved = d.sink_heads(REAL_EPS)
    lesson = view.real_sink_lesson(s.sink_heads, s.heads, s.length, REAL_EPS, moved, d.layer,
                                   d.norm_new_first, d.norm_first, deleted.mean, deleted.margin,
                                   deleted.windows, REAL_WINDOW, evict)
    return Shown((dec_view.sink_grid_figure(s, kv), pos_view.deletion_figure(d, REAL_EPS)), lesson,
                 {"snk_view": "decoder", "dec_aw": str(REAL_WINDOWS), "dec_al": str(REAL_WINDOW)},
                 f"SmolLM2-135M on the shipped text at {s.length} tokens: every head's mean weight on the "
                 f"first token (left); per layer, the heads giving more than {REAL_EPS:g} to the first "
                 "token, to token 1, and to token 1 once the first token is deleted (right).",
                 {"sink_heads": s.sink_heads, "moved": moved, "cost": deleted.mean, "margin": deleted.margin,
                  "eviction": evict})


# ------------------------------------------------------------------------------ 10 · FlashAttention's memory

P_T = Param("tour_T", 4096, options=(1024, 4096, 16384, 65536))
MEM_LENGTHS = tuple(2**k for k in range(8, 17))
MEM_SPEC = KernelSpec(heads=4)  # the Kernels page's default call: batch 1, 4 heads, head dim 64, float32
MEM_THREADS = 2


def show_memory(ctx: Any, where: Any) -> Shown:
    T = int(widgets.select_slider(P_T, "Sequence length T", fmt=lambda v: f"{v:,}", where=where))
    mat = [materialised_bytes("math", MEM_SPEC, t, t) for t in MEM_LENGTHS]
    fused = [cpu_flash_bytes(MEM_SPEC, t, t, MEM_THREADS) for t in MEM_LENGTHS]
    m_T, f_T = materialised_bytes("math", MEM_SPEC, T, T), cpu_flash_bytes(MEM_SPEC, T, T, MEM_THREADS)
    return Shown((view.memory_figure(MEM_LENGTHS, mat, fused, T),),
                 view.memory_lesson(T, MEM_SPEC.heads, m_T, f_T), {"k_mem": "1"},
                 f"attncore.kernels.cost's upper estimates for one call ({MEM_SPEC.heads} heads, head dim "
                 f"{MEM_SPEC.head_dim}, float32, torch's CPU flash kernel on {MEM_THREADS} threads); the "
                 "Kernels page measures the peak memory of every backend on this machine.",
                 {"materialised": m_T, "fused": f_T})


# ------------------------------------------------------------------------------ 11 · the Evidence overview

P_SRC = Param("tour_src", "sqrtd", options=tuple(SOURCES))


def show_evidence(ctx: Any, where: Any) -> Shown:
    src = str(widgets.select(P_SRC, "Source", labels={k: s.short for k, s in SOURCES.items()}, where=where))
    claims = [c for c in CLAIMS if src in c.sources]
    fast = [c for c in claims if not c.slow]
    rows = []
    for c in fast:
        res = cached_results.evidence_measurement(c.key, ctx.device, ctx.seed, ctx.dtype,
                                                  cached_results.results_stamp())
        measured, j = judge(c, res.value)
        rows.append(Row(c, res.value, measured, j, res.seconds))
    fig = ev_view.verdict_figure(rows, only=(src,))
    lesson = view.evidence_lesson(SOURCES[src].short, ev_view.summary(rows), len(claims) - len(fast))
    return Shown((fig,), lesson, {"ev_src": src},
                 "Each claim tested by attncore on this machine and judged by a stated rule.",
                 {"verdicts": [r.judgement.verdict for r in rows]})


STEPS: tuple[Step, ...] = (
    Step("stages", "The stages fade with 1/√d", "pages/1_Heatmaps.py", (P_DK,), show_stages),
    Step("histograms", "q·k spreads like √d", "pages/3_Saturation_and_gradients.py", (P_D,), show_histograms),
    Step("saturation", "Large scores saturate the softmax", "pages/3_Saturation_and_gradients.py", (P_SN,),
         show_saturation),
    Step("jacobian", "A saturated row passes no gradient", "pages/3_Saturation_and_gradients.py", (P_KEYS,),
         show_jacobian),
    Step("overflow", "The naive softmax overflows", "pages/3_Saturation_and_gradients.py", (P_ODT,),
         show_overflow),
    Step("entropy", "Entropy flattens as n grows", "pages/2_Entropy_vs_length.py", (P_TAU,), show_entropy),
    Step("sink", "A head that wants to write nothing", "pages/4_Attention_sinks.py", (P_S,), show_sink),
    Step("learned", "A sink forms in training", "pages/6_Training_lab.py", (), show_learned),
    Step("induction", "An induction head forms", "pages/6_Training_lab.py", (), lambda c, w: Shown(*show_induction(c, w))),  # noqa: E501
    Step("real_sink", "The sink of a real decoder is a position", "pages/4_Attention_sinks.py", (),
         show_real_sink),
    Step("keep", "What survives in the cache", "pages/4_Attention_sinks.py", (),
         lambda c, w: Shown(*eviction_tour.keep_parts(c, w))),
    Step("real_scale", "Without 1/√d a real model saturates", "pages/3_Saturation_and_gradients.py", (),
         lambda ctx, where: Shown(**show_real_scale(ctx, where))),
    Step("memory", "FlashAttention's memory", "pages/5_Kernels.py", (P_T,), show_memory),
    Step("evidence", "The evidence", "pages/7_Evidence.py", (P_SRC,), show_evidence),
)


def step_params() -> tuple[Param, ...]:
    """Every step's controls (declared once, all in the URL)."""
    return tuple(p for s in STEPS for p in s.params)
