"""A real decoder (SmolLM2): figure, table and sentence builders for the Attention sinks page's part
"a real decoder" and the Entropy vs length page's real-model view.

Results of :mod:`attncore.decoder` in, ``go.Figure`` / ``DataFrame`` / plain sentences out; no streamlit.
Every figure sets ``layout.meta.view``.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from numpy.typing import NDArray
from pandas.io.formats.style import Styler

from attncore.citations import table, table_text
from attncore.decoder.entropy import CLASSES, EntropyProfile
from attncore.decoder.induction import Induction, InductionAblation
from attncore.decoder.sinks import KIND_LABELS, KINDS, DecoderSinks, SinkVariant, ranked_keys
from attncore.decoder.stream_run import StreamRun
from attncore.decoder.streaming import Ablation, StreamResult, StreamSetting
from attncore.stats import t_critical
from ui import figures
from ui.figures import PALETTE, Curve, line_chart
from ui.maps import heatmap
from ui.views import dash_missing, right_aligned
from ui.views.sinks import bars_with_theory, labelled_heatmap

__all__ = [
    "LOSS_BLOCK",
    "ablation_figure",
    "ablation_frame",
    "ablation_sentence",
    "ablation_table",
    "after_layer",
    "attractor_frame",
    "auto_block",
    "classes_sentence",
    "crosbie_caption",
    "entropy_figure",
    "entropy_sentence",
    "head_labels",
    "induction_ablation_frame",
    "induction_ablation_sentence",
    "induction_figure",
    "induction_map_figure",
    "induction_sentence",
    "kind_figure",
    "kind_sentence",
    "loss_curve",
    "massive_figure",
    "massive_frame",
    "massive_sentence",
    "share_figure",
    "sink_grid_figure",
    "sink_sentence",
    "stream_figure",
    "stream_frame",
    "stream_run_caption",
    "stream_sentence",
    "stream_table",
    "streaming_llm_sentence",
    "value_figure",
    "variants_frame",
]

LOSS_BLOCK = 32  # positions averaged per point of the loss-vs-position curves (at most)


def auto_block(L: int) -> int:
    """Positions per point of the loss curves: :data:`LOSS_BLOCK`, fewer for short texts (>= 16 points)."""
    return max(1, min(LOSS_BLOCK, L // 16))


def _tag(fig: go.Figure, view: str) -> go.Figure:
    return fig.update_layout(meta={"view": view})


def head_labels(heads: int, kv_heads: int) -> list[str]:
    """'h0·kv0', ... : each query head with the key/value head its group shares."""
    group = max(1, heads // max(1, kv_heads))
    return [f"h{h}·kv{h // group}" for h in range(heads)]


# ---------------------------------------------------------------------------- sinks


def sink_grid_figure(s: DecoderSinks, kv_heads: int) -> go.Figure:
    """Layers x heads grid of Gu et al.'s first-token score; cells above eps are sink heads."""
    N, H = s.first_score.shape
    fig = labelled_heatmap(s.first_score.numpy(), head_labels(H, kv_heads), [str(n) for n in range(N)],
                           x_title="head · key/value group", y_title="layer", value_name="first-token score",
                           text_format=None, height=max(320, 16 * N + 80))
    fig.update_xaxes(tickangle=-60)  # 'h0·kv0h1·kv0…' ran together on a narrow chart (the Tour's, issue 41)
    return _tag(fig, "dec_sink_grid")


def share_figure(shares: Sequence[tuple[str, NDArray[np.float64] | np.ndarray]]) -> go.Figure:
    """Share of sink heads per layer, one curve per (label, (N,) shares), e.g. at 64 tokens and at L."""
    curves = [Curve(name=lab, x=np.arange(len(v)), y=np.asarray(v, dtype=np.float64), color=PALETTE[i])
              for i, (lab, v) in enumerate(shares)]
    fig = line_chart(curves, x_title="layer", y_title="share of heads with score > ε", height=300)
    return _tag(figures.legend_below(fig), "dec_sink_share")


def sink_sentence(s: DecoderSinks, label: str) -> str:
    """'At 64 tokens, 87 of 270 heads (32%) are sink heads ...' from the numbers."""
    n, total = s.sink_heads, s.heads
    layers = int((s.share > 0).sum())
    return (f"{label}: {n} of {total} heads ({n / total:.0%}) give the first token more than ε = {s.eps:g} "
            f"(mean score {float(s.first_score.mean()):.3f}); {layers} of {len(s.share)} layers have at "
            f"least one.")


def kind_figure(s: DecoderSinks) -> go.Figure:
    """Mean score of line breaks, punctuation, function words and other words with the first token taken out
    of every query's weights (late keys dropped), against uniform attention over the same keys."""
    kinds = [k for k in KINDS if k in s.kind_score]
    fig = bars_with_theory([KIND_LABELS[k] for k in kinds], [s.kind_score[k] for k in kinds],
                           theory=[s.kind_uniform[k] for k in kinds],
                           y_title="mean score, first token out", height=280)
    fig.data[1].name = "uniform attention"
    fig.update_xaxes(tickangle=0)  # four short labels: Plotly would turn them upright in a narrow first draw
    return _tag(fig, "dec_kinds")


_ONE_KIND = {"newline": "a line break", "punctuation": "punctuation", "function": "a function word",
             "word": "another word"}


def kind_sentence(s: DecoderSinks) -> str:
    """What draws weight besides the first token, from the numbers: each kind over uniform, the strongest
    key. Plain text with the tokens' own characters: pass it through ``ui.text.plain`` before markdown."""
    keys = ranked_keys(s.length)
    kinds = [k for k in KINDS if k in s.kind_score]
    ratios = ", ".join(f"{KIND_LABELS[k]} {s.kind_score[k] / s.kind_uniform[k]:.2f}×" for k in kinds)
    late = ("" if keys.stop >= s.length else
            f" and keys {keys.stop}..{s.length - 1} left out (each seen by fewer than an eighth of the "
            "queries)")
    text = (f"With the first token taken out of every query's weights (the rest re-summed to 1){late}, the "
            f"kinds draw, over uniform attention's weight: {ratios}.")
    if not s.attractors:
        return text
    top = s.attractors[0]
    text += (f" The strongest key after the first: {top.text!r} at position {top.position} "
             f"({_ONE_KIND[top.kind]}; mean score {top.score:.3f}, {top.rest_score:.3f} with the first token "
             f"taken out")
    if len(s.attractors) > 1:
        nxt = s.attractors[1]
        text += f", {s.lead:.2f}× the next key, {nxt.text!r} at {nxt.position}"
    return text + ")."


def attractor_frame(s: DecoderSinks) -> pd.DataFrame:
    """The keys after the first that draw most with the first token taken out (late keys not ranked)."""
    return pd.DataFrame({"position": [a.position for a in s.attractors],
                         "token": [repr(a.text) for a in s.attractors],
                         "kind": [KIND_LABELS[a.kind] for a in s.attractors],
                         "mean score": [a.score for a in s.attractors],
                         "first token out": [a.rest_score for a in s.attractors]})


def value_figure(s: DecoderSinks) -> go.Figure:
    """First token's value norm / the others' median, per layer and key/value head (1 = no drain)."""
    N, G = s.value_ratio.shape
    curves = [Curve(name=f"kv{g}", x=np.arange(N), y=s.value_ratio[:, g].numpy().astype(np.float64),
                    color=PALETTE[g]) for g in range(G)]
    curves.append(Curve(name="1 (no drain)", x=np.array([0, N - 1]), y=np.array([1.0, 1.0]), theory=True,
                        color=PALETTE[7]))
    fig = line_chart(curves, x_title="layer", y_title="value norm: first ÷ others", log_y=True, height=300)
    figures.log_ticks(fig)  # a ratio near 1: 0.1, 0.2, 0.5, 1, 2 written in full
    return _tag(figures.legend_below(fig), "dec_value")


def after_layer(point: int) -> str:
    """A residual point (0 = the embeddings, p = the output of ``model.layers[p - 1]``) in the app's one
    convention, 0-based layer indices as the head grid and the ablations use: 'after layer 11', or 'after the
    embeddings'."""
    return "after the embeddings" if point == 0 else f"after layer {point - 1}"


def massive_figure(s: DecoderSinks) -> go.Figure:
    """The first token's residual norm after the embeddings (x = -1) and each layer (x = its 0-based index),
    against the others' median."""
    x = np.arange(len(s.first_norm)) - 1
    curves = [Curve(name="first token", x=x, y=s.first_norm.numpy().astype(np.float64), color=PALETTE[0]),
              Curve(name="other tokens (median)", x=x, y=s.rest_norm.numpy().astype(np.float64),
                    color=PALETTE[1])]
    fig = line_chart(curves, x_title="residual stream after layer (−1 = embeddings)", y_title="L2 norm",
                     log_y=True, height=300)
    return _tag(figures.legend_below(fig), "dec_massive")


def massive_sentence(s: DecoderSinks) -> str:
    """Where the first token's residual norm peaks (0-based layer, :func:`after_layer`), its size against the
    others' median there, and its largest dims."""
    peak = s.peak_layer
    dims = ", ".join(f"{int(d)} ({float(v):.0f})" for d, v in zip(s.top_dims[peak], s.top_values[peak],
                                                                  strict=True))
    return (f"The first token's norm peaks {after_layer(peak)} at {float(s.first_norm[peak]):.0f} (others' "
            f"median {float(s.rest_norm[peak]):.1f}); its largest dims there: {dims}. Layers are counted "
            "from 0, as in the head grid and the ablations.")


def massive_frame(s: DecoderSinks) -> pd.DataFrame:
    """Per residual point: the first token's largest dims, their values, the others' |mean| there; "after
    layer" is the 0-based layer whose output it is (-1: the embeddings)."""
    rows = []
    for n in range(s.top_dims.shape[0]):
        for k in range(s.top_dims.shape[1]):
            rows.append({"after layer": n - 1, "dim": int(s.top_dims[n, k]),
                         "first token": float(s.top_values[n, k]),
                         "others |mean|": float(s.rest_top_abs[n, k])})
    return pd.DataFrame(rows)


def variants_frame(variants: Sequence[SinkVariant]) -> pd.DataFrame:
    """Does content matter: sink heads and mean first-token score per variant of the text."""
    return pd.DataFrame({"text": [v.name for v in variants],
                         "first token": [repr(v.first_text) for v in variants],
                         "sink heads": [v.sink_heads for v in variants],
                         "mean first-token score": [v.mean_score for v in variants]})


# ---------------------------------------------------------------------------- StreamingLLM


def loss_curve(nll: np.ndarray, block: int = LOSS_BLOCK) -> tuple[np.ndarray, np.ndarray]:
    """(L - 1,) losses -> (block centres, block means): the loss against position, smoothed."""
    n = len(nll) // block
    if n == 0:
        return np.array([(len(nll) - 1) / 2.0]), np.array([float(np.mean(nll))])
    y = np.asarray(nll[: n * block], dtype=np.float64).reshape(n, block).mean(axis=1)
    return np.arange(n) * block + (block - 1) / 2.0, y


def stream_figure(r: StreamResult, block: int | None = None, tag: str = "dec_stream") -> go.Figure:
    """Loss against position for every setting (block means, :func:`auto_block` by default), the shape of
    StreamingLLM's figure; ``tag`` is its ``layout.meta.view``."""
    block = auto_block(r.length) if block is None else block
    # One colour per window, one dash per number of first tokens kept, one legend entry per window (its
    # variants toggle with it) plus one key per dash, in a column beside the plot: 16 entries under a
    # 360 px chart took all of it (issue 41).
    windows = sorted({s.window for s in r.settings}, key=lambda w: -1 if w is None else w)
    sinks = sorted({s.sinks for s in r.settings if s.sinks})
    dash = {0: "solid"} | {k: _SINK_DASHES[1 + j % (len(_SINK_DASHES) - 1)] for j, k in enumerate(sinks)}
    curves, shown = [], set()
    for i, s in enumerate(r.settings):
        x, y = loss_curve(r.nll[i].numpy(), block)
        color = PALETTE[windows.index(s.window) % len(PALETTE)]
        group = "dense" if s.window is None else f"window {s.window:,}"
        curves.append(Curve(name=html.escape(s.label), x=x, y=y, color=color,
                            extra={"mode": "lines", "legendgroup": group, "showlegend": group not in shown,
                                   "line": {"color": color, "width": 2, "dash": dash[s.sinks]}}))
        shown.add(group)
    curves += [figures.legend_key(f"+ first {k} (all windows)", dash=dash[k]) for k in sinks]
    fig = line_chart(curves, x_title=f"query position (means of {block})", y_title="loss (nats/token)",
                     height=STREAM_HEIGHT)
    figures.relayout(fig, legend={"orientation": "v", "x": 1.02, "xanchor": "left", "y": 1.0,
                                  "yanchor": "top", "font": {"size": 11}}, margin={"b": 10})
    return _tag(fig, tag)


STREAM_HEIGHT = 400
_SINK_DASHES = ("solid", "dash", "dot", "dashdot", "longdash")  # none kept, then each k kept in order


def stream_frame(r: StreamResult) -> pd.DataFrame:
    """Per setting: perplexity over all tokens, past its window, and the loss change vs dense there ± SE."""
    dense = StreamSetting(None)
    rows = []
    for s in r.settings:
        start = s.window or 0
        d, se = r.delta(s, dense, start) if dense in r.settings and s != dense else (math.nan, math.nan)
        rows.append({"setting": s.label, "perplexity": r.ppl(s), "from token": start + 1,
                     "perplexity past the window": r.ppl(s, start), "dense there": r.ppl(dense, start)
                     if dense in r.settings else math.nan, "loss change": d, "± SE": se,
                     "seconds": r.seconds[r.index(s)]})
    return pd.DataFrame(rows)


STREAM_FORMATS: dict[str, str] = {"perplexity": "{:,.2f}", "perplexity past the window": "{:,.2f}",
                                  "dense there": "{:,.2f}", "seconds": "{:.1f}"}
STREAM_MAYBE: dict[str, str] = {"loss change": "{:+.4f}", "± SE": "{:.4f}"}  # the dense row has none
STREAM_CONFIG = right_aligned(STREAM_MAYBE)
DENSE_NOTE = "the reference: no window, so no change against dense to show (—)"


def stream_table(r: StreamResult) -> Styler:
    """:func:`stream_frame` as the page shows it (with :data:`STREAM_CONFIG`): a missing cell reads "—", never
    "None", with the reason in the row's note (the dense row is the reference the others are compared
    with); the other numbers formatted."""
    frame = dash_missing(stream_frame(r), STREAM_MAYBE)
    dense = StreamSetting(None).label
    frame["note"] = [DENSE_NOTE if label == dense else "" for label in frame["setting"]]
    return frame.style.format(STREAM_FORMATS)


def stream_sentence(r: StreamResult) -> str:
    """For each window: how much the window alone and the window + first k change perplexity past it."""
    dense = StreamSetting(None)
    if dense not in r.settings:
        return "The dense setting did not run, so there is nothing to compare with."
    parts = []
    for w in sorted({s.window for s in r.settings if s.window is not None}):
        base = r.ppl(dense, w)
        items = [f"{s.label} {r.ppl(s, w) / base:.3g}×" for s in r.settings if s.window == w]
        parts.append(f"past token {w:,}: dense {base:.3g}; " + ", ".join(items))
    if not parts:
        return "Only the dense setting ran."
    return "Perplexity relative to dense, " + "; ".join(parts) + "."


def stream_run_caption(run: StreamRun) -> str:
    """Where a stored run comes from, from its header: model, text, length, settings, machine, date, the
    seconds a pass took and the command that wrote it (plain text; the page escapes it)."""
    h, r = run.header, run.result
    commit = str(h.get("commit", "unknown"))
    commit = commit[:10] + commit[40:] if len(commit) >= 40 else commit
    return (f"Stored run, not rerun here: {h.get('model', '?')}; text {h.get('text', '?')}; "
            f"{r.length:,} tokens; {len(r.settings)} settings, one pass each, {run.seconds_per_pass:.1f} s a "
            f"pass ({sum(r.seconds):.0f} s in all) on {h.get('cpu', '?')} ({h.get('cores', '?')} cores, "
            f"{h.get('threads', '?')} torch threads, torch {h.get('torch', '?')}), "
            f"{h.get('date', '?')}, commit {commit}; written by {h.get('command', '?')}.")


def streaming_llm_sentence(r: StreamResult, cache: int = 1024) -> str:
    """StreamingLLM's Table 1 (Llama-2-13B, a cache of 1,024) beside this run's window of ``cache`` keys alone
    and with the first k tokens (perplexity past the window and its ratio to dense there), then Table 2's
    Llama-2-7B row on its own model, text and cache (every number from :mod:`attncore.citations`)."""
    theirs = "StreamingLLM's own numbers: " + table_text(table("xiao2023", "Table 1")) + "."
    also = (" Separately, with another model, text and cache: " + table_text(table("xiao2023", "Table 2"))
            + ".")
    dense = StreamSetting(None)
    ours = [s for s in r.settings if s.window == cache]
    if not ours or dense not in r.settings or r.length <= cache + 1:
        return theirs + also
    base = r.ppl(dense, cache)
    here = ", ".join(f"{s.label} {r.ppl(s, cache):,.2f} ({r.ppl(s, cache) / base:.3f}× dense)" for s in ours)
    return (f"{theirs} Here, past token {cache:,} of {r.length:,}: dense {base:,.2f}, {here}; their model "
            f"read 65K tokens, far past its 4K training length; this run reads {r.length:,}.{also}")


def ablation_figure(abl: Sequence[Ablation]) -> go.Figure:
    """Loss change of each first-token ablation, mean over text windows ± its 95% t interval."""
    fig = bars_with_theory([a.name for a in abl], [a.mean for a in abl], errors=[a.margin for a in abl],
                           y_title="Δ loss (nats/token)", height=320)
    # each bar says its value: a +0.19 bar is invisible beside a +10 one on the shared axis
    fig.update_traces(selector={"type": "bar"}, text=[f"{a.mean:+.3g}" for a in abl], textposition="outside",
                      cliponaxis=False)
    return _tag(fig, "dec_ablation")


def ablation_frame(abl: Sequence[Ablation]) -> pd.DataFrame:
    """Per ablation: mean loss change, its standard error and 95% t interval over windows, the windows, the
    edited residual point (0-based layer; NaN for the deletion, which edits none) and dims. Every column
    of numbers is numeric (a blank in one is NaN, shown as "—" by :func:`ablation_table`)."""
    return pd.DataFrame({"ablation": [a.name for a in abl], "loss change": [a.mean for a in abl],
                         "± 95% (t)": [a.margin for a in abl], "SE": [a.se for a in abl],
                         "windows": [a.windows for a in abl],
                         "after layer": pd.array([a.layer if a.dims else pd.NA for a in abl], dtype="Int64"),
                         "dims": [", ".join(map(str, a.dims)) for a in abl]})


def ablation_table(abl: Sequence[Ablation]) -> Any:
    """:func:`ablation_frame` as the page shows it (a pandas Styler, 4 decimals): the edited point and dims
    written as text, "—" where the ablation edits none (a grid draws a missing number as "None", whatever
    the Styler says, so the column is text throughout: never numbers mixed with text)."""
    f = ablation_frame(abl)
    f["after layer"] = ["—" if pd.isna(v) else str(int(v)) for v in f["after layer"]]
    f["dims"] = [d or "—" for d in f["dims"]]
    return f.style.format(precision=4, subset=["loss change", "± 95% (t)", "SE"])


def ablation_sentence(abl: Sequence[Ablation], length: int) -> str:
    """'Loss change over 4 windows of 256 tokens (mean ± 95% t interval, t(0.975, 3) = 3.182): ...'."""
    if not abl:
        return "No ablation ran."
    n = abl[0].windows
    t = t_critical(n - 1)
    parts = "; ".join(f"{a.name} {a.mean:+.3f} ± {a.margin:.3f}" for a in abl)
    return (f"Loss change over {n} windows of {length} tokens, nats per token (mean ± 95% t interval, "
            f"t(0.975, {n - 1}) = {t:.3f} × the standard error): {parts}.")


# ---------------------------------------------------------------------------- entropy


def entropy_figure(e: EntropyProfile, without_first: bool = False) -> go.Figure:
    """Median entropy per position band (all heads and each class) against ln(i + 1) (dashed)."""
    med = e.median_rest if without_first else e.median
    centres = np.array([(lo + hi - 1) / 2.0 for lo, hi in e.bands])
    curves = []
    for i, name in enumerate(("all", *CLASSES)):
        if name in med:
            count = sum(row.count(name) for row in e.classes) if name != "all" else None
            label = name if count is None else f"{name} ({count} heads)"
            curves.append(Curve(name=label, x=centres + 1, y=med[name].numpy(), color=PALETTE[i]))
    # keys seen: i + 1 for query i, uniform entropy ln(i + 1) (one fewer key without the first token)
    x = np.arange(1, e.entropy.shape[-1] + 1, dtype=np.float64)
    theory = np.log(np.maximum(x - 1, 1.0)) if without_first else np.log(x)
    curves.append(Curve(name="uniform: ln(keys)", x=x, y=theory, theory=True, color=PALETTE[7]))
    fig = line_chart(curves, x_title="keys the query sees (i + 1)", y_title="entropy (nats)", log_x=True,
                     height=340)
    return _tag(figures.legend_below(fig), "dec_entropy")


def entropy_sentence(e: EntropyProfile) -> str:
    """Head classes and the median entropy of the last band with and without the first token."""
    c = e.counts
    lo, hi = e.bands[-1]
    a, b = float(e.median["all"][-1]), float(e.median_rest["all"][-1])
    return (f"{c['sink-dominated']} heads are sink-dominated, {c['local']} local and {c['broad']} broad; at "
            f"queries {lo}–{hi - 1} the median entropy is {a:.2f} nats ({b:.2f} without the first token), "
            f"uniform attention would give {math.log(lo + 1):.2f}–{math.log(hi):.2f}.")


def classes_sentence(e: EntropyProfile) -> str:
    """The head classes' rule and counts, with the length they were measured at: a class is a median over
    this text's queries, so it depends on the length."""
    L = int(e.uniform.shape[-1])
    counts = ", ".join(f"{c}: {e.counts[c]}" for c in CLASSES)
    return (f"Classes at {L:,} tokens: sink-dominated = median weight on the first token above ½; local = "
            f"median weight on the query and its 3 predecessors above ½; broad = the rest. {counts}. The "
            f"medians run over these {L:,} tokens' queries, so the classes depend on the length: another "
            "length gives other counts.")


# ---------------------------------------------------------------------------- induction


def induction_figure(ind: Induction, kv_heads: int) -> go.Figure:
    """Layers x heads grid of induction scores."""
    N, H = ind.score.shape
    fig = labelled_heatmap(ind.score.numpy(), head_labels(H, kv_heads), [str(n) for n in range(N)],
                           x_title="head · key/value group", y_title="layer", value_name="induction score",
                           text_format=None, height=max(320, 16 * N + 80))
    return _tag(fig, "dec_induction")


def induction_map_figure(ind: Induction, head: tuple[int, int]) -> go.Figure:
    """One top head's map on the repeated tokens: the stripe T - 1 below the diagonal."""
    fig = heatmap(ind.maps[head].numpy(), title=f"layer {head[0]}, head {head[1]}", height=360)
    return _tag(fig, "dec_induction_map")


def induction_sentence(ind: Induction) -> str:
    """The top heads' scores, uniform's level and the loss on each copy."""
    T = ind.copy_length
    tops = ", ".join(f"L{a}H{b} {float(ind.score[a, b]):.2f}" for a, b in ind.top)
    uniform = sum(1.0 / (T + j + 1) for j in range(T)) / T
    guess = (f" (uniform guessing over the {ind.vocab:,}-token vocabulary: ln V = {math.log(ind.vocab):.2f})"
             if ind.vocab > 1 else "")
    return (f"Top induction heads on {T} random tokens repeated once: {tops} (uniform attention would give "
            f"{uniform:.3f}); loss {ind.loss_first:.2f} nats on the first copy{guess}, {ind.loss_second:.2f} "
            "on the second.")


def induction_ablation_frame(a: InductionAblation) -> pd.DataFrame:
    """Per set size: the top heads, the second copy's loss with them zeroed, and the random sets' losses."""
    rows = []
    for k in a.sizes:
        r = a.random_loss[k].numpy()
        rows.append({"heads zeroed": k, "top heads": ", ".join(f"L{x}H{y}" for x, y in a.top[k]),
                     "loss, top heads zeroed": a.top_loss[k], "Δ vs none": a.top_loss[k] - a.base,
                     "random sets": len(r), "random: median": float(np.median(r)),
                     "random: min": float(r.min()), "random: max": float(r.max()),
                     "random sets as high": a.beaten_by(k)})
    return pd.DataFrame(rows)


def induction_ablation_sentence(a: InductionAblation, heads: int, vocab: int) -> str:
    """The second copy's loss with the top 1% / 3% of heads zeroed against random sets of the same size
    (changes against the loss with every head)."""
    parts = []
    for k in a.sizes:
        r = a.random_loss[k] - a.base
        n, beaten = int(r.numel()), a.beaten_by(k)
        if beaten == 0:
            verdict = f"more than every one of {n} random sets of {k} (largest {float(r.max()):+.3f})"
        else:
            verdict = f"and {beaten} of {n} random sets of {k} change it as much or more"
        parts.append(f"zeroing the top {k} heads by induction score ({k / heads:.0%} of {heads}) changes it "
                     f"by {a.top_loss[k] - a.base:+.3f} nats, {verdict}; the random sets' median "
                     f"{float(np.median(r.numpy())):+.3f}")
    return (f"Loss on the second copy of {a.copy_length} random tokens: {a.base:.3f} nats with every head "
            f"(first copy {a.first_copy:.2f}; uniform guessing ln V = {math.log(vocab):.1f}); "
            + "; ".join(parts) + ".")


def crosbie_caption() -> str:
    """What the source measured, beside this measurement (quoted from its abstract)."""
    return ("Crosbie & Shutova 2025 (\"Induction Heads as an Essential Mechanism for Pattern Matching in "
            "In-context Learning\", Findings of NAACL 2025, arXiv 2407.07011), abstract: on Llama-3-8B and "
            "InternLM2-20B, \"even a minimal ablation of induction heads leads to ICL performance decreases "
            "of up to ~32% for abstract pattern recognition tasks\". They measure few-shot task accuracy; "
            "this measures the loss on a repeated random sequence, each head zeroed before the output "
            "projection.")
