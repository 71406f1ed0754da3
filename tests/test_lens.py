"""Logit lens and direct logit attribution (attncore.decoder.lens) against from-scratch computations on tiny
RANDOM Llama/Qwen2 decoders (seeded, float64), a case known by construction (every head's o_proj but one
zeroed, every MLP zeroed), flags of massive activations made by injecting one, bad input, and one short
real SmolLM2 pass."""

from __future__ import annotations

import types
from typing import Any

import pytest
import torch

from attncore.decoder.lens import MASSIVE_RATIO, lens_bytes, logit_lens, massive_positions, point_label
from attncore.decoder.probe import decoder_shape
from attncore.errors import AttnInputError, ResourceLimitError
from attncore.models import LoadedModel, load_model
from tests.tiny_decoders import tiny_decoder

TEXT = "the cat sat on the mat . the dog slept and a bird"


def _rms_in_input_dtype(self: Any, x: torch.Tensor) -> torch.Tensor:
    """transformers' RMSNorm, without its cast to float32: float64 all through."""
    return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.variance_epsilon))


def _tiny(family: str, layers: int = 3) -> tuple[Any, torch.Tensor]:
    """A tiny random decoder in float64 (its RMSNorms too, which transformers computes in float32)."""
    lm = tiny_decoder(family, layers=layers, seed=1)
    model = lm.model.double()
    for m in model.modules():
        if type(m).__name__.endswith("RMSNorm"):
            m.forward = types.MethodType(_rms_in_input_dtype, m)
    with torch.no_grad():  # random norm weights, so the frozen scale's weight is not all ones
        g = torch.Generator().manual_seed(7)
        model.model.norm.weight.copy_(1.0 + 0.5 * torch.rand(model.config.hidden_size, generator=g))
    ids = lm.tokenizer(TEXT, return_tensors="pt")["input_ids"]
    return model, ids


def _reference(model: Any, ids: torch.Tensor) -> tuple[list[torch.Tensor], torch.Tensor, torch.Tensor]:
    """Every residual (P of (L, D)): output_hidden_states up to layer N - 2, the final norm's input last;
    and the model's logits (L, V) and its final norm's input (L, D), from a plain pass with torch's SDPA
    (transformers' eager attention takes its softmax in float32)."""
    model.config._attn_implementation = "sdpa"
    got: dict[str, torch.Tensor] = {}
    h = model.model.norm.register_forward_hook(lambda _m, a, _o: got.__setitem__("x", a[0][0].detach()))
    try:
        with torch.no_grad():
            out = model(input_ids=ids, output_hidden_states=True)
    finally:
        h.remove()
    hs = [t[0] for t in out.hidden_states[:-1]] + [got["x"]]  # the last hidden state is already normed
    return hs, out.logits[0], got["x"]


@pytest.mark.parametrize("family", ["llama", "qwen2"])
@pytest.mark.parametrize("position", [3, None])
def test_lens_equals_norm_and_unembedding_of_the_hidden_states(family: str, position: int | None) -> None:
    model, ids = _tiny(family)
    L = ids.shape[1]
    p = L - 1 if position is None else position
    r = logit_lens(model, ids, position, top=5)
    hs, logits, _ = _reference(model, ids)
    assert len(hs) == r.top_ids.shape[0] == model.config.num_hidden_layers + 1
    assert r.points == ("emb", "0", "1", "2") and point_label(0) == "emb"
    for i, h in enumerate(hs):
        ref = model.lm_head(model.model.norm(h[p])).detach()  # (V,)
        prob = ref.softmax(-1)
        order = prob.argsort(descending=True)
        torch.testing.assert_close(r.top_probs[i].double(), prob[order[:5]], rtol=1e-6, atol=1e-7)
        assert r.top_ids[i].tolist() == order[:5].tolist()
        assert int(r.target_rank[i]) == int((ref > ref[r.target]).sum())
        assert float(r.target_prob[i]) == pytest.approx(float(prob[r.target]), rel=1e-6)
    # the last point is the model's own next-token distribution
    assert r.target == int(logits[p].argmax()) and int(r.target_rank[-1]) == 0
    torch.testing.assert_close(r.top_probs[-1].double(), logits[p].softmax(-1).topk(5).values, rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(r.residual_norm.double(), torch.stack([h.norm(dim=-1) for h in hs]).float().double())


@pytest.mark.parametrize("family", ["llama", "qwen2"])
def test_direct_attribution_sums_to_the_logit_and_each_layer_to_its_residual_step(family: str) -> None:
    model, ids = _tiny(family)
    other = 9
    r = logit_lens(model, ids, contrast=other)
    hs, logits, x = _reference(model, ids)
    p = r.position
    for a, tok in ((r.attribution, r.target), (r.contrast, other)):
        assert a.token == tok
        assert a.logit == pytest.approx(float(logits[p, tok]), rel=1e-12)
        assert a.total == pytest.approx(a.logit, rel=1e-10, abs=1e-12)
        # from scratch: the frozen scale and each layer's step of the residual stream
        s = torch.rsqrt(x[p].pow(2).mean() + model.model.norm.variance_epsilon)
        u = (model.lm_head.weight[tok] * model.model.norm.weight * s).detach()  # (D,)
        assert r.scale == pytest.approx(float(s), rel=1e-12)
        assert a.embedding == pytest.approx(float(u @ hs[0][p]), rel=1e-10)
        steps = torch.stack([u @ (hs[i + 1][p] - hs[i][p]) for i in range(len(hs) - 1)]).detach()
        torch.testing.assert_close(a.layers, steps, rtol=1e-9, atol=1e-12)
        assert bool((a.attn_bias == 0).all())  # Llama and Qwen2 have no o_proj bias
    diff = r.difference()
    assert float(diff.sum() + r.attribution.embedding - r.contrast.embedding + (r.attribution.mlps
                 - r.contrast.mlps).sum()) == pytest.approx(float(logits[p, r.target] - logits[p, other]), rel=1e-9)


def test_one_live_head_gets_the_whole_attention_attribution() -> None:
    """Known by construction: every o_proj column but head (1, 2)'s zeroed and every MLP's down_proj zeroed,
    so the final residual is the embedding plus that head's output: its contribution is u . (x - e), every
    other head's and MLP's exactly 0."""
    model, ids = _tiny("llama")
    E = model.config.hidden_size // model.config.num_attention_heads
    with torch.no_grad():
        for i, blk in enumerate(model.model.layers):
            keep = blk.self_attn.o_proj.weight[:, 2 * E:3 * E].clone()
            blk.self_attn.o_proj.weight.zero_()
            if i == 1:
                blk.self_attn.o_proj.weight[:, 2 * E:3 * E] = keep
            blk.mlp.down_proj.weight.zero_()
    r = logit_lens(model, ids)
    hs, logits, x = _reference(model, ids)
    p = r.position
    a = r.attribution
    s = torch.rsqrt(x[p].pow(2).mean() + model.model.norm.variance_epsilon)
    u = (model.lm_head.weight[r.target] * model.model.norm.weight * s).detach()
    live = float(u @ (x[p] - hs[0][p]))
    assert abs(live) > 1e-3
    assert float(a.heads[1, 2]) == pytest.approx(live, rel=1e-10)
    mask = torch.ones_like(a.heads, dtype=torch.bool)
    mask[1, 2] = False
    assert bool((a.heads[mask] == 0).all()) and bool((a.mlps == 0).all())
    assert a.embedding + float(a.heads[1, 2]) == pytest.approx(float(logits[p, r.target]), rel=1e-10)


def test_an_o_proj_bias_is_its_own_term() -> None:
    model, ids = _tiny("llama")
    D = model.config.hidden_size
    g = torch.Generator().manual_seed(3)
    for blk in model.model.layers:
        blk.self_attn.o_proj.bias = torch.nn.Parameter(torch.randn(D, generator=g, dtype=torch.float64))
    r = logit_lens(model, ids)
    _, logits, x = _reference(model, ids)
    a = r.attribution
    s = torch.rsqrt(x[-1].pow(2).mean() + model.model.norm.variance_epsilon)
    u = (model.lm_head.weight[r.target] * model.model.norm.weight * s).detach()
    torch.testing.assert_close(a.attn_bias, torch.stack([u @ b.self_attn.o_proj.bias for b in model.model.layers])
                               .detach())
    assert a.total == pytest.approx(float(logits[-1, r.target]), rel=1e-10)


def test_massive_activations_are_flagged_from_the_measured_norms() -> None:
    model, ids = _tiny("qwen2")
    plain = logit_lens(model, ids, 0)
    assert not bool(plain.flagged.any()) and plain.meaningful
    r0 = float(plain.norm_ratio[0])
    assert plain.note().startswith(f"Position 0's largest residual norm relative to the median position is "
                                   f"{r0:,.2f}x")
    assert f"under the {MASSIVE_RATIO:g}x" in plain.note()

    def inject(_m: Any, _a: Any, out: Any) -> Any:  # a massive activation in dim 3 of token 0 after layer 1
        h = out[0] if isinstance(out, tuple) else out
        h = h.clone()
        h[0, 0, 3] += 500.0
        return (h, *out[1:]) if isinstance(out, tuple) else h

    handle = model.model.layers[1].register_forward_hook(inject)
    try:
        r = logit_lens(model, ids, 0)
    finally:
        handle.remove()
    assert r.flagged.tolist() == [True] + [False] * (ids.shape[1] - 1) and not r.meaningful
    norms = r.residual_norm[2].double()
    ratio = float(norms[0] / norms.median())
    assert ratio > 100 and float(r.norm_ratio[0]) == pytest.approx(ratio, rel=1e-6)
    assert int(r.peak[0]) in (2, 3)  # after layer 1 (point 2) or carried on to layer 2
    pk = int(r.peak[0])
    note = r.note()
    assert note.startswith(f"Position 0's lens is not a prediction: its residual norm after layer {pk - 1} is "
                           f"{float(r.residual_norm[pk, 0]):,.1f}, {float(r.norm_ratio[0]):,.1f}x the median")
    assert "massive activations" in note and r.note(5).endswith("are flagged.")


def test_massive_positions_rule() -> None:
    norms = torch.tensor([[1.0, 1.0, 2.0, 1.0], [50.0, 2.0, 2.0, 2.0]])
    ratio, peak, flagged = massive_positions(norms, ratio=10.0)
    torch.testing.assert_close(ratio, torch.tensor([25.0, 1.0, 2.0, 1.0], dtype=torch.float64))
    assert peak.tolist() == [1, 0, 0, 0] and flagged.tolist() == [True, False, False, False]
    assert massive_positions(norms, ratio=30.0)[2].tolist() == [False] * 4
    with pytest.raises(AttnInputError):
        massive_positions(norms, ratio=1.0)


def test_bad_requests_are_plain_messages(monkeypatch: pytest.MonkeyPatch) -> None:
    model, ids = _tiny("llama", layers=2)
    V = model.config.vocab_size
    for kw in (dict(position=ids.shape[1]), dict(position=-1), dict(position=1.5), dict(top=0), dict(top=51),
               dict(contrast=V), dict(contrast=-1)):
        with pytest.raises(AttnInputError):
            logit_lens(model, ids, **kw)  # type: ignore[arg-type]
    with pytest.raises(AttnInputError):
        logit_lens(model, ids[:, :1])
    r = logit_lens(model, ids)
    assert r.contrast.token == int(r.top_ids[-1, 1])  # the default second token: the runner-up
    with pytest.raises(AttnInputError):
        r.note(ids.shape[1])
    need = lens_bytes(decoder_shape(model), ids.shape[1])
    monkeypatch.setenv("ATTNCORE_MAX_BYTES", str(int(need) - 1))
    with pytest.raises(ResourceLimitError):
        logit_lens(model, ids)
    monkeypatch.setenv("ATTNCORE_MAX_BYTES", str(int(need) + 1))
    logit_lens(model, ids)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="peak memory is measured with CUDA's allocator")
def test_the_memory_estimate_covers_the_measured_peak() -> None:
    lm = tiny_decoder("llama", layers=4, heads=4, kv_heads=2, head_dim=16)
    model = lm.model.cuda()
    ids = torch.randint(3, model.config.vocab_size, (1, 512), generator=torch.Generator().manual_seed(0))
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    logit_lens(model, ids)
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - base
    est = lens_bytes(decoder_shape(model), 512)
    assert peak <= est, (peak, est)


@pytest.fixture(scope="session")
def smollm2() -> LoadedModel:
    return load_model("smollm2")


def test_real_smollm2_lens_and_attribution(smollm2: LoadedModel) -> None:
    tok = smollm2.tokenizer
    ids = tok("The capital of France is", return_tensors="pt")["input_ids"]
    london = tok(" London")["input_ids"][0]
    r = logit_lens(smollm2.model, ids, contrast=london)
    assert tok.convert_ids_to_tokens([r.target]) == ["ĠParis"] and r.top_ids.shape == (31, 10)
    assert int(r.target_rank[-1]) == 0 and int(r.target_rank[0]) > 100  # the embedding does not know Paris
    with torch.inference_mode():
        logits = smollm2.model(input_ids=ids).logits[0, -1]
    assert r.attribution.logit == pytest.approx(float(logits[r.target]), rel=1e-5)
    for a in (r.attribution, r.contrast):
        assert abs(a.total - a.logit) <= 1e-4 * abs(a.logit)
    assert r.attribution.logit > r.contrast.logit
    # the sink: token 0's residual is massive (Sun et al. 2024), the last token's is not
    assert bool(r.flagged[0]) and not bool(r.flagged[1:].any()) and r.meaningful
    assert float(r.norm_ratio[0]) > 50 and "is not a prediction" in r.note(0)
