"""attncore.training.measure: the first-token sink metric and the StreamingLLM test."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from attncore.errors import AttnInputError
from attncore.masks import sliding_window_mask
from attncore.training import (
    CharTransformer,
    TrainConfig,
    attention_maps,
    first_token_sinks,
    stream_nll,
    streaming_test,
)
from attncore.training.measure import kept_keys
from tests.training_utils import VOCAB

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def model(variant: str = "standard", n_layer: int = 2, context: int = 12, seed: int = 0) -> CharTransformer:
    cfg = TrainConfig(variant=variant, n_layer=n_layer, n_head=2, d_model=16, context=context, batch=2,
                      steps=5, warmup=0, eval_every=5)
    m = CharTransformer.create(cfg, VOCAB, torch.Generator().manual_seed(seed))
    with torch.no_grad():
        for blk in m.blocks:
            blk.attn.qkv.weight.mul_(12.0)
            blk.attn.proj.weight.mul_(10.0)
    return m.eval()


def text_of(n: int, seed: int = 0) -> str:
    g = torch.Generator().manual_seed(seed)
    return "".join(VOCAB[i] for i in torch.randint(0, len(VOCAB), (n,), generator=g).tolist())


def ids_of(text: str) -> torch.Tensor:
    return torch.tensor([VOCAB.index(c) for c in text])


# ---------------------------------------------------------------------------- sinks


def test_sink_scores_are_the_mean_weight_on_key_0() -> None:
    m = model()
    texts = [text_of(12, s) for s in range(3)]
    sm = first_token_sinks(m, texts)
    want = torch.stack([attention_maps(m, t)[..., :, 0].mean(-1) for t in texts]).mean(0)  # (N, H)
    torch.testing.assert_close(sm.alpha, want)
    assert sm.share.tolist() == (want > 0.3).float().mean(-1).tolist()
    assert sm.alpha_uniform == pytest.approx(sum(1 / (i + 1) for i in range(12)) / 12)
    assert sm.length == 12 and sm.eps == 0.3


def test_uniform_attention_gives_the_baseline_exactly() -> None:
    m = model()
    with torch.no_grad():
        for blk in m.blocks:
            blk.attn.qkv.weight[:32].zero_()  # q = k = 0: every visible key gets 1/(i+1)
    sm = first_token_sinks(m, text_of(12))
    torch.testing.assert_close(sm.alpha, torch.full((2, 2), sm.alpha_uniform))


def test_first_token_sinks_rejects_unequal_lengths() -> None:
    with pytest.raises(AttnInputError):
        first_token_sinks(model(), ["abc", "abcd"])
    with pytest.raises(AttnInputError):
        first_token_sinks(model(), "abc", eps=1.5)


# ---------------------------------------------------------------------------- StreamingLLM


def test_kept_keys() -> None:
    assert kept_keys(2, "full", 4, 4) == [0, 1, 2]
    assert kept_keys(9, "window", 4, 2) == [6, 7, 8, 9]
    assert kept_keys(9, "window_sinks", 4, 2) == [0, 1, 6, 7, 8, 9]
    assert kept_keys(4, "window_sinks", 4, 2) == [0, 1, 2, 3, 4]  # no duplicates while they overlap
    assert kept_keys(1, "window_sinks", 4, 4) == [0, 1]
    with pytest.raises(AttnInputError):
        kept_keys(1, "lru", 4, 4)


@pytest.mark.parametrize("variant", ["standard", "fully_scaled_rows", "ssmax", "sink_logit", "gated"])
def test_full_cache_decoding_equals_one_forward_pass_past_the_context(variant: str) -> None:
    m = model(variant)
    ids = ids_of(text_of(40))  # > 3x the context of 12
    with torch.no_grad():
        logits, _ = m(ids[None])
    want = F.cross_entropy(logits[0, :-1], ids[1:], reduction="none").double()
    torch.testing.assert_close(stream_nll(m, ids, "full", 5), want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("variant", ["standard", "softmax1"])
def test_window_decoding_equals_a_sliding_window_mask(variant: str) -> None:
    """Rotary scores depend only on relative positions, so a rolling cache with positions by
    cache slot computes what one pass with a sliding-window mask computes."""
    m = model(variant)
    ids = ids_of(text_of(30))
    with torch.no_grad():
        logits, _ = m(ids[None], allowed=sliding_window_mask(30, 30, 5))
    want = F.cross_entropy(logits[0, :-1], ids[1:], reduction="none").double()
    torch.testing.assert_close(stream_nll(m, ids, "window", 5), want, rtol=1e-4, atol=1e-4)


def test_window_plus_sinks_reads_the_kept_tokens_at_cache_positions() -> None:
    """One layer: keys and values depend only on their own token, so predicting token t+1 with
    the cache [first 2 tokens, last 5] is one forward pass over those 7 tokens."""
    m = model(n_layer=1)
    ids = ids_of(text_of(25))
    got = stream_nll(m, ids, "window_sinks", 5, sinks=2)
    for t in (3, 10, 23):
        keep = kept_keys(t, "window_sinks", 5, 2)
        with torch.no_grad():
            logits, _ = m(ids[keep][None])
        want = F.cross_entropy(logits[0, -1:], ids[t + 1 : t + 2]).double()
        assert float(got[t]) == pytest.approx(float(want), abs=1e-4)
    # and it differs from the plain window once the first tokens are evicted
    assert not torch.allclose(got[8:], stream_nll(m, ids, "window", 5)[8:])


def test_streaming_test_summarises_the_three_policies() -> None:
    m = model(context=12)
    text = text_of(96)  # 8x the context
    r = streaming_test(m, text, window=6, sinks=4)
    ids = ids_of(text)
    per = {p: stream_nll(m, ids, p, 6, 4) for p in ("full", "window", "window_sinks")}
    assert r.full_loss == pytest.approx(float(per["full"].mean()))
    assert r.window_loss == pytest.approx(float(per["window"].mean()))
    assert r.window_sinks_loss == pytest.approx(float(per["window_sinks"].mean()))
    assert r.window_beyond == pytest.approx(float(per["window"][11:].mean()))
    assert len(r.chunks["full"]) == 8 and r.chunks["window"][0] == pytest.approx(float(per["window"][:12].mean()))
    assert (r.window, r.sinks, r.n_tokens, r.context) == (6, 4, 96, 12)
    assert set(r.to_dict()) >= {"full_loss", "window_loss", "window_sinks_loss", "chunks"}


@pytest.mark.parametrize(("text_len", "window", "sinks"), [(12, 4, 4), (200, 4, 4), (96, 0, 4), (96, 12, 4),
                                                          (96, 4, 17)])
def test_streaming_test_bounds(text_len: int, window: int, sinks: int) -> None:
    with pytest.raises(AttnInputError):
        streaming_test(model(context=12), text_of(text_len), window=window, sinks=sinks)
