"""attncore.training's model: every attention variant against a from-scratch computation,
fused vs materialised paths, save/load, and the inspection helpers."""

from __future__ import annotations

import math
import pickle

import pytest
import torch

from attncore.errors import AttnInputError
from attncore.training import (
    VARIANTS,
    CharTransformer,
    TrainConfig,
    attention_maps,
    generate,
    load_model,
    next_char_distribution,
    save_model,
)
from tests.training_utils import VOCAB

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def make_model(variant: str, *, n_layer: int = 2, n_head: int = 2, d_model: int = 16, context: int = 12,
               seed: int = 0) -> CharTransformer:
    """A model whose attention is far from uniform: q, k weights x 15, random per-head scalars."""
    cfg = TrainConfig(variant=variant, n_layer=n_layer, n_head=n_head, d_model=d_model, context=context,
                      batch=2, steps=5, warmup=0, eval_every=5)
    g = torch.Generator().manual_seed(seed)
    m = CharTransformer.create(cfg, VOCAB, g)
    with torch.no_grad():
        for blk in m.blocks:
            blk.attn.qkv.weight[: 2 * d_model].mul_(15.0)
            blk.attn.qkv.weight[2 * d_model :].mul_(20.0)
            blk.attn.proj.weight.mul_(10.0)
            if variant == "ssmax":
                blk.attn.ssmax_s.copy_(torch.rand(n_head, generator=g) + 0.3)
            if variant == "sink_logit":
                blk.attn.sink.copy_(torch.randn(n_head, generator=g) * 2.0)
            if variant in ("gated", "gated_headwise", "gated_control"):
                blk.attn.gate.weight.mul_(50.0)
    return m.eval()


def scratch_attention(m: CharTransformer, layer: int, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The variant's formula written out in float64: x (B, T, D) normalised input of the layer
    -> (projected output (B, T, D), weights (B, H, T, T))."""
    attn = m.blocks[layer].attn
    cfg = m.config
    B, T, D = x.shape
    H, E = cfg.n_head, cfg.d_head
    xd = x.double()
    qkv = xd @ attn.qkv.weight.double().t()  # (B, T, 3D)

    def heads(z: torch.Tensor) -> torch.Tensor:
        return z.reshape(B, T, H, E).permute(0, 2, 1, 3)  # (B, H, T, E)

    q, k, v = heads(qkv[..., :D]), heads(qkv[..., D : 2 * D]), heads(qkv[..., 2 * D :])

    half = E // 2
    theta = torch.tensor([[p * 10000.0 ** (-2.0 * j / E) for j in range(half)] for p in range(T)],
                         dtype=torch.float64)  # (T, E/2): position p, pair (j, j + E/2)

    def rope(z: torch.Tensor) -> torch.Tensor:
        a, b = z[..., :half], z[..., half:]
        return torch.cat([a * theta.cos() - b * theta.sin(), a * theta.sin() + b * theta.cos()], dim=-1)

    q, k = rope(q), rope(k)
    raw = q @ k.transpose(-2, -1)  # (B, H, T, T)
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    n = torch.arange(1, T + 1, dtype=torch.float64)[:, None]  # keys row i sees
    v_name = cfg.variant
    if v_name == "unscaled":
        logits = raw
    elif v_name == "ssmax":
        s = attn.ssmax_s.double().view(H, 1, 1)
        logits = raw / math.sqrt(E) * s * torch.log(n)
    else:
        logits = raw / math.sqrt(E)
    e = torch.where(causal, torch.exp(logits), torch.zeros_like(logits))
    denom = e.sum(-1, keepdim=True)
    if v_name == "softmax1":
        denom = denom + 1.0
    if v_name == "sink_logit":
        # append one column of logit b_h to the visible scores, softmax, drop the column
        b = attn.sink.double().view(1, H, 1, 1).expand(B, H, T, 1)
        full = torch.cat([logits.masked_fill(~causal, float("-inf")), b], dim=-1)
        w = torch.softmax(full, dim=-1)[..., :-1]
    elif v_name == "sigmoid":  # σ(x - log n), n = keys the row sees
        w = torch.where(causal, torch.sigmoid(logits - torch.log(n)), torch.zeros_like(logits))
    elif v_name == "relu":  # max(x, 0) / n (Guo et al.: over the 1-based query position)
        w = torch.where(causal, logits.clamp_min(0.0), torch.zeros_like(logits)) / n
    elif v_name == "softpick":  # ReLU(e^x - 1) / (Σ_visible |e^x - 1| + 1e-8), the safe form's m = row max
        m = logits.masked_fill(~causal, float("-inf")).amax(-1, keepdim=True)
        d = torch.where(causal, torch.exp(logits - m) - torch.exp(-m), torch.zeros_like(logits))
        w = d.clamp_min(0.0) / (d.abs().sum(-1, keepdim=True) + 1e-8)
    else:
        w = e / denom
    o = w @ v  # (B, H, T, E)
    if v_name == "fully_scaled":
        o = o * math.sqrt(T / math.e)
    if v_name == "fully_scaled_rows":
        o = o * torch.sqrt(n / math.e)
    o = o.permute(0, 2, 1, 3).reshape(B, T, D)
    if v_name == "gated":
        o = o * torch.sigmoid(xd @ attn.gate.weight.double().t())
    if v_name == "gated_control":  # Qiu et al.'s non-sparse control gate
        o = o * (0.5 + 0.5 * torch.sigmoid(xd @ attn.gate.weight.double().t()))
    if v_name == "gated_headwise":  # one sigmoid per head, on its E channels
        g = torch.sigmoid(xd @ attn.gate.weight.double().t())  # (B, T, H)
        o = (o.view(B, T, H, E) * g[..., None]).reshape(B, T, D)
    return o @ attn.proj.weight.double().t(), w


@pytest.mark.parametrize("fused", [True, False], ids=["fused", "materialised"])
@pytest.mark.parametrize("variant", VARIANTS)
def test_each_variant_computes_its_formula(variant: str, fused: bool) -> None:
    m = make_model(variant)
    m.set_fused(fused)
    seen: dict[str, torch.Tensor] = {}

    def hook(module: torch.nn.Module, args: tuple, output: tuple) -> None:
        seen["x"], seen["out"] = args[0].detach(), output[0].detach()

    h = m.blocks[1].attn.register_forward_hook(hook)
    ids = torch.randint(0, len(VOCAB), (2, 10), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        m(ids)
        _, maps = m(ids, return_attn=True)
    h.remove()
    with torch.no_grad():
        want, w = scratch_attention(m, 1, seen["x"])
    torch.testing.assert_close(seen["out"].double(), want, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(maps[1].double(), w, rtol=1e-4, atol=1e-5)
    # the test is not vacuous: the weights are far from uniform (1/(i+1) per row)
    uniform_max = float((1.0 / torch.arange(2, 11, dtype=torch.float64)).mean())
    rows = w[..., 1:, :] / w[..., 1:, :].sum(-1, keepdim=True).clamp_min(1e-12)
    assert float(rows.amax(-1).mean()) > 1.5 * uniform_max


def test_variants_differ_from_each_other() -> None:
    ids = torch.randint(0, len(VOCAB), (1, 10), generator=torch.Generator().manual_seed(2))
    outs = {}
    for v in VARIANTS:
        with torch.no_grad():
            outs[v] = make_model(v)(ids)[0]
    names = list(outs)
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            if {a, b} == {"gated", "standard"}:
                continue  # compared below
            assert not torch.allclose(outs[a], outs[b], atol=1e-4), (a, b)
    assert not torch.allclose(outs["gated"], outs["standard"], atol=1e-4)


def test_fully_scaled_uses_key_length_and_rows_use_visible_keys() -> None:
    """Under the causal mask, row 0 sees 1 key: fully_scaled multiplies it by sqrt(T/e),
    fully_scaled_rows by sqrt(1/e); the last row gets sqrt(T/e) from both."""
    T = 8
    a = make_model("fully_scaled").blocks[0].attn
    b = make_model("fully_scaled_rows").blocks[0].attn
    s = make_model("standard").blocks[0].attn
    q, k, v = (torch.randn(1, 2, T, 8, generator=torch.Generator().manual_seed(i)) for i in range(3))
    x = torch.zeros(1, T, 16)
    with torch.no_grad():
        base, _ = s.core(q, k, v, x, None, False)
        fs, _ = a.core(q, k, v, x, None, False)
        fr, _ = b.core(q, k, v, x, None, False)
    torch.testing.assert_close(fs, base * math.sqrt(T / math.e))
    torch.testing.assert_close(fr[:, 0], base[:, 0] * math.sqrt(1 / math.e))
    torch.testing.assert_close(fr[:, -1], base[:, -1] * math.sqrt(T / math.e))


@pytest.mark.parametrize("variant", ["ssmax", "sink_logit", "gated", "gated_headwise", "gated_control"])
def test_learned_parameters_get_gradients(variant: str) -> None:
    m = make_model(variant).train()
    ids = torch.randint(0, len(VOCAB), (2, 10), generator=torch.Generator().manual_seed(3))
    logits, _ = m(ids)
    logits.square().mean().backward()
    attn = m.blocks[0].attn
    p = attn.ssmax_s if variant == "ssmax" else attn.sink if variant == "sink_logit" else attn.gate.weight
    assert p.grad is not None and float(p.grad.abs().sum()) > 0


def test_tied_embeddings_and_initialisation_is_seeded() -> None:
    a, b, c = make_model("standard", seed=5), make_model("standard", seed=5), make_model("standard", seed=6)
    assert "lm_head.weight" not in dict(a.named_parameters())
    for (na, pa), (_, pb) in zip(a.state_dict().items(), b.state_dict().items(), strict=True):
        assert torch.equal(pa, pb), na
    assert not torch.equal(a.tok.weight, c.tok.weight)
    ids = torch.tensor([[0, 1, 2]])
    with torch.no_grad():
        logits, _ = a(ids)
        h = a.blocks[0](a.tok(ids), *_angles(a, 3), None, False)[0]
        for blk in a.blocks[1:]:
            h = blk(h, *_angles(a, 3), None, False)[0]
    torch.testing.assert_close(logits, a.ln_f(h) @ a.tok.weight.t())


def _angles(m: CharTransformer, T: int) -> tuple[torch.Tensor, torch.Tensor]:
    from attncore.training.model import rotary_angles

    return rotary_angles(torch.arange(T), m.config.d_head)


def test_rotary_scores_depend_only_on_relative_position() -> None:
    from attncore.training.model import apply_rotary, rotary_angles

    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(8, generator=g), torch.randn(8, generator=g)

    def score(pq: int, pk: int) -> float:
        cq, sq = rotary_angles(torch.tensor([pq]), 8)
        ck, sk = rotary_angles(torch.tensor([pk]), 8)
        return float(apply_rotary(q[None], cq, sq) @ apply_rotary(k[None], ck, sk).t())

    assert score(5, 2) == pytest.approx(score(103, 100), abs=1e-4)
    assert score(5, 2) != pytest.approx(score(5, 4), abs=1e-3)


# ---------------------------------------------------------------------------- save / load


def test_save_load_round_trip(tmp_path) -> None:
    m = make_model("sink_logit")
    m.meta = {"final_val_loss": 1.5}
    save_model(m, tmp_path / "m")
    back = load_model(tmp_path / "m")
    assert back.config == m.config and back.vocab == m.vocab and back.meta == {"final_val_loss": 1.5}
    ids = torch.tensor([[1, 2, 3, 4]])
    with torch.no_grad():
        torch.testing.assert_close(back(ids)[0], m(ids)[0], rtol=0, atol=0)
    size = sum(p.stat().st_size for p in (tmp_path / "m").iterdir())
    assert size < 200_000


class _Evil:
    def __reduce__(self):  # pragma: no cover - must never run
        return (print, ("unpickled!",))


def test_load_refuses_arbitrary_pickles_and_broken_files(tmp_path) -> None:
    m = make_model("standard")
    d = save_model(m, tmp_path / "m")
    with pytest.raises(AttnInputError, match="no saved"):
        load_model(tmp_path / "nothing")
    torch.save({"x": _Evil()}, d / "weights.pt")
    with pytest.raises(AttnInputError, match="plain tensors"):
        load_model(d)
    (d / "weights.pt").write_bytes(pickle.dumps([1, 2]))
    with pytest.raises(AttnInputError):
        load_model(d)
    save_model(m, d)
    (d / "model.json").write_text('{"format": 1, "config": {"variant": "nope"}, "vocab": "ab"}')
    with pytest.raises(AttnInputError):
        load_model(d)


def test_load_rejects_weights_of_another_shape(tmp_path) -> None:
    save_model(make_model("standard", d_model=16), tmp_path / "a")
    save_model(make_model("standard", d_model=32), tmp_path / "b")
    (tmp_path / "b" / "model.json").write_bytes((tmp_path / "a" / "model.json").read_bytes())
    with pytest.raises(AttnInputError, match="does not match"):
        load_model(tmp_path / "b")


# ---------------------------------------------------------------------------- looking inside


def test_next_char_distribution_is_the_softmax_of_the_last_logits_at_temperature() -> None:
    m = make_model("standard")
    text = "abc de"
    ids = torch.tensor([[VOCAB.index(c) for c in text]])
    with torch.no_grad():
        logits = m(ids)[0][0, -1].double()
    for t in (0.5, 1.0, 2.0):
        dist = next_char_distribution(m, text, t)
        assert [c for c, _ in dist] == sorted(VOCAB, key=lambda c: -float(logits[VOCAB.index(c)]))
        p = torch.softmax(logits / t, -1)
        for c, pc in dist:
            assert pc == pytest.approx(float(p[VOCAB.index(c)]), rel=1e-6)
        assert sum(pc for _, pc in dist) == pytest.approx(1.0)
    assert dist[0][1] < next_char_distribution(m, text, 0.5)[0][1]  # colder -> sharper


def test_next_char_reads_only_the_last_context_characters() -> None:
    m = make_model("standard", context=12)
    a = next_char_distribution(m, "aaaa" + "bcdefghij .,", 1.0)
    b = next_char_distribution(m, "jjjj" + "bcdefghij .,", 1.0)
    assert a == b


def test_generate_is_seeded_and_uses_the_vocabulary() -> None:
    m = make_model("standard")
    a, b, c = (generate(m, "ab", 30, seed=s) for s in (1, 1, 2))
    assert a == b and a != c and len(a) == 30 and set(a) <= set(VOCAB)


def test_attention_maps_are_causal_rows_and_run_past_the_context() -> None:
    m = make_model("softmax1", context=12)
    text = "abcdefghij .,\n" * 3  # 42 characters > context 12
    maps = attention_maps(m, text)
    assert maps.shape == (2, 2, 42, 42)
    assert float(maps.triu(1).abs().max()) == 0.0
    sums = maps.sum(-1)
    assert float(sums.max()) < 1.0 and float(sums.min()) > 0.0  # softmax1 rows sum to less than 1
    std = attention_maps(make_model("standard"), text)
    torch.testing.assert_close(std.sum(-1), torch.ones(2, 2, 42))


@pytest.mark.parametrize("bad", ["", "xyz", "a" * 1025])
def test_inspection_rejects_bad_text(bad: str) -> None:
    m = make_model("standard")
    with pytest.raises(AttnInputError):
        attention_maps(m, bad)


@pytest.mark.parametrize("t", [0.0, -1.0, float("nan"), 11.0])
def test_bad_temperature(t: float) -> None:
    with pytest.raises(AttnInputError, match="temperature"):
        next_char_distribution(make_model("standard"), "ab", t)


@pytest.mark.parametrize("b0", [0.0, -5.0, 2.5])
def test_sink_logit_starts_at_its_config_value_and_other_draws_do_not_move(b0: float) -> None:
    """``sink_init`` sets the initial logit; every other parameter is drawn exactly as before."""
    cfg = TrainConfig(variant="sink_logit", n_layer=2, n_head=2, d_model=16, context=12, sink_init=b0)
    m = CharTransformer.create(cfg, VOCAB, torch.Generator().manual_seed(3))
    ref = CharTransformer.create(cfg.replace(sink_init=0.0), VOCAB, torch.Generator().manual_seed(3))
    for blk in m.blocks:
        assert blk.attn.sink.tolist() == [b0, b0]
    for (name, p), (_, q) in zip(m.named_parameters(), ref.named_parameters(), strict=True):
        if not name.endswith("attn.sink"):
            assert torch.equal(p, q), name
    with pytest.raises(AttnInputError, match="initial sink logit"):
        cfg.replace(sink_init=float("nan"))
    with pytest.raises(AttnInputError, match="initial sink logit"):
        cfg.replace(sink_init=21.0)
