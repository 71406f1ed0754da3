"""attncore.decoder.scaling: the scaled logits' spread per head and the 1/sqrt(E) intervention, against
from-scratch q/k and a from-scratch forward on the tiny random Llama/Qwen2 configs (float64), and on
SmolLM2 (64 tokens)."""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest
import torch

from attncore.decoder.probe import decoder_pass
from attncore.decoder.scaling import (
    FACTORS,
    LEVELS,
    gaussian_rows,
    logit_spread,
    row_statistics,
    scaled_run,
    scaled_runs,
    scaling,
)
from attncore.errors import AttnInputError
from tests.tiny_decoders import tiny_decoder

pytestmark = pytest.mark.usefixtures("one_torch_thread")

L = 12


def _ids(n: int = L, seed: int = 0) -> torch.Tensor:
    return torch.randint(3, 30, (1, n), generator=torch.Generator().manual_seed(seed))


@pytest.fixture(scope="module", params=["llama", "qwen2"])
def tiny(request):
    return tiny_decoder(request.param, layers=2, heads=4, kv_heads=2, head_dim=8).model


@pytest.fixture(scope="module")
def tiny64(tiny):
    return copy.deepcopy(tiny).double()


def _theta(model) -> float:
    rp = getattr(model.config, "rope_parameters", None) or {}
    return float(rp.get("rope_theta", getattr(model.config, "rope_theta", 10_000.0)))


def _rotate(x: torch.Tensor, theta: float) -> torch.Tensor:
    """Llama's rotary from scratch: dim p paired with p + E/2, angle m theta^(-2p/E). x (..., L, E)."""
    Lx, E = x.shape[-2:]
    inv = 1.0 / theta ** (torch.arange(0, E, 2, dtype=torch.float64) / E)  # (E/2,)
    ang = torch.arange(Lx, dtype=torch.float64)[:, None] * inv[None]  # (L, E/2)
    cos, sin = torch.cat([ang.cos()] * 2, -1), torch.cat([ang.sin()] * 2, -1)
    x1, x2 = x[..., : E // 2], x[..., E // 2:]
    return x * cos + torch.cat([-x2, x1], -1) * sin


def _scratch(model, ids: torch.Tensor, c: float = 1.0):
    """A float64 model's forward with attention written out: (nll (L-1,), per layer the (H, L, L) logits
    q k^T c / sqrt(E) and weights)."""
    cfg = model.config
    H, Hkv = cfg.num_attention_heads, cfg.num_key_value_heads
    E = cfg.hidden_size // H
    Lx = ids.shape[1]
    mask = torch.ones(Lx, Lx, dtype=torch.bool).tril()
    h = model.model.embed_tokens(ids)[0]  # (L, D)
    logits_per_layer, weights = [], []
    with torch.no_grad():
        for layer in model.model.layers:
            a = layer.self_attn
            x = layer.input_layernorm(h)
            q = _rotate(a.q_proj(x).view(Lx, H, E).transpose(0, 1), _theta(model))  # (H, L, E)
            k = _rotate(a.k_proj(x).view(Lx, Hkv, E).transpose(0, 1), _theta(model))  # (Hkv, L, E)
            v = a.v_proj(x).view(Lx, Hkv, E).transpose(0, 1)
            k, v = k.repeat_interleave(H // Hkv, 0), v.repeat_interleave(H // Hkv, 0)
            s = q @ k.transpose(1, 2) * c / math.sqrt(E)  # (H, L, L)
            w = torch.softmax(s.masked_fill(~mask, -math.inf), -1)
            logits_per_layer.append(s)
            weights.append(w)
            o = (w @ v).transpose(0, 1).reshape(Lx, H * E)
            h = h + a.o_proj(o)
            h = h + layer.mlp(layer.post_attention_layernorm(h))
        out = model.lm_head(model.model.norm(h))
        nll = torch.nn.functional.cross_entropy(out[:-1], ids[0, 1:], reduction="none")
    return nll, logits_per_layer, weights


def _stats_by_loops(s: torch.Tensor) -> dict[str, np.ndarray]:
    """row_statistics written out row by row in numpy (float64)."""
    s = s.numpy()
    H, n, _ = s.shape
    out = {k: np.zeros(H) for k in ("mean", "std", "gap", "gap_max", "above90", "above99", "max_weight", "jac",
                                       "entropy")}
    for h in range(H):
        entries = np.concatenate([s[h, i, : i + 1] for i in range(n)])
        out["mean"][h], out["std"][h] = entries.mean(), entries.std()
        gaps, mws, jacs, ents = [], [], [], []
        for i in range(1, n):
            row = np.sort(s[h, i, : i + 1])[::-1]
            gaps.append(row[0] - row[1])
            p = np.exp(s[h, i, : i + 1] - row[0])
            p /= p.sum()
            mws.append(p.max())
            jacs.append(np.linalg.norm(np.diag(p) - np.outer(p, p)))
            ents.append(-(p[p > 0] * np.log(p[p > 0])).sum())
        out["gap"][h], out["gap_max"][h] = np.mean(gaps), np.max(gaps)
        out["above90"][h] = np.mean(np.array(mws) > LEVELS[0])
        out["above99"][h] = np.mean(np.array(mws) > LEVELS[1])
        out["max_weight"][h], out["jac"][h] = np.mean(mws), np.mean(jacs)
        out["entropy"][h] = np.mean(ents)
    return out


def test_logit_statistics_match_a_from_scratch_q_k(tiny64) -> None:
    ids = _ids()
    spread = logit_spread(tiny64, ids)
    _, logits, _ = _scratch(tiny64, ids)
    assert spread.length == L and spread.head_dim == 8 and spread.scale == pytest.approx(8 ** -0.5)
    for li, s in enumerate(logits):
        ref = _stats_by_loops(s)
        for name, want in ref.items():
            np.testing.assert_allclose(spread[name][li].numpy(), want, rtol=1e-5, atol=1e-5, err_msg=name)


def test_row_statistics_of_known_rows() -> None:
    # one head, 3 tokens: rows 1 and 2 (row 0 has one key and is left out of the row statistics)
    s = torch.tensor([[[0.0, 9.0, 9.0], [10.0, 0.0, 9.0], [1.0, 1.0, 1.0]]], dtype=torch.float64)
    r = row_statistics(s)
    entries = torch.tensor([0.0, 10.0, 0.0, 1.0, 1.0, 1.0], dtype=torch.float64)
    assert float(r["mean"][0]) == pytest.approx(float(entries.mean()))
    assert float(r["std"][0]) == pytest.approx(float(entries.std(unbiased=False)))
    assert float(r["gap"][0]) == pytest.approx(5.0) and float(r["gap_max"][0]) == pytest.approx(10.0)
    top = 1 / (1 + math.exp(-10))  # row 1's largest weight, above 0.99; row 2's is 1/3
    assert float(r["above90"][0]) == 0.5 and float(r["above99"][0]) == 0.5
    assert float(r["max_weight"][0]) == pytest.approx((top + 1 / 3) / 2)


def test_the_gaussian_prediction_is_row_statistics_of_scaled_draws() -> None:
    from attncore.synthetic import make_generator, randn

    g = gaussian_rows((0.0, 1.0, 8.0), 16, heads=3, seed=5)
    z = randn(3, 16, 16, generator=make_generator(5), dtype=torch.float64)
    for i, sigma in enumerate((0.0, 1.0, 8.0)):
        ref = _stats_by_loops(z * sigma)
        for name, want in ref.items():
            assert float(g[name][i]) == pytest.approx(float(want.mean()), rel=1e-9, abs=1e-12), name
    assert float(g["std"][1]) == pytest.approx(1.0, abs=0.1)  # the seed's law: unit spread
    # flat rows at sigma 0: entropy ln(i + 1) averaged over rows 1..15, nothing saturated
    assert float(g["entropy"][0]) == pytest.approx(np.mean(np.log(np.arange(2, 17))))
    assert float(g["above90"][0]) == 0.0 and float(g["above90"][2]) > 0.5
    with pytest.raises(AttnInputError):
        gaussian_rows((float("nan"),), 16)


def test_factor_one_equals_the_plain_forward_exactly(tiny) -> None:
    ids = _ids()
    with torch.inference_mode():
        logits = tiny(input_ids=ids, use_cache=False).logits[0, :-1].float()
    plain = torch.nn.functional.cross_entropy(logits, ids[0, 1:], reduction="none")
    run = scaled_run(tiny, ids, 1.0)
    assert torch.equal(run.nll, plain)
    # the sink score is the house's (decoder_pass' alpha of key 0), the entropy its rows i >= 1
    p = decoder_pass(tiny, ids)
    torch.testing.assert_close(run.first_score, p.alpha[..., 0], rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(run.entropy, p.entropy[..., 1:].mean(-1), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("c", [0.25, 8.0])
def test_a_scaled_forward_matches_from_scratch_attention_with_that_scale(tiny64, c: float) -> None:
    ids = _ids(seed=1)
    run = scaled_run(tiny64, ids, c)
    nll, _, weights = _scratch(tiny64, ids, c)
    torch.testing.assert_close(run.nll.double(), nll, rtol=1e-5, atol=1e-5)
    first = torch.stack([w[..., 0].mean(-1) for w in weights])  # (N, H)
    torch.testing.assert_close(run.first_score.double(), first, rtol=1e-5, atol=1e-5)
    ent = torch.stack([-(w * w.clamp_min(1e-300).log()).sum(-1)[:, 1:].mean(-1) for w in weights])
    torch.testing.assert_close(run.entropy.double(), ent, rtol=1e-5, atol=1e-5)
    a90 = torch.stack([(w[:, 1:].amax(-1) > 0.9).double().mean(-1) for w in weights])
    torch.testing.assert_close(run.above90.double(), a90)
    assert run.perplexity == pytest.approx(math.exp(float(nll.mean())), rel=1e-5)
    # not the plain forward: the scale changed the loss
    assert abs(run.loss - scaled_run(tiny64, ids, 1.0).loss) > 1e-6


def test_the_scaling_is_restored_even_when_the_pass_fails(tiny) -> None:
    before = [a.self_attn.scaling for a in tiny.model.layers]
    with pytest.raises(RuntimeError), scaling(tiny, 4.0):
        assert tiny.model.layers[0].self_attn.scaling == before[0] * 4.0
        raise RuntimeError("boom")
    assert [a.self_attn.scaling for a in tiny.model.layers] == before
    with pytest.raises(AttnInputError):
        scaled_run(tiny, _ids(), 100.0)  # past the upper bound: a plain message, nothing changed
    for bad in (0.0, -1.0, float("nan")):
        with pytest.raises(AttnInputError):
            scaled_run(tiny, _ids(), bad)
    assert [a.self_attn.scaling for a in tiny.model.layers] == before


def test_runs_report_progress_and_stop(tiny) -> None:
    seen: list[float] = []
    runs = scaled_runs(tiny, _ids(), FACTORS, progress=lambda d, t, r: seen.append(r.factor),
                       cancel=lambda: len(seen) >= 3)
    assert [r.factor for r in runs] == list(FACTORS[:3]) == seen
    with pytest.raises(AttnInputError):
        scaled_runs(tiny, _ids(), ())


@pytest.mark.slow
def test_smollm2_spread_and_intervention_at_64_tokens() -> None:
    from attncore.decoder.probe import layer_qkv
    from attncore.decoder.text import shipped_text, text_tokens
    from attncore.models import load_model

    lm = load_model("smollm2")
    ids = text_tokens(lm.tokenizer, shipped_text(), 64).ids
    spread = logit_spread(lm.model, ids)
    assert tuple(spread["std"].shape) == (30, 9) and spread.scale == pytest.approx(0.125)
    q, k, _, _ = layer_qkv(lm.model, ids, 7)  # the probe's own q and k of layer 7
    s = (q[0] @ k[0].repeat_interleave(3, 0).transpose(1, 2)).double() * 0.125
    ref = _stats_by_loops(s)
    for name in ("std", "gap", "above90", "jac"):
        np.testing.assert_allclose(spread[name][7].numpy(), ref[name], rtol=1e-4, atol=1e-4, err_msg=name)
    with torch.inference_mode():
        logits = lm.model(input_ids=ids, use_cache=False).logits[0, :-1].float()
    plain = torch.nn.functional.cross_entropy(logits, ids[0, 1:], reduction="none")
    runs = scaled_runs(lm.model, ids, (1.0, 8.0))
    assert torch.equal(runs[0].nll, plain)
    assert lm.model.model.layers[0].self_attn.scaling == 0.125  # restored
    # without the 1/sqrt(E) the rows saturate and the loss rises (measured: 0.16 -> 0.81 of rows above 0.9)
    assert runs[1].saturated90 > runs[0].saturated90 + 0.3 and runs[1].loss > runs[0].loss + 0.5
