"""Properties of :func:`attncore.attention` that hold whatever the inputs.

Shape legend: ``B`` batch, ``H`` heads, ``L`` queries, ``S`` keys, ``E`` query/key
dim, ``Ev`` value dim. All randomness is seeded.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from attncore import AttnInputError, attention, attention_stages
from attncore.normalizers import NORMALIZER_NAMES


def _qkv(seed: int, B=2, H=3, L=6, S=6, E=8, Ev=5, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, H, L, E, generator=g, dtype=dtype)
    k = torch.randn(B, H, S, E, generator=g, dtype=dtype)
    v = torch.randn(B, H, S, Ev, generator=g, dtype=dtype)
    return q, k, v


def _fixed_scorer(scores: torch.Tensor):
    """A scorer that ignores q, k and returns the given scores (scale defaults to 1)."""
    return lambda q, k: scores


# --- d2l's masked_softmax, reimplemented independently ------------------------------


def d2l_sequence_mask(X: torch.Tensor, valid_len: torch.Tensor, value: float = 0.0) -> torch.Tensor:
    """d2l's ``sequence_mask``: X (N, S), valid_len (N,) -> entries j >= valid_len set to value."""
    maxlen = X.size(1)
    mask = torch.arange(maxlen, dtype=torch.float32)[None, :] < valid_len[:, None]
    X = X.clone()
    X[~mask] = value
    return X


def d2l_masked_softmax(X: torch.Tensor, valid_lens: torch.Tensor | None) -> torch.Tensor:
    """d2l's ``masked_softmax``: X (N, L, S), valid_lens (N,) or (N, L)."""
    if valid_lens is None:
        return F.softmax(X, dim=-1)
    shape = X.shape
    if valid_lens.dim() == 1:
        valid_lens = torch.repeat_interleave(valid_lens, shape[1])
    else:
        valid_lens = valid_lens.reshape(-1)
    X = d2l_sequence_mask(X.reshape(-1, shape[-1]), valid_lens, value=-1e6)
    return F.softmax(X.reshape(shape), dim=-1)


# --- softmax rows, causal, sliding window --------------------------------------------


@pytest.mark.parametrize("seed", range(6))
def test_softmax_rows_sum_to_one(seed):
    q, k, v = _qkv(seed, L=5, S=9)
    g = torch.Generator().manual_seed(seed + 100)
    m = torch.rand(2, 3, 5, 9, generator=g) < 0.6
    m[..., 3] = True
    for kw in ({}, {"is_causal": True}, {"attn_mask": m}, {"window": 2}):
        _, w = attention(q, k, v, return_weights=True, **kw)
        torch.testing.assert_close(w.sum(-1), torch.ones(2, 3, 5), atol=1e-6, rtol=0)
        assert bool((w >= 0).all())


@pytest.mark.parametrize(("L", "S"), [(6, 6), (4, 8), (8, 4), (1, 5)])
def test_causal_upper_triangle_exactly_zero(L, S):
    q, k, v = _qkv(1, L=L, S=S)
    _, w = attention(q, k, v, is_causal=True, return_weights=True)
    upper = torch.ones(L, S, dtype=torch.bool).triu(diagonal=1)
    assert bool((w[..., upper] == 0).all())
    # Everything on and below the diagonal gets positive weight (softmax of finite scores).
    assert bool((w[..., ~upper] > 0).all())
    # Query 0 sees only key 0.
    assert bool((w[..., 0, 0] == 1).all())


@pytest.mark.parametrize("window", [1, 2, 3, 5])
@pytest.mark.parametrize(("L", "S"), [(7, 7), (5, 9), (9, 5)])
def test_sliding_window_attends_only_last_w_keys(window, L, S):
    q, k, v = _qkv(2, L=L, S=S)
    out, w = attention(q, k, v, window=window, return_weights=True)
    for i in range(L):
        for j in range(S):
            visible = i - window + 1 <= j <= i
            cell = w[..., i, j]
            if visible:
                assert bool((cell > 0).all()), (i, j)
            else:
                assert bool((cell == 0).all()), (i, j)
    # Rows that see at least one key sum to 1; with L > S a query i >= S + window - 1
    # sees none (keys i-w+1..i all lie beyond S) and gets zeros.
    sees = torch.tensor([max(0, i - window + 1) <= min(i, S - 1) for i in range(L)])
    torch.testing.assert_close(w.sum(-1), sees.float().expand(2, 3, L), atol=1e-6, rtol=0)
    assert bool((out[..., ~sees, :] == 0).all())
    torch.testing.assert_close(out, w @ v, atol=1e-6, rtol=1e-6)
    if window == 1:
        # Each query i < S sees only key i: output is exactly that value row.
        n = min(L, S)
        torch.testing.assert_close(out[..., :n, :], v[..., :n, :])


@pytest.mark.parametrize(("L", "S"), [(7, 7), (5, 9), (9, 5)])
@pytest.mark.parametrize("extra", [0, 1, 10])
def test_window_at_least_S_equals_causal(L, S, extra):
    """A window >= S equals causal when L <= S; in general a window >= L does
    (query i sees i-w+1..i, which covers 0..i once w > i for every i < L)."""
    q, k, v = _qkv(3, L=L, S=S)
    out_w, w_w = attention(q, k, v, window=max(L, S) + extra, return_weights=True)
    out_c, w_c = attention(q, k, v, is_causal=True, return_weights=True)
    assert torch.equal(w_w, w_c)
    assert torch.equal(out_w, out_c)
    # Also against torch's causal SDPA.
    torch.testing.assert_close(out_w, F.scaled_dot_product_attention(q, k, v, is_causal=True),
                               atol=1e-5, rtol=1e-5)


def test_window_equal_to_S_with_more_queries_is_not_causal():
    """L > S: query i >= S with window S sees keys i-S+1..S-1 only, fewer than causal's 0..S-1."""
    L, S = 9, 5
    q, k, v = _qkv(3, L=L, S=S)
    _, w_w = attention(q, k, v, window=S, return_weights=True)
    _, w_c = attention(q, k, v, is_causal=True, return_weights=True)
    assert torch.equal(w_w[..., :S, :], w_c[..., :S, :])
    assert bool((w_w[..., 8, :4] == 0).all()) and bool((w_w[..., 8, 4] == 1).all())
    assert bool((w_c[..., 8, :] > 0).all())


def test_small_window_differs_from_causal():
    q, k, v = _qkv(4, L=6, S=6)
    assert not torch.allclose(attention(q, k, v, window=2), attention(q, k, v, is_causal=True))


# --- fully masked rows ----------------------------------------------------------------


def _check_zero_rows(out, w, rows):
    assert not torch.isnan(out).any() and not torch.isnan(w).any()
    assert bool((w[rows] == 0).all())
    assert bool((out[rows] == 0).all())


@pytest.mark.parametrize("normalizer", NORMALIZER_NAMES)
def test_all_false_bool_rows_give_zero(normalizer):
    q, k, v = _qkv(5, L=4, S=5)
    m = torch.ones(2, 3, 4, 5, dtype=torch.bool)
    m[0, 1, 2] = False
    m[1, :, 0] = False
    out, w = attention(q, k, v, attn_mask=m, normalizer=normalizer, return_weights=True)
    rows = ~m.any(-1)  # (B, H, L)
    _check_zero_rows(out, w, rows)
    # Other rows are untouched: nonzero output (ReLU, softpick: unless every key the row sees scores <= 0,
    # by design).
    live = ~rows
    if normalizer in ("relu", "softpick"):
        live &= ((q @ k.transpose(-2, -1) > 0) & m).any(-1)
    assert bool((out[live].abs().sum(-1) > 0).all())


@pytest.mark.parametrize("normalizer", NORMALIZER_NAMES)
def test_valid_lens_zero_gives_zero(normalizer):
    q, k, v = _qkv(6, L=4, S=5)
    vl = torch.tensor([0, 3])
    out, w = attention(q, k, v, valid_lens=vl, normalizer=normalizer, return_weights=True)
    rows = torch.zeros(2, 3, 4, dtype=torch.bool)
    rows[0] = True
    _check_zero_rows(out, w, rows)
    assert bool((w[1, ..., 3:] == 0).all())
    if normalizer in ("relu", "softpick"):  # a key gets weight exactly when it scores above 0
        assert torch.equal(w[1, ..., :3] > 0, (q @ k.transpose(-2, -1))[1, ..., :3] > 0)
    else:
        assert bool((w[1, ..., :3] > 0).all())


@pytest.mark.parametrize("normalizer", NORMALIZER_NAMES)
def test_float_mask_all_neg_inf_rows_give_zero(normalizer):
    q, k, v = _qkv(7, L=4, S=5)
    fm = torch.zeros(4, 5)
    fm[1] = float("-inf")
    fm[3, :2] = float("-inf")
    out, w = attention(q, k, v, attn_mask=fm, normalizer=normalizer, return_weights=True)
    rows = torch.zeros(2, 3, 4, dtype=torch.bool)
    rows[:, :, 1] = True
    _check_zero_rows(out, w, rows)
    assert bool((w[..., 3, :2] == 0).all())


def test_fully_masked_row_combined_with_causal_window():
    """Key 0 hidden by padding-like bool mask: query 0 under causal attention sees nothing."""
    q, k, v = _qkv(8, L=4, S=4)
    m = torch.ones(4, 4, dtype=torch.bool)
    m[:, 0] = False
    for kw in ({"is_causal": True}, {"window": 1}):
        out, w = attention(q, k, v, attn_mask=m, return_weights=True, **kw)
        assert not torch.isnan(w).any()
        assert bool((w[..., 0, :] == 0).all()) and bool((out[..., 0, :] == 0).all())
        torch.testing.assert_close(w[..., 1:, :].sum(-1), torch.ones(2, 3, 3))


# --- valid_lens (d2l semantics) -------------------------------------------------------


def test_valid_lens_d2l_example_per_sequence():
    """d2l's example: scores (2, 2, 4), valid_lens [2, 3]."""
    g = torch.Generator().manual_seed(0)
    X = torch.rand(2, 2, 4, generator=g)
    vl = torch.tensor([2, 3])
    q, k, v = torch.zeros(2, 2, 3), torch.zeros(2, 4, 3), torch.randn(2, 4, 3, generator=g)
    st = attention_stages(q, k, v, valid_lens=vl, scorer=_fixed_scorer(X))
    w = st.weights
    assert st.scale == 1.0
    assert bool((w[0, :, 2:] == 0).all())
    assert bool((w[1, :, 3:] == 0).all())
    torch.testing.assert_close(w[0, :, :2], torch.softmax(X[0, :, :2], -1))
    torch.testing.assert_close(w[1, :, :3], torch.softmax(X[1, :, :3], -1))
    torch.testing.assert_close(w, d2l_masked_softmax(X, vl), atol=1e-7, rtol=0)
    torch.testing.assert_close(st.output, w @ v)


def test_valid_lens_d2l_example_per_query():
    """d2l's second example: valid_lens [[1, 3], [2, 4]] per query."""
    g = torch.Generator().manual_seed(1)
    X = torch.rand(2, 2, 4, generator=g)
    vl = torch.tensor([[1, 3], [2, 4]])
    q, k, v = torch.zeros(2, 2, 3), torch.zeros(2, 4, 3), torch.randn(2, 4, 3, generator=g)
    w = attention_stages(q, k, v, valid_lens=vl, scorer=_fixed_scorer(X)).weights
    for b in range(2):
        for i in range(2):
            n = int(vl[b, i])
            assert bool((w[b, i, n:] == 0).all())
            torch.testing.assert_close(w[b, i, :n], torch.softmax(X[b, i, :n], -1))
    torch.testing.assert_close(w, d2l_masked_softmax(X, vl), atol=1e-7, rtol=0)
    assert w[0, 0, 0] == 1.0


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("per_query", [False, True])
def test_valid_lens_random_against_d2l(seed, per_query):
    g = torch.Generator().manual_seed(seed)
    B, L, S, E = 3, 5, 7, 6
    q, k, v = torch.randn(B, L, E, generator=g), torch.randn(B, S, E, generator=g), torch.randn(B, S, 4, generator=g)
    shape = (B, L) if per_query else (B,)
    vl = torch.randint(1, S + 1, shape, generator=g)
    out, w = attention(q, k, v, valid_lens=vl, return_weights=True)
    scores = q @ k.transpose(-2, -1) / math.sqrt(E)
    ref_w = d2l_masked_softmax(scores, vl)
    torch.testing.assert_close(w, ref_w, atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(out, ref_w @ v, atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("per_query", [False, True])
def test_valid_lens_broadcast_over_heads(per_query):
    """valid_lens (B,) or (B, L) with query (B, H, L, E): the same lengths for every head,
    as d2l's multi-head attention does by repeating valid_lens per head."""
    g = torch.Generator().manual_seed(11)
    B, H, L, S, E = 2, 3, 4, 6, 8
    q, k, v = torch.randn(B, H, L, E, generator=g), torch.randn(B, H, S, E, generator=g), torch.randn(B, H, S, 5, generator=g)
    vl = torch.tensor([[1, 6, 3, 2], [4, 5, 6, 1]]) if per_query else torch.tensor([2, 5])
    out, w = attention(q, k, v, valid_lens=vl, return_weights=True)
    scores = (q @ k.transpose(-2, -1) / math.sqrt(E)).reshape(B * H, L, S)
    vl_rep = torch.repeat_interleave(vl, H, dim=0)  # d2l's MultiHeadAttention
    ref_w = d2l_masked_softmax(scores, vl_rep).reshape(B, H, L, S)
    torch.testing.assert_close(w, ref_w, atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(out, ref_w @ v, atol=1e-6, rtol=1e-6)
    # Same as a boolean mask built from the lengths, through torch's SDPA.
    lens = vl[:, None, :, None] if per_query else vl[:, None, None, None]
    m = torch.arange(S)[None, None, None, :] < lens
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, attn_mask=m),
                               atol=1e-5, rtol=1e-5)


def test_valid_lens_as_list_and_float():
    q, k, v = _qkv(12, L=3, S=5)
    a = attention(q, k, v, valid_lens=torch.tensor([2, 4]))
    b = attention(q, k, v, valid_lens=torch.tensor([2.0, 4.0]))
    assert torch.equal(a, b)


def test_valid_lens_needs_batch_dim():
    g = torch.Generator().manual_seed(0)
    q, k, v = torch.randn(3, 4, generator=g), torch.randn(5, 4, generator=g), torch.randn(5, 2, generator=g)
    with pytest.raises(AttnInputError, match="batch"):
        attention(q, k, v, valid_lens=torch.tensor([2]))


def test_valid_lens_wrong_columns():
    q, k, v = _qkv(13, L=3, S=5)
    with pytest.raises(AttnInputError, match="L = 3"):
        attention(q, k, v, valid_lens=torch.tensor([[1, 2], [3, 4]]))


# --- dropout --------------------------------------------------------------------------


def test_dropout_reproducible_with_seeded_generator():
    q, k, v = _qkv(14, L=8, S=8)
    a = attention(q, k, v, dropout_p=0.3, generator=torch.Generator().manual_seed(5), return_weights=True)
    b = attention(q, k, v, dropout_p=0.3, generator=torch.Generator().manual_seed(5), return_weights=True)
    c = attention(q, k, v, dropout_p=0.3, generator=torch.Generator().manual_seed(6), return_weights=True)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    assert not torch.equal(a[1], c[1])


@pytest.mark.parametrize("p", [0.1, 0.5, 0.8])
def test_dropout_zeroes_and_rescales(p):
    B, H, L, S = 2, 4, 16, 16
    q, k, v = _qkv(15, B=B, H=H, L=L, S=S)
    _, base = attention(q, k, v, return_weights=True)
    assert bool((base > 0).all())
    out, w = attention(q, k, v, dropout_p=p, generator=torch.Generator().manual_seed(7),
                       return_weights=True)
    dropped = w == 0
    kept = ~dropped
    torch.testing.assert_close(w[kept], base[kept] / (1 - p), atol=1e-6, rtol=1e-6)
    # The fraction dropped is p within 5 binomial standard errors.
    n = w.numel()
    frac = dropped.float().mean().item()
    assert abs(frac - p) < 5 * math.sqrt(p * (1 - p) / n), frac
    # The output uses the dropped weights.
    torch.testing.assert_close(out, w @ v, atol=1e-5, rtol=1e-5)


def test_dropout_zero_equals_no_dropout():
    q, k, v = _qkv(16)
    a = attention(q, k, v, dropout_p=0.0, generator=torch.Generator().manual_seed(1), return_weights=True)
    b = attention(q, k, v, return_weights=True)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])


# --- temperature / stages -------------------------------------------------------------


def test_temperature_divides_scaled_scores():
    q, k, v = _qkv(17)
    st1 = attention_stages(q, k, v)
    st2 = attention_stages(q, k, v, temperature=2.5)
    torch.testing.assert_close(st2.scaled, st1.scaled / 2.5)
    torch.testing.assert_close(st1.raw, q @ k.transpose(-2, -1))
    torch.testing.assert_close(st1.scaled, st1.raw / math.sqrt(8))
    torch.testing.assert_close(st2.weights, torch.softmax(st1.scaled / 2.5, -1))
    assert st1.allowed is None


# --- bad inputs -----------------------------------------------------------------------


def test_error_query_key_dim_mismatch():
    q, k, v = _qkv(0)
    with pytest.raises(AttnInputError, match=r"dims differ \(8 vs 5\)"):
        attention(q, k[..., :5], v)


def test_error_key_value_length_mismatch():
    q, k, v = _qkv(0, S=6)
    with pytest.raises(AttnInputError, match="same length S; got 6 and 4"):
        attention(q, k, v[..., :4, :])


def test_error_gqa_heads_not_divisible():
    g = torch.Generator().manual_seed(0)
    q = torch.randn(1, 5, 3, 4, generator=g)
    k = torch.randn(1, 2, 3, 4, generator=g)
    v = torch.randn(1, 2, 3, 4, generator=g)
    with pytest.raises(AttnInputError, match=r"query heads \(5\).*key/value heads \(2\)"):
        attention(q, k, v, enable_gqa=True)


def test_error_gqa_key_value_heads_differ():
    g = torch.Generator().manual_seed(0)
    q = torch.randn(1, 4, 3, 4, generator=g)
    k = torch.randn(1, 2, 3, 4, generator=g)
    v = torch.randn(1, 1, 3, 4, generator=g)
    with pytest.raises(AttnInputError, match="same number of heads"):
        attention(q, k, v, enable_gqa=True)


@pytest.mark.parametrize("t", [0.0, -1.0, float("inf"), float("nan")])
def test_error_temperature_not_positive(t):
    q, k, v = _qkv(0)
    with pytest.raises(AttnInputError, match="temperature must be a positive number"):
        attention_stages(q, k, v, temperature=t)


@pytest.mark.parametrize("window", [0, -3])
def test_error_window_below_one(window):
    q, k, v = _qkv(0)
    with pytest.raises(AttnInputError, match="at least 1 key"):
        attention(q, k, v, window=window)


@pytest.mark.parametrize("p", [1.0, 1.5, -0.1])
def test_error_dropout_out_of_range(p):
    q, k, v = _qkv(0)
    with pytest.raises(AttnInputError, match=r"dropout_p must be in \[0, 1\)"):
        attention(q, k, v, dropout_p=p)


def test_error_scale_not_finite():
    q, k, v = _qkv(0)
    with pytest.raises(AttnInputError, match="scale must be finite"):
        attention(q, k, v, scale=float("inf"))


def test_error_too_few_dims_and_unknown_normalizer():
    g = torch.Generator().manual_seed(0)
    with pytest.raises(AttnInputError, match="at least 2 dims"):
        attention(torch.randn(4, generator=g), torch.randn(3, 4, generator=g), torch.randn(3, 4, generator=g))
    q, k, v = _qkv(0)
    with pytest.raises(AttnInputError, match="unknown normaliser"):
        attention(q, k, v, normalizer="sparsemax")


def test_attn_input_error_is_value_error():
    assert issubclass(AttnInputError, ValueError)


def test_integer_masks_are_rejected_not_added() -> None:
    """A 0/1 uint8/int mask is neither 'keep' nor additive: refuse it with a plain message."""
    g = torch.Generator().manual_seed(3)
    q = torch.randn(1, 2, 4, 8, generator=g)
    for dtype in (torch.uint8, torch.int32, torch.int64):
        with pytest.raises(AttnInputError, match="boolean"):
            attention(q, q, q, attn_mask=torch.ones(4, 4, dtype=dtype))


def test_dropout_with_a_generator_on_the_cpu_is_reproducible() -> None:
    g = torch.Generator().manual_seed(5)
    q = torch.randn(1, 2, 6, 8, generator=g)
    a = attention(q, q, q, dropout_p=0.3, generator=torch.Generator().manual_seed(11))
    b = attention(q, q, q, dropout_p=0.3, generator=torch.Generator().manual_seed(11))
    c = attention(q, q, q, dropout_p=0.3, generator=torch.Generator().manual_seed(12))
    assert torch.equal(a, b) and not torch.equal(a, c)
