"""attncore.sinks and the sink closed forms: the metric, the normalisers, the synthetic head, the sweeps."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
import torch

from attncore import theory as T
from attncore.errors import AttnInputError, ResourceLimitError
from attncore.normalizers import Sigmoid, Softmax, SoftmaxWithSink
from attncore.sinks import (
    ZOO,
    SinkSpec,
    category_mass,
    content_sweep,
    gated_attention,
    normaliser_zoo,
    output_gate,
    output_rms,
    sink_column_softmax,
    sink_head_share,
    sink_report,
    sink_scores,
    sink_sequence,
    strength_sweep,
    uniform_attention,
    uniform_sink_scores,
    zoo_theory,
)
from attncore.synthetic import make_generator

# ---------------------------------------------------------------------------- sink metric


def test_sink_scores_on_a_hand_built_encoder_matrix() -> None:
    # 3 queries, 4 keys: key 0 gets 0.5, 0.6, 0.7 -> alpha_0 = 0.6.
    A = torch.tensor([[0.5, 0.2, 0.2, 0.1],
                      [0.6, 0.1, 0.1, 0.2],
                      [0.7, 0.1, 0.0, 0.2]], dtype=torch.float64)
    alpha = sink_scores(A)
    np.testing.assert_allclose(alpha.numpy(), [0.6, 0.4 / 3, 0.3 / 3, 0.5 / 3], rtol=1e-12)


def test_sink_scores_causal_average_only_over_queries_that_see_the_key() -> None:
    # Causal 3x3: key 2 is seen only by query 2, key 1 by queries 1 and 2.
    A = torch.tensor([[1.0, 0.0, 0.0],
                      [0.8, 0.2, 0.0],
                      [0.5, 0.1, 0.4]], dtype=torch.float64)
    allowed = torch.ones(3, 3, dtype=torch.bool).tril()
    alpha = sink_scores(A, allowed)
    np.testing.assert_allclose(alpha.numpy(), [(1.0 + 0.8 + 0.5) / 3, (0.2 + 0.1) / 2, 0.4], rtol=1e-12)
    # Without the mask the zeros above the diagonal would dilute keys 1 and 2.
    assert sink_scores(A)[2] == pytest.approx(0.4 / 3)


def test_sink_head_share_counts_heads_per_layer_against_eps() -> None:
    L = 4
    uniform = torch.full((L, L), 1.0 / L)
    sink = torch.zeros(L, L)
    sink[:, 0] = 0.7
    sink[:, 1:] = 0.1
    # layer 0: heads (uniform, sink); layer 1: (sink, sink)
    attn = torch.stack([torch.stack([uniform, sink]), torch.stack([sink, sink])])  # (2, 2, L, L)
    share = sink_head_share(attn, eps=0.3)
    np.testing.assert_allclose(share.numpy(), [[0.5, 0, 0, 0], [1.0, 0, 0, 0]])
    # eps above 0.7: no sink heads; eps below 0.1: every key of the sink heads and the uniform ones.
    assert float(sink_head_share(attn, eps=0.71).sum()) == 0.0
    np.testing.assert_allclose(sink_head_share(attn, eps=0.05).numpy(), np.ones((2, L)))
    rep = sink_report(attn, {"first": torch.tensor([True, False, False, False])}, eps=0.3)
    assert rep.sink_heads(0) == 3
    np.testing.assert_allclose(rep.mass["first"].numpy(), [[0.25, 0.7], [0.7, 0.7]], rtol=1e-6)
    assert rep.uniform["first"] == pytest.approx(0.25)


def test_sink_metric_rejects_bad_input() -> None:
    with pytest.raises(AttnInputError, match="eps"):
        sink_head_share(torch.ones(1, 1, 2, 2) / 2, eps=1.5)
    with pytest.raises(AttnInputError, match="layers, heads"):
        sink_head_share(torch.ones(2, 2) / 2)
    with pytest.raises(AttnInputError, match="boolean"):
        sink_scores(torch.ones(2, 2), torch.ones(2, 2))
    with pytest.raises(AttnInputError, match="boolean vector"):
        category_mass(torch.ones(2, 3), torch.tensor([True, False]))


def test_uniform_attention_baseline() -> None:
    U = uniform_attention(4, causal=False)
    assert torch.allclose(U, torch.full((4, 4), 0.25))
    C = uniform_attention(4, causal=True)
    assert torch.allclose(C.sum(-1), torch.ones(4))
    # The first token gets 1/(i+1) from query i: mean (1 + 1/2 + 1/3 + 1/4) / 4.
    first = torch.tensor([True, False, False, False])
    assert float(category_mass(C, first)) == pytest.approx((1 + 1 / 2 + 1 / 3 + 1 / 4) / 4)


# ---------------------------------------------------------------------------- normalisers


def _scores(seed: int = 0, shape=(3, 5, 7)) -> torch.Tensor:
    g = make_generator(seed)
    return torch.randn(*shape, generator=g, dtype=torch.float64) * 3


def test_softmax1_equals_softmax_with_an_appended_zero_logit() -> None:
    x = _scores()
    # Independent reference: concatenate a zero column by hand, softmax, drop it.
    ref = torch.softmax(torch.cat([x, torch.zeros(*x.shape[:-1], 1, dtype=x.dtype)], -1), -1)[..., :-1]
    np.testing.assert_allclose(SoftmaxWithSink(0.0)(x).numpy(), ref.numpy(), rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(sink_column_softmax(x, 0.0).numpy(), ref.numpy(), rtol=1e-12, atol=1e-15)
    # Closed form: p_i = e^{x_i} / (1 + sum e^{x_j}).
    e = torch.exp(x)
    np.testing.assert_allclose(ref.numpy(), (e / (1 + e.sum(-1, keepdim=True))).numpy(), rtol=1e-12)


def test_learned_sink_logit_per_head_matches_the_column_form() -> None:
    x = _scores(1)  # (H=3, L=5, S=7)
    b = torch.tensor([-2.0, 0.5, 4.0], dtype=torch.float64).view(3, 1, 1)
    allowed = torch.ones(5, 7, dtype=torch.bool).tril(diagonal=2)
    fast = SoftmaxWithSink(b)(x, allowed)
    ref = sink_column_softmax(x, b, allowed)
    np.testing.assert_allclose(fast.numpy(), ref.numpy(), rtol=1e-12, atol=1e-15)
    # The row sum is (sum e^x) / (e^b + sum e^x) over the visible keys.
    e = torch.where(allowed, torch.exp(x), torch.zeros_like(x)).sum(-1)
    np.testing.assert_allclose(fast.sum(-1).numpy(), (e / (torch.exp(b[..., 0]) + e)).numpy(), rtol=1e-12)


def test_fully_masked_rows_give_zeros_for_every_sink_normaliser() -> None:
    x = _scores(2, (4, 6))
    allowed = torch.ones(4, 6, dtype=torch.bool)
    allowed[1] = False
    for w in (SoftmaxWithSink(0.0)(x, allowed), sink_column_softmax(x, 1.5, allowed), Sigmoid()(x, allowed),
              Softmax()(x, allowed)):
        assert not torch.isnan(w).any()
        assert torch.all(w[1] == 0)


def test_each_normalisers_row_sums_follow_their_formula() -> None:
    x = _scores(3, (2, 6, 9))
    n = x.shape[-1]
    e = torch.exp(x)
    sums = {
        "softmax": torch.ones(2, 6, dtype=x.dtype),
        "softmax1": e.sum(-1) / (1 + e.sum(-1)),
        "sink_logit": e.sum(-1) / (math.exp(1.3) + e.sum(-1)),
        "sigmoid": torch.sigmoid(x - math.log(n)).sum(-1),
    }
    got = {"softmax": Softmax()(x), "softmax1": SoftmaxWithSink(0.0)(x), "sink_logit": SoftmaxWithSink(1.3)(x),
           "sigmoid": Sigmoid()(x)}
    for name, w in got.items():
        np.testing.assert_allclose(w.sum(-1).numpy(), sums[name].numpy(), rtol=1e-12, err_msg=name)
    assert bool((got["softmax1"].sum(-1) < 1).all())


def test_gated_attention_scales_the_output_and_keeps_the_weights() -> None:
    g = make_generator(4)
    q, k, v = (torch.randn(5, 8, generator=g, dtype=torch.float64) for _ in range(3))
    x = torch.randn(5, 16, generator=g, dtype=torch.float64)
    W = torch.randn(16, 8, generator=g, dtype=torch.float64)
    gate = output_gate(x, W, -2.0)
    assert gate.shape == (5, 8) and bool(((gate > 0) & (gate < 1)).all())
    np.testing.assert_allclose(gate.numpy(), torch.sigmoid(x @ W / 4.0 - 2.0).numpy(), rtol=1e-12)
    out, w = gated_attention(q, k, v, gate)
    ref = torch.nn.functional.scaled_dot_product_attention(q[None], k[None], v[None])[0]
    np.testing.assert_allclose(out.numpy(), (gate * ref).numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(w.sum(-1).numpy(), np.ones(5), rtol=1e-12)
    headwise, _ = gated_attention(q, k, v, gate[:, :1])
    np.testing.assert_allclose(headwise.numpy(), (gate[:, :1] * ref).numpy(), rtol=1e-10, atol=1e-12)
    with pytest.raises(AttnInputError):
        gated_attention(q, k, v, gate[:, :3])
    with pytest.raises(AttnInputError):
        output_gate(x, W[:4])


# ---------------------------------------------------------------------------- the synthetic head


def test_sink_sequence_gives_the_sink_exactly_its_strength() -> None:
    spec = SinkSpec(n=200, strength=4.5, content=-1.0, spread=0.8, dtype="float64")
    seq = sink_sequence(spec)
    scaled = seq.query @ seq.key.T / math.sqrt(seq.query.shape[-1])  # (n, n + 1)
    np.testing.assert_allclose(scaled[:, 0].numpy(), 4.5, rtol=1e-12)
    real = scaled[:, 1:]
    # n^2 logits of mean c and std sigma; rows share keys, so use the n-sample standard error.
    tol = 5 * spec.spread / math.sqrt(spec.n)
    assert abs(float(real.mean()) - spec.content) < tol
    assert abs(float(real.std()) - spec.spread) < tol
    assert seq.key.shape == (201, 64) and seq.value.shape == (201, 64)
    assert float(output_rms(seq.value[:1])) == 0.0  # sink value 0 by default
    with_value = sink_sequence(replace(spec, sink_value=0.6))
    assert float(output_rms(with_value.value[:1])) == pytest.approx(0.6, rel=1e-12)
    no_sink = sink_sequence(replace(spec, sink=False))
    assert no_sink.key.shape == (200, 64)
    torch.testing.assert_close(no_sink.key, seq.key[1:])


def test_sink_sequence_follows_the_dtype_and_rejects_bad_specs() -> None:
    assert sink_sequence(SinkSpec(dtype="float64")).query.dtype == torch.float64
    assert sink_sequence(SinkSpec(dtype="bfloat16")).key.dtype == torch.bfloat16
    for bad in (SinkSpec(n=0), SinkSpec(n=5000), SinkSpec(spread=-1.0), SinkSpec(strength=float("nan")),
                SinkSpec(gate="both"), SinkSpec(dtype="int8"), SinkSpec(sink_value=20.0)):
        with pytest.raises(AttnInputError):
            sink_sequence(bad)


def _sink_weight_tol(p: np.ndarray, n: int, spread: float) -> np.ndarray:
    """4 x the per-query fluctuation of p: p (1 - p) times the relative std of a sum of n lognormals."""
    return 4 * p * (1 - p) * math.sqrt((math.exp(spread**2) - 1) / n) + 1e-6


def test_zoo_matches_the_mean_field_theory_at_n_1024() -> None:
    for spec in (SinkSpec(n=1024, strength=8.0), SinkSpec(n=1024, strength=7.0, sink_value=1.0),
                 SinkSpec(n=1024, sink=False, content=-3.0, sink_logit=-1.0, gate="headwise")):
        zoo, theory = normaliser_zoo(spec), zoo_theory(spec)
        rel = math.sqrt((math.exp(spec.spread**2) - 1) / spec.n)
        for name in ZOO:
            e, t = zoo[name], theory[name]
            sw = float(e.sink_weight.mean())
            assert abs(sw - t.sink_weight) <= _sink_weight_tol(np.array(t.sink_weight), spec.n, spec.spread), name
            rel_rms = 4 * rel + 0.1
            if name == "relu":  # a mean of n max(x, 0)/S terms: 4 standard errors of it (few keys are > 0
                # when c = -3, and every query sees the same keys, so the queries do not average it out)
                m1, m2, m4 = (float(T.gaussian_expectation(lambda x, p=p: np.maximum(x, 0.0) ** p, spec.content,
                                                           spec.spread)) for p in (1, 2, 4))
                se = math.sqrt(max(m2 - m1**2, 0.0) / spec.n)
                assert float(e.row_sum.mean()) == pytest.approx(t.row_sum, abs=4 * se + 1e-6), name
                rel_rms += 2 * math.sqrt(max(m4 - m2**2, 0.0) / spec.n) / m2
            else:
                assert float(e.row_sum.mean()) == pytest.approx(t.row_sum, rel=4 * rel, abs=1e-6), name
            # RMS of a 64-dim output: relative sampling error about 1/sqrt(2*64) per query.
            assert float(e.output_rms.mean()) == pytest.approx(t.output_rms, rel=rel_rms), name


@pytest.mark.parametrize(("c", "sd"), [(0.0, 1.0), (-3.0, 1.0), (1.5, 0.5), (-0.7, 2.0), (2.0, 0.0), (-2.0, 0.0)])
def test_relu_theory_matches_monte_carlo(c: float, sd: float) -> None:
    """E[max(X, 0)] and the output RMS of ReLU attention, closed form against 2^22 seeded draws."""
    g = make_generator(7)
    x = c + sd * torch.randn(1 << 22, generator=g, dtype=torch.float64)
    r = torch.relu(x)
    n, keys = 100, 101
    for got, want, se in ((T.relu_mass_theory(n, c, sd, keys), n / keys * float(r.mean()),
                           n / keys * float(r.std()) / 2**11),
                          (T.relu_output_rms_theory(n, c, sd, keys) ** 2, n * float((r**2).mean()) / keys**2,
                           n * float((r**2).std()) / 2**11 / keys**2)):
        assert float(got) == pytest.approx(want, abs=5 * se + 1e-12)
    assert T.relu_mass_theory(n, 2.0, 0.0) == pytest.approx(2.0) and T.relu_mass_theory(n, -2.0, 0.0) == 0.0


def test_zoo_entries_are_consistent() -> None:
    spec = SinkSpec(n=48, strength=5.0)
    zoo = normaliser_zoo(spec)
    seq = sink_sequence(spec)
    for name in ZOO:
        e = zoo[name]
        assert e.weights.shape == (48, 49)
        np.testing.assert_allclose(e.row_sum.numpy(), e.weights.sum(-1).numpy(), rtol=1e-6)
        np.testing.assert_allclose(e.sink_weight.numpy(), e.weights[:, 0].numpy(), rtol=1e-6)
    # softmax row sums are 1; softmax1 equals the softmax over [sink, real, zero-logit column].
    np.testing.assert_allclose(zoo["softmax"].row_sum.numpy(), 1.0, rtol=1e-6)
    scaled = seq.query @ seq.key.T / 8.0
    np.testing.assert_allclose(zoo["softmax1"].weights.numpy(), sink_column_softmax(scaled, 0.0).numpy(),
                               rtol=1e-5, atol=1e-7)
    # gated: weights are softmax's, the output is softmax's output times the gate.
    torch.testing.assert_close(zoo["gated"].weights, zoo["softmax"].weights)
    gate = output_gate(seq.gate_input, seq.gate_weight, spec.gate_bias)
    soft_out = torch.softmax(scaled, -1) @ seq.value
    np.testing.assert_allclose(zoo["gated"].output_rms.numpy(), output_rms(gate * soft_out).numpy(), rtol=1e-5)
    np.testing.assert_allclose(zoo["gated"].gate_mean.numpy(), gate.mean(-1).numpy(), rtol=1e-6)


def test_strength_sweep_follows_the_logistic_theory() -> None:
    spec = SinkSpec(n=1024, content=-0.5, spread=1.0)
    xs = np.linspace(-4, 16, 21)
    res = strength_sweep(spec, xs)
    p = np.asarray(T.sink_weight_theory(xs, spec.n, spec.content, spec.spread))
    assert np.all(np.abs(res.mean("sink_weight") - p) <= _sink_weight_tol(p, spec.n, spec.spread))
    rms = np.asarray(T.softmax_output_rms_theory(spec.n, spec.content, spec.spread, strength=xs))
    np.testing.assert_allclose(res.mean("output_rms"), rms, rtol=0.1)
    # The midpoint sits at c + log n + sigma^2 / 2.
    mid = spec.content + math.log(spec.n) + 0.5
    assert T.sink_weight_theory(mid, spec.n, spec.content, spec.spread) == pytest.approx(0.5)
    # Dropping the sigma^2 / 2 term would miss the measurement by more than the tolerance.
    wrong = 1 / (1 + spec.n * np.exp(spec.content - xs))
    assert np.any(np.abs(res.mean("sink_weight") - wrong) > _sink_weight_tol(p, spec.n, spec.spread))
    # Without a sink the output RMS is sqrt(e^{sigma^2} / n) for iid unit values.
    assert float(res.series["output_rms_nosink"].mean()) == pytest.approx(
        math.sqrt(math.e / spec.n) * math.exp(0), rel=0.1)


def test_content_sweep_nothing_relevant() -> None:
    spec = SinkSpec(n=1024, sink_logit=1.0)
    xs = np.linspace(-10, 6, 9)
    res = content_sweep(spec, xs)
    rel = math.sqrt((math.e - 1) / spec.n)
    np.testing.assert_allclose(res.mean("mass_softmax"), 1.0, rtol=1e-5)
    np.testing.assert_allclose(res.mean("mass_gated"), 1.0, rtol=1e-5)
    for name, extra in (("softmax1", 0.0), ("sink_logit", 1.0)):
        th = np.asarray(T.real_mass_theory(spec.n, xs, 1.0, extra_logit=extra))
        np.testing.assert_allclose(res.mean(f"mass_{name}"), th, rtol=4 * rel, atol=1e-6, err_msg=name)
    th = np.asarray(T.sigmoid_mass_theory(spec.n, xs, 1.0))
    np.testing.assert_allclose(res.mean("mass_sigmoid"), th, rtol=4 * rel, atol=1e-6)
    # Nothing relevant (c = -10): softmax still spends 1, softmax1 spends almost nothing
    # (R = n e^{c + 1/2} = 0.077, so R / (1 + R) = 0.072).
    assert res.mean("mass_softmax")[0] == pytest.approx(1.0, abs=1e-6)
    assert res.mean("mass_softmax1")[0] < 0.1 and res.mean("mass_sigmoid")[0] < 0.01
    # The gate scales the softmax output by its RMS.
    g = float(T.gate_rms_theory(spec.gate_bias))
    np.testing.assert_allclose(res.mean("rms_gated") / res.mean("rms_softmax"), g, rtol=0.15)


def test_sweeps_are_bounded() -> None:
    with pytest.raises(AttnInputError, match="points"):
        strength_sweep(SinkSpec(), np.zeros(1))
    with pytest.raises(ResourceLimitError, match="limit"):
        strength_sweep(SinkSpec(n=1024), np.zeros(400))


# ---------------------------------------------------------------------------- closed forms


def test_gaussian_expectation_and_gate_theory() -> None:
    assert T.gaussian_expectation(lambda z: z**2, 0.0, 1.0) == pytest.approx(1.0, rel=1e-10)
    assert T.gaussian_expectation(np.exp, 0.3, 0.7) == pytest.approx(math.exp(0.3 + 0.49 / 2), rel=1e-10)
    # Gate mean at b = 0 is 1/2 by symmetry; monotone in b.
    assert T.gate_mean_theory(0.0) == pytest.approx(0.5, abs=1e-12)
    assert T.gate_mean_theory(-2.0) < T.gate_mean_theory(0.0) < T.gate_mean_theory(2.0)
    # Monte Carlo check of the gate RMS with a seeded generator (1e6 samples: se ~ 2e-4).
    z = torch.randn(1_000_000, generator=make_generator(5), dtype=torch.float64)
    mc = float(torch.sigmoid(z - 2.0).pow(2).mean().sqrt())
    assert T.gate_rms_theory(-2.0) == pytest.approx(mc, abs=2e-3)


def test_mass_theories_limits() -> None:
    # softmax1 real mass R / (1 + R); huge R -> 1, tiny R -> R.
    assert T.real_mass_theory(10, 20.0, 0.0, extra_logit=0.0) == pytest.approx(1.0, abs=1e-8)
    assert T.real_mass_theory(10, -20.0, 0.0, extra_logit=0.0) == pytest.approx(10 * math.exp(-20), rel=1e-6)
    assert T.real_mass_theory(10, -20.0, 0.0) == 1.0  # plain softmax, no sink
    # With a sink, the masses add up to 1 for softmax.
    s = np.linspace(-3, 12, 7)
    total = np.asarray(T.real_mass_theory(50, 0.2, 0.7, strength=s)) + np.asarray(
        T.sink_weight_theory(s, 50, 0.2, 0.7))
    np.testing.assert_allclose(total, 1.0, rtol=1e-12)
    # Sigmoid with no spread: n * sigma(c - log n).
    n, c = 64, 1.5
    assert T.sigmoid_mass_theory(n, c, 0.0) == pytest.approx(n / (1 + math.exp(-(c - math.log(n)))), rel=1e-10)
    assert T.uniform_share(17) == pytest.approx(1 / 17)


# ---------------------------------------------------------------------------- CUDA


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_zoo_and_sweeps_run_on_cuda() -> None:
    spec = SinkSpec(n=256, strength=6.0)
    cpu, gpu = normaliser_zoo(spec, "cpu"), normaliser_zoo(spec, "cuda")
    for name in ZOO:
        assert gpu[name].weights.device.type == "cuda"
        # Different generators on different devices: compare statistics, not draws.
        assert float(gpu[name].row_sum.mean().cpu()) == pytest.approx(float(cpu[name].row_sum.mean()), rel=0.05)
    res = strength_sweep(spec, np.linspace(-4, 16, 11), "cuda")
    p = np.asarray(T.sink_weight_theory(res.x, spec.n, 0.0, 1.0))
    assert np.all(np.abs(res.mean("sink_weight") - p) <= _sink_weight_tol(p, spec.n, 1.0) * 2)
    A = torch.rand(2, 3, 5, 5, device="cuda")
    assert sink_head_share(A / A.sum(-1, keepdim=True)).device.type == "cuda"


def test_the_grid_downsampler_matches_the_single_map_one() -> None:
    from ui.maps import downsample, downsample_stack

    g = make_generator(6)
    for shape, side, with_nan in (((2, 3, 50, 37), 8, True), ((2, 3, 50, 37), 8, False),
                                  ((2, 2, 17, 17), 40, False), ((1, 2, 130, 129), 40, False)):
        a = torch.rand(*shape, generator=g).numpy()
        if with_nan:
            a[0, 0, 3, 4] = np.nan
        small, fr, fc = downsample_stack(a, side)
        for i in range(shape[0]):
            for j in range(shape[1]):
                ref, rfr, rfc = downsample(a[i, j], side)
                assert (fr, fc) == (rfr, rfc)
                np.testing.assert_allclose(small[i, j], ref, rtol=1e-6, equal_nan=True)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("L", [1, 2, 7, 100])
def test_uniform_sink_scores_closed_form_equals_the_uniform_map(L: int, causal: bool) -> None:
    allowed = torch.ones(L, L, dtype=torch.bool).tril() if causal else None
    ref = sink_scores(uniform_attention(L, causal).double(), allowed)
    got = uniform_sink_scores(L, causal)
    torch.testing.assert_close(got, ref, rtol=1e-6, atol=1e-7)
    assert float(got[-1]) == pytest.approx(1 / L)
    if causal:  # the first key: the mean of 1/(i+1) over every query
        assert float(got[0]) == pytest.approx(sum(1 / (i + 1) for i in range(L)) / L)
