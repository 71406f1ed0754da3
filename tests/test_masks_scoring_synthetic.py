"""Mask builders, scorers, seeded synthetic inputs and :mod:`attncore.explore`.

Shape legend: ``B`` batch, ``H`` heads, ``L`` queries, ``S`` keys, ``E`` query/key
dim (``Dq``/``Dk`` for additive scoring), ``h`` additive hidden size.
"""

from __future__ import annotations

import math

import pytest
import torch

from attncore import AttnInputError, ResourceLimitError, attention
from attncore.budget import MAX_ADDITIVE_OPS, MAX_ATTENTION_CELLS, check_limit, fmt_count
from attncore.dtypes import DTYPES
from attncore.explore import (
    ADDITIVE_HIDDEN,
    POOL_LEN,
    SyntheticSpec,
    draw_pool,
    float16_overflow,
    row_stats,
    synthetic_stages,
)
from attncore.masks import (
    MASK_KINDS,
    block_diagonal_mask,
    causal_mask,
    combine,
    float_to_bool,
    sliding_window_mask,
    valid_lens_mask,
)
from attncore.normalizers import NORMALIZER_NAMES, get_normalizer
from attncore.scoring import SCORING_NAMES, AdditiveScorer, default_scale, dot_scores
from attncore.synthetic import gaussian_qkv, make_generator

SIZES = [(1, 1), (1, 6), (6, 1), (5, 5), (4, 9), (9, 4)]


# --- masks against explicit loops ----------------------------------------------------


@pytest.mark.parametrize(("L", "S"), SIZES)
def test_causal_mask_loop(L, S):
    m = causal_mask(L, S)
    assert m.shape == (L, S) and m.dtype == torch.bool
    for i in range(L):
        for j in range(S):
            assert bool(m[i, j]) == (j <= i)


@pytest.mark.parametrize(("L", "S"), SIZES)
@pytest.mark.parametrize("w", [1, 2, 3, 10])
def test_sliding_window_mask_loop(L, S, w):
    m = sliding_window_mask(L, S, w)
    assert m.shape == (L, S) and m.dtype == torch.bool
    for i in range(L):
        for j in range(S):
            assert bool(m[i, j]) == (i - w + 1 <= j <= i), (i, j)
    if w >= L:
        assert torch.equal(m, causal_mask(L, S))


@pytest.mark.parametrize(("L", "S"), SIZES)
@pytest.mark.parametrize("block", [1, 2, 3, 7])
def test_block_diagonal_mask_loop(L, S, block):
    m = block_diagonal_mask(L, S, block)
    assert m.shape == (L, S) and m.dtype == torch.bool
    for i in range(L):
        for j in range(S):
            assert bool(m[i, j]) == (i // block == j // block), (i, j)


def test_mask_builder_errors():
    with pytest.raises(AttnInputError, match="at least 1 key; got 0"):
        sliding_window_mask(4, 4, 0)
    with pytest.raises(AttnInputError, match="block size must be at least 1; got 0"):
        block_diagonal_mask(4, 4, 0)
    with pytest.raises(AttnInputError, match="L=0, S=3"):
        causal_mask(0, 3)
    with pytest.raises(AttnInputError, match="only boolean"):
        combine(torch.ones(2, 2))


def test_combine_and_float_to_bool():
    a = torch.tensor([[True, False], [True, True]])
    b = torch.tensor([True, False])
    assert combine(None, None) is None
    assert combine(a, None) is a
    assert torch.equal(combine(a, b), torch.tensor([[True, False], [True, False]]))
    fm = torch.tensor([0.0, float("-inf"), -1e9, 3.0])
    assert torch.equal(float_to_bool(fm), torch.tensor([True, False, True, True]))
    assert MASK_KINDS == ("none", "causal", "padding", "window", "blocks", "padding2d")


@pytest.mark.parametrize("ndim", [3, 4, 5])
def test_valid_lens_mask_shapes_per_sequence(ndim):
    vl = torch.tensor([2, 0, 5])
    m = valid_lens_mask(vl, L=4, S=5, query_ndim=ndim)
    assert m.dim() == ndim
    assert m.shape == (3, *([1] * (ndim - 3)), 1, 5)
    flat = m.reshape(3, 5)
    for b in range(3):
        for j in range(5):
            assert bool(flat[b, j]) == (j < int(vl[b]))


@pytest.mark.parametrize("ndim", [3, 4])
def test_valid_lens_mask_shapes_per_query(ndim):
    vl = torch.tensor([[1, 3], [0, 4]])
    m = valid_lens_mask(vl, L=2, S=4, query_ndim=ndim)
    assert m.shape == (2, *([1] * (ndim - 3)), 2, 4)
    flat = m.reshape(2, 2, 4)
    for b in range(2):
        for i in range(2):
            for j in range(4):
                assert bool(flat[b, i, j]) == (j < int(vl[b, i]))


def test_valid_lens_mask_refuses_fractions_and_errors():
    # issue 9, correction 6: 1.6 used to be rounded to 2 silently
    for bad in ([1.6, 2.0], [2.0, float("nan")], [float("inf")]):
        with pytest.raises(AttnInputError, match="whole numbers"):
            valid_lens_mask(torch.tensor(bad), L=1, S=4, query_ndim=3)
    with pytest.raises(AttnInputError, match="whole numbers"):
        attention(torch.ones(1, 2, 4), torch.ones(1, 3, 4), torch.ones(1, 3, 4), valid_lens=torch.tensor([1.5]))
    m = valid_lens_mask(torch.tensor([1.0, 3.0]), L=1, S=4, query_ndim=3)  # whole floats are fine
    assert torch.equal(m.reshape(2, 4).sum(-1), torch.tensor([1, 3]))
    with pytest.raises(AttnInputError, match="batch dimension"):
        valid_lens_mask(torch.tensor([1]), 2, 2, 2)
    with pytest.raises(AttnInputError, match=r"\(B,\) or \(B, L\)"):
        valid_lens_mask(torch.ones(1, 2, 2), 2, 2, 3)


# --- scoring ----------------------------------------------------------------------------


def test_default_scale():
    assert default_scale("scaled_dot", 64) == pytest.approx(0.125)
    assert default_scale("scaled_dot", 2) == pytest.approx(1 / math.sqrt(2))
    assert default_scale("dot", 64) == 1.0
    assert default_scale("additive", 64) == 1.0
    with pytest.raises(AttnInputError, match="unknown scoring 'cosine'"):
        default_scale("cosine", 4)
    assert SCORING_NAMES == ("scaled_dot", "dot", "additive")


def test_dot_scores():
    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(2, 3, 4, generator=g), torch.randn(2, 5, 4, generator=g)
    s = dot_scores(q, k)
    assert s.shape == (2, 3, 5)
    torch.testing.assert_close(s, torch.einsum("ble,bse->bls", q, k))
    with pytest.raises(AttnInputError, match="additive scoring allows different dims"):
        dot_scores(q, k[..., :3])


def _additive_reference(sc: AdditiveScorer, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """Direct loop-free formula: score[..., i, j] = w_v . tanh(W_q q_i + W_k k_j)."""
    qp = torch.einsum("hd,...ld->...lh", sc.w_q, q)
    kp = torch.einsum("hd,...sd->...sh", sc.w_k, k)
    return torch.einsum("...lsh,h->...ls", torch.tanh(qp[..., :, None, :] + kp[..., None, :, :]), sc.w_v)


@pytest.mark.parametrize(("dq", "dk"), [(8, 8), (5, 11), (12, 3)])
@pytest.mark.parametrize("chunk", [1 << 24, 1, 37, 200])
def test_additive_scorer_matches_direct_formula(dq, dk, chunk):
    g = torch.Generator().manual_seed(dq * 100 + dk)
    sc = AdditiveScorer.init(dq, dk, hidden=6, generator=g, dtype=torch.float64)
    assert sc.w_q.shape == (6, dq) and sc.w_k.shape == (6, dk) and sc.w_v.shape == (6,)
    assert sc.hidden == 6
    q = torch.randn(2, 3, 7, dq, generator=g, dtype=torch.float64)
    k = torch.randn(2, 3, 5, dk, generator=g, dtype=torch.float64)
    got = sc(q, k, chunk_elems=chunk)
    assert got.shape == (2, 3, 7, 5)
    torch.testing.assert_close(got, _additive_reference(sc, q, k), atol=1e-12, rtol=1e-12)
    # An explicit double loop for a few cells.
    for i, j in [(0, 0), (6, 4), (3, 2)]:
        direct = sc.w_v @ torch.tanh(sc.w_q @ q[1, 2, i] + sc.w_k @ k[1, 2, j])
        assert got[1, 2, i, j].item() == pytest.approx(direct.item(), abs=1e-12)


def test_additive_scorer_chunking_is_exact_and_broadcasts():
    g = torch.Generator().manual_seed(3)
    sc = AdditiveScorer.init(4, 6, generator=g)
    q = torch.randn(1, 2, 10, 4, generator=g)
    k = torch.randn(3, 1, 4, 6, generator=g)  # broadcasts against q's leading dims
    full = sc(q, k)
    assert full.shape == (3, 2, 10, 4)
    for chunk in (1, 64 * 3, 1000):
        torch.testing.assert_close(sc(q, k, chunk_elems=chunk), full, atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(full, _additive_reference(sc, q, k), atol=1e-5, rtol=1e-5)


def test_additive_scorer_init_reproducible_and_errors():
    a = AdditiveScorer.init(4, 5, generator=make_generator(9))
    b = AdditiveScorer.init(4, 5, generator=make_generator(9))
    c = AdditiveScorer.init(4, 5, generator=make_generator(10))
    assert torch.equal(a.w_q, b.w_q) and torch.equal(a.w_k, b.w_k) and torch.equal(a.w_v, b.w_v)
    assert not torch.equal(a.w_q, c.w_q)
    assert a.hidden == 16
    with pytest.raises(AttnInputError, match="d_q, d_k and hidden >= 1"):
        AdditiveScorer.init(0, 4)


def test_additive_scorer_in_attention_with_different_dims():
    from attncore.attention import attention_stages

    g = torch.Generator().manual_seed(4)
    sc = AdditiveScorer.init(3, 7, hidden=5, generator=g)
    q, k, v = torch.randn(2, 4, 3, generator=g), torch.randn(2, 6, 7, generator=g), torch.randn(2, 6, 2, generator=g)
    st = attention_stages(q, k, v, scorer=sc)
    assert st.scale == 1.0
    ref = _additive_reference(sc, q, k)
    torch.testing.assert_close(st.raw, ref)
    torch.testing.assert_close(st.weights, torch.softmax(ref, -1))
    torch.testing.assert_close(st.output, torch.softmax(ref, -1) @ v)


# --- gaussian_qkv -------------------------------------------------------------------


def test_gaussian_qkv_reproducible_and_seed_dependent():
    a = gaussian_qkv(batch=2, heads=4, L=5, S=7, d_k=6, d_v=3, seed=11)
    b = gaussian_qkv(batch=2, heads=4, L=5, S=7, d_k=6, d_v=3, seed=11)
    c = gaussian_qkv(batch=2, heads=4, L=5, S=7, d_k=6, d_v=3, seed=12)
    for name in ("query", "key", "value"):
        assert torch.equal(getattr(a, name), getattr(b, name))
        assert not torch.equal(getattr(a, name), getattr(c, name))
    assert a.query.shape == (2, 4, 5, 6)
    assert a.key.shape == (2, 4, 7, 6)
    assert a.value.shape == (2, 4, 7, 3)


def test_gaussian_qkv_gqa_and_defaults():
    x = gaussian_qkv(heads=8, kv_heads=2, L=3, d_k=4, d_q=9)
    assert x.query.shape == (1, 8, 3, 9)
    assert x.key.shape == (1, 2, 3, 4)  # S defaults to L
    assert x.value.shape == (1, 2, 3, 4)  # d_v defaults to d_k


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
def test_gaussian_qkv_dtype(dtype):
    x = gaussian_qkv(L=4, d_k=8, dtype=dtype, seed=2)
    assert x.query.dtype == x.key.dtype == x.value.dtype == dtype
    if dtype in (torch.float16, torch.bfloat16):
        f32 = gaussian_qkv(L=4, d_k=8, dtype=torch.float32, seed=2)
        assert torch.equal(x.query, f32.query.to(dtype))


@pytest.mark.parametrize("std", [0.5, 1.0, 3.0])
def test_gaussian_qkv_std(std):
    x = gaussian_qkv(batch=4, heads=4, L=64, d_k=64, std=std, seed=5, dtype=torch.float64)
    for t in (x.query, x.key, x.value):
        n = t.numel()  # 65536 samples
        # SE of the sample std of a normal: std / sqrt(2(n-1)); allow 5 SE.
        assert abs(t.std().item() - std) < 5 * std / math.sqrt(2 * (n - 1))
        assert abs(t.mean().item()) < 5 * std / math.sqrt(n)


def test_gaussian_qkv_errors():
    with pytest.raises(AttnInputError, match=r"query heads \(6\) must be a multiple of key/value heads \(4\)"):
        gaussian_qkv(heads=6, kv_heads=4)
    with pytest.raises(AttnInputError, match="at least 1"):
        gaussian_qkv(L=0)
    with pytest.raises(AttnInputError, match="std must be a positive number"):
        gaussian_qkv(std=0.0)


# --- explore.synthetic_stages ----------------------------------------------------------


def _spec_inputs(spec: SyntheticSpec):
    """The inputs synthetic_stages documents: the first L (S) rows of the seeded unit
    Gaussian pool (gaussian_qkv at POOL_LEN), times input_std, cast to the dtype."""
    sample = torch.float64 if spec.dtype == "float64" else torch.float32
    pool = gaussian_qkv(heads=spec.heads, kv_heads=spec.kv_heads, L=POOL_LEN, S=POOL_LEN,
                        d_k=spec.d_k, d_v=draw_pool(spec).value.shape[-1], seed=spec.seed, dtype=sample)
    dtype = DTYPES[spec.dtype]
    std = spec.input_std
    return ((pool.query[..., : spec.L, :] * std).to(dtype), (pool.key[..., : spec.S, :] * std).to(dtype),
            (pool.value[..., : spec.S, :] * std).to(dtype))


def _reference_attention(spec: SyntheticSpec):
    """The same inputs as synthetic_stages, pushed through attncore.attention."""
    q, k, v = _spec_inputs(spec)
    kw = {}
    if spec.mask == "causal":
        kw["is_causal"] = True
    elif spec.mask == "window":
        kw["window"] = spec.window
    elif spec.mask == "padding":
        kw["valid_lens"] = torch.tensor([spec.valid_len])
    elif spec.mask == "blocks":
        kw["attn_mask"] = block_diagonal_mask(spec.L, spec.S, spec.block)
    elif spec.mask == "padding2d":  # query i sees keys < pattern[i % len(pattern)]
        pat = spec.valid_lens_rows
        kw["valid_lens"] = torch.tensor([[pat[i % len(pat)] for i in range(spec.L)]])
    norm = get_normalizer(spec.normalizer, s=spec.ssmax_s) if spec.normalizer == "ssmax" else spec.normalizer
    out, w = attention(q, k, v, scale=spec.scale(), enable_gqa=spec.kv_heads != spec.heads,
                       normalizer=norm, return_weights=True, **kw)
    return out[0], w[0]


def test_draw_pool_depends_only_on_seed_heads_dims():
    a = SyntheticSpec(L=5, S=9, d_k=8, heads=4, kv_heads=2, seed=3)
    pool = draw_pool(a)
    assert pool.query.shape[:3] == (1, 4, POOL_LEN) and pool.query.shape[-1] == 8
    assert pool.key.shape == (1, 2, POOL_LEN, 8)
    # L, S, input_std, mask, ... do not change the pool; the seed does.
    b = SyntheticSpec(L=50, S=3, d_k=8, heads=4, kv_heads=2, seed=3, input_std=5.0, mask="causal")
    assert torch.equal(draw_pool(b).query, pool.query) and torch.equal(draw_pool(b).key, pool.key)
    c = SyntheticSpec(L=5, S=9, d_k=8, heads=4, kv_heads=2, seed=4)
    assert not torch.equal(draw_pool(c).query, pool.query)
    assert abs(pool.query.std().item() - 1.0) < 0.05


def test_growing_lengths_keeps_earlier_rows():
    small = synthetic_stages(SyntheticSpec(L=5, S=6, d_k=8, heads=2, kv_heads=2, seed=7))
    big = synthetic_stages(SyntheticSpec(L=9, S=6, d_k=8, heads=2, kv_heads=2, seed=7))
    torch.testing.assert_close(big.raw[:, :5, :], small.raw)
    torch.testing.assert_close(big.weights[:, :5, :], small.weights)
    wide = synthetic_stages(SyntheticSpec(L=5, S=10, d_k=8, heads=2, kv_heads=2, seed=7))
    torch.testing.assert_close(wide.raw[..., :6], small.raw)


def test_synthetic_lengths_limited_to_pool():
    with pytest.raises(AttnInputError, match=str(POOL_LEN)):
        synthetic_stages(SyntheticSpec(L=POOL_LEN + 1, S=4, d_k=4, heads=1, kv_heads=1))


@pytest.mark.parametrize("mask", MASK_KINDS)
@pytest.mark.parametrize("normalizer", NORMALIZER_NAMES)
def test_synthetic_stages_match_attention(mask, normalizer):
    spec = SyntheticSpec(L=7, S=9, d_k=8, heads=4, kv_heads=2, mask=mask, normalizer=normalizer,
                         valid_len=5, window=3, block=4, seed=3, ssmax_s=0.8)
    st = synthetic_stages(spec)
    for t in (st.raw, st.scaled, st.masked, st.weights):
        assert t.shape == (4, 7, 9)
    assert st.output.shape[:2] == (4, 7)
    out, w = _reference_attention(spec)
    torch.testing.assert_close(st.weights, w, atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(st.output, out, atol=1e-6, rtol=1e-6)
    if mask == "none":
        assert st.allowed is None
    else:
        assert st.allowed.shape == (4, 7, 9)
        assert bool((st.weights[~st.allowed] == 0).all())
        assert bool((st.masked[~st.allowed] == float("-inf")).all())


@pytest.mark.parametrize("scoring", SCORING_NAMES)
def test_synthetic_stages_scoring(scoring):
    spec = SyntheticSpec(L=5, S=6, d_k=16, heads=2, kv_heads=2, scoring=scoring, seed=4)
    st = synthetic_stages(spec)
    q, k, _ = _spec_inputs(spec)
    if scoring == "additive":
        sc = AdditiveScorer.init(16, 16, ADDITIVE_HIDDEN, generator=make_generator(5))
        raw = _additive_reference(sc, q, k)[0]
        expected_scaled = raw
        assert st.scale == 1.0
    else:
        raw = (q @ k.transpose(-2, -1))[0]
        expected_scaled = raw / 4.0 if scoring == "scaled_dot" else raw
        assert st.scale == (0.25 if scoring == "scaled_dot" else 1.0)
    torch.testing.assert_close(st.raw, raw, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(st.scaled, expected_scaled, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(st.weights, torch.softmax(expected_scaled, -1), atol=1e-6, rtol=1e-6)


def test_synthetic_stages_dot_vs_scaled_dot():
    base = dict(L=6, S=6, d_k=64, heads=2, kv_heads=2, seed=8)
    a = synthetic_stages(SyntheticSpec(scoring="scaled_dot", **base))
    b = synthetic_stages(SyntheticSpec(scoring="dot", **base))
    torch.testing.assert_close(a.raw, b.raw)
    torch.testing.assert_close(a.scaled, b.scaled / 8.0)
    torch.testing.assert_close(b.scaled, b.raw)


@pytest.mark.parametrize("temperature", [0.5, 2.0, 7.0])
def test_synthetic_stages_temperature_divides(temperature):
    base = dict(L=5, S=7, d_k=16, heads=2, kv_heads=2, seed=9)
    a = synthetic_stages(SyntheticSpec(**base))
    b = synthetic_stages(SyntheticSpec(temperature=temperature, **base))
    torch.testing.assert_close(b.raw, a.raw)
    torch.testing.assert_close(b.scaled, a.scaled / temperature)
    torch.testing.assert_close(b.weights, torch.softmax(a.scaled / temperature, -1), atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("valid_len", [0, 1, 4, 9, 20])
def test_synthetic_padding_hides_keys_beyond_valid_len(valid_len):
    spec = SyntheticSpec(L=5, S=9, d_k=8, heads=2, kv_heads=2, mask="padding", valid_len=valid_len, seed=1)
    st = synthetic_stages(spec)
    n = min(valid_len, 9)
    assert bool((st.weights[..., n:] == 0).all())
    assert bool((~st.allowed[..., n:]).all()) and bool(st.allowed[..., :n].all())
    if n == 0:
        assert bool((st.output == 0).all())
    else:
        assert bool((st.weights[..., :n] > 0).all())
        torch.testing.assert_close(st.weights.sum(-1), torch.ones(2, 5))
        torch.testing.assert_close(st.weights[..., :n], torch.softmax(st.scaled[..., :n], -1))


@pytest.mark.parametrize("dtype", ["float64", "float16", "bfloat16"])
def test_synthetic_stages_dtype(dtype):
    st = synthetic_stages(SyntheticSpec(L=4, S=4, d_k=8, heads=2, kv_heads=2, dtype=dtype))
    expected = torch.float64 if dtype == "float64" else torch.float32
    assert st.weights.dtype == expected and st.raw.dtype == expected


def test_synthetic_stages_reproducible():
    spec = SyntheticSpec(L=6, S=6, d_k=8, heads=2, kv_heads=1, seed=21, scoring="additive")
    a, b = synthetic_stages(spec), synthetic_stages(spec)
    assert torch.equal(a.weights, b.weights) and torch.equal(a.raw, b.raw)
    c = synthetic_stages(SyntheticSpec(L=6, S=6, d_k=8, heads=2, kv_heads=1, seed=22, scoring="additive"))
    assert not torch.equal(a.raw, c.raw)


def test_row_stats():
    st = synthetic_stages(SyntheticSpec(L=5, S=8, d_k=8, heads=1, kv_heads=1, mask="causal", seed=2))
    rs = row_stats(st.weights[0], st.allowed[0])
    assert torch.equal(rs.visible, torch.tensor([1, 2, 3, 4, 5]))
    assert rs.entropy[0].item() == 0.0
    torch.testing.assert_close(rs.row_sum, torch.ones(5))
    assert torch.equal(rs.max_weight, st.weights[0].amax(-1))
    rs2 = row_stats(st.weights[0], None)
    assert torch.equal(rs2.visible, torch.full((5,), 8))


# --- SyntheticSpec.validate -----------------------------------------------------------


def test_spec_validate_errors():
    with pytest.raises(AttnInputError, match="d_k must be at least 1"):
        SyntheticSpec(d_k=0).validate()
    with pytest.raises(AttnInputError, match="6 query heads cannot be split evenly over 4"):
        SyntheticSpec(heads=6, kv_heads=4).validate()
    with pytest.raises(AttnInputError, match="at least one head"):
        SyntheticSpec(heads=0).validate()
    with pytest.raises(AttnInputError, match="lengths must be at least 1"):
        SyntheticSpec(L=0).validate()
    with pytest.raises(AttnInputError, match="unknown scoring"):
        SyntheticSpec(scoring="cos").validate()
    with pytest.raises(AttnInputError, match="unknown mask"):
        SyntheticSpec(mask="random").validate()
    with pytest.raises(AttnInputError, match="unknown normaliser"):
        SyntheticSpec(normalizer="sparsemax").validate()
    with pytest.raises(AttnInputError, match="unknown dtype"):
        SyntheticSpec(dtype="int8").validate()
    with pytest.raises(AttnInputError, match="temperature"):
        SyntheticSpec(temperature=0.0).validate()
    with pytest.raises(AttnInputError, match="input std"):
        SyntheticSpec(input_std=-1.0).validate()
    SyntheticSpec().validate()  # the defaults are valid
    # and synthetic_stages validates too
    with pytest.raises(AttnInputError, match="d_k must be at least 1"):
        synthetic_stages(SyntheticSpec(d_k=0))


def test_spec_validate_cells_budget():
    # Exactly at the limit passes; one more row over it fails.
    side = int(math.isqrt(MAX_ATTENTION_CELLS // 4))
    assert 4 * side * side <= MAX_ATTENTION_CELLS
    SyntheticSpec(L=side, S=side, heads=4, kv_heads=4).validate()
    big = SyntheticSpec(L=side + 1, S=side, heads=4, kv_heads=4)
    assert big.heads * big.L * big.S > MAX_ATTENTION_CELLS
    with pytest.raises(ResourceLimitError) as exc:
        big.validate()
    msg = str(exc.value)
    assert fmt_count(MAX_ATTENTION_CELLS) in msg
    assert "16.8M" in msg and "heads × L × S" in msg
    assert isinstance(exc.value, AttnInputError)


def test_spec_validate_additive_budget():
    # Within the cells budget but over the additive one.
    spec = SyntheticSpec(L=1024, S=1024, heads=8, kv_heads=8, scoring="additive")
    assert spec.heads * spec.L * spec.S <= MAX_ATTENTION_CELLS
    with pytest.raises(ResourceLimitError) as exc:
        spec.validate()
    assert fmt_count(MAX_ADDITIVE_OPS) in str(exc.value)
    SyntheticSpec(L=1024, S=1024, heads=8, kv_heads=8, scoring="dot").validate()


def test_check_limit_and_fmt_count():
    assert fmt_count(1234567) == "1.23M"
    assert fmt_count(999) == "999"
    assert fmt_count(2500) == "2.5k"
    assert fmt_count(3e9) == "3G"
    check_limit(10, 10, "x", "y", "z")
    with pytest.raises(ResourceLimitError, match="thing would be 11; the limit is 10 units. Fix it."):
        check_limit(11, 10, "thing", "units", "Fix it.")


# --- float16_overflow -----------------------------------------------------------------


def test_float16_overflow_counts():
    raw = torch.tensor([0.0, 65504.0, -65504.0, 70000.0, -1e5, 1e9, 3.0, 65536.0])
    assert float16_overflow(raw) == 4
    # Exactly the entries that become infinite when stored in float16.
    assert float16_overflow(raw) == int(torch.isinf(raw.half()).sum())
    assert float16_overflow(torch.zeros(3, 3)) == 0


def test_float16_overflow_rounding_boundary():
    """Values in (65504, 65520) round down to 65504 in float16; from 65520 on they overflow."""
    raw = torch.tensor([65510.0, 65519.0, 65520.0, -65519.0, -65520.0, 65600.0])
    assert int(torch.isinf(raw.half()).sum()) == 3
    assert float16_overflow(raw) == 3


def test_float16_overflow_on_synthetic_dot_scores():
    spec = SyntheticSpec(L=8, S=8, d_k=64, heads=2, kv_heads=2, scoring="dot", input_std=80.0, seed=0)
    st = synthetic_stages(spec)
    n = float16_overflow(st.raw)
    assert n == int(torch.isinf(st.raw.half()).sum())
    assert 0 < n < st.raw.numel()


def test_additive_init_tanh_input_has_variance_two_as_documented() -> None:
    # issue 9, correction 10: the docstring used to say the pre-activations have unit variance.
    g = make_generator(3)
    dq, dk, h, n = 24, 40, 16, 4000
    pre, scores = [], []
    for _ in range(50):  # average over parameter draws, as the docstring states
        sc = AdditiveScorer.init(dq, dk, hidden=h, generator=g, dtype=torch.float64)
        q = torch.randn(n, dq, generator=g, dtype=torch.float64)
        k = torch.randn(n, dk, generator=g, dtype=torch.float64)
        pre.append(q @ sc.w_q.T + k @ sc.w_k.T)  # (n, h): the tanh input for the pairs (q_i, k_i)
        scores.append(torch.tanh(pre[-1]) @ sc.w_v)
    var_pre = float(torch.cat(pre).var())
    var_score = float(torch.cat(scores).var())
    assert var_pre == pytest.approx(2.0, rel=0.05)
    assert var_score == pytest.approx(0.52, rel=0.1)
    doc = AdditiveScorer.init.__doc__ or ""
    assert "variance 2" in doc and "0.52" in doc
    assert "every pre-activation has unit variance" not in doc


def _d2l_masked_softmax(x: torch.Tensor, valid_lens: torch.Tensor) -> torch.Tensor:
    """d2l's masked_softmax, from its text: positions >= valid_len are set to -1e6, then softmax."""
    keep = torch.arange(x.shape[-1])[None, :] < valid_lens[:, None]  # (B, S)
    return torch.softmax(torch.where(keep[:, None, :], x, torch.tensor(-1e6, dtype=x.dtype)), dim=-1)


def test_valid_len_zero_gives_zeros_like_cpu_sdpa_where_d2l_gives_a_uniform_row():
    # issue 9, correction 6: the docstring says where attncore and d2l differ; check both claims
    g = make_generator(2)
    q, k, v = (torch.randn(2, 3, 5, generator=g, dtype=torch.float64) for _ in range(3))
    vl = torch.tensor([0, 2])
    out, w = attention(q, k, v, valid_lens=vl, return_weights=True)
    assert torch.equal(w[0], torch.zeros(3, 3, dtype=torch.float64)) and torch.equal(out[0], torch.zeros_like(out[0]))
    d2l = _d2l_masked_softmax(q @ k.transpose(-2, -1) / math.sqrt(5), vl)
    torch.testing.assert_close(d2l[0], torch.full((3, 3), 1 / 3, dtype=torch.float64))  # uniform 1/S
    torch.testing.assert_close(w[1], d2l[1])  # elsewhere the two agree
    mask = (torch.arange(3)[None, :] < vl[:, None])[:, None, :].expand(2, 3, 3)  # (B, L, S)
    sdpa = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)  # CPU
    torch.testing.assert_close(out, sdpa)
    doc = attention.__doc__ or ""
    assert "-1e6" in doc and "1/S" in doc and "cuDNN" in doc
