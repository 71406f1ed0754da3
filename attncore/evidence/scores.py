"""Claims about the spread of q·k, softmax saturation and its gradients (most from the "Why √d" tutorial).

Each claim's live test runs the Saturation & gradients page's computation at that page's default
settings (20,000 samples of q·k, 500 per d in the std-vs-d sweep, 16 keys and a batch of 64 in the
gradient sweep, the scores [9.2, −3.1, 8.8, −5.4, 1.2] at d = 64), so the numbers here are the
numbers that page shows for the same seed and device.
"""

from __future__ import annotations

import functools
import math

import numpy as np
import torch

from attncore import theory
from attncore.dot_products import D_GRID, dot_product_samples, dot_std_sweep, std_with_error
from attncore.evidence.records import (
    CAVEAT,
    EXACT,
    FAILS,
    HOLDS,
    K_SE,
    MISPRINT,
    Claim,
    Judgement,
    Measurement,
    Setting,
    fmt,
    fmt_pm,
    fmt_row,
    printed_half_unit,
    z_score,
)
from attncore.gradients import (
    GradientSweep,
    gradient_sweep,
    saturation_crossing,
    saturation_curve,
    softmax_jacobian,
    temperature_rows,
)
from attncore.kernels import tolerance
from attncore.overflow import OVERFLOW_DTYPES, overflow_sweep
from attncore.synthetic import make_generator
from attncore.training import CharTransformer, TrainConfig

__all__ = ["CLAIMS", "SAMPLES", "SOURCE_SCORES", "gradient_sweep_at_defaults", "std_sweep_at_defaults"]

# The Saturation & gradients page's defaults.
SAMPLES = 20_000  # q·k samples of the histogram (sat_n)
SWEEP_SAMPLES = 500  # per d in the std-vs-d sweep (sat_ns)
GRAD_KEYS, GRAD_BATCH, GRAD_D_MAX = 16, 64, 1024  # sat_keys, sat_batch, sat_dmax
LEVEL = 0.99  # sat_level: a row is saturated when its top weight reaches this
X_MAX, X_POINTS, ROW_N = 10.0, 81, 4  # the [x, 0, 0, 0] curve: sat_xmax, its grid, sat_sn
SOURCE_SCORES = (9.2, -3.1, 8.8, -5.4, 1.2)
SOURCE_UNSCALED = ("0.599", "0.000", "0.401", "0.000", "0.000")
SOURCE_SCALED_SCORES = ("1.15", "-0.39", "1.10", "-0.68", "0.15")
SOURCE_SCALED = ("0.31", "0.07", "0.30", "0.05", "0.12")
SOURCE_PEAKED = (("8.5", "-2.1", "7.9"), ("0.99", "0.00", "0.01"))
HEALTHY_ROW = (0.3, 0.3, 0.2, 0.2)
SOURCE_HEALTHY = ("0.21", "0.21", "0.16", "0.16")
K_SLOPE = 3.5  # the same for a slope whose error comes from 13 - 2 residuals (Student t, 11 df)
K_FAMILY = 3.5  # the same over a family of 13 values (false-alarm rate under 1% in all)
TINY = 0.1  # "tiny" / "vanish": at most a tenth of the scaled value
INIT_FACTOR = 2.0  # "scores near N(0, d)": variance within this factor of d


def _nums(texts: tuple[str, ...]) -> list[float]:
    return [float(t) for t in texts]


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


def _printed_gap(got: list[float], printed: tuple[str, ...]) -> tuple[float, float]:
    """The largest gap between computed and printed values, and half a unit of the last printed digit
    (they agree to that digit when the gap is at most the half unit, with 1e-12 for rounding)."""
    return max(abs(a - b) for a, b in zip(got, _nums(printed), strict=True)), printed_half_unit(*printed)


def _printed_judge(got: list[float], printed: tuple[str, ...], what: str) -> Judgement:
    gap, half = _printed_gap(got, printed)
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


# --------------------------------------------------------------------------- saturation and gradients


def _saturation(setting: Setting) -> Measurement:
    x = torch.linspace(0.0, X_MAX, X_POINTS, dtype=torch.float64)
    sc = saturation_curve(x, ROW_N)
    crossing = saturation_crossing(sc.x, sc.top, LEVEL)
    return Measurement(
        {
            "crossing": math.nan if crossing is None else crossing,
            "theory": theory.saturation_threshold(ROW_N, LEVEL),
            "top_at_max": float(sc.top[-1]),
            "step": X_MAX / (X_POINTS - 1),
            "x_max": X_MAX,
        },
        basis=EXACT,
        scale=f"attncore's softmax of [x, 0, 0, 0] at {X_POINTS} x in [0, {X_MAX:g}], float64",
    )


def _saturation_judge(m: Measurement) -> Judgement:
    c = m.num("crossing")
    if not math.isfinite(c):
        return Judgement(
            FAILS,
            f"the top weight stays below {LEVEL:g} up to x = {m.num('x_max'):g} ({m.num('top_at_max'):.4f} "
            "there).",
        )
    if abs(c - m.num("theory")) > m.num("step"):
        return Judgement(
            FAILS,
            f"measured crossing {c:.2f} is more than a grid step from the closed form {m.num('theory'):.2f}.",
        )
    return Judgement(
        HOLDS,
        f"top weight {LEVEL:g} from x = {c:.2f} (closed form ln(3·{LEVEL:g}/{1 - LEVEL:.2g}) = "
        f"{m.num('theory'):.2f}): under one unscaled std at d = 64 (8).",
    )


SATURATION = Claim(
    key="saturation",
    source="sqrtd",
    quote="Exercise: plot softmax([x, 0, 0, 0]) as x varies from 0 to 10. Where does it saturate?",
    test=f"attncore's softmax along x (the Saturation tab's curve): where the top weight reaches {LEVEL:g}.",
    tolerance="the crossing within one grid step of the closed form x* = ln(level·(n − 1)/(1 − level))",
    measure=_saturation,
    describe=lambda m: (
        f"top weight reaches {LEVEL:g} at x = {m.num('crossing'):.3f} (closed form {m.num('theory'):.3f}); "
        f"{m.num('top_at_max'):.5f} at x = {m.num('x_max'):g}."
    ),
    judge=_saturation_judge,
)


def _jacobians(setting: Setting) -> Measurement:
    p = torch.tensor(HEALTHY_ROW, dtype=torch.float64)
    jac = softmax_jacobian(p)  # (4, 4)
    # the [x, 0, 0, 0] row whose top weight is exactly LEVEL
    x_sat = theory.saturation_threshold(ROW_N, LEVEL)
    sat = torch.zeros(ROW_N, dtype=torch.float64)
    sat[0] = x_sat
    jac_sat = softmax_jacobian(torch.softmax(sat, -1))
    vals: dict[str, float | int | str | bool] = {f"diag_{i}": float(jac[i, i]) for i in range(4)}
    vals.update(
        norm=float(jac.norm()),
        norm_sat=float(jac_sat.norm()),
        diag_sat=float(jac_sat.diagonal().max()),
        offdiag=float(jac[0, 1]),
    )
    return Measurement(vals, basis=EXACT, scale="J = diag(p) − ppᵀ in float64")


def _healthy_judge(m: Measurement) -> Judgement:
    diag = [m.num(f"diag_{i}") for i in range(4)]
    gap, half = _printed_gap(diag, SOURCE_HEALTHY)
    if gap > half + 1e-12:
        return Judgement(MISPRINT, f"the diagonal of J is {fmt_row(diag)}, not the printed values.")
    return Judgement(
        CAVEAT,
        "the printed numbers are J's diagonal p(1 − p); J also has off-diagonal entries −pᵢpⱼ (e.g. "
        f"{m.num('offdiag'):.2f}), ‖J‖_F = {m.num('norm'):.3f}, and a gradient needs ∂loss/∂p as well.",
    )


HEALTHY_GRADIENTS = Claim(
    key="healthy_gradients",
    source="sqrtd",
    quote="When softmax ≈ [0.3, 0.3, 0.2, 0.2]: gradients ≈ [0.21, 0.21, 0.16, 0.16] ← healthy!",
    test="The softmax Jacobian diag(p) − ppᵀ at that row (attncore.gradients.softmax_jacobian).",
    tolerance="the diagonal within half a unit of the last printed digit (0.005)",
    measure=_jacobians,
    describe=lambda m: (
        f"diagonal p(1 − p) = {fmt_row([m.num(f'diag_{i}') for i in range(4)])}; ‖J‖_F = {m.num('norm'):.3f}."
    ),
    judge=_healthy_judge,
)


def _onehot_judge(m: Measurement) -> Judgement:
    ratio = m.num("norm_sat") / m.num("norm")
    if ratio <= TINY:
        return Judgement(
            HOLDS,
            f"‖J‖_F is {100 * ratio:.1f}% of the [0.3, 0.3, 0.2, 0.2] row's once the top weight is "
            f"{LEVEL:g}, and shrinks like 1 − p beyond.",
        )
    return Judgement(
        FAILS, f"‖J‖_F at top weight {LEVEL:g} is still {100 * ratio:.0f}% of the healthy row's."
    )


VANISHING_ONEHOT = Claim(
    key="vanishing_onehot",
    source="sqrtd",
    quote="When softmax ≈ [1, 0, 0, ...]: gradients ≈ [0, 0, 0, ...] ← vanishing!",
    test=f"‖J‖_F of softmax([x, 0, 0, 0]) where its top weight is {LEVEL:g}, against the [0.3, 0.3, 0.2, "
    "0.2] row's.",
    tolerance=f"‖J‖_F at most {TINY:g} × the healthy row's",
    measure=_jacobians,
    describe=lambda m: (
        f"‖J‖_F = {m.num('norm_sat'):.4f} at top weight {LEVEL:g} (largest diagonal entry "
        f"{m.num('diag_sat'):.4f}) against {m.num('norm'):.3f}."
    ),
    judge=_onehot_judge,
)


@functools.lru_cache(maxsize=4)
def gradient_sweep_at_defaults(device: str, seed: int) -> GradientSweep:
    """The Saturation page's gradient sweep at its defaults (d = 1 … 1024, 16 keys, batch 64, level 0.99)."""
    return gradient_sweep(
        [d for d in D_GRID if d <= GRAD_D_MAX], GRAD_KEYS, GRAD_BATCH, level=LEVEL, seed=seed, device=device
    )


def _first_d(gs: GradientSweep, quantity: str) -> int:
    """The smallest d from which the unscaled/scaled median of ``quantity`` stays at most TINY (0: never)."""
    ratio = gs.stats[("unscaled", quantity)].median / gs.stats[("scaled", quantity)].median
    ok = ratio <= TINY
    for i in range(len(ok)):
        if ok[i:].all():
            return int(gs.d[i])
    return 0


def _gradients(d: int, setting: Setting) -> Measurement:
    gs = gradient_sweep_at_defaults(setting.device, setting.seed)
    i = int(np.nonzero(gs.d == d)[0][0])
    st = gs.stats
    vals: dict[str, float | int | str | bool] = {"d": d}
    se: dict[str, float] = {}
    for setting_name in ("scaled", "unscaled"):
        for q in ("jac", "grad_q", "saturated"):
            vals[f"{setting_name}_{q}_median"] = float(st[(setting_name, q)].median[i])
            vals[f"{setting_name}_{q}_mean"] = float(st[(setting_name, q)].mean[i])
            se[f"{setting_name}_{q}_mean"] = float(st[(setting_name, q)].se[i])
    vals["jac_tiny_from"], vals["grad_q_tiny_from"] = _first_d(gs, "jac"), _first_d(gs, "grad_q")
    return Measurement(
        vals,
        se,
        scale=(
            f"{GRAD_BATCH} × {GRAD_KEYS} query rows over {GRAD_KEYS} keys per d, Q, K, V ~ N(0, 1), float32, "
            f"{setting.device}"
        ),
    )


def _since(d: float) -> str:
    return f"from d = {int(d)}" if d else "at no d up to 1024"


def _vanish_judge(m: Measurement) -> Judgement:
    jr = m.num("unscaled_jac_median") / m.num("scaled_jac_median")
    qr = m.num("unscaled_grad_q_median") / m.num("scaled_grad_q_median")
    d = int(m.num("d"))
    tail = (
        f"the median falls below {TINY:g}× {_since(m.num('jac_tiny_from'))} for ‖J‖, "
        f"{_since(m.num('grad_q_tiny_from'))} for ‖∂loss/∂q‖"
    )
    if jr <= TINY and qr <= TINY:
        return Judgement(
            HOLDS,
            f"at d = {d} the median ‖J‖ is {jr:.2g}× and the median ‖∂loss/∂q‖ {qr:.2g}× the scaled ones.",
        )
    if jr <= TINY:
        return Judgement(
            CAVEAT,
            f"the median ‖J‖ is {jr:.2g}× the scaled one but ‖∂loss/∂q‖ {qr:.2g}×: unscaled logits pass √d "
            f"more gradient to q; {tail}.",
        )
    return Judgement(
        FAILS,
        f"at d = {d} ({GRAD_KEYS} keys) the median ‖J‖ is {jr:.2g}× the scaled one and ‖∂loss/∂q‖ {qr:.2g}×: "
        f"not tiny; {tail}.",
    )


GRADIENTS_VANISH = Claim(
    key="gradients_vanish",
    source="sqrtd",
    slow=True,
    also=("sdpa",),
    quote="Without scaling: Softmax outputs are near 0 or 1, gradients are tiny. (The reference page: "
    "“without it, the softmax gradients vanished for … d_k = 64”.)",
    test="The Saturation page's gradient sweep at d = 64: median ‖J‖_F of each row and ‖∂loss/∂q‖ through "
    "attncore.attention, unscaled against scaled, on the same draws.",
    tolerance=f"“tiny” = a median at most {TINY:g} × the scaled one",
    measure=lambda s: _gradients(64, s),
    describe=lambda m: (
        f"d = 64: median ‖J‖ {fmt(m.num('unscaled_jac_median'))} unscaled vs "
        f"{fmt(m.num('scaled_jac_median'))} scaled; median ‖∂loss/∂q‖ {fmt(m.num('unscaled_grad_q_median'))} "
        f"vs {fmt(m.num('scaled_grad_q_median'))}; {100 * m.num('unscaled_saturated_mean'):.0f}% of unscaled "
        "rows saturated."
    ),
    judge=_vanish_judge,
)


def _saturation_share_judge(m: Measurement) -> Judgement:
    u, s = m.num("unscaled_saturated_mean"), m.num("scaled_saturated_mean")
    su, ss = m.err("unscaled_saturated_mean"), m.err("scaled_saturated_mean")
    if u - s > K_SE * math.hypot(su, ss) and s <= 0.01:
        return Judgement(
            HOLDS,
            f"at d = {int(m.num('d'))} with {GRAD_KEYS} keys {100 * u:.0f}% of unscaled rows put ≥ {LEVEL:g} "
            f"on one key, {100 * s:.1f}% of scaled ones.",
        )
    if u - s > K_SE * math.hypot(su, ss):
        return Judgement(
            CAVEAT,
            f"scaling lowers the saturated share from {100 * u:.0f}% to {100 * s:.1f}%, but does not remove "
            "it.",
        )
    return Judgement(
        FAILS, f"saturated rows: {100 * u:.1f}% unscaled, {100 * s:.1f}% scaled: no clear difference."
    )


PREVENTS_SATURATION = Claim(
    key="prevents_saturation",
    source="sdpa",
    slow=True,
    quote="Without scaling, the softmax inputs are large, pushing softmax into saturation where it outputs "
    "near-one-hot vectors. … (e.g. 128)",
    test=f"Share of rows whose top weight is ≥ {LEVEL:g} at d = 128, unscaled and scaled (the gradient "
    "sweep).",
    tolerance=f"the shares differ by more than {K_SE:g} standard errors (over independent batch elements), "
    "and scaled rows saturate at most 1% of the time",
    measure=lambda s: _gradients(128, s),
    describe=lambda m: (
        f"d = 128: {100 * m.num('unscaled_saturated_mean'):.1f}% ± "
        f"{100 * m.err('unscaled_saturated_mean'):.1f}% of unscaled rows saturated, "
        f"{100 * m.num('scaled_saturated_mean'):.1f}% scaled."
    ),
    judge=_saturation_share_judge,
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


def _overflow(setting: Setting) -> Measurement:
    x = np.geomspace(1.0, 1e4, 241)  # the Saturation page's overflow sweep
    sw = overflow_sweep(x, ROW_N, device=setting.device)
    vals: dict[str, float | int | str | bool] = {"points": int(x.size)}
    for i, name in enumerate(sw.dtypes):
        bad = np.nonzero(sw.naive_nonfinite[i] > 0)[0]
        vals[f"naive_nan_from_{name}"] = float(x[bad[0]]) if bad.size else math.nan
        vals[f"stable_nonfinite_{name}"] = int(sw.stable_nonfinite[i].sum())
        vals[f"stable_err_{name}"] = float(np.nanmax(sw.stable_error[i]))
        vals[f"tol_{name}"] = tolerance(name)
    return Measurement(
        vals, scale=f"[x, 0, 0, 0] for {x.size} x from 1 to 10⁴ in {', '.join(sw.dtypes)}, {setting.device}"
    )


def _naive_nan_from(m: Measurement) -> str:
    """'11.2 (float16), 89.1 (bfloat16), …': from which x the naive softmax is NaN, where it ever is."""
    return ", ".join(
        f"{m.num(f'naive_nan_from_{t}'):.3g} ({t})"
        for t in OVERFLOW_DTYPES
        if math.isfinite(m.num(f"naive_nan_from_{t}"))
    )


def _stable_nonfinite(m: Measurement) -> int:
    """Non-finite outputs of the stable softmax over every dtype."""
    return sum(int(m.num(f"stable_nonfinite_{t}")) for t in OVERFLOW_DTYPES)


def _overflow_judge(m: Measurement) -> Judgement:
    nonfinite = _stable_nonfinite(m)
    worse = [t for t in OVERFLOW_DTYPES if m.num(f"stable_err_{t}") > m.num(f"tol_{t}")]
    if nonfinite:
        return Judgement(FAILS, f"the stable softmax gave {nonfinite} non-finite outputs.")
    if worse:
        return Judgement(
            FAILS, f"the stable softmax differs from float64 beyond tolerance in {', '.join(worse)}."
        )
    return Judgement(
        HOLDS,
        "the stable form never overflows and matches float64 in every dtype; the naive one turns NaN from "
        f"x = {_naive_nan_from(m)}.",
    )


STABLE_SOFTMAX = Claim(
    key="stable_softmax",
    source="sqrtd",
    also=("sdpa",),
    quote="Softmax can overflow with large inputs. … Subtracting the maximum prevents overflow while giving "
    "the same result.",
    test="Naive e^x/Σe^x against attncore's stable softmax of [x, 0, 0, 0], x from 1 to 10⁴, in float16, "
    "bfloat16, float32 and float64, each against float64.",
    tolerance="the stable form never non-finite and within the dtype's tolerance of float64 (2e-5 in "
    "float32, 4e-3 in float16, 3e-2 in bfloat16)",
    measure=_overflow,
    describe=lambda m: (
        f"naive NaN from x = {_naive_nan_from(m)}; stable: {_stable_nonfinite(m)} non-finite, "
        f"largest error {fmt(max(m.num(f'stable_err_{t}') for t in OVERFLOW_DTYPES), 2)}."
    ),
    judge=_overflow_judge,
)


# --------------------------------------------------------------------------- scores at initialisation


def _init_scores(setting: Setting) -> Measurement:
    cfg = TrainConfig()
    g = make_generator(setting.seed)
    vocab = "".join(chr(c) for c in range(32, 97))  # 65 characters, like tiny Shakespeare's
    model = CharTransformer.create(cfg, vocab, g)
    idx = torch.randint(0, len(vocab), (8, cfg.context), generator=g)  # (B, T)
    with torch.no_grad():
        blk = model.blocks[0]
        q, k, _ = blk.attn.split_heads(blk.ln1(model.tok(idx)))  # each (B, H, T, E)
        dots = (q @ k.transpose(-2, -1)).flatten().double()  # (B·H·T·T,)
    var = float(dots.var())
    d = cfg.d_head
    return Measurement(
        {
            "ratio": var / d,
            "var": var,
            "d_head": d,
            "var_q": float(q.double().var()),
            "theory_ratio": (cfg.d_model * 0.02**2) ** 2,
        },
        scale=(
            f"layer 1 of attncore.training's default model (d_model {cfg.d_model}, {cfg.n_head} heads, "
            f"weights N(0, 0.02²)) at initialisation, 8 × {cfg.context} random characters"
        ),
    )


def _init_judge(m: Measurement) -> Judgement:
    r = m.num("ratio")
    if 1.0 / INIT_FACTOR <= r <= INIT_FACTOR:
        return Judgement(HOLDS, f"Var(q·k) = {r:.2f}·d_head at initialisation.")
    return Judgement(
        FAILS,
        f"GPT-style initialisation gives q, k entries of variance {m.num('var_q'):.3f}, so Var(q·k) = "
        f"{r:.4f}·d_head (std {math.sqrt(m.num('var')):.2f} at d_head {int(m.num('d_head'))}, not "
        f"{math.sqrt(m.num('d_head')):.1f}); the unit-variance premise is an assumption about the inputs.",
    )


RANDOM_INIT = Claim(
    key="random_init",
    source="sqrtd",
    slow=True,
    quote="When scaling matters most: Random init | Scores near N(0, d_k) | Critical",
    test="Var(q·k)/d_head of the character transformer's first layer at initialisation, on random "
    "characters.",
    tolerance=f"“near N(0, d_k)”: variance within a factor {INIT_FACTOR:g} of d_k",
    measure=_init_scores,
    describe=lambda m: (
        f"Var(q·k) = {m.num('ratio'):.4f}·d_head (closed form (d_model·0.02²)² = "
        f"{m.num('theory_ratio'):.4f}); d_head = {int(m.num('d_head'))}."
    ),
    judge=_init_judge,
)


CLAIMS: tuple[Claim, ...] = (
    XY_VARIANCE,
    DOT_VARIANCE,
    STD_64,
    PEAKED_EXAMPLE,
    UNSCALED_EXAMPLE,
    SCALED_SCORES,
    SCALED_EXAMPLE,
    UNIT_ANY_D,
    RANDOM_INIT,
    TEMPERATURE,
    STABLE_SOFTMAX,
    GRADIENTS_VANISH,
    HEALTHY_GRADIENTS,
    VANISHING_ONEHOT,
    STD_512,
    SATURATION,
    SQRT_GROWTH,
    PREVENTS_SATURATION,
)
