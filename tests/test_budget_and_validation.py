"""attncore refuses oversized requests before allocating and turns bad input into plain errors."""

from __future__ import annotations

import math
import resource
import tracemalloc

import numpy as np
import pytest
import torch

from attncore import budget
from attncore.attention import attention
from attncore.errors import AttnInputError, ResourceLimitError
from attncore.explore import SyntheticSpec
from attncore.masks import block_diagonal_mask, causal_mask, sliding_window_mask, valid_lens_mask
from attncore.row_theory import gaussian_row_expectations
from attncore.sinks import uniform_attention


def qkv(*shape: int, dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(0)
    return tuple(torch.randn(*shape, generator=g, dtype=dtype) for _ in range(3))


class Peak:
    """Peak bytes of a block: tracemalloc sees numpy's buffers, the process's peak RSS torch's."""

    def __enter__(self) -> Peak:
        self.rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        tracemalloc.start()
        return self

    def __exit__(self, *exc: object) -> None:
        traced = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - self.rss0
        self.bytes = max(traced, grown)


def test_default_and_env_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(budget.MAX_BYTES_ENV, raising=False)
    assert budget.max_bytes() == 2 * 1024**3
    for raw, want in (("512M", 512 * 1024**2), ("1GiB", 1024**3), ("4096", 4096), ("junk", 2 * 1024**3),
                      ("-5", 2 * 1024**3), ("nan", 2 * 1024**3)):
        monkeypatch.setenv(budget.MAX_BYTES_ENV, raw)
        assert budget.max_bytes() == want, raw


BIG = torch.zeros(1, 1, 32768, 8)


@pytest.mark.parametrize("make", [
    lambda: attention(*(BIG,) * 3),  # 1 x 1 x 32768^2 scores
    lambda: causal_mask(10**6, 10**6),
    lambda: sliding_window_mask(10**6, 10**6, 4),
    lambda: block_diagonal_mask(10**6, 10**6, 4),
    lambda: valid_lens_mask(torch.tensor([3] * 64), 10**4, 10**4, 3),
    lambda: uniform_attention(10**6, True),
    lambda: SyntheticSpec(d_k=2**20).validate(),
    lambda: gaussian_row_expectations([10, 100], 1e6),
], ids=["attention", "causal", "window", "blocks", "valid_lens", "uniform", "synthetic", "theory"])
def test_huge_requests_are_refused_before_allocating(make) -> None:  # noqa: ANN001
    with pytest.raises(ResourceLimitError):  # warm up: first-call imports and caches are not the request
        make()
    with Peak() as p, pytest.raises(ResourceLimitError, match="limit is"):
        make()
    assert p.bytes < 16 * 2**20


def test_budget_follows_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    q, k, v = qkv(1, 2, 256, 8)
    attention(q, k, v)
    monkeypatch.setenv(budget.MAX_BYTES_ENV, "64K")
    with pytest.raises(ResourceLimitError, match="ATTNCORE_MAX_BYTES"):
        attention(q, k, v)


@pytest.mark.parametrize("bad", [
    lambda q, k, v: attention(q.long(), k.long(), v.long()),
    lambda q, k, v: attention(q > 0, k > 0, v > 0),
    lambda q, k, v: attention(q.to(torch.complex64), k.to(torch.complex64), v.to(torch.complex64)),
    lambda q, k, v: attention(q.numpy(), k.numpy(), v.numpy()),
    lambda q, k, v: attention(q.tolist(), k, v),
    lambda q, k, v: attention(q, k[:, :1].expand(2, 3, 8, 8).contiguous(), v[:, :1].expand(2, 3, 8, 8)),
    lambda q, k, v: attention(q, k, v, window=float("nan")),
    lambda q, k, v: attention(q, k, v, window=2.5),
    lambda q, k, v: attention(q[:1], k[:1], v[:1], valid_lens=torch.tensor([3, 4, 5])),
    lambda q, k, v: attention(q, k, v, valid_lens=torch.tensor([float("nan"), 3.0])),
    lambda q, k, v: attention(q, k, v, scale=1e300),
    lambda q, k, v: attention(q, k, v, scale=float("nan")),
    lambda q, k, v: attention(q, k, v, dropout_p=float("nan")),
], ids=["int", "bool", "complex", "numpy", "list", "heads_no_gqa", "window_nan", "window_frac",
        "valid_lens_batch", "valid_lens_nan", "scale_huge", "scale_nan", "dropout_nan"])
def test_bad_inputs_are_plain_errors(bad) -> None:  # noqa: ANN001
    q, k, v = qkv(2, 4, 8, 8)
    with pytest.raises(AttnInputError) as info:
        bad(q, k, v)
    assert "Traceback" not in str(info.value) and len(str(info.value)) < 400


def test_valid_lens_matching_the_batch_still_work() -> None:
    q, k, v = qkv(3, 2, 5, 4)
    out, w = attention(q, k, v, valid_lens=torch.tensor([1, 3, 5]), return_weights=True)
    assert torch.all(w[0, :, :, 1:] == 0) and torch.allclose(w.sum(-1), torch.ones(3, 2, 5))
    ref = torch.nn.functional.scaled_dot_product_attention(
        q, k, v, attn_mask=(torch.arange(5)[None, :] < torch.tensor([1, 3, 5])[:, None])[:, None, None, :])
    torch.testing.assert_close(out, ref)


def test_largest_allowed_scale_still_gives_finite_weights() -> None:
    q, k, v = qkv(1, 1, 4, 4)
    _, w = attention(q, k, v, scale=1e6, return_weights=True)
    assert torch.isfinite(w).all() and math.isclose(float(w.sum()), 4.0, rel_tol=1e-5)


def test_estimate_covers_the_measured_peak() -> None:
    """The estimate covers at least the stages attention keeps."""
    from attncore.attention import estimate_attention_bytes

    est = estimate_attention_bytes(8, 64, 64, 16, 16, torch.float64)
    stages_bytes = 5 * 8 * 64 * 64 * 8  # raw, scaled, masked, weights + one temporary
    assert est >= stages_bytes
    assert np.isfinite(est)
