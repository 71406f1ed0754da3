"""Attention sinks page: its words. The explanations, the sidebar's gate help, and the captions built from the
numbers they quote (where the sink takes half the weight, the gate's RMS, uniform attention's sink score
against ε, where a causal model's first-token curve stands); the page draws them.

Plain functions of attncore results and settings returning strings; no streamlit calls.
"""

from __future__ import annotations

import numpy as np

from attncore.citations import quoted
from attncore.sinks import SinkSpec, uniform_sink_scores
from attncore.theory import gate_bias_for_mean, gate_mean_theory, gate_rms_theory
from ui.text import plain

__all__ = ["EXPLAIN", "EXPLAIN_LATEX", "FULL_LATEX", "FULL_TEXT", "GATE_HELP", "LAB_LATEX", "METRIC_LATEX",
           "NOTHING_TEXT", "glance_caption", "grid_caption", "half_caption", "lab_text", "metric_caption",
           "nothing_caption", "uniform_metric_sentence", "zoo_caption"]

GATE_HELP = (
    "Output gate σ(x W_g + b_g) with unit-Gaussian pre-activations x W_g, so its mean is E σ(b_g + Z). "
    f"Trained gates are mostly nearly closed, with a mean gate of about 0.1: that takes b_g ≈ "
    f"{gate_bias_for_mean(0.1):.1f}; b_g = −2 gives a mean of {float(gate_mean_theory(-2.0)):.3f}.")


# ---------------------------------------------------------------------------- explanation

EXPLAIN = ("Softmax must spend exactly 1 on the keys a query sees; a head with nothing to read pours it "
           "onto a token whose value is near zero, an **attention sink**.")
EXPLAIN_LATEX = (r"p_j=\frac{e^{x_j}}{\sum_k e^{x_k}}\quad\text{vs. a sink logit } b\text{: }"
                 r"p_j=\frac{e^{x_j}}{e^{b}+\sum_k e^{x_k}}")
FULL_TEXT = (
    "Softmax has a fixed budget: every query must spend a total weight of exactly 1 on the keys it "
    "sees. A head that finds nothing worth reading cannot spend *less*; what it can do is pour the "
    "weight onto a token whose value is close to zero, so that the mix it writes is close to zero "
    "too. That token is an **attention sink**: `[CLS]`, `[SEP]`, the first token of a decoder, "
    "often punctuation. The fixes either give the denominator a term that no value stands behind "
    "(softmax1, a learned sink logit *b*), drop the budget altogether (sigmoid, ReLU), or let the head "
    "scale what it writes (an output gate)."
)
FULL_LATEX = (
    (r"\text{softmax: } p_j=\frac{e^{x_j}}{\sum_k e^{x_k}}\qquad"
     r"\text{sink logit } b\text{: } p_j=\frac{e^{x_j}}{e^{b}+\sum_k e^{x_k}}\ \ "
     r"(b=0:\ \text{softmax1})"),
    (r"\text{sigmoid: } p_j=\sigma(x_j-\log n)\qquad\text{ReLU: } p_j=\frac{\max(x_j,0)}{n}\qquad"
     r"\text{gated: } o_i=\sigma(x_i W_g+b_g)\odot\sum_j p_{ij}\,v_j"),
)
LAB_LATEX = (r"p_{\text{sink}}\approx\frac{1}{1+n\,e^{\,c+\sigma^2/2-s}},\qquad"
             r"\operatorname{RMS}(o)\approx\sqrt{(1-p_{\text{sink}})^2\,\frac{e^{\sigma^2}}{n}"
             r"+p_{\text{sink}}^2\,\nu^2}")


def lab_text(spec: SinkSpec) -> str:
    """The synthetic head, described at this setting's n."""
    return (
        f"**The synthetic head.** {spec.n} real tokens query {spec.n + 1 if spec.sink else spec.n} keys. "
        "Key 0 is the sink (when it is on): its key points along the direction every query shares, so "
        "each query gives it the same logit *s* (the strength); its value has RMS *ν*. The real keys get "
        "logits *c* + noise of spread *σ*, their values are standard Gaussian. Replacing the sum of the "
        "*n* exponentials by its mean gives the dashed curves:"
    )


# ---------------------------------------------------------------------------- synthetic lab


def half_caption(spec: SinkSpec) -> str:
    """Where the sink takes half the weight, and what a zero-valued sink does to the output."""
    cc, n, sd = spec.content, spec.n, spec.spread
    half = cc + np.log(n) + sd**2 / 2
    return (f"The sink takes half the weight at s ≈ c + log n + σ²/2 = {half:.2f}. With ν = 0 every "
            "bit of weight the sink absorbs is weight that mixes nothing, so the output shrinks towards "
            "zero: a head can switch itself off, at the price of a token that exists only to be "
            "stared at.")


NOTHING_TEXT = (
    "Here there is no sink token. As every real logit sinks ($c \\to -\\infty$), softmax renormalises "
    "and still hands out a total of 1, so the head keeps writing a full-sized mix of irrelevant values. "
    "softmax1 and a sink logit spend $R/(e^b+R)$ with $R=n\\,e^{c+\\sigma^2/2}$, which falls to 0; "
    "sigmoid spends $n\\,\\mathbb{E}[\\sigma(x-\\log n)]$, which has no ceiling; ReLU attention (Guo et "
    "al. 2024) spends $\\mathbb{E}[\\max(x,0)]$, exactly 0 once every logit is negative; the gate leaves "
    "the weights alone and scales the output instead."
)


def nothing_caption(spec: SinkSpec) -> str:
    """The content sweep's lines, and the gate's RMS at this gate bias."""
    return ("Solid: measured; dashed: mean-field theory. Gated softmax spends exactly 1 (not drawn on "
            "the left); its output is scaled by the gate, whose RMS is "
            f"{float(gate_rms_theory(spec.gate_bias)):.3f} at b_g = {spec.gate_bias:g}.")


def zoo_caption(spec: SinkSpec, zoo) -> str:
    """The normaliser zoo's bars, and the gate's mean at this setting."""
    return (f"Bars: mean over the {spec.n} queries (error bar: spread over queries); grey ticks: "
            "mean-field theory. softmax1 and the sink logit spend less than 1 only when the real logits "
            "are low; sigmoid can spend far more than 1; ReLU spends max(x, 0)/n, nothing on a key scored "
            "below 0; the gate (mean "
            f"{float(zoo['gated'].gate_mean.mean()):.3f}) shrinks the output whatever the weights do.")


# ---------------------------------------------------------------------------- real model


def grid_caption(att, layer: int, head: int) -> str:
    """What the head grid shows, for an encoder or a causal model."""
    out = (f"Each tile is one head; the outlined one is layer {layer}, head {head}, shown below (click "
           "another tile to show it). ")
    if not att.causal:
        return out + "A bright left column is a head parking its weight on the first token."
    return out + ("The causal mask leaves every tile 0 above its diagonal. The first query sees only the "
                  "first token, so every head gives it that query's whole weight whatever it has learned; "
                  "a head parks its weight on the first token when the left column stays bright all the "
                  "way down.")


_CLARK = quoted("clark2019.sep")


def glance_caption(att, rep, labels: dict[str, str]) -> str:
    """The dashed baselines, and for a causal model where its first-token curve stands against them."""
    if not att.causal:
        return ("Dashed: what each key set would get if every query spread its weight evenly over the keys "
                "it sees (1/L per token). In a trained encoder the middle layers put several times that on "
                f"[CLS]; {_CLARK.reference.short} ({_CLARK.where}, {_CLARK.model}): {_CLARK.label}.")
    L, uni = len(att.tokens), rep.uniform["first"]
    per_layer = rep.mass["first"].double().mean(dim=1)  # (layers,): the curve, mean over heads
    top = int(per_layer.argmax())
    return (f"Dashed: what each key set would get if every query spread its weight evenly over the keys it "
            f"sees. Under the causal mask query i sees only the i + 1 tokens up to itself, so the first "
            f"token's even share is the mean of 1/(i + 1): {uni:.3f} for these {L} tokens, not 1/L = "
            f"{1 / L:.3f}. This model puts the most on {plain(labels['first'])} in layer {top}: "
            f"{float(per_layer[top]):.3f}, {float(per_layer[top]) / uni:.1f}× the even share. A decoder "
            "that parks its spare weight on its first token (the sink StreamingLLM keeps in its cache) "
            "draws that curve far above the dashed line.")


METRIC_LATEX = (
    r"\alpha_k^{(\ell,h)}=\frac{1}{|\{i: i\text{ sees }k\}|}\sum_{i\text{ sees }k}A^{(\ell,h)}_{ik},"
    r"\qquad \text{sink rate}_\ell(k)=\frac{1}{H}\#\{h:\alpha_k^{(\ell,h)}>\varepsilon\}")


def metric_caption(L: int, causal: bool, eps: float) -> str:
    """The sink metric's source, and what uniform attention would score against ε."""
    return ("Gu et al. 2024 (\"When Attention Sink Emerges in Language Models\") call a head a sink head "
            "for key k when α_k > ε. " + uniform_metric_sentence(L, causal, eps))


def uniform_metric_sentence(L: int, causal: bool, eps: float) -> str:
    """What uniform attention would score (attncore.sinks.uniform_sink_scores), against ε."""
    if not causal:
        return (f"Under uniform attention every α_k would be 1/L = {1 / L:.3f} here, so any cell above 0 at "
                f"ε = {eps:g} is a head that singles a token out." if eps >= 1 / L else
                f"Under uniform attention every α_k would be 1/L = {1 / L:.3f} here, above ε = {eps:g}: with "
                "this few tokens even a head with no preference counts as a sink head.")
    u = uniform_sink_scores(L, True).numpy()
    above = int((u > eps).sum())  # a prefix: u falls with k
    head = (f"Under uniform causal attention α_k would be the mean of 1/(i + 1) over the queries i ≥ k that "
            f"see key k: from {u[-1]:.3f} (the last token) to {u[0]:.3f} (the first)")
    if above == 0:
        return head + f", all at most ε = {eps:g}, so any cell above 0 is a head that singles a token out."
    return head + (f"; for the first {above} token{'s' if above != 1 else ''} that is above ε = {eps:g}, so "
                   "their columns count heads with no preference too.")
