"""One cached model shared by every session: passes that hook it run one at a time, a pass that needs no
weights runs torch's fused SDPA and puts the model back, and the blockwise row entropy equals its
definition. Tiny RANDOM decoders (seeded), no download."""

from __future__ import annotations

import threading
from dataclasses import replace

import pytest
import torch

from attncore.decoder.probe import band_allowed, decoder_pass
from attncore.models import run_text
from attncore.models.capture import row_entropy
from attncore.models.generation import next_logits
from attncore.models.modules import attention_implementation, exclusive
from tests.tiny_decoders import tiny_decoder

TEXT = "the cat sat on the mat . the dog slept and a bird sang"


def _weights(H: int, L: int, S: int, causal: bool, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    s = torch.randn(H, L, S, generator=g) * 4
    if causal:
        s = s.masked_fill(torch.ones(L, S, dtype=torch.bool).triu(1), float("-inf"))
    w = torch.softmax(s, dim=-1)
    w[0, -1] = 0.0
    w[0, -1, 1] = 1.0  # one row with a single key: entropy 0 and zeros everywhere else
    return w


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("block", [1, 7, 64, 1000])
def test_row_entropy_equals_its_definition(causal: bool, block: int) -> None:
    w = _weights(3, 37, 37, causal, seed=block)
    A = w.double()
    plogp = torch.where(A > 0, A * A.log(), torch.zeros_like(A))
    ent, rest = row_entropy(w, causal=causal, rest=True, block=block)
    torch.testing.assert_close(ent.double(), -plogp.sum(-1), atol=2e-6, rtol=0)
    torch.testing.assert_close(rest.double(), plogp[..., 1:].sum(-1), atol=2e-6, rtol=0)
    assert float(ent[0, -1]) == 0.0
    only, none = row_entropy(w, causal=causal, block=block)
    assert none is None and torch.equal(only, ent)


def test_row_entropy_reads_only_the_causal_part_when_told() -> None:
    # weight put above the diagonal is ignored with causal=True (never read), counted without it
    w = _weights(2, 20, 20, True, seed=3)
    w[1, 2, 10] = 0.5
    with_upper = row_entropy(w, causal=False)[0]
    causal_only = row_entropy(w, causal=True, block=4)[0]
    assert float(with_upper[1, 2] - causal_only[1, 2]) == pytest.approx(-0.5 * torch.log(torch.tensor(0.5)).item(),
                                                                         abs=1e-6)


def test_a_pass_without_weights_runs_sdpa_and_puts_the_model_back() -> None:
    lm = tiny_decoder("llama", layers=2, heads=6, kv_heads=2, head_dim=8)
    model = lm.model
    assert model.config._attn_implementation == "eager"
    seen: list[str] = []
    h = model.model.layers[0].self_attn.register_forward_hook(
        lambda *_: seen.append(model.config._attn_implementation))
    ids = torch.randint(3, 30, (1, 40), generator=torch.Generator().manual_seed(0))
    try:
        fast = decoder_pass(model, ids, allowed=band_allowed(40, 8, 1), weights=False)
        slow = decoder_pass(model, ids, allowed=band_allowed(40, 8, 1), weights=True)
    finally:
        h.remove()
    assert seen == ["sdpa", "eager"] and model.config._attn_implementation == "eager"
    torch.testing.assert_close(fast.nll, slow.nll, atol=1e-5, rtol=1e-5)
    # restored also when the block fails; an implementation the model lacks changes nothing
    with pytest.raises(RuntimeError), attention_implementation(model, "sdpa"):
        raise RuntimeError("boom")
    assert model.config._attn_implementation == "eager"
    with attention_implementation(model, "no_such_kernel") as switched:
        assert not switched and model.config._attn_implementation == "eager"


def test_exclusive_is_per_model_and_reentrant() -> None:
    a = tiny_decoder("llama", layers=1, heads=2, kv_heads=1, head_dim=8).model
    b = tiny_decoder("qwen2", layers=1, heads=2, kv_heads=1, head_dim=8).model
    got: list[str] = []
    with exclusive(a), exclusive(a):  # re-entrant
        t = threading.Thread(target=lambda: (exclusive(b).__enter__(), got.append("b")))
        t.start()
        t.join(5)
        assert got == ["b"]  # another model is not blocked
        t2 = threading.Thread(target=lambda: [got.append("a") for _ in [exclusive(a).__enter__()]])
        t2.start()
        t2.join(0.3)
        assert got == ["b"] and t2.is_alive()  # the same model waits
    t2.join(5)
    assert got == ["b", "a"]


def test_sessions_sharing_one_model_get_what_they_would_get_alone() -> None:
    # Two threads, as two students' sessions on one cached model: one runs the hooked decoder pass,
    # the other a long text (hooks summarising each layer) and the next-token logits. Forward hooks belong
    # to modules, not threads: without the model held for each pass, one thread's hooks read the
    # other's activations (wrong numbers or a shape error).
    lm = replace(tiny_decoder("llama", layers=2, heads=6, kv_heads=2, head_dim=8), map_limit=8)
    long_text = " ".join([TEXT] * 6)
    ids = torch.randint(3, 30, (1, 50), generator=torch.Generator().manual_seed(1))
    ref_pass = decoder_pass(lm.model, ids, maps=[(1, 2)])
    ref_text = run_text(lm, long_text, layers=(1,))
    ref_logits = next_logits(lm, TEXT)
    errors: list[BaseException] = []
    start = threading.Barrier(2)

    def a() -> None:
        try:
            start.wait()
            for _ in range(15):
                p = decoder_pass(lm.model, ids, maps=[(1, 2)])
                torch.testing.assert_close(p.entropy, ref_pass.entropy)
                torch.testing.assert_close(p.maps[(1, 2)], ref_pass.maps[(1, 2)])
                torch.testing.assert_close(p.residual_norm, ref_pass.residual_norm)
        except BaseException as exc:  # noqa: BLE001 - reported to the main thread
            errors.append(exc)

    def b() -> None:
        try:
            start.wait()
            for _ in range(15):
                t = run_text(lm, long_text, layers=(1,))
                torch.testing.assert_close(t.summary.entropy, ref_text.summary.entropy)
                torch.testing.assert_close(t.maps(1), ref_text.maps(1))
                torch.testing.assert_close(next_logits(lm, TEXT), ref_logits)
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=a), threading.Thread(target=b)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors[0]
