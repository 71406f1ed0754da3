"""attncore.sweeps: the streaming engine against the materialised reference, theory and itself."""

from __future__ import annotations

import math
import threading
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
import torch

import attncore.sweeps as sw
import attncore.sweeps.engine as sw_engine
from attncore.errors import AttnInputError, ResourceLimitError
from attncore.row_theory import sweep_theory, sweep_theory_given_queries
from attncore.sweeps import (
    SweepCancelled,
    SweepSpec,
    entropy_vs_length,
    llama4_multiplier,
    peak_weight_sweep,
    query_norms,
    reference_sweep,
    run_sweep,
)
from attncore.sweeps import reduce as sw_reduce
from attncore.sweeps import rng as sw_rng
from attncore.theory import peak_weight

STATS = ["entropy", "normalized_entropy", "max_weight", "effective_support", "sum_sq", "row_sum", "output_std"]
Z = 4.5  # standard errors allowed in statistical comparisons (about 1 false alarm in 10^5 checks)


def _close(a: pd.DataFrame, b: pd.DataFrame, cols=STATS, rtol=2e-5, atol=1e-7) -> None:
    assert list(a["n"]) == list(b["n"])
    for c in cols:
        np.testing.assert_allclose(a[c].to_numpy(), b[c].to_numpy(), rtol=rtol, atol=atol, err_msg=c)


# --------------------------------------------------------------------------- reference


@pytest.mark.parametrize("method", ["logits", "vectors"])
@pytest.mark.parametrize("normalizer", ["softmax", "softmax1", "sigmoid"])
@pytest.mark.parametrize("rule", ["sqrt_d", "none", "ssmax", "llama4"])
def test_streaming_equals_the_materialised_reference(method: str, normalizer: str, rule: str) -> None:
    # 9000 > 8192 exercises Llama 4's multiplier; 16384 spans block boundaries in vectors mode.
    spec = SweepSpec(lengths=(1, 2, 17, 1000, 4096, 9000, 16384), d=32, queries=6, method=method,
                     normalizer=normalizer, scale_rule=rule, temperature=0.8, seed=11)
    got, ref = run_sweep(spec, device="cpu"), reference_sweep(spec, "cpu")
    _close(got, ref)
    _close(got, ref, cols=["entropy_sem", "max_weight_sem", "output_std_sem"], rtol=1e-3, atol=1e-8)
    np.testing.assert_allclose(got["logit_factor"], ref["logit_factor"], rtol=1e-12)


@pytest.mark.parametrize("method", ["logits", "vectors"])
@pytest.mark.parametrize("normalizer", ["softmax", "sigmoid"])
def test_tall_row_tiles_equal_the_reference(method: str, normalizer: str) -> None:
    # tall row tiles (70 rows; vectors uses 64-row tiles): the reductions do not depend on the tile height
    spec = SweepSpec(lengths=(3, 5000, 9000), d=16, queries=70, method=method, normalizer=normalizer,
                     scale_rule="llama4", seed=8)
    _close(run_sweep(spec, device="cpu"), reference_sweep(spec, "cpu"))


@pytest.mark.parametrize("method", ["logits", "vectors"])
def test_wide_logit_ranges_equal_the_reference(method: str) -> None:
    # unscaled d = 1024 at temperature 0.25: logit std ~128, so shifted logits reach -1500, far
    # below EXP_FLOOR; the clamp that keeps exp off its slow underflow path must not show
    spec = SweepSpec(lengths=(2, 300, 5000), d=1024, queries=6, method=method, scale_rule="none",
                     temperature=0.25, seed=5)
    got, ref = run_sweep(spec, device="cpu"), reference_sweep(spec, "cpu")
    _close(got, ref)
    assert got["logit_std"].iloc[-1] * 5 > -sw_reduce.EXP_FLOOR  # the floor really was crossed
    assert got["max_weight"].iloc[-1] > 0.5  # a near one-hot row


def test_a_one_block_logits_sweep_keeps_two_workers_busy(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[str, int, int]] = []
    original = sw_rng.unit_generator

    def spy(spec, lane, group, device):  # noqa: ANN001, ANN202
        seen.append((threading.current_thread().name, lane, group))
        return original(spec, lane, group, device)

    monkeypatch.setattr(sw_engine, "unit_generator", spy)
    run_sweep(SweepSpec(lengths=(1000,), queries=8), device="cpu", workers=2)
    # one block, two independent units that two workers can share (which worker takes which
    # is up to the scheduler, so the test does not insist on two thread names)
    assert sorted((lane, group) for _, lane, group in seen) == [(0, 0), (0, 1)]
    assert all(name.startswith("attncore-sweep") for name, _, _ in seen)


def test_float64_sweep_equals_its_reference_and_float32_statistics() -> None:
    spec = SweepSpec(lengths=(64, 4096), d=16, queries=32, dtype="float64", seed=2)
    got = run_sweep(spec, device="cpu")
    _close(got, reference_sweep(spec, "cpu"), rtol=1e-10, atol=1e-12)
    f32 = run_sweep(SweepSpec(**{**spec.__dict__, "dtype": "float32"}), device="cpu")
    se = np.hypot(got["entropy_sem"], f32["entropy_sem"])
    assert np.all(np.abs(got["entropy"] - f32["entropy"]) < Z * se)


def test_fully_masked_free_rows_and_single_key_rows() -> None:
    # n = 1: the only key takes all the weight; entropy 0; nothing is NaN anywhere.
    df = entropy_vs_length([1], queries=8, device="cpu")
    assert df.loc[0, "max_weight"] == pytest.approx(1.0) and df.loc[0, "entropy"] == pytest.approx(0.0, abs=1e-6)
    assert df.loc[0, "effective_support"] == pytest.approx(1.0, abs=1e-6)
    assert not df.drop(columns=["entropy_sem"]).isna().any().any()


# --------------------------------------------------------------------------- statistics and theory


def test_methods_agree_statistically() -> None:
    common = {"lengths": (16, 256, 4096), "d": 64, "queries": 256, "seed": 5}
    a = run_sweep(SweepSpec(method="logits", **common), device="cpu")
    b = run_sweep(SweepSpec(method="vectors", **common), device="cpu")
    # Rows of the vectors method share keys: their errors are correlated by O(1/d) per pair,
    # which inflates the standard error of the mean by at most sqrt(1 + R/d).
    infl = math.sqrt(1 + 256 / 64)
    for c in ("entropy", "max_weight", "output_std"):
        se = np.hypot(a[f"{c}_sem"], infl * b[f"{c}_sem"])
        assert np.all(np.abs(a[c] - b[c]) < Z * se), (c, a[c].to_list(), b[c].to_list())


@pytest.mark.parametrize("normalizer", ["softmax", "softmax1", "sigmoid"])
def test_measurement_matches_the_exact_theory(normalizer: str) -> None:
    ns = (16, 256, 4096, 65536)
    got = entropy_vs_length(ns, queries=256, d=64, normalizer=normalizer, seed=3, device="cpu")
    th = sweep_theory(ns, d=64, normalizer=normalizer)
    for c in ("entropy", "max_weight", "sum_sq", "row_sum"):
        sem = got[f"{c}_sem"].to_numpy()
        err = np.abs(got[c].to_numpy() - th[c].to_numpy())
        assert np.all(err < Z * sem + 1e-9), (c, got[c].to_list(), th[c].to_list(), sem)
    # and the effective support is exp of the mean entropy, whose theory is exp E[H]
    np.testing.assert_allclose(got["effective_support"], np.exp(got["entropy"]), rtol=1e-12)


@pytest.mark.parametrize(("rule", "ns"), [("ssmax", (16, 1024, 30000)), ("llama4", (4096, 8192, 40000)),
                                          ("none", (16, 512))])
def test_scale_rules_match_the_exact_theory(rule: str, ns: tuple[int, ...]) -> None:
    got = entropy_vs_length(ns, queries=256, d=64, scale_rule=rule, temperature=1.3, seed=4, device="cpu")
    th = sweep_theory(ns, d=64, scale_rule=rule, temperature=1.3)
    for c in ("entropy", "max_weight", "sum_sq"):
        assert np.all(np.abs(got[c] - th[c]) < Z * got[f"{c}_sem"] + 1e-9), (c, got[c].to_list(), th[c].to_list())


def test_temperature_sharpens_and_length_flattens() -> None:
    ns = (16, 1024, 65536)
    sharp = entropy_vs_length(ns, temperature=0.5, device="cpu")
    soft = entropy_vs_length(ns, temperature=2.0, device="cpu")
    assert np.all(np.diff(soft["entropy"]) > 0) and np.all(np.diff(soft["max_weight"]) < 0)
    assert np.all(sharp["entropy"] < soft["entropy"]) and np.all(sharp["max_weight"] > soft["max_weight"])
    # tau = 2 gives sigma^2 = 1/4: within 0.05 nats of log n - 1/8 at n = 65536
    assert soft["entropy"].iloc[-1] == pytest.approx(math.log(65536) - 0.125, abs=0.05)


# --------------------------------------------------------------------------- structure


def test_lengths_nest_and_workers_do_not_change_results() -> None:
    ns = [16, 1000, 70000, 140001]
    together = entropy_vs_length(ns, queries=8, seed=9, device="cpu", workers=1)
    for n in ns:  # every length alone gives the same numbers: keys of n are a prefix of longer rows
        alone = entropy_vs_length([n], queries=8, seed=9, device="cpu", workers=2)
        # equal up to float32 summation order (a length inside a block splits its sums)
        _close(together[together["n"] == n].reset_index(drop=True), alone, rtol=1e-6, atol=1e-12)
    many = entropy_vs_length(ns, queries=8, seed=9, device="cpu", workers=3)
    pd.testing.assert_frame_equal(together, many)
    vec = dict(lengths=(300, 70000), queries=8, method="vectors", d=16, seed=1)
    pd.testing.assert_frame_equal(run_sweep(SweepSpec(**vec), device="cpu", workers=1),
                                  run_sweep(SweepSpec(**vec), device="cpu", workers=2))


def test_seed_reproduces_and_changes_the_draws() -> None:
    a = entropy_vs_length([256], seed=1, device="cpu")
    pd.testing.assert_frame_equal(a, entropy_vs_length([256], seed=1, device="cpu"))
    assert not np.isclose(a["entropy"].iloc[0], entropy_vs_length([256], seed=2, device="cpu")["entropy"].iloc[0])


def test_threads_setting_is_restored() -> None:
    before = torch.get_num_threads()
    entropy_vs_length([1 << 17], queries=8, device="cpu", workers=2)
    assert torch.get_num_threads() == before


def test_lengths_are_sorted_and_deduplicated() -> None:
    df = entropy_vs_length([64, 16, 64], device="cpu")
    assert list(df["n"]) == [16, 64] and list(df.columns) == list(sw.COLUMNS)


# --------------------------------------------------------------------------- progress and cancel


def test_progress_reports_rising_fractions_from_the_calling_thread() -> None:
    seen: list[tuple[float, str, str]] = []

    def progress(frac: float, msg: str) -> None:
        seen.append((frac, msg, threading.current_thread().name))

    entropy_vs_length([1 << 16, 1 << 19], queries=16, scale_rule="ssmax", device="cpu", progress=progress)
    fracs = [f for f, _, _ in seen]
    assert fracs[-1] == 1.0 and fracs == sorted(fracs) and all(0 <= f <= 1 for f in fracs)
    assert {t for _, _, t in seen} == {threading.current_thread().name}


def test_a_false_progress_return_or_the_cancel_event_stops_the_sweep() -> None:
    calls = []

    def stop(frac: float, msg: str) -> bool:
        calls.append(frac)
        return False

    with pytest.raises(SweepCancelled):
        entropy_vs_length([1 << 22], queries=64, device="cpu", progress=stop)
    assert len(calls) == 1  # stopped at the first report, between chunks
    ev = threading.Event()
    ev.set()
    with pytest.raises(SweepCancelled):
        entropy_vs_length([1 << 22], device="cpu", cancel=ev)
    ev2 = threading.Event()
    timer = threading.Timer(0.2, ev2.set)
    timer.start()
    with pytest.raises(SweepCancelled):
        entropy_vs_length([1 << 24], queries=256, device="cpu", cancel=ev2)
    timer.join()


def test_an_exception_in_the_progress_callback_propagates_and_stops_workers() -> None:
    def boom(frac: float, msg: str) -> None:
        raise KeyboardInterrupt("user pressed Stop")

    with pytest.raises(KeyboardInterrupt):
        entropy_vs_length([1 << 22], queries=64, device="cpu", progress=boom)
    entropy_vs_length([16], device="cpu")  # the engine is usable again (lock released)


# --------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(("kwargs", "needle"), [
    ({"lengths": [2**24 + 1]}, "above the cap"),
    ({"lengths": [0]}, "at least one key"),
    ({"lengths": []}, "at least one sequence length"),
    ({"lengths": [16.5]}, "whole numbers"),
    ({"d": 0}, "d must be at least 1"),
    ({"queries": 0}, "at least one query row"),
    ({"queries": 5000}, "above the limit"),
    ({"temperature": 0.0}, "temperature must be a positive"),
    ({"temperature": -1.0}, "temperature must be a positive"),
    ({"temperature": float("nan")}, "temperature must be a positive"),
    ({"ssmax_s": float("nan")}, "SSMax factor s"),
    ({"ssmax_s": 1e9}, "SSMax factor s"),
    ({"scale_rule": "cosine"}, "unknown scale rule"),
    ({"normalizer": "ssmax"}, "scale_rule='ssmax'"),
    ({"method": "exact"}, "unknown method"),
    ({"dtype": "float16"}, "float32 or float64"),
    ({"value_dim": 0}, "value dim"),
])
def test_bad_arguments_get_plain_messages(kwargs: dict, needle: str) -> None:
    args = {"lengths": [16], **kwargs}
    lengths = args.pop("lengths")
    with pytest.raises(AttnInputError, match=None) as info:
        entropy_vs_length(lengths, device="cpu", **args)
    assert needle in str(info.value)


def test_oversized_work_is_refused_before_anything_is_allocated() -> None:
    with pytest.raises(ResourceLimitError) as info:
        entropy_vs_length([2**24], queries=1024, d=1024, method="vectors", device="cpu")
    assert "limit" in str(info.value) and "random numbers" in str(info.value)


def test_reference_refuses_huge_matrices() -> None:
    with pytest.raises(ResourceLimitError):
        reference_sweep(SweepSpec(lengths=(2**20,), queries=64))


# --------------------------------------------------------------------------- pieces


def test_llama4_multiplier_matches_the_formula() -> None:
    assert llama4_multiplier(8191) == 1.0
    assert llama4_multiplier(8192) == pytest.approx(1 + 0.1 * math.log(2))
    assert llama4_multiplier(2**24) == pytest.approx(1 + 0.1 * math.log(2049))


def test_float32_normal_is_capped_and_the_tail_redraw_is_exact() -> None:
    g = torch.Generator().manual_seed(0)
    raw = torch.empty(1 << 24).normal_(generator=g)
    cap = math.sqrt(-2 * math.log(2.0**-24))  # Box-Muller with 24-bit uniforms
    assert float(raw.max()) <= cap + 1e-4 and float(-raw.min()) <= cap + 1e-4
    tail = sw_rng.gauss_tail(200_000, 5.0, g, torch.device("cpu"))
    assert float(tail.min()) > 5.0
    # E[Z | Z > 5] = phi(5)/Q(5) and P(Z > 6 | Z > 5) = Q(6)/Q(5), within sampling error
    q = lambda z: 0.5 * math.erfc(z / math.sqrt(2))  # noqa: E731
    mean = math.exp(-12.5) / math.sqrt(2 * math.pi) / q(5)
    assert abs(float(tail.mean()) - mean) < Z * float(tail.std()) / math.sqrt(tail.numel())
    p6 = q(6) / q(5)
    frac = float((tail > 6).double().mean())
    assert abs(frac - p6) < Z * math.sqrt(p6 * (1 - p6) / tail.numel())
    assert float(tail.max()) > cap  # beyond what float32 normal_ can return


def test_tiles_redraw_every_sample_above_the_threshold(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sw_rng, "TAIL_Z", 2.0)  # make the redraw frequent enough to test its distribution
    g = torch.Generator().manual_seed(3)
    tile = torch.empty(4, 1 << 20)
    std = torch.tensor([1.0, 2.0, 0.5, 3.0], dtype=torch.float64)
    mx = sw_rng.fill_logit_tile(tile, std, g, True)
    z = (tile.double() / std[:, None]).flatten()
    np.testing.assert_allclose(mx.double(), (tile.double().amax(1)), rtol=1e-7)
    above = z[z > 2.0]
    q2 = 0.5 * math.erfc(2 / math.sqrt(2))
    n = z.numel()
    assert abs(above.numel() - n * q2) < Z * math.sqrt(n * q2)
    mean = math.exp(-2.0) / math.sqrt(2 * math.pi) / q2
    assert abs(float(above.mean()) - mean) < Z * float(above.std()) / math.sqrt(above.numel())


def test_peak_weight_sweep_reproduces_the_ssmax_figure() -> None:
    ns = [2, 10, 100, 1000, 4096]
    df = peak_weight_sweep(ns, s=0.43)
    at = df.set_index("n")
    assert round(at.loc[100, "softmax"], 3) == 0.600 and round(at.loc[1000, "softmax"], 3) == 0.129
    np.testing.assert_allclose(df["softmax"], peak_weight(np.array(ns)), rtol=1e-12)
    np.testing.assert_allclose(df["ssmax"], peak_weight(np.array(ns), s=0.43), rtol=1e-12)
    with pytest.raises(AttnInputError):
        peak_weight_sweep([1])
    with pytest.raises(AttnInputError):
        peak_weight_sweep([16], s=float("nan"))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("method", ["logits", "vectors"])
def test_cuda_engines_equal_their_references_and_agree_statistically(method: str) -> None:
    """On CUDA each engine equals the materialised reference on its own draws (torch's generator for the
    torch engine, Philox for the fused kernels); the engines and the CPU agree within standard errors."""
    from attncore.sweeps.fused_plan import fused_available
    from attncore.sweeps.fused_replay import fused_reference_sweep

    spec = SweepSpec(lengths=(16, 1024, 16384), d=32, queries=64, method=method, seed=6)
    torch_cuda = run_sweep(spec, device="cuda", engine="torch")
    _close(torch_cuda, reference_sweep(spec, "cuda"), rtol=5e-5, atol=1e-6)
    runs = {"torch on CUDA": torch_cuda, "torch on the CPU": run_sweep(spec, device="cpu")}
    if fused_available("cuda"):
        fused = run_sweep(spec, device="cuda", engine="fused")
        _close(fused, fused_reference_sweep(spec, "cuda"), rtol=5e-5, atol=1e-6)
        runs["fused"] = fused
    # what the page runs (the dispatch's choice) is one of them, to the bit
    auto = run_sweep(spec, device="cuda")
    assert any(auto.equals(r) for r in runs.values())
    names = list(runs)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            for c in ("entropy", "max_weight", "output_std"):
                se = np.hypot(runs[a][f"{c}_sem"], runs[b][f"{c}_sem"]) * math.sqrt(2)
                assert np.all(np.abs(runs[a][c] - runs[b][c]) < Z * se), (a, b, c)


# --------------------------------------------------------------------------- the vectors output's error


def test_the_output_error_estimate_is_unbiased_for_the_values_given_the_weights() -> None:
    """Given the weights P, Var(mean o^2 | P) = 2 tr(G^2) / (L^2 Ev) with G = P P^T; averaged over many
    value draws the batch estimator gives that, where the rows' spread (the old estimate) gives half."""
    g = torch.Generator().manual_seed(7)
    L, n, Ev, d, T = 16, 300, 4, 16, 2000
    q, k = torch.randn(L, d, generator=g, dtype=torch.float64), torch.randn(n, d, generator=g, dtype=torch.float64)
    P = torch.softmax(q @ k.T / math.sqrt(d), dim=1)  # (L, n): rows over shared keys, as a head's
    G = P @ P.T
    exact = 2 * float((G**2).sum()) / (L * L * Ev)
    V = torch.randn(T, n, Ev, generator=g, dtype=torch.float64)  # T draws of the values
    B = sw_reduce.VALUE_BATCHES
    out_b = torch.stack([P[:, b::B] @ V[:, b::B] for b in range(B)], dim=2)  # (T, L, B, Ev): key j in j mod B
    sq_b = torch.stack([(P[:, b::B] ** 2).sum(1) for b in range(B)], dim=1).numpy()  # (L, B)
    one, _ = sw_reduce.batch_outputs(P, V[0], torch.arange(n) % B)  # what the references compute
    torch.testing.assert_close(one, out_b[0], rtol=1e-12, atol=1e-15)
    est = [sw_reduce.output_ms_sem(o, sq_b, 0.0) ** 2 for o in out_b.numpy()]
    o2 = (out_b.sum(2) ** 2).numpy()  # (T, L, Ev)
    ms = o2.mean(axis=(1, 2))
    rows_old = o2.mean(axis=2).var(axis=1, ddof=1) / L
    assert np.mean(est) == pytest.approx(exact, rel=0.05)
    assert np.var(ms) == pytest.approx(exact, rel=0.1)  # the variance the means really have
    assert np.mean(rows_old) < 0.7 * exact  # the rows' spread: too small (about half here)


@pytest.mark.usefixtures("one_torch_thread")
def test_the_vectors_output_error_bars_cover_the_exact_value_given_the_queries() -> None:
    """Issue 24, 3.8: over many seeds about 95% of the +-2 s.e. intervals of the output std contain the
    exact expectation given the drawn queries (the rows' spread covered about 55-75% here, z up to 4.4)."""
    lengths, L, d = (256, 1024, 4096), 32, 16
    z = []
    for seed in range(100):
        spec = SweepSpec(lengths=lengths, method="vectors", queries=L, d=d, value_dim=16, seed=seed)
        got = run_sweep(spec, device="cpu", workers=1)
        exact = sweep_theory_given_queries(lengths, query_norms(spec).numpy(), d=d, want_max=False)
        z.extend(((got["output_std"] - exact["output_std"]) / got["output_std_sem"]).tolist())
    z = np.asarray(z)
    coverage = float(np.mean(np.abs(z) <= 2))
    print(f"coverage of +-2 s.e.: {coverage:.3f} over {len(z)} intervals; mean z {z.mean():+.2f}, sd {z.std():.2f}")
    assert 0.91 <= coverage <= 0.99, coverage  # 95% +- 3 binomial standard errors of 300 intervals
    assert abs(z.mean()) < 0.25 and 0.8 < z.std() < 1.2


# --------------------------------------------------------------------------- shared draws


def _set_specs() -> list[SweepSpec]:
    base = dict(lengths=(16, 3000, 70000, 140001), d=32, queries=6, seed=21)
    return [SweepSpec(temperature=0.5, **base), SweepSpec(temperature=2.0, **base),
            SweepSpec(scale_rule="ssmax", **base),  # one pass per length, all on the same draws
            SweepSpec(normalizer="sigmoid", **base), SweepSpec(normalizer="softmax1", **base),
            SweepSpec(**{**base, "lengths": (50, 9000)}),  # shorter: its blocks end early
            SweepSpec(method="vectors", **base), SweepSpec(method="vectors", temperature=3.0, **base),
            SweepSpec(**{**base, "seed": 22})]  # another stream


def test_a_sweep_set_equals_each_sweep_alone() -> None:
    specs = _set_specs()
    together = sw.run_sweep_set(specs, device="cpu")
    assert len(together) == len(specs)
    for spec, got in zip(specs, together, strict=True):
        pd.testing.assert_frame_equal(got, run_sweep(spec, device="cpu"))  # the same draws, to the bit
    # and the shared streams really are the reference's draws, rescaled per curve
    _close(together[1], reference_sweep(specs[1], "cpu"))
    _close(together[3], reference_sweep(specs[3], "cpu"))


def test_a_sweep_set_draws_each_stream_once(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[int, int, int]] = []
    original = sw_rng.unit_generator

    def spy(spec, lane, group, device):  # noqa: ANN001, ANN202
        seen.append((spec.seed, lane, group))
        return original(spec, lane, group, device)

    monkeypatch.setattr(sw_engine, "unit_generator", spy)
    monkeypatch.setenv("ATTNCORE_DRAW_CACHE", "0")  # no draws kept between sweeps (see the next tests)
    specs = _set_specs()[:5]  # one stream: temperatures, SSMax's 4 passes, sigmoid, softmax1
    sw.run_sweep_set(specs, device="cpu")
    blocks = -(-140001 // sw.block_keys(specs[0]))
    assert len(seen) == len(set(seen)) == blocks * 2  # each (lane, row group) generator made once
    seen.clear()
    for s in specs:
        run_sweep(s, device="cpu")
    assert len(seen) == blocks * 2 * len(specs)  # alone: each spec draws the stream again (its passes share it)


def test_partial_results_are_prefixes_of_the_final_ones() -> None:
    specs = [SweepSpec(lengths=(16, 1000, 70000, 300000, 1 << 20), queries=4, temperature=t, seed=3)
             for t in (0.5, 1.0)] + [SweepSpec(lengths=(16, 5000), queries=4, seed=9)]
    seen: list[list[pd.DataFrame | None]] = []
    final = sw.run_sweep_set(specs, device="cpu", partial=seen.append)
    assert len(seen) == 2  # after 1/16 and 1/4 of the 16 blocks of the longest stream
    for frames in seen:
        assert len(frames) == len(specs)
        for f, full in zip(frames, final, strict=True):
            if f is not None:
                assert 0 < len(f) <= len(full)
                pd.testing.assert_frame_equal(f, full.iloc[: len(f)])
    first = seen[0][0]
    assert first is not None and list(first["n"]) == [16, 1000]  # 2^16 keys done: n <= 65536
    assert list(seen[1][0]["n"]) == [16, 1000, 70000]  # 4 blocks: n <= 262144
    assert seen[0][2] is None and seen[1][2] is None  # the other stream (seed 9) runs afterwards
    assert final[0].equals(run_sweep(specs[0], device="cpu"))


def test_a_cancelled_sweep_set_stops() -> None:
    ev = threading.Event()
    ev.set()
    with pytest.raises(SweepCancelled):
        sw.run_sweep_set(_set_specs()[:2], device="cpu", cancel=ev)


@pytest.mark.parametrize("normalizer", ["softmax", "softmax1", "sigmoid"])
@pytest.mark.parametrize(("rule", "temperature"), [("sqrt_d", 1.0), ("none", 0.25)])
def test_many_lengths_in_one_block_equal_the_reference(normalizer: str, rule: str, temperature: float) -> None:
    # dozens of checkpoints inside the first block: the segmented reduction (Reducer.add_segments),
    # with unscaled d = 256 at tau = 0.25 pushing shifted logits below EXP_FLOOR
    lengths = tuple(sorted({int(round(2 ** (k / 4))) for k in range(0, 57)}))  # 1 .. 16384, 4 per doubling
    spec = SweepSpec(lengths=lengths, d=256, queries=5, normalizer=normalizer, scale_rule=rule,
                     temperature=temperature, seed=12)
    assert sum(b - a <= sw_engine.SEGMENTED_KEYS for a, b in zip((0, *lengths[:-1]), lengths, strict=True)) > 16
    assert max(lengths) <= sw.block_keys(spec)
    _close(run_sweep(spec, device="cpu"), reference_sweep(spec, "cpu"))


@pytest.mark.parametrize("normalizer", ["softmax", "softmax1", "sigmoid"])
@pytest.mark.parametrize(("rule", "d", "temperature"), [("sqrt_d", 32, 1.0), ("none", 1024, 0.25)])
def test_whole_blocks_equal_the_reference(normalizer: str, rule: str, d: int, temperature: float,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    # blocks with no length inside them: the logits method's whole-tile path (Reducer.add_shifted,
    # the shared shifted draws z - max z) for the softmax family, the shifted draws plus the max for
    # sigmoid; unscaled d = 1024 at tau = 0.25 crosses EXP_FLOOR on every tile
    K = sw.block_keys(SweepSpec(lengths=(1,)))
    spec = SweepSpec(lengths=(16, 2 * K, 3 * K + 5), d=d, queries=5, normalizer=normalizer, scale_rule=rule,
                     temperature=temperature, seed=13)
    calls: list[bool] = []
    original = sw_reduce.Reducer.add_shifted

    def spy(self, s, zs, std, mx, r0, floor_needed=True):  # noqa: ANN001, ANN202
        calls.append(floor_needed)
        assert torch.all(zs.amax(dim=1) == 0.0) and torch.all(zs <= 0.0)  # z - max z, shared by the jobs
        return original(self, s, zs, std, mx, r0, floor_needed)

    monkeypatch.setattr(sw_reduce.Reducer, "add_shifted", spy)
    got = run_sweep(spec, device="cpu")
    # blocks 1 and 2 hold no length (block 0 holds 16, block 3 ends at 3K + 5), x 2 row groups
    assert len(calls) == (0 if normalizer == "sigmoid" else 2 * 2)
    _close(got, reference_sweep(spec, "cpu"))
    if rule == "none" and normalizer != "sigmoid":
        assert all(calls)  # the floor was needed and applied


def test_merging_block_partials_into_fresh_and_filled_rows() -> None:
    # merge_into copies a partial into rows nothing was merged into yet and rescales otherwise;
    # either way the sums equal those of all the logits at once
    g = torch.Generator().manual_seed(4)
    x = torch.randn(6, 300, generator=g, dtype=torch.float64) * 3.0

    def part(cols: slice, rows: slice) -> sw_reduce.Acc:
        t = x[rows, cols]
        m = t.amax(dim=1)
        e = torch.exp(t - m[:, None])
        return sw_reduce.Acc(m=m, a=e.sum(1), b=((t - m[:, None]) * e).sum(1), c=(e * e).sum(1), empty=False)

    acc = sw_reduce.new_acc(6, None, torch.device("cpu"), sigmoid=False)
    first = part(slice(0, 100), slice(0, 3))
    sw_reduce.merge_into(acc, first, False, slice(0, 3))
    for k in "mabc":
        assert torch.equal(getattr(acc, k)[:3], getattr(first, k))  # fresh rows: the partial itself
    assert bool(torch.isinf(acc.m[3:]).all()) and bool((acc.a[3:] == 0).all())  # the others untouched
    sw_reduce.merge_into(acc, part(slice(0, 100), slice(3, 6)), False, slice(3, 6))
    sw_reduce.merge_into(acc, part(slice(100, 300), slice(0, 6)), False)  # filled rows: rescaled
    whole = part(slice(0, 300), slice(0, 6))
    for k in "mabc":
        torch.testing.assert_close(getattr(acc, k), getattr(whole, k), rtol=1e-12, atol=1e-12)


# ----------------------------------------------------------------------------- kept draws (sweeps.draws)


def _count_generators(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    made: list[int] = []
    original = sw_rng.unit_generator

    def spy(spec, lane, group, device):  # noqa: ANN001, ANN202
        made.append(lane)
        return original(spec, lane, group, device)

    monkeypatch.setattr(sw_engine, "unit_generator", spy)
    return made


def test_kept_draws_give_the_same_numbers_without_drawing(monkeypatch: pytest.MonkeyPatch) -> None:
    from attncore.sweeps.draws import draw_store

    draw_store().clear()
    made = _count_generators(monkeypatch)
    lengths = (16, 300, 70000, 140001)
    specs = [SweepSpec(lengths=lengths, d=d, queries=6, temperature=t, seed=21) for d, t in ((64, 1.0), (8, 0.5))]
    first = sw.run_sweep(specs[0], device="cpu")  # draws and keeps the stream
    assert made and draw_store().nbytes > 0
    made.clear()
    kept = [sw.run_sweep(s, device="cpu") for s in (specs[1], specs[0], replace(specs[0], lengths=(16, 5000)))]
    assert made == []  # another d and temperature, the same spec again, a shorter n: no draw at all
    monkeypatch.setenv("ATTNCORE_DRAW_CACHE", "0")
    fresh = [sw.run_sweep(s, device="cpu") for s in (specs[1], specs[0], replace(specs[0], lengths=(16, 5000)))]
    assert made  # the store is off: every sweep draws
    for a, b in zip(kept, fresh, strict=True):
        pd.testing.assert_frame_equal(a, b, check_exact=True)  # bit for bit
    pd.testing.assert_frame_equal(first, fresh[1], check_exact=True)


def test_kept_draws_serve_only_streams_they_cover(monkeypatch: pytest.MonkeyPatch) -> None:
    from attncore.sweeps.draws import draw_store

    draw_store().clear()
    made = _count_generators(monkeypatch)
    short = SweepSpec(lengths=(16, 5000), queries=4, seed=22)
    sw.run_sweep(short, device="cpu")
    made.clear()
    longer = replace(short, lengths=(16, 5000, 200000))  # more blocks than were kept: drawn again
    got = sw.run_sweep(longer, device="cpu")
    assert made
    made.clear()
    for other in (replace(short, seed=23), replace(short, queries=5), replace(short, dtype="float64")):
        sw.run_sweep(other, device="cpu")  # another seed, row count or sample dtype: other draws
        assert made
        made.clear()
    monkeypatch.setenv("ATTNCORE_DRAW_CACHE", "0")
    pd.testing.assert_frame_equal(got, sw.run_sweep(longer, device="cpu"), check_exact=True)


def test_the_draw_store_stays_within_its_capacity(monkeypatch: pytest.MonkeyPatch) -> None:
    from attncore.sweeps.draws import draw_store, stream_bytes

    draw_store().clear()
    one = stream_bytes(4, 3 * sw.block_keys(SweepSpec(lengths=(1,))), torch.float32)
    monkeypatch.setenv("ATTNCORE_DRAW_CACHE", str(int(one * 2.5)))  # room for two such streams
    for seed in range(4):
        sw.run_sweep(SweepSpec(lengths=(16, 150000), queries=4, seed=100 + seed), device="cpu")
        assert draw_store().nbytes <= one * 2.5
    assert draw_store().nbytes == 2 * one
    monkeypatch.setenv("ATTNCORE_DRAW_CACHE", str(one - 1))  # one stream no longer fits: not kept
    draw_store().clear()
    sw.run_sweep(SweepSpec(lengths=(16, 150000), queries=4, seed=200), device="cpu")
    assert draw_store().nbytes == 0


def test_a_stopped_sweep_keeps_no_draws(monkeypatch: pytest.MonkeyPatch) -> None:
    from attncore.sweeps.draws import draw_store

    draw_store().clear()
    calls = []

    def stop_soon(frac: float, msg: str) -> bool:
        calls.append(frac)
        return False

    spec = SweepSpec(lengths=(16, 1 << 22), queries=64, seed=24)
    with pytest.raises(SweepCancelled):
        sw.run_sweep(spec, device="cpu", progress=stop_soon)
    assert draw_store().nbytes == 0
