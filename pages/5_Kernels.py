"""Kernels: what F.scaled_dot_product_attention really runs, and what it saves."""

from __future__ import annotations

import time

import pandas as pd
import streamlit as st

from attncore.kernels import (
    GROUP_CHOICES,
    HEAD_CHOICES,
    HEAD_DIM_CHOICES,
    LENGTH_CHOICES,
    MASK_KINDS,
    RULES,
    SHAPE_PRESETS,
    KernelSpec,
    SizeResult,
    check_claims,
    check_sweep,
    default_budget_bytes,
    fully_masked_rows,
)
from ui import cached_kernels, widgets
from ui.page import PageContext, run_page
from ui.state import Param
from ui.views import kernels as view

# Every option comes from attncore's limits (one bound, one home): the page never offers a value
# KernelSpec.validate refuses.
P_HEADS = Param("k_heads", 4, options=HEAD_CHOICES)
P_GROUPS = Param("k_groups", 1, options=GROUP_CHOICES)
P_DIM = Param("k_dim", 64, options=HEAD_DIM_CHOICES)
P_MASK = Param("k_mask", "none", options=MASK_KINDS)
P_DROP = Param("k_drop", 0.0, lo=0.0, hi=0.5)
P_TMIN = Param("k_tmin", 128, options=LENGTH_CHOICES)
P_TMAX = Param("k_tmax", 1024, options=LENGTH_CHOICES)
P_MEM = Param("k_mem", True)
P_PRESET = Param("k_preset", "custom", options=("custom", *SHAPE_PRESETS))
PARAMS = (P_PRESET, P_HEADS, P_GROUPS, P_DIM, P_MASK, P_DROP, P_TMIN, P_TMAX, P_MEM)

MASK_LABELS = {"none": "none", "causal": "causal (is_causal=True)",
               "boolean": "boolean attn_mask", "float": "float attn_mask (additive)"}


def controls(where) -> tuple[int, int, int, str, float, tuple[int, ...], bool]:
    where.markdown("#### Shape")
    names = {k: f"{p.label.split(',')[0]}'s attention" for k, p in SHAPE_PRESETS.items()}
    preset = widgets.select(P_PRESET, "Shape", where=where,
                            labels={"custom": "custom (the sliders below)", **names},
                            help="A real model's attention shape: its query heads, key/value groups, head "
                                 "dim and causal mask, in place of the sliders.")
    if preset in SHAPE_PRESETS:
        p = SHAPE_PRESETS[preset]
        where.caption(f"{p.label}: {p.heads} query heads in {p.kv_heads} key/value groups of {p.groups}, "
                      f"head dim {p.head_dim}, {p.mask} mask.")
        heads, groups, dim, mask = p.heads, p.groups, p.head_dim, p.mask
        where.markdown("#### Call")
    else:
        heads = widgets.select_slider(P_HEADS, "Query heads H", where=where)
        groups = widgets.select_slider(P_GROUPS, "Query heads per key/value head", where=where,
                                       help="1 = multi-head attention; H = multi-query attention; "
                                            "in between = grouped-query attention (enable_gqa=True).")
        dim = widgets.select_slider(P_DIM, "Head dim E", where=where)
        where.markdown("#### Call")
        mask = widgets.select(P_MASK, "Mask", labels=MASK_LABELS, where=where,
                              help="Boolean and float masks hide 10% of the pairs at random (seeded) and "
                                   "every key from query rows 3, 67, 131, …")
    drop = widgets.slider(P_DROP, "dropout_p (training mode)", step=0.05, where=where,
                          help="SDPA applies dropout whenever dropout_p > 0: pass 0 at inference.")
    lo = widgets.select_slider(P_TMIN, "Smallest T (= L = S)", where=where)
    hi = widgets.select_slider(P_TMAX, "Largest T", where=where)
    mem = widgets.toggle(P_MEM, "Measure peak memory", where=where,
                         help="On the CPU a fresh Python process (forked, torch already loaded) measures "
                              "each call; on CUDA the peak is read with the timings, always.")
    lo, hi = min(lo, hi), max(lo, hi)
    lengths = tuple(t for t in LENGTH_CHOICES if lo <= t <= hi)
    return heads, groups, dim, mask, float(drop), lengths, bool(mem)


def explain(spec: KernelSpec, device: str, lengths: tuple[int, ...]) -> None:
    """One sentence and the key formula above the first chart (the rest: :func:`explain_more`)."""
    st.markdown("`F.scaled_dot_product_attention` is one function with several kernels behind it: the plain "
                "way writes the whole L × S score matrix to memory, the fused kernels never form it. "
                + view.work_sentence(spec, device, lengths))
    st.latex(view.SCORE_MATRICES)


# What sits below the backend table is computed and sent only when its expander is opened (issue 34: the
# claims table's long cells and the backend notes, closed, were still laid out and typeset with the charts).
CLAIMS_OPEN, MORE_OPEN = "k_claims_open", "k_more_open"  # the expanders' open state (views, not settings)
CLAIMS_TITLE = "3 · What is said of FlashAttention, beside this machine"


def explain_more() -> None:
    box = widgets.lazy_expander("How the fused kernels avoid the L × S matrix, and what each backend is",
                                MORE_OPEN, icon=":material/menu_book:")
    if box is None:
        return
    with box:
        st.markdown(
            "The plain way, softmax(QKᵀ/√E)V, writes the whole L × S score matrix to memory, reads it back "
            "for the softmax and again for the product with V. The fused kernels tile the keys and keep a "
            "running maximum *m* and sum *ℓ* per query, so no L × S matrix ever exists. For each block of "
            "keys *j*, with scores *s*ᵢⱼ = qᵢ·kⱼ/√E:")
        st.latex(view.ONLINE_SOFTMAX)
        backend_notes()


def backend_notes() -> None:
    st.markdown("##### What each backend is")
    st.markdown(
        "- **flash (FLASH_ATTENTION)** — on CUDA, FlashAttention-2 (Dao, 2023): tiles of Q, K, V in "
        "on-chip memory, an online softmax, never the L × S matrix; torch builds it for float16 and "
        "bfloat16. On the CPU the same name is torch's own blocked kernel with the same online softmax, "
        "parallel over batch, heads and query blocks.\n"
        "- **memory-efficient (EFFICIENT_ATTENTION)** — the cutlass kernel from xFormers, after Rabe & "
        "Staats, *Self-attention does not need O(n²) memory* (2021): the same tiling idea, with float32 "
        "and arbitrary masks; CUDA only.\n"
        "- **cuDNN (CUDNN_ATTENTION)** — NVIDIA's fused attention in cuDNN; CUDA only.\n"
        "- **math (MATH)** — the composite of matmul, softmax and matmul in ATen: it forms the L × S "
        "matrices, runs on every device and dtype and accepts every combination of arguments; the "
        "dispatch falls back to it when no fused kernel accepts the call.\n"
        "- **default dispatch** — no `sdpa_kernel` context: torch checks the backends in its priority "
        "order and runs the first whose conditions hold (named here by `torch._fused_sdp_choice`, and "
        "checked by comparing the outputs bit for bit).\n"
        "- **baselines** — `attncore.attention` with its weights (every stage kept) and the version "
        "tutorials write by hand (`scores → masked_fill_ → softmax → @ V`), which returns NaN for a "
        "query that may see no key; attncore returns zeros there (torch's kernels: the table's "
        "“max |out| on fully masked rows” column)."
    )


def spec_from_controls(ctx: PageContext) -> tuple[KernelSpec, tuple[int, ...], bool]:
    """Widgets: the sidebar controls as a spec (GQA groups clamped to the heads, with a note)."""
    heads, groups, dim, mask, drop, lengths, mem = controls(ctx.controls)
    if groups > heads:
        st.info(f"{groups} query heads per key/value head needs at least {groups} heads; "
                f"using {heads} (multi-query attention).", icon=":material/info:")
        groups = heads
    spec = KernelSpec(heads=heads, groups=groups, head_dim=dim, mask=mask, dropout=drop,
                      dtype=ctx.dtype, seed=ctx.seed)
    return spec, lengths, mem


class ChartsPlace:
    """Section 1's heading, the time chart's slot, the memory chart's column and the caption under them,
    made at the first draw: until then the previous run's charts stay on screen (an empty slot made up
    front would blank them). The memory column's slot is made when memory is drawn, so a partial time
    chart leaves the previous memory chart in place (greyed as stale) while the sizes are timed."""

    def __init__(self) -> None:
        self._slots: tuple | None = None

    def slots(self) -> tuple:
        """(time chart slot, memory chart column, caption slot)."""
        if self._slots is None:
            st.markdown("##### 1 · Time and memory against T")
            c1, c2 = st.columns(2)
            self._slots = (c1.empty(), c2, st.empty())
        return self._slots


def run_probes(spec: KernelSpec, lengths: tuple[int, ...], device: str,
               place: ChartsPlace) -> tuple[list[SizeResult], float]:
    """Cached calls, one per length (a progress bar over them): every backend timed, no memory yet.

    While sizes are being measured (a call not served from the cache), the time chart is drawn with the
    sizes done so far after each one, marked as partial, so a new setting shows its first measured times
    at once and the larger sizes join as they are timed (the largest take most of the time: T² work).
    Each partial draw is followed by a short pause (``KERNEL_DRAW_PAUSE_S``), so that a browser on the
    same cores draws it before the next size's rounds are timed, not during them.
    """
    bar = st.progress(0.0, text="Starting…")
    seconds, sizes = 0.0, []
    weights = [t * t for t in lengths]
    for i, t in enumerate(lengths):
        bar.progress(sum(weights[:i]) / sum(weights), text=f"T = {t}: trying every backend…")
        t0 = time.perf_counter()
        res = cached_kernels.kernel_probe(spec, t, device)
        seconds += res.seconds
        sizes.append(res.value)
        if i + 1 < len(lengths) and time.perf_counter() - t0 >= cached_kernels.KERNEL_PARTIAL_AFTER_S:
            time_slot, _, caption_slot = place.slots()
            time_slot.plotly_chart(view.mark_partial(view.time_figure(view.backend_frame(sizes))),
                                   width="stretch")
            caption_slot.caption(view.partial_note(lengths[: i + 1], lengths[i + 1:]))
            # the browser draws it before the next size is timed
            time.sleep(cached_kernels.KERNEL_DRAW_PAUSE_S)
    bar.empty()
    return sizes, seconds


def charts_section(df: pd.DataFrame, spec: KernelSpec, lengths: tuple[int, ...], mem: bool, device: str,
                   place: ChartsPlace) -> tuple[list[SizeResult] | None, str, float, pd.DataFrame]:
    """The time chart as soon as the backends are timed; the memory chart once memory is measured.

    Returns the sizes with memory filled in (None when not measured), how memory was measured,
    the seconds the measurement took when it was computed and the backend frame of what is shown.
    """
    time_slot, mem_column, caption_slot = place.slots()
    tfig = view.time_figure(df)
    time_slot.plotly_chart(tfig, key="chart_kernels_time", width="stretch")
    mem_slot = mem_column.empty()
    sizes, note, seconds = None, "not measured (switch on “Measure peak memory”)", 0.0
    in_process = device.startswith("cuda")  # measured with the timings, at no extra cost
    if mem or in_process:
        caption_slot.empty()  # a partial chart's note, if any, no longer applies
        if not in_process:
            mem_slot.info("Measuring peak memory: every call again, each in a fresh process…",
                          icon=":material/memory:")
        m = cached_kernels.kernel_memory(spec, lengths, device)
        sizes, note, seconds = list(m.value[0]), m.value[1], m.seconds
        df = view.backend_frame(sizes)
    mfig = view.memory_figure(df)
    mem_slot.plotly_chart(mfig, key="chart_kernels_memory", width="stretch")
    caption_slot.caption(view.guide_caption(tfig, mfig))
    return sizes, note, seconds, df


def table_section(sizes: list[SizeResult], df: pd.DataFrame, spec: KernelSpec, lengths: tuple[int, ...],
                  memory_note: str, budget: float, device: str) -> None:
    st.markdown("##### 2 · Which backend accepts this call, and what it costs")
    if device.startswith("cpu"):
        st.info("This is a CPU: torch's CPU build has two of the four kernels (its own flash kernel and "
                "the math path). The table shows torch's own answer for the other two.",
                icon=":material/memory:")
    right = "right"
    widgets.table(
        view.table_frame(sizes, df), key="chart_kernels_table",
        column_config={
            "label": st.column_config.TextColumn("backend"),
            "time_ms": st.column_config.TextColumn("time (ms)", alignment=right,
                                                   help="median of the interleaved rounds"),
            "time_range": st.column_config.TextColumn("range (ms)", alignment=right,
                                                      help=view.TIME_RANGE_HELP),
            "x_default": st.column_config.TextColumn("× default", alignment=right,
                                                     help="median of the per-round ratios to the default "
                                                          "dispatch's time"),
            "x_range": st.column_config.TextColumn("× range", alignment=right,
                                                   help=view.X_RANGE_HELP),
            "gflop_s": st.column_config.TextColumn("GFLOP/s", alignment=right,
                                                   help="this path's own flops over its median time"),
            "peak_MiB": st.column_config.TextColumn("peak extra (MiB)", alignment=right),
            "max_err": st.column_config.TextColumn("max |err| vs float64", alignment=right),
            "masked_rows_err": st.column_config.TextColumn("max |out| on fully masked rows", alignment=right),
            "nonfinite_rows": st.column_config.TextColumn(
                "rows with NaN", alignment=right,
                help="compared query rows whose output has a NaN or infinite entry"),
            "reason": st.column_config.TextColumn("torch's reason / note", width="large"),
        })
    st.caption(view.TABLE_LEGEND)
    widgets.csv_download(df, "kernels_backends.csv")
    st.caption(view.table_caption(sizes, spec, memory_note, bool(fully_masked_rows(spec.mask, max(lengths))),
                                  budget))


def claims_section(sizes: list[SizeResult], spec: KernelSpec, device: str) -> None:
    box = widgets.lazy_expander(CLAIMS_TITLE, CLAIMS_OPEN, icon=":material/fact_check:")
    if box is not None:
        with box:
            claims = check_claims(sizes, spec, device)
            st.table(view.claims_frame(claims).rename(columns={"claim": "the claim",
                                                               "measured": "measured here"}),
                     hide_index=True)
            st.caption(view.claims_caption(device))
            st.markdown("**How each verdict is computed**\n\n"
                        + "\n".join(f"- **{topic}**: {rule}" for topic, rule in RULES.items()))
    if spec.dropout > 0:
        st.warning("dropout_p > 0: SDPA drops weights on every call — it has no training flag of its own. "
                   "Pass dropout_p=0 at inference (nn.MultiheadAttention does so in eval mode).",
                   icon=":material/casino:")


def body(ctx: PageContext) -> None:
    st.title("Kernels")
    spec, lengths, mem = spec_from_controls(ctx)
    budget = default_budget_bytes(ctx.device)
    check_sweep(spec, lengths, ctx.device, cached_kernels.KERNEL_REPEATS, budget)
    explain(spec, ctx.device, lengths)
    place = ChartsPlace()
    sizes, seconds = run_probes(spec, lengths, ctx.device, place)
    measured, memory_note, mem_seconds, df = charts_section(view.backend_frame(sizes), spec, lengths, mem,
                                                            ctx.device, place)
    sizes = measured or sizes
    seconds += mem_seconds
    table_section(sizes, df, spec, lengths, memory_note, budget, ctx.device)
    claims_section(sizes, spec, ctx.device)
    explain_more()
    widgets.caption_compute(ctx.device_label, seconds,
                            f"B = 1, H = {spec.heads}, Hkv = {spec.kv_heads}, E = {spec.head_dim}, "
                            f"{ctx.dtype}, T = {', '.join(map(str, lengths))}.")


run_page(title="Kernels", icon=":material/bolt:", params=PARAMS, body=body,
         seed_note="This page draws its Q, K, V and masks on the compute device (up to T × T mask "
                   "entries): a GPU shows other draws than a CPU, and each device its own backends.",
         oom_hint="Lower the largest T, the heads or the head dim.")
