"""Entropy vs length: a softmax row flattens as n grows; measured to 2^24 keys (2^30 on CUDA), with theory."""

from __future__ import annotations

import logging
import math

import pandas as pd
import streamlit as st

from attncore.errors import AttnInputError
from attncore.sweeps import METHODS, SCALE_RULES, SWEEP_NORMALIZERS, engine_choice, max_sweep_n
from ui import decoder_lab, state, widgets
from ui.admission import heavy
from ui.cached import check_entropy_theory, entropy_theory, entropy_theory_given_queries, peak_weights
from ui.cached_results import training_result as training_result_file
from ui.page import GLOBAL_PARAMS, PageContext, run_page
from ui.state import Param
from ui.sweep import run_sweeps
from ui.text import plain
from ui.views import entropy_text as words
from ui.views import training as training_view
from ui.views.entropy import (
    EMPTY_SWEEP,
    Controls,
    Series,
    build_series,
    figure1_charts,
    figure1_frame,
    main_chart,
    mark_partial,
    mark_stale,
    n_label,
    panel_frame,
    partial_note,
    seed_note,
    theory_lengths,
    validity_frame,
)

TAU_OPTIONS = ("0.25", "0.5", "1", "2", "4")
RULE_LABELS = {"sqrt_d": "1/√d (standard)", "none": "none (raw q·k)", "ssmax": "SSMax: s·log n/√d",
               "llama4": "Llama 4 NoPE: (1 + 0.1·log(⌊n/8192⌋+1))/√d"}
NORM_LABELS = {"softmax": "softmax", "softmax1": "softmax1 (off-by-one)", "sigmoid": "sigmoid (b = −log n)"}
VARY_LABELS = {"temperature": "temperature τ", "scale_rule": "scale rule", "normalizer": "normaliser",
               "none": "nothing (one curve)"}
METHOD_LABELS = {"logits": "logits (exact shortcut: n numbers per row)",
                 "vectors": "vectors (real q, k, v: n·(d + 16) numbers)"}
N_EXPONENTS = tuple(range(4, 31))  # 2^30 on CUDA; each device shows up to its max_sweep_n

P_LO = Param("ent_lo", 4, lo=4, hi=30)
P_HI = Param("ent_hi", 20, lo=4, hi=30)
P_PPO = Param("ent_ppo", 1, options=(1, 2, 4))
P_D = Param("ent_d", 64, options=(8, 16, 32, 64, 128, 256, 512, 1024))
P_Q = Param("ent_q", 32, options=(1, 4, 16, 32, 64, 128, 256, 512, 1024))
P_METHOD = Param("ent_method", "logits", options=METHODS)
P_VARY = Param("ent_vary", "temperature", options=tuple(VARY_LABELS))
P_TAUS = Param("ent_taus", ("0.5", "1", "2"), options=TAU_OPTIONS, multi=True)
P_RULES = Param("ent_rules", ("sqrt_d", "ssmax", "llama4"), options=SCALE_RULES, multi=True)
P_NORMS = Param("ent_norms", ("softmax", "softmax1", "sigmoid"), options=SWEEP_NORMALIZERS, multi=True)
P_TAU = Param("ent_tau", 1.0, lo=0.1, hi=10.0)
P_RULE = Param("ent_rule", "sqrt_d", options=SCALE_RULES)
P_NORM = Param("ent_norm", "softmax", options=SWEEP_NORMALIZERS)
P_S = Param("ent_s", 0.43, lo=0.05, hi=2.0)
P_FULL = Param("ent_full", False)
P_AXIS = Param("ent_axis", "nats", options=("nats", "fraction"))
P_PEAK = Param("ent_peak", 3.0, lo=-10.0, hi=10.0)
P_REST = Param("ent_rest", -2.0, lo=-10.0, hi=10.0)
PARAMS = (P_LO, P_HI, P_PPO, P_D, P_Q, P_METHOD, P_VARY, P_TAUS, P_RULES, P_NORMS, P_TAU, P_RULE, P_NORM,
          P_S, P_FULL, P_AXIS, P_PEAK, P_REST, *decoder_lab.ENTROPY_PARAMS)
log = logging.getLogger("attnlab")
QUADRATURE_BYTES = 32 * 1024**2  # chunked quadrature (attncore.row_theory.CHUNK_CELLS); it queues by time
RANGE_KEY = "ent_n"  # the range slider's own key; P_LO / P_HI carry its value in the URL
FIG1_MAX_EXP = 20  # figure-1 rows are materialised: n <= 2^20


def n_range(where, max_exp: int = 24) -> tuple[int, int]:
    """The range slider over powers of two, kept in the URL as ent_lo / ent_hi (exponents).

    The slider is a range slider because it gets a pair as ``value`` (its starting point,
    from the URL); afterwards it keeps its own state and the two exponents follow it. It ends
    at the device's cap ``2^max_exp`` (:func:`attncore.sweeps.max_sweep_n`); a URL asking for
    more is clamped to it with a note.
    """
    lo, hi = sorted((int(st.session_state[P_LO.key]), int(st.session_state[P_HI.key])))
    if hi > max_exp:
        st.info(f"n = {n_label(2**hi)} is above this device's cap of {n_label(2**max_exp)} keys per row; "
                "showing up to the cap.", icon=":material/link:")
        lo, hi = min(lo, max_exp), max_exp
        st.session_state.pop(RANGE_KEY, None)  # the slider starts again from the clamped range
    exps = [e for e in N_EXPONENTS if e <= max_exp]
    a, b = where.select_slider("Sequence lengths n", options=[2**e for e in exps],
                               value=(2**lo, 2**hi), key=RANGE_KEY, format_func=n_label,
                               help=f"Keys per row, from 2⁴ to {n_label(2**max_exp)} on this device (2²⁴ "
                                    "on a CPU, 2³⁰ on CUDA). Each row is streamed: no n × n matrix is ever "
                                    "formed.")
    lo, hi = int(math.log2(a)), int(math.log2(b))
    st.session_state[P_LO.key], st.session_state[P_HI.key] = lo, hi
    return lo, hi


def controls(where, max_exp: int = 24) -> Controls:
    """Draw the sidebar controls and return what they say (n up to ``2^max_exp``)."""
    where.markdown("#### Sweep")
    lo, hi = n_range(where, max_exp)
    ppo = widgets.select_slider(P_PPO, "Points per doubling of n", where=where)
    d = widgets.select_slider(P_D, "Head dim d", where=where,
                              help="q and k have d coordinates; with 1/√d scaling the logits' spread does "
                                   "not depend on d (only |q|²/d fluctuates a little).")
    queries = widgets.select_slider(P_Q, "Query rows", where=where,
                                    help="Independent queries averaged at every n (error bars: ±2 s.e.).")
    method = widgets.radio(P_METHOD, "Method", labels=METHOD_LABELS, horizontal=False, where=where)
    where.markdown("#### Compare")
    vary = widgets.select(P_VARY, "Vary", labels=VARY_LABELS, where=where,
                          help="Draw one curve per value of this setting; the others stay as set below.")
    taus, rules, norms = P_TAUS.default, P_RULES.default, P_NORMS.default
    if vary == "temperature":
        taus = widgets.multiselect(P_TAUS, "Temperatures τ (logits ÷ τ·√d)", where=where)
    elif vary == "scale_rule":
        rules = widgets.multiselect(P_RULES, "Scale rules", labels=RULE_LABELS, where=where)
    elif vary == "normalizer":
        norms = widgets.multiselect(P_NORMS, "Normalisers", labels=NORM_LABELS, where=where)
    tau, rule, norm = P_TAU.default, P_RULE.default, P_NORM.default
    if vary != "temperature":
        tau = widgets.slider(P_TAU, "Temperature τ", step=0.05, where=where,
                             help="Divides the logits: τ < 1 sharpens, τ > 1 flattens.")
    if vary != "scale_rule":
        rule = widgets.select(P_RULE, "Scale rule", labels=RULE_LABELS, where=where)
    if vary != "normalizer":
        norm = widgets.select(P_NORM, "Normaliser", labels=NORM_LABELS, where=where)
    s = widgets.slider(P_S, "SSMax s", step=0.01, where=where,
                       help="SSMax multiplies the logits by s·log n (the paper's figure uses s = 0.43).")
    where.markdown("#### Display")
    full = widgets.toggle(P_FULL, "Show the fully scaled output ×√(n/e)", where=where)
    axis = widgets.radio(P_AXIS, "Entropy axis", labels={"nats": "nats", "fraction": "fraction of log n"},
                         where=where)
    return Controls(lo=lo, hi=hi, ppo=int(ppo), d=int(d), queries=int(queries), method=method, vary=vary,
                    taus=tuple(taus), rules=tuple(rules), norms=tuple(norms), tau=float(tau), rule=rule,
                    norm=norm, s=float(s), full=bool(full), axis=axis)


def theory_for(s: Series) -> tuple[pd.DataFrame, float]:
    sp = s.spec
    res = entropy_theory(theory_lengths(sp), sp.d, sp.scale_rule, sp.temperature, sp.normalizer, sp.ssmax_s)
    return res.value, res.seconds


def explain(max_exp: int = 24) -> None:
    """One sentence and the key formulas above the first chart (the rest: :func:`explain_more`)."""
    st.markdown(
        "A query spreads one unit of attention over the n keys it sees: with logits of a fixed spread σ "
        "the row flattens as n grows, its entropy climbing like log n. Curves: **attncore** streaming rows "
        f"of up to {n_label(2**max_exp)} keys; dashed: exact expectations."
    )
    st.latex(r"H \approx \log n - \frac{\sigma^2}{2},\qquad "
             r"\max_j p_j \approx \frac{e^{\sigma z_{\max}}}{n\,e^{\sigma^2/2}},\qquad "
             r"\operatorname{std}(o) = \sqrt{\textstyle\sum_j p_j^2} \approx \sqrt{\frac{e^{\sigma^2}}{n}}")


# The expanders below the panels are computed and sent only when opened (issue 34: closed, they still sent
# their text, formulas and the validity table, whose grid is about 1.5 MB of JavaScript that a new tab loaded
# and ran beside Plotly's before it drew the first chart).
MORE_OPEN, HOW_OPEN, VALID_OPEN = "ent_more_open", "ent_how_open", "ent_valid_open"  # views, not settings


def explain_more() -> None:
    box = widgets.lazy_expander("What the formulas assume, and the fully scaled fix", MORE_OPEN,
                                icon=":material/menu_book:")
    if box is not None:
        with box:
            explain_text()


def explain_text() -> None:
    st.markdown(words.formulas_text())
    training_result()


def training_result() -> None:
    """This app's own measurement of the "fully scaled" result, beside the post's, and a link to it."""
    try:
        sentence = training_view.entropy_page_sentence(training_result_file("lr_sweep"))
    except AttnInputError:
        sentence = "This app's own run of that comparison is not shipped with this copy of the app."
    st.markdown(sentence)
    st.page_link("pages/6_Training_lab.py", label="Training lab: the learning-rate sweep and its curves",
                 icon=":material/model_training:")


def how_it_is_computed(engine: str = "torch") -> None:
    """The method, as the engine that ran on this device (``torch`` or ``fused``) does it."""
    box = widgets.lazy_expander("How attncore computes this", HOW_OPEN)
    if box is None:
        return
    with box:
        st.markdown(words.method_text(engine))
        st.latex(words.METHOD_LATEX)


def metrics(s: Series, df: pd.DataFrame, th: pd.DataFrame, given: pd.DataFrame) -> None:
    """The first curve at its longest n: measured, against the exact value given its queries and overall."""
    st.markdown(words.metrics_heading(s, df))
    # Two by two: a value with its error bar and two reference values did not fit a quarter of the page
    # ("11.952 ± 0…."; issue 34, tests/test_browser_labels.py measures it).
    cols = [*st.columns(2), *st.columns(2)]
    for col, cell in zip(cols, words.metric_cells(df, th, given), strict=True):
        col.metric(**cell, delta_color="off", delta_arrow="off")
    st.caption(words.metrics_caption(s, df, th, given))


def validity_table(series: list[Series], frames: list[pd.DataFrame], theories: list[pd.DataFrame]) -> None:
    widgets.table(validity_frame(series, frames, theories),
                  column_config={col: st.column_config.NumberColumn(format=fmt)
                                 for col, fmt in words.VALIDITY_FORMATS.items()})
    st.caption(words.validity_caption())


@st.fragment
def figure1(ctx: PageContext) -> None:
    """SSMax paper, figure 1, as a fragment: its sliders rerun this panel only (fast in live demos).

    A fragment rerun skips the page's error boundary and URL sync, so it does both itself.
    """
    try:
        figure1_body(ctx)
    except AttnInputError as exc:
        st.error(plain(exc), icon=":material/block:")
    except Exception as exc:  # the panel's boundary: never show a traceback
        log.exception("figure-1 panel failed")
        st.error(plain(f"Something went wrong in this panel ({type(exc).__name__}: {exc})."),
                 icon=":material/error:")
    finally:
        state.sync_url((*GLOBAL_PARAMS, *PARAMS))


def figure1_body(ctx: PageContext) -> None:
    st.markdown(words.FIGURE1_INTRO)
    st.latex(words.FIGURE1_LATEX)
    c1, c2 = st.columns(2)
    peak = widgets.slider(P_PEAK, "Peak logit", step=0.5, where=c1)
    rest = widgets.slider(P_REST, "Other logits", step=0.5, where=c2)
    s = float(st.session_state[P_S.key])
    ns = tuple(sorted({2**k for k in range(1, FIG1_MAX_EXP + 1)} | {10**k for k in range(1, 7)}))
    res = peak_weights(ns, float(peak), float(rest), s, ctx.device)
    df = res.value
    fig, mfig = figure1_charts(df, peak, rest, s, 2.0**FIG1_MAX_EXP)
    left, right = st.columns(2)
    left.plotly_chart(fig, key="chart_fig1")
    right.plotly_chart(mfig, key="chart_margin")
    st.caption(words.figure1_caption(df, peak, rest))
    widgets.csv_download(figure1_frame(df, peak, rest, s), "ssmax_figure1.csv",
                         label="Download figure-1 data (CSV)", key="dl_ent_fig1")
    widgets.caption_compute(ctx.device_label, res.seconds, f"{len(ns)} rows up to n = 2²⁰.")


LAST_KEY = "_ent_last_chart"  # the last panels drawn in this session (not a control: not in the URL)


def stale_charts(where) -> None:
    """While a new sweep waits for Run (or was stopped), keep the last panels on screen, marked stale."""
    last = st.session_state.get(LAST_KEY)
    if last is None:
        return
    fig, labels = last
    with where.container():
        st.warning(f"Stale: these panels show the previous settings ({labels}); they update when the new "
                   "sweep finishes.", icon=":material/history:")
        st.plotly_chart(mark_stale(fig), key="chart_entropy")


def body(ctx: PageContext) -> None:
    st.title("Entropy vs length")
    max_exp = max_sweep_n(ctx.device).bit_length() - 1
    explain(max_exp)
    c = controls(ctx.controls, max_exp)
    if ctx.dtype in ("float16", "bfloat16"):
        st.info("Sweeps draw float32 samples and add them up in float64; half precision applies to the "
                "Heatmaps page only.", icon=":material/info:")
    if c.vary != "none" and not {"temperature": c.taus, "scale_rule": c.rules, "normalizer": c.norms}[c.vary]:
        st.warning("Nothing is selected to compare; showing one curve with the settings below it.")
    series = build_series(c, ctx.seed, ctx.sample_dtype)
    cells = 0.0
    for s in series:  # the theory's quadrature budget is checked before any sweep starts
        sp = s.spec
        cells += check_entropy_theory(theory_lengths(sp), sp.d, sp.scale_rule, sp.temperature,
                                      sp.normalizer, sp.ssmax_s)
    # The exact expectations first, then the sweeps (a partial chart draws the theory whole). Run in
    # a thread beside the sweep, the quadrature slowed the sweep's workers more than it saved: the
    # chart of a new head dim came 0.15-0.2 s later (both are interpreter-bound on two cores).
    n_first = max(series[0].shown or series[0].spec.lengths)
    theory_slot = st.empty()
    with st.spinner("Computing the exact expectations (quadrature)…"), \
            heavy(QUADRATURE_BYTES, seconds=cells / 2.4e7, label="the theory step", where=theory_slot):
        th = [theory_for(s) for s in series]  # ui.admission queues it with other heavy work
    box, chart_slot = st.container(), st.empty()
    drawn: list[int] = []

    def draw_partial(parts: list[pd.DataFrame | None]) -> None:
        """A long sweep's short lengths, drawn as soon as they are done (only the first time)."""
        if drawn:  # each draw re-sends the whole figure: once is enough
            return
        done = [s.measured(EMPTY_SWEEP if p is None else p) for s, p in zip(series, parts, strict=True)]
        n_done = max((int(f["n"].max()) for f in done if len(f)), default=0)
        if n_done < 1:  # a report with no length finished yet (one long length only): nothing to draw
            return
        th_now = [s.in_range(t) for s, (t, _) in zip(series, th, strict=True)]
        with chart_slot.container():
            st.caption(partial_note(n_done))
            st.plotly_chart(mark_partial(main_chart(series, done, th_now, c), n_done))
        drawn.append(n_done)

    result = run_sweeps([s.spec for s in series], ctx.device, key="ent_sweep",
                        labels=[s.label for s in series], where=box, partial=draw_partial)
    theories = [s.in_range(t) for s, (t, _) in zip(series, th, strict=True)]
    if result is None:
        stale_charts(chart_slot)
    else:
        frames = [s.measured(df) for s, df in zip(series, result.frames, strict=True)]
        fig = main_chart(series, frames, theories, c)
        st.session_state[LAST_KEY] = (fig, ", ".join(s.label for s in series))
        chart_slot.plotly_chart(fig, key="chart_entropy")
        # the metrics' "given these queries" values: needed only below the chart, so computed after it
        given = entropy_theory_given_queries(series[0].spec, n_first, ctx.device).value
        metrics(series[0], frames[0], theories[0], given)
        widgets.csv_download(lambda: panel_frame(series, frames, theories), "entropy_vs_length.csv",
                             label="Download these curves (CSV)", key="dl_ent_panels")
        engines = [engine_choice(s.spec, ctx.device) for s in series]
        widgets.caption_compute(ctx.device_label, result.seconds,
                                words.sweep_caption(series, len(series[0].shown), c.queries, c.method,
                                                   sum(t for _, t in th), result.computed, engines))
        box = widgets.lazy_expander("Where the large-n formulas hold", VALID_OPEN)
        if box is not None:
            with box:
                validity_table(series, frames, theories)
        explain_more()
        how_it_is_computed(engines[0].name)
    figure1_section(ctx)
    decoder_lab.entropy_part(ctx)


FIG1_OPEN = "ent_fig1_open"  # the expander's open state (a view, not a setting)
FIG1_TITLE = "One spike against a growing crowd: SSMax's figure 1"


def figure1_section(ctx: PageContext) -> None:
    """Figure 1 in an expander computed and drawn only when opened (issue 34: two of the page's three
    charts), open from the start when the URL carries its own settings."""
    linked = P_PEAK.key in st.query_params or P_REST.key in st.query_params
    box = st.expander(FIG1_TITLE, expanded=linked, key=FIG1_OPEN, on_change="rerun",
                      icon=":material/show_chart:")
    if box.open:
        with box:
            figure1(ctx)


SEED_NOTE = seed_note()
run_page(title="Entropy vs length", icon=":material/trending_up:", params=PARAMS, body=body,
         seed_note=SEED_NOTE, oom_hint="Lower the query rows, d or the number of curves.")
