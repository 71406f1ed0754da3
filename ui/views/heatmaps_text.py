"""Heatmaps page: its words. The explanations, the metric cells, the captions and notes built from the numbers
they quote (the stage row's colour rule, dropout's draws, the heads overview's first-token heads); the page
draws them.

Plain functions of attncore results and settings returning strings; no streamlit calls.
"""

from __future__ import annotations

from typing import Any

from attncore.dropout import DropoutDraws
from attncore.explore import RowStats, SyntheticSpec
from attncore.models import summary_of
from attncore.theory import scaled_logit_std, uniform_entropy
from ui.text import plain
from ui.views import heatmaps as view

__all__ = ["DROPOUT_LATEX", "EXPLAIN", "EXPLAIN_LATEX", "FULLY_MASKED_NOTE", "REAL_TEXT_INTRO",
           "REAL_TEXT_LATEX", "ROW_CLICK_CAPTION", "WHY_SQRT_D", "compare_caption", "dropout_sentence",
           "dropout_text", "float16_warning", "fully_masked_note", "gqa_caption", "head_metric_cells",
           "main_captions", "overview_sentence", "real_metric_cells", "stages_caption", "window_note"]

FULLY_MASKED_NOTE = (
    "Valid length 0 hides every key: each row is fully masked, so attncore gives it zero weights and a "
    "zero output (not NaN), as torch's SDPA does on the CPU (math and memory-efficient kernels). Two "
    "others differ: torch's fused cuDNN kernel on CUDA (float16/bfloat16) returns a non-zero output "
    "for such a row, and d2l's masked_softmax, which masks with −1e6 instead of −∞, spreads the row "
    "uniformly (1/S on every key).")

EXPLAIN = ("Every query scores every key; the scores are scaled, masked and normalised into weights "
           "that mix the values. Move a control and watch which stage changes.")
EXPLAIN_LATEX = (r"\mathrm{Attention}(Q,K,V)=\mathrm{softmax}\!\left(\frac{QK^\top}{\sqrt{d_k}\,\tau}"
                 r"+M\right)V,\qquad \operatorname{Var}(q\cdot k)=d_k\,\sigma^4")
WHY_SQRT_D = (
    "With unscaled dot products the scores grow like √d, so at large d the rows collapse onto "
    "one key; dividing by √d keeps their spread near σ² whatever the dimension. With the default "
    "shared colour range the stage row shows this directly: the scaled map is the raw one, faded "
    "by 1/√d."
)
DROPOUT_LATEX = (r"\tilde w_{ij}=\frac{m_{ij}}{1-p}\,w_{ij},\ m_{ij}\sim\mathrm{Bernoulli}(1-p):\quad "
                 r"\mathbb E[\tilde o_i]=o_i,\quad "
                 r"\operatorname{Var}[\tilde o_{ie}]=\frac{p}{1-p}\sum_j w_{ij}^2 v_{je}^2")
REAL_TEXT_INTRO = (
    "Each head of a trained transformer turns its queries and keys into one map per layer: row "
    "*i* says how token *i* spreads its attention over the text. The dashed line beside the map is "
    "log *n*, the entropy of a query that spreads evenly over the *n* keys it sees."
)
REAL_TEXT_LATEX = (r"A^{(\ell,h)} = \mathrm{softmax}\!\left(\frac{Q^{(\ell,h)} K^{(\ell,h)\top}}"
                   r"{\sqrt{d_h}}\right),"
                   r"\qquad H_i = -\sum_j A_{ij}\log A_{ij} \le \log n")
ROW_CLICK_CAPTION = (
    "Click a row of the map (or pick the query token in the sidebar) to see that token's "
    "attention over the text and its q, k, v below; click a thumbnail further down to switch "
    "heads.")


def float16_warning(over: int) -> str:
    """The raw scores past float16's range, and why the weights stay finite."""
    return (f"{over} raw scores exceed float16's largest value 65504 and would be ±inf if "
            "stored in float16. attncore scores half inputs in float32 (as fused kernels "
            "accumulate), so the weights below stay finite.")


def fully_masked_note(mask: str) -> str:
    """What a fully masked row gives (valid length 0, for every row or one query's)."""
    return FULLY_MASKED_NOTE if mask == "padding" else FULLY_MASKED_NOTE.replace(
        "Valid length 0 hides every key: each row is fully masked",
        "A valid length of 0 hides every key from its query: that row is fully masked")


def window_note(spec: SyntheticSpec) -> str:
    """A window as wide as the queries: the causal mask."""
    return (f"The window ({spec.window}) covers every query's whole past (L = {spec.L}): "
            "it equals the causal mask.")


def head_metric_cells(stages, spec: SyntheticSpec, head: int, rs: RowStats) -> list[dict[str, Any]]:
    """The four metrics of the selected head (``st.metric`` keyword arguments): entropy, max weight, the
    scaled scores' spread against theory, row sum."""
    scaled = stages.scaled[head]
    measured = float(scaled.std()) if scaled.numel() > 1 else 0.0
    cells: list[dict[str, Any]] = [
        dict(label="Mean entropy (nats)", value=f"{float(rs.entropy.mean()):.3f}",
             help="Uniform over S keys would be log S = "
                  f"{uniform_entropy(spec.S):.3f}."),
        dict(label="Mean max weight", value=f"{float(rs.max_weight.mean()):.3f}",
             help=f"Uniform would be 1/S = {1 / spec.S:.4f}.")]
    if spec.scoring == "additive":
        cells.append(dict(label="std of scaled scores", value=f"{measured:.3f}"))
    else:
        theory = scaled_logit_std(spec.d_k, spec.input_std**2, spec.input_std**2, scale=spec.scale(),
                                  temperature=spec.temperature)
        cells.append(dict(label="std of scaled scores", value=f"{measured:.3f}", delta=f"theory {theory:.3f}",
                          delta_color="off", delta_arrow="off",
                          help="Theory: √d·σ²·scale/τ for independent Gaussian entries."))
    cells.append(dict(label="Mean row sum", value=f"{float(rs.row_sum.mean()):.3f}",
                      help="1 for softmax and SSMax; softmax1 and sigmoid may spend less (or more)."))
    return cells


def stages_caption(spec: SyntheticSpec, own: bool) -> str:
    """What the colours of the stage row mean (its range rule, masked cells, the downsampling rule)."""
    parts = ["Scores: red positive, blue negative, white 0; "
             + ("each map is stretched to the ± range in its title." if own else
                "raw, scaled and masked scores share one colour range (the bar under map 1), so "
                "scaling shows as faded colour.")]
    if spec.mask != "none":
        parts.append("Grey cells are masked (−∞).")
    if max(spec.L, spec.S) > view.STAGE_SIDE:
        parts.append(f"Shown at ≤{view.STAGE_SIDE}×{view.STAGE_SIDE} cells: each score cell keeps the "
                     "largest-magnitude score of its block, with its sign (a mean would cancel to 0); "
                     "each weight cell is its block's mean.")
    parts.append("Hover any cell for its query, key and exact value.")
    return " ".join(parts)


def main_captions(spec: SyntheticSpec, log_color: bool) -> list[str]:
    """The captions under the selected head's map: its log colour scale, its downsampling."""
    out = []
    if log_color:
        out.append(f"Colour is log10 of the weight from 1e{view.LOG_FLOOR:.0f} (weights below it, and masked "
                   "zeros, at the floor) to 1.")
    if max(spec.L, spec.S) > view.MAIN_SIDE:
        side = view.MAIN_SIDE
        out.append(f"Shown at ≤{side}×{side} cells: each cell averages a block of weights; the CSV has every "
                   "value.")
    return out


def gqa_caption(spec: SyntheticSpec) -> str:
    """The heads grid under grouped-query attention."""
    group = spec.heads // spec.kv_heads
    return (f"Grouped-query attention: {spec.kv_heads} key/value heads, each shared by {group} "
            "query heads. Heads in a group see the same keys but differ in their queries.")


def compare_caption(rs: RowStats, seconds: float) -> str:
    """One setting of the comparison: its entropy, max weight and compute time."""
    return (f"mean entropy {float(rs.entropy.mean()):.3f} nats · mean max weight "
            f"{float(rs.max_weight.mean()):.3f} · computed in {seconds * 1e3:.0f} ms")


def dropout_text(p: float) -> str:
    """What dropout does to the weights and the output, and SDPA's rule."""
    return (
        f"Dropout zeroes each weight with probability p = {p:g} and divides the survivors by 1 − p, so "
        "every weight keeps its expectation and so does the output. SDPA applies dropout whenever "
        "`dropout_p > 0`: `F.scaled_dot_product_attention` has no training flag of its own, so pass "
        "`dropout_p=0` at inference (`nn.MultiheadAttention` does this in eval mode)."
    )


def dropout_sentence(d: DropoutDraws) -> str:
    """What the mean-output chart shows, in numbers (tested against the draws)."""
    count = d.exact.numel()
    return (f"Head output without dropout against the mean of {d.n} seeded dropout draws: all {count} "
            f"entries lie within {d.max_z():.2f} standard errors of it, {d.within(2.0):.0%} within 2 "
            "(about 95% for a normal mean).")


def real_metric_cells(att, w, rs: RowStats) -> list[dict[str, Any]]:
    """The four metrics of a real model's selected head (``st.metric`` keyword arguments)."""
    L = len(att.tokens)
    return [
        dict(label="Tokens", value=f"{L}", help="Including the special tokens the tokenizer adds."),
        dict(label="Mean entropy (nats)", value=f"{float(rs.entropy.mean()):.3f}",
             delta=f"uniform log n = {float(rs.visible.double().log().mean()):.3f}", delta_color="off",
             delta_arrow="off"),
        dict(label="Mean max weight", value=f"{float(rs.max_weight.mean()):.3f}",
             delta=f"uniform 1/n = {1 / L:.3f}", delta_color="off", delta_arrow="off"),
        dict(label=f"Mass on {plain(att.tokens[0])}", value=f"{float(w[:, 0].mean()):.3f}",
             help="Mean weight the queries of this head put on the first token."),
    ]


def overview_sentence(att, lm) -> str:
    """The overview's caption: what a tile is and the three heads that park the most weight on token 0."""
    s = summary_of(att)
    T = int(s.thumbs.shape[-1])
    flat = s.first.double().flatten()
    top = sorted(range(flat.numel()), key=lambda i: (-float(flat[i]), i))[:3]
    names = ", ".join(f"layer {i // lm.heads} head {i % lm.heads} ({float(flat[i]):.2f})" for i in top)
    groups = (f" Columns are grouped by the {lm.kv_heads} key/value heads that {lm.groups} query heads each "
              "share (dotted boxes)." if lm.kv_heads and lm.kv_heads < lm.heads else "")
    return (f"Each tile is one head's map averaged into {T} × {T} blocks (rows: queries, columns: keys); the "
            f"outlined row is the layer whose heads are shown above.{groups} Most weight on the first token, "
            f"{att.tokens[0]}: {names}.")
