"""attncore.kernels.claims: every verdict comes from a rule over the measurements with their spread.

Counterfactual measurements (hand-built results, no timing) go in; the verdict must change the way
the rule says. Plus the statistics the rules stand on: the median's interval, per-round ratios, the
noise flag, the power-law fits over the largest sizes, two-significant-figure ratios.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from attncore.errors import AttnInputError
from attncore.kernels import (
    BackendResult,
    KernelSpec,
    MachineLoad,
    SizeResult,
    check_claims,
    fmt_ratio,
    growth_fit,
    noise_flags,
    paired_ratio,
)
from attncore.kernels.claims import CPU_UNTESTABLE, VERDICTS
from attncore.kernels.results import spread

SPEC = KernelSpec(heads=4, head_dim=64)
QUIET = MachineLoad(0.5, 0.6, 16, 16)


def size(T: int, *, default: str = "flash", fused: list[float], math_: list[float] | None,
         fused_peak: float | None = None, math_peak: float | None = None, flash_status: str = "ran",
         flash_reason: str = "", load: MachineLoad | None = QUIET, fused_flops: float | None = None,
         full: float | None = None) -> SizeResult:
    """One hand-built size: the default dispatch runs ``default`` with the ``fused`` round times."""
    med = spread(fused).median
    fused_row = dict(times=tuple(fused), seconds=med, peak_bytes=fused_peak,
                     flops=fused_flops if fused_flops is not None else full)
    rows = [
        BackendResult("flash", T, T, flash_status, reason=flash_reason, chosen=default == "flash",
                      **(fused_row if flash_status == "ran" and default == "flash" else {})),
        BackendResult("efficient", T, T, "refused", reason="No viable backend"),
        BackendResult("cudnn", T, T, "ran" if default == "cudnn" else "refused", chosen=default == "cudnn",
                      **(fused_row if default == "cudnn" else {})),
        BackendResult("math", T, T, "ran" if math_ else "skipped", chosen=default == "math",
                      times=tuple(math_ or ()), seconds=spread(math_).median if math_ else None,
                      peak_bytes=math_peak, flops=full),
        BackendResult("default", T, T, "ran", **fused_row),
    ]
    return SizeResult(T, T, tuple(rows), default, "torch._fused_sdp_choice", load)


def rounds(ms: float, spread_: float = 0.02, n: int = 5) -> list[float]:
    """n round times around ``ms`` milliseconds (seconds), ±spread_ relative."""
    return [ms * 1e-3 * (1 + spread_ * (i - n // 2) / max(1, n // 2)) for i in range(n)]


def claims(sizes: list[SizeResult], device: str = "cuda", spec: KernelSpec = SPEC) -> dict[str, object]:
    out = {c.topic: c for c in check_claims(sizes, spec, device)}
    assert all(c.verdict in VERDICTS for c in out.values())
    return out


# ---------------------------------------------------------------------------- speed


@pytest.mark.parametrize(("math_ms", "device", "verdict"), [
    (30.0, "cuda", "holds"),                  # 3x, every round inside 2-4x
    (30.0, "cpu", "not testable here"),       # the same numbers, but a CPU's "flash" is another kernel
    (100.0, "cuda", "does not hold here"),    # 10x: above the claim
    (12.0, "cuda", "does not hold here"),     # 1.2x: below
    (21.0, "cuda", "holds with a caveat"),    # 2.1x, but the rounds reach below 2x
])
def test_speed_verdict_follows_the_per_round_ratios(math_ms: float, device: str, verdict: str) -> None:
    sizes = [size(512, fused=rounds(2.5), math_=rounds(math_ms / 4)),
             size(1024, fused=rounds(10.0), math_=rounds(math_ms, spread_=0.1))]
    c = claims(sizes, device)["speed"]
    assert c.verdict == verdict, c
    ratio = paired_ratio(sizes[-1].row("math"), sizes[-1].row("default"))
    assert f"{fmt_ratio(ratio.median)}× as long" in c.measured and "T = 1024" in c.measured
    assert (CPU_UNTESTABLE in c.caveat) == (device == "cpu")


def test_speed_sentence_names_its_ratio_the_median_of_the_per_round_ratios() -> None:
    """The medians 30 ms and 10 ms sit beside "2.0× as long": 30 / 10 = 3, but the printed number is
    the median of the per-round ratios (here 2.0). The sentence must say which ratio it gives."""
    fused = [0.010, 0.010, 0.010, 0.015, 0.015]
    math_ = [0.020, 0.020, 0.030, 0.030, 0.030]
    sizes = [size(1024, fused=fused, math_=math_)]
    per_round = sorted(m / f for m, f in zip(math_, fused, strict=True))  # 2, 2, 3, 2, 2
    assert per_round[2] == 2.0 and spread(math_).median / spread(fused).median == pytest.approx(3.0)
    c = claims(sizes, "cuda")["speed"]
    assert "took 30 ms (20–30)" in c.measured and "10 ms (10–15)" in c.measured
    assert "2.0× as long round by round (the per-round ratios' median, not the medians' ratio" in c.measured


def test_speed_uses_paired_rounds_so_a_drift_that_hits_both_cancels() -> None:
    """Round k of both paths ran together: a machine slowing down 3x over the rounds leaves every
    per-round ratio at 3 (holds), where unpaired medians' ranges would overlap the claim's edges."""
    drift = [1.0, 1.5, 2.0, 2.5, 3.0]
    fused = [0.010 * d for d in drift]
    sizes = [size(1024, fused=fused, math_=[3 * f for f in fused])]
    c = claims(sizes)["speed"]
    assert c.verdict == "holds" and "its interval 3.0×, min–max of 5" in c.measured


def test_speed_needs_three_rounds_and_a_fused_default() -> None:
    c = claims([size(1024, fused=rounds(10, n=2), math_=rounds(30, n=2))])["speed"]
    assert c.verdict == "not testable here" and "2 timed round(s)" in c.caveat
    # dropout on a CPU: the dispatch ran math itself, nothing fused to compare
    c = claims([size(1024, default="math", fused=rounds(30), math_=rounds(30))], "cpu")["speed"]
    assert c.verdict == "not testable here" and "ran math (MATH) itself" in c.measured
    c = claims([size(1024, fused=rounds(10), math_=None)])["speed"]
    assert c.verdict == "not testable here" and "skipped by the budget" in c.measured
    # the largest T with three rounds is used when the largest has fewer
    c = claims([size(512, fused=rounds(2.5), math_=rounds(7.5)),
                size(1024, fused=rounds(10, n=1), math_=rounds(100, n=1))])["speed"]
    assert c.verdict == "holds" and "T = 512" in c.measured


def test_causal_speed_caveat_splits_less_work_from_faster_per_flop() -> None:
    causal = KernelSpec(heads=4, head_dim=64, mask="causal")
    full = 4.0 * 4 * 1024 * 1024 * 64
    sizes = [size(1024, fused=rounds(10), math_=rounds(30), fused_flops=0.75 * full, full=full)]
    c = claims(sizes, spec=causal)["speed"]
    assert "stops at the diagonal" in c.caveat
    assert f"does {0.75 * full / 1e9:.3g} GFLOP where math does {full / 1e9:.3g}" in c.caveat
    assert f"per flop math is {fmt_ratio(3.0 * 0.75)}× as slow" in c.caveat
    assert "diagonal" not in claims(sizes)["speed"].caveat  # no causal mask: same work, no caveat


def test_busy_machine_and_noise_are_named() -> None:
    busy = MachineLoad(5.9, 6.3, 2, 2)
    c = claims([size(1024, fused=rounds(10), math_=rounds(30), load=busy)])["speed"]
    assert "busy" in c.caveat and "up to 6.3 on 2 CPUs" in c.caveat
    assert "busy" not in claims([size(1024, fused=rounds(10), math_=rounds(30))])["speed"].caveat
    # math's time at 1024 is not larger than at 512: the caveat says so
    sizes = [size(512, fused=rounds(2.5), math_=rounds(40)), size(1024, fused=rounds(10), math_=rounds(30))]
    c = claims(sizes)["speed"]
    assert "math (MATH)'s time at T = 1024 is not larger than at T = 512" in c.caveat
    assert c.verdict == "holds with a caveat"  # 3x per round, but a noisy size earns no plain "holds"


# ---------------------------------------------------------------------------- default backend


def test_default_backend_verdict_follows_the_measured_dispatch() -> None:
    flash = [size(t, fused=rounds(t / 100), math_=rounds(t / 30)) for t in (512, 1024)]
    assert claims(flash, "cuda")["default backend"].verdict == "holds"
    c = claims(flash, "cpu")["default backend"]
    assert c.verdict == "holds with a caveat" and "blocked CPU kernel" in c.caveat
    # cuDNN in half precision on a GPU (what an H200 does in float16)
    half = KernelSpec(heads=4, head_dim=64, dtype="float16")
    cud = [size(512, default="cudnn", fused=rounds(1), math_=rounds(3)),
           size(1024, default="cudnn", fused=rounds(2.3), math_=rounds(9))]
    c = claims(cud, "cuda", half)["default backend"]
    assert c.verdict == "does not hold here" and "cuDNN" in c.measured and "cuDNN" in c.caveat
    assert "float16" in c.caveat
    # float32: flash refuses (with torch's reason), the dispatch runs something else
    ref = [size(1024, default="cudnn", fused=rounds(2), math_=rounds(9), flash_status="refused",
                flash_reason="Expected query dtype to be float16 or bfloat16")]
    c = claims(ref, "cuda", KernelSpec(heads=4, head_dim=64, dtype="float32"))["default backend"]
    assert c.verdict == "does not hold here"
    # mixed: flash at one size, math at another
    mixed = [size(512, default="math", fused=rounds(3), math_=rounds(3)), flash[1]]
    c = claims(mixed, "cuda")["default backend"]
    assert c.verdict == "does not hold here"
    assert c.measured.startswith("the default dispatch ran math (MATH) at T = 512; flash (FLASH_ATTENTION) at T = 1024")


def test_unknown_dispatch_is_not_testable_and_sizes_must_ascend() -> None:
    s = size(1024, fused=rounds(10), math_=rounds(30))
    unknown = SizeResult(1024, 1024, s.rows, None, "output match", QUIET)
    assert claims([unknown])["default backend"].verdict == "not testable here"
    with pytest.raises(AttnInputError, match="ascending"):
        check_claims([s, s], SPEC, "cpu")


# ---------------------------------------------------------------------------- memory


def mem_sizes(fused_power: float, math_power: float, ts: tuple[int, ...] = (128, 256, 512, 1024)) -> list[SizeResult]:
    return [size(t, fused=rounds(t / 100), math_=rounds(t / 30), fused_peak=1e3 * t**fused_power,
                 math_peak=10.0 * t**math_power) for t in ts]


@pytest.mark.parametrize(("fused_power", "math_power", "device", "verdict"), [
    (1.0, 2.0, "cuda", "holds"),
    (1.0, 2.0, "cpu", "not testable here"),
    (2.0, 2.0, "cuda", "does not hold here"),
    (1.5, 2.0, "cuda", "holds with a caveat"),
    (1.0, 1.2, "cuda", "not testable here"),
])
def test_memory_verdict_follows_the_slopes_over_the_largest_sizes(fused_power: float, math_power: float,
                                                                   device: str, verdict: str) -> None:
    c = claims(mem_sizes(fused_power, math_power), device)["memory"]
    assert c.verdict == verdict, c
    assert f"T^{fused_power:.2f}" in c.measured and f"T^{math_power:.2f}" in c.measured
    assert "over T = 256–1024" in c.measured  # the 3 largest sizes, not the smallest
    ratio = (10.0 * 1024**math_power) / (1e3 * 1024**fused_power)
    assert f"({fmt_ratio(ratio)}×)" in c.measured


def test_memory_fit_ignores_the_small_sizes_where_fixed_costs_dominate() -> None:
    """A 50 MiB fixed cost at T = 16 and 32 bends the slope over all sizes below 1; over the largest
    three the fused path is still O(T) and math O(T²)."""
    sizes = mem_sizes(1.0, 2.0, (16, 32, 64, 128, 256))
    sizes = [s if s.L > 32 else size(s.L, fused=rounds(1), math_=rounds(1), fused_peak=50e6, math_peak=50e6)
             for s in sizes]
    assert claims(sizes)["memory"].verdict == "holds"


def test_memory_not_measured_or_materialising_default_is_not_testable() -> None:
    c = claims([size(t, fused=rounds(1), math_=rounds(3)) for t in (256, 512)])["memory"]
    assert c.verdict == "not testable here" and "not measured" in c.measured
    mat = [size(t, default="math", fused=rounds(3), math_=rounds(3), fused_peak=1e6 * t, math_peak=1e3 * t * t)
           for t in (256, 512)]
    assert claims(mat)["memory"].verdict == "not testable here"


# ---------------------------------------------------------------------------- the statistics


def test_median_interval_is_min_max_to_eight_rounds_then_order_statistics() -> None:
    s = spread([5.0, 1.0, 4.0, 2.0, 3.0])
    assert (s.median, s.lo, s.hi, s.n, s.k) == (3.0, 1.0, 5.0, 5, 1) and s.coverage == pytest.approx(0.9375)
    s = spread(list(range(9)))
    assert (s.lo, s.hi, s.k) == (1, 7, 2) and s.interval == "2nd–8th of 9" and s.coverage >= 0.95
    # the coverage is the binomial probability, checked by simulation
    rng = np.random.default_rng(0)
    for n in (5, 9):
        hits = 0
        for _ in range(4000):
            sp = spread(rng.exponential(size=n))
            hits += sp.lo <= math.log(2) <= sp.hi
        assert abs(hits / 4000 - spread(list(range(n))).coverage) < 0.02


def test_paired_ratio_pairs_rounds() -> None:
    a = BackendResult("math", 8, 8, "ran", times=(3.0, 6.0, 9.0), seconds=6.0)
    b = BackendResult("default", 8, 8, "ran", times=(1.0, 2.0, 3.0), seconds=2.0)
    r = paired_ratio(a, b)
    assert (r.median, r.lo, r.hi, r.n) == (3.0, 3.0, 3.0, 3)
    assert paired_ratio(a, BackendResult("flash", 8, 8, "refused")) is None


def test_noise_flags_name_the_smaller_size_that_was_as_slow() -> None:
    assert noise_flags([128, 256, 512, 1024], [7.86, 2.1, 4.3, 15.4]) == [None, 128.0, 128.0, None]
    assert noise_flags([16, 32, 64], [1.0, 2.0, 4.0]) == [None, None, None]
    assert noise_flags([64, 16, 32], [3.0, 1.0, 3.0]) == [32.0, None, None]  # unsorted input, ties


def test_guides_fitted_over_the_largest_sizes_not_anchored_at_an_inflated_small_one() -> None:
    """The audit's case: a T² guide anchored at an inflated T = 128 point predicted 503 ms at
    T = 1024 where 15.4 ms was measured. Fitted over the largest sizes (noise left out) it passes
    through what was measured."""
    ts, ys = [128, 256, 512, 1024], [7.86, 2.1, 4.3, 15.4]
    anchored = ys[0] * (1024 / 128) ** 2
    assert anchored == pytest.approx(503, rel=0.01)
    flags = noise_flags(ts, ys)
    trusted = [(t, y) for t, y, f in zip(ts, ys, flags, strict=True) if f is None]
    fit = growth_fit([t for t, _ in trusted], [y for _, y in trusted], slope=2, among=ts)
    assert fit.ts == (1024.0,) and fit.at(1024) == pytest.approx(15.4)
    # a clean power law: the free fit recovers it; its standard error is ~0
    free = growth_fit(ts, [3e-5 * t**2.0 for t in ts])
    assert free.slope == pytest.approx(2.0) and free.ts == (256.0, 512.0, 1024.0) and free.se < 1e-9
    assert growth_fit([1024], [1.0]) is None  # a free slope needs two points


@pytest.mark.parametrize(("x", "text"), [(3.34, "3.3"), (12.4, "12"), (0.0456, "0.046"), (9.96, "10"),
                                         (123.0, "120"), (2.0, "2.0"), (0.996, "1.0")])
def test_ratios_carry_two_significant_figures(x: float, text: str) -> None:
    assert fmt_ratio(x) == text


def test_boolean_mask_memory_caveat_names_the_converted_mask() -> None:
    """torch turns a boolean attn_mask into an additive L x S mask before any backend runs: the
    fused path's memory then has an O(T²) part, and the memory verdict says so."""
    boolean = KernelSpec(heads=4, head_dim=64, mask="boolean")
    c = claims(mem_sizes(1.0, 2.0), "cuda", boolean)["memory"]
    assert "additive L × S mask" in c.caveat and "4 MiB at T = 1024" in c.caveat
    assert "additive" not in claims(mem_sizes(1.0, 2.0), "cuda")["memory"].caveat


@pytest.mark.parametrize(("x", "text"), [(1234.5, "1230"), (14712.0, "14700"), (0.01234, "0.0123"), (157.0, "157"),
                                         (2.5, "2.5")])
def test_times_carry_three_significant_figures_without_an_exponent(x: float, text: str) -> None:
    from attncore.kernels.claims import fmt3

    assert fmt3(x) == text


def test_cpu_memory_caveat_explains_the_kernels_growing_blocks() -> None:
    """Below T = 768 torch's CPU flash kernel uses bigger blocks as T grows (the page's default
    T = 128..1024 measured a slope of 1.49): the caveat gives the per-thread sizes; beyond, not."""
    c = claims(mem_sizes(1.0, 2.0, (128, 256, 512, 1024)), "cpu")["memory"]
    assert "blocks grow with T until T = 768 (per thread 80 KiB at T = 256, 578 KiB at T = 1024)" in c.caveat
    c = claims(mem_sizes(1.0, 2.0, (1024, 2048, 4096)), "cpu")["memory"]
    assert "blocks grow" not in c.caveat and "come to" in c.caveat
    assert "blocks grow" not in claims(mem_sizes(1.0, 2.0), "cuda")["memory"].caveat


def test_speed_with_cudnn_as_default_says_whose_ratio_it_is_and_gives_flashs() -> None:
    """On an H200 in float16 the dispatch runs cuDNN: the verdict's ratio is cuDNN's, and the
    ratio of math to FlashAttention itself (forced) is given beside it."""
    half = KernelSpec(heads=4, head_dim=64, dtype="float16")
    s = size(16384, default="cudnn", fused=rounds(2.3), math_=rounds(9.2))
    flash = BackendResult("flash", 16384, 16384, "ran", times=tuple(rounds(3.7)), seconds=3.7e-3)
    s = SizeResult(s.L, s.S, tuple(flash if r.name == "flash" else r for r in s.rows), "cudnn", s.choice_source,
                   s.load)
    c = claims([s], "cuda", half)["speed"]
    assert c.verdict == "holds with a caveat" and "4.0× as long" in c.measured  # 4x, but cuDNN's
    assert f"math over flash (FLASH_ATTENTION) itself (forced): {fmt_ratio(9.2 / 3.7)}×" in c.measured
    assert "ran cuDNN (CUDNN_ATTENTION), not FlashAttention" in c.caveat


def test_memory_with_another_default_than_flash_names_it() -> None:
    half = KernelSpec(heads=4, head_dim=64, dtype="float16")
    sizes = [size(t, default="cudnn", fused=rounds(t / 100), math_=rounds(t / 30), fused_peak=1e3 * t,
                  math_peak=10.0 * t * t) for t in (1024, 2048, 4096)]
    c = claims(sizes, "cuda", half)["memory"]
    assert c.verdict == "holds with a caveat" and "ran cuDNN (CUDNN_ATTENTION) at these sizes" in c.caveat


def test_a_caveat_about_the_claims_edge_never_rounds_onto_it() -> None:
    """A ratio interval of 1.98–2.36x reaches below 2x; at two figures it would print as "2.0–2.4x"."""
    fused = rounds(10.0, spread_=0.0)
    math_ = [f * r for f, r in zip(fused, (1.98, 2.1, 2.2, 2.3, 2.36), strict=True)]
    c = claims([size(1024, fused=fused, math_=math_)])["speed"]
    assert c.verdict == "holds with a caveat" and "(1.98–2.36×) reaches outside the claimed 2–4×" in c.caveat


def test_default_backend_names_how_it_was_told_and_the_refusal_at_the_size_it_happened() -> None:
    refused = size(512, default="math", fused=rounds(3), math_=rounds(3), flash_status="refused",
                   flash_reason="Flash attention does not support dropout")
    ok = size(1024, fused=rounds(10), math_=rounds(30))
    c = claims([refused, ok], "cpu")["default backend"]
    assert c.verdict == "does not hold here"
    assert "math (MATH) ran because flash refused this call: Flash attention does not support dropout" in c.caveat
    # hand-built rows carry no bitwise comparison: the sentence names its source and claims no agreement
    assert c.measured.endswith("at T = 1024 (torch._fused_sdp_choice).")


def test_a_cpu_shows_the_cuda_kernels_speed_and_memory_numbers_but_does_not_judge_them() -> None:
    """The speed and memory claims are about Dao et al.'s CUDA kernel: on a CPU the verdict is "not
    testable here" whatever the numbers (inside the claim, below it, O(T²)), the measured sentence is
    the one a GPU gets, and the caveat passes no judgement on the claimed range; on CUDA the same numbers
    are judged."""
    for math_ms in (30.0, 12.0, 100.0):
        sizes = [size(512, fused=rounds(2.5), math_=rounds(math_ms / 4)),
                 size(1024, fused=rounds(10.0), math_=rounds(math_ms, spread_=0.1))]
        cpu, gpu = claims(sizes, "cpu")["speed"], claims(sizes, "cuda")["speed"]
        assert cpu.verdict == "not testable here" and gpu.verdict != "not testable here"
        assert cpu.measured == gpu.measured
        assert cpu.caveat.startswith(CPU_UNTESTABLE) and "claimed 2–4×" not in cpu.caveat
    for fused_power in (1.0, 1.5, 2.0):
        cpu, gpu = (claims(mem_sizes(fused_power, 2.0), d)["memory"] for d in ("cpu", "cuda"))
        assert cpu.verdict == "not testable here" and gpu.verdict != "not testable here"
        assert cpu.measured == gpu.measured and cpu.caveat.startswith(CPU_UNTESTABLE)
        assert "slope lies between" not in cpu.caveat
    # the default-backend claim is about torch's dispatch: a CPU still answers it, with its caveat
    flash = [size(t, fused=rounds(t / 100), math_=rounds(t / 30)) for t in (512, 1024)]
    assert claims(flash, "cpu")["default backend"].verdict == "holds with a caveat"
