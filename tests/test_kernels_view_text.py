"""Kernels page text built from the numbers: the caption's coverage is a true lower bound, and the
causal-mask sentence gives the fused kernel's share of the flops from the same model as GFLOP/s."""

from __future__ import annotations

import re

import pytest

from attncore.kernels import BackendResult, KernelSpec, MachineLoad, SizeResult
from attncore.kernels.cost import call_flops, full_flops
from attncore.kernels.results import spread
from ui.views import kernels as view


def one_size(n_rounds: int) -> SizeResult:
    times = tuple(1e-3 * (1 + 0.01 * i) for i in range(n_rounds))
    rows = tuple(BackendResult(name, 64, 64, "ran", times=times, seconds=spread(times).median)
                 for name in ("flash", "default"))
    return SizeResult(64, 64, rows, "flash", "torch._fused_sdp_choice", MachineLoad(0.1, 0.1, 2, 2))


@pytest.mark.parametrize("n", [3, 4, 5, 6, 7, 8, 9, 10])
def test_table_caption_coverage_never_rounds_above_the_binomial_probability(n: int) -> None:
    """The min–max of 5 rounds holds the median with probability 1 - 2/2^5 = 0.9375: the caption said
    "at least 94%" (rounded up); it must print a bound that is still true, 93.7%."""
    cap = view.table_caption([one_size(n)], KernelSpec(heads=4), "not measured", False, 2.0**30)
    shown = float(re.search(r"with at least ([\d.]+)% probability", cap).group(1)) / 100
    k = spread(range(n)).k
    # own computation: P(x_(k) <= median <= x_(n+1-k)) = 1 - 2 P(Binomial(n, 1/2) <= k - 1)
    exact = 1 - 2 * sum(__import__("math").comb(n, i) for i in range(k)) / 2**n
    assert shown <= exact < shown + 0.001
    if n == 5:
        assert "min–max of 5 rounds, which holds it with at least 93.7% probability" in cap


def test_causal_work_sentence_gives_the_cpu_flash_share_per_T() -> None:
    """torch's CPU flash kernel skips only whole 512-key blocks above a query block's diagonal: at
    T = 128…512 it does all 4·B·H·L·S·E flops, at 1024 three quarters. The sentence said "about
    half" at every T, while the table's GFLOP/s used these very counts."""
    spec = KernelSpec(heads=4, mask="causal")
    text = view.work_sentence(spec, "cpu", (128, 256, 512, 1024))
    shares = {t: call_flops("flash", spec, t, t, "cpu") / full_flops(spec, t, t) for t in (128, 256, 512, 1024)}
    assert shares == {128: 1.0, 256: 1.0, 512: 1.0, 1024: 0.75}
    assert "100% at T = 128, 256 and 512; 75% at T = 1024" in text
    assert "do about half of them" not in text
    gpu = view.work_sentence(spec, "cuda", (128, 1024))
    assert "about half of them: 50.4% at T = 128; 50% at T = 1024" in gpu  # (T + 1) / 2T of the pairs
    assert view.work_sentence(KernelSpec(heads=4), "cpu", (128,)).startswith("Both do the same 4·B·H·L·S·E")


def test_ratio_range_prints_one_number_where_both_ends_round_alike() -> None:
    """The table showed '1.3–1.3' for per-round ratios 1.26–1.34 (two significant figures each end);
    the claims already print such an interval as one number."""
    base = (1.00e-3, 1.00e-3, 1.00e-3, 1.00e-3, 1.00e-3)
    flash = (1.26e-3, 1.28e-3, 1.30e-3, 1.32e-3, 1.34e-3)
    math_ = (1.5e-3, 1.8e-3, 2.0e-3, 2.2e-3, 2.5e-3)
    rows = tuple(BackendResult(name, 64, 64, "ran", times=t, seconds=spread(t).median)
                 for name, t in (("flash", flash), ("math", math_), ("default", base)))
    df = view.table_frame([SizeResult(64, 64, rows, "flash", "torch._fused_sdp_choice")]).set_index("label")
    assert df.loc["flash (FLASH_ATTENTION)", "x_range"] == "1.3"
    assert df.loc["math (MATH)", "x_range"] == "1.5–2.5"
    assert df.loc["default dispatch", "x_range"] == "—"
