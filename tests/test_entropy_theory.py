"""attncore.row_theory (exact expectations by quadrature) and the closed forms in attncore.theory."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from attncore.errors import AttnInputError
from attncore.row_theory import (
    chi2_nodes,
    gaussian_row_expectations,
    sweep_theory,
    sweep_theory_given_queries,
)
from attncore.sweeps import SweepSpec, query_norms, run_sweep
from attncore.theory import (
    entropy_asymptote,
    entropy_corrected,
    freezing_length,
    fully_scaled_multiplier,
    gaussian_max_moment,
    margin_for_half_weight,
    max_weight_asymptote,
    output_std_lognormal,
    peak_weight,
    scaled_chi2_mgf,
    ssmax_margin_for_half_weight,
)

Z = 4.5


def _gauss_avg(f, var: float, half_width: float = 40.0, m: int = 400_001) -> float:
    """E f(D) for D ~ N(0, var) on a fine grid (an independent, brute-force integral)."""
    d = np.linspace(-half_width, half_width, m)
    dens = np.exp(-d * d / (2 * var)) / math.sqrt(2 * math.pi * var)
    return float(np.sum(dens * f(d)) * (d[1] - d[0]))


@pytest.mark.parametrize("s2", [0.25, 1.0, 4.0, 16.0])
def test_two_keys_match_one_dimensional_integrals(s2: float) -> None:
    # n = 2: p = sigmoid(x1 - x2), x1 - x2 ~ N(0, 2 s2)
    sig = lambda d: 1 / (1 + np.exp(-d))  # noqa: E731
    def h(d):
        p = np.clip(sig(d), 1e-300, 1 - 1e-16)
        return -(p * np.log(p) + (1 - p) * np.log1p(-p))
    got = gaussian_row_expectations([2], s2)
    assert got["max_weight"][0] == pytest.approx(_gauss_avg(lambda d: sig(np.abs(d)), 2 * s2), rel=2e-5)
    assert got["entropy"][0] == pytest.approx(_gauss_avg(h, 2 * s2), rel=1e-6)
    assert got["sum_sq"][0] == pytest.approx(_gauss_avg(lambda d: sig(d) ** 2 + sig(-d) ** 2, 2 * s2), rel=1e-6)


def test_limits_one_key_and_equal_logits() -> None:
    one = gaussian_row_expectations([1], 2.0)
    assert (one["entropy"][0], one["max_weight"][0], one["sum_sq"][0], one["row_sum"][0]) == \
        pytest.approx((0.0, 1.0, 1.0, 1.0), abs=1e-9)
    # softmax1 with one key: E sigmoid(x) = 1/2 for any symmetric x
    s1 = gaussian_row_expectations([1], 3.0, normalizer="softmax1")
    assert s1["row_sum"][0] == pytest.approx(0.5, abs=1e-7)
    assert s1["max_weight"][0] == pytest.approx(0.5, abs=1e-7)
    ns = np.array([1, 7, 1000])
    flat = gaussian_row_expectations(ns, 0.0)
    np.testing.assert_allclose(flat["entropy"], np.log(ns), atol=1e-12)
    np.testing.assert_allclose(flat["max_weight"], 1 / ns)
    flat1 = gaussian_row_expectations(ns, 0.0, normalizer="softmax1")
    np.testing.assert_allclose(flat1["row_sum"], ns / (ns + 1.0))


@pytest.mark.parametrize(("s2", "n"), [(1.0, 16), (4.0, 16), (1.0, 256), (64.0, 256)])
def test_quadrature_matches_monte_carlo(s2: float, n: int) -> None:
    g = torch.Generator().manual_seed(7)
    rows = 100_000 if n == 16 else 20_000
    x = torch.randn(rows, n, generator=g, dtype=torch.float64) * math.sqrt(s2)
    samples = {}
    p = torch.softmax(x, dim=1)
    samples["softmax"] = {"entropy": -(torch.special.xlogy(p, p)).sum(1), "max_weight": p.amax(1),
                          "sum_sq": (p * p).sum(1)}
    p1 = torch.softmax(torch.cat([x, torch.zeros(rows, 1, dtype=x.dtype)], 1), 1)[:, :n]
    samples["softmax1"] = {"max_weight": p1.amax(1), "sum_sq": (p1 * p1).sum(1), "row_sum": p1.sum(1)}
    w = torch.sigmoid(x - math.log(n))
    wn = w / w.sum(1, keepdim=True)
    samples["sigmoid"] = {"entropy": -(torch.special.xlogy(wn, wn)).sum(1), "max_weight": w.amax(1),
                          "sum_sq": (w * w).sum(1), "row_sum": w.sum(1)}
    for norm, stats in samples.items():
        exact = gaussian_row_expectations([n], s2, normalizer=norm)
        for k, v in stats.items():
            sem = float(v.std()) / math.sqrt(rows)
            assert abs(float(v.mean()) - exact[k][0]) < Z * sem + 1e-9, (norm, k, float(v.mean()), exact[k][0])


def test_large_n_closed_forms_and_their_corrections() -> None:
    ns = np.array([1e3, 1e4, 1e5, 1e6])
    ex = gaussian_row_expectations(ns, 1.0)
    # the 1/n term leaves an O(1/n^2) error
    err_asym = np.abs(entropy_asymptote(ns, 1.0) - ex["entropy"])
    err_corr = np.abs(entropy_corrected(ns, 1.0) - ex["entropy"])
    assert np.all(err_corr < 0.05 * err_asym) and err_corr[1] < 1e-5
    # log-normal output rule, with its predicted relative correction -(2e^2 - 3e + 1)/n
    rel = ex["sum_sq"] / np.asarray(output_std_lognormal(ns, 1.0)) ** 2 - 1
    pred = -(2 * math.e**2 - 3 * math.e + 1) / ns
    np.testing.assert_allclose(rel[1:], pred[1:], rtol=0.03)
    # the Gumbel max-weight asymptote is within 15% at n = 1e6, and improving
    r = np.abs(np.asarray(max_weight_asymptote(ns, 1.0)) / ex["max_weight"] - 1)
    assert r[-1] < 0.15 and r[-1] < r[0]


def test_frozen_rows_stay_sharp() -> None:
    # unscaled d = 64 logits (sigma^2 = 64): far below e^{32}, the entropy stays O(1)
    ex = gaussian_row_expectations([16, 4096, 2**20], 64.0)
    assert np.all(ex["entropy"] < 2.0) and np.all(ex["max_weight"] > 0.3)
    assert freezing_length(64.0) == pytest.approx(math.exp(32))


def test_chi2_nodes_integrate_moments_and_the_mgf() -> None:
    for d in (1, 8, 64, 1024):
        x, w = chi2_nodes(d, 6)
        assert np.sum(w) == pytest.approx(1.0)
        assert np.sum(w * x) == pytest.approx(1.0, rel=1e-10)
        assert np.sum(w * x**2) == pytest.approx(1 + 2 / d, rel=1e-10)
        assert np.sum(w * x**3) == pytest.approx((1 + 2 / d) * (1 + 4 / d), rel=1e-10)
    x, w = chi2_nodes(64, 10)
    assert np.sum(w * np.exp(x)) == pytest.approx(scaled_chi2_mgf(1.0, 64), rel=1e-8)
    assert scaled_chi2_mgf(40.0, 64) == math.inf


def test_sweep_theory_columns_agree_with_each_other() -> None:
    ns = [16, 256, 8192, 65536]
    th = sweep_theory(ns, d=64, temperature=2.0)
    np.testing.assert_allclose(th["sigma2"], 0.25)
    np.testing.assert_allclose(th["normalized_entropy"], th["entropy"] / np.log(ns))
    np.testing.assert_allclose(th["output_std"], np.sqrt(th["sum_sq"]))
    np.testing.assert_allclose(th["row_sum"], 1.0)
    np.testing.assert_allclose(th["effective_support"], np.exp(th["entropy"]))
    assert np.all(np.diff(th["entropy"]) > 0) and np.all(np.diff(th["max_weight"]) < 0)
    ll = sweep_theory([4096, 8192, 2**24], d=64, scale_rule="llama4")
    np.testing.assert_allclose(ll["sigma2"], [1.0, (1 + 0.1 * math.log(2)) ** 2, (1 + 0.1 * math.log(2049)) ** 2])
    ss = sweep_theory([16, 1024], d=64, scale_rule="ssmax", ssmax_s=0.5)
    np.testing.assert_allclose(ss["sigma2"], (0.5 * np.log([16, 1024])) ** 2)
    with pytest.raises(AttnInputError):
        sweep_theory([0], d=64)
    with pytest.raises(AttnInputError):
        sweep_theory([16], d=64, temperature=0.0)
    with pytest.raises(AttnInputError):
        gaussian_row_expectations([16], float("nan"))


def test_figure1_and_margin_closed_forms() -> None:
    assert round(float(peak_weight(100)), 3) == 0.600 and round(float(peak_weight(1000)), 3) == 0.129
    assert float(peak_weight(1e6, s=0.43)) > 0.999
    assert float(margin_for_half_weight(1001)) == pytest.approx(math.log(1000))
    # a key at margin log(n-1) over n-1 zeros has weight 1/2
    n = 777
    a = float(margin_for_half_weight(n))
    assert math.exp(a) / (math.exp(a) + n - 1) == pytest.approx(0.5)
    assert float(ssmax_margin_for_half_weight(1e12, 0.43)) == pytest.approx(1 / 0.43, rel=0.01)
    assert float(fully_scaled_multiplier(math.e)) == pytest.approx(1.0)


def test_gumbel_moment_against_monte_carlo() -> None:
    g = torch.Generator().manual_seed(2)
    z = torch.randn(20_000, 1000, generator=g, dtype=torch.float64).amax(1)
    mc = torch.exp(z)
    approx = float(gaussian_max_moment(1000, 1.0))
    assert approx == pytest.approx(float(mc.mean()), rel=0.05)
    assert math.isnan(float(gaussian_max_moment(2, 1.0)))


# --------------------------------------------------------------------------- given the queries drawn


def test_given_queries_against_monte_carlo_rows() -> None:
    # issue 9, correction 4: each row keeps its own |q_r|; only the keys are averaged over.
    rng = np.random.default_rng(4)
    d, n, reps = 16, 256, 4000
    q_norms = np.sqrt(rng.chisquare(d, size=5))
    th = sweep_theory_given_queries([n], q_norms, d=d, temperature=0.7)
    h, mx, s2 = [], [], []
    for qn in q_norms:
        x = rng.standard_normal((reps, n)) * qn / math.sqrt(d) / 0.7  # (reps, n) logits of this row
        p = np.exp(x - x.max(1, keepdims=True))
        p /= p.sum(1, keepdims=True)
        h.append(-(p * np.log(p)).sum(1))
        mx.append(p.max(1))
        s2.append((p**2).sum(1))
    for col, rows in (("entropy", h), ("max_weight", mx), ("sum_sq", s2)):
        per_row = np.array([r.mean() for r in rows])  # (L,) Monte Carlo E[stat | q_r]
        se = math.sqrt(sum(r.var(ddof=1) / reps for r in rows)) / len(rows)
        assert abs(per_row.mean() - th[col].iloc[0]) < Z * se, col
    assert th["output_std"].iloc[0] == pytest.approx(math.sqrt(th["sum_sq"].iloc[0]))


def test_given_queries_with_equal_rows_is_the_fixed_sigma_expectation() -> None:
    d = 64
    th = sweep_theory_given_queries([16, 4096], np.full(3, math.sqrt(d)), d=d, normalizer="softmax1")
    ref = gaussian_row_expectations(np.array([16, 4096]), 1.0, normalizer="softmax1")
    for k in ("entropy", "max_weight", "sum_sq", "row_sum"):
        np.testing.assert_allclose(th[k], ref[k], rtol=1e-12)
    with pytest.raises(AttnInputError):
        sweep_theory_given_queries([16], [float("nan")])


def test_the_default_view_lies_on_its_exact_value_given_its_queries() -> None:
    # The Entropy page's first curve (tau = 0.5, d = 64, seed 0) with 64 query rows at n = 2^20: the
    # unconditional expectation (11.863) lies outside the measured 11.961 +- 2 s.e.; seed 0's queries
    # have rms |q|/sqrt(d) = 0.975, and the expectation given them lies on the measurement.
    spec = SweepSpec(lengths=(1 << 20,), d=64, queries=64, temperature=0.5, seed=0)
    got = run_sweep(spec, device="cpu").iloc[0]
    qn = query_norms(spec, "cpu").numpy()
    assert math.sqrt((qn**2).mean() / 64) == pytest.approx(0.975, abs=5e-4)
    given = sweep_theory_given_queries(spec.lengths, qn, d=64, temperature=0.5).iloc[0]
    free = sweep_theory(spec.lengths, d=64, temperature=0.5).iloc[0]
    assert abs(got["entropy"] - free["entropy"]) > 2 * got["entropy_sem"]
    assert abs(got["entropy"] - given["entropy"]) < 0.5 * got["entropy_sem"]
    assert abs(got["output_std"] - given["output_std"]) < 2 * got["output_std_sem"]


@pytest.mark.parametrize(("d", "rows", "tau", "normalizer", "rule"), [
    (64, 32, 0.5, "softmax", "sqrt_d"),  # the Entropy page's default first curve
    (48, 64, 1.0, "softmax1", "sqrt_d"),
    (32, 40, 2.0, "sigmoid", "sqrt_d"),
    (64, 24, 1.0, "softmax", "ssmax"),  # one factor per length: nodes per length group
    (8, 64, 0.5, "softmax", "sqrt_d"),  # a spread too wide for the nodes: every row computed
])
def test_given_queries_by_chebyshev_nodes_equal_every_row_computed(d, rows, tau, normalizer, rule) -> None:
    spec = SweepSpec(lengths=(16, 3000, 1 << 20), d=d, queries=rows, seed=7)
    qn = query_norms(spec, "cpu").numpy()
    kw = dict(d=d, temperature=tau, normalizer=normalizer, scale_rule=rule)
    fast = sweep_theory_given_queries(spec.lengths, qn, **kw)
    every = sweep_theory_given_queries(spec.lengths, qn, nodes=None, **kw)
    for c in ("entropy", "max_weight", "sum_sq", "row_sum", "output_std"):
        np.testing.assert_allclose(fast[c], every[c], rtol=1e-6, atol=1e-15, err_msg=c)
    no_max = sweep_theory_given_queries(spec.lengths, qn, want_max=False, **kw)
    assert no_max["max_weight"].isna().all() or normalizer == "sigmoid"  # sigmoid's comes with the rest
    np.testing.assert_allclose(no_max["entropy"], every["entropy"], rtol=1e-6)


@pytest.mark.parametrize("d", [8, 16, 32, 64, 128, 512])
def test_the_chi2_average_is_within_1e5_of_a_24_node_rule(d: int) -> None:
    # the page says the dashed lines are accurate to about 1e-5: the node count follows d and the
    # spread of sigma^2 (4 nodes at d = 32, tau = 0.25 were off by 1.3e-4)
    lengths = [16, 4096, 1 << 20]
    for tau in (0.25, 1.0, 4.0):
        got = sweep_theory(lengths, d=d, temperature=tau)
        ref = sweep_theory(lengths, d=d, temperature=tau, nodes=24)
        for col in ("entropy", "max_weight", "sum_sq"):
            np.testing.assert_allclose(got[col], ref[col], rtol=1e-5, err_msg=f"d={d} tau={tau} {col}")
