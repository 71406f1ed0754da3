"""Activation patching (attncore.decoder.patching) against a from-scratch forward with the patch made by hand on
tiny RANDOM Llama/Qwen2 decoders (seeded, float64), a case known by construction (every head's o_proj but one
zeroed, every MLP zeroed), stop and resume, bad input, and the built-in pairs on the real SmolLM2."""

from __future__ import annotations

import math
import types
from typing import Any

import pytest
import torch

from attncore.decoder.patching import (
    MAX_PATCH_TOKENS,
    PAIRS,
    PairIds,
    activation_patching,
    pair_ids,
    patch_bytes,
    patched_logits,
)
from attncore.decoder.probe import decoder_shape
from attncore.errors import AttnInputError, ResourceLimitError
from attncore.models import LoadedModel, load_model
from tests.tiny_decoders import tiny_decoder

pytestmark = pytest.mark.usefixtures("one_torch_thread")

CLEAN = "the cat sat on the mat and the dog slept"
CORRUPT = "the dog sat on a mat and the cat slept"


def _rms(self: Any, x: torch.Tensor) -> torch.Tensor:
    """transformers' RMSNorm without its cast to float32: float64 all through."""
    return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.variance_epsilon))


@pytest.fixture(scope="module", params=["llama", "qwen2"])
def tiny(request: pytest.FixtureRequest) -> tuple[Any, PairIds]:
    lm = tiny_decoder(request.param, layers=3, heads=4, kv_heads=2, head_dim=8, seed=3)
    model = lm.model.double()
    for m in model.modules():
        if type(m).__name__.endswith("RMSNorm"):
            m.forward = types.MethodType(_rms, m)
    pair = pair_ids(lm.tokenizer, CLEAN, CORRUPT, "cat", "dog")
    return model, pair


def _scratch(model: Any, ids: torch.Tensor, *, resid: tuple[int, int, torch.Tensor] | None = None,
             head: tuple[int, int, torch.Tensor] | None = None) -> tuple[torch.Tensor, list[torch.Tensor],
                                                                        list[torch.Tensor]]:
    """A Llama/Qwen2 forward written out (float64, the rotary factors the model's own, which it makes in
    float32): the last position's logits (V,), every layer's input
    (L, D) and attention output before o_proj (L, H E). ``resid = (layer, position, value (D,))`` replaces that
    layer's input there; ``head = (layer, head, z (L, E))`` replaces the head's output slice."""
    shape = decoder_shape(model)
    H, Hkv, E = shape.heads, shape.kv_heads, shape.head_dim
    L = ids.shape[1]
    with torch.no_grad():  # the model's own rotary factors (made in float32, as the model uses them)
        cos, sin = model.model.rotary_emb(model.model.embed_tokens.weight[:1][None], torch.arange(L)[None])
    cos, sin = cos[0], sin[0]  # (L, E)

    def rot(t: torch.Tensor) -> torch.Tensor:
        return t * cos + torch.cat([-t[..., E // 2:], t[..., : E // 2]], -1) * sin

    def lin(x: torch.Tensor, m: torch.nn.Linear) -> torch.Tensor:
        return x @ m.weight.T + (m.bias if m.bias is not None else 0.0)

    def norm(x: torch.Tensor, m: Any) -> torch.Tensor:
        return m.weight * x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + m.variance_epsilon)

    group = torch.arange(H) // (H // Hkv)
    causal = torch.ones(L, L, dtype=torch.bool).tril()
    ins, outs = [], []
    with torch.no_grad():
        h = model.model.embed_tokens.weight[ids[0]].clone()  # (L, D)
        for i, blk in enumerate(model.model.layers):
            if resid is not None and resid[0] == i:
                h[resid[1]] = resid[2]
            ins.append(h.clone())
            sa = blk.self_attn
            x = norm(h, blk.input_layernorm)
            q = rot(lin(x, sa.q_proj).view(L, H, E).transpose(0, 1))  # (H, L, E)
            k = rot(lin(x, sa.k_proj).view(L, Hkv, E).transpose(0, 1))[group]
            v = lin(x, sa.v_proj).view(L, Hkv, E).transpose(0, 1)[group]
            w = torch.softmax((q @ k.transpose(-1, -2) / E**0.5).masked_fill(~causal, float("-inf")), -1)
            z = (w @ v).transpose(0, 1).reshape(L, H * E)  # (L, H E)
            if head is not None and head[0] == i:
                z[:, head[1] * E:(head[1] + 1) * E] = head[2]
            outs.append(z.clone())
            h = h + lin(z, sa.o_proj)
            x = norm(h, blk.post_attention_layernorm)
            h = h + lin(torch.nn.functional.silu(lin(x, blk.mlp.gate_proj)) * lin(x, blk.mlp.up_proj),
                        blk.mlp.down_proj)
        logits = lin(norm(h, model.model.norm), model.lm_head)[-1]
    return logits, ins, outs


def _diff(logits: torch.Tensor, pair: PairIds) -> float:
    return float(logits[pair.answer] - logits[pair.wrong])


def test_shares_equal_a_from_scratch_forward_patched_by_hand(tiny: tuple[Any, PairIds]) -> None:
    model, pair = tiny
    r = activation_patching(model, pair)
    lc, ins, outs = _scratch(model, pair.clean)
    lr, _, _ = _scratch(model, pair.corrupted)
    mc, mr = _diff(lc, pair), _diff(lr, pair)
    assert r.complete and r.steps == (6, 6)
    assert r.clean_diff == pytest.approx(mc, abs=1e-9) and r.corrupted_diff == pytest.approx(mr, abs=1e-9)
    N, L = r.resid.shape
    E = decoder_shape(model).head_dim
    for layer in range(N):
        for p in range(L):
            m = _diff(_scratch(model, pair.corrupted, resid=(layer, p, ins[layer][p]))[0], pair)
            assert float(r.resid[layer, p]) == pytest.approx((m - mr) / (mc - mr), abs=1e-9)
        for h in range(r.heads.shape[1]):
            z = outs[layer][:, h * E:(h + 1) * E]
            m = _diff(_scratch(model, pair.corrupted, head=(layer, h, z))[0], pair)
            assert float(r.heads[layer, h]) == pytest.approx((m - mr) / (mc - mr), abs=1e-9)
    # the positions where the prompts agree carry nothing at the embeddings (0 up to the batched pass's
    # rounding)
    same = (pair.clean[0] == pair.corrupted[0]).nonzero().flatten()
    assert len(same) == 7 and float(r.resid[0, same].abs().max()) < 1e-12


def test_every_position_of_a_layer_recovers_one_and_nothing_recovers_zero(tiny: tuple[Any, PairIds]) -> None:
    model, pair = tiny
    r = activation_patching(model, pair, parts=("heads",))
    from attncore.decoder.patching import clean_activations

    x, z, _ = clean_activations(model, pair.clean)
    N, L = x.shape[0], pair.length
    H = decoder_shape(model).heads
    for layer in range(N):
        got = patched_logits(model, pair.corrupted, resid={layer: (torch.ones(1, L, dtype=torch.bool), x[layer])})
        share = (_diff(got[0], pair) - r.corrupted_diff) / (r.clean_diff - r.corrupted_diff)
        assert share == pytest.approx(1.0, abs=1e-9)
    none = patched_logits(model, pair.corrupted, resid={0: (torch.zeros(1, L, dtype=torch.bool), x[0])})
    assert _diff(none[0], pair) == pytest.approx(r.corrupted_diff, abs=1e-12)
    no_head = patched_logits(model, pair.corrupted, heads={N - 1: (torch.zeros(1, H, dtype=torch.bool), z[-1])})
    assert _diff(no_head[0], pair) == pytest.approx(r.corrupted_diff, abs=1e-12)


def test_one_writing_head_carries_everything_by_construction() -> None:
    """Every o_proj zeroed but head 2 of the last layer, every MLP zeroed: that head's patch recovers exactly
    1, every other head's exactly 0, and every layer's residual reads the embeddings (equal rows)."""
    lm = tiny_decoder("llama", layers=3, heads=4, kv_heads=2, head_dim=8, seed=5)
    model = lm.model.double()
    E = 8
    with torch.no_grad():
        for i, blk in enumerate(model.model.layers):
            blk.mlp.down_proj.weight.zero_()
            keep = blk.self_attn.o_proj.weight[:, 2 * E:3 * E].clone()
            blk.self_attn.o_proj.weight.zero_()
            if i == 2:
                blk.self_attn.o_proj.weight[:, 2 * E:3 * E] = keep
    pair = pair_ids(lm.tokenizer, CLEAN, CORRUPT, "cat", "dog")
    r = activation_patching(model, pair)
    want = torch.zeros(3, 4, dtype=torch.float64)
    want[2, 2] = 1.0
    torch.testing.assert_close(r.heads, want, atol=1e-9, rtol=0)
    torch.testing.assert_close(r.resid[0], r.resid[1], atol=1e-9, rtol=0)
    torch.testing.assert_close(r.resid[1], r.resid[2], atol=1e-9, rtol=0)


def test_stop_returns_partial_results_and_resume_finishes_them(tiny: tuple[Any, PairIds]) -> None:
    model, pair = tiny
    full = activation_patching(model, pair)
    seen: list[tuple[int, int]] = []
    stop_after = 4
    part = activation_patching(model, pair, progress=lambda d, t, _r: seen.append((d, t)),
                               cancel=lambda: len(seen) >= stop_after)
    assert seen == [(1, 6), (2, 6), (3, 6), (4, 6)] and not part.complete
    assert (part.resid_done, part.heads_done) == (3, 1)
    torch.testing.assert_close(part.resid, full.resid)
    assert torch.isnan(part.heads[1:]).all() and torch.equal(part.heads[0], full.heads[0])
    done = activation_patching(model, pair, resume=part)
    assert done.complete
    torch.testing.assert_close(done.heads, full.heads)
    with pytest.raises(AttnInputError, match="other parts"):
        activation_patching(model, pair, parts=("heads",), resume=part)


def test_bad_pairs_get_plain_messages() -> None:
    tok = tiny_decoder("llama").tokenizer
    cases = [
        (("the cat sat", "the cat sat on", "cat", "dog"), "same count"),
        (("", "the cat", "cat", "dog"), "clean prompt is empty"),
        (("the cat", "   ", "cat", "dog"), "corrupted prompt is empty"),
        ((" the" * (MAX_PATCH_TOKENS + 1), "the cat", "cat", "dog"), "the limit is 64"),
        (("the cat" * 400, "the cat", "cat", "dog"), "characters"),
        (("the cat", "the dog", "cat dog", "dog"), "2 tokens, not 1"),
        (("the cat", "the dog", "", "dog"), "answer token is empty"),
        (("the cat", "the dog", "cat", "cat"), "the same token"),
        (("the", "the", "cat", "dog"), "at least 2"),
        ((None, "the dog", "cat", "dog"), "clean prompt is empty"),
    ]
    for args, words in cases:
        with pytest.raises(AttnInputError, match=words):
            pair_ids(tok, *args)


def test_no_gap_and_too_little_memory_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    lm = tiny_decoder("llama", layers=2, seed=1)
    same = pair_ids(lm.tokenizer, CLEAN, CLEAN, "cat", "dog")
    with pytest.raises(AttnInputError, match="nothing to recover"):
        activation_patching(lm.model, same)
    with pytest.raises(AttnInputError, match="parts"):
        activation_patching(lm.model, same, parts=("mlp",))
    shape = decoder_shape(lm.model)
    assert patch_bytes(shape, 24) > patch_bytes(shape, 12) > 0
    monkeypatch.setenv("ATTNCORE_MAX_BYTES", "1000")
    with pytest.raises(ResourceLimitError):
        activation_patching(lm.model, pair_ids(lm.tokenizer, CLEAN, CORRUPT, "cat", "dog"))


@pytest.fixture(scope="module")
def smollm2() -> LoadedModel:
    return load_model("smollm2")


@pytest.mark.slow
def test_built_in_pairs_on_smollm2(smollm2: LoadedModel) -> None:
    tok = smollm2.tokenizer
    ioi, capital = PAIRS
    lengths = []
    for p in PAIRS:
        ids = pair_ids(tok, p.clean, p.corrupted, p.answer, p.wrong)  # same counts, single-token answers
        lengths.append(ids.length)
    assert lengths == [14, 5]
    pair = pair_ids(tok, capital.clean, capital.corrupted, capital.answer, capital.wrong)
    r = activation_patching(smollm2.model, pair)
    # the difference the PAIRS comment quotes, clearly positive clean and negative corrupted
    assert r.clean_diff == pytest.approx(7.31, abs=0.05) and r.corrupted_diff == pytest.approx(-6.02, abs=0.05)
    # the prompts differ at position 3 only: at the embeddings nothing else can carry the answer (0 up to the
    # batched float32 pass's rounding), and that position's patch is the whole difference
    assert pair.clean[0].ne(pair.corrupted[0]).nonzero().flatten().tolist() == [3]
    assert float(r.resid[0, [0, 1, 2, 4]].abs().max()) < 1e-4
    assert float(r.resid[0, 3]) == pytest.approx(1.0, abs=1e-4)
    # the last layer's input at the last position carries nearly all of it: that layer still reads the other
    # positions (position 3 corrupted) through its attention, so not exactly 1 (measured 1.0003)
    assert float(r.resid[-1, -1]) == pytest.approx(1.0, abs=0.01)
    assert all(math.isfinite(float(v)) for v in r.heads.flatten())
    # against single prompts: the head with the largest share, patched alone, gives the same number
    layer, head = divmod(int(r.heads.argmax()), r.heads.shape[1])
    from attncore.decoder.patching import clean_activations

    _, z, _ = clean_activations(smollm2.model, pair.clean)
    where = torch.zeros(1, r.heads.shape[1], dtype=torch.bool)
    where[0, head] = True
    got = patched_logits(smollm2.model, pair.corrupted, heads={layer: (where, z[layer])})[0]
    m = float(got[pair.answer] - got[pair.wrong])
    assert (m - r.corrupted_diff) / (r.clean_diff - r.corrupted_diff) == pytest.approx(
        float(r.heads[layer, head]), abs=1e-3)
