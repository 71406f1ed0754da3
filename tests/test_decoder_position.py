"""attncore.decoder.position: masking the first token for every query is deleting it (tiny random Llama and
Qwen2 decoders and one short SmolLM2 case), where the sink goes, and Gu et al.'s inputs, against
transformers' own attention maps and hidden states."""

from __future__ import annotations

import pytest
import torch

from attncore.decoder.position import (
    GU_INPUTS,
    delete_first_token,
    gu_inputs,
    input_variants,
)
from attncore.decoder.probe import band_allowed, decoder_pass
from attncore.errors import AttnInputError
from tests.tiny_decoders import tiny_decoder

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module", params=["llama", "qwen2"])
def tiny(request: pytest.FixtureRequest) -> torch.nn.Module:
    return tiny_decoder(request.param, layers=2, heads=4, kv_heads=2, head_dim=8, seed=3).model


def _ids(L: int, vocab: int, seed: int = 1) -> torch.Tensor:
    return torch.randint(3, vocab, (1, L), generator=torch.Generator().manual_seed(seed))


def _reference(model: torch.nn.Module, ids: torch.Tensor) -> tuple[torch.Tensor, tuple, tuple]:
    """Per-token losses, attention maps and hidden states straight from transformers (no hooks)."""
    with torch.inference_mode():
        out = model(input_ids=ids, output_attentions=True, output_hidden_states=True, use_cache=False)
    nll = torch.nn.functional.cross_entropy(out.logits[0, :-1].float(), ids[0, 1:], reduction="none")
    return nll, out.attentions, out.hidden_states


def test_masking_the_first_key_for_every_query_is_deleting_the_first_token(tiny: torch.nn.Module) -> None:
    V = tiny.config.vocab_size
    ids = _ids(24, V)
    d = delete_first_token(tiny, ids, layer=1)
    ref_dense, _, _ = _reference(tiny, ids)
    ref_deleted, att, hid = _reference(tiny, ids[:, 1:])  # the text without its first token, from scratch
    torch.testing.assert_close(d.nll_dense, ref_dense, rtol=0, atol=1e-5)
    torch.testing.assert_close(d.nll_deleted, ref_deleted, rtol=0, atol=1e-5)
    # tokens 2..L-1: the masked pass predicts exactly what the deleted text predicts
    torch.testing.assert_close(d.nll_masked[1:], ref_deleted, rtol=0, atol=1e-5)
    assert d.equivalence_gap < 1e-5
    # and the mask is not a no-op: the dense losses differ
    assert float((d.nll_dense[1:] - ref_deleted).abs().max()) > 1e-3
    assert d.cost == pytest.approx(float((ref_deleted.double() - ref_dense[1:].double()).mean()), abs=1e-6)
    # the new first token's score: transformers' maps of the deleted text, column 0, mean over queries
    for n in range(2):
        torch.testing.assert_close(d.score_new_first[n], att[n][0, :, :, 0].mean(dim=-1), rtol=0, atol=1e-5)
    assert d.layer == 1


def test_where_the_sink_goes_reads_the_residual_after_the_chosen_layer(tiny: torch.nn.Module) -> None:
    V = tiny.config.vocab_size
    ids = _ids(20, V, seed=2)
    d = delete_first_token(tiny, ids, layer=0, top=3)
    _, _, hid = _reference(tiny, ids)
    _, _, hid_del = _reference(tiny, ids[:, 1:])
    # hidden_states[1] is the output of layer 0 (before the final norm, which only the last entry gets)
    first, new_first = hid[1][0, 0], hid_del[1][0, 0]
    assert d.norm_first == pytest.approx(float(first.norm()), rel=1e-5)
    assert d.norm_second == pytest.approx(float(hid[1][0, 1].norm()), rel=1e-5)
    assert d.norm_new_first == pytest.approx(float(new_first.norm()), rel=1e-5)
    assert d.norm_rest == pytest.approx(float(hid[1][0, 1:].norm(dim=-1).median()), rel=1e-5)
    assert d.dims_first.tolist() == first.abs().topk(3).indices.tolist()
    torch.testing.assert_close(d.values_first, first[d.dims_first], rtol=1e-5, atol=1e-5)
    assert d.dims_new_first.tolist() == new_first.abs().topk(3).indices.tolist()
    assert d.shared_dims == len(set(d.dims_first.tolist()) & set(d.dims_new_first.tolist()))
    a, b, c = d.sink_heads(0.0)
    assert (a, b, c) == (8, 8, 8)  # every score is positive: every head counts at eps 0


def test_deletion_needs_three_tokens_and_a_real_layer(tiny: torch.nn.Module) -> None:
    with pytest.raises(AttnInputError, match="at least 3 tokens"):
        delete_first_token(tiny, torch.tensor([[3, 4]]))
    with pytest.raises(AttnInputError, match="layer must lie in"):
        delete_first_token(tiny, _ids(8, tiny.config.vocab_size), layer=5)


def test_gu_inputs_are_seeded_and_exclude_the_special_tokens() -> None:
    nat = torch.arange(3, 19)[None]
    a = input_variants(nat, 40, seed=7, exclude=(0, 1, 2))
    b = input_variants(nat, 40, seed=7, exclude=(0, 1, 2))
    c = input_variants(nat, 40, seed=8, exclude=(0, 1, 2))
    assert list(a) == list(GU_INPUTS)
    assert torch.equal(a["natural text"], nat)
    assert torch.equal(a["random tokens"], b["random tokens"]) and not torch.equal(a["random tokens"],
                                                                                   c["random tokens"])
    assert int(a["random tokens"].min()) >= 3 and a["random tokens"].shape == (1, 16)
    rep = a["one token repeated"]
    assert rep.shape == (1, 16) and len(set(rep[0].tolist())) == 1 and int(rep[0, 0]) >= 3


def test_gu_rows_against_transformers_maps(tiny: torch.nn.Module) -> None:
    V = tiny.config.vocab_size
    nat = _ids(12, V, seed=4)
    rows = gu_inputs(tiny, nat, seed=5, prefix_id=1, prefix_text="<s>", exclude=(0, 1, 2))
    assert [(r.name, r.prefix) for r in rows] == [(n, "") for n in GU_INPUTS] + [(n, "<s>") for n in GU_INPUTS]
    variants = input_variants(nat, V, 5, (0, 1, 2))
    for r in rows:
        x = variants[r.name]
        if r.prefix:
            x = torch.cat([torch.tensor([[1]]), x[:, :11]], dim=1)
        _, att, _ = _reference(tiny, x)
        w = torch.stack([a[0] for a in att])  # (N, H, L, L)
        score = w[..., 0].mean(dim=-1)  # (N, H): every query sees key 0
        torch.testing.assert_close(r.first_score, score, rtol=0, atol=1e-5)
        top = (w[:, :, 1:].argmax(dim=-1) == 0).float().mean(dim=-1)  # (N, H)
        torch.testing.assert_close(r.top_first, top)
        for eps in (0.3, 0.8):
            assert r.share(eps) == pytest.approx(float((score > eps).double().mean()), abs=1e-12)
        assert r.top_share == pytest.approx(float((top > 0.5).double().mean()))
    assert all(r.length == 12 for r in rows)


def test_the_masked_pass_is_the_probe_mask(tiny: torch.nn.Module) -> None:
    """The first-token mask used here is the probe's band with key 0 removed for queries >= 1."""
    ids = _ids(10, tiny.config.vocab_size)
    allowed = band_allowed(10)
    allowed[1:, 0] = False
    p = decoder_pass(tiny, ids, allowed=allowed)
    assert p.first_weight is not None
    assert float(p.first_weight[..., 1:].abs().max()) == 0.0  # no query after the first sees key 0


@pytest.mark.slow
def test_smollm2_deleting_the_first_token_moves_the_sink() -> None:
    """The real model on 16 tokens: the mask equals the deletion, and the new first token becomes the sink
    (most sink heads move to it, its residual norm is massive, its largest dim is the original's)."""
    from attncore.decoder.text import shipped_text
    from attncore.models import load_model

    lm = load_model("smollm2")
    ids = lm.tokenizer(shipped_text(), return_tensors="pt")["input_ids"][:, :16]
    d = delete_first_token(lm.model, ids, layer=11)
    assert d.equivalence_gap < 1e-4
    before, second, after = d.sink_heads(0.3)
    assert before > 100 and second < 10 and after > 100
    assert d.norm_new_first > 50 * d.norm_second and d.norm_first > 50 * d.norm_rest
    assert int(d.dims_new_first[0]) == int(d.dims_first[0])


def test_massive_point_is_where_the_first_tokens_norm_passes_half_and_peaks(tiny: torch.nn.Module) -> None:
    from attncore.decoder.sinks import decoder_sinks
    from attncore.decoder.streaming import massive_point

    ids = _ids(16, tiny.config.vocab_size, seed=6)
    s = decoder_sinks(tiny, ids, [str(int(i)) for i in ids[0]])
    layer, dims = massive_point(tiny, ids)
    assert layer == int((s.first_norm > 0.5 * s.first_norm.max()).nonzero()[0]) - 1
    assert dims == tuple(int(d) for d in s.top_dims[s.peak_layer])


# ---------------------------------------------------------------------------- induction heads made causal


def test_head_ablation_equals_zeroing_the_heads_output_columns(tiny: torch.nn.Module) -> None:
    """Zeroing a head's slice before o_proj is the same as zeroing o_proj's columns for that head (no bias):
    a from-scratch copy of the model with those columns zeroed gives the same losses."""
    import copy

    from attncore.decoder.induction import head_ablation_nll

    ids = _ids(20, tiny.config.vocab_size, seed=9)
    heads = [(0, 1), (1, 0), (1, 3)]
    got = head_ablation_nll(tiny, ids, heads)
    ref_model = copy.deepcopy(tiny)
    E = tiny.config.hidden_size // tiny.config.num_attention_heads
    with torch.no_grad():
        for layer, h in heads:
            ref_model.model.layers[layer].self_attn.o_proj.weight[:, h * E:(h + 1) * E] = 0.0
    ref, _, _ = _reference(ref_model, ids)
    torch.testing.assert_close(got, ref, rtol=0, atol=1e-5)
    plain, _, _ = _reference(tiny, ids)
    torch.testing.assert_close(head_ablation_nll(tiny, ids, ()), plain, rtol=0, atol=1e-5)
    assert float((got - plain).abs().max()) > 1e-3
    with pytest.raises(AttnInputError, match="no head"):
        head_ablation_nll(tiny, ids, [(2, 0)])


def test_induction_ablation_top_sets_against_random_sets(tiny: torch.nn.Module) -> None:
    from attncore.decoder.induction import ablate_induction_heads, head_ablation_nll, induction

    ind = induction(tiny, 8, seed=1, exclude=(0, 1, 2))
    calls: list[tuple[int, int]] = []
    a = ablate_induction_heads(tiny, ind, sets=3, seed=4, shares=(0.1, 0.3),
                               progress=lambda d, t: calls.append((d, t)))
    assert a.sizes == (1, 2) and calls[-1] == (9, 9) and len(calls) == 9  # 8 heads: 10% and 30% -> 1, 2
    order = ind.score.flatten().argsort(descending=True)
    assert a.top[2] == tuple((int(i) // 4, int(i) % 4) for i in order[:2])
    assert a.top_loss[2] == pytest.approx(float(head_ablation_nll(tiny, ind.ids, a.top[2])[8:].double().mean()))
    assert a.base == pytest.approx(ind.loss_second, abs=1e-5) and a.first_copy == pytest.approx(ind.loss_first,
                                                                                              abs=1e-5)
    assert a.random_loss[1].shape == (3,)
    again = ablate_induction_heads(tiny, ind, sets=3, seed=4, shares=(0.1, 0.3))
    assert torch.equal(a.random_loss[2], again.random_loss[2])
    assert a.beaten_by(2) == int((a.random_loss[2] >= a.top_loss[2]).sum())


def test_head_ablation_holds_the_shared_model_while_its_hooks_are_on() -> None:
    """Another thread's pass of the same model waits until the ablation's hooks are gone, so it never runs
    them (the model is cached and shared by sessions)."""
    import threading

    from attncore.decoder.induction import head_ablation_nll
    from attncore.models.modules import exclusive

    lm = tiny_decoder("llama", layers=2, heads=4, kv_heads=2, head_dim=8, seed=3)
    ids = _ids(12, lm.model.config.vocab_size)
    plain, _, _ = _reference(lm.model, ids)
    seen: list[torch.Tensor] = []
    started = threading.Event()

    def other() -> None:
        started.set()
        with exclusive(lm.model):
            seen.append(_reference(lm.model, ids)[0])

    o_proj = lm.model.model.layers[0].self_attn.o_proj
    orig = o_proj.forward

    def slow_forward(x: torch.Tensor) -> torch.Tensor:  # the other thread starts while the hooks are on
        if not started.is_set():
            t.start()
            started.wait()
            t.join(timeout=0.5)  # an unblocked other pass would finish here, with the hooks on
        return orig(x)

    t = threading.Thread(target=other)
    o_proj.forward = slow_forward  # type: ignore[method-assign]
    try:
        head_ablation_nll(lm.model, ids, [(0, 1)])
    finally:
        o_proj.forward = orig  # type: ignore[method-assign]
    t.join(timeout=60)
    torch.testing.assert_close(seen[0], plain, rtol=0, atol=1e-6)
