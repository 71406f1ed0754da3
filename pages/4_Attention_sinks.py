"""Attention sinks: null attention, the normaliser zoo, and sinks in a real model."""

from __future__ import annotations

from dataclasses import replace

import streamlit as st

from attncore.sinks import (
    CONTENT_RANGE,
    GATE_KINDS,
    MAX_TOKENS,
    STRENGTH_RANGE,
    SWEEP_QUERIES,
    SinkSpec,
    sink_report,
    zoo_theory,
)
from ui import cached, causal, decoder_lab, eviction_panel, learned, realtext, widgets
from ui.page import PageContext, in_fragment, run_page
from ui.state import Param
from ui.text import plain
from ui.views import sinks as view
from ui.views import sinks_text as text

P_VIEW = Param("snk_view", "lab", options=("lab", "model", "learned", "decoder"))
P_N = Param("snk_n", 32, lo=1, hi=MAX_TOKENS)
P_SINK = Param("snk_sink", True)
P_LOG = Param("snk_log", True)
P_S = Param("snk_s", 6.0, lo=STRENGTH_RANGE[0], hi=STRENGTH_RANGE[1])
P_V = Param("snk_v", 0.0, lo=0.0, hi=1.0)
P_C = Param("snk_c", 0.0, lo=CONTENT_RANGE[0], hi=CONTENT_RANGE[1])
P_SD = Param("snk_sd", 1.0, lo=0.0, hi=3.0)
P_B = Param("snk_b", 1.0, lo=-10.0, hi=10.0)
P_GB = Param("snk_gb", -2.0, lo=-6.0, hi=6.0)
P_GATE = Param("snk_gate", "elementwise", options=GATE_KINDS)
MP = realtext.model_params("snk_", layer=2)
MP_NEXT = causal.next_params("snk_")
P_EPS = Param("snk_eps", 0.3, lo=0.05, hi=0.95)
PARAMS = (P_VIEW, P_N, P_SINK, P_LOG, P_S, P_V, P_C, P_SD, P_B, P_GB, P_GATE, *MP.all(), P_EPS,
          *MP_NEXT.all(), *learned.SINKS_PARAMS, *decoder_lab.DECODER_PARAMS,
          *eviction_panel.KEEP_PARAMS)



# ---------------------------------------------------------------------------- explanation


def explain() -> None:
    """One sentence and the key formula above the first chart (the rest: :func:`explain_more`)."""
    st.markdown(text.EXPLAIN)
    st.latex(text.EXPLAIN_LATEX)


MORE_OPEN = "snk_more_open"  # the expander's open state (a view, not a setting: not in the URL)


def explain_more(spec: SinkSpec | None = None) -> None:
    """The full text and formulas, in an expander computed and sent only when opened (issue 34: closed, its
    three display formulas were still typeset with the first chart of every part)."""
    box = widgets.lazy_expander("Sinks and their fixes, in full", MORE_OPEN, icon=":material/menu_book:")
    if box is None:
        return
    with box:
        explain_text()
        if spec is not None:
            explain_lab(spec)


def explain_text() -> None:
    st.markdown(text.FULL_TEXT)
    for latex in text.FULL_LATEX:
        st.latex(latex)


def explain_lab(spec: SinkSpec) -> None:
    st.markdown(text.lab_text(spec))
    st.latex(text.LAB_LATEX)


# ---------------------------------------------------------------------------- synthetic lab


def lab_controls(where) -> SinkSpec:
    where.markdown("#### Sequence")
    n = widgets.slider(P_N, "Real tokens n", where=where,
                       help="Queries and non-sink keys. The sweeps average the first "
                            f"{SWEEP_QUERIES} queries.")
    sink = widgets.toggle(P_SINK, "Sink token at position 0", where=where)
    if sink:
        widgets.slider(P_S, "Sink strength s (its logit)", step=0.25, where=where,
                       help="How well the sink's key aligns with the queries: every query scores it s.")
        widgets.slider(P_V, "Sink value RMS ν", step=0.05, where=where,
                       help="0: the sink's value is a zero vector; 1: as large as a real token's value.")
    c = widgets.slider(P_C, "Content logit c", step=0.25, where=where,
                       help="Mean logit of the real tokens: how relevant they are. Low c = nothing relevant.")
    sd = widgets.slider(P_SD, "Logit spread σ", step=0.05, where=where,
                        help="Std of the real tokens' logits around c.")
    widgets.toggle(P_LOG, "Log colour scale for the weight map", where=where,
                   help="Colour by log10(weight), 1e-4 to 1: the real keys, which share what the sink "
                        "leaves, differ in colour too. Off: linear 0 to 1.")
    where.markdown("#### Fixes")
    b = widgets.slider(P_B, "Sink logit b (learned, per head)", step=0.25, where=where,
                       help="The extra denominator logit of the gpt-oss form; b = 0 is softmax1.")
    gb = widgets.slider(P_GB, "Gate bias b_g", step=0.25, where=where,
                        help=text.GATE_HELP)
    gate = widgets.radio(P_GATE, "Gate shape", where=where,
                         labels={"elementwise": "elementwise", "headwise": "headwise"},
                         help="Elementwise: one gate per output dimension; headwise: one per query.")
    return SinkSpec(n=n, sink=sink, strength=float(st.session_state.get(P_S.key, P_S.default)),
                    sink_value=float(st.session_state.get(P_V.key, P_V.default)), content=c, spread=sd,
                    sink_logit=b, gate_bias=gb, gate=gate)


def lab(ctx: PageContext) -> None:
    spec = replace(lab_controls(ctx.controls), seed=ctx.seed, dtype=ctx.dtype)
    spec.validate()
    zoo_res = cached.sink_zoo(spec, ctx.device)
    s_res = cached.sink_strength_sweep(spec, ctx.device)
    zoo, theory = zoo_res.value, zoo_theory(spec)
    sink_section(spec, zoo, theory, s_res.value)
    seconds = zoo_res.seconds + s_res.seconds
    # Sections 2 and 3 (6 of the lab's 9 charts) are computed and sent only once opened (issue 34).
    box = st.expander(NOTHING_TITLE, key=NOTHING_OPEN, on_change="rerun", icon=":material/block:")
    if box.open:
        with box:
            c_res = cached.sink_content_sweep(spec, ctx.device)
            nothing_section(spec, c_res.value)
            seconds += c_res.seconds
    box = st.expander(ZOO_TITLE, key=ZOO_OPEN, on_change="rerun", icon=":material/compare:")
    if box.open:
        with box:
            zoo_section(spec, zoo, theory)
    widgets.caption_compute(ctx.device_label, seconds,
                            f"One head, {spec.n} queries × {spec.n + spec.sink} keys, d = 64, {spec.dtype}; "
                            f"sweeps of 41 points over the first {min(spec.n, SWEEP_QUERIES)} queries.")
    explain_more(spec)


def sink_section(spec: SinkSpec, zoo, theory, sweep) -> None:
    st.markdown("##### 1 · A sink lets a head write almost nothing")
    soft = zoo["softmax"]
    charts_row(spec, soft, sweep)
    c = st.columns(4)
    if spec.sink:
        c[0].metric("Weight on the sink", f"{float(soft.sink_weight.mean()):.3f}",
                    f"theory {theory['softmax'].sink_weight:.3f}", delta_color="off", delta_arrow="off",
                    help="Softmax, mean over queries.")
    else:
        c[0].metric("Weight on the sink", "no sink", help="Switch the sink token on in the sidebar.")
    c[1].metric("Weight on real tokens", f"{float((soft.row_sum - soft.sink_weight).mean()):.3f}")
    c[2].metric("Output RMS", f"{float(soft.output_rms.mean()):.4f}",
                f"theory {theory['softmax'].output_rms:.4f}", delta_color="off", delta_arrow="off")
    no_sink = float(sweep.series["output_rms_nosink"].mean())
    c[3].metric("Output RMS without a sink", f"{no_sink:.4f}",
                help="The same queries over the real tokens only: softmax must mix real values.")
    widgets.csv_download(lambda: view.strength_frame(sweep, spec), "sink_strength_sweep.csv",
                         label="Download the strength sweep (CSV)", key="dl_snk_strength")
    st.caption(text.half_caption(spec))


def charts_row(spec: SinkSpec, soft, sweep) -> None:
    """The weight map, the sink weight and the output RMS against the sink strength."""
    no_sink = float(sweep.series["output_rms_nosink"].mean())
    log_color = bool(st.session_state.get(P_LOG.key, P_LOG.default))
    # The map on its own row at its own width (a minimum per key): in a third of the row its 33 keys
    # were ~75 px, the sink column a hairline (issue 41). The two sweeps side by side under it.
    st.plotly_chart(view.sink_map_figure(soft.weights.cpu().numpy(), spec, log_color), key="chart_snk_map",
                    width="content")
    if spec.sink:
        mid, right = st.columns(2)
    else:  # no sink token: there is no weight on the sink to draw
        (right,), mid = st.columns(1), None
    if mid is not None:
        mid.plotly_chart(view.strength_figure(sweep, spec), key="chart_snk_strength")
    right.plotly_chart(view.strength_rms_figure(sweep, spec, no_sink), key="chart_snk_rms")


NOTHING_TITLE = "2 · Nothing relevant: softmax must still spend 1"
ZOO_TITLE = "3 · The same logits, six normalisers"
NOTHING_OPEN, ZOO_OPEN = "snk_nothing_open", "snk_zoo_open"  # expanders' open state (a view, not a setting)


def nothing_section(spec: SinkSpec, sweep) -> None:
    st.markdown(text.NOTHING_TEXT)
    mass_fig, rms_fig = view.nothing_figures(sweep, spec)
    left, right = st.columns(2)
    left.plotly_chart(mass_fig, key="chart_snk_nothing_mass")
    right.plotly_chart(rms_fig, key="chart_snk_nothing_rms")
    st.caption(text.nothing_caption(spec))
    widgets.csv_download(lambda: view.content_frame(sweep), "sink_nothing_relevant.csv",
                         label="Download the content sweep (CSV)", key="dl_snk_nothing")


def zoo_section(spec: SinkSpec, zoo, theory) -> None:
    st.plotly_chart(view.zoo_maps_figure(zoo), key="chart_snk_zoo")
    for col, (field, label, log_y) in zip(st.columns(3), view.ZOO_FIELDS, strict=True):
        col.plotly_chart(view.zoo_bars_figure(zoo, theory, field, label, log_y), key=f"chart_snk_zoo_{field}")
    st.caption(text.zoo_caption(spec, zoo))
    widgets.csv_download(lambda: view.zoo_table(spec, zoo, theory), "sink_normaliser_zoo.csv",
                         label="Download the comparison (CSV)", key="dl_snk_zoo")


# ---------------------------------------------------------------------------- real model


def middle_layers(n_layers: int) -> range:
    """0-based layers between the first and the last (all of them for models of 1-2 layers)."""
    return range(1, n_layers - 1) if n_layers > 2 else range(n_layers)


def model_view(ctx: PageContext) -> None:
    """The model picker and text box, then what a layer, head or token drives (:func:`model_selection`)."""
    picked = realtext.choose_model(MP, ctx)
    if picked is not None:
        model_selection(ctx, picked)


@st.fragment
def model_selection(ctx: PageContext, picked: realtext.ModelText) -> None:
    """Everything below the model and text, as a fragment: a move of the sink threshold reruns this part
    alone, with run_page's error boundary and URL sync (issue 34: not the page's title, part picker and
    explanation, nor its run_page). What a layer, head or token drives is a fragment inside it
    (:func:`head_views`)."""
    in_fragment(ctx, lambda: model_part(ctx, picked))


def model_part(ctx: PageContext, picked: realtext.ModelText) -> None:
    """The cached forward pass, the metrics over every head, the selected head's part (:func:`head_views`)
    and the sections on mass and the sink metric. The Layer, Head and Query token pickers are drawn by
    :func:`head_views` in a slot of the sidebar above the threshold."""
    pickers = ctx.controls.container()
    chosen = realtext.choose_view(MP, picked, ctx, layer=False)
    lm, res, att = chosen.lm, chosen.res, chosen.res.value
    ctx.controls.markdown("#### Sink metric")
    eps = widgets.slider(P_EPS, "Sink threshold ε", step=0.05, where=ctx.controls,
                         help="A head is a sink head for key k when the queries that see k give it a mean "
                              "weight above ε (0.3 in Gu et al. 2024).")
    rep = sink_report(att.attentions, att.categories(), causal=att.causal, eps=eps)
    labels = att.category_labels()
    L, mid = len(att.tokens), middle_layers(lm.layers)
    first = rep.mass["first"]  # (N, H)
    first_mid = float(first[list(mid)].mean())
    uni = rep.uniform["first"]
    c = st.columns(4)
    c[0].metric("Tokens L", f"{L}", f"uniform share 1/L = {1 / L:.3f}" if not att.causal else "causal",
                delta_color="off", delta_arrow="off")
    layers = f"layer {mid.start}" if len(mid) == 1 else f"layers {mid.start}–{mid.stop - 1}"
    c[1].metric(f"Mass on {plain(labels['first'])}, {layers}", f"{first_mid:.2f}",
                f"{first_mid / uni:.1f}× uniform ({uni:.3f})", delta_color="off", delta_arrow="off",
                help="Mean over those layers, all heads and all queries of the weight on the first token.")
    c[2].metric(f"Sink heads for {plain(labels['first'])}", f"{rep.sink_heads(0)} of {lm.layers * lm.heads}",
                help=f"Heads whose mean weight on key 0 exceeds ε = {eps:g}.")
    other = "special" if bool(att.categories()["special"].any()) else "punct"  # a text without [SEP]/EOS
    c[3].metric(f"Mass on {plain(labels[other])}", f"{float(rep.mass[other].mean()):.3f}",
                f"uniform {rep.uniform[other]:.3f}", delta_color="off", delta_arrow="off")
    glance(att, rep, labels, lm.layers)
    head_views(ctx, chosen, pickers)
    widgets.caption_compute(ctx.device_label, res.seconds,
                            f"One forward pass of {lm.name} ({lm.layers} layers × {lm.heads} heads, float32, "
                            f"eager attention) over {L} tokens; loading took {lm.seconds:.1f} s once per "
                            "process.")
    mass_section(att, rep, labels, lm)
    metric_section(att, rep, labels, lm)
    if causal.is_causal(lm):
        causal.next_char_section(MP_NEXT, MP.text, ctx, view="snk-next", key="snk_next")
    explain_more()


@st.fragment
def head_views(ctx: PageContext, chosen: realtext.Chosen, pickers) -> None:
    """What the selected layer, head and query token drive, a fragment inside :func:`model_selection`: a
    click on a layer x head tile or a row of the map (or a move of the Layer, Head or Query token controls,
    drawn in ``pickers``) reruns these alone, not the metrics, the overview of mass per layer and the
    sections under them, which depend on the text and the threshold only."""
    in_fragment(ctx, lambda: head_part(ctx, chosen, pickers))


def head_part(ctx: PageContext, chosen: realtext.Chosen, pickers) -> None:
    """The pickers, every head's grid with the selected one outlined, its map and its query token's views."""
    chosen = realtext.with_layer(MP, chosen, pickers)
    chosen = realtext.with_token(MP, realtext.with_head(MP, chosen, pickers), pickers)
    lm, att, layer, head = chosen.lm, chosen.res.value, chosen.layer, chosen.head
    if head is None:
        raise ValueError("head_part needs a chosen head (realtext.with_head)")
    st.markdown("##### Every head (rows: layers, columns: heads)")
    fig = view.layer_head_grid(att.attentions.numpy(), realtext.token_labels(att), selected=(layer, head))
    fig.update_layout(meta={"view": "snk-grid", **fig.layout.meta})
    st.plotly_chart(fig, key="chart_snk_grid", selection_mode="points",
                    on_select=realtext.on_pick("chart_snk_grid", {"layer": MP.layer, "head": MP.head}))
    st.caption(text.grid_caption(att, layer, head))
    realtext.head_view(att, lm, layer, head, view="snk-head", key="snk_head", mp=MP, token=chosen.token)
    st.caption("Click a row of the map (or pick the query token in the sidebar) for that token's attention "
               "over the text and its q, k, v.")
    realtext.token_section(chosen, ctx, key="snk-token")


def present(att, labels: dict[str, str]) -> dict[str, str]:
    """The key sets this text has (a character model's text has no [SEP]/EOS: no empty curve or map)."""
    cats = att.categories()
    return {k: name for k, name in labels.items() if bool(cats[k].any())}


def glance(att, rep, labels: dict[str, str], n_layers: int) -> None:
    st.markdown("##### Where the attention goes, layer by layer")
    fig = view.glance_figure(rep, present(att, labels), n_layers)
    st.plotly_chart(fig, key="chart_snk_glance")
    st.caption(text.glance_caption(att, rep, labels))


def mass_section(att, rep, labels: dict[str, str], lm) -> None:
    st.markdown("##### Attention mass on special tokens, per layer and head")
    for col, (key, name) in zip(st.columns(3), present(att, labels).items(), strict=False):
        n_keys = int(att.categories()[key].sum())
        col.plotly_chart(view.mass_figure(rep, key, name, n_keys, lm.layers, lm.heads),
                         key=f"chart_snk_mass_{key}")
    widgets.csv_download(lambda: view.mass_frame(rep, labels, lm.layers, lm.heads),
                         "attention_mass_special_tokens.csv", label="Download the masses (CSV)",
                         key="dl_snk_mass")


def metric_section(att, rep, labels: dict[str, str], lm) -> None:
    st.markdown(f"##### Sink metric: share of heads with α_k > ε = {rep.eps:g}")
    st.latex(text.METRIC_LATEX)
    tokens = realtext.token_labels(att, 10)
    fig = view.metric_figure(rep, tokens, lm.layers)
    st.plotly_chart(fig, key="chart_snk_metric")
    st.caption(text.metric_caption(len(att.tokens), att.causal, rep.eps))
    widgets.csv_download(lambda: view.alpha_frame(rep, att.tokens), "sink_metric_alpha.csv",
                         label="Download α for every head and key (CSV)", key="dl_snk_metric")


# ---------------------------------------------------------------------------- page


def body(ctx: PageContext) -> None:
    st.title("Attention sinks")
    part = widgets.radio(P_VIEW, "Part", where=ctx.controls, horizontal=False,
                         labels={"lab": "synthetic sink lab", "model": "sinks in a real model",
                                 "learned": "a sink learned here", "decoder": "a real decoder (SmolLM2)"})
    explain()
    if part == "lab":
        lab(ctx)
    elif part == "model":
        model_view(ctx)
    elif part == "decoder":
        eps = widgets.slider(P_EPS, "Sink threshold ε", step=0.05, where=ctx.controls)
        decoder_lab.decoder_part(ctx, eps=eps)
    else:
        learned.learned_part(ctx)
        explain_more()


run_page(title="Attention sinks", icon=":material/anchor:", params=PARAMS, body=body,
         oom_hint="Lower n, or use a shorter text.")
