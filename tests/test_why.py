"""attncore.decoder.why: one query's logits taken apart (norm x angle, rotary frequency pairs, content and
position), against from-scratch computations on the tiny random Llama/Qwen2 configs and on SmolLM2."""

from __future__ import annotations

import math

import pytest
import torch

from attncore.decoder.probe import layer_qkv
from attncore.decoder.why import (
    Rotary,
    capture_layer,
    content_vectors,
    decompose,
    rotary_of,
    sink_sentence,
    sink_summary,
)
from attncore.errors import AttnInputError
from tests.tiny_decoders import tiny_decoder

pytestmark = pytest.mark.usefixtures("one_torch_thread")

L = 12


def _ids(n: int, seed: int = 0) -> torch.Tensor:
    return torch.randint(3, 30, (1, n), generator=torch.Generator().manual_seed(seed))


def _rotate_loop(x: torch.Tensor, base: float) -> torch.Tensor:
    """From scratch: rotate (L, E) pre-rotary rows, pair p = dims (p, p + E/2), angle m * base^(-2p/E)."""
    Lx, E = x.shape
    P = E // 2
    out = torch.empty_like(x, dtype=torch.float64)
    for m in range(Lx):
        for p in range(P):
            t = m * base ** (-2 * p / E)
            a, b = float(x[m, p]), float(x[m, p + P])
            out[m, p] = a * math.cos(t) - b * math.sin(t)
            out[m, p + P] = b * math.cos(t) + a * math.sin(t)
    return out


def _pairs_loop(q: torch.Tensor, k: torch.Tensor, i: int, base: float) -> tuple[list, list, list]:
    """From scratch: per key j <= i and pair p (model order), the pair's contribution to q_i.k_j/sqrt(E)
    from the rotated vectors, its content part (pre-rotary dot) and its position part
    Re(z~q conj(z~k) (e^{i(i-j)theta} - 1))."""
    E = q.shape[-1]
    P = E // 2
    qr, kr = _rotate_loop(q, base), _rotate_loop(k, base)
    pair, content, position = [], [], []
    for j in range(i + 1):
        rp, rc, rs = [], [], []
        for p in range(P):
            a, b = p, p + P
            rp.append((qr[i, a] * kr[j, a] + qr[i, b] * kr[j, b]).item() / math.sqrt(E))
            zq = complex(float(q[i, a]), float(q[i, b]))
            zk = complex(float(k[j, a]), float(k[j, b]))
            t = (i - j) * base ** (-2 * p / E)
            rc.append((zq * zk.conjugate()).real / math.sqrt(E))
            rs.append((zq * zk.conjugate() * (complex(math.cos(t), math.sin(t)) - 1)).real / math.sqrt(E))
        pair.append(rp)
        content.append(rc)
        position.append(rs)
    return pair, content, position


@pytest.fixture(scope="module", params=["llama", "qwen2"])
def tiny(request):
    return tiny_decoder(request.param, layers=2, heads=4, kv_heads=2, head_dim=8).model


def test_capture_layer_matches_layer_qkv_and_stops_at_the_layer(tiny) -> None:
    ran = []
    h = tiny.model.layers[1].register_forward_hook(lambda *_: ran.append(1))
    try:
        c = capture_layer(tiny, _ids(L), 0)
    finally:
        h.remove()
    assert ran == []  # the pass stopped inside layer 0's attention
    q, k, _, _ = layer_qkv(tiny, _ids(L), 0)
    torch.testing.assert_close(c.q, q[0].cpu(), atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(c.k, k[0].cpu(), atol=1e-6, rtol=1e-6)
    assert c.q_pre.shape == (4, L, 8) and c.k_pre.shape == (2, L, 8)


def test_the_pairing_is_transformers_rotate_half(tiny) -> None:
    """The model's rotated q is the from-scratch rotation of pairs (p, p + E/2) at base^(-2p/E); the
    recovered content vectors are the captured pre-rotary ones."""
    c = capture_layer(tiny, _ids(L), 1)
    rot = rotary_of(tiny, L)
    base = rotary_of(tiny, 1).base
    assert base == 10_000.0  # tests/tiny_decoders.py's rope_theta
    torch.testing.assert_close(rot.inv_freq, torch.tensor([base ** (-2 * p / 8) for p in range(4)],
                                                          dtype=torch.float64), rtol=1e-6, atol=0)
    for h in range(4):
        torch.testing.assert_close(_rotate_loop(c.q_pre[h], base), c.q[h].double(), atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(content_vectors(c.q[h], rot), c.q_pre[h].double(), atol=1e-5, rtol=1e-5)
    # adjacent pairing (2p, 2p+1) would not reproduce it: the test can fail
    x = c.q_pre[0].double()
    adj = x.reshape(L, 4, 2).transpose(1, 2).reshape(L, 8)
    assert not torch.allclose(_rotate_loop(adj, base).reshape(L, 2, 4).transpose(1, 2).reshape(L, 8),
                              c.q[0].double(), atol=1e-3)


@pytest.mark.parametrize("head,query", [(0, 0), (1, 5), (3, L - 1)])
def test_parts_sum_to_the_logit_and_match_a_loop(tiny, head: int, query: int) -> None:
    c = capture_layer(tiny, _ids(L, 1), 1)
    rot = rotary_of(tiny, L)
    g = head // 2  # 4 query heads share 2 key/value heads
    q, k = c.q[head].double(), c.k[g].double()
    w = decompose(c.q[head], c.k[g], rot, query)
    want = (k[: query + 1] @ q[query]) / math.sqrt(8)
    torch.testing.assert_close(w.logits, want, atol=1e-12, rtol=0)
    torch.testing.assert_close(w.q_norm * w.k_norm * w.cos * w.scale, want, atol=1e-12, rtol=0)
    torch.testing.assert_close(w.pair.sum(-1), want, atol=1e-5, rtol=0)
    torch.testing.assert_close((w.content + w.position).sum(-1), want, atol=1e-5, rtol=0)
    torch.testing.assert_close(w.norm_part + w.angle_part, want - want[w.ref], atol=1e-12, rtol=0)
    pair, content, position = _pairs_loop(c.q_pre[head].double(), c.k_pre[g].double(), query,
                                          rotary_of(tiny, 1).base)
    order = w.pair_index.tolist()
    assert order == [3, 2, 1, 0]  # theta_p = base^(-2p/E) falls with p: low to high frequency is p reversed
    assert bool((w.inv_freq[1:] >= w.inv_freq[:-1]).all())
    P = torch.tensor(pair, dtype=torch.float64)[:, order]
    torch.testing.assert_close(w.pair, P, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(w.content, torch.tensor(content, dtype=torch.float64)[:, order], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(w.position, torch.tensor(position, dtype=torch.float64)[:, order], atol=1e-5,
                               rtol=1e-5)
    # the key at the query's own position: no relative rotation, no position part
    assert float(w.position[query].abs().max()) < 1e-6


def _hand_rotary(n: int, E: int, base: float = 100.0) -> Rotary:
    inv = torch.tensor([base ** (-2 * p / E) for p in range(E // 2)], dtype=torch.float64)
    ang = torch.arange(n, dtype=torch.float64)[:, None] * inv[None]
    return Rotary(inv_freq=inv, cos=ang.cos(), sin=ang.sin(), base=base)


def _rotate(x: torch.Tensor, rot: Rotary) -> torch.Tensor:
    P = x.shape[-1] // 2
    z = torch.complex(x[..., :P], x[..., P:]) * torch.complex(rot.cos[: x.shape[0]], rot.sin[: x.shape[0]])
    return torch.cat([z.real, z.imag], -1)


def test_a_huge_key_wins_by_norm_and_an_aligned_key_by_angle() -> None:
    """Known by construction: every key has the same content direction at cosine 0.5 with the query except
    key 0, 20 times longer (wins by norm), and key 3, fully aligned (wins by angle over the median)."""
    E, n = 8, 6
    rot = _hand_rotary(n, E)
    qv = torch.zeros(E, dtype=torch.float64)
    qv[0] = 1.0
    kv = torch.zeros(E, dtype=torch.float64)
    kv[0], kv[1] = 0.5, math.sqrt(0.75)
    k_pre = kv.repeat(n, 1)
    k_pre[0] *= 20
    k_pre[3] = qv
    # no rotation at all (every position's factor 1): the logits are the content
    flat = Rotary(inv_freq=rot.inv_freq, cos=torch.ones(n, E // 2, dtype=torch.float64),
                  sin=torch.zeros(n, E // 2, dtype=torch.float64), base=rot.base)
    q = qv.repeat(n, 1)
    w = decompose(q, k_pre, flat, n - 1)
    assert w.winner == 0 and w.wins_by(0) == "norm" and w.wins_by(3) == "angle"
    assert w.ref in (1, 2, 4, 5) and float(w.norm_part[w.ref]) == 0.0
    s = sink_summary(q, k_pre, w)
    assert s.key_norm == pytest.approx(20.0) and s.others_norm == pytest.approx(1.0)
    assert s.margin == pytest.approx(9.5 / math.sqrt(E)) and s.angle_part == pytest.approx(0.0)
    assert "wins by its key's norm" in sink_sentence(s) and "mostly by content" in sink_sentence(s)


def test_the_band_that_carries_the_sink_is_found() -> None:
    """Key 0 differs from the others only in the lowest-frequency pair (p = E/2 - 1): that band carries
    all of its margin."""
    E, n = 8, 5
    rot = _hand_rotary(n, E)
    g = torch.Generator().manual_seed(3)
    q_pre = torch.randn(n, E, generator=g, dtype=torch.float64)
    k_pre = torch.randn(E, generator=g, dtype=torch.float64).repeat(n, 1)
    P = E // 2
    k_pre[0, P - 1] += 5 * q_pre[n - 1, P - 1]
    k_pre[0, E - 1] += 5 * q_pre[n - 1, E - 1]
    # keys 1..4 share one content vector; the query sees them at distances 3, 2, 1, 0
    w = decompose(_rotate(q_pre, rot), _rotate(k_pre, rot), rot, n - 1)
    s = sink_summary(_rotate(q_pre, rot), _rotate(k_pre, rot), w)
    assert int(torch.argmax(s.bands)) == 0 and w.pair_index[0] == P - 1
    torch.testing.assert_close(s.bands.sum(), torch.tensor(s.margin, dtype=torch.float64))
    assert s.content_part + s.position_part == pytest.approx(s.margin, abs=1e-12)
    assert s.norm_part + s.angle_part == pytest.approx(s.margin, abs=1e-12)
    assert "lowest frequency quarter" in sink_sentence(s)


def test_bad_query_and_first_query() -> None:
    rot = _hand_rotary(4, 8)
    x = torch.randn(4, 8, generator=torch.Generator().manual_seed(0))
    with pytest.raises(AttnInputError, match="query token"):
        decompose(x, x, rot, 4)
    with pytest.raises(AttnInputError, match="second token"):
        sink_summary(x, x, decompose(x, x, rot, 0))


@pytest.mark.slow
def test_smollm2_parts_sum_to_the_logit() -> None:
    """The real model (Llama, E = 64, base 100,000, 9 query heads over 3 key/value heads): the cached page
    capture's q and k taken apart, the content part against the pre-rotary q and k read from the model."""
    from attncore.models import load_model
    from attncore.models.capture import tokenize
    from attncore.qkv import capture

    lm = load_model("smollm2")
    text = "The cat sat on the mat. The dog slept."
    hv = capture(lm, text)
    n = len(hv.tokens)
    rot = rotary_of(lm.model, n)
    assert rot.pairs == 32 and rot.base == 100_000.0
    torch.testing.assert_close(rot.inv_freq, torch.tensor([1e5 ** (-2 * p / 64) for p in range(32)],
                                                          dtype=torch.float64), rtol=1e-6, atol=0)
    layer, head, query = 5, 4, n - 1
    ids = tokenize(lm, text).ids  # what capture read (hv.tokens are the display forms, issue 41 item 1)
    c = capture_layer(lm.model, ids, layer)
    torch.testing.assert_close(c.q[head], hv.q[layer, head], atol=1e-4, rtol=1e-4)
    w = decompose(hv.q[layer, head], hv.k[layer, head], rot, query, scale=hv.scale)
    want = hv.scores(layer)[head, query, : query + 1]
    torch.testing.assert_close(w.logits, want, atol=1e-9, rtol=0)
    torch.testing.assert_close(w.pair.sum(-1), want, atol=1e-5, rtol=0)
    torch.testing.assert_close((w.content + w.position).sum(-1), want, atol=1e-5, rtol=0)
    g = head // 3
    pre = (c.k_pre[g, : query + 1].double() @ c.q_pre[head, query].double()) * hv.scale
    torch.testing.assert_close(w.content.sum(-1), pre, atol=1e-4, rtol=1e-4)
    assert float(w.position[query].abs().max()) < 1e-5
    s = sink_summary(hv.q[layer, head], hv.k[layer, head], w)
    assert s.norm_part + s.angle_part == pytest.approx(s.margin, abs=1e-9)
    assert float(s.bands.sum()) == pytest.approx(s.margin, abs=1e-5)
