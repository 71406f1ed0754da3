"""Claims of the study notes about long rows, null attention and sinks (the live and exact ones).

The live tests run the Entropy vs length page's default sweep (d = 64, 1/√d, τ = 1, 32 query rows,
n = 2⁴ … 2²⁰) and the Attention sinks page's synthetic head (32 tokens, sink logit 6, zero sink
value); the trained-model claims about sinks are in :mod:`attncore.evidence.shipped`.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from attncore.evidence.records import (
    CAVEAT,
    EXACT,
    FAILS,
    HOLDS,
    K_SE,
    ROW_SUM_TOL,
    Claim,
    Judgement,
    Measurement,
    Setting,
    fmt,
)
from attncore.normalizers import Softmax
from attncore.row_theory import sweep_theory
from attncore.sinks import SinkSpec, normaliser_zoo
from attncore.sweeps import entropy_vs_length

__all__ = ["CLAIMS", "LENGTHS"]

LENGTHS = tuple(2**k for k in range(4, 21))  # the Entropy page's default n (ent_lo = 4, ent_hi = 20)
QUERIES, HEAD_DIM = 32, 64  # ent_q, ent_d
MARGIN_LENGTHS = (2**4, 2**8, 2**12, 2**16, 2**20)
LOG_SLOPE = (0.9, 1.1)  # "grows like log n": slope of the margin against ln n in this band
NULL_TOTAL = 0.01  # "very small, approaching zero": a row spends at most this
LOW_CONTENT = -10.0  # the sinks page's lowest content logit: every real key irrelevant
SINK_SHRINK = 0.5  # the sink must at least halve the output's size
STABLE_SHARE = 0.25  # a length rule "stabilises" H when its range over n is at most this share of softmax's


def _entropy(setting: Setting) -> Measurement:
    df = entropy_vs_length(LENGTHS, d=HEAD_DIM, queries=QUERIES, seed=setting.seed, device=setting.device)
    h, hs = df["entropy"].to_numpy(), df["entropy_sem"].to_numpy()
    p, ps = df["max_weight"].to_numpy(), df["max_weight_sem"].to_numpy()
    hn, hns = df["normalized_entropy"].to_numpy(), df["normalized_entropy_sem"].to_numpy()
    return Measurement(
        {
            "n_lo": int(df["n"].iloc[0]),
            "n_hi": int(df["n"].iloc[-1]),
            "h_lo": float(h[0]),
            "h_hi": float(h[-1]),
            "p_lo": float(p[0]),
            "p_hi": float(p[-1]),
            "hn_lo": float(hn[0]),
            "hn_hi": float(hn[-1]),
            "h_rises": int(np.sum(np.diff(h) > 0)),
            "p_falls": int(np.sum(np.diff(p) < 0)),
            "steps": len(h) - 1,
        },
        {
            "h_lo": float(hs[0]),
            "h_hi": float(hs[-1]),
            "p_lo": float(ps[0]),
            "p_hi": float(ps[-1]),
            "hn_lo": float(hns[0]),
            "hn_hi": float(hns[-1]),
        },
        scale=f"{QUERIES} query rows, d = {HEAD_DIM}, 1/√d, τ = 1, n = 2⁴ … 2²⁰, streamed by attncore.sweeps "
        f"on {setting.device}",
    )


def _entropy_judge(m: Measurement) -> Judgement:
    steps = int(m.num("steps"))
    rises, falls = int(m.num("h_rises")), int(m.num("p_falls"))
    gap = m.num("hn_hi") - m.num("hn_lo")
    if rises == steps and falls == steps and gap > K_SE * math.hypot(m.err("hn_lo"), m.err("hn_hi")):
        return Judgement(
            HOLDS,
            f"H ≈ ln n − σ²/2 grows with the number of keys; per ln n it also rises, {m.num('hn_lo'):.2f} → "
            f"{m.num('hn_hi'):.2f}, so the row is flatter, not just longer.",
        )
    if rises == steps and falls == steps:
        return Judgement(
            CAVEAT,
            f"entropy rises and the top weight falls, but H / ln n moves only {gap:+.3f}: longer, not "
            "flatter.",
        )
    return Judgement(
        FAILS, f"entropy rose at {rises} of {steps} doublings of n and the top weight fell at {falls}."
    )


ENTROPY_GROWS = Claim(
    key="entropy_grows",
    source="notes",
    quote="As the sequence length increases, a standard softmax distribution tends to become flatter (higher "
    "entropy, smaller maximum value) for the same range of input logits.",
    test="The Entropy vs length page's default sweep: mean entropy, H / ln n and top weight of 32 rows at n "
    "= 2⁴ … 2²⁰ keys.",
    tolerance=f"entropy up and top weight down at every doubling of n, and H / ln n up by more than {K_SE:g} "
    "standard errors",
    measure=_entropy,
    describe=lambda m: (
        f"H {m.num('h_lo'):.2f} → {m.num('h_hi'):.2f} nats, top weight {fmt(m.num('p_lo'))} → "
        f"{fmt(m.num('p_hi'))}, H / ln n {m.num('hn_lo'):.3f} → {m.num('hn_hi'):.3f} from n = "
        f"{int(m.num('n_lo'))} to {int(m.num('n_hi')):,}."
    ),
    judge=_entropy_judge,
)


def _half_margin(n: int) -> float:
    """The logit a key needs over n − 1 keys at 0 for weight ½: the root of logit(p(a)), found by the
    secant method on attncore's softmax (float64); a few steps, as logit(p) is close to linear in a."""
    softmax = Softmax()
    row = torch.zeros(1, n, dtype=torch.float64)  # (1, n)

    def g(a: float) -> float:
        row[0, 0] = a
        p = float(softmax(row)[0, 0])
        return math.log(p) - math.log1p(-p)

    a0, a1 = 0.0, 1.0
    g0, g1 = g(a0), g(a1)
    for _ in range(12):
        if g1 == g0 or abs(g1) < 1e-12:
            break
        a0, a1 = a1, a1 - g1 * (a1 - a0) / (g1 - g0)
        g0, g1 = g1, g(a1)
    return a1


def _margins(setting: Setting) -> Measurement:
    ns = np.asarray(MARGIN_LENGTHS, dtype=np.float64)
    a = np.array([_half_margin(int(n)) for n in MARGIN_LENGTHS])
    slope = float(np.polyfit(np.log(ns), a, 1)[0])
    vals: dict[str, float | int | str | bool] = {
        f"margin_{int(n)}": float(v) for n, v in zip(ns, a, strict=True)
    }
    vals.update(
        slope=slope,
        rises=bool(np.all(np.diff(a) > 0)),
        n_lo=int(ns[0]),
        n_hi=int(ns[-1]),
        a_lo=float(a[0]),
        a_hi=float(a[-1]),
        closed_hi=math.log(ns[-1] - 1.0),
    )
    return Measurement(
        vals, basis=EXACT, scale="secant root search on attncore's softmax in float64, one row of n keys"
    )


def _margin_judge(m: Measurement) -> Judgement:
    slope = m.num("slope")
    if not bool(m["rises"]):
        return Judgement(FAILS, "the margin for weight ½ does not grow with n.")
    if LOG_SLOPE[0] <= slope <= LOG_SLOPE[1]:
        return Judgement(
            CAVEAT,
            f"the logit must grow, but only like ln(n − 1) (slope {slope:.3f} per unit of ln n: "
            f"+{math.log(2):.2f} per doubling of n), hardly “disproportionately”.",
        )
    if slope > LOG_SLOPE[1]:
        return Judgement(HOLDS, f"the margin grows faster than ln n (slope {slope:.2f}).")
    return Judgement(CAVEAT, f"the margin grows more slowly than ln n (slope {slope:.2f}).")


SHARP_NEEDS_LOG_N = Claim(
    key="sharp_needs_log_n",
    source="notes",
    quote="To maintain “sharp” attention (concentrated on a few tokens) in longer sequences, the model needs "
    "to produce disproportionately large logit values for the target tokens to overcome the larger "
    "denominator sum.",
    test="The logit one key needs over n − 1 keys at 0 to keep weight ½ (a root search on attncore's "
    "softmax), n = 2⁴ … 2²⁰, and its slope against ln n.",
    tolerance=f"“like log n”: slope against ln n between {LOG_SLOPE[0]:g} and {LOG_SLOPE[1]:g}",
    measure=_margins,
    describe=lambda m: (
        f"margin {m.num('a_lo'):.3f} at n = {int(m.num('n_lo'))}, {m.num('a_hi'):.3f} at n = "
        f"{int(m.num('n_hi')):,} (ln(n − 1) = {m.num('closed_hi'):.3f}); slope {m.num('slope'):.4f} per unit "
        "of ln n."
    ),
    judge=_margin_judge,
)


def _zoo_rows(setting: Setting) -> Measurement:
    low = normaliser_zoo(SinkSpec(sink=False, content=LOW_CONTENT, seed=setting.seed), setting.device)
    mid = normaliser_zoo(SinkSpec(sink=False, content=0.0, seed=setting.seed), setting.device)
    n = SinkSpec().n
    return Measurement(
        {
            "softmax_dev": float((low["softmax"].row_sum - 1.0).abs().max()),
            "softmax1_low": float(low["softmax1"].row_sum.mean()),
            "softmax1_mid": float(mid["softmax1"].row_sum.mean()),
            "content": LOW_CONTENT,
            "n": n,
        },
        scale=f"the Attention sinks page's synthetic head without a sink, {n} tokens, logits c + N(0, 1), "
        f"float32, {setting.device}",
    )


def _sum_judge(m: Measurement) -> Judgement:
    if m.num("softmax_dev") <= ROW_SUM_TOL:
        return Judgement(
            HOLDS,
            f"even with every logit near {m.num('content'):g} each row sums to 1 (largest deviation "
            f"{fmt(m.num('softmax_dev'), 2)}); only a fully masked row can spend 0.",
        )
    return Judgement(FAILS, f"a row's sum differs from 1 by {fmt(m.num('softmax_dev'), 2)}.")


NO_NULL = Claim(
    key="no_null_attention",
    source="notes",
    quote="Softmax forces the weights to sum to 1. … Even if all correlations are low or negative, softmax "
    "will still produce a distribution summing to 1.",
    test="Row sums of softmax on the Attention sinks page's head with every real logit around "
    f"{LOW_CONTENT:g} (content c = −10, no sink).",
    tolerance=f"every row sum within {ROW_SUM_TOL:g} of 1 (float32)",
    measure=_zoo_rows,
    describe=lambda m: (
        f"softmax rows sum to 1 within {fmt(m.num('softmax_dev'), 2)} at content c = {m.num('content'):g}."
    ),
    judge=_sum_judge,
)


def _bias_judge(m: Measurement) -> Judgement:
    if m.num("softmax1_low") <= NULL_TOTAL:
        # the text states its condition (every logit small relative to b); c = 0 is outside it, so the
        # row sum there is context, not a caveat against the claim
        return Judgement(
            HOLDS,
            f"with the text's fixed bias b = 1 (“+1”) a row spends {fmt(m.num('softmax1_low'))} at c = "
            f"{m.num('content'):g}; at c = 0, where each e^(xᵢ) is about b, it still spends "
            f"{m.num('softmax1_mid'):.2f}, as the condition “all small relative to b” implies.",
        )
    return Judgement(
        FAILS,
        f"softmax-plus-one (b = 1) still spends {fmt(m.num('softmax1_low'))} of the weight at c = "
        f"{m.num('content'):g}.",
    )


DENOMINATOR_BIAS = Claim(
    key="denominator_bias",
    source="notes",
    quote="Denominator Bias: Introduce an additive bias term (could be fixed, e.g., +1 as in "
    "“Softmax-plus-one” …) into the softmax denominator … If all [e^(xᵢ)] are small relative to [b], the "
    "weights can become very small, approaching zero, allowing for true “null attention”",
    test="Mean row sum of softmax-plus-one, e^(xᵢ) / (1 + Σⱼ e^(xⱼ)): the text's fixed bias b = 1 "
    "(attncore's softmax1; the bracketed symbols are lost from the text), on the same head at content c = "
    "−10 and c = 0.",
    tolerance=f"“approaching zero”: a row spends at most {NULL_TOTAL:g}",
    measure=_zoo_rows,
    describe=lambda m: (
        f"softmax-plus-one (b = 1) spends {fmt(m.num('softmax1_low'))} per row at c = {m.num('content'):g}, "
        f"{m.num('softmax1_mid'):.3f} at c = 0."
    ),
    judge=_bias_judge,
)


def _sink_head(setting: Setting) -> Measurement:
    spec = SinkSpec(seed=setting.seed)
    with_sink = normaliser_zoo(spec, setting.device)["softmax"]
    without = normaliser_zoo(SinkSpec(sink=False, seed=setting.seed), setting.device)["softmax"]
    return Measurement(
        {
            "sink_weight": float(with_sink.sink_weight.mean()),
            "rms_sink": float(with_sink.output_rms.mean()),
            "rms_plain": float(without.output_rms.mean()),
            "row_dev": float((with_sink.row_sum - 1.0).abs().max()),
            "strength": spec.strength,
            "n": spec.n,
        },
        scale=f"the Attention sinks page's default head: {spec.n} tokens, sink logit {spec.strength:g}, zero "
        f"sink value, float32, {setting.device}",
    )


def _sink_judge(m: Measurement) -> Judgement:
    ratio = m.num("rms_sink") / m.num("rms_plain")
    if ratio <= SINK_SHRINK and m.num("row_dev") <= ROW_SUM_TOL:
        return Judgement(
            HOLDS,
            f"the output shrinks to {ratio:.2f}× its size without the sink while every row still sums to 1: "
            "a sink is how softmax attends to (almost) nothing.",
        )
    if m.num("row_dev") > ROW_SUM_TOL:
        return Judgement(FAILS, "the rows do not sum to 1.")
    return Judgement(FAILS, f"the sink leaves the output at {ratio:.2f}× its size.")


SINK_DUMMY = Claim(
    key="sink_dummy",
    source="notes",
    quote="By attending heavily to a “dummy” token (whose value projection might also be learned towards "
    "zero), a token can effectively reduce the influence of other informative tokens while still satisfying "
    "the sum-to-1 constraint.",
    test="The Attention sinks page's synthetic head with and without a zero-value sink at logit 6: weight on "
    "the sink and the output's RMS.",
    tolerance=f"rows sum to 1 within {ROW_SUM_TOL:g} and the output at most {SINK_SHRINK:g}× its size "
    "without the sink",
    measure=_sink_head,
    describe=lambda m: (
        f"sink weight {m.num('sink_weight'):.3f}; output RMS {m.num('rms_sink'):.3f} with the sink, "
        f"{m.num('rms_plain'):.3f} without."
    ),
    judge=_sink_judge,
)


def _length_rules(setting: Setting) -> Measurement:
    plain = sweep_theory(MARGIN_LENGTHS, d=HEAD_DIM, scale_rule="sqrt_d")
    ssmax = sweep_theory(MARGIN_LENGTHS, d=HEAD_DIM, scale_rule="ssmax")
    h0, h1 = plain["entropy"].to_numpy(), ssmax["entropy"].to_numpy()
    p1 = ssmax["max_weight"].to_numpy()
    return Measurement(
        {
            "plain_lo": float(h0.min()),
            "plain_hi": float(h0.max()),
            "ssmax_lo": float(h1.min()),
            "ssmax_hi": float(h1.max()),
            "ssmax_first": float(h1[0]),
            "ssmax_last": float(h1[-1]),
            "ssmax_peak_n": float(MARGIN_LENGTHS[int(np.argmax(h1))]),
            "ssmax_p_lo": float(p1.min()),
            "ssmax_p_hi": float(p1.max()),
            "n_lo": MARGIN_LENGTHS[0],
            "n_hi": MARGIN_LENGTHS[-1],
        },
        basis=EXACT,
        scale=f"exact expectations (quadrature), d = {HEAD_DIM}, q, k ~ N(0, I), SSMax s = 0.43",
    )


def _length_judge(m: Measurement) -> Judgement:
    plain = m.num("plain_hi") - m.num("plain_lo")
    ssmax = m.num("ssmax_hi") - m.num("ssmax_lo")
    if ssmax > STABLE_SHARE * plain:
        return Judgement(FAILS, f"with SSMax the entropy still spans {ssmax:.2f} nats ({plain:.2f} without).")
    return Judgement(
        CAVEAT,
        f"SSMax (s = 0.43) keeps H within {m.num('ssmax_lo'):.2f}–{m.num('ssmax_hi'):.2f} nats (softmax: "
        f"{m.num('plain_lo'):.1f}–{m.num('plain_hi'):.1f}) but not constant: {_shape(m)}, and "
        f"the top weight moves {m.num('ssmax_p_lo'):.2f}–{m.num('ssmax_p_hi'):.2f}.",
    )


def _shape(m: Measurement) -> str:
    """How SSMax's entropy moves over n, from where its largest value lies."""
    peak, lo, hi = m.num("ssmax_peak_n"), m.num("n_lo"), m.num("n_hi")
    if peak <= lo:
        return f"it falls from {m.num('ssmax_first'):.2f} to {m.num('ssmax_last'):.2f} nats"
    if peak >= hi:
        return f"it rises from {m.num('ssmax_first'):.2f} to {m.num('ssmax_last'):.2f} nats"
    return (
        f"it rises from {m.num('ssmax_first'):.2f} nats to {m.num('ssmax_hi'):.2f} at n = {peak:,.0f} "
        f"and falls to {m.num('ssmax_last'):.2f} at n = {hi:,.0f}"
    )


LENGTH_SCALING = Claim(
    key="length_scaling",
    source="notes",
    quote="Sequence-Length Dependent Scaling … make the scaling dependent on the current sequence length n. "
    "This could potentially stabilize the entropy/sharpness of the attention distribution across different "
    "lengths.",
    test="Expected entropy of a row of Gaussian logits (d = 64) at n = 2⁴ … 2²⁰ with SSMax's s·log n factor "
    "against plain 1/√d (exact, by quadrature).",
    tolerance=f"“stabilise”: SSMax's entropy range over n at most {STABLE_SHARE:g} × softmax's",
    measure=_length_rules,
    describe=lambda m: (
        f"H over n = {int(m.num('n_lo'))} … {int(m.num('n_hi')):,}: "
        f"{m.num('ssmax_lo'):.2f}–{m.num('ssmax_hi'):.2f} nats with SSMax, "
        f"{m.num('plain_lo'):.2f}–{m.num('plain_hi'):.2f} with 1/√d."
    ),
    judge=_length_judge,
)


CLAIMS: tuple[Claim, ...] = (
    ENTROPY_GROWS,
    SHARP_NEEDS_LOG_N,
    NO_NULL,
    SINK_DUMMY,
    DENOMINATOR_BIAS,
    LENGTH_SCALING,
)
