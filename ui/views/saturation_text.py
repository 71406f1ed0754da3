"""Saturation & gradients page: its words. The sentences that quote this run's numbers (the dot products'
spread, the check of the source's worked examples, how fast the unscaled gradients fall), each built from
the numbers it quotes; the page draws them. Plain functions, no streamlit calls.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from attncore import theory
from attncore.dot_products import DotHistograms
from attncore.gradients import TemperatureRows

__all__ = ["SOURCE", "SOURCE_PEAKED", "SOURCE_SCALED", "depth_reading", "source_check_text",
           "spread_sentence"]

# The "Scaled Attention: Why √d Matters" tutorial's worked examples:
SOURCE = '"Scaled Attention: Why √d Matters" tutorial'
SOURCE_SCALED = (0.31, 0.07, 0.30, 0.05, 0.12)  # what it prints for its default row divided by √64
SOURCE_PEAKED = ((8.5, -2.1, 7.9), (0.99, 0.00, 0.01))  # its "extremely peaked" example, first 3 entries


def spread_sentence(h: DotHistograms, d: int, n: int, vq: float, vk: float) -> str:
    """The dot products' spread at ``d``, unscaled and divided by √d: theory beside the measurement."""
    sd_theory, sd_scaled = theory.dot_product_std(d, vq, vk), math.sqrt(vq * vk)
    return (
        f"**d = {d}:** unscaled scores have std √(d·σq²·σk²) = **{sd_theory:#.3g}** (measured "
        f"{h.std_raw:#.3g} ± {h.se_raw:.2g} from {n:,} samples); divided by √d = {math.sqrt(d):#.3g} "
        f"they have std **{sd_scaled:#.3g}** (measured {h.std_scaled:#.3g} ± {h.se_scaled:.2g}). "
        f"At d = 64 that is {theory.dot_product_std(64, vq, vk):#.3g} against {sd_scaled:#.3g}; "
        f"at d = 512 (the exercise of the {SOURCE}), **{theory.dot_product_std(512, vq, vk):.1f}** "
        f"against {sd_scaled:#.3g} (√512 ≈ 22.6 for unit variances)."
    )


def source_check_text(rows: TemperatureRows) -> str:
    """The live numbers beside what the source prints, and where it is wrong (twice)."""
    unscaled, scaled = rows.weights[0].tolist(), rows.weights[2].tolist()
    fmt = lambda xs: "[" + ", ".join(f"{x:.3f}" for x in xs) + "]"  # noqa: E731
    (x1, _, x3), (p1, _, p3) = SOURCE_PEAKED
    ratio = math.exp(x1 - x3)
    return (
        f"**Checked against the source.** Unscaled, attncore gives {fmt(unscaled)}, as the {SOURCE} "
        f"prints. Divided by √64 = 8 it gives **{fmt(scaled)}** (sum {sum(scaled):.3f}); the source prints "
        f"{fmt(SOURCE_SCALED)}, which sums to {sum(SOURCE_SCALED):.2f} and so cannot be a softmax row. "
        f"Its other example is impossible too: scores [{x1:g}, −2.1, {x3:g}, …] cannot give weights "
        f"[{p1:.2f}, 0.00, {p3:.2f}, …], because softmax fixes the ratio of two weights whatever the rest "
        f"of the row holds: p₁/p₃ = e^({x1:g} − {x3:g}) = **{ratio:.2f}**, not {p1 / p3:.0f}.")


def depth_reading(dec: pd.DataFrame) -> str:
    """What the unscaled curves do as d grows fourfold, in numbers from this sweep."""
    dec = dec[dec["d"] >= 16]  # below 16 the rows are not yet saturated
    if len(dec) < 2:
        return "Raise the largest d to 64 or more to see how fast the unscaled gradients fall."
    d = dec["d"].to_numpy()
    nl = dec["neg_log_median_jac"].to_numpy()
    ok = np.isfinite(nl)
    steps = nl[1:][ok[1:] & ok[:-1]] / nl[:-1][ok[1:] & ok[:-1]]
    ladder = ", ".join(f"{v:.2f}" for v in nl[ok]) + " at d = " + ", ".join(str(int(v)) for v in d[ok])
    text = (f"**Unscaled, in numbers.** −ln(median ‖J‖) is {ladder}: it grows about ×{steps.mean():.1f} "
            "each time d grows fourfold")
    if 1.5 <= steps.mean() <= 2.7:
        c = nl[ok][-1] / math.sqrt(d[ok][-1])
        text += (f", close to ×√4 = 2, so it grows like √d and the typical ‖J‖ decays like "
                 f"e^(−{c:.2f}·√d): faster than any power of d, but not geometrically in d (that would "
                 "be ×4 per step)")
    a, b = dec.iloc[-2], dec.iloc[-1]
    return text + (
        f". The means fall far more slowly: from d = {int(a['d'])} to {int(b['d'])} the mean ‖J‖ goes "
        f"×{b['mean_jac'] / a['mean_jac']:.2f} and the mean ‖∂loss/∂logits‖ ×"
        f"{b['mean_grad_scores'] / a['mean_grad_scores']:.2f}, where d^(−1/2) gives ×0.5 (the dashed "
        "large-d theory in the ‖J‖ panel when the statistic is the mean), and the mean ‖∂loss/∂q‖ and "
        "‖∂loss/∂k‖ stay of order one "
        f"({b['mean_grad_q']:.2f} and {b['mean_grad_k']:.2f} at d = {int(b['d'])}).")
