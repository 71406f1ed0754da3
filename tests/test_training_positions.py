"""Learned absolute positions (``TrainConfig.positions = "learned"``, Guo et al.'s setting) beside rotary:
a rotary model's draws are the ones the code made before the option existed, a learned model's forward
pass equals a from-scratch computation, and positions the model never learned are refused."""

from __future__ import annotations

import hashlib
import math

import pytest
import torch
import torch.nn.functional as F

from attncore.errors import AttnInputError
from attncore.training import CharTransformer, TrainConfig
from attncore.training.config import n_params
from attncore.training.measure import stream_nll
from tests.training_utils import VOCAB

pytestmark = pytest.mark.usefixtures("one_torch_thread")

CFG = TrainConfig(n_layer=2, n_head=2, d_model=16, context=12, batch=2, steps=5, warmup=0, eval_every=5)

# sha256 (first 16 hex digits) of every parameter's name and float32 bytes of CharTransformer.create(CFG
# with this variant, VOCAB, seed 7), computed by the code of commit 2058971, before learned positions
# existed (the same torch): a rotary model must still draw exactly these numbers.
OLD_DRAWS = {"standard": "9e4f3bf8667cf8a3", "sink_logit": "2192eac185a991b0", "gated": "4da2a4b9e11a6a81"}


def fingerprint(m: torch.nn.Module) -> str:
    h = hashlib.sha256()
    for name, p in m.named_parameters():
        h.update(name.encode())
        h.update(p.detach().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


@pytest.mark.parametrize("variant", sorted(OLD_DRAWS))
def test_rotary_models_draw_what_they_drew_before_the_option(variant: str) -> None:
    m = CharTransformer.create(CFG.replace(variant=variant), VOCAB, torch.Generator().manual_seed(7))
    assert CFG.positions == "rotary" and not hasattr(m, "pos")
    assert fingerprint(m) == OLD_DRAWS[variant]
    # the check can fail: another seed draws other numbers
    other = CharTransformer.create(CFG.replace(variant=variant), VOCAB, torch.Generator().manual_seed(8))
    assert fingerprint(other) != OLD_DRAWS[variant]


def test_learned_model_draws_the_rotary_numbers_then_its_positions() -> None:
    g1, g2 = torch.Generator().manual_seed(7), torch.Generator().manual_seed(7)
    rot = CharTransformer.create(CFG, VOCAB, g1)
    lrn = CharTransformer.create(CFG.replace(positions="learned"), VOCAB, g2)
    rot_params = dict(rot.named_parameters())
    for name, p in lrn.named_parameters():
        if name != "pos.weight":
            assert torch.equal(p, rot_params[name]), name
    assert lrn.pos.weight.shape == (CFG.context, CFG.d_model)
    # drawn last, from the same stream: the next N(0, 0.02²) draws after the rotary model's
    want = torch.empty(CFG.context, CFG.d_model).normal_(0.0, 0.02, generator=g1)
    assert torch.equal(lrn.pos.weight.detach(), want)
    assert sum(p.numel() for p in lrn.parameters()) == n_params(lrn.config, len(VOCAB))
    assert n_params(lrn.config, len(VOCAB)) - n_params(CFG, len(VOCAB)) == CFG.context * CFG.d_model


def scratch_forward(m: CharTransformer, idx: torch.Tensor) -> torch.Tensor:
    """Logits (B, T, V) in float64 from the weights: token + position embedding, pre-LayerNorm blocks with
    plain causal softmax attention (no rotation), tied output."""
    c = m.config
    D, H, E = c.d_model, c.n_head, c.d_head
    B, T = idx.shape

    def ln(x: torch.Tensor, mod: torch.nn.LayerNorm) -> torch.Tensor:
        mu, var = x.mean(-1, keepdim=True), x.var(-1, unbiased=False, keepdim=True)
        return (x - mu) / torch.sqrt(var + mod.eps) * mod.weight.double() + mod.bias.double()

    x = m.tok.weight.double()[idx] + m.pos.weight.double()[torch.arange(T)][None]  # (B, T, D)
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    for blk in m.blocks:
        h = ln(x, blk.ln1)
        qkv = h @ blk.attn.qkv.weight.double().t()  # (B, T, 3D)
        q, k, v = (qkv[..., i * D:(i + 1) * D].reshape(B, T, H, E).transpose(1, 2) for i in range(3))
        s = (q @ k.transpose(-2, -1) / math.sqrt(E)).masked_fill(~causal, float("-inf"))  # (B, H, T, T)
        o = (torch.softmax(s, -1) @ v).transpose(1, 2).reshape(B, T, D)
        x = x + o @ blk.attn.proj.weight.double().t()
        h2 = ln(x, blk.ln2)
        f = F.gelu(h2 @ blk.fc.weight.double().t() + blk.fc.bias.double())
        x = x + f @ blk.out.weight.double().t() + blk.out.bias.double()
    return ln(x, m.ln_f) @ m.tok.weight.double().t()


def test_learned_forward_equals_a_from_scratch_computation() -> None:
    m = CharTransformer.create(CFG.replace(positions="learned"), VOCAB, torch.Generator().manual_seed(3))
    with torch.no_grad():
        m.pos.weight.mul_(40.0)  # positions that matter: 0.02-sized rows would hardly move the logits
        for blk in m.blocks:
            blk.attn.qkv.weight.mul_(15.0)
    m.eval()
    idx = torch.randint(0, len(VOCAB), (2, CFG.context), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        got, _ = m(idx)
        want = scratch_forward(m, idx)
        torch.testing.assert_close(got.double(), want, rtol=1e-4, atol=1e-4)
        # the position embedding is in the computation: shuffle its rows and the logits move
        m.pos.weight.copy_(m.pos.weight.flip(0))
        moved, _ = m(idx)
    assert float((moved - got).abs().max()) > 1e-2


def test_positions_beyond_the_context_and_the_stream_test_are_refused() -> None:
    m = CharTransformer.create(CFG.replace(positions="learned"), VOCAB, torch.Generator().manual_seed(3))
    ok = torch.zeros(1, CFG.context, dtype=torch.long)
    with torch.no_grad():
        m(ok)
        with pytest.raises(AttnInputError, match="learned positions 0..11"):
            m(torch.zeros(1, CFG.context + 1, dtype=torch.long))
        with pytest.raises(AttnInputError, match="learned positions"):
            m(ok[:, :3], positions=torch.tensor([0, 5, 12]))
        with pytest.raises(AttnInputError, match="absolute positions"):
            stream_nll(m, torch.zeros(20, dtype=torch.long), "window", 4)
    rot = CharTransformer.create(CFG, VOCAB, torch.Generator().manual_seed(3))
    with torch.no_grad():  # a rotary model runs past its context
        assert rot(torch.zeros(1, CFG.context + 5, dtype=torch.long))[0].shape[1] == CFG.context + 5
    with pytest.raises(AttnInputError, match="positions must be one of"):
        CFG.replace(positions="alibi")
