"""Dropout keeps attention's output unbiased; 2-D valid_lens follow d2l's masked softmax."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from attncore.attention import attention
from attncore.dropout import drop_weights, dropout_draws
from attncore.errors import AttnInputError
from attncore.synthetic import make_generator
from attncore.theory import dropout_output_std


def qkv(B: int = 1, H: int = 2, L: int = 6, S: int = 7, E: int = 8, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(B, H, n, E, generator=g, dtype=torch.float64) for n in (L, S, S))


# ---------------------------------------------------------------------------- dropout


def test_attncore_dropout_output_mean_over_seeds_equals_the_no_dropout_output() -> None:
    q, k, v = qkv()
    p, n = 0.3, 1000
    exact, w = attention(q, k, v, return_weights=True)
    total = torch.zeros_like(exact)
    for seed in range(n):
        total += attention(q, k, v, dropout_p=p, generator=make_generator(seed))
    mean = total / n
    se = dropout_output_std(w, v, p) / math.sqrt(n)
    z = ((mean - exact).abs() / se).max()
    assert z < 5.0, float(z)
    # One draw differs from the exact output by about its closed-form std (it is random).
    one = attention(q, k, v, dropout_p=p, generator=make_generator(1))
    assert not torch.allclose(one, exact)


def test_dropout_without_the_rescale_would_be_biased_and_the_test_sees_it() -> None:
    q, k, v = qkv(seed=1)
    p, n = 0.3, 1000
    exact, w = attention(q, k, v, return_weights=True)
    g = make_generator(0)
    total = torch.zeros_like(exact)
    for _ in range(n):
        total += (drop_weights(w, p, g) * (1 - p)) @ v  # forgot the 1/(1-p)
    se = dropout_output_std(w, v, p) / math.sqrt(n)
    assert ((total / n - exact).abs() / se).max() > 20


def test_torch_sdpa_dropout_is_unbiased_too() -> None:
    q, k, v = (t.float() for t in qkv(seed=2))
    p, n = 0.2, 1000
    exact = F.scaled_dot_product_attention(q, k, v)
    w = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1)
    total = torch.zeros_like(exact, dtype=torch.float64)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        for _ in range(n):
            total += F.scaled_dot_product_attention(q, k, v, dropout_p=p).double()
    se = dropout_output_std(w.double(), v.double(), p) / math.sqrt(n)
    assert ((total / n - exact.double()).abs() / se).max() < 5.0
    # SDPA has no training flag: any dropout_p > 0 drops weights, so two calls differ.
    assert not torch.equal(F.scaled_dot_product_attention(q, k, v, dropout_p=p),
                           F.scaled_dot_product_attention(q, k, v, dropout_p=p))


def test_dropout_draws_closed_form_std_and_the_dropped_weights() -> None:
    q, k, v = qkv(seed=3)
    _, w = attention(q, k, v, return_weights=True)
    p = 0.25
    d = dropout_draws(w, v, p, n=2000, seed=7)
    assert d.max_z() < 5.0
    # Dropped weights are 0 or w / (1 - p); about a fraction p of them are 0.
    first = d.first_weights
    zero = first == 0
    assert torch.allclose(first[~zero], (w / (1 - p))[~zero])
    frac, cells = float(zero.double().mean()), zero.numel()
    assert abs(frac - p) < 5 * math.sqrt(p * (1 - p) / cells)
    # The closed-form std of one draw matches the spread of draws.
    g = make_generator(11)
    draws = drop_weights(w.expand(4000, *w.shape), p, g) @ v  # 4000 draws at once
    ratio = draws.std(dim=0) / dropout_output_std(w, v, p)
    assert float((ratio - 1).abs().max()) < 0.12
    assert torch.equal(drop_weights(w, 0.0), w)
    with pytest.raises(AttnInputError):
        drop_weights(w, 1.0)
    with pytest.raises(AttnInputError):
        dropout_draws(w, v, p, n=0, seed=0)


# ---------------------------------------------------------------------------- valid_lens, d2l's way


def d2l_masked_softmax(X: torch.Tensor, valid_lens: torch.Tensor | None) -> torch.Tensor:
    """Source 002's masked_softmax, rewritten in torch: masked scores become -1e6, then softmax.

    X: (B, L, S); valid_lens: (B,) one length per sequence or (B, L) one per query.
    """
    if valid_lens is None:
        return torch.softmax(X, dim=-1)
    shape = X.shape
    if valid_lens.dim() == 1:
        valid_lens = torch.repeat_interleave(valid_lens, shape[1])
    else:
        valid_lens = valid_lens.reshape(-1)
    flat = X.reshape(-1, shape[-1])
    keep = torch.arange(shape[-1], dtype=torch.float32)[None, :] < valid_lens[:, None]
    flat = torch.where(keep, flat, torch.tensor(-1e6, dtype=X.dtype))
    return torch.softmax(flat.reshape(shape), dim=-1)


@pytest.mark.parametrize("valid_lens", [
    torch.tensor([[1, 3], [2, 4]]),          # source 002's per-query example
    torch.tensor([[0, 4], [3, 0]]),          # a query that may see nothing
    torch.tensor([2, 3]),                    # one length per sequence
])
def test_valid_lens_weights_follow_d2l_except_rows_with_no_valid_key(valid_lens: torch.Tensor) -> None:
    g = torch.Generator().manual_seed(0)
    B, L, S, E = 2, 2, 4, 5
    q = torch.randn(B, L, E, generator=g, dtype=torch.float64)
    k = torch.randn(B, S, E, generator=g, dtype=torch.float64)
    v = torch.randn(B, S, 3, generator=g, dtype=torch.float64)
    out, w = attention(q, k, v, valid_lens=valid_lens, return_weights=True)
    want = d2l_masked_softmax(q @ k.transpose(-2, -1) / math.sqrt(E), valid_lens)
    per_query = valid_lens[:, None].expand(B, L) if valid_lens.dim() == 1 else valid_lens
    for b in range(B):
        for i in range(L):
            n = int(per_query[b, i])
            if n > 0:
                assert torch.allclose(w[b, i], want[b, i], atol=1e-12)
                assert (w[b, i, n:] == 0).all()
            else:
                # d2l: every score is -1e6, so the row is uniform 1/S; attncore: zeros, output 0.
                assert torch.allclose(want[b, i], torch.full((S,), 1 / S, dtype=torch.float64))
                assert (w[b, i] == 0).all() and (out[b, i] == 0).all()
    assert torch.allclose(out, w @ v)


def test_2d_valid_lens_with_heads_broadcast_over_heads() -> None:
    q, k, v = qkv(B=2, H=3, L=4, S=5)
    vl = torch.tensor([[1, 2, 5, 3], [4, 4, 1, 2]])
    _, w = attention(q, k, v, valid_lens=vl, return_weights=True)
    for h in range(3):
        want = d2l_masked_softmax(q[:, h] @ k[:, h].transpose(-2, -1) / math.sqrt(8), vl)
        assert torch.allclose(w[:, h], want, atol=1e-12)
    with pytest.raises(AttnInputError, match="L = 4 columns"):
        attention(q, k, v, valid_lens=torch.tensor([[1, 2], [3, 4]]))
