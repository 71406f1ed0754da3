"""attncore.gradients and the Saturation & gradients closed forms in attncore.theory.

Every statistical tolerance is derived from the sample size (k standard errors, k = 5),
every closed form is checked against a measurement or an independent reference.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from attncore import theory
from attncore.attention import attention
from attncore.dot_products import dot_histograms, dot_product_samples, dot_std_sweep, std_with_error
from attncore.errors import AttnInputError, ResourceLimitError
from attncore.gradients import (
    gradient_sweep,
    jacobian_frobenius,
    jacobian_vs_scale,
    naive_softmax,
    parse_scores,
    saturation_crossing,
    saturation_curve,
    softmax_jacobian,
    softmax_vjp,
    stable_softmax,
    temperature_rows,
)
from attncore.normalizers import Softmax
from attncore.overflow import overflow_rows, overflow_sweep

K = 5.0  # standard errors allowed for every Monte Carlo comparison
SOURCE = [9.2, -3.1, 8.8, -5.4, 1.2]
SOURCE_PRINTED_SCALED = [0.31, 0.07, 0.30, 0.05, 0.12]
CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# --------------------------------------------------------------------------- Jacobian


def test_softmax_jacobian_equals_autograd() -> None:
    x = torch.randn(3, 2, 7, generator=gen(1), dtype=torch.float64) * 3  # (B, L, n)
    J = softmax_jacobian(torch.softmax(x, -1))  # (B, L, n, n)
    for b in range(3):
        for i in range(2):
            ref = torch.autograd.functional.jacobian(lambda r: torch.softmax(r, -1), x[b, i])
            torch.testing.assert_close(J[b, i], ref, rtol=0, atol=1e-14)
    assert torch.allclose(J, J.transpose(-1, -2)) and torch.allclose(J.sum(-1), torch.zeros(3, 2, 7, dtype=J.dtype))


def test_softmax_vjp_equals_autograd() -> None:
    x = torch.randn(4, 9, generator=gen(2), dtype=torch.float64, requires_grad=True)
    g = torch.randn(4, 9, generator=gen(3), dtype=torch.float64)
    p = torch.softmax(x, -1)
    (ref,) = torch.autograd.grad((p * g).sum(), x)
    torch.testing.assert_close(softmax_vjp(p.detach(), g), ref, rtol=0, atol=1e-14)


@pytest.mark.parametrize("scale", [0.0, 0.3, 1.0, 4.0, 20.0])
def test_jacobian_frobenius_equals_the_materialised_norm(scale: float) -> None:
    p = torch.softmax(torch.randn(50, 12, generator=gen(4), dtype=torch.float64) * scale, -1)
    ref = softmax_jacobian(p).flatten(-2).norm(dim=-1)
    torch.testing.assert_close(jacobian_frobenius(p), ref, rtol=1e-10, atol=1e-15)
    if scale <= 4:  # ... and the short form sum p^2 - 2 sum p^3 + (sum p^2)^2 while it does not cancel
        s2, s3 = (p**2).sum(-1), (p**3).sum(-1)
        torch.testing.assert_close(ref, (s2 - 2 * s3 + s2**2).clamp_min(0).sqrt(), rtol=1e-6, atol=1e-9)


def test_jacobian_frobenius_limits() -> None:
    for n in (2, 5, 64):
        uniform = torch.full((n,), 1.0 / n, dtype=torch.float64)
        assert float(jacobian_frobenius(uniform)) == pytest.approx(theory.uniform_row_jacobian_norm(n), rel=1e-12)
    one_hot = torch.tensor([0.0, 1.0, 0.0])
    assert float(jacobian_frobenius(one_hot)) == 0.0
    two = torch.tensor([0.3, 0.7], dtype=torch.float64)
    assert float(jacobian_frobenius(two)) == pytest.approx(2 * 0.3 * 0.7)


def test_jacobian_frobenius_keeps_precision_near_one_hot_in_float32() -> None:
    """The short form cancels to 0 in float32; attncore's form matches the float64 closed form."""
    x = torch.tensor([8.0, 15.0, 30.0, 40.0])  # norms down to 1e-17; beyond, p^2 underflows float32
    logits = torch.zeros(4, 4)
    logits[:, 0] = x
    p = stable_softmax(logits)  # float32
    expect = theory.saturation_jacobian_norm(x.double().numpy(), 4)
    np.testing.assert_allclose(jacobian_frobenius(p).numpy(), expect, rtol=1e-5)
    s2, s3 = (p**2).sum(-1), (p**3).sum(-1)
    short = (s2 - 2 * s3 + s2**2).clamp_min(0).sqrt()
    assert abs(float(short[2]) - expect[2]) > 0.5 * expect[2]  # the short form has lost the value


def test_fully_masked_row_gives_zeros_not_nan() -> None:
    scores = torch.full((2, 5), float("-inf"))
    scores[1, :2] = torch.tensor([1.0, 2.0])
    p = Softmax()(scores)
    assert torch.equal(p[0], torch.zeros(5)) and not torch.isnan(p).any()
    assert torch.equal(softmax_jacobian(p)[0], torch.zeros(5, 5))
    assert float(jacobian_frobenius(p)[0]) == 0.0 and torch.isfinite(jacobian_frobenius(p)).all()


def test_dtype_and_device_follow_the_input() -> None:
    p = torch.softmax(torch.randn(3, 4, generator=gen(), dtype=torch.float64), -1)
    assert softmax_jacobian(p).dtype == torch.float64 and jacobian_frobenius(p).dtype == torch.float64
    sc = saturation_curve(torch.linspace(0, 5, 11, dtype=torch.float64), 4)
    assert sc.top.dtype == torch.float64 and sc.top.device == torch.device("cpu")
    assert dot_product_samples(8, 10, dtype=torch.float64).dtype == torch.float64


def test_jacobian_over_the_budget_is_refused() -> None:
    with pytest.raises(ResourceLimitError, match="limit"):
        softmax_jacobian(torch.full((64, 4096), 1 / 4096))


# --------------------------------------------------------------------------- q·k statistics


@pytest.mark.parametrize(("d", "vq", "vk"), [(1, 1.0, 1.0), (16, 2.0, 0.5), (256, 1.0, 1.0), (64, 0.25, 3.0)])
def test_dot_product_moments_match_theory(d: int, vq: float, vk: float) -> None:
    n = 40_000
    x = dot_product_samples(d, n, var_q=vq, var_k=vk, seed=11).double()
    var = theory.dot_product_variance(d, vq, vk)
    assert abs(float(x.mean())) < K * math.sqrt(var / n)
    s, se = std_with_error(x)
    expect_se = theory.sample_std_error(d, n, vq, vk)
    assert abs(s - math.sqrt(var)) < K * expect_se
    assert se == pytest.approx(expect_se, rel=0.25)  # the measured error bar agrees with the theory's


def test_dot_product_kurtosis_is_three_plus_six_over_d() -> None:
    n, d = 200_000, 2
    x = dot_product_samples(d, n, seed=5).double()
    kurt = float((x**4).mean() / (x**2).mean() ** 2)
    # Kurtosis of a sum of d products is 3 + 6/d = 6 at d = 2, a Gaussian would give 3.
    assert kurt == pytest.approx(theory.dot_product_kurtosis(d), rel=0.1)
    assert abs(kurt - 3.0) > 1.0


def test_samples_are_seeded_and_chunking_does_not_change_them() -> None:
    a = dot_product_samples(4096, 1100, seed=3)  # 1024 rows per block: two blocks
    b = dot_product_samples(4096, 1100, seed=3)
    c = dot_product_samples(4096, 1100, seed=4)
    assert torch.equal(a, b) and not torch.equal(a, c)
    g = torch.Generator().manual_seed(3)
    q = torch.randn(1024, 4096, generator=g)
    k = torch.randn(1024, 4096, generator=g)
    torch.testing.assert_close(a[:1024], (q * k).sum(-1))


def _bin_probabilities(edges: np.ndarray, density, sub: int = 400) -> np.ndarray:
    """Integrate a density over each bin with the midpoint rule (never touches the edges)."""
    lo, hi = edges[:-1], edges[1:]
    t = (np.arange(sub) + 0.5) / sub
    pts = lo[:, None] + (hi - lo)[:, None] * t[None, :]
    return np.asarray(density(pts.ravel())).reshape(pts.shape).mean(1) * (hi - lo)


@pytest.mark.parametrize("d", [1, 4, 64])
def test_histogram_matches_the_exact_density(d: int) -> None:
    n, bins = 100_000, 40
    h = dot_histograms(d, n, bins, seed=21)
    p = _bin_probabilities(h.edges_raw, lambda x: theory.dot_product_density(x, d))
    counts = h.density_raw * n * np.diff(h.edges_raw)
    sd = np.sqrt(n * p * (1 - p)) + 1.0
    assert np.all(np.abs(counts - n * p) < K * sd), np.max(np.abs(counts - n * p) / sd)
    # The scaled histogram is the same draw divided by sqrt(d): it integrates to the same mass.
    assert np.sum(h.density_scaled * np.diff(h.edges_scaled)) == pytest.approx(np.sum(counts) / n)
    assert h.outside == n - int(round(counts.sum()))


def test_histogram_rejects_the_gaussian_at_d_1() -> None:
    """At d = 1 the CLT Gaussian is visibly wrong, which is why the page draws the exact law too."""
    n = 100_000
    h = dot_histograms(1, n, 40, seed=21)
    p = _bin_probabilities(h.edges_raw, lambda x: theory.normal_density(x, 1.0))
    counts = h.density_raw * n * np.diff(h.edges_raw)
    assert np.max(np.abs(counts - n * p) / np.sqrt(n * p * (1 - p) + 1)) > 20


@pytest.mark.parametrize("d", [1, 2, 3, 10, 101])
def test_exact_density_matches_scipy(d: int) -> None:
    special = pytest.importorskip("scipy.special")
    u = np.array([0.05, 0.7, 2.0, 9.0, 40.0])
    nu = (d - 1) / 2
    ref = u**nu * special.kv(nu, u) / (math.sqrt(math.pi) * math.gamma(d / 2) * 2**nu)
    np.testing.assert_allclose(theory.dot_product_density(u, d), ref, rtol=1e-9)
    np.testing.assert_allclose(theory.dot_product_density(-u, d), ref, rtol=1e-9)


@pytest.mark.parametrize(("d", "vq", "vk"), [(2, 1.0, 1.0), (7, 2.0, 0.5), (64, 1.0, 1.0), (4096, 0.5, 0.5)])
def test_exact_density_integrates_to_one_with_variance_d(d: int, vq: float, vk: float) -> None:
    s = math.sqrt(d * vq * vk)
    x = np.linspace(-12 * s, 12 * s, 40_001)
    f = np.asarray(theory.dot_product_density(x, d, vq, vk))
    assert np.trapezoid(f, x) == pytest.approx(1.0, abs=1e-5)
    assert np.trapezoid(f * x**2, x) == pytest.approx(d * vq * vk, rel=1e-4)
    # d = 2 has the closed form e^{-|x|}/2 (a Laplace law) for unit variances.
    if (d, vq, vk) == (2, 1.0, 1.0):
        np.testing.assert_allclose(f, 0.5 * np.exp(-np.abs(x)), rtol=1e-9, atol=1e-300)


def test_std_sweep_tracks_sqrt_d() -> None:
    ds, n = [1, 4, 64, 1024], 2000
    sw = dot_std_sweep(ds, n, var_q=2.0, seed=8)
    for i, d in enumerate(ds):
        se = theory.sample_std_error(d, n, 2.0, 1.0)
        assert abs(sw.std_raw[i] - theory.dot_product_std(d, 2.0)) < K * se
        assert abs(sw.std_scaled[i] - math.sqrt(2.0)) < K * se / math.sqrt(d)


def test_monte_carlo_budget_and_bad_arguments() -> None:
    with pytest.raises(ResourceLimitError, match=r"samples × d would be 4\.1G; the limit is 33\.6M"):
        dot_product_samples(4096, 1_000_000)
    with pytest.raises(ResourceLimitError, match="Reduce the samples per d"):
        dot_std_sweep([4096, 2048], 10_000)
    with pytest.raises(AttnInputError, match="from 1 to 4096"):
        dot_product_samples(5000, 10)
    with pytest.raises(AttnInputError, match="variance"):
        dot_product_samples(4, 10, var_q=float("nan"))
    with pytest.raises(AttnInputError, match="bins"):
        dot_histograms(4, 100, 0)


# --------------------------------------------------------------------------- saturation


@pytest.mark.parametrize("n", [2, 4, 100])
def test_saturation_curve_matches_the_closed_form(n: int) -> None:
    x = torch.linspace(0, 40, 801, dtype=torch.float64)
    sc = saturation_curve(x, n)
    xs = x.numpy()
    np.testing.assert_allclose(sc.top.numpy(), theory.saturation_top_weight(xs, n), rtol=1e-12)
    np.testing.assert_allclose(sc.other.numpy(), theory.saturation_other_weight(xs, n), rtol=1e-10)
    np.testing.assert_allclose(sc.jac_norm.numpy(), theory.saturation_jacobian_norm(xs, n), rtol=1e-9)
    for level in (0.9, 0.99, 0.999):
        crossing = saturation_crossing(sc.x, sc.top, level)
        assert crossing == pytest.approx(theory.saturation_threshold(n, level), abs=2e-3)


def test_saturation_threshold_for_the_source_exercise() -> None:
    # softmax([x, 0, 0, 0]) passes 0.99 at x = ln(0.99 * 3 / 0.01) = ln 297.
    assert theory.saturation_threshold(4, 0.99) == pytest.approx(math.log(297))
    assert theory.saturation_top_weight(math.log(297), 4) == pytest.approx(0.99)
    sc = saturation_curve(torch.linspace(0, 10, 81, dtype=torch.float64), 4)
    assert saturation_crossing(sc.x, sc.top, 0.99) == pytest.approx(5.6937, abs=0.01)
    assert saturation_crossing(sc.x, sc.top, 0.9999999) is None


def test_worked_example_from_the_source_text() -> None:
    rows = temperature_rows(SOURCE, 64)
    assert rows.divisors == (1.0, 4.0, 8.0, 16.0)
    w = rows.weights.numpy()
    np.testing.assert_allclose(w[0], [0.599, 0.000, 0.401, 0.000, 0.000], atol=5e-4)
    np.testing.assert_allclose(w[2], [0.371, 0.080, 0.353, 0.060, 0.136], atol=5e-4)
    np.testing.assert_allclose(w.sum(1), 1.0, rtol=1e-12)
    # What source text 001 prints for the scaled row is not a softmax row.
    assert sum(SOURCE_PRINTED_SCALED) == pytest.approx(0.85)
    assert np.max(np.abs(w[2] - SOURCE_PRINTED_SCALED)) > 0.05
    # Independent reference: torch's softmax of the divided scores.
    ref = torch.softmax(torch.tensor(SOURCE, dtype=torch.float64)[None] / torch.tensor(rows.divisors)[:, None], -1)
    torch.testing.assert_close(rows.weights, ref, rtol=0, atol=1e-15)
    # A larger temperature flattens: entropy rises and the max weight falls along tau = 0.5, 1, 2 sqrt(d).
    assert np.all(np.diff(rows.entropy.numpy()) > 0) and np.all(np.diff(rows.max_weight.numpy()) < 0)


@pytest.mark.parametrize(("text", "expect"), [
    ("9.2, -3.1, 8.8", [9.2, -3.1, 8.8]),
    (" 1 2\t3 ", [1.0, 2.0, 3.0]),
    ("1e2; -.5, +4.", [100.0, -0.5, 4.0]),
])
def test_parse_scores_accepts_plain_numbers(text: str, expect: list[float]) -> None:
    assert parse_scores(text) == expect


@pytest.mark.parametrize(("text", "fragment"), [
    ("", "at least two scores"),
    ("   ", "at least two scores"),
    ("1, two, 3", "Score 2 ('two') is not a number"),
    ("1, nan", "Score 2 ('nan') is not a finite number"),
    ("inf, 1", "Score 1 ('inf') is not a finite number"),
    ("1, -Infinity", "not a finite number"),
    ("0x10, 1", "not a number"),
    ("5", "at least two scores to compare"),
    (", ".join(["1"] * 65), "65 scores were given; the limit is 64"),
    ("1" * 3000, "3,000 characters long; the limit is 2,000"),
    ("1e400, 2", "beyond ±1M"),
    ("2e6, 1", "beyond ±1M"),
])
def test_parse_scores_refuses_bad_input_with_a_plain_message(text: str, fragment: str) -> None:
    with pytest.raises(AttnInputError) as err:
        parse_scores(text)
    assert fragment in str(err.value)


# --------------------------------------------------------------------------- Jacobian vs scale


def test_jacobian_vs_scale_meets_both_limits() -> None:
    n, trials = 4, 20_000
    sw = jacobian_vs_scale([0.05, 64.0], n, trials, seed=2, dtype=torch.float64)
    small = theory.jacobian_norm_small_scale(0.05, n)
    assert abs(sw.jac_mean[0] - small) < K * sw.jac_se[0] + 1e-4
    assert abs(sw.max_mean[0] - theory.max_weight_small_scale(0.05, n)) < K * sw.max_se[0] + 1e-3
    # Large sigma: the mean decays like f_G(0)/sigma (1/sigma^2 corrections: allow 5%).
    assert sw.jac_mean[1] == pytest.approx(theory.jacobian_norm_large_scale(64.0, n), rel=0.05, abs=K * sw.jac_se[1])
    one_minus = 1 - sw.max_mean[1]
    assert one_minus == pytest.approx(1 - theory.max_weight_large_scale(64.0, n), rel=0.05, abs=K * sw.max_se[1])


def test_jacobian_norm_is_not_monotonic_in_the_scale() -> None:
    """For many keys ||J|| first grows as the flat row sharpens, then vanishes as it turns one-hot."""
    sw = jacobian_vs_scale(np.geomspace(0.01, 100, 25), 64, 2000, seed=1)
    peak = int(np.argmax(sw.jac_mean))
    assert 0 < peak < 24
    assert sw.jac_mean[peak] > 2 * sw.jac_mean[0] and sw.jac_mean[peak] > 2 * sw.jac_mean[-1]
    assert sw.jac_mean[0] == pytest.approx(theory.uniform_row_jacobian_norm(64), rel=1e-3)


def test_gap_density_and_expected_max_closed_forms() -> None:
    assert theory.top2_gap_density_at_zero(2) == pytest.approx(1 / math.sqrt(math.pi), rel=1e-9)
    assert theory.expected_max_normal(2) == pytest.approx(1 / math.sqrt(math.pi), rel=1e-9)
    assert theory.expected_max_normal(1) == pytest.approx(0.0, abs=1e-12)
    z = torch.randn(200_000, 8, generator=gen(9), dtype=torch.float64)
    mx = z.max(-1).values
    assert theory.expected_max_normal(8) == pytest.approx(float(mx.mean()), abs=K * float(mx.std()) / math.sqrt(2e5))
    q = torch.randn(200_000, 8, generator=gen(10), dtype=torch.float64).norm(dim=-1)
    inv = 1 / q
    assert theory.inverse_chi_mean(8) == pytest.approx(float(inv.mean()), abs=K * float(inv.std()) / math.sqrt(2e5))


# --------------------------------------------------------------------------- gradients through attention


@pytest.mark.parametrize("scale", [None, 1.0])
def test_attention_gradients_equal_torch_sdpa(scale: float | None) -> None:
    g = gen(12)
    q, k, v = (torch.randn(2, 3, 6, 32, generator=g, dtype=torch.float64) for _ in range(3))
    probe = torch.randn(2, 3, 6, 32, generator=g, dtype=torch.float64)
    grads = []
    for fn in (lambda a, b: attention(a, b, v, scale=scale), lambda a, b: F.scaled_dot_product_attention(a, b, v, scale=scale)):
        a, b = q.clone().requires_grad_(), k.clone().requires_grad_()
        grads.append(torch.autograd.grad((fn(a, b) * probe).sum(), (a, b)))
    for ours, ref in zip(*grads, strict=True):
        torch.testing.assert_close(ours, ref, rtol=1e-10, atol=1e-12)


def test_gradient_sweep_scaled_is_flat_and_unscaled_saturates() -> None:
    gs = gradient_sweep([4, 1024], keys=16, batch=64, seed=0)
    assert gs.chain_rule_error < 1e-5
    st = gs.stats
    # Scaled: nothing saturates and the typical gradient does not depend on d.
    assert st[("scaled", "saturated")].mean.max() < 0.01
    gq = st[("scaled", "grad_q")]
    assert abs(gq.mean[1] - gq.mean[0]) < K * math.hypot(gq.se[0], gq.se[1]) + 0.1 * gq.mean[0]
    # Unscaled at d = 1024: most rows saturate and the median gradient collapses ...
    assert st[("unscaled", "saturated")].mean[1] > 0.5
    assert st[("unscaled", "grad_q")].median[1] < 0.01 * st[("scaled", "grad_q")].median[1]
    assert st[("unscaled", "jac")].median[1] < 1e-3
    # ... while the mean does not, carried by rare near ties.
    assert st[("unscaled", "grad_q")].mean[1] > st[("scaled", "grad_q")].mean[1]


def test_gradient_sweep_mean_jacobian_follows_the_large_d_theory() -> None:
    gs = gradient_sweep([1024], keys=8, batch=512, seed=4)
    j = gs.stats[("unscaled", "jac")]
    expect = theory.unscaled_jacobian_norm_large_d(1024, 8)
    assert abs(j.mean[0] - expect) < K * j.se[0] + 0.05 * expect
    mw = gs.stats[("unscaled", "max")]
    assert abs(mw.mean[0] - theory.unscaled_max_weight_large_d(1024, 8)) < K * mw.se[0] + 0.05 * (1 - mw.mean[0])


def test_gradient_sweep_is_seeded_and_runs_in_half_precision() -> None:
    a = gradient_sweep([8, 64], keys=4, batch=8, seed=1)
    b = gradient_sweep([8, 64], keys=4, batch=8, seed=1)
    c = gradient_sweep([8, 64], keys=4, batch=8, seed=2)
    key = ("scaled", "grad_k")
    assert np.array_equal(a.stats[key].mean, b.stats[key].mean)
    assert not np.array_equal(a.stats[key].mean, c.stats[key].mean)
    h = gradient_sweep([8, 64], keys=4, batch=8, seed=1, dtype=torch.bfloat16)
    assert all(np.isfinite(s.mean).all() for s in h.stats.values())
    np.testing.assert_allclose(h.stats[("scaled", "max")].mean, a.stats[("scaled", "max")].mean, rtol=0.05)


def test_gradient_sweep_budget() -> None:
    with pytest.raises(ResourceLimitError, match="batch × keys"):
        gradient_sweep([4096, 2048, 1024], keys=1024, batch=512)
    with pytest.raises(AttnInputError, match="level"):
        gradient_sweep([4], keys=4, batch=4, level=1.0)


# --------------------------------------------------------------------------- overflow


TOL = {"float16": 2e-3, "bfloat16": 2e-2, "float32": 1e-6, "float64": 1e-14}


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64"])
def test_naive_softmax_overflows_exactly_at_log_max(dtype: str) -> None:
    thr = theory.exp_overflow_logit(dtype)
    ov = overflow_sweep([thr - 0.6, thr + 0.6, 5000.0], n=4, dtypes=(dtype,))
    assert np.isfinite(ov.naive_error[0, 0]) and ov.naive_error[0, 0] < TOL[dtype]
    assert np.isnan(ov.naive_error[0, 1]) and np.isnan(ov.naive_error[0, 2])
    assert ov.naive_nonfinite[0, 1] >= 1
    # The max-subtracted form never overflows and stays at the dtype's rounding error.
    assert np.all(ov.stable_nonfinite == 0) and np.all(ov.stable_error < TOL[dtype])


def test_thresholds_are_log_of_the_largest_finite_value() -> None:
    assert theory.exp_overflow_logit("float16") == pytest.approx(math.log(65504))
    for name, dt in (("bfloat16", torch.bfloat16), ("float32", torch.float32), ("float64", torch.float64)):
        assert theory.exp_overflow_logit(name) == pytest.approx(math.log(torch.finfo(dt).max))
    with pytest.raises(ValueError):
        theory.exp_overflow_logit("int8")


def test_float16_sum_overflows_before_any_single_exp() -> None:
    x = torch.full((4,), 11.0, dtype=torch.float16)  # e^11 = 59874 fits, 4 e^11 does not
    assert torch.isfinite(torch.exp(x)).all()
    assert torch.equal(naive_softmax(x), torch.zeros(4, dtype=torch.float16))
    torch.testing.assert_close(stable_softmax(x), torch.full((4,), 0.25, dtype=torch.float16))


def test_overflow_rows_for_the_table() -> None:
    rows = {(r.dtype, r.method): r for r in overflow_rows(100.0)}
    for t in ("float16", "bfloat16", "float32"):
        assert not rows[(t, "naive")].finite and math.isinf(rows[(t, "naive")].exp_x)
    assert rows[("float64", "naive")].finite and rows[("float64", "naive")].max_error < 1e-15
    for t in ("float16", "bfloat16", "float32", "float64"):
        r = rows[(t, "stable")]
        assert r.finite and r.weights[0] == pytest.approx(1.0) and r.row_sum == pytest.approx(1.0)
    with pytest.raises(AttnInputError):
        overflow_rows(float("inf"))


# --------------------------------------------------------------------------- CUDA


@CUDA
def test_cuda_paths() -> None:
    x = dot_product_samples(64, 1000, seed=0, device="cuda")
    assert x.device.type == "cuda"
    h = dot_histograms(64, 20_000, 30, device="cuda")
    assert np.isfinite(h.density_raw).all() and abs(h.std_raw - 8) < K * theory.sample_std_error(64, 20_000)
    p = torch.softmax(torch.randn(5, 7, device="cuda", dtype=torch.float64), -1)
    torch.testing.assert_close(jacobian_frobenius(p), softmax_jacobian(p).flatten(-2).norm(dim=-1))
    gs = gradient_sweep([4, 256], keys=8, batch=16, device="cuda")
    assert gs.chain_rule_error < 1e-4
    sw = jacobian_vs_scale([0.1, 10.0], 8, 500, device="cuda")
    assert np.isfinite(sw.jac_mean).all()
    ov = overflow_sweep([5.0, 100.0], device="cuda")
    assert np.isnan(ov.naive_error[2, 1]) and np.isfinite(ov.stable_error).all()
