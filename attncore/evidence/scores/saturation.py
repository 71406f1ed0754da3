"""Claims about softmax saturation and its gradients, and the overflow of the naive softmax.

Each live test runs the Saturation & gradients page's computation at that page's defaults (the
[x, 0, 0, 0] curve over x in [0, 10], 16 keys and a batch of 64 in the gradient sweep, level 0.99),
so the numbers here are the numbers that page shows for the same seed and device.
"""

from __future__ import annotations

import functools
import math

import numpy as np
import torch

from attncore import theory
from attncore.dot_products import D_GRID
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
    fmt_row,
)
from attncore.evidence.scores.worked import printed_gap
from attncore.gradients import (
    GradientSweep,
    gradient_sweep,
    saturation_crossing,
    saturation_curve,
    softmax_jacobian,
)
from attncore.kernels import tolerance
from attncore.overflow import OVERFLOW_DTYPES, overflow_sweep

__all__ = [
    "CLAIMS",
    "GRADIENTS_VANISH",
    "HEALTHY_GRADIENTS",
    "PREVENTS_SATURATION",
    "SATURATION",
    "STABLE_SOFTMAX",
    "VANISHING_ONEHOT",
    "gradient_sweep_at_defaults",
]

# The Saturation & gradients page's defaults.
GRAD_KEYS, GRAD_BATCH, GRAD_D_MAX = 16, 64, 1024  # sat_keys, sat_batch, sat_dmax
LEVEL = 0.99  # sat_level: a row is saturated when its top weight reaches this
X_MAX, X_POINTS, ROW_N = 10.0, 81, 4  # the [x, 0, 0, 0] curve: sat_xmax, its grid, sat_sn
HEALTHY_ROW = (0.3, 0.3, 0.2, 0.2)
SOURCE_HEALTHY = ("0.21", "0.21", "0.16", "0.16")
TINY = 0.1  # "tiny" / "vanish": at most a tenth of the scaled value


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
    gap, half = printed_gap(diag, SOURCE_HEALTHY)
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
        f"not tiny; {tail}. The q-gradient of unscaled scores carries a factor √d = {math.sqrt(d):.3g} that "
        f"the scaled ones lack (∂(q·k)/∂q = k, against k/√d); {_saturated_rows(m)}.",
    )


def _saturated_rows(m: Measurement) -> str:
    """The unscaled rows that do saturate, and the bound on their Jacobian: there the claim holds."""
    share, se = m.num("unscaled_saturated_mean"), m.err("unscaled_saturated_mean")
    bound = theory.saturated_jacobian_bound(LEVEL)
    ratio = bound / m.num("scaled_jac_median")
    verdict = "for them the claim holds row by row" if ratio <= TINY else f"above {TINY:g}×, so not tiny"
    return (
        f"{100 * share:.0f}% ± {100 * se:.1g}% of unscaled rows do saturate (top weight ≥ {LEVEL:g}), and on "
        f"each of those ‖J‖_F ≤ 2(1 − {LEVEL:g}) = {bound:.2g}, {ratio:.2g}× the scaled median: {verdict}"
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



CLAIMS: tuple[Claim, ...] = (
    STABLE_SOFTMAX,
    GRADIENTS_VANISH,
    HEALTHY_GRADIENTS,
    VANISHING_ONEHOT,
    SATURATION,
    PREVENTS_SATURATION,
)
