"""The 1/√d argument held against a trained decoder (SmolLM2-135M): the real spread of q·k/√d against the
seed's unit-variance law, and what taking the scale away does to the softmax at inference.

Both rows read :data:`WINDOWS` windows of :data:`WINDOW_L` tokens of the shipped text, spread from its start
to its end (:func:`attncore.decoder.text.text_windows`), and judge t intervals over the windows (t(0.975, 3) x
standard error): the windows are the repeats, the heads what each window summarises. The model is loaded by
:data:`attncore.evidence.decoder.LOADER` (a row says "not testable here" without it).
"""

from __future__ import annotations

import statistics
from functools import lru_cache

from attncore.decoder.probe import MAX_DECODER_TOKENS
from attncore.decoder.scaling import LEVELS, logit_spread, scaled_run
from attncore.decoder.text import SHIPPED_TEXT_NAME, shipped_text, text_windows
from attncore.evidence import decoder as _decoder
from attncore.evidence.records import CAVEAT, FAILS, HOLDS, Claim, Judgement, Measurement, Setting, fmt
from attncore.training.sink_stats import t_interval

__all__ = ["CLAIMS", "LAW_BAND", "LAW_SHARE", "ONE_HOT_SHARE", "UNSCALED", "WINDOWS", "WINDOW_L",
           "measure_real_scale"]

WINDOWS = 4
WINDOW_L = 128
LAW_BAND = (0.5, 2.0)  # a head "follows the law" when its scaled logits' std lies in this band around 1
LAW_SHARE = 0.8  # the law holds on the model when at least this share of heads follows it
UNSCALED = 8.0  # c = sqrt(64): every logit times 8 is SmolLM2's attention without its 1/sqrt(d)
ONE_HOT_SHARE = 0.5  # "near-one-hot vectors": more than half the rows put more than LEVELS[0] on one key
_INFERENCE = ("at inference on a model trained with 1/√d: it shows what the trained weights do with unscaled "
              "logits, not whether training without the scale would stall (the Training lab's scaling runs).")


def _interval(xs: list[float]) -> tuple[float, float, float]:
    t = t_interval([float(x) for x in xs])
    return float(t["mean"]), float(t["lo"]), float(t["hi"])


@lru_cache(maxsize=2)
def _measure(loader_id: int) -> Measurement:
    model, tok = _decoder.LOADER[0]()
    ids = tok(shipped_text(), return_tensors="pt")["input_ids"][:, :MAX_DECODER_TOKENS]
    med, share, lo_std, hi_std, sat1, sat8, dsat, ppl1, ppl8 = ([] for _ in range(9))
    heads = 0
    for w in text_windows(ids, WINDOW_L, WINDOWS):
        std = logit_spread(model, w)["std"].flatten()
        heads = int(std.numel())
        med.append(float(std.median()))
        share.append(float(((std >= LAW_BAND[0]) & (std <= LAW_BAND[1])).double().mean()))
        lo_std.append(float(std.min()))
        hi_std.append(float(std.max()))
        r1, r8 = scaled_run(model, w, 1.0), scaled_run(model, w, UNSCALED)
        sat1.append(r1.saturated90)
        sat8.append(r8.saturated90)
        dsat.append(r8.saturated90 - r1.saturated90)
        ppl1.append(r1.perplexity)
        ppl8.append(r8.perplexity)
    vals: dict[str, float | int] = {"L": WINDOW_L, "windows": WINDOWS, "heads": heads,
                                    "min_std": min(lo_std), "max_std": max(hi_std),
                                    "sat1": statistics.fmean(sat1), "sat8": statistics.fmean(sat8),
                                    "ppl1": statistics.fmean(ppl1), "ppl8": statistics.fmean(ppl8)}
    for name, xs in (("med_std", med), ("law_share", share), ("dsat", dsat)):
        vals[name], vals[f"{name}_lo"], vals[f"{name}_hi"] = _interval(xs)
    return Measurement(vals, basis="live", scale=f"{_decoder.MODEL_LABEL}; {SHIPPED_TEXT_NAME}; {WINDOWS} "
                       f"windows of {WINDOW_L} tokens")


def measure_real_scale(setting: Setting) -> Measurement:
    """SmolLM2's scaled-logit spread and its saturated rows at c = 1 and 8 over :data:`WINDOWS` windows."""
    try:
        return _measure(id(_decoder.LOADER[0]))
    except (OSError, RuntimeError, ValueError) as exc:
        first = (str(exc).splitlines() or [type(exc).__name__])[0][:200]
        return Measurement(missing=f"SmolLM2 could not be loaded or run here: {first}")


def _ci(m: Measurement, name: str, pct: bool = False) -> str:
    if pct:
        return (f"{100 * m.num(name):.1f}% (95% t interval {100 * m.num(name + '_lo'):.1f}–"
                f"{100 * m.num(name + '_hi'):.1f}%)")
    return f"{fmt(m.num(name))} (95% t interval {fmt(m.num(name + '_lo'))}–{fmt(m.num(name + '_hi'))})"


def _spread_text(m: Measurement) -> str:
    return (f"over {int(m.num('windows'))} windows of {int(m.num('L'))} tokens, the median head's std of "
            f"q·k/√d is {_ci(m, 'med_std')}; heads range {fmt(m.num('min_std'))}–{fmt(m.num('max_std'))}; "
            f"the share of the {int(m.num('heads'))} heads with std in [{LAW_BAND[0]:g}, {LAW_BAND[1]:g}] is "
            f"{_ci(m, 'law_share', pct=True)}.")


def _spread_judge(m: Measurement) -> Judgement:
    why = ("the law assumes independent unit-variance q and k entries, which a trained model's projections "
           "do not keep; for such inputs it is exact (the row on Var(q·k) = d at d = 64).")
    if m.num("law_share_lo") >= LAW_SHARE:
        return Judgement(HOLDS, f"at least {LAW_SHARE:.0%} of the heads keep unit-order spread on real text; "
                         + why)
    if m.num("med_std_lo") > LAW_BAND[1] or m.num("med_std_hi") < LAW_BAND[0]:
        return Judgement(FAILS, f"the typical trained head's scaled logits have std {fmt(m.num('med_std'))}, "
                         f"outside [{LAW_BAND[0]:g}, {LAW_BAND[1]:g}]: " + why)
    return Judgement(CAVEAT, f"the typical head's std ({fmt(m.num('med_std'))}) is of unit order, but only "
                     f"{100 * m.num('law_share'):.0f}% of heads lie in [{LAW_BAND[0]:g}, {LAW_BAND[1]:g}] "
                     f"(widest {fmt(m.num('max_std'))}); " + why)


def _saturation_text(m: Measurement) -> str:
    return (f"rows with max weight above {LEVELS[0]:g}: {100 * m.num('sat1'):.1f}% with the trained 1/√d, "
            f"{100 * m.num('sat8'):.1f}% with every logit times {UNSCALED:g} (difference "
            f"{_ci(m, 'dsat', pct=True)}, paired over {int(m.num('windows'))} windows of {int(m.num('L'))} "
            f"tokens); perplexity {fmt(m.num('ppl1'))} → {fmt(m.num('ppl8'))}.")


def _saturation_judge(m: Measurement) -> Judgement:
    if m.num("dsat_lo") > 0 and m.num("sat8") > ONE_HOT_SHARE:
        return Judgement(HOLDS, f"{100 * m.num('sat8'):.0f}% of rows near one-hot without the scale; "
                         + _INFERENCE)
    if m.num("dsat_lo") > 0:
        return Judgement(CAVEAT, f"more rows saturate without the scale, but {100 * m.num('sat8'):.0f}% is "
                         f"not most of them (the rule asks more than {ONE_HOT_SHARE:.0%}); " + _INFERENCE)
    return Judgement(FAILS, "the saturated share does not rise beyond its t interval without the scale; "
                     + _INFERENCE)


LLM_DOT_SPREAD = Claim(
    key="llm_dot_spread",
    source="sqrtd",
    quote="Since q·k is a sum of d_k such terms … The dot product's variance grows linearly with dimension! "
    "(Summary table: Var(q·k) = d_k.)",
    test=f"{_decoder.MODEL_LABEL} on {WINDOWS} windows of {WINDOW_L} tokens of the shipped text "
    f"({SHIPPED_TEXT_NAME}): every head's scaled logits q·k/√d (q and k after rotary, causal entries), their "
    "std per head against the law's 1 (unit-variance inputs make q·k/√d ~ N(0, 1)).",
    tolerance=f"holds when the 95% t interval (over windows) of the share of heads with std in "
    f"[{LAW_BAND[0]:g}, {LAW_BAND[1]:g}] lies above {LAW_SHARE:.0%}; does not hold when the median head's "
    "interval lies outside that band",
    measure=measure_real_scale,
    describe=_spread_text,
    judge=_spread_judge,
    slow=True,
)

LLM_UNSCALED_SATURATES = Claim(
    key="llm_unscaled_saturates",
    source="sdpa",
    quote="Without scaling, the softmax inputs are large, pushing softmax into saturation where it outputs "
    "near-one-hot vectors.",
    test=f"{_decoder.MODEL_LABEL} (head dim 64) on {WINDOWS} windows of {WINDOW_L} tokens of the shipped "
    f"text: one forward with its trained 1/√d and one with every head's logits times {UNSCALED:g} = √64 (its "
    f"scaling set to 1, i.e. attention without 1/√d), at inference; the share of rows (queries 1..L-1, every "
    f"head) with max weight above {LEVELS[0]:g}.",
    tolerance=f"holds when the paired difference's 95% t interval (over windows) lies above 0 and more than "
    f"{ONE_HOT_SHARE:.0%} of unscaled rows are near one-hot",
    measure=measure_real_scale,
    describe=_saturation_text,
    judge=_saturation_judge,
    slow=True,
)

CLAIMS: tuple[Claim, ...] = (LLM_DOT_SPREAD, LLM_UNSCALED_SATURATES)
