"""The same URL gives the same picture on every device: small seeded inputs come from the CPU generator.

Without a GPU the CUDA tests skip; ``meta`` tensors check that draws are made on the CPU and moved.
"""

from __future__ import annotations

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
