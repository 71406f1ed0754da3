"""Row statistics (:mod:`attncore.stats`) and the closed forms of :mod:`attncore.theory`.

Shape legend: weights ``(..., S)``; statistics reduce the last dim.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from attncore import AttnInputError
from attncore.stats import (
    effective_support,
    entropy,
    mass_on,
    max_weight,
    normalized_entropy,
    row_sum,
    sum_squares,
)
from attncore.theory import dot_product_std, dot_product_variance, scaled_logit_std, uniform_entropy


def _random_rows(seed: int, shape=(4, 6, 9)) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.softmax(torch.randn(shape, generator=g, dtype=torch.float64) * 2, dim=-1)


# --- entropy ----------------------------------------------------------------------------


@pytest.mark.parametrize("S", [1, 2, 7, 64])
def test_entropy_one_hot_is_zero(S):
    w = torch.zeros(3, S, dtype=torch.float64)
    w[0, 0] = 1.0
    w[1, S - 1] = 1.0
    w[2, S // 2] = 1.0
    assert torch.equal(entropy(w), torch.zeros(3, dtype=torch.float64))
    assert torch.equal(effective_support(w), torch.ones(3, dtype=torch.float64))
    assert torch.equal(max_weight(w), torch.ones(3, dtype=torch.float64))


@pytest.mark.parametrize("S", [1, 2, 7, 64])
def test_entropy_uniform_is_log_S(S):
    w = torch.full((2, S), 1.0 / S, dtype=torch.float64)
    torch.testing.assert_close(entropy(w), torch.full((2,), math.log(S), dtype=torch.float64))
    torch.testing.assert_close(effective_support(w), torch.full((2,), float(S), dtype=torch.float64))
    assert entropy(w)[0].item() == pytest.approx(uniform_entropy(S))


def test_entropy_hand_computed():
    # p = (1/2, 1/4, 1/4): H = 1/2 ln 2 + 2 * 1/4 ln 4 = 1.5 ln 2.
    w = torch.tensor([0.5, 0.25, 0.25, 0.0], dtype=torch.float64)
    assert entropy(w).item() == pytest.approx(1.5 * math.log(2), abs=1e-12)
    assert effective_support(w).item() == pytest.approx(2 ** 1.5, abs=1e-12)
    # p = (0.7, 0.2, 0.1)
    w2 = torch.tensor([0.7, 0.2, 0.1], dtype=torch.float64)
    h2 = -(0.7 * math.log(0.7) + 0.2 * math.log(0.2) + 0.1 * math.log(0.1))
    assert entropy(w2).item() == pytest.approx(h2, abs=1e-12)
    assert h2 == pytest.approx(0.8018185525433372, abs=1e-12)


@pytest.mark.parametrize("seed", range(3))
def test_entropy_matches_formula_on_random_rows(seed):
    w = _random_rows(seed)
    expected = -(w * torch.log(w)).sum(-1)
    torch.testing.assert_close(entropy(w), expected)
    torch.testing.assert_close(entropy(w, normalize=False), expected)
    torch.testing.assert_close(effective_support(w), torch.exp(expected))
    assert bool((entropy(w) <= math.log(9) + 1e-12).all())


def test_entropy_normalize_renormalises_rows_summing_below_one():
    w = torch.tensor([[0.25, 0.125, 0.125, 0.0], [0.1, 0.1, 0.1, 0.1]], dtype=torch.float64)
    # Renormalised rows: (1/2, 1/4, 1/4, 0) and uniform over 4.
    torch.testing.assert_close(entropy(w), torch.tensor([1.5 * math.log(2), math.log(4)], dtype=torch.float64))
    torch.testing.assert_close(entropy(w, normalize=True), entropy(w))
    raw = -(w * torch.log(torch.where(w > 0, w, torch.ones_like(w)))).sum(-1)
    torch.testing.assert_close(entropy(w, normalize=False), raw)
    assert not torch.allclose(entropy(w, normalize=False), entropy(w))
    torch.testing.assert_close(effective_support(w), torch.tensor([2 ** 1.5, 4.0], dtype=torch.float64))


def test_all_zero_rows_give_zero():
    w = torch.zeros(3, 5, dtype=torch.float64)
    w[1] = torch.tensor([0.2, 0.2, 0.2, 0.2, 0.2], dtype=torch.float64)
    for fn in (entropy, effective_support, max_weight, sum_squares, row_sum, normalized_entropy):
        out = fn(w)
        assert not torch.isnan(out).any(), fn.__name__
        assert out[0].item() == 0.0 and out[2].item() == 0.0, fn.__name__
    assert entropy(w, normalize=False)[0].item() == 0.0
    assert mass_on(w, [0, 1])[0].item() == 0.0


# --- other statistics -------------------------------------------------------------------


def test_sum_squares_and_max_weight():
    w = torch.tensor([[0.5, 0.25, 0.25], [0.1, 0.6, 0.3]], dtype=torch.float64)
    torch.testing.assert_close(sum_squares(w), torch.tensor([0.375, 0.46], dtype=torch.float64))
    torch.testing.assert_close(max_weight(w), torch.tensor([0.5, 0.6], dtype=torch.float64))
    torch.testing.assert_close(row_sum(w), torch.ones(2, dtype=torch.float64))
    u = torch.full((8,), 1 / 8, dtype=torch.float64)
    assert sum_squares(u).item() == pytest.approx(1 / 8)


@pytest.mark.parametrize("seed", range(2))
def test_stats_reduce_last_dim(seed):
    w = _random_rows(seed, shape=(2, 3, 4, 5))
    for fn in (entropy, effective_support, max_weight, sum_squares, row_sum, normalized_entropy):
        assert fn(w).shape == (2, 3, 4), fn.__name__
    torch.testing.assert_close(sum_squares(w), (w ** 2).sum(-1))
    torch.testing.assert_close(max_weight(w), w.max(-1).values)


def test_mass_on_positions():
    w = torch.tensor([[0.1, 0.2, 0.3, 0.4], [0.4, 0.3, 0.2, 0.1]], dtype=torch.float64)
    torch.testing.assert_close(mass_on(w, [0]), torch.tensor([0.1, 0.4], dtype=torch.float64))
    torch.testing.assert_close(mass_on(w, [-1]), torch.tensor([0.4, 0.1], dtype=torch.float64))
    torch.testing.assert_close(mass_on(w, [0, -1]), torch.tensor([0.5, 0.5], dtype=torch.float64))
    # Duplicates (also via a negative alias of the same key) count once.
    torch.testing.assert_close(mass_on(w, [1, 1, -3]), torch.tensor([0.2, 0.3], dtype=torch.float64))
    torch.testing.assert_close(mass_on(w, torch.tensor([[3, -4]])), torch.tensor([0.5, 0.5], dtype=torch.float64))
    torch.testing.assert_close(mass_on(w, range(4)), row_sum(w))
    assert torch.equal(mass_on(w, []), torch.zeros(2, dtype=torch.float64))


@pytest.mark.parametrize("bad", [[4], [-5], [0, 10]])
def test_mass_on_out_of_range_raises(bad):
    w = torch.full((2, 4), 0.25)
    with pytest.raises(AttnInputError, match=r"\[-4, 3\]"):
        mass_on(w, bad)


def test_normalized_entropy_range_and_values():
    w = _random_rows(3, shape=(50, 12))
    ne = normalized_entropy(w)
    assert bool((ne >= 0).all()) and bool((ne <= 1 + 1e-12).all())
    torch.testing.assert_close(ne, entropy(w) / math.log(12))
    u = torch.full((2, 6), 1 / 6, dtype=torch.float64)
    torch.testing.assert_close(normalized_entropy(u), torch.ones(2, dtype=torch.float64))
    one_hot = torch.tensor([[0.0, 1.0, 0.0]])
    assert normalized_entropy(one_hot).item() == 0.0
    # Default n = nonzero count: uniform over 3 of 5 keys has normalised entropy 1.
    part = torch.tensor([[1 / 3, 1 / 3, 1 / 3, 0.0, 0.0]], dtype=torch.float64)
    assert normalized_entropy(part).item() == pytest.approx(1.0)
    # With n = 5 visible keys it is log 3 / log 5.
    assert normalized_entropy(part, n=5).item() == pytest.approx(math.log(3) / math.log(5))
    assert normalized_entropy(part, n=torch.tensor([1])).item() == 0.0


# --- theory -------------------------------------------------------------------------


def test_dot_product_variance_and_std():
    assert dot_product_variance(64) == 64.0
    assert dot_product_std(64) == 8.0
    assert dot_product_std(512) == pytest.approx(22.627, abs=5e-4)
    assert dot_product_std(512) == pytest.approx(math.sqrt(512))
    assert dot_product_variance(10, var_q=2.0, var_k=0.5) == pytest.approx(10.0)
    assert dot_product_std(16, var_q=4.0, var_k=9.0) == pytest.approx(24.0)
    assert isinstance(dot_product_std(64), float)
    arr = dot_product_std(np.array([1, 4, 64]))
    assert isinstance(arr, np.ndarray)
    np.testing.assert_allclose(arr, [1.0, 2.0, 8.0])


def test_scaled_logit_std_and_uniform_entropy():
    for d in (1, 16, 64, 512):
        assert scaled_logit_std(d) == pytest.approx(1.0)
    assert scaled_logit_std(64, scale=1.0) == pytest.approx(8.0)
    assert scaled_logit_std(64, var_q=4.0, var_k=1.0, temperature=4.0) == pytest.approx(0.5)
    assert scaled_logit_std(100, scale=0.5, temperature=2.0) == pytest.approx(2.5)
    np.testing.assert_allclose(scaled_logit_std(np.array([4, 9])), [1.0, 1.0])
    assert uniform_entropy(1) == 0.0
    assert uniform_entropy(8) == pytest.approx(math.log(8))
    np.testing.assert_allclose(uniform_entropy(np.array([2, 10])), np.log([2, 10]))


@pytest.mark.parametrize(("d", "std_q", "std_k"), [(64, 1.0, 1.0), (512, 1.0, 1.0), (16, 2.0, 0.5), (8, 1.5, 3.0)])
def test_dot_product_variance_monte_carlo(d, std_q, std_k):
    """Var(q·k) = d var_q var_k for q, k with iid N(0, var) coordinates, checked on N samples.

    The standard error of the sample variance s^2 of N draws is
    sigma^2 sqrt(2/(N-1) + kappa/N) with kappa the excess kurtosis; for a sum of d iid
    products of independent normals kappa = 6/d. We allow 5 standard errors.
    """
    N = 8000
    g = torch.Generator().manual_seed(d * 31 + 7)
    q = torch.randn(N, d, generator=g, dtype=torch.float64) * std_q
    k = torch.randn(N, d, generator=g, dtype=torch.float64) * std_k
    dots = (q * k).sum(-1)
    var_q, var_k = std_q ** 2, std_k ** 2
    expected = dot_product_variance(d, var_q, var_k)
    se = expected * math.sqrt(2.0 / (N - 1) + (6.0 / d) / N)
    sample_var = dots.var(correction=1).item()
    assert abs(sample_var - expected) < 5 * se, (sample_var, expected, se)
    # The theory is not trivially satisfied: a wrong law (e.g. d^2) is far outside.
    assert abs(sample_var - d * d * var_q * var_k) > 5 * se or d == 1

    # Scaled by 1/sqrt(d): the std of the logits matches scaled_logit_std.
    scaled = dots / math.sqrt(d)
    exp_std = scaled_logit_std(d, var_q, var_k)
    # SE of a sample std ~= SE(var) / (2 std).
    se_std = (se / d) / (2 * exp_std)
    assert abs(scaled.std().item() - exp_std) < 5 * se_std
    assert exp_std == pytest.approx(std_q * std_k)
    # And with a temperature the std divides.
    assert abs((scaled / 2.0).std().item() - scaled_logit_std(d, var_q, var_k, temperature=2.0)) < 5 * se_std / 2


def test_t_critical_matches_scipy() -> None:
    """attncore.stats.t_critical (the 95% t quantile of every interval over seeds or windows) against scipy."""
    from attncore.stats import t_critical

    stats = pytest.importorskip("scipy.stats")
    for df in (1, 2, 3, 4, 7, 12, 30):
        assert t_critical(df) == pytest.approx(float(stats.t.ppf(0.975, df)), abs=6e-4)
    assert t_critical(3.7) == t_critical(3) and t_critical(0) == math.inf
    assert 1.96 < t_critical(60) < t_critical(30)
