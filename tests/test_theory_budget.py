"""The Entropy theory's quadrature: same values as before, bounded memory, a budget, and a Stop."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

import tests.row_theory_reference as old
from attncore import row_theory as rt
from attncore.errors import AttnInputError, ResourceLimitError
from tests.chart_data import run_app

NS = np.array([1, 2, 3, 10, 100, 1000, 10**4, 10**5, 2**20])


@pytest.mark.parametrize("normalizer", ["softmax", "softmax1", "sigmoid"])
@pytest.mark.parametrize("sigma2", [0.0, 0.3, 1.0, 4.0, 25.0, 80.0])
def test_chunked_quadrature_matches_the_old_code(normalizer: str, sigma2: float) -> None:
    ns = NS if normalizer != "sigmoid" else NS[:6]
    new = rt.gaussian_row_expectations(ns, sigma2, normalizer=normalizer)
    with np.errstate(invalid="ignore"):  # the old code's NaN at n = 1 (sigmoid), see below
        ref = old.gaussian_row_expectations(ns, sigma2, normalizer=normalizer)
    for k in ref:
        assert np.all(np.isfinite(new[k])), (k, new[k])
        # the old code's one NaN (sigmoid's max weight at n = 1) is checked on its own below
        ok = np.isfinite(ref[k])
        np.testing.assert_allclose(new[k][ok], ref[k][ok], rtol=1e-12, atol=1e-15, err_msg=k)


@pytest.mark.parametrize("sigma2", [0.0, 0.09, 1.0, 16.0, 625.0])
def test_sigmoid_max_weight_of_a_single_key(sigma2: float) -> None:
    """n = 1: the row is one weight sigmoid(sigma z - log 1), so its max is its sum, E = 1/2 by symmetry.

    The old code computed Phi(z)^0 as exp(0 * log 0) and returned NaN here.
    """
    res = rt.gaussian_row_expectations([1, 2], sigma2, normalizer="sigmoid")
    assert res["max_weight"][0] == pytest.approx(res["row_sum"][0], abs=1e-9)
    assert res["max_weight"][0] == pytest.approx(0.5, abs=1e-6)
    # n = 2 against a seeded Monte Carlo of max(sigmoid(sigma z - log 2)) over 2 keys
    g = np.random.default_rng(7)
    z = g.standard_normal((400_000, 2))
    m = (1.0 / (1.0 + 2.0 * np.exp(-np.sqrt(sigma2) * z))).max(axis=1)
    assert abs(res["max_weight"][1] - m.mean()) < 4 * m.std() / np.sqrt(len(m)) + 1e-4


def test_large_spread_runs_in_bounded_memory() -> None:
    """sigma2 = 900: the old code held ~1e7-cell float64 grids (6 of them, ~0.5 GB); now chunks."""
    ns = np.unique(np.geomspace(2, 2**20, 12).astype(int))
    cells = rt.quadrature_cells(ns, 900.0) / 2  # one pass of the grid
    assert cells * 8 * 6 > 400e6  # what the old code would have allocated at once
    tracemalloc.start()
    try:
        res = rt.gaussian_row_expectations(ns, 900.0)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 48 * 2**20, peak
    assert np.all(np.isfinite(res["entropy"])) and np.all(res["max_weight"] <= 1.0)
    assert np.all(res["max_weight"] > 0.5)  # sigma = 30: the rows are nearly one-hot


@pytest.mark.parametrize("kw", [
    {"d": 1024, "scale_rule": "none", "temperature": 0.1},  # Entropy vs length?ent_vary=none&ent_rule=none&...
    {"d": 64, "scale_rule": "ssmax", "ssmax_s": 2.0, "temperature": 0.1},  # ...&ent_rule=ssmax&ent_s=2
])
def test_memory_bomb_settings_are_refused_before_allocating(kw: dict) -> None:
    ns = np.unique(np.geomspace(1, 2**20, 41).astype(int))
    tracemalloc.start()
    try:
        with pytest.raises(ResourceLimitError, match="limit is"):
            rt.sweep_theory(ns, **kw)
        with pytest.raises(ResourceLimitError):
            rt.check_sweep_theory(ns, **kw)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 * 2**20, peak


def test_huge_variance_is_refused() -> None:
    tracemalloc.start()
    try:
        with pytest.raises(ResourceLimitError):
            rt.gaussian_row_expectations([10, 1000], 1e6)  # the old code asked for 36.8 GiB
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 4 * 2**20, peak


def test_cells_bound_holds_for_the_real_grids(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[str, int]] = []
    real_grid = rt._grid_z

    def grid(n: float, sigma: float):  # noqa: ANN202
        z, dz, lw = real_grid(n, sigma)
        seen.append(("z", z.size))
        return z, dz, lw

    monkeypatch.setattr(rt, "_grid_z", grid)
    for s2 in (0.5, 9.0, 400.0):
        seen.clear()
        ns = np.array([2, 50, 4096, 2**20])
        bound = rt.quadrature_cells(ns, s2, want_max=False)
        rt.gaussian_row_expectations(ns, s2, want_max=False)
        z_size = seen[0][1]
        sigma = s2**0.5
        u_size = len(np.arange(-sigma * 7.0 - 8.0, np.log(2**20) + min(s2 / 2, sigma * 7.0) + 36.0, 0.2))
        assert bound >= z_size * 0.5 * u_size  # same order as the real grid, never below it by much
        assert bound <= 4 * z_size * u_size


def test_cancel_stops_between_chunks() -> None:
    calls = []

    def cancel() -> bool:
        calls.append(1)
        return len(calls) > 3

    with pytest.raises(rt.TheoryCancelled):
        rt.gaussian_row_expectations(np.array([10, 10**5]), 400.0, cancel=cancel)
    assert len(calls) == 4


def test_entropy_page_refuses_the_bomb_url_with_a_plain_message() -> None:
    at = run_app("pages/2_Entropy_vs_length.py", ent_vary="none", ent_rule="none", ent_d="1024", ent_tau="0.1")
    assert not at.exception
    msgs = [e.value for e in at.error]
    assert any("quadrature" in m and "limit is" in m for m in msgs), msgs


def test_check_sweep_theory_takes_sweep_theorys_arguments_and_defaults() -> None:
    """check_sweep_theory binds against sweep_theory's signature: same defaults, same errors."""
    ns = [16, 256, 4096]
    defaults = rt.check_sweep_theory(ns)
    assert defaults == rt.check_sweep_theory(ns, d=64, scale_rule="sqrt_d", temperature=1.0,
                                             normalizer="softmax", ssmax_s=0.43, nodes=None, want_max=True)
    assert rt.check_sweep_theory(ns, want_max=False) < defaults  # the max-weight grids are not counted
    assert rt.check_sweep_theory(ns, d=8) != defaults  # more Gauss nodes for a small d
    with pytest.raises(TypeError):
        rt.check_sweep_theory(ns, dd=64)
    with pytest.raises(AttnInputError):
        rt.check_sweep_theory(ns, temperature=0.0)
