"""What is said of FlashAttention and SDPA, checked against a probe's measurements by stated rules.

The claims are the reference page's ("Scaled Dot-Product Attention": FlashAttention "is now the
default backend in PyTorch's F.scaled_dot_product_attention", "reducing memory usage from
O(T^2) to O(T) and providing 2-4x wall-clock speedups"). Each verdict is one of
:data:`VERDICTS`, computed from the measurements with their spread by the rule in
:data:`RULES`; nothing here is written by hand per outcome.

Also here, because the charts and the verdicts must agree: which timings are noise
(:func:`noise_flags`) and the power laws fitted over the largest sizes (:func:`growth_fit`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from attncore.errors import AttnInputError
from attncore.kernels.calls import BACKENDS, LABELS, MATERIALISING
from attncore.kernels.cost import converted_mask_bytes, cpu_flash_bytes, cpu_flash_workspace_bytes
from attncore.kernels.results import BackendResult, SizeResult, Spread, paired_ratio
from attncore.kernels.spec import KernelSpec

__all__ = [
    "CLAIMED_SPEEDUP",
    "CPU_KERNEL",
    "CPU_UNTESTABLE",
    "FIT_SIZES",
    "LINEAR_MAX",
    "MIN_ROUNDS",
    "QUADRATIC_MIN",
    "RULES",
    "SOURCE",
    "VERDICTS",
    "Claim",
    "PowerFit",
    "check_claims",
    "default_backend_claim",
    "fmt3",
    "fmt_ratio",
    "growth_fit",
    "memory_claim",
    "noise_flags",
    "speed_claim",
]

# The title of the reference page the claims are quoted from.
SOURCE = "Scaled Dot-Product Attention"
VERDICTS: tuple[str, ...] = ("holds", "holds with a caveat", "does not hold here", "not testable here")
CLAIMED_SPEEDUP = (2.0, 4.0)
# Memory slopes on log-log over the largest sizes: "O(T^2)" needs at least this ...
QUADRATIC_MIN = 1.7
# ... and "O(T)" at most this.
LINEAR_MAX = 1.3
# Power laws are fitted over this many of the largest sizes (fixed costs dominate small T).
FIT_SIZES = 3
# A speed verdict needs this many interleaved rounds (the range of 3 holds the median 75% of the time).
MIN_ROUNDS = 3

CPU_KERNEL = ("on a CPU the “flash” backend is torch's own blocked CPU kernel (the same online softmax), "
              "not Dao et al.'s CUDA FlashAttention the claim is about")
# The speed and memory claims are properties of Dao et al.'s CUDA kernel (its IO-aware tiling of GPU memory):
# a CPU runs another kernel, so its numbers are shown but not judged.
CPU_UNTESTABLE = ("not testable on a CPU: the claim is about Dao et al.'s CUDA FlashAttention, and the "
                  "“flash” backend here is torch's own blocked CPU kernel, whose numbers are shown, "
                  "not judged")

RULES: dict[str, str] = {
    "default backend": (
        "holds if torch's dispatch (torch._fused_sdp_choice, checked against the outputs bit for bit) "
        "picked flash at every T; on a CPU at most “holds with a caveat” (another kernel of the same "
        "name); does not hold if it picked another backend at any T."),
    "speed": (
        f"the time of torch's math path over the default dispatch's (a fused kernel), round by round "
        f"(interleaved rounds), at the largest T where both ran {MIN_ROUNDS} rounds or more; the interval of "
        f"the ratios' median is their min–max, or for 9 rounds and more the order statistics that hold the "
        f"median with at least 95% probability: holds if it lies within {CLAIMED_SPEEDUP[0]:g}–"
        f"{CLAIMED_SPEEDUP[1]:g}×, does not hold if it lies wholly outside, else holds with a caveat; at "
        f"most “holds with a caveat” where the default dispatch ran another kernel than flash, or where "
        f"either time at that T is noise (not larger than at a smaller T); not testable on a CPU (the claim "
        f"is about Dao et al.'s CUDA kernel: the CPU kernel's times are shown, not judged)."),
    "memory": (
        f"least-squares slopes of log peak memory against log T over the {FIT_SIZES} largest T measured: "
        f"holds if math's slope is at least {QUADRATIC_MIN} and the default dispatch's at most {LINEAR_MAX}; "
        f"does not hold if the default's is at least {QUADRATIC_MIN}; not testable if math's is below "
        f"{QUADRATIC_MIN} (overheads dominate at these sizes); at most “holds with a caveat” where the "
        f"default dispatch ran another kernel than flash; not testable on a CPU (the claim is about Dao et "
        f"al.'s CUDA kernel: the CPU kernel's memory is shown, not judged)."),
}


@dataclass(frozen=True)
class Claim:
    """One claim beside this machine's numbers.

    Attributes:
        topic: ``"default backend"``, ``"speed"`` or ``"memory"`` (keys of :data:`RULES`).
        claim: the claim, quoted.
        measured: what was measured, as a sentence built from the numbers.
        verdict: one of :data:`VERDICTS`.
        caveat: what a careful reviewer would add (empty when nothing).
    """

    topic: str
    claim: str
    measured: str
    verdict: str
    caveat: str

    @property
    def rule(self) -> str:
        """How the verdict is computed."""
        return RULES[self.topic]

    @property
    def source(self) -> str:
        """The title of the page the claim is quoted from."""
        return SOURCE


# ---------------------------------------------------------------------------- numbers


def fmt_ratio(x: float) -> str:
    """A ratio to two significant figures, no exponent: 3.34 -> '3.3', 12.4 -> '12', 0.0456 -> '0.046'."""
    if not math.isfinite(x) or x == 0:
        return f"{x:g}"
    r = round(x, 1 - math.floor(math.log10(abs(x))))
    return f"{r:.{max(0, 1 - math.floor(math.log10(abs(r))))}f}"


def fmt3(x: float) -> str:
    """Three significant figures, no exponent for everyday sizes: 1234.5 -> '1230', 0.01234 -> '0.0123'."""
    if math.isfinite(x) and 1000 <= abs(x) < 1e9:
        return f"{round(x, 2 - math.floor(math.log10(abs(x)))):.0f}"
    return f"{x:.3g}"


def _ms(seconds: float) -> str:
    return fmt3(seconds * 1e3)


def _ratio_range(s: Spread, digits: int = 2) -> str:
    """The interval of a ratio (one number where both ends print alike)."""
    if s.n < 2:
        return "one round"
    a, b = (fmt_ratio(s.lo), fmt_ratio(s.hi)) if digits == 2 else (f"{s.lo:.{digits}g}", f"{s.hi:.{digits}g}")
    return a if a == b else f"{a}–{b}"


def _ms_range(s: Spread) -> str:
    return f"{_ms(s.lo)}–{_ms(s.hi)}" if s.n > 1 else "one round"


def noise_flags(ts: Sequence[float], ys: Sequence[float]) -> list[float | None]:
    """For each point (sorted by ``ts``), the smaller T whose value is at least as large (None when
    the point is larger than every smaller T's): a time that does not grow with T is noise, not a trend.
    """
    order = np.argsort(np.asarray(ts, dtype=np.float64), kind="stable")
    out: list[float | None] = [None] * len(ts)
    best_t, best_y = None, -math.inf
    for i in order:
        y = float(ys[i])
        if best_t is not None and y <= best_y:
            out[i] = best_t
        if y > best_y:
            best_t, best_y = float(ts[i]), y
    return out


@dataclass(frozen=True)
class PowerFit:
    """``y ≈ coef · T^slope`` fitted by least squares on log-log.

    Attributes:
        ts: the T the fit used (the largest ones given).
        slope: the fitted exponent, or the fixed one.
        coef: the coefficient.
        se: standard error of a fitted slope (None with fewer than 3 points or a fixed slope).
        fixed: the slope was given, only ``coef`` was fitted.
    """

    ts: tuple[float, ...]
    slope: float
    coef: float
    se: float | None
    fixed: bool

    def at(self, t: np.ndarray | float) -> np.ndarray | float:
        """The fitted line at ``t``."""
        return self.coef * np.asarray(t, dtype=np.float64) ** self.slope


def growth_fit(ts: Sequence[float], ys: Sequence[float], slope: float | None = None,
               largest: int = FIT_SIZES, among: Sequence[float] | None = None) -> PowerFit | None:
    """Fit ``y = coef · T^slope`` over the ``largest`` largest T.

    The window is the ``largest`` largest T of ``among`` (default ``ts``): pass a curve's every T
    in ``among`` and only its trusted points in ``ts``, and a noisy large size leaves a hole in the
    window instead of pulling a small one in. With ``slope`` given only the coefficient is fitted
    (one point is enough); otherwise the slope too (two points at least). None when too few
    points with a positive value lie in the window.
    """
    window = sorted({float(t) for t in (ts if among is None else among)})[-largest:]
    pts = sorted((float(t), float(y)) for t, y in zip(ts, ys, strict=True)
                 if math.isfinite(float(y)) and float(y) > 0 and float(t) in window)
    if not pts or (slope is None and len(pts) < 2):
        return None
    x = np.log([p[0] for p in pts])
    y = np.log([p[1] for p in pts])
    if slope is not None:
        return PowerFit(tuple(p[0] for p in pts), float(slope), float(np.exp(np.mean(y - slope * x))),
                        None, True)
    a, b = np.polyfit(x, y, 1)
    se = None
    if len(pts) >= 3:
        resid = y - (a * x + b)
        se = float(math.sqrt(float(resid @ resid) / (len(pts) - 2) / float(((x - x.mean()) ** 2).sum())))
    return PowerFit(tuple(p[0] for p in pts), float(a), float(np.exp(b)), se, False)


def _get(size: SizeResult, name: str) -> BackendResult | None:
    """The row of ``name`` (None when the size has no such row)."""
    return next((r for r in size.rows if r.name == name), None)


def _cpu(device: torch.device | str) -> bool:
    return torch.device(device).type == "cpu"


def _downgrade(verdict: str, device: torch.device | str) -> str:
    return "holds with a caveat" if verdict == "holds" and _cpu(device) else verdict


def _join(*parts: str) -> str:
    text = "; ".join(p for p in parts if p)
    return text + ("." if text and not text.endswith(".") else "")


# ---------------------------------------------------------------------------- the claims


def default_backend_claim(sizes: Sequence[SizeResult], spec: KernelSpec, device: torch.device | str) -> Claim:
    """“FlashAttention is the default backend”, from the backend the dispatch picked at each T."""
    claim = ("“Uses FlashAttention under the hood”; FlashAttention “is now the default backend in "
             "PyTorch's F.scaled_dot_product_attention”.")
    chosen = [(s.L, s.default_backend) for s in sizes]
    if not chosen or any(c is None for _, c in chosen):
        unknown = [str(t) for t, c in chosen if c is None]
        return Claim("default backend", claim,
                     "torch did not say which backend its dispatch picked"
                     + (f" at T = {', '.join(unknown)}." if unknown else "."),
                     "not testable here", "")
    names = sorted({c for _, c in chosen if c})
    confirmed = all(getattr(_get(s, s.default_backend or ""), "same_as_default", False) for s in sizes)
    how = (" (" + ", ".join(sorted({s.choice_source for s in sizes}))
           + ("; the outputs agree bit for bit)" if confirmed else ")"))
    if len(names) == 1:
        measured = f"the default dispatch ran {LABELS[names[0]]} at every T of this sweep{how}."
    else:
        measured = ("the default dispatch ran " + "; ".join(f"{LABELS[c]} at T = {t}" for t, c in chosen if c)
                    + f"{how}.")
    fused = [n for n in BACKENDS if n not in MATERIALISING]
    last = sizes[-1]
    ran = [r for r in (_get(last, n) for n in fused)
           if r is not None and r.status == "ran" and r.time is not None]
    if len(ran) > 1:
        ranked = sorted(ran, key=lambda r: r.time.median)  # type: ignore[union-attr]
        measured += (f" Fastest fused kernel at T = {last.L}: " + ", ".join(
            f"{LABELS[r.name]} {_ms(r.time.median)} ms ({_ms_range(r.time)})" for r in ranked) + ".")  # type: ignore[union-attr]
    caveats = []
    if names == ["flash"]:
        verdict = _downgrade("holds", device)
        if _cpu(device):
            caveats.append(CPU_KERNEL)
    else:
        verdict = "does not hold here"
        for name in names:
            if name == "flash":
                continue
            where = next(x for x in reversed(sizes) if x.default_backend == name)
            flash = _get(where, "flash")
            if name == "cudnn":
                caveats.append(f"in {spec.dtype} torch's dispatch on this GPU ranks cuDNN's fused attention "
                               "ahead of FlashAttention")
            elif flash is not None and flash.status == "refused":
                caveats.append(f"{LABELS[name]} ran because flash refused this call: {flash.reason[:200]}")
            elif flash is not None and flash.status == "ran":
                caveats.append(f"flash accepts this call, but the dispatch ranks {LABELS[name]} first")
        if _cpu(device):
            caveats.append(CPU_KERNEL)
    return Claim("default backend", claim, measured, verdict, _join(*caveats))


def _fused_reference(size: SizeResult) -> BackendResult | None:
    """The fused path a claim compares: the default dispatch when it runs a fused kernel."""
    if size.default_backend is None or size.default_backend in MATERIALISING:
        return None
    r = _get(size, "default")
    if r is None:
        return None
    return r if r.status == "ran" and r.time is not None else None


def _noisy_at(sizes: Sequence[SizeResult], name: str, t: int) -> float | None:
    """The smaller T whose median time is at least ``name``'s at ``t`` (None: it grew)."""
    pts = [(float(s.L), r.time.median) for s in sizes for r in s.rows
           if r.name == name and r.status == "ran" and r.time is not None]
    flags = noise_flags([p[0] for p in pts], [p[1] for p in pts])
    return next((f for (pt, _), f in zip(pts, flags, strict=True) if pt == t), None)


def _busy(sizes: Sequence[SizeResult]) -> str:
    loads = [s.load for s in sizes if s.load is not None]
    busy = [ld for ld in loads if ld.busy]
    if not busy:
        return ""
    worst = max(busy, key=lambda ld: ld.peak)
    return (f"the machine was busy while timing (1-minute load up to {worst.peak:.1f} on {worst.cpus} CPUs): "
            "rounds spread wider and every time is inflated alike")


def speed_claim(sizes: Sequence[SizeResult], spec: KernelSpec, device: torch.device | str) -> Claim:
    """“2-4x wall-clock speedups”: math's time over the fused default's, round by round."""
    claim = "FlashAttention gives “2-4x wall-clock speedups”."
    pairs = [(s, _get(s, "math"), _fused_reference(s)) for s in sizes]
    both = [(s, m, f) for s, m, f in pairs
            if f is not None and m is not None and m.status == "ran" and m.time is not None]
    if not both:
        if sizes and all(_fused_reference(s) is None for s in sizes):
            ran = LABELS.get(sizes[-1].default_backend or "", "no fused kernel")
            why = f"the default dispatch ran {ran} itself: no fused kernel ran beside the materialised path."
        else:
            why = "no materialised path ran beside the default dispatch (all skipped by the budget)."
        return Claim("speed", claim, why, "not testable here", "")
    enough = [b for b in both if (paired_ratio(b[1], b[2]) or Spread(0, 0, 0, 0)).n >= MIN_ROUNDS]
    size, math_row, fused = (enough or both)[-1]
    ratio = paired_ratio(math_row, fused)
    assert ratio is not None and math_row.time is not None and fused.time is not None
    lo, hi = CLAIMED_SPEEDUP
    rounds = (f"{ratio.interval} of {ratio.n} interleaved rounds" if ratio.k == 1
              else f"the {ratio.interval} interleaved rounds")
    picked = LABELS[size.default_backend or "default"]
    measured = [f"at T = {size.L} {LABELS['math']} took {_ms(math_row.time.median)} ms "
                f"({_ms_range(math_row.time)}), the default dispatch ({picked}) "
                f"{_ms(fused.time.median)} ms ({_ms_range(fused.time)}): {fmt_ratio(ratio.median)}× as long "
                f"round by round (the per-round ratios' median, not the medians' ratio; its interval "
                f"{_ratio_range(ratio)}×, {rounds})"]
    others = []
    for name in ("notebook", "attncore"):
        r = _get(size, name)
        other = paired_ratio(r, fused) if r is not None and r.status == "ran" else None
        if other is not None:
            others.append(f"{LABELS[name]} {fmt_ratio(other.median)}× ({_ratio_range(other)}×)")
    if others:
        measured.append("the other materialised paths' time over the default's: " + ", ".join(others))
    flash = _get(size, "flash")
    if size.default_backend != "flash" and flash is not None and flash.status == "ran":
        vs_flash = paired_ratio(math_row, flash)
        if vs_flash is not None:
            measured.append(f"math over {LABELS['flash']} itself (forced): {fmt_ratio(vs_flash.median)}× "
                            f"({_ratio_range(vs_flash)}×)")
    caveats = []
    cpu = _cpu(device)
    if ratio.n < MIN_ROUNDS:
        verdict = "not testable here"
        caveats.append(f"{ratio.n} timed round(s) give no usable spread; the rule needs {MIN_ROUNDS}")
    elif cpu:
        verdict = "not testable here"
        caveats.append(CPU_UNTESTABLE)
    elif lo <= ratio.lo and ratio.hi <= hi:
        verdict = "holds"
    elif ratio.hi < lo or ratio.lo > hi:
        verdict = "does not hold here"
        caveats.append(f"the ratio's interval ({_ratio_range(ratio, 3)}×) lies wholly "
                       f"{'below' if ratio.hi < lo else 'above'} the claimed {lo:g}–{hi:g}×")
    else:
        verdict = "holds with a caveat"
        caveats.append(f"the ratio's interval ({_ratio_range(ratio, 3)}×) reaches outside the claimed "
                       f"{lo:g}–{hi:g}×")
    if size.default_backend != "flash":
        ran = LABELS[size.default_backend or "default"]
        caveats.append(f"the default dispatch ran {ran}, not FlashAttention: the ratio is that "
                       "kernel's")
        verdict = "holds with a caveat" if verdict == "holds" else verdict
    if spec.mask == "causal" and math_row.flops and fused.flops and fused.flops < math_row.flops:
        per_flop = ratio.median * fused.flops / math_row.flops
        caveats.append(f"under the causal mask the fused kernel stops at the diagonal: it does "
                       f"{fused.flops / 1e9:.3g} GFLOP where math does {math_row.flops / 1e9:.3g} "
                       f"(4·B·H·L·S·E), so per flop math is {fmt_ratio(per_flop)}× as slow")
    for name in ("math", "default"):
        below = _noisy_at(sizes, name, size.L)
        if below is not None:
            caveats.append(f"{LABELS[name]}'s time at T = {size.L} is not larger than at T = {int(below)}: "
                           "noise, not a trend")
            verdict = "holds with a caveat" if verdict == "holds" else verdict
    if spec.dropout > 0:
        caveats.append("with dropout both paths draw a random mask, which the claim's kernels fuse")
    caveats.append(_busy(sizes))
    if cpu and ratio.n < MIN_ROUNDS:
        caveats.append(CPU_KERNEL)
    return Claim("speed", claim, _join(*measured), verdict, _join(*caveats))


def _series(sizes: Sequence[SizeResult], pick: str) -> tuple[list[float], list[float]]:
    ts, ys = [], []
    for s in sizes:
        r = _fused_reference(s) if pick == "fused" else _get(s, pick)
        if r is not None and r.status == "ran" and r.peak_bytes is not None and r.peak_bytes > 0:
            ts.append(float(s.L))
            ys.append(float(r.peak_bytes))
    return ts, ys


def _slope(fit: PowerFit) -> str:
    return f"T^{fit.slope:.2f}" + (f" ± {fit.se:.2f}" if fit.se is not None else "")


def memory_claim(sizes: Sequence[SizeResult], spec: KernelSpec, device: torch.device | str,
                 threads: int | None = None) -> Claim:
    """“From O(T^2) to O(T)”: slopes of peak memory against T over the largest sizes."""
    claim = "FlashAttention reduces memory “from O(T^2) to O(T)”."
    fused_t, fused_y = _series(sizes, "fused")
    math_t, math_y = _series(sizes, "math")
    if not any(r.peak_bytes is not None for s in sizes for r in s.rows):
        return Claim("memory", claim, "memory was not measured (switch on “Measure peak memory”).",
                     "not testable here", "")
    if sizes and all(_fused_reference(s) is None for s in sizes):
        return Claim("memory", claim, "the default dispatch materialises (it ran the math path itself).",
                     "not testable here", "")
    fused, mathfit = growth_fit(fused_t, fused_y), growth_fit(math_t, math_y)
    if fused is None or mathfit is None:
        return Claim("memory", claim, "memory was not measured at two or more T for both the default "
                     "dispatch and math (MATH).", "not testable here", "")
    MIB = float(1 << 20)
    measured = [f"over T = {int(fused.ts[0])}–{int(fused.ts[-1])} the default dispatch's peak grows as "
                f"{_slope(fused)}, math (MATH)'s over T = {int(mathfit.ts[0])}–{int(mathfit.ts[-1])} as "
                f"{_slope(mathfit)} (least squares on log-log)"]
    common = sorted(set(fused_t) & set(math_t))
    if common:
        t = common[-1]
        big, small = math_y[math_t.index(t)], fused_y[fused_t.index(t)]
        measured.append(f"at T = {int(t)} math needed {fmt3(big / MIB)} MiB, the default dispatch "
                        f"{fmt3(small / MIB)} MiB ({fmt_ratio(big / small)}×)")
    caveats = []
    cpu = _cpu(device)
    if cpu:
        verdict = "not testable here"
        caveats.append(CPU_UNTESTABLE)
    elif mathfit.slope < QUADRATIC_MIN:
        verdict = "not testable here"
        caveats.append(f"at these sizes even math's memory grows slower than T^{QUADRATIC_MIN} (fixed costs "
                       "dominate): raise the largest T")
    elif fused.slope <= LINEAR_MAX:
        verdict = "holds"
    elif fused.slope >= QUADRATIC_MIN:
        verdict = "does not hold here"
    else:
        verdict = "holds with a caveat"
        caveats.append(f"the default dispatch's slope lies between {LINEAR_MAX} and {QUADRATIC_MIN}")
    picked = {s.default_backend for s in sizes if s.L in fused.ts}
    if picked != {"flash"}:
        ran = ", ".join(LABELS[p] for p in sorted(p for p in picked if p))
        caveats.append(f"the default dispatch ran {ran} at these sizes, not FlashAttention: the slopes are "
                       "that kernel's")
        verdict = "holds with a caveat" if verdict == "holds" else verdict
    if spec.mask == "boolean" and fused_t:
        t = int(fused_t[-1])
        caveats.append(f"torch turns the boolean mask into an additive L × S mask before any kernel runs "
                       f"({converted_mask_bytes(spec, t, t) / MIB:.3g} MiB at T = {t}): memory of order T² "
                       "that the fused kernels pay too")
    if _cpu(device) and fused_t and sizes[-1].default_backend == "flash":
        n = threads if threads is not None else (sizes[-1].load.threads if sizes[-1].load else 1)
        t = int(fused_t[-1])
        model = cpu_flash_bytes(spec, t, t, n)
        t0, t1 = int(fused.ts[0]), int(fused.ts[-1])
        w0, w1 = cpu_flash_workspace_bytes(spec, t0, t0), cpu_flash_workspace_bytes(spec, t1, t1)
        if w1 > w0:
            caveats.append(f"the CPU kernel's blocks grow with T until T = 768 (per thread {w0 / 1024:.0f} "
                           f"KiB at T = {t0}, {w1 / 1024:.0f} KiB at T = {t1}), which steepens the slope; "
                           "from T = 1024 on only its output grows")
        caveats.append(f"the CPU kernel's output and one block of scores per thread (threads: {n}) come to "
                       f"{model / MIB:.3g} MiB at T = {t}; measured {fused_y[-1] / MIB:.3g} MiB")
    return Claim("memory", claim, _join(*measured), verdict, _join(*caveats))


def check_claims(sizes: Sequence[SizeResult], spec: KernelSpec, device: torch.device | str) -> list[Claim]:
    """The three claims (default backend, speed, memory) checked against ``sizes`` (smallest T first).

    Args:
        sizes: the probes of one sweep, ascending in T.
        spec: their configuration.
        device: where they ran (a CPU's “flash” is another kernel than the claim's).
    """
    if any(a.L >= b.L for a, b in zip(sizes, sizes[1:], strict=False)):
        raise AttnInputError("the sizes must be in ascending order of T.")
    return [default_backend_claim(sizes, spec, device), speed_claim(sizes, spec, device),
            memory_claim(sizes, spec, device)]
