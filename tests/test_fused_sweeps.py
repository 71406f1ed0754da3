"""The fused (Triton) entropy sweep against the torch engine, the materialised reference and theory.

On a machine without CUDA the kernels run in Triton's interpreter: this module sets
``TRITON_INTERPRET=1`` before triton is first imported (triton reads it when its ``@jit``
functions are created, its own library included), so the kernels run on the CPU at small n
(2^8..2^14). With a GPU the same tests run the compiled kernels on it, and the tests marked
``cuda`` add the large-n checks (skipped without a GPU).
"""

from __future__ import annotations

import math
import os
import sys
import threading

import numpy as np
import pytest
import torch

_CUDA = torch.cuda.is_available()
if not _CUDA and "triton" not in sys.modules:
    os.environ["TRITON_INTERPRET"] = "1"
pytest.importorskip("triton")

from attncore.errors import AttnInputError, ResourceLimitError  # noqa: E402
from attncore.normalizers import Sigmoid, Softmax, SoftmaxWithSink  # noqa: E402
from attncore.row_theory import sweep_theory  # noqa: E402
from attncore.stats import entropy, max_weight, row_sum, sum_squares  # noqa: E402
from attncore.sweeps import MAX_SWEEP_N, SweepCancelled, SweepSpec, max_sweep_n, run_sweep  # noqa: E402
from attncore.sweeps.fused import (  # noqa: E402
    FixedInputs,
    _Fused,
    key_batches,
    run_fused_sweep,
    split_tf32,
    tf32_round,
)
from attncore.sweeps.fused_plan import (  # noqa: E402
    MAX_SWEEP_N_CUDA,
    fused_available,
    fused_unavailable_reason,
    validate_fused,
)
from attncore.sweeps.fused_replay import fused_draws, fused_normals, fused_reference_sweep  # noqa: E402

DEV = "cuda" if _CUDA else "cpu"
pytestmark = pytest.mark.skipif(not fused_available(DEV), reason=str(fused_unavailable_reason(DEV)))
STATS = ("entropy", "max_weight", "sum_sq", "row_sum", "output_std")


def _spec(**kw) -> SweepSpec:
    base = dict(lengths=(256, 1000, 4096), queries=8, d=16, value_dim=4, seed=3)
    base.update(kw)
    return SweepSpec(**base)


def _rows_reference(w: torch.Tensor) -> dict[str, np.ndarray]:
    w64 = w.to(torch.float64)
    return {"entropy": entropy(w64).numpy(), "max_weight": max_weight(w64).numpy(),
            "sum_sq": sum_squares(w64).numpy(), "row_sum": row_sum(w64).numpy()}


def _normaliser(name: str):
    return {"softmax": Softmax(), "softmax1": SoftmaxWithSink(0.0), "sigmoid": Sigmoid()}[name]


# --------------------------------------------------------------------------- the generator


@pytest.mark.parametrize("vectors", [False, True])
def test_normals_have_the_standard_normal_law(vectors):
    x = fused_normals(1 << 14, seed=7, device=DEV, vectors=vectors).cpu().double()  # 65536 samples
    n = x.numel()
    assert abs(float(x.mean())) < 4 / math.sqrt(n)
    assert abs(float(x.var()) - 1) < 4 * math.sqrt(2 / n)
    # fractions below fixed quantiles of N(0, 1), each within 4 binomial standard errors
    for z, p in ((-2.0, 0.02275), (-1.0, 0.15866), (0.0, 0.5), (1.0, 0.84134), (2.5, 0.99379)):
        frac = float((x < z).double().mean())
        assert abs(frac - p) < 4 * math.sqrt(p * (1 - p) / n), (z, frac, p)
    # the four outputs of a counter are uncorrelated
    four = x.view(4, -1)
    c = torch.corrcoef(four)
    assert float((c - torch.eye(4, dtype=c.dtype)).abs().max()) < 4 / math.sqrt(four.shape[1])
    assert torch.equal(fused_normals(1 << 10, seed=7, device=DEV), fused_normals(1 << 10, seed=7, device=DEV))


@pytest.mark.parametrize("fast", [False, pytest.param(True, marks=pytest.mark.skipif(
    not _CUDA, reason="the fast special functions are inline PTX: they run compiled on CUDA only"))])
def test_box_muller_radius_reaches_7_54_sigma_and_never_nans(fast):
    from attncore.sweeps import fused_kernels as fk

    top = (1 << 32) - 1
    w1 = torch.tensor([0, 0, 1, 255, top, top, 1 << 31], dtype=torch.int64, device=DEV)
    w2 = torch.tensor([0, 255, 0, 0, top, 0, 0], dtype=torch.int64, device=DEV)
    out = torch.empty(2, w1.numel(), device=DEV)
    fk._box_muller_kernel[(1,)](w1, w2, out, w1.numel(), BLOCK=8, FAST=fast)
    out = out.cpu().double()
    r = torch.sqrt(out[0] ** 2 + out[1] ** 2)
    assert torch.isfinite(out).all()

    def radius(a: int, b: int) -> float:
        u = (a + ((b & 255) + 0.5) / 256) / 2**32
        return math.sqrt(-2 * math.log(min(u, 1.0)))

    expected = [radius(int(a), int(b)) for a, b in zip(w1.tolist(), w2.tolist(), strict=True)]
    assert float(r[0]) == pytest.approx(math.sqrt(2 * math.log(2**41)), rel=1e-5)  # 7.54 sigma
    assert float(r[0]) > 7.5
    np.testing.assert_allclose(r.numpy(), expected, rtol=2e-5, atol=2e-3)
    # 40 bits: the second word's low byte refines the radius where the first word is small
    assert float(r[0]) > float(r[1]) > float(r[2])


def test_tf32_rounding_in_the_kernel_equals_the_host_and_the_rule():
    """The kernels' tf32 rounding, the host's, and the rule from scratch: nearest, ties away from zero."""
    from attncore.sweeps import fused_kernels as fk

    g = torch.Generator().manual_seed(3)
    x = torch.cat([torch.randn(4000, generator=g) * 10.0 ** torch.randint(-6, 7, (4000,), generator=g),
                   torch.tensor([0.0, 1.0, -1.0, 3.0e38, -2.5e-30])])
    ties = torch.tensor([1 + 2**-11, -(1 + 2**-11), 1 + 3 * 2**-11, 1.5 + 2**-11])  # exactly half a tf32 ulp
    x = torch.cat([x, ties]).to(torch.float32)
    host = tf32_round(x)
    dev = torch.empty_like(x, device=DEV)
    fk._tf32_kernel[(-(-x.numel() // 1024),)](x.to(DEV), dev, x.numel(), BLOCK=1024)
    assert torch.equal(dev.cpu(), host)
    assert int((host.view(torch.int32) & 0x1FFF).abs().sum()) == 0  # 10 mantissa bits left
    # from scratch in float64: the multiple of the tf32 ulp nearest to x, halves away from zero
    xd = x.double()
    nz = xd != 0
    ulp = torch.zeros_like(xd)
    ulp[nz] = 2.0 ** (torch.floor(torch.log2(xd[nz].abs())) - 10)
    scratch = torch.where(nz, torch.sign(xd) * torch.floor(xd.abs() / torch.where(nz, ulp, 1.0) + 0.5) * ulp, xd)
    assert torch.equal(host.double(), scratch)
    assert host[-4:].tolist() == [1 + 2**-10, -(1 + 2**-10), 1 + 4 * 2**-11, 1.5 + 2**-10]


def test_split_queries_are_exact_tf32_parts_of_the_float32_ones():
    g = torch.Generator().manual_seed(4)
    q = torch.randn(7, 20, generator=g, dtype=torch.float64) * 3.0
    hi, lo = split_tf32(q, 32)
    assert hi.shape == lo.shape == (7, 32) and not hi[:, 20:].any() and not lo[:, 20:].any()
    for part in (hi, lo):
        assert int((part.view(torch.int32) & 0x1FFF).abs().sum()) == 0
    err = (hi.double() + lo.double() - torch.nn.functional.pad(q, (0, 12))).abs()
    assert float(err.max()) <= 2.0**-21 * float(q.abs().max())
    # a tf32 key times either part is exact in float32: the tensor cores' products lose nothing
    k = tf32_round(torch.randn(20, generator=g))
    for part in (hi, lo):
        prod32 = part[:, :20] * k
        assert torch.equal(prod32.double(), part[:, :20].double() * k.double())


def test_vectors_draws_follow_the_documented_index_map():
    """Component DCH c + 4 p + 2 a + b of key j is output a + 2 b of counter (j n_dch + c) DCH/4 + p, in tf32."""
    from attncore.sweeps.fused_plan import STREAM_KEYS, STREAM_VALUES, launch_plan

    spec = _spec(method="vectors", d=40, value_dim=6)
    p = launch_plan(spec)
    n = 5
    draws = fused_draws(spec, n, DEV)
    P4 = p.dch // 4
    counters = n * p.n_dch * P4
    z = fused_normals(counters, seed=spec.seed, device=DEV, stream=STREAM_KEYS, vectors=True).cpu().view(4, -1)
    keys = torch.empty(n, p.n_dch * p.dch)
    for j in range(n):
        for t in range(p.n_dch * p.dch):
            c, r = divmod(t, p.dch)
            q4, ab = divmod(r, 4)
            a, b = divmod(ab, 2)
            keys[j, t] = z[a + 2 * b, (j * p.n_dch + c) * P4 + q4]
    assert torch.equal(draws["keys"].cpu(), tf32_round(keys)[:, : spec.d])
    D4 = p.dvp // 4
    zv = fused_normals(n * D4, seed=spec.seed, device=DEV, stream=STREAM_VALUES, vectors=True).cpu().view(4, -1)
    vals = torch.stack([torch.stack([zv[(t % 4) // 2 + 2 * (t % 2), j * D4 + t // 4] for t in range(p.dvp)])
                        for j in range(n)])
    assert torch.equal(draws["values"].cpu(), tf32_round(vals)[:, : spec.value_dim])


# --------------------------------------------------------------------------- exact reduction on given inputs


@pytest.mark.parametrize("normalizer", ["softmax", "softmax1", "sigmoid"])
def test_fixed_logits_reduce_exactly(normalizer):
    spec = _spec(lengths=(1, 700, 3000), queries=5, normalizer=normalizer, scale_rule="none", d=4)
    g = torch.Generator().manual_seed(11)
    z = torch.randn(5, 3000, generator=g)
    z[0, 1234] = 9.0  # one dominant key
    z[1, :] = 0.25  # a flat row
    z[2, 2999] = -40.0  # far below the max (underflows)
    z[3, 500:] *= 3.0
    # many programs and launches (chunks of 1024 keys, 2048 keys per launch): the merge is exercised
    got = run_fused_sweep(spec, device=DEV, fixed=FixedInputs(z=z), chunk=1024, launch_keys=2048)
    eng = _Fused(spec, torch.device(DEV))
    std = eng.q_norm.cpu() * spec.logit_factor(700)
    for n, row in zip((1, 700, 3000), got.itertuples(), strict=True):
        x = z[:, :n] * std.to(torch.float32)[:, None]  # (R, n) as the kernel forms it
        if normalizer == "sigmoid":
            w = torch.sigmoid(x.double() - math.log(n))
        else:
            w = _normaliser(normalizer)(x.double())
        ref = _rows_reference(w)
        ms = ref["sum_sq"].mean()
        assert row.entropy == pytest.approx(ref["entropy"].mean(), rel=1e-5, abs=1e-6)
        assert row.max_weight == pytest.approx(ref["max_weight"].mean(), rel=1e-5)
        assert row.sum_sq == pytest.approx(ms, rel=1e-5)
        assert row.row_sum == pytest.approx(ref["row_sum"].mean(), rel=1e-5)
        assert row.output_std == pytest.approx(math.sqrt(ms), rel=1e-5)


@pytest.mark.parametrize(("normalizer", "scale_rule"),
                         [("softmax", "sqrt_d"), ("softmax1", "ssmax"), ("sigmoid", "none")])
def test_fixed_vectors_reduce_exactly(normalizer, scale_rule):
    from attncore.attention import attention_stages
    from attncore.normalizers import SSMax

    n = 600
    spec = _spec(lengths=(100, n), queries=20, d=20, value_dim=5, method="vectors", normalizer=normalizer,
                 scale_rule=scale_rule, temperature=0.7)
    g = torch.Generator().manual_seed(5)
    keys, vals = torch.randn(n, 20, generator=g), torch.randn(n, 5, generator=g)
    keys[17] *= 6.0  # a key far out
    got = run_fused_sweep(spec, device=DEV, fixed=FixedInputs(keys=keys, values=vals), chunk=128, launch_keys=256)
    keys, vals = tf32_round(keys), tf32_round(vals)  # what the kernel multiplies (as its own draws)
    q = _Fused(spec, torch.device(DEV)).q.cpu().double()
    for m, row in zip((100, n), got.itertuples(), strict=True):
        if scale_rule == "ssmax" and normalizer == "softmax":
            norm, scale = SSMax(spec.ssmax_s), spec.base_scale
        else:
            norm = _normaliser(normalizer)
            scale = spec.logit_factor(m) * spec.temperature
        st = attention_stages(q[None], keys[:m].double()[None], vals[:m].double()[None], scale=scale,
                              normalizer=norm, temperature=spec.temperature)
        w = st.weights[0]
        if normalizer == "sigmoid":  # the sweep's sigmoid carries the -log n bias
            w = torch.sigmoid((q @ keys[:m].double().T) * spec.logit_factor(m) - math.log(m))
            out = w @ vals[:m].double()
        else:
            out = st.output[0]
        ref = _rows_reference(w)
        assert row.entropy == pytest.approx(ref["entropy"].mean(), rel=2e-5)
        assert row.max_weight == pytest.approx(ref["max_weight"].mean(), rel=2e-5)
        assert row.sum_sq == pytest.approx(ref["sum_sq"].mean(), rel=2e-5)
        assert row.row_sum == pytest.approx(ref["row_sum"].mean(), rel=2e-5)
        assert row.output_std == pytest.approx(math.sqrt(float((out**2).mean())), rel=2e-5)


# --------------------------------------------------------------------------- random draws


@pytest.mark.parametrize(("method", "normalizer", "scale_rule"), [
    ("logits", "softmax", "sqrt_d"), ("logits", "sigmoid", "ssmax"), ("logits", "softmax1", "llama4"),
    ("vectors", "softmax", "ssmax"), ("vectors", "softmax1", "none"),
])
def test_fused_equals_materialised_reference_on_its_own_draws(method, normalizer, scale_rule):
    spec = _spec(method=method, normalizer=normalizer, scale_rule=scale_rule,
                 lengths=(256, 1500) if method == "vectors" else (256, 1000, 4096))
    got = run_fused_sweep(spec, device=DEV)
    ref = fused_reference_sweep(spec, device=DEV)
    assert got["n"].tolist() == ref["n"].tolist()
    for col in (*STATS, "normalized_entropy", "effective_support", "logit_std", "logit_factor"):
        np.testing.assert_allclose(got[col], ref[col], rtol=3e-5, atol=1e-7, err_msg=col)
    # the standard errors too: the vectors output's from the kernels' batches of keys (program p of a
    # launch in batch p mod 8), which the reference rebuilds from the launch plan
    for col in ("entropy_sem", "max_weight_sem", "output_std_sem"):
        np.testing.assert_allclose(got[col], ref[col], rtol=1e-3, atol=1e-9, err_msg=col)
    if method == "vectors":
        batches = key_batches(spec, spec.lengths, 1500)
        assert len(set(batches.tolist())) == 8  # 1500 keys in 32-key programs: every batch holds keys


@pytest.mark.parametrize("method", ["logits", "vectors"])
def test_fused_agrees_with_the_torch_engine_within_standard_errors(method):
    n = (1 << 13) if method == "logits" else 1 << 11
    spec = _spec(method=method, lengths=(1 << 8, n), queries=16, d=32,
                 scale_rule="none", temperature=4.0)
    fused = run_fused_sweep(spec, device=DEV)
    torch_engine = run_sweep(spec, device=DEV, engine="torch")
    # the same queries: the logit scale agrees exactly
    np.testing.assert_array_equal(fused["logit_std"], torch_engine["logit_std"])
    np.testing.assert_array_equal(fused["logit_factor"], torch_engine["logit_factor"])
    for col in STATS:
        if col == "row_sum":
            np.testing.assert_allclose(fused[col], 1.0, rtol=1e-6)
            continue
        diff = (fused[col] - torch_engine[col]).abs()
        bound = 4.5 * np.sqrt(fused[f"{col}_sem"] ** 2 + torch_engine[f"{col}_sem"] ** 2)
        assert (diff <= bound).all(), (col, diff.tolist(), bound.tolist())


def test_fused_logits_match_the_exact_quadrature():
    spec = _spec(lengths=(1 << 10, 1 << 13), queries=16, d=64, seed=1)
    got = run_fused_sweep(spec, device=DEV)
    th = sweep_theory(spec.lengths, d=spec.d)
    for col in ("entropy", "max_weight", "sum_sq"):
        z = (got[col] - th[col]).abs() / got[f"{col}_sem"]
        assert (z < 4.5).all(), (col, z.tolist())


def test_seeded_runs_repeat_exactly_and_do_not_depend_on_launch_cutting():
    spec = _spec(lengths=(300, 2500), seed=9)
    a = run_fused_sweep(spec, device=DEV)
    b = run_fused_sweep(spec, device=DEV)
    assert a.equals(b)
    c = run_fused_sweep(spec, device=DEV, chunk=1024, launch_keys=1024)  # other programs and launches
    for col in STATS:
        np.testing.assert_allclose(c[col], a[col], rtol=2e-6, err_msg=col)
    other = run_fused_sweep(_spec(lengths=(300, 2500), seed=10), device=DEV)
    assert not np.allclose(other["entropy"], a["entropy"])
    # draws do not depend on n: the first 300 keys of the 2500-key replay are the 300-key replay
    z_long = fused_draws(spec, 2500, DEV)["z"]
    z_short = fused_draws(spec, 300, DEV)["z"]
    assert torch.equal(z_long[:, :300], z_short)


def test_vectors_draws_do_not_depend_on_n_and_values_are_gaussian():
    spec = _spec(method="vectors", d=70, value_dim=3)
    long, short = fused_draws(spec, 200, DEV), fused_draws(spec, 70, DEV)
    assert torch.equal(long["keys"][:70], short["keys"])
    assert torch.equal(long["values"][:70], short["values"])
    assert long["keys"].shape == (200, 70) and long["values"].shape == (200, 3)
    k = long["keys"].double()
    assert abs(float(k.mean())) < 4 / math.sqrt(k.numel()) and abs(float(k.var()) - 1) < 0.05


# --------------------------------------------------------------------------- control


def test_cancel_and_progress_stop_between_launches():
    spec = _spec(lengths=(4096,))
    ev = threading.Event()
    ev.set()
    with pytest.raises(SweepCancelled):
        run_fused_sweep(spec, device=DEV, cancel=ev)
    calls = []

    def stop(frac: float, msg: str) -> bool:
        calls.append((frac, msg))
        return False

    with pytest.raises(SweepCancelled):
        run_fused_sweep(spec, device=DEV, progress=stop, launch_keys=1024)
    assert len(calls) == 1 and 0 < calls[0][0] < 1 and "random numbers" in calls[0][1]
    seen = []
    run_fused_sweep(spec, device=DEV, progress=lambda f, m: seen.append(f), launch_keys=1024)
    assert seen[-1] == 1.0 and seen == sorted(seen)


def test_no_host_sync_inside_a_pass(monkeypatch):
    """Nothing in the launch loop reads a device value back (no item / bool / int / float)."""
    spec = _spec(lengths=(500, 3000))
    eng = _Fused(spec, torch.device(DEV), chunk=1024, launch_keys=1024)

    def boom(*_a, **_k):
        raise AssertionError("host sync inside the sweep loop")

    for name in ("item", "__bool__", "__int__", "__float__", "tolist"):
        monkeypatch.setattr(torch.Tensor, name, boom)
    with monkeypatch.context() as m:  # the final copy of the row stats to the CPU is allowed
        m.setattr("attncore.sweeps.fused.row_stats", lambda acc, n, spec: {"s0": acc.a.clone()})
        out = eng.run_pass(spec.logit_factor(500), (500, 3000), 0.0, lambda _s: None)
    monkeypatch.undo()
    assert len(out) == 2 and (out[1]["s0"] > out[0]["s0"]).all()


def test_device_caps_and_plain_errors(monkeypatch):
    assert max_sweep_n("cpu") == MAX_SWEEP_N == 1 << 24
    with pytest.raises(AttnInputError, match="above the cap"):
        validate_fused(_spec(lengths=(MAX_SWEEP_N + 1,)), torch.device("cpu"))
    with pytest.raises(AttnInputError, match="float32"):
        validate_fused(_spec(dtype="float64"), torch.device("cpu"))
    with pytest.raises(ResourceLimitError):
        validate_fused(_spec(lengths=(1 << 24,), queries=64), torch.device("cpu"))  # interpreter budget
    assert "mps" in str(fused_unavailable_reason("mps"))
    # a CUDA device with the fused kernels gets 2^30 (without a GPU: pretend)
    _pretend_cuda(monkeypatch)
    assert max_sweep_n("cuda") == MAX_SWEEP_N_CUDA == 1 << 30
    validate_fused(_spec(lengths=(1 << 30,), queries=64, d=128), torch.device("cuda"))
    with pytest.raises(AttnInputError, match="2\\^30"):
        validate_fused(_spec(lengths=((1 << 30) + 1,)), torch.device("cuda"))
    with pytest.raises(ResourceLimitError, match="Lower"):
        validate_fused(_spec(lengths=(1 << 30,), queries=1024, d=4096, method="vectors"), torch.device("cuda"))


# --------------------------------------------------------------------------- CUDA only


@pytest.mark.cuda
@pytest.mark.skipif(not _CUDA, reason="needs a CUDA GPU")
def test_cuda_max_weight_tail_matches_quadrature_at_large_n():
    spec = SweepSpec(lengths=(1 << 20, 1 << 24, 1 << 27, 1 << 30), queries=64, d=128, seed=2)
    got = run_fused_sweep(spec, device="cuda")
    th = sweep_theory(spec.lengths, d=spec.d)
    for col in ("max_weight", "entropy", "sum_sq"):
        z = (got[col] - th[col]).abs() / got[f"{col}_sem"]
        assert (z < 4.5).all(), (col, z.tolist())


@pytest.mark.cuda
@pytest.mark.skipif(not _CUDA, reason="needs a CUDA GPU")
@pytest.mark.parametrize("method", ["logits", "vectors"])
def test_cuda_fused_equals_materialised_and_memory_stays_flat(method):
    spec = SweepSpec(lengths=(1 << 12, 1 << 16), queries=64, d=128, method=method, seed=4)
    got = run_fused_sweep(spec, device="cuda")
    ref = fused_reference_sweep(spec, device="cuda")
    for col in STATS:
        np.testing.assert_allclose(got[col], ref[col], rtol=1e-4, err_msg=col)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    run_fused_sweep(SweepSpec(lengths=(1 << 26,), queries=64, d=128, method=method), device="cuda")
    assert torch.cuda.max_memory_allocated() - base < 256 << 20  # materialised: 17 GB and more


def test_cuda_bench_logic_runs_through_the_interpreter(monkeypatch, capsys):
    """bench.entropy --device cuda, its Python logic end to end at n = 2^10 with DEV = cpu (no GPU timing)."""
    import types

    from bench import entropy_cuda

    if not _CUDA:
        props = types.SimpleNamespace(name="(interpreter)", total_memory=1 << 30, multi_processor_count=0)
        for name, fn in (("is_available", lambda: True), ("synchronize", lambda: None),
                         ("reset_peak_memory_stats", lambda: None), ("memory_allocated", lambda: 0),
                         ("max_memory_allocated", lambda: 0), ("empty_cache", lambda: None),
                         ("mem_get_info", lambda: (1 << 30, 1 << 30)),
                         ("get_device_properties", lambda _i: props)):
            monkeypatch.setattr(torch.cuda, name, fn)
        monkeypatch.setattr(entropy_cuda, "DEV", "cpu")
        monkeypatch.setattr(entropy_cuda, "Q", 4)
        monkeypatch.setattr(entropy_cuda, "D", 16)
    assert entropy_cuda.main(["--min-exp", "10", "--max-exp", "10", "--reps", "1"]) == 0
    out = capsys.readouterr().out
    lines = [ln for ln in out.splitlines() if ln.strip().startswith("2^10")]
    assert [ln.split()[1] for ln in lines] == ["logits", "vectors"]
    assert "targets (issue 25" in out and "materialised" in out
    assert "vectors 2^24 <= 25.00 ms" in out and "vectors 2^30 <= 1.500 s" in out  # the new targets, printed
    assert [ln.split(":")[0].strip() for ln in out.splitlines() if "the dispatch table" in ln] == ["logits", "vectors"]


def test_cuda_out_of_memory_becomes_a_plain_limit_error(monkeypatch):
    from attncore.budget import oom_to_limit
    from attncore.sweeps import fused as fused_sweeps

    freed = []
    monkeypatch.setattr("attncore.budget.free_gpu_memory", lambda: freed.append(1))

    def oom(*_a, **_k):  # the sweep's steps: out of memory at the first launch
        raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB")
        yield  # noqa: RET503 (a generator, as the real steps)

    monkeypatch.setattr(fused_sweeps, "_steps", oom)
    with pytest.raises(ResourceLimitError, match="ran out of memory.*Lower the query rows") as info:
        run_fused_sweep(_spec(), device=DEV)
    assert freed == [1] and info.value.__context__ is None  # the failed frames were let go first
    assert oom_to_limit(lambda: 3, "x", "y") == 3


def _pretend_cuda(monkeypatch) -> None:
    """The dispatch as on a CUDA machine where the fused kernels run (without a GPU here)."""
    monkeypatch.setattr("attncore.sweeps.dispatch.fused_unavailable_reason",
                        lambda dev: None if torch.device(dev).type == "cuda" else "interpreter off")


def test_engine_choice(monkeypatch):
    from attncore.sweeps import CROSSOVERS, ENGINE_ENV, choose_engine, engine_choice

    monkeypatch.delenv(ENGINE_ENV, raising=False)
    small, big = _spec(lengths=(16, 1000)), _spec(lengths=(16, 1 << 22))
    assert choose_engine(None, "cpu", big) == "torch"
    assert choose_engine("torch", DEV, small) == "torch"
    assert choose_engine("fused", DEV, small) == "fused"  # interpreted on the CPU, compiled on CUDA
    monkeypatch.setenv(ENGINE_ENV, "fused")
    assert choose_engine(None, DEV, small) == "fused" and choose_engine("torch", DEV, small) == "torch"
    with pytest.raises(AttnInputError, match="unknown sweep engine"):
        choose_engine("fast", DEV, small)
    with pytest.raises(AttnInputError, match="cannot run here"):
        choose_engine("fused", "mps", small)
    monkeypatch.delenv(ENGINE_ENV)
    # on CUDA: by size, at the measured crossovers (the table's numbers, not restated here)
    _pretend_cuda(monkeypatch)
    for method in ("logits", "vectors"):
        cross = CROSSOVERS[method].n
        for n_max in (cross // 2, cross - 1, cross, 2 * cross, 1 << 30):
            spec = _spec(method=method, lengths=(16, n_max), queries=64, d=128)
            expect = "fused" if n_max >= cross or n_max > MAX_SWEEP_N else "torch"
            choice = engine_choice(spec, "cuda")
            assert choice.name == expect, (method, n_max, choice)
            if expect == "torch":  # the reason names the crossover and where it was measured
                gpu = CROSSOVERS[method].measured.split(",")[0]  # the GPU the table was measured on
                assert f"2^{cross.bit_length() - 1}" in choice.reason and gpu in choice.reason
    assert choose_engine(None, "cuda", _spec(lengths=(1 << 22,), dtype="float64")) == "torch"
    assert "float32" in engine_choice(_spec(lengths=(1 << 22,), dtype="float64"), "cuda").reason
    assert choose_engine(None, "cpu", big) == "torch"
    # below the crossover, a sweep the torch engine would refuse (its work limit) goes to the kernels
    heavy = _spec(lengths=tuple(range(1000, 1200)), scale_rule="ssmax", queries=1024)  # 200 passes
    assert choose_engine(None, "cuda", heavy) == "fused"
    assert "work limit" in engine_choice(heavy, "cuda").reason


def test_partial_results_of_a_fused_sweep_are_its_first_lengths(monkeypatch):
    """A staged fused run reports after ~1/16 and ~1/4 of its random numbers; each report is a prefix of
    the final frame, and partial_lengths says which lengths each report ends at."""
    from attncore.sweeps import ENGINE_ENV, partial_lengths, run_sweep_set

    monkeypatch.delenv(ENGINE_ENV, raising=False)
    spec = _spec(lengths=tuple(1 << k for k in range(4, 13)), queries=4)
    seen: list = []
    final = run_fused_sweep(spec, device=DEV, partial=seen.append, launch_keys=1024)
    assert final.equals(run_fused_sweep(spec, device=DEV, launch_keys=1024))  # reporting changes no number
    assert [int(f["n"].max()) for f in seen] == list(partial_lengths(spec, DEV, engine="fused")) == [256, 1024]
    for f in seen:
        pd_equal = final.iloc[: len(f)].reset_index(drop=True)
        np.testing.assert_allclose(f[list(STATS)], pd_equal[list(STATS)], rtol=1e-12)
    # SSMax: one pass per length; the reports hold the finished passes
    ss = _spec(lengths=(64, 512, 1024, 4096), queries=4, scale_rule="ssmax")
    seen = []
    run_fused_sweep(ss, device=DEV, partial=seen.append)
    assert [int(f["n"].max()) for f in seen] == list(partial_lengths(ss, DEV, engine="fused")) == [512, 1024]
    # through run_sweep_set: each sweep in turn to its next report, then one view of both (as the torch
    # engine reports the curves it streams together)
    shown: list = []
    finals = run_sweep_set([spec, ss], device=DEV, engine="fused", partial=shown.append)
    assert len(shown) == 2
    for k, view in enumerate(shown):
        assert [int(f["n"].max()) for f in view] == [partial_lengths(spec, DEV, engine="fused")[k],
                                                      partial_lengths(ss, DEV, engine="fused")[k]]
    assert finals[1].equals(run_fused_sweep(ss, device=DEV))


@pytest.mark.slow
def test_kernels_compile_for_an_h100_without_a_gpu():
    """Triton's compiler and the bundled ptxas build the default variants for sm_90 on any machine."""
    import subprocess
    from pathlib import Path

    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    script = Path(__file__).with_name("fused_compile.py")
    r = subprocess.run([sys.executable, str(script), "--quick"], capture_output=True, text=True, env=env,
                       timeout=300, check=False)
    assert r.returncode == 0, r.stdout + r.stderr[-3000:]
    lines = [ln for ln in r.stdout.splitlines() if "REG:" in ln]
    assert len(lines) == 3 and all("_vectors_kernel" in ln or "logits" in ln for ln in lines), r.stdout


def test_entropy_vs_length_runs_the_fused_engine_when_asked(monkeypatch):
    from attncore.sweeps import ENGINE_ENV, check_sweep, entropy_vs_length, max_sweep_work, plan, sweep_work
    from attncore.sweeps.fused_plan import MAX_INTERPRETED_WORK, fused_work

    monkeypatch.delenv(ENGINE_ENV, raising=False)
    kw = dict(queries=8, d=16, seed=3)
    spec = _spec(lengths=(256, 1000))
    fused = entropy_vs_length([256, 1000], engine="fused", device=DEV, **kw)
    assert fused.equals(run_fused_sweep(spec, device=DEV))
    torch_engine = entropy_vs_length([256, 1000], engine="torch", device=DEV, **kw)
    assert torch_engine.equals(run_sweep(spec, device=DEV, engine="torch"))
    assert not np.allclose(fused["entropy"], torch_engine["entropy"])  # other draws, same statistics
    # the environment variable picks the engine for callers that do not say (the page, plan, limits)
    monkeypatch.setenv(ENGINE_ENV, "fused")
    assert entropy_vs_length([256, 1000], device=DEV, **kw).equals(fused)
    assert check_sweep(spec, DEV) == "fused"
    assert plan([spec], DEV).engines == ("fused",)
    assert sweep_work(spec, DEV) == fused_work(spec) == 1000 * 8
    probe = plan([spec], DEV).probes[0]
    assert probe.lengths[0] % 1024 == 0 and probe.normalizer == "softmax"
    if DEV == "cpu":
        assert max_sweep_work(DEV) == MAX_INTERPRETED_WORK
        with pytest.raises(AttnInputError, match="2\\^24"):
            check_sweep(_spec(lengths=(1 << 25,)), DEV)


def test_entropy_page_through_the_fused_engine(monkeypatch):
    """The page with ATTNCORE_SWEEP_ENGINE=fused (interpreted here): charts equal the fused sweep, text says so."""
    from attncore.sweeps import ENGINE_ENV
    from tests.test_apptest_entropy import check_charts, run

    monkeypatch.setenv(ENGINE_ENV, "fused")
    at = run(ent_lo="4", ent_hi="8", ent_q="4", ent_d="16", ent_vary="none", seed="31337")
    check_charts(at)  # compares with run_sweep on the page's device, which takes the same engine
    at.session_state["ent_how_open"] = True  # "How attncore computes this" is sent when opened (issue 34)
    at.run()
    text = " ".join(m.value for m in at.markdown)
    assert "fused Triton kernels" in text and "redrawn from the exact tail" not in text


def test_entropy_page_draws_a_fused_sweeps_short_lengths_first(monkeypatch):
    """The page through the fused engine (interpreted here): a long sweep's first lengths are drawn first."""
    from attncore.sweeps import ENGINE_ENV
    from tests.test_apptest_entropy import draws_short_lengths_first

    monkeypatch.setenv(ENGINE_ENV, "fused")
    draws_short_lengths_first(monkeypatch, hi=12)


def test_sigmoid_entropy_finite_with_denormals_flushed():
    """The app flushes denormals (ui.page); a weight that underflows must add 0 log 0 = 0, not NaN."""
    spec = _spec(lengths=(700,), queries=3, normalizer="sigmoid", scale_rule="none", d=4)
    z = torch.randn(3, 700, generator=torch.Generator().manual_seed(5))
    z[:, :100] = -60.0  # sigmoid(-60 * std - ln n) underflows to 0 in float32
    before = torch.set_flush_denormal(True)
    try:
        got = run_fused_sweep(spec, device=DEV, fixed=FixedInputs(z=z), chunk=1024, launch_keys=2048)
    finally:
        torch.set_flush_denormal(False)
    assert before  # this CPU supports flushing, so the test exercises it
    assert np.isfinite(got["entropy"]).all() and np.isfinite(got["effective_support"]).all()
