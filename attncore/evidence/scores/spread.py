"""Claims about the spread of q·k: its variance and std at d = 1, 64 and 512, the scaled std at every d,
the √d growth.

Each live test runs the Saturation & gradients page's computation at that page's defaults (20,000
samples of q·k for the histogram, 500 per d in the std-vs-d sweep), so the numbers here are the
numbers that page shows for the same seed and device.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from attncore.dot_products import D_GRID, dot_product_samples, dot_std_sweep, std_with_error
from attncore.evidence.records import (
    FAILS,
    HOLDS,
    K_SE,
    Claim,
    Judgement,
    Measurement,
    Setting,
    fmt,
    fmt_pm,
    z_score,
)

__all__ = [
    "CLAIMS",
    "DOT_VARIANCE",
    "SAMPLES",
    "SQRT_GROWTH",
    "STD_64",
    "STD_512",
    "UNIT_ANY_D",
    "XY_VARIANCE",
    "std_sweep_at_defaults",
]

# The Saturation & gradients page's defaults.
SAMPLES = 20_000  # q·k samples of the histogram (sat_n)
SWEEP_SAMPLES = 500  # per d in the std-vs-d sweep (sat_ns)
K_SLOPE = 3.5  # the same for a slope whose error comes from 13 - 2 residuals (Student t, 11 df)
K_FAMILY = 3.5  # the same over a family of 13 values (false-alarm rate under 1% in all)


# --------------------------------------------------------------------------- the spread of q·k


def _variance(d: int, setting: Setting) -> Measurement:
    x = dot_product_samples(d, SAMPLES, seed=setting.seed, device=setting.device)  # (M,)
    s, se = std_with_error(x)
    return Measurement(
        {"d": d, "var": s * s, "std": s, "samples": SAMPLES},
        {"var": 2.0 * s * se, "std": se},
        scale=f"{SAMPLES:,} samples of q·k, q, k ~ N(0, I_{d}), float32, {setting.device}",
    )


def _agree(m: Measurement, name: str, target: float, what: str) -> Judgement:
    z = z_score(m.num(name), target, m.err(name))
    if abs(z) <= K_SE:
        return Judgement(
            HOLDS,
            f"z = {z:+.1f} against {fmt(target)}; for unit-variance entries, as the text assumes (in general "
            "Var(q·k) = d·σq²·σk²).",
        )
    return Judgement(
        FAILS,
        f"{what} {fmt_pm(m.num(name), m.err(name))} is {abs(z):.1f} standard errors from {fmt(target)}.",
    )


def _std_tol() -> str:
    return f"within {K_SE:g} standard errors (from the sample's own fourth moment)"


XY_VARIANCE = Claim(
    key="xy_variance",
    source="sqrtd",
    quote="If X, Y ~ N(0,1) independently, then Var(XY) = 1.",
    test="Sample variance of 20,000 seeded products x·y (q·k at d = 1).",
    tolerance=_std_tol(),
    measure=lambda s: _variance(1, s),
    describe=lambda m: (
        f"Var(XY) = {fmt_pm(m.num('var'), m.err('var'))} from {int(m.num('samples')):,} products."
    ),
    judge=lambda m: _agree(m, "var", 1.0, "Var(XY) ="),
)

DOT_VARIANCE = Claim(
    key="dot_variance",
    source="sqrtd",
    also=("notes", "d2l", "sdpa"),
    quote="Since q·k is a sum of d_k such terms … The dot product's variance grows linearly with dimension! "
    "(Summary table: Var(q·k) = d_k.)",
    test="Sample variance of 20,000 seeded dot products at d = 64 (the Saturation page's histogram).",
    tolerance=_std_tol(),
    measure=lambda s: _variance(64, s),
    describe=lambda m: (
        f"Var(q·k) = {fmt_pm(m.num('var'), m.err('var'))} at d = {int(m.num('d'))} "
        f"({int(m.num('samples')):,} samples)."
    ),
    judge=lambda m: _agree(m, "var", m.num("d"), "Var(q·k) ="),
)

STD_64 = Claim(
    key="std_64",
    source="sqrtd",
    quote="For d_k = 64, the standard deviation of scores is √64 = 8.",
    test="Sample std of 20,000 seeded q·k at d = 64.",
    tolerance=_std_tol(),
    measure=lambda s: _variance(64, s),
    describe=lambda m: f"std(q·k) = {fmt_pm(m.num('std'), m.err('std'))} at d = 64.",
    judge=lambda m: _agree(m, "std", 8.0, "std ="),
)

STD_512 = Claim(
    key="std_512",
    source="sqrtd",
    quote="Exercise: For d_k = 512, what's the standard deviation of unscaled scores?",
    test="Sample std of 20,000 seeded q·k at d = 512, against the answer the text's Var(q·k) = d_k gives: "
    "√512 = 22.6.",
    tolerance=_std_tol(),
    measure=lambda s: _variance(512, s),
    describe=lambda m: (
        f"std(q·k) = {fmt_pm(m.num('std'), m.err('std'))} at d = 512; √512 = {math.sqrt(512):.2f}."
    ),
    judge=lambda m: _agree(m, "std", math.sqrt(512), "std ="),
)


@functools.lru_cache(maxsize=4)
def std_sweep_at_defaults(device: str, seed: int) -> Measurement:
    """The Saturation page's std-vs-d sweep: 500 samples at each d of ``D_GRID``, raw and scaled."""
    sw = dot_std_sweep(D_GRID, SWEEP_SAMPLES, seed=seed, device=device)
    z = (sw.std_scaled - 1.0) / sw.se_scaled  # (D,)
    worst = int(np.argmax(np.abs(z)))
    # log std = a + b log d by least squares; the slope's error from the residuals (13 - 2 df)
    x, y = np.log(sw.d.astype(np.float64)), np.log(sw.std_raw)
    xc = x - x.mean()
    sxx = float(np.sum(xc * xc))
    slope = float(np.sum(xc * (y - y.mean())) / sxx)
    resid = y - y.mean() - slope * xc
    slope_se = math.sqrt(float(np.sum(resid * resid)) / (x.size - 2) / sxx)
    return Measurement(
        {
            "max_abs_z": float(abs(z[worst])),
            "worst_d": int(sw.d[worst]),
            "worst_std": float(sw.std_scaled[worst]),
            "min_std": float(sw.std_scaled.min()),
            "max_std": float(sw.std_scaled.max()),
            "slope": slope,
            "points": int(sw.d.size),
            "d_max": int(sw.d[-1]),
        },
        {"worst_std": float(sw.se_scaled[worst]), "slope": slope_se},
        scale=f"{SWEEP_SAMPLES} samples at each of {sw.d.size} d from 1 to {sw.d[-1]}, float32, {device}",
    )


def _unit_judge(m: Measurement) -> Judgement:
    if m.num("max_abs_z") <= K_FAMILY:
        return Judgement(
            HOLDS,
            f"every d from 1 to {int(m.num('d_max'))} within {K_FAMILY:g} standard errors of 1 (worst: d = "
            f"{int(m.num('worst_d'))}, z = {m.num('max_abs_z'):.1f}); for unit-variance entries.",
        )
    return Judgement(
        FAILS,
        f"at d = {int(m.num('worst_d'))} the scaled std is {fmt_pm(m.num('worst_std'), m.err('worst_std'))}, "
        f"{m.num('max_abs_z'):.1f} standard errors from 1.",
    )


UNIT_ANY_D = Claim(
    key="unit_any_d",
    source="sqrtd",
    also=("d2l", "sdpa"),
    quote="The scaled scores have unit variance, regardless of dimension!",
    test="std of q·k/√d at d = 1, 2, 4, …, 4096, 500 seeded samples each (the page's std-vs-d sweep).",
    tolerance=f"all {len(D_GRID)} within {K_FAMILY:g} standard errors of 1 (a family-wide false alarm rate "
    "under 1%)",
    measure=lambda s: std_sweep_at_defaults(s.device, s.seed),
    describe=lambda m: (
        f"std(q·k/√d) from {fmt(m.num('min_std'))} to {fmt(m.num('max_std'))} over {int(m.num('points'))} d; "
        f"largest |z| {m.num('max_abs_z'):.1f} at d = {int(m.num('worst_d'))}."
    ),
    judge=_unit_judge,
)


def _slope_judge(m: Measurement) -> Judgement:
    z = z_score(m.num("slope"), 0.5, m.err("slope"))
    if abs(z) <= K_SLOPE:
        return Judgement(
            HOLDS,
            f"log-log slope {fmt_pm(m.num('slope'), m.err('slope'))}, z = {z:+.1f} from ½; for independent "
            "zero-mean entries (their size sets the constant).",
        )
    return Judgement(
        FAILS,
        f"log-log slope {fmt_pm(m.num('slope'), m.err('slope'))} is {abs(z):.1f} standard errors from ½.",
    )


SQRT_GROWTH = Claim(
    key="sqrt_growth",
    source="sdpa",
    quote="When d_k is large (e.g. 128), the dot products between random vectors grow proportionally to "
    "sqrt(d_k).",
    test="Least-squares slope of log std(q·k) against log d over d = 1 … 4096 (500 samples each), its error "
    "from the residuals.",
    tolerance=f"slope within {K_SLOPE:g} standard errors of ½ (the error has only 11 degrees of freedom)",
    measure=lambda s: std_sweep_at_defaults(s.device, s.seed),
    describe=lambda m: (
        f"std(q·k) ∝ d^{m.num('slope'):.4f} ± {m.err('slope'):.2g} over d = 1 … {int(m.num('d_max'))}."
    ),
    judge=_slope_judge,
)



CLAIMS: tuple[Claim, ...] = (XY_VARIANCE, DOT_VARIANCE, STD_64, UNIT_ANY_D, STD_512, SQRT_GROWTH)
