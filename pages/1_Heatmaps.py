"""Heatmaps: attention weights and the stages that make them, for synthetic Q, K, V."""

from __future__ import annotations

from dataclasses import replace

import streamlit as st

from attncore.attention import estimate_attention_bytes
from attncore.dtypes import DTYPES
from attncore.explore import RowStats, SyntheticSpec, float16_overflow, parse_row_lengths, row_stats
from attncore.masks import MASK_KINDS
from attncore.models import summary_of
from attncore.normalizers import NORMALIZER_NAMES, get_normalizer
from attncore.scoring import SCORING_NAMES
from ui import causal, decoder, patching, realtext, widgets
from ui import why as why_section
from ui.admission import heavy
from ui.cached import heatmap_dropout, heatmap_stages
from ui.lens import lens_section
from ui.page import PageContext, in_fragment, run_page
from ui.state import Param
from ui.text import plain
from ui.views import heatmaps as view
from ui.views import heatmaps_text as text
from ui.views import realtext as rt_views

D_K_OPTIONS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024)
SCORING_LABELS = {"scaled_dot": "scaled dot  q·k/√d", "dot": "dot  q·k (unscaled)",
                  "additive": "additive (Bahdanau)"}
MASK_LABELS = {"none": "none", "causal": "causal", "padding": "padding (valid_lens)",
               "window": "sliding window", "blocks": "packed documents",
               "padding2d": "padding per query (2-D valid_lens)"}
NORM_LABELS = {n: get_normalizer(n).label for n in NORMALIZER_NAMES}

P_L = Param("L", 16, lo=1, hi=1024)
P_S = Param("S", 16, lo=1, hi=1024)
P_DK = Param("dk", 64, options=D_K_OPTIONS)
P_HEADS = Param("heads", 4, lo=1, hi=16)
P_KV = Param("kv", 4, lo=1, hi=16)
P_HEAD = Param("head", 0, lo=0, hi=15)
P_SCORING = Param("scoring", "scaled_dot", options=SCORING_NAMES)
P_TEMP = Param("temp", 1.0, lo=0.05, hi=10.0)
P_MASK = Param("mask", "none", options=MASK_KINDS)
P_VLEN = Param("vlen", 12, lo=0, hi=1024)
P_VLENS = Param("vlens", "1, 3, 2, 4")
P_DROP = Param("drop", 0.0, lo=0.0, hi=0.9)
P_WIN = Param("win", 4, lo=1, hi=1024)
P_BLOCK = Param("block", 8, lo=1, hi=1024)
P_NORM = Param("norm", "softmax", options=NORMALIZER_NAMES)
P_SS = Param("ss", 0.43, lo=0.05, hi=2.0)
P_STD = Param("std", 1.0, lo=0.1, hi=32.0)
P_CMP = Param("cmp", False)
P_OWN = Param("hm_own", False)
P_LOG = Param("hm_log", False)
P_CMP_SCORING = Param("b_scoring", "dot", options=SCORING_NAMES)
P_CMP_TEMP = Param("b_temp", 1.0, lo=0.05, hi=10.0)
P_CMP_NORM = Param("b_norm", "softmax", options=NORMALIZER_NAMES)
P_SOURCE = Param("rt_src", "synthetic", options=("synthetic", "real"))
RT = realtext.model_params("rt_")
RT_NEXT = causal.next_params("rt_")
RT_DEC = decoder.decoder_params("rt_")
PARAMS = (P_L, P_S, P_DK, P_HEADS, P_KV, P_HEAD, P_SCORING, P_TEMP, P_MASK, P_VLEN, P_VLENS, P_WIN,
          P_BLOCK, P_NORM, P_SS, P_STD, P_DROP, P_CMP, P_OWN, P_LOG, P_CMP_SCORING, P_CMP_TEMP,
          P_CMP_NORM, P_SOURCE, *RT.all(), *RT_NEXT.all(), *RT_DEC.all(), *patching.PARAMS)


def controls(where) -> SyntheticSpec:
    """Draw the page's controls and return the spec they describe."""
    where.markdown("#### Inputs")
    L = widgets.slider(P_L, "Queries L", where=where)
    S = widgets.slider(P_S, "Keys S", where=where)
    d_k = widgets.select_slider(P_DK, "Head dim d_k", where=where)
    heads = widgets.slider(P_HEADS, "Heads", where=where)
    divisors = [g for g in range(1, heads + 1) if heads % g == 0]
    if st.session_state.get(P_KV.key) not in divisors:
        st.session_state[P_KV.key] = heads
    where.selectbox("Key/value heads (GQA groups)", divisors, key=P_KV.key,
                    help="Fewer key/value heads than query heads = grouped-query attention: "
                         "each key/value head is shared by heads / kv heads query heads.")
    if st.session_state.get(P_HEAD.key, 0) >= heads:
        st.session_state[P_HEAD.key] = heads - 1
    std = widgets.slider(P_STD, "Input std σ", step=0.1, where=where,
                         help="Entries of Q, K and V are drawn from N(0, σ²).")
    where.markdown("#### Scores and mask")
    scoring = widgets.radio(P_SCORING, "Scoring function", labels=SCORING_LABELS, horizontal=False,
                            where=where)
    temp = widgets.slider(P_TEMP, "Temperature τ", step=0.05, where=where,
                          help="Scores are divided by τ before normalising: τ < 1 sharpens, τ > 1 flattens.")
    mask = widgets.select(P_MASK, "Mask", labels=MASK_LABELS, where=where)
    if mask == "padding":
        widgets.slider(P_VLEN, "Valid length (keys ≥ it are padding)", where=where)
    elif mask == "window":
        widgets.slider(P_WIN, "Window w (query i sees keys i−w+1…i)", where=where)
    elif mask == "blocks":
        widgets.slider(P_BLOCK, "Document length", where=where)
    elif mask == "padding2d":
        widgets.text_input(P_VLENS, "Valid length per query (repeated down the rows)", where=where,
                           max_chars=400, help="d2l's 2-D valid_lens: query i sees keys j < the i-th "
                                               "number (the list repeats); e.g. 1, 3, 2, 4.")
    where.markdown("#### Normaliser")
    norm = widgets.select(P_NORM, "Normaliser", labels=NORM_LABELS, where=where)
    if norm == "ssmax":
        widgets.slider(P_SS, "SSMax s", step=0.01, where=where)
    where.markdown("#### Dropout")
    widgets.slider(P_DROP, "Dropout p (training mode)", step=0.05, where=where,
                   help="Attention dropout as in training: each weight is zeroed with probability p, "
                        "the rest divided by 1 − p. 0 = inference.")
    rows = parse_row_lengths(str(st.session_state.get(P_VLENS.key, P_VLENS.default))) \
        if mask == "padding2d" else SyntheticSpec.valid_lens_rows
    return SyntheticSpec(L=L, S=S, d_k=d_k, heads=heads, kv_heads=int(st.session_state[P_KV.key]),
                         scoring=scoring, temperature=temp, mask=mask,
                         valid_len=int(st.session_state.get(P_VLEN.key, P_VLEN.default)),
                         window=int(st.session_state.get(P_WIN.key, P_WIN.default)),
                         block=int(st.session_state.get(P_BLOCK.key, P_BLOCK.default)),
                         valid_lens_rows=rows,
                         normalizer=norm, ssmax_s=float(st.session_state.get(P_SS.key, P_SS.default)),
                         input_std=std)


def explain() -> None:
    """One sentence and the key formula above the first chart (the rest: :func:`explain_more`)."""
    st.markdown(text.EXPLAIN)
    st.latex(text.EXPLAIN_LATEX)


def explain_more() -> None:
    with st.expander("Why divide by √d", icon=":material/menu_book:"):
        st.markdown(text.WHY_SQRT_D)


def head_metrics(stages, spec: SyntheticSpec, head: int, rs: RowStats) -> None:
    for col, cell in zip(st.columns(4), text.head_metric_cells(stages, spec, head, rs), strict=True):
        col.metric(**cell)


def main_view(stages, spec: SyntheticSpec, head: int, rs: RowStats, log_color: bool) -> None:
    st.plotly_chart(view.head_figure(stages, spec, head, rs, log_color=log_color), key="chart_weights")
    for caption in text.main_captions(spec, log_color):
        st.caption(caption)
    w = stages.weights[head].cpu().numpy()
    widgets.csv_download(lambda: view.weights_frame(w), f"attention_weights_head{head}.csv",
                         label="Download weights (CSV)", key="dl_weights")


HEADS_OPEN = "hm_heads_open"  # the heads grid's expander is open (a view, not a setting: not in the URL)
HEADS_TITLE = "All heads (click one to show it above)"


def heads_grid(stages, spec: SyntheticSpec, head: int) -> None:
    """Every head's weights side by side, in an expander drawn only when opened (issue 34: the third of the
    default view's charts, below the first screen); a click on a head selects it."""
    if spec.heads == 1:
        return
    box = widgets.lazy_expander(HEADS_TITLE, HEADS_OPEN, icon=":material/grid_view:")
    if box is None:
        return
    with box:
        st.plotly_chart(view.heads_figure(stages, spec, head), key="chart_heads",
                        on_select=realtext.on_pick("chart_heads", {"head": P_HEAD}), selection_mode="points")
        if spec.kv_heads < spec.heads:
            st.caption(text.gqa_caption(spec))


def compare(spec: SyntheticSpec, ctx: PageContext, head: int, where) -> None:
    where.markdown("#### Compare with setting B")
    b_scoring = widgets.radio(P_CMP_SCORING, "B: scoring", labels=SCORING_LABELS, horizontal=False,
                              where=where)
    b_temp = widgets.slider(P_CMP_TEMP, "B: temperature τ", step=0.05, where=where)
    b_norm = widgets.select(P_CMP_NORM, "B: normaliser", labels=NORM_LABELS, where=where)
    spec_b = replace(spec, scoring=b_scoring, temperature=b_temp, normalizer=b_norm)
    res_a = heatmap_stages(spec, ctx.device)
    res_b = heatmap_stages(spec_b, ctx.device)
    st.markdown("##### Compare A and B (same Q, K, V): the weights of the selected head")
    cols = st.columns(2)
    for col, name, s, res in ((cols[0], "A", spec, res_a), (cols[1], "B", spec_b, res_b)):
        w = res.value.weights[head]
        rs = row_stats(w, None if res.value.allowed is None else res.value.allowed[head])
        title = f"{name}: {SCORING_LABELS[s.scoring].split('  ')[0]}, τ={s.temperature:g}, {s.normalizer}"
        col.plotly_chart(view.compare_figure(w.cpu().numpy(), name, title), key=f"chart_compare{name}")
        col.caption(text.compare_caption(rs, res.seconds))


def dropout_section(stages, spec: SyntheticSpec, ctx: PageContext, head: int, p: float) -> None:
    """Training-mode dropout on the selected head: the weights before and after, and the mean output."""
    st.markdown("##### Dropout (training mode)")
    st.markdown(text.dropout_text(p))
    st.latex(text.DROPOUT_LATEX)
    res = heatmap_dropout(spec, p, head, ctx.device)
    d = res.value
    before = stages.weights[head].cpu().numpy()
    st.plotly_chart(view.dropout_figure(before, d.first_weights.cpu().numpy(), p), key="chart_dropout")
    st.plotly_chart(view.dropout_mean_figure(d), key="chart_dropout_mean")
    st.caption(text.dropout_sentence(d) + f" Computed in {res.seconds * 1e3:.0f} ms.")


def source(ctx: PageContext) -> str:
    """The source switch: synthetic Q, K, V or real text through a transformer."""
    return widgets.radio(P_SOURCE, "Source", where=ctx.controls,
                         labels={"synthetic": "synthetic Q, K, V", "real": "real text (transformer)"},
                         help="Synthetic: seeded Gaussian inputs you can shape. Real text: the attention "
                              "maps of a real transformer on the text you type.")


def real_text(ctx: PageContext) -> None:
    """The \"real text\" source: a transformer's attention on the text the user types."""
    st.markdown(text.REAL_TEXT_INTRO)
    st.latex(text.REAL_TEXT_LATEX)
    picked = realtext.choose_model(RT, ctx)
    if picked is not None:
        selection(ctx, picked)


@st.fragment
def selection(ctx: PageContext, picked: realtext.ModelText) -> None:
    """Everything a layer, head or token selection drives, as a fragment: a click on a tile of the layers x
    heads overview (or a move of the Layer control in the sidebar, drawn in here) reruns this part alone,
    with its own error boundary and URL sync (issue 34: no forward pass runs on a click, and now neither
    does the rest of the page). What the head drives is a fragment inside it (:func:`head_views`), and the
    map and the token views one inside that (:func:`token_views`)."""
    in_fragment(ctx, lambda: selected(ctx, picked))


def selected(ctx: PageContext, picked: realtext.ModelText) -> None:
    """The forward pass (cached), the Layer picker, the sentence about every head, the views of the selected
    head (:func:`head_views`) and the layers x heads overview, which marks the layer: a head click reruns the
    head's views alone and leaves the overview, the largest chart, as the browser has it."""
    chosen = realtext.choose_view(RT, picked, ctx, long_text=True, head=False)
    st.caption(plain(rt_views.heads_sentence(chosen.res.value, chosen.lm.name)))
    head_views(ctx, chosen)
    overview(chosen.res.value, chosen.lm, chosen.layer)


@st.fragment
def head_views(ctx: PageContext, chosen: realtext.Chosen) -> None:
    """What the selected head drives, a fragment inside :func:`selection`: a click on a tile of the head grid
    (or a move of the Head control in the sidebar, drawn in here) reruns these alone; a layer change reruns
    them with the rest of the selection."""
    in_fragment(ctx, lambda: head_part(ctx, chosen))


def head_part(ctx: PageContext, chosen: realtext.Chosen) -> None:
    """The Head picker, the head's metrics, its map and token views (:func:`token_views`), the decoder
    sections (the generated tokens' attention is the head's) and the grid of the layer's heads."""
    chosen = realtext.with_head(RT, chosen, ctx.controls)
    lm, res, layer, head = chosen.lm, chosen.res, chosen.layer, chosen.head
    if head is None:
        raise ValueError("head_part needs a chosen head (realtext.with_head)")
    att = res.value
    w = att.maps(layer)[head]
    rs = row_stats(w, att.allowed)
    L = len(att.tokens)
    for col, cell in zip(st.columns(4), text.real_metric_cells(att, w, rs), strict=True):
        col.metric(**cell)
    token_views(ctx, chosen)
    widgets.caption_compute(ctx.device_label, res.seconds,
                            f"One forward pass of {lm.name} ({lm.layers} layers × {lm.heads} heads, float32) "
                            f"over {L} tokens.")
    if causal.is_causal(lm):
        causal.next_char_section(RT_NEXT, RT.text, ctx, view="rt-next", key="rt_next")
    elif decoder.is_decoder(chosen):
        decoder.next_token_section(RT_DEC, chosen, ctx, key="rt-dec")
        decoder.generation_section(RT_DEC, chosen, ctx, key="rt-dec")
    maps = [att.maps(layer)[h].numpy() for h in range(lm.heads)]
    st.markdown(f"##### Every head of layer {layer} (click one to show it above)")
    st.plotly_chart(view.layer_heads_figure(maps, layer=layer, selected=head, kv_heads=lm.kv_heads),
                    key="chart_rt_heads",
                    on_select=realtext.on_pick("chart_rt_heads", {"layer": RT.layer, "head": RT.head}),
                    selection_mode="points")


@st.fragment
def token_views(ctx: PageContext, chosen: realtext.Chosen) -> None:
    """The map of the selected head and the views of its query token, a fragment inside :func:`head_views`:
    a click on a row of the map (or a pick in the Query token box in the sidebar, drawn in here) reruns
    these alone; a head click reruns them with the rest of the head's views."""
    in_fragment(ctx, lambda: token_part(ctx, chosen))


def token_part(ctx: PageContext, chosen: realtext.Chosen) -> None:
    """The query-token picker, the selected head's map with that token's row outlined, and its views."""
    chosen = realtext.with_token(RT, chosen, ctx.controls)
    if chosen.head is None:
        raise ValueError("token_part needs a chosen head (realtext.with_head)")
    realtext.head_view(chosen.res.value, chosen.lm, chosen.layer, chosen.head, view="rt-weights",
                       key="rt_weights", mp=RT, token=chosen.token)
    st.caption(text.ROW_CLICK_CAPTION)
    realtext.token_section(chosen, ctx, key="rt-token")
    why_section.section(chosen, ctx, key="rt-why")
    lens_section(chosen, ctx, key="rt-lens")  # decoders only: the logit lens of this query token
    patching.section(chosen, ctx, key="rt-patch")  # decoders only: a prompt pair of its own


def overview(att, lm, layer: int) -> None:
    """Every layer x head at once (bertviz's model view), from the per-head summaries, the selected layer
    outlined (the head is outlined in the head grid above); a click opens one."""
    s = summary_of(att)
    st.markdown(f"##### All {lm.layers} layers × {lm.heads} heads (click a tile to open that head)")
    fig = view.overview_figure(s.thumbs.numpy(), first=s.first.numpy(), entropy=s.entropy.numpy(),
                               kv_heads=lm.kv_heads if lm.kv_heads < lm.heads else 0, layer=layer,
                               name=lm.name)
    st.plotly_chart(fig, key="chart_rt_overview", selection_mode="points",
                    on_select=realtext.on_pick("chart_rt_overview", {"layer": RT.layer, "head": RT.head}))
    st.caption(plain(text.overview_sentence(att, lm)))


def body(ctx: PageContext) -> None:
    st.title("Heatmaps")
    if source(ctx) == "real":
        real_text(ctx)
        return
    explain()
    spec = replace(controls(ctx.controls), seed=ctx.seed, dtype=ctx.dtype)
    head = 0
    if spec.heads > 1:
        head = ctx.controls.slider("Selected head", 0, spec.heads - 1, key=P_HEAD.key,
                                   help="The head shown large and in the stage row.")
    ctx.controls.markdown("#### Display")
    own = widgets.toggle(P_OWN, "Per-map colour ranges", where=ctx.controls,
                         help="Off: raw and scaled scores share one colour range, so the scaling shows as "
                              "colour. On: each map is stretched to its own ± range.")
    log_color = widgets.toggle(P_LOG, "Log colour scale for the weights", where=ctx.controls,
                               help="Colour the selected head's weights by log10(weight), so small weights "
                                    "differ in colour too.")
    cmp_on = widgets.toggle(P_CMP, "Compare two settings", where=ctx.controls)
    spec.validate()
    est = estimate_attention_bytes(spec.heads, spec.L, spec.S, spec.d_k, 16, DTYPES[spec.dtype])
    with heavy(est, seconds=est / 1e9, label="this heatmap"):  # the largest views queue (ui.admission)
        res = heatmap_stages(spec, ctx.device)
    stages = res.value
    if spec.dtype == "float16":
        over = float16_overflow(stages.raw)
        if over:
            st.warning(text.float16_warning(over))
    if (spec.mask == "padding" and spec.valid_len == 0) or (
            spec.mask == "padding2d" and 0 in spec.valid_lens_rows[: spec.L]):
        st.info(text.fully_masked_note(spec.mask))
    if spec.mask == "window" and spec.window >= spec.L:
        st.info(text.window_note(spec))
    rs = row_stats(stages.weights[head], None if stages.allowed is None else stages.allowed[head])
    if cmp_on:
        compare(spec, ctx, head, ctx.controls)
    st.plotly_chart(view.stages_figure(stages, head, shared=not own), key="chart_stages")
    st.caption(text.stages_caption(spec, own))
    head_metrics(stages, spec, head, rs)
    main_view(stages, spec, head, rs, log_color)
    widgets.caption_compute(ctx.device_label, res.seconds,
                            f"{spec.heads} heads × {spec.L} × {spec.S}, d_k = {spec.d_k}, {spec.dtype}.")
    p = float(st.session_state.get(P_DROP.key, P_DROP.default))
    if p > 0:
        dropout_section(stages, spec, ctx, head, p)
    heads_grid(stages, spec, head)
    explain_more()


run_page(title="Heatmaps", icon=":material/grid_on:", params=PARAMS, body=body,
         oom_hint="Lower the heads, L, S or d_k.")
