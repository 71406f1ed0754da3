"""Claims about the tutorial's worked examples: its printed rows of scores and weights, and τ.

The tests compute attncore's softmax of the printed scores in float64 and compare it with the
printed weights to their last digit.
"""

from __future__ import annotations

import torch

from attncore.evidence.records import (
    EXACT,
    FAILS,
    HOLDS,
    MISPRINT,
    Claim,
    Judgement,
    Measurement,
    Setting,
    fmt,
    fmt_row,
    printed_half_unit,
)
from attncore.gradients import temperature_rows

__all__ = [
    "CLAIMS",
    "PEAKED_EXAMPLE",
    "SCALED_EXAMPLE",
    "SCALED_SCORES",
    "SOURCE_SCALED",
    "SOURCE_SCALED_SCORES",
    "SOURCE_SCORES",
    "SOURCE_UNSCALED",
    "TEMPERATURE",
    "UNSCALED_EXAMPLE",
    "printed_gap",
]

SOURCE_SCORES = (9.2, -3.1, 8.8, -5.4, 1.2)
SOURCE_UNSCALED = ("0.599", "0.000", "0.401", "0.000", "0.000")
SOURCE_SCALED_SCORES = ("1.15", "-0.39", "1.10", "-0.68", "0.15")
SOURCE_SCALED = ("0.31", "0.07", "0.30", "0.05", "0.12")
SOURCE_PEAKED = (("8.5", "-2.1", "7.9"), ("0.99", "0.00", "0.01"))


def _nums(texts: tuple[str, ...]) -> list[float]:
    return [float(t) for t in texts]


# --------------------------------------------------------------------------- the worked examples


def _worked(setting: Setting) -> Measurement:
    rows = temperature_rows(SOURCE_SCORES, 64)
    unscaled, scaled = rows.weights[0].tolist(), rows.weights[2].tolist()
    scaled_scores = rows.logits[2].tolist()
    vals: dict[str, float | int | str | bool] = {}
    for i in range(len(SOURCE_SCORES)):
        vals[f"unscaled_{i}"], vals[f"scaled_{i}"], vals[f"score_{i}"] = (
            unscaled[i],
            scaled[i],
            scaled_scores[i],
        )
    vals["entropy_unscaled"], vals["entropy_scaled"] = float(rows.entropy[0]), float(rows.entropy[2])
    return Measurement(vals, basis=EXACT, scale="attncore's softmax in float64")


def _row(m: Measurement, prefix: str) -> list[float]:
    return [m.num(f"{prefix}_{i}") for i in range(len(SOURCE_SCORES))]


def printed_gap(got: list[float], printed: tuple[str, ...]) -> tuple[float, float]:
    """The largest gap between computed and printed values, and half a unit of the last printed digit
    (they agree to that digit when the gap is at most the half unit, with 1e-12 for rounding)."""
    return max(abs(a - b) for a, b in zip(got, _nums(printed), strict=True)), printed_half_unit(*printed)


def _printed_judge(got: list[float], printed: tuple[str, ...], what: str) -> Judgement:
    gap, half = printed_gap(got, printed)
    if gap <= half + 1e-12:
        return Judgement(
            HOLDS,
            f"the {what} agree with the printed ones to their last digit (largest gap {fmt(gap, 2)} ≤ "
            f"{half:g}).",
        )
    return Judgement(
        MISPRINT, f"the printed {what} are off by up to {gap:.3f}; they should read {fmt_row(got)}."
    )


UNSCALED_EXAMPLE = Claim(
    key="unscaled_example",
    source="sqrtd",
    quote="Scores: [9.2, −3.1, 8.8, −5.4, 1.2] → Softmax: [0.599, 0.000, 0.401, 0.000, 0.000]",
    test="attncore's softmax of the printed scores (float64), against the printed weights.",
    tolerance="every weight within half a unit of the last printed digit (0.0005)",
    measure=_worked,
    describe=lambda m: f"softmax = {fmt_row(_row(m, 'unscaled'), 4)}.",
    judge=lambda m: _printed_judge(_row(m, "unscaled"), SOURCE_UNSCALED, "weights"),
)

SCALED_SCORES = Claim(
    key="scaled_scores",
    source="sqrtd",
    quote="With scaling (divide by 8): Scores: [1.15, −0.39, 1.10, −0.68, 0.15]",
    test="The printed scores divided by √64 = 8.",
    tolerance="every score within half a unit of the last printed digit (0.005)",
    measure=_worked,
    describe=lambda m: f"scores / 8 = {fmt_row(_row(m, 'score'), 4)}.",
    judge=lambda m: _printed_judge(_row(m, "score"), SOURCE_SCALED_SCORES, "scores"),
)


def _scaled_judge(m: Measurement) -> Judgement:
    got, printed = _row(m, "scaled"), _nums(SOURCE_SCALED)
    j = _printed_judge(got, SOURCE_SCALED, "weights")
    if j.verdict == MISPRINT:
        return Judgement(
            MISPRINT,
            f"the printed row sums to {sum(printed):.2f}, so it is no softmax; it should read "
            f"{fmt_row(got)}. Its point stands: entropy {m.num('entropy_scaled'):.2f} nats scaled against "
            f"{m.num('entropy_unscaled'):.2f} unscaled.",
        )
    return j


SCALED_EXAMPLE = Claim(
    key="scaled_example",
    source="sqrtd",
    quote="With scaling (divide by 8): … Softmax: [0.31, 0.07, 0.30, 0.05, 0.12]",
    test="attncore's softmax of the scores divided by √64 (float64), against the printed weights.",
    tolerance="every weight within half a unit of the last printed digit (0.005)",
    measure=_worked,
    describe=lambda m: (
        f"softmax = {fmt_row(_row(m, 'scaled'))} (sum {sum(_row(m, 'scaled')):.3f}); the printed row sums to "
        f"{sum(_nums(SOURCE_SCALED)):.2f}."
    ),
    judge=_scaled_judge,
)


def _peaked(setting: Setting) -> Measurement:
    x = torch.tensor(_nums(SOURCE_PEAKED[0]), dtype=torch.float64)
    # Whatever the elided entries hold, softmax fixes p1 / p3 = exp(x1 - x3).
    ratio = float(torch.exp(x[0] - x[2]))
    (p1, _, p3), half = _nums(SOURCE_PEAKED[1]), printed_half_unit(*SOURCE_PEAKED[1])
    return Measurement(
        {
            "ratio": ratio,
            "printed_ratio": p1 / p3,
            "printed_lo": (p1 - half) / (p3 + half),
            "printed_hi": (p1 + half) / (p3 - half),
        },
        basis=EXACT,
        scale="e^(x₁ − x₃), independent of the row's other entries",
    )


def _peaked_judge(m: Measurement) -> Judgement:
    if m.num("printed_lo") <= m.num("ratio") <= m.num("printed_hi"):
        return Judgement(HOLDS, f"p₁/p₃ = {m.num('ratio'):.3g} fits the printed weights.")
    return Judgement(
        MISPRINT,
        f"softmax fixes p₁/p₃ = e^(8.5 − 7.9) = {m.num('ratio'):.2f} whatever the rest of the row; the "
        f"printed 0.99 and 0.01 need {fmt(m.num('printed_lo'))} to {fmt(m.num('printed_hi'))}.",
    )


PEAKED_EXAMPLE = Claim(
    key="peaked_example",
    source="sqrtd",
    quote="scores = [8.5, −2.1, 7.9, ...] → weights ≈ [0.99, 0.00, 0.01, ...]",
    test="The ratio of the first and third weights, which softmax fixes as e^(x₁ − x₃).",
    tolerance="the ratio must lie within the range the printed, rounded weights allow",
    measure=_peaked,
    describe=lambda m: f"p₁/p₃ = {m.num('ratio'):.3f}; printed {m.num('printed_ratio'):.0f}.",
    judge=_peaked_judge,
)



def _temperatures(setting: Setting) -> Measurement:
    rows = temperature_rows(SOURCE_SCORES, 64)  # tau = 1, 0.5·8, 8, 2·8
    return Measurement(
        {
            "h_half": float(rows.entropy[1]),
            "h_one": float(rows.entropy[2]),
            "h_two": float(rows.entropy[3]),
            "max_half": float(rows.max_weight[1]),
            "max_one": float(rows.max_weight[2]),
            "max_two": float(rows.max_weight[3]),
        },
        basis=EXACT,
        scale="the worked example's scores at d = 64, float64",
    )


def _temperature_judge(m: Measurement) -> Judgement:
    h = [m.num("h_half"), m.num("h_one"), m.num("h_two")]
    p = [m.num("max_half"), m.num("max_one"), m.num("max_two")]
    if h[0] < h[1] < h[2] and p[0] > p[1] > p[2]:
        return Judgement(
            HOLDS,
            "entropy rises and the top weight falls at every step of τ (for any row that is not constant).",
        )
    return Judgement(
        FAILS,
        f"entropy {', '.join(f'{v:.3f}' for v in h)} and top weight {', '.join(f'{v:.3f}' for v in p)} are "
        "not monotone in τ.",
    )


TEMPERATURE = Claim(
    key="temperature",
    source="sqrtd",
    also=("notes",),
    quote="τ < √d_k: Sharper attention (more peaked); τ > √d_k: Softer attention (more uniform).",
    test="softmax(scores/τ) of the worked example at τ = 0.5√d, √d and 2√d (d = 64): entropy and top weight.",
    tolerance="entropy strictly increasing and top weight strictly decreasing in τ",
    measure=_temperatures,
    describe=lambda m: (
        f"entropy {m.num('h_half'):.3f} < {m.num('h_one'):.3f} < {m.num('h_two'):.3f} nats; top weight "
        f"{m.num('max_half'):.3f} > {m.num('max_one'):.3f} > {m.num('max_two'):.3f}."
    ),
    judge=_temperature_judge,
)



CLAIMS: tuple[Claim, ...] = (PEAKED_EXAMPLE, UNSCALED_EXAMPLE, SCALED_SCORES, SCALED_EXAMPLE, TEMPERATURE)
