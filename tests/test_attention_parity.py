"""Parity of :func:`attncore.attention` with ``torch.nn.functional.scaled_dot_product_attention``.

Shape legend: ``B`` batch, ``H`` heads (``Hq``/``Hkv`` under GQA), ``L`` queries,
``S`` keys, ``E`` query/key dim, ``Ev`` value dim. Every random draw goes through a
seeded ``torch.Generator`` so each case is reproducible.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from attncore import attention

SEEDS = list(range(24))
F32_TOL = 1e-5
F64_TOL = 1e-12


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(1000 + seed)


def _randint(g: torch.Generator, lo: int, hi: int) -> int:
    """Uniform integer in [lo, hi]."""
    return int(torch.randint(lo, hi + 1, (1,), generator=g))


def _random_shape(seed: int) -> tuple[int, int, int, int, int, int]:
    """(B, H, L, S, E, Ev); a few seeds force L=1, S=1 or L=S=1."""
    g = _gen(seed)
    B, H = _randint(g, 1, 3), _randint(g, 1, 4)
    L, S = _randint(g, 1, 11), _randint(g, 1, 11)
    E, Ev = _randint(g, 1, 24), _randint(g, 1, 24)
    if seed % 6 == 1:
        L = 1
    elif seed % 6 == 2:
        S = 1
    elif seed % 6 == 3:
        L = S = 1
    return B, H, L, S, E, Ev


def _qkv(seed: int, dtype: torch.dtype = torch.float32, shape=None):
    B, H, L, S, E, Ev = _random_shape(seed) if shape is None else shape
    g = _gen(seed + 500)
    sample = torch.float64 if dtype == torch.float64 else torch.float32
    q = torch.randn(B, H, L, E, generator=g, dtype=sample).to(dtype)
    k = torch.randn(B, H, S, E, generator=g, dtype=sample).to(dtype)
    v = torch.randn(B, H, S, Ev, generator=g, dtype=sample).to(dtype)
    return q, k, v


def _bool_mask(g: torch.Generator, shape: tuple[int, ...]) -> torch.Tensor:
    """Random boolean mask (..., L, S) where every row keeps at least one True."""
    m = torch.rand(shape, generator=g) < 0.5
    S = shape[-1]
    keep = torch.randint(0, S, shape[:-1], generator=g)
    m.scatter_(-1, keep.unsqueeze(-1), True)
    assert bool(m.any(dim=-1).all())
    return m


def _sdpa(q, k, v, **kw):
    return F.scaled_dot_product_attention(q, k, v, **kw)


def _assert_close(a: torch.Tensor, b: torch.Tensor, tol: float) -> None:
    assert a.shape == b.shape
    assert a.dtype == b.dtype
    torch.testing.assert_close(a, b, atol=tol, rtol=tol)


# --- float32 -------------------------------------------------------------------------


@pytest.mark.parametrize("seed", SEEDS)
def test_plain_matches_sdpa(seed):
    q, k, v = _qkv(seed)
    _assert_close(attention(q, k, v), _sdpa(q, k, v), F32_TOL)


def test_shape_generator_covers_edge_cases():
    shapes = [_random_shape(s) for s in SEEDS]
    assert any(L == 1 and S > 1 for _, _, L, S, _, _ in shapes)
    assert any(S == 1 and L > 1 for _, _, L, S, _, _ in shapes)
    assert any(L == 1 and S == 1 for _, _, L, S, _, _ in shapes)
    assert any(L > S for _, _, L, S, _, _ in shapes)
    assert any(L < S for _, _, L, S, _, _ in shapes)
    assert any(dim_k != dim_v for *_, dim_k, dim_v in shapes)


@pytest.mark.parametrize("seed", SEEDS)
def test_bool_mask_matches_sdpa(seed):
    q, k, v = _qkv(seed)
    B, H, L, S = q.shape[0], q.shape[1], q.shape[2], k.shape[2]
    m = _bool_mask(_gen(seed + 7), (B, H, L, S))
    _assert_close(attention(q, k, v, attn_mask=m), _sdpa(q, k, v, attn_mask=m), F32_TOL)


@pytest.mark.parametrize("seed", SEEDS[:8])
def test_broadcast_bool_mask_matches_sdpa(seed):
    """A (L, S) mask broadcasts over batch and heads."""
    q, k, v = _qkv(seed)
    L, S = q.shape[2], k.shape[2]
    m = _bool_mask(_gen(seed + 8), (L, S))
    _assert_close(attention(q, k, v, attn_mask=m), _sdpa(q, k, v, attn_mask=m), F32_TOL)


@pytest.mark.parametrize("seed", SEEDS)
def test_float_mask_matches_sdpa(seed):
    q, k, v = _qkv(seed)
    B, L, S = q.shape[0], q.shape[2], k.shape[2]
    g = _gen(seed + 9)
    fm = torch.randn(B, 1, L, S, generator=g) * 2.0
    # Hide some keys with -inf, but never a whole row (torch gives NaN there).
    hide = ~_bool_mask(g, (B, 1, L, S)) & (torch.rand(B, 1, L, S, generator=g) < 0.5)
    hide[..., 0] = False
    fm = fm.masked_fill(hide, float("-inf"))
    _assert_close(attention(q, k, v, attn_mask=fm), _sdpa(q, k, v, attn_mask=fm), F32_TOL)


@pytest.mark.parametrize("seed", SEEDS)
def test_causal_matches_sdpa(seed):
    """is_causal aligns top-left, as torch does, including L != S."""
    q, k, v = _qkv(seed)
    _assert_close(attention(q, k, v, is_causal=True), _sdpa(q, k, v, is_causal=True), F32_TOL)


@pytest.mark.parametrize(("L", "S"), [(3, 7), (7, 3), (1, 5), (5, 1), (6, 6)])
def test_causal_non_square_explicit(L, S):
    q, k, v = _qkv(0, shape=(2, 2, L, S, 8, 5))
    expected = _sdpa(q, k, v, attn_mask=torch.ones(L, S, dtype=torch.bool).tril())
    got = attention(q, k, v, is_causal=True)
    _assert_close(got, expected, F32_TOL)
    _assert_close(got, _sdpa(q, k, v, is_causal=True), F32_TOL)
    if L > 1 and S > 1:
        # A bottom-right-aligned mask would give a different answer.
        br = torch.ones(L, S, dtype=torch.bool).tril(diagonal=S - L)
        if not torch.equal(br, torch.ones(L, S, dtype=torch.bool).tril()):
            assert not torch.allclose(got, _sdpa(q, k, v, attn_mask=br), atol=1e-4)


@pytest.mark.parametrize("seed", SEEDS[:12])
@pytest.mark.parametrize("scale", [0.05, 0.37, 1.0, 2.5])
def test_custom_scale_matches_sdpa(seed, scale):
    q, k, v = _qkv(seed)
    got = attention(q, k, v, scale=scale)
    _assert_close(got, _sdpa(q, k, v, scale=scale), F32_TOL)


def test_custom_scale_changes_result():
    q, k, v = _qkv(4, shape=(1, 2, 6, 6, 16, 8))
    assert not torch.allclose(attention(q, k, v, scale=2.0), attention(q, k, v), atol=1e-3)


@pytest.mark.parametrize("seed", SEEDS[:12])
def test_scale_causal_and_mask_together(seed):
    q, k, v = _qkv(seed)
    B, H, L, S = q.shape[0], q.shape[1], q.shape[2], k.shape[2]
    m = _bool_mask(_gen(seed + 11), (B, H, L, S))
    m[..., 0] = True  # keep a key every causal row can see
    combined = m & torch.ones(L, S, dtype=torch.bool).tril()
    got = attention(q, k, v, attn_mask=m, is_causal=True, scale=0.7)
    _assert_close(got, _sdpa(q, k, v, attn_mask=combined, scale=0.7), F32_TOL)


@pytest.mark.parametrize("seed", SEEDS[:16])
@pytest.mark.parametrize("group", [1, 2, 3])
def test_gqa_matches_sdpa(seed, group):
    B, Hkv, L, S, E, Ev = _random_shape(seed)
    g = _gen(seed + 13)
    q = torch.randn(B, Hkv * group, L, E, generator=g)
    k = torch.randn(B, Hkv, S, E, generator=g)
    v = torch.randn(B, Hkv, S, Ev, generator=g)
    got = attention(q, k, v, enable_gqa=True)
    _assert_close(got, _sdpa(q, k, v, enable_gqa=True), F32_TOL)
    # Equivalent to repeating each key/value head `group` times (interleaved).
    ref = _sdpa(q, k.repeat_interleave(group, 1), v.repeat_interleave(group, 1))
    _assert_close(got, ref, F32_TOL)


def test_gqa_with_causal_and_mask():
    g = _gen(77)
    q = torch.randn(2, 8, 5, 6, generator=g)
    k = torch.randn(2, 2, 9, 6, generator=g)
    v = torch.randn(2, 2, 9, 3, generator=g)
    m = _bool_mask(g, (2, 1, 5, 9))
    m[..., 0] = True
    got = attention(q, k, v, attn_mask=m, is_causal=True, enable_gqa=True)
    ref = _sdpa(q, k, v, attn_mask=m & torch.ones(5, 9, dtype=torch.bool).tril(), enable_gqa=True)
    _assert_close(got, ref, F32_TOL)


def test_three_dim_inputs_match_sdpa():
    g = _gen(5)
    q, k, v = torch.randn(3, 4, 7, generator=g), torch.randn(3, 6, 7, generator=g), torch.randn(3, 6, 2, generator=g)
    _assert_close(attention(q, k, v), _sdpa(q, k, v), F32_TOL)
    _assert_close(attention(q, k, v, is_causal=True), _sdpa(q, k, v, is_causal=True), F32_TOL)


# --- float64 -------------------------------------------------------------------------


@pytest.mark.parametrize("seed", SEEDS[:12])
def test_float64_matches_sdpa(seed):
    q, k, v = _qkv(seed, torch.float64)
    B, H, L, S = q.shape[0], q.shape[1], q.shape[2], k.shape[2]
    m = _bool_mask(_gen(seed + 17), (B, H, L, S))
    got = attention(q, k, v, attn_mask=m, scale=0.6)
    assert got.dtype == torch.float64
    _assert_close(got, _sdpa(q, k, v, attn_mask=m, scale=0.6), F64_TOL)
    _assert_close(attention(q, k, v, is_causal=True), _sdpa(q, k, v, is_causal=True), F64_TOL)


# --- half types ----------------------------------------------------------------------

# attncore scores halves in float32 and rounds only the output, so against a float32
# reference on the same (already rounded) inputs the error is about one rounding of
# the output: half an ulp, 2**-11 (float16) or 2**-8 (bfloat16) relative, plus slack.
HALF_TOL = {
    torch.float16: {"f32": 2e-3, "native": 1e-2},
    torch.bfloat16: {"f32": 1e-2, "native": 4e-2},
}


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("seed", SEEDS[:12])
def test_half_matches_float32_sdpa_on_rounded_inputs(dtype, seed):
    q, k, v = _qkv(seed, dtype)
    B, L, S = q.shape[0], q.shape[2], k.shape[2]
    m = _bool_mask(_gen(seed + 19), (B, 1, L, S))
    got = attention(q, k, v, attn_mask=m)
    assert got.dtype == dtype
    ref32 = _sdpa(q.float(), k.float(), v.float(), attn_mask=m)
    tol = HALF_TOL[dtype]["f32"]
    torch.testing.assert_close(got.float(), ref32, atol=tol, rtol=tol)
    # The reference rounded once to the half type: essentially the same numbers.
    torch.testing.assert_close(got, ref32.to(dtype), atol=tol, rtol=tol)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("seed", SEEDS[:12])
def test_half_matches_native_half_sdpa(dtype, seed):
    q, k, v = _qkv(seed, dtype)
    got = attention(q, k, v, is_causal=True)
    ref = _sdpa(q, k, v, is_causal=True)
    assert ref.dtype == got.dtype == dtype
    tol = HALF_TOL[dtype]["native"]
    torch.testing.assert_close(got.float(), ref.float(), atol=tol, rtol=tol)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_float_mask_and_weights(dtype):
    q, k, v = _qkv(3, dtype, shape=(2, 2, 6, 9, 16, 8))
    g = _gen(21)
    fm = (torch.randn(6, 9, generator=g)).to(dtype)
    out, w = attention(q, k, v, attn_mask=fm, return_weights=True)
    assert out.dtype == w.dtype == dtype
    ref_w = torch.softmax(q.float() @ k.float().transpose(-2, -1) / 4.0 + fm.float(), dim=-1)
    tol = HALF_TOL[dtype]["f32"]
    torch.testing.assert_close(w.float(), ref_w, atol=tol, rtol=tol)
    ref = _sdpa(q.float(), k.float(), v.float(), attn_mask=fm.float())
    torch.testing.assert_close(out.float(), ref, atol=tol, rtol=tol)


def test_half_large_logits_do_not_overflow():
    """Scores beyond float16's range are fine because they are computed in float32."""
    g = _gen(31)
    q = (torch.randn(1, 1, 4, 64, generator=g) * 60).half()
    k = (torch.randn(1, 1, 5, 64, generator=g) * 60).half()
    v = torch.randn(1, 1, 5, 3, generator=g).half()
    raw = q.float() @ k.float().transpose(-2, -1)
    assert bool((raw.abs() > 65504).any())  # would overflow in float16
    out = attention(q, k, v, scale=1.0 / 64)
    assert torch.isfinite(out).all()
    ref = _sdpa(q.float(), k.float(), v.float(), scale=1.0 / 64)
    torch.testing.assert_close(out.float(), ref, atol=2e-3, rtol=2e-3)


# --- dtype / device follow the input -------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
def test_output_dtype_and_device_follow_input(dtype):
    q, k, v = _qkv(2, dtype, shape=(2, 3, 4, 5, 6, 7))
    out, w = attention(q, k, v, return_weights=True)
    assert out.dtype == dtype and w.dtype == dtype
    assert out.device == q.device and w.device == q.device
    assert out.shape == (2, 3, 4, 7)
    assert w.shape == (2, 3, 4, 5)
    out2 = attention(q, k, v)
    assert out2.dtype == dtype and torch.equal(out2, out)


# --- return_weights ------------------------------------------------------------------


def _reference_weights(q, k, scale, mask=None, causal=False):
    scores = (q @ k.transpose(-2, -1)) * scale
    L, S = scores.shape[-2:]
    if causal:
        scores = scores.masked_fill(~torch.ones(L, S, dtype=torch.bool).tril(), float("-inf"))
    if mask is not None and mask.dtype == torch.bool:
        scores = scores.masked_fill(~mask, float("-inf"))
    elif mask is not None:
        scores = scores + mask
    return torch.softmax(scores, dim=-1)


@pytest.mark.parametrize("seed", SEEDS[:12])
@pytest.mark.parametrize("kind", ["none", "bool", "float", "causal"])
def test_return_weights_match_materialised_softmax(seed, kind):
    q, k, v = _qkv(seed, torch.float64)
    B, H, L, S, E = q.shape[0], q.shape[1], q.shape[2], k.shape[2], q.shape[3]
    g = _gen(seed + 23)
    mask = None
    if kind == "bool":
        mask = _bool_mask(g, (B, H, L, S))
    elif kind == "float":
        mask = torch.randn(B, H, L, S, generator=g, dtype=torch.float64)
    scale = 1.0 / math.sqrt(E)
    out, w = attention(q, k, v, attn_mask=mask, is_causal=kind == "causal", return_weights=True)
    ref_w = _reference_weights(q, k, scale, mask, causal=kind == "causal")
    _assert_close(w, ref_w, F64_TOL)
    _assert_close(out, w @ v, F64_TOL)
    torch.testing.assert_close(w.sum(-1), torch.ones(B, H, L, dtype=torch.float64))
    if kind == "bool":
        assert bool((w[~mask] == 0).all())


@pytest.mark.parametrize("seed", SEEDS[:8])
def test_return_weights_float32_gqa(seed):
    B, Hkv, L, S, E, Ev = _random_shape(seed)
    g = _gen(seed + 29)
    q = torch.randn(B, 2 * Hkv, L, E, generator=g)
    k = torch.randn(B, Hkv, S, E, generator=g)
    v = torch.randn(B, Hkv, S, Ev, generator=g)
    out, w = attention(q, k, v, enable_gqa=True, scale=0.3, return_weights=True)
    k2, v2 = k.repeat_interleave(2, 1), v.repeat_interleave(2, 1)
    _assert_close(w, _reference_weights(q, k2, 0.3), F32_TOL)
    _assert_close(out, w @ v2, F32_TOL)
    _assert_close(out, _sdpa(q, k, v, enable_gqa=True, scale=0.3), F32_TOL)
