"""Grouped-query capture, long-text summaries, the next-token distribution and generation, on tiny RANDOM
Llama and Qwen2 decoders (built in memory, seeded): every number against a from-scratch computation."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch

from attncore.errors import AttnInputError, ResourceLimitError
from attncore.models import LoadedModel, run_text
from attncore.models.generation import MAX_NEW_TOKENS, generate, next_distribution, next_logits
from attncore.models.tokens import display_tokens, tokenizer_kind
from attncore.qkv import capture
from tests.tiny_decoders import tiny_decoder

TEXT = "the cat sat on the mat . the dog slept"


@pytest.fixture(scope="module", params=["llama", "qwen2"])
def lm(request: pytest.FixtureRequest) -> LoadedModel:
    return tiny_decoder(request.param, layers=2, heads=6, kv_heads=2, head_dim=8)


def _from_scratch(lm: LoadedModel, text: str) -> dict[str, list[torch.Tensor]]:
    """Per layer: q, k (rotary applied by hand), v per query head (head h reads kv head h // groups), the
    causal softmax weights and each head's output, from the layer's weights and its hidden-state input."""
    ids = lm.tokenizer(text, return_tensors="pt")["input_ids"]
    with torch.inference_mode():
        hidden = lm.model(ids, output_hidden_states=True).hidden_states
    cfg = lm.model.config
    H, Hkv = lm.heads, lm.kv_heads
    E = cfg.hidden_size // H
    L = ids.shape[1]
    theta = float(cfg.rope_parameters["rope_theta"])
    inv = 1.0 / theta ** (torch.arange(0, E, 2, dtype=torch.float64) / E)
    ang = torch.arange(L, dtype=torch.float64)[:, None] * inv[None]  # (L, E/2)
    cos, sin = torch.cat([ang.cos()] * 2, -1), torch.cat([ang.sin()] * 2, -1)  # (L, E)

    def rot(t: torch.Tensor) -> torch.Tensor:
        return t * cos + torch.cat([-t[..., E // 2:], t[..., : E // 2]], -1) * sin

    def lin(x: torch.Tensor, m: torch.nn.Linear) -> torch.Tensor:
        y = x @ m.weight.double().T
        return y + m.bias.double() if m.bias is not None else y

    out: dict[str, list[torch.Tensor]] = {"q": [], "k": [], "v": [], "w": [], "o": []}
    group = torch.arange(H) // (H // Hkv)
    for layer, blk in enumerate(lm.model.model.layers):
        sa = blk.self_attn
        with torch.inference_mode():
            x = blk.input_layernorm(hidden[layer])[0].double()  # (L, D)
            q = rot(lin(x, sa.q_proj).view(L, H, E).transpose(0, 1))  # (H, L, E)
            k = rot(lin(x, sa.k_proj).view(L, Hkv, E).transpose(0, 1))[group]  # (H, L, E)
            v = lin(x, sa.v_proj).view(L, Hkv, E).transpose(0, 1)[group]
            s = (q @ k.transpose(-1, -2)) / E**0.5
            w = torch.softmax(s.masked_fill(~torch.ones(L, L, dtype=torch.bool).tril(), float("-inf")), -1)
        for name, t in zip("qkvwo", (q, k, v, w, w @ v), strict=True):
            out[name].append(t)
    return out


def test_grouped_query_capture_equals_a_from_scratch_computation(lm: LoadedModel) -> None:
    hv = capture(lm, TEXT)
    att = run_text(lm, TEXT)
    ref = _from_scratch(lm, TEXT)
    assert (hv.kv_heads, hv.groups, [hv.group(h) for h in range(6)]) == (2, 3, [0, 0, 0, 1, 1, 1])
    assert hv.q.shape == hv.k.shape == hv.v.shape == hv.output.shape == (2, 6, len(att.tokens), 8)
    for layer in range(lm.layers):
        for name, got in (("q", hv.q), ("k", hv.k), ("v", hv.v), ("o", hv.output)):
            np.testing.assert_allclose(got[layer].double().numpy(), ref[name][layer].numpy(), atol=1e-5,
                                       err_msg=f"{name} layer {layer}")
        np.testing.assert_allclose(att.attentions[layer].double().numpy(), ref["w"][layer].numpy(), atol=1e-5)
        np.testing.assert_allclose(hv.weights(layer).numpy(), ref["w"][layer].numpy(), atol=1e-5)
        # heads of one group share k and v; the two groups differ
        assert torch.equal(hv.k[layer, 0], hv.k[layer, 2]) and torch.equal(hv.v[layer, 3], hv.v[layer, 5])
        assert not torch.allclose(hv.k[layer, 0], hv.k[layer, 3])


def test_summaries_of_every_head_equal_their_definitions_and_long_texts_keep_one_layer(lm: LoadedModel) -> None:
    text = " ".join([TEXT] * 5)
    full = run_text(lm, text)
    assert full.all_maps and full.kept is None
    A = full.attentions.double()  # (N, H, L, L)
    L = A.shape[-1]
    s = full.summary
    np.testing.assert_allclose(s.first.double(), A[..., 0].mean(-1), atol=1e-6)
    np.testing.assert_allclose(s.previous.double(), A[..., 1:, :].diagonal(dim1=-2, dim2=-1).mean(-1), atol=1e-6)
    ent = -(A * torch.where(A > 0, A.log(), torch.zeros_like(A))).sum(-1).mean(-1)
    np.testing.assert_allclose(s.entropy.double(), ent, atol=1e-5)
    np.testing.assert_allclose(s.max_weight.double(), A.amax(-1).mean(-1), atol=1e-6)
    T = s.thumbs.shape[-1]
    assert min(24, L) == T
    # a thumbnail cell is the mean of its block (adaptive pooling blocks: floor(i L / T) .. ceil((i+1) L / T))
    i0, i1 = (3 * L) // T, -(-(4 * L) // T)
    np.testing.assert_allclose(float(s.thumbs[1, 2, 3, 3]), float(A[1, 2, i0:i1, i0:i1].mean()), atol=1e-6)
    # past the map limit: the same summaries, the shown layer's maps only, and the rest refused plainly
    short = replace(lm, map_limit=L - 1)
    part = run_text(short, text, layers=(1,))
    assert part.kept == (1,) and part.attentions.shape == (1, 6, L, L) and not part.all_maps
    torch.testing.assert_close(part.maps(1), full.maps(1))
    for f in ("first", "previous", "entropy", "max_weight", "thumbs"):
        torch.testing.assert_close(getattr(part.summary, f), getattr(s, f))
    with pytest.raises(AttnInputError, match="layer 0's maps were not kept"):
        part.maps(0)


def test_next_token_distribution_is_the_softmax_of_the_last_logits(lm: LoadedModel) -> None:
    ids = lm.tokenizer("the cat sat", return_tensors="pt")["input_ids"]
    with torch.inference_mode():
        logits = lm.model(ids).logits[0, -1].double()
    got = next_logits(lm, "the cat sat")
    np.testing.assert_allclose(got.double().numpy(), logits.numpy(), atol=1e-5)
    for t in (0.5, 1.0, 2.0):
        p = torch.softmax(logits / t, -1)
        top = next_distribution(lm, got, t, 5)
        want = sorted(range(p.numel()), key=lambda i: (-float(p[i]), i))[:5]
        kind = tokenizer_kind(lm.tokenizer)
        assert [name for name, _ in top] == [display_tokens([t], kind)[0]
                                             for t in lm.tokenizer.convert_ids_to_tokens(want)]
        np.testing.assert_allclose([q for _, q in top], [float(p[i]) for i in want], atol=1e-6)
    assert next_distribution(lm, got, 0.5, 1)[0][1] > next_distribution(lm, got, 2.0, 1)[0][1]
    with pytest.raises(AttnInputError, match="temperature"):
        next_distribution(lm, got, 0.0, 3)


def test_generation_equals_full_passes_and_is_deterministic_by_seed(lm: LoadedModel) -> None:
    g = generate(lm, "the cat sat on", 6, greedy=True)
    P, T = len(g.prompt), len(g.new)
    assert T == 6 and g.attentions.shape == (T, lm.layers, lm.heads, P + T - 1)
    ids = lm.tokenizer("the cat sat on", return_tensors="pt")["input_ids"][0].tolist() + list(g.new_ids)
    with torch.inference_mode():
        out = lm.model(torch.tensor([ids]), output_attentions=True)
    for t in range(T):
        assert g.new_ids[t] == int(out.logits[0, P - 1 + t].argmax())  # greedy = argmax of a full pass
        full_row = torch.stack([a[0, :, P - 1 + t, : P + t] for a in out.attentions])  # (N, H, P + t)
        torch.testing.assert_close(g.attentions[t, :, :, : P + t], full_row, atol=1e-5, rtol=0)
        assert float(g.attentions[t, :, :, P + t:].abs().sum()) == 0.0
    # the tokens shown are the display form of the tokenizer's own, prompt and continuation read together
    assert g.raw == tuple(lm.tokenizer.convert_ids_to_tokens(ids))
    assert g.tokens == display_tokens(g.raw, tokenizer_kind(lm.tokenizer))
    a = generate(lm, "the cat sat on", 8, greedy=False, temperature=2.0, seed=3)
    b = generate(lm, "the cat sat on", 8, greedy=False, temperature=2.0, seed=3)
    c = generate(lm, "the cat sat on", 8, greedy=False, temperature=2.0, seed=4)
    assert a.new_ids == b.new_ids and torch.equal(a.attentions, b.attentions)
    assert a.new_ids != c.new_ids
    np.testing.assert_allclose(a.attentions.sum(-1).numpy(), 1.0, atol=1e-5)


def test_bad_requests_get_plain_messages_and_memory_is_refused_before_running(
        lm: LoadedModel, monkeypatch: pytest.MonkeyPatch) -> None:
    for n in (0, MAX_NEW_TOKENS + 1):
        with pytest.raises(AttnInputError, match="new tokens"):
            generate(lm, TEXT, n)
    with pytest.raises(AttnInputError, match="temperature"):
        generate(lm, TEXT, 3, greedy=False, temperature=50.0)
    with pytest.raises(AttnInputError, match="type some text"):
        generate(lm, "   ", 3)
    with pytest.raises(AttnInputError, match="not a causal language model"):
        generate(replace(lm, causal=False), TEXT, 3)
    monkeypatch.setenv("ATTNCORE_MAX_BYTES", "1K")
    with pytest.raises(ResourceLimitError, match="one pass of"):
        run_text(lm, TEXT)
    with pytest.raises(ResourceLimitError, match="generating 3 tokens"):
        generate(lm, TEXT, 3)
    with pytest.raises(ResourceLimitError):
        capture(lm, TEXT)
