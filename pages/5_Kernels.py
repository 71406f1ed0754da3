"""Kernels: what F.scaled_dot_product_attention really runs, and what it saves."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from attncore.kernels import (
    MASK_KINDS,
    KernelSpec,
    SizeResult,
    check_sweep,
    default_budget_bytes,
    fully_masked_rows,
)
from ui import cached, widgets
from ui.page import PageContext, run_page
from ui.state import Param
from ui.views import kernels as view

POW2 = tuple(2**i for i in range(4, 15))  # 16 .. 16384
P_HEADS = Param("k_heads", 4, options=(1, 2, 4, 8, 16, 32))
P_GROUPS = Param("k_groups", 1, options=(1, 2, 4, 8, 16, 32))
P_DIM = Param("k_dim", 64, options=(16, 32, 64, 128, 256))
P_MASK = Param("k_mask", "none", options=MASK_KINDS)
P_DROP = Param("k_drop", 0.0, lo=0.0, hi=0.5)
P_TMIN = Param("k_tmin", 128, options=POW2)
P_TMAX = Param("k_tmax", 1024, options=POW2)
P_MEM = Param("k_mem", True)
PARAMS = (P_HEADS, P_GROUPS, P_DIM, P_MASK, P_DROP, P_TMIN, P_TMAX, P_MEM)

MASK_LABELS = {"none": "none", "causal": "causal (is_causal=True)",
               "boolean": "boolean attn_mask", "float": "float attn_mask (additive)"}


def controls(where) -> tuple[int, int, int, str, float, tuple[int, ...], bool]:
    where.markdown("#### Shape")
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
                              "each call.")
    lo, hi = min(lo, hi), max(lo, hi)
    lengths = tuple(t for t in POW2 if lo <= t <= hi)
    return heads, groups, dim, mask, float(drop), lengths, bool(mem)


def explain() -> None:
    """One sentence and the key formula above the first chart (the rest: :func:`explain_more`)."""
    st.markdown("`F.scaled_dot_product_attention` is one function with several kernels behind it: the plain "
                "way writes the whole L × S score matrix to memory, the fused kernels never form it. Both "
                "do the same 4·B·H·L·S·E flops; what changes is memory, below against T on this machine.")
    st.latex(r"\text{materialised: } \underbrace{B\,H\,L\,S}_{\text{scores, weights}}"
             r"\ \text{numbers}\qquad\text{fused: } \underbrace{B\,H\,L\,E}_{\text{output}}"
             r"+\ \text{one tile per thread}")


def explain_more() -> None:
    with st.expander("How the fused kernels avoid the L × S matrix, and what each backend is",
                     icon=":material/menu_book:"):
        st.markdown(
            "The plain way, softmax(QKᵀ/√E)V, writes the whole L × S score matrix to memory, reads it back "
            "for the softmax and again for the product with V. The fused kernels tile the keys and keep a "
            "running maximum *m* and sum *ℓ* per query, so no L × S matrix ever exists:")
        st.latex(r"m_i \leftarrow \max(m_i, \max_j s_{ij}),\quad "
                 r"\ell_i \leftarrow \ell_i e^{m_i^{\text{old}}-m_i}+\sum_j e^{s_{ij}-m_i},\quad "
                 r"o_i \leftarrow o_i e^{m_i^{\text{old}}-m_i}+\sum_j e^{s_{ij}-m_i} v_j")
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


def run_probes(spec: KernelSpec, lengths: tuple[int, ...], device: str) -> tuple[list[SizeResult], float]:
    """Cached calls, one per length (a progress bar over them): every backend timed, no memory yet."""
    bar = st.progress(0.0, text="Starting…")
    seconds, sizes = 0.0, []
    weights = [t * t for t in lengths]
    for i, t in enumerate(lengths):
        bar.progress(sum(weights[:i]) / sum(weights), text=f"T = {t}: trying every backend…")
        res = cached.kernel_probe(spec, t, device)
        seconds += res.seconds
        sizes.append(res.value)
    bar.empty()
    return sizes, seconds


def charts_section(df: pd.DataFrame, spec: KernelSpec, lengths: tuple[int, ...], mem: bool,
                   device: str) -> tuple[list[SizeResult] | None, str, float]:
    """The time chart as soon as the backends are timed; the memory chart once memory is measured.

    Returns the sizes with memory filled in (None when not measured), how memory was measured
    and the seconds the measurement took when it was computed.
    """
    st.markdown("##### 1 · Time and memory against T")
    c1, c2 = st.columns(2)
    tfig = view.time_figure(df)
    c1.plotly_chart(tfig, key="chart_kernels_time", width="stretch")
    mem_slot, caption_slot = c2.empty(), st.empty()
    sizes, note, seconds = None, "not measured (switch on “Measure peak memory”)", 0.0
    if mem:
        mem_slot.info("Measuring peak memory: every call again, each in a fresh process…",
                      icon=":material/memory:")
        m = cached.kernel_memory(spec, lengths, device)
        sizes, note, seconds = list(m.value[0]), m.value[1], m.seconds
        df = view.backend_frame(sizes)
    mfig = view.memory_figure(df)
    mem_slot.plotly_chart(mfig, key="chart_kernels_memory", width="stretch")
    caption_slot.caption(view.guide_caption(tfig, mfig))
    return sizes, note, seconds


def table_section(sizes: list[SizeResult], df: pd.DataFrame, spec: KernelSpec, lengths: tuple[int, ...],
                  memory_note: str, budget: float, device: str) -> None:
    st.markdown("##### 2 · Which backend accepts this call, and what it costs")
    if device.startswith("cpu"):
        st.info("This is a CPU: torch's CPU build has two of the four kernels (its own flash kernel and "
                "the math path). The table shows torch's own answer for the other two.",
                icon=":material/memory:")
    right = "right"
    st.dataframe(
        view.table_frame(sizes), hide_index=True, key="chart_kernels_table",
        column_config={
            "label": st.column_config.TextColumn("backend"),
            "time_ms": st.column_config.TextColumn("time (ms)", alignment=right),
            "x_default": st.column_config.TextColumn("× default", alignment=right,
                                                     help="time / the default dispatch's time"),
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
    rows = fully_masked_rows(spec.mask, max(lengths))
    st.caption(
        f"Time: median of up to {cached.KERNEL_REPEATS} calls after a warm-up. Memory: {memory_note}. "
        "Error: against attncore.attention in float64 on the same inputs, over the rows counted in the "
        "CSV (all rows up to a size, a spread sample beyond), "
        + ("with the fully masked query rows (reference output 0) always included. " if rows else "")
        + ("Dropout makes every output random, so no error is given. " if spec.dropout > 0 else "")
        + f"Materialised paths are skipped where their L × S matrices would exceed "
          f"{budget / (1 << 30):.3g} GiB.")


def claims_section(df: pd.DataFrame, sizes: list[SizeResult], spec: KernelSpec) -> None:
    st.markdown("##### 3 · What is said of FlashAttention, beside this machine")
    src = view.claims_frame(df, [(s.L, s.default_backend) for s in sizes])
    st.table(src.rename(columns={"claim": "the claim", "measured": "measured here"}), hide_index=True)
    st.caption("The claims as tutorials and reference pages on scaled dot-product attention state them; "
               "the numbers are FlashAttention's own (Dao et al., 2022) on a GPU.")
    if spec.dropout > 0:
        st.warning("dropout_p > 0: SDPA drops weights on every call — it has no training flag of its own. "
                   "Pass dropout_p=0 at inference (nn.MultiheadAttention does so in eval mode).",
                   icon=":material/casino:")


def body(ctx: PageContext) -> None:
    st.title("Kernels")
    spec, lengths, mem = spec_from_controls(ctx)
    budget = default_budget_bytes(ctx.device)
    check_sweep(spec, lengths, ctx.device, cached.KERNEL_REPEATS, budget)
    explain()
    sizes, seconds = run_probes(spec, lengths, ctx.device)
    measured, memory_note, mem_seconds = charts_section(view.backend_frame(sizes), spec, lengths, mem,
                                                        ctx.device)
    sizes = measured or sizes
    seconds += mem_seconds
    df = view.backend_frame(sizes)
    table_section(sizes, df, spec, lengths, memory_note, budget, ctx.device)
    claims_section(df, sizes, spec)
    explain_more()
    widgets.caption_compute(ctx.device_label, seconds,
                            f"B = 1, H = {spec.heads}, Hkv = {spec.kv_heads}, E = {spec.head_dim}, "
                            f"{ctx.dtype}, T = {', '.join(map(str, lengths))}.")


run_page(title="Kernels", icon=":material/bolt:", params=PARAMS, body=body,
         seed_note="This page draws its Q, K, V and masks on the compute device (up to T × T mask "
                   "entries): a GPU shows other draws than a CPU, and each device its own backends.",
         oom_hint="Lower the largest T, the heads or the head dim.")
