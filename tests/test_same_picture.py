"""The same URL gives the same picture on every device: small seeded inputs come from the CPU generator.

Without a GPU the CUDA tests skip; ``meta`` tensors check that draws are made on the CPU and moved.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attncore.scoring import AdditiveScorer
from attncore.synthetic import gaussian_qkv, make_generator, randn

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU on this machine")


def test_cpu_generator_draws_are_moved_not_redrawn():
    a = randn(3, 4, generator=make_generator(5), device="cpu")
    b = randn(3, 4, generator=make_generator(5), device="meta")  # drawn on the CPU, then moved
    assert b.device.type == "meta" and b.shape == (3, 4)
    assert torch.equal(a, torch.randn(3, 4, generator=make_generator(5)))
    x = gaussian_qkv(heads=2, L=3, d_k=4, seed=1, device="meta")
    assert x.query.device.type == "meta"
    s = AdditiveScorer.init(4, 5, generator=make_generator(9), device="meta")
    assert s.w_q.device.type == "meta"


@pytest.mark.cuda
@needs_cuda
def test_cuda_synthetic_inputs_equal_the_cpu_ones():
    cpu = gaussian_qkv(heads=2, kv_heads=1, L=5, S=7, d_k=8, seed=3)
    gpu = gaussian_qkv(heads=2, kv_heads=1, L=5, S=7, d_k=8, seed=3, device="cuda")
    for a, b in ((cpu.query, gpu.query), (cpu.key, gpu.key), (cpu.value, gpu.value)):
        assert b.device.type == "cuda" and torch.equal(a, b.cpu())
    a = AdditiveScorer.init(4, 5, generator=make_generator(9))
    b = AdditiveScorer.init(4, 5, generator=make_generator(9), device="cuda")
    assert torch.equal(a.w_k, b.w_k.cpu())


@pytest.mark.cuda
@needs_cuda
def test_cuda_sinks_lab_and_saturation_samples_equal_the_cpu_ones():
    from attncore.dot_products import dot_product_samples
    from attncore.gradients import jacobian_vs_scale
    from attncore.sinks import SinkSpec, sink_sequence

    spec = SinkSpec(n=24, seed=5)
    cpu, gpu = sink_sequence(spec, "cpu"), sink_sequence(spec, "cuda")
    for name in ("query", "key", "value", "gate_input", "gate_weight"):
        assert torch.equal(getattr(cpu, name), getattr(gpu, name).cpu()), name
    a = dot_product_samples(16, 1000, seed=2)
    b = dot_product_samples(16, 1000, seed=2, device="cuda")
    torch.testing.assert_close(a, b.cpu(), rtol=1e-6, atol=1e-6)  # same draws; sums may round apart
    sig = [0.5, 2.0]
    ja, jb = jacobian_vs_scale(sig, 8, 100, seed=3), jacobian_vs_scale(sig, 8, 100, seed=3, device="cuda")
    np.testing.assert_allclose(ja.jac_mean, jb.jac_mean, rtol=1e-5)


def test_pages_that_draw_on_the_device_say_so_next_to_the_seed():
    from tests.chart_data import no_errors, run_app

    ent = run_app("pages/2_Entropy_vs_length.py", ent_lo="4", ent_hi="6", ent_q="4", ent_vary="none")
    no_errors(ent)
    notes = " ".join(c.value for c in ent.sidebar.caption)
    assert "draw their random numbers on the compute device" in notes
    heat = run_app("pages/1_Heatmaps.py")  # its inputs come from the CPU generator: no such note
    no_errors(heat)
    assert "compute device" not in " ".join(c.value for c in heat.sidebar.caption)


def test_additive_scoring_parameters_are_scaled_on_the_cpu_before_they_move():
    """Issue 25: ``AdditiveScorer.w_k`` differed in the last bit between CPU and CUDA, because the CPU
    draws were moved first and divided by √d on the device (CUDA multiplies by the reciprocal). Every
    arithmetic step on a CPU generator's draws must run on the CPU; only the finished tensor moves.
    Checked on the ``meta`` device, which records where each operation runs without a GPU."""
    from torch.overrides import TorchFunctionMode

    seen: list[tuple[str, set[str]]] = []

    class Record(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
            devices = {a.device.type for a in args if isinstance(a, torch.Tensor)}
            seen.append((getattr(func, "__name__", str(func)), devices))
            return func(*args, **(kwargs or {}))

    with Record():
        s = AdditiveScorer.init(4, 5, hidden=3, generator=make_generator(9), device="meta")
    assert s.w_k.device.type == "meta"
    arithmetic = [(name, d) for name, d in seen if any(w in name for w in ("div", "mul", "sqrt"))]
    assert arithmetic, seen
    assert all(d == {"cpu"} for _, d in arithmetic), arithmetic
    cpu = AdditiveScorer.init(4, 5, hidden=3, generator=make_generator(9))
    g = make_generator(9)
    for got, shape, fan in ((cpu.w_q, (3, 4), 4), (cpu.w_k, (3, 5), 5), (cpu.w_v, (3,), 3)):
        assert torch.equal(got, torch.randn(*shape, generator=g) / fan**0.5)
