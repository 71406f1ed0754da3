"""Each row normaliser against its formula, computed independently here.

Shape legend: ``H`` heads, ``L`` queries, ``S`` keys; scores are ``(H, L, S)``.
"""

from __future__ import annotations

import math

import pytest
import torch

from attncore import AttnInputError, attention
from attncore.normalizers import (
    NORMALIZER_NAMES,
    ReLUNorm,
    Sigmoid,
    Softmax,
    SoftmaxWithSink,
    Softpick,
    SSMax,
    get_normalizer,
)


def _scores(seed: int, shape=(3, 5, 7), scale: float = 2.0, dtype=torch.float64) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g, dtype=dtype) * scale


def _mask(seed: int, shape=(3, 5, 7)) -> torch.Tensor:
    """Random mask whose rows keep a varying number (>= 1) of keys."""
    g = torch.Generator().manual_seed(seed + 1000)
    m = torch.rand(shape, generator=g) < 0.55
    m[..., 0] = True
    return m


# --- softmax --------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(4))
def test_softmax_formula(seed):
    x = _scores(seed)
    w = Softmax()(x)
    e = torch.exp(x)
    torch.testing.assert_close(w, e / e.sum(-1, keepdim=True))
    torch.testing.assert_close(w.sum(-1), torch.ones(3, 5, dtype=torch.float64))


@pytest.mark.parametrize("seed", range(4))
def test_softmax_masked_formula(seed):
    x, m = _scores(seed), _mask(seed)
    w = Softmax()(x, m)
    e = torch.exp(x) * m
    torch.testing.assert_close(w, e / e.sum(-1, keepdim=True))
    assert bool((w[~m] == 0).all())


def test_softmax_large_logits_stable():
    x = torch.tensor([[1e4, 1e4 - 1.0, -1e4], [-1e4, -1e4, -1e4]], dtype=torch.float32)
    w = Softmax()(x)
    assert torch.isfinite(w).all()
    e = 1.0 / (1.0 + math.exp(-1.0))
    torch.testing.assert_close(w[0], torch.tensor([e, 1 - e, 0.0]))
    torch.testing.assert_close(w[1], torch.full((3,), 1 / 3))


def test_neg_inf_scores_count_as_hidden():
    x = torch.tensor([[0.0, float("-inf"), 1.0]])
    for name in NORMALIZER_NAMES:
        w = get_normalizer(name)(x)
        assert w[0, 1] == 0, name
        assert not torch.isnan(w).any(), name


# --- softmax1 / sink --------------------------------------------------------------------


def _softmax1_reference(x: torch.Tensor, b=0.0) -> torch.Tensor:
    """Append a column of logit b, take the softmax, drop that column."""
    b = torch.as_tensor(b, dtype=x.dtype)
    col = b.expand(*x.shape[:-1], 1) if b.dim() else torch.full((*x.shape[:-1], 1), float(b), dtype=x.dtype)
    return torch.softmax(torch.cat([x, col], dim=-1), dim=-1)[..., :-1]


@pytest.mark.parametrize("seed", range(4))
def test_softmax1_formula(seed):
    x = _scores(seed)
    w = SoftmaxWithSink()(x)
    e = torch.exp(x)
    torch.testing.assert_close(w, e / (1.0 + e.sum(-1, keepdim=True)))
    torch.testing.assert_close(w, _softmax1_reference(x))
    assert bool((w.sum(-1) < 1).all())


def test_softmax1_wide_rows_match_float64_and_masked_keys_stay_zero():
    # a row spanning ~2000 logits: most shifted entries underflow float32 exp (the slow path the
    # implementation avoids by clamping); the weights must still equal the float64 formula
    g = torch.Generator().manual_seed(3)
    x = torch.randn(4, 8, 300, generator=g) * 400.0  # (B, L, S)
    allowed = torch.rand(4, 8, 300, generator=g) > 0.2
    w = SoftmaxWithSink()(x, allowed)
    ref = SoftmaxWithSink()(x.double(), allowed)
    torch.testing.assert_close(w.double(), ref, rtol=1e-5, atol=1e-30)
    assert bool((w[~allowed] == 0).all())
    m = x.masked_fill(~allowed, float("-inf")).amax(-1, keepdim=True).clamp(min=0.0)  # sink logit 0
    assert bool((w[(x - m) < -104] == 0).all())  # underflowed: exactly 0, as exp itself gives


@pytest.mark.parametrize("big", [1e2, 1e3, 1e4])
def test_softmax1_huge_logits_stable(big):
    x = torch.tensor([[big, big - 2.0, 0.0], [big, -big, big]], dtype=torch.float32)
    w = SoftmaxWithSink()(x)
    assert torch.isfinite(w).all()
    torch.testing.assert_close(w, _softmax1_reference(x))
    # The sink's share exp(0 - big) vanishes: rows sum to 1 up to rounding.
    torch.testing.assert_close(w.sum(-1), torch.ones(2))
    e = 1.0 / (1.0 + math.exp(-2.0))
    torch.testing.assert_close(w[0], torch.tensor([e, 1 - e, 0.0]))
    torch.testing.assert_close(w[1], torch.tensor([0.5, 0.0, 0.5]))


@pytest.mark.parametrize("neg", [-50.0, -1e3, -1e4])
def test_softmax1_very_negative_logits_sum_to_zero(neg):
    x = torch.full((2, 4), neg, dtype=torch.float32)
    w = SoftmaxWithSink()(x)
    assert torch.isfinite(w).all()
    torch.testing.assert_close(w.sum(-1), torch.zeros(2), atol=1e-20, rtol=0)
    torch.testing.assert_close(w, _softmax1_reference(x), atol=1e-30, rtol=1e-5)


def test_softmax1_by_name_and_float_sink():
    x = _scores(5)
    assert isinstance(get_normalizer("softmax1"), SoftmaxWithSink)
    torch.testing.assert_close(get_normalizer("softmax1")(x), _softmax1_reference(x))
    w = get_normalizer("softmax1", sink_logit=1.5)(x)
    e = torch.exp(x)
    torch.testing.assert_close(w, e / (math.exp(1.5) + e.sum(-1, keepdim=True)))
    assert SoftmaxWithSink(1.5).params() == {"b": 1.5}


def test_sink_per_head_tensor():
    x = _scores(6)  # (H=3, L=5, S=7)
    sink = torch.tensor([-2.0, 0.0, 3.0], dtype=torch.float64).reshape(3, 1, 1)
    w = SoftmaxWithSink(sink_logit=sink)(x)
    e = torch.exp(x)
    expected = e / (torch.exp(sink) + e.sum(-1, keepdim=True))
    torch.testing.assert_close(w, expected)
    torch.testing.assert_close(w, _softmax1_reference(x, sink))
    for h in range(3):
        torch.testing.assert_close(w[h], SoftmaxWithSink(float(sink[h]))(x[h]))
    # A larger sink logit leaves less mass on the keys.
    sums = w.sum(-1).mean(-1)
    assert sums[0] > sums[1] > sums[2]
    assert math.isnan(SoftmaxWithSink(sink).params()["b"])


def test_sink_per_head_tensor_with_batch_and_mask():
    x = _scores(7, shape=(2, 3, 4, 6))
    m = _mask(7, shape=(2, 3, 4, 6))
    sink = torch.tensor([0.5, -1.0, 2.0], dtype=torch.float64).reshape(3, 1, 1)
    w = SoftmaxWithSink(sink_logit=sink)(x, m)
    e = torch.exp(x) * m
    torch.testing.assert_close(w, e / (torch.exp(sink) + e.sum(-1, keepdim=True)))
    assert bool((w[~m] == 0).all())


def test_sink_huge_logit_with_fully_masked_row():
    x = _scores(8, shape=(2, 4))
    m = torch.tensor([[True, True, False, True], [False] * 4])
    w = SoftmaxWithSink(sink_logit=1e4)(x, m)
    assert torch.isfinite(w).all()
    assert bool((w == 0).all())


# --- SSMax ------------------------------------------------------------------------------


def _ssmax_reference(x: torch.Tensor, m: torch.Tensor | None, s: float) -> torch.Tensor:
    n = x.shape[-1] if m is None else m.sum(-1, keepdim=True)
    n = torch.as_tensor(n, dtype=x.dtype)
    z = s * torch.log(n) * x
    if m is not None:
        z = z.masked_fill(~m, float("-inf"))
    return torch.softmax(z, dim=-1)


def test_ssmax_default_s():
    assert SSMax().s == 0.43
    assert get_normalizer("ssmax").s == 0.43
    assert SSMax().params() == {"s": 0.43}


@pytest.mark.parametrize("s", [0.43, 1.0, 2.5])
def test_ssmax_formula_unmasked(s):
    x = _scores(9)
    w = SSMax(s)(x)
    torch.testing.assert_close(w, torch.softmax(s * math.log(7) * x, dim=-1))


@pytest.mark.parametrize("s", [0.43, 1.7])
def test_ssmax_uses_visible_key_count_per_row(s):
    x, m = _scores(10), _mask(10)
    counts = m.sum(-1)
    assert counts.unique().numel() >= 3  # n really differs between rows
    w = get_normalizer("ssmax", s=s)(x, m)
    torch.testing.assert_close(w, _ssmax_reference(x, m, s))
    assert bool((w[~m] == 0).all())
    # Using the full S instead of the visible count would give a different answer.
    wrong = torch.softmax((s * math.log(7) * x).masked_fill(~m, float("-inf")), -1)
    assert not torch.allclose(w, wrong, atol=1e-4)


def test_ssmax_single_visible_key_gets_one():
    x = _scores(11, shape=(2, 5))
    m = torch.zeros(2, 5, dtype=torch.bool)
    m[0, 3] = True
    m[1, 0] = True
    w = SSMax()(x, m)
    expected = torch.zeros(2, 5, dtype=torch.float64)
    expected[0, 3] = 1.0
    expected[1, 0] = 1.0
    assert torch.equal(w, expected)


def test_ssmax_neg_inf_scores_reduce_n():
    x = _scores(12, shape=(1, 6))
    x[0, 4:] = float("-inf")
    w = SSMax(0.9)(x)
    vis = x[0, :4]
    torch.testing.assert_close(w[0, :4], torch.softmax(0.9 * math.log(4) * vis, -1))
    assert bool((w[0, 4:] == 0).all())


@pytest.mark.parametrize("s", [0.0, -0.5, float("nan"), float("inf"), 101.0])
def test_ssmax_invalid_s_raises(s):
    with pytest.raises(AttnInputError, match="SSMax needs 0 < s <= 100"):
        SSMax(s)
    with pytest.raises(AttnInputError):
        get_normalizer("ssmax", s=s)


# --- sigmoid ----------------------------------------------------------------------------


def test_sigmoid_default_bias_minus_log_n():
    x = _scores(13)
    w = Sigmoid()(x)
    torch.testing.assert_close(w, torch.sigmoid(x - math.log(7)))


def test_sigmoid_default_bias_uses_visible_count():
    x, m = _scores(14), _mask(14)
    w = Sigmoid()(x, m)
    n = m.sum(-1, keepdim=True).to(x.dtype)
    torch.testing.assert_close(w, torch.sigmoid(x - torch.log(n)) * m)
    assert bool((w[~m] == 0).all())


@pytest.mark.parametrize("b", [-2.0, 0.0, 1.25])
def test_sigmoid_explicit_bias(b):
    x, m = _scores(15), _mask(15)
    w = get_normalizer("sigmoid", bias=b)(x, m)
    torch.testing.assert_close(w, torch.sigmoid(x + b) * m)
    assert Sigmoid(b).params() == {"b": b}


def test_sigmoid_invalid_bias_raises():
    with pytest.raises(AttnInputError, match="finite"):
        Sigmoid(float("inf"))


# --- ReLU (Guo et al. 2024) ------------------------------------------------------------


def _relu_reference(x: torch.Tensor, m: torch.Tensor | None = None) -> torch.Tensor:
    """max(x, 0) / n per row, written out element by element (n = visible keys)."""
    out = torch.zeros_like(x)
    for idx in torch.cartesian_prod(*(torch.arange(s) for s in x.shape[:-1])):
        i = tuple(int(v) for v in idx)
        row = x[i]
        vis = [j for j in range(row.shape[0]) if (m is None or bool(m[i][j])) and row[j] != float("-inf")]
        for j in vis:
            out[i][j] = max(float(row[j]), 0.0) / len(vis)
    return out


@pytest.mark.parametrize("seed", range(3))
def test_relu_formula(seed):
    x = _scores(seed + 30)
    torch.testing.assert_close(ReLUNorm()(x), _relu_reference(x))


@pytest.mark.parametrize("seed", range(3))
def test_relu_masked_divides_by_visible_keys(seed):
    x, m = _scores(seed + 33), _mask(seed + 33)
    w = ReLUNorm()(x, m)
    torch.testing.assert_close(w, _relu_reference(x, m))
    assert bool((w[~m] == 0).all())


def test_relu_can_attend_to_nothing_and_ignores_neg_inf():
    x = torch.tensor([[-1.0, -2.0, -0.5], [2.0, float("-inf"), 1.0], [3.0, 0.0, -3.0]])
    w = ReLUNorm()(x)
    torch.testing.assert_close(w, torch.tensor([[0.0, 0.0, 0.0], [1.0, 0.0, 0.5], [1.0, 0.0, 0.0]]))
    assert get_normalizer("relu").name == "relu" and not ReLUNorm.sums_to_one
    full = torch.full((2, 3), float("-inf"))
    assert bool((ReLUNorm()(full) == 0).all())


# --- shared contract ------------------------------------------------------------------


def _all_normalizers():
    sink = torch.tensor([0.0, 1.0, -1.0], dtype=torch.float64).reshape(3, 1, 1)
    return [Softmax(), SoftmaxWithSink(), SoftmaxWithSink(sink), SSMax(), SSMax(2.0),
            Sigmoid(), Sigmoid(0.5)]


@pytest.mark.parametrize("norm", _all_normalizers(), ids=lambda n: f"{n.name}-{n.params()}")
def test_masked_entries_exactly_zero_and_fully_masked_rows_zero(norm):
    x, m = _scores(16), _mask(16)
    m[0, 2] = False  # a fully masked row
    m[2, 4] = False
    w = norm(x, m)
    assert w.shape == x.shape and w.dtype == x.dtype
    assert not torch.isnan(w).any()
    assert bool((w[~m] == 0).all())
    assert bool((w[0, 2] == 0).all()) and bool((w[2, 4] == 0).all())
    visible = m.any(-1)
    assert bool((w.sum(-1)[visible] > 0).all())
    if norm.sums_to_one:
        torch.testing.assert_close(w.sum(-1)[visible], torch.ones(int(visible.sum()), dtype=x.dtype))


@pytest.mark.parametrize("norm", _all_normalizers(), ids=lambda n: f"{n.name}-{n.params()}")
def test_all_neg_inf_row_gives_zero(norm):
    x = _scores(17)
    x[1, 3] = float("-inf")
    w = norm(x)
    assert not torch.isnan(w).any()
    assert bool((w[1, 3] == 0).all())


@pytest.mark.parametrize("name", NORMALIZER_NAMES)
def test_attention_uses_named_normalizer(name):
    g = torch.Generator().manual_seed(18)
    q, k, v = torch.randn(2, 3, 4, 8, generator=g), torch.randn(2, 3, 6, 8, generator=g), torch.randn(2, 3, 6, 5, generator=g)
    m = torch.rand(2, 3, 4, 6, generator=g) < 0.6
    m[..., 0] = True
    out, w = attention(q, k, v, attn_mask=m, normalizer=name, return_weights=True)
    scores = q @ k.transpose(-2, -1) / math.sqrt(8)
    torch.testing.assert_close(w, get_normalizer(name)(scores, m))
    torch.testing.assert_close(out, w @ v)


# --- get_normalizer -----------------------------------------------------------------


def test_get_normalizer_names():
    assert NORMALIZER_NAMES == ("softmax", "softmax1", "ssmax", "sigmoid", "relu", "softpick")
    expected = {"softmax": Softmax, "softmax1": SoftmaxWithSink, "ssmax": SSMax, "sigmoid": Sigmoid,
                "relu": ReLUNorm, "softpick": Softpick}
    for name, cls in expected.items():
        n = get_normalizer(name)
        assert type(n) is cls and n.name == name
    assert type(get_normalizer("  SoftMax ")) is Softmax


def test_get_normalizer_passes_objects_through():
    n = SSMax(1.3)
    assert get_normalizer(n) is n
    with pytest.raises(AttnInputError, match="only accepted with a normaliser name"):
        get_normalizer(n, s=2.0)


def test_get_normalizer_errors():
    with pytest.raises(AttnInputError, match=r"unknown normaliser 'entmax'.*softmax, softmax1, ssmax, sigmoid, relu, softpick"):
        get_normalizer("entmax")
    with pytest.raises(AttnInputError, match="bad parameters for normaliser 'softmax'"):
        get_normalizer("softmax", s=1.0)
    with pytest.raises(AttnInputError, match="bad parameters for normaliser 'sigmoid'"):
        get_normalizer("sigmoid", s=1.0)


def test_allowed_must_be_bool():
    x = _scores(19)
    with pytest.raises(AttnInputError, match="must be boolean"):
        Softmax()(x, torch.ones_like(x))


def test_sums_to_one_flags():
    assert Softmax.sums_to_one and SSMax.sums_to_one
    assert not SoftmaxWithSink.sums_to_one and not Sigmoid.sums_to_one and not ReLUNorm.sums_to_one
