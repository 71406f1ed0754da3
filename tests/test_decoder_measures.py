"""attncore.decoder on tiny random Llama / Qwen2 causal LMs (grouped-query attention), against
from-scratch computations: transformers' own attention maps and hidden states, runs on cut texts with
their true position ids, and closed forms."""

from __future__ import annotations

import math

import pytest
import torch

from attncore.budget import MAX_BYTES_ENV
from attncore.decoder.entropy import CLASSES, entropy_profile, head_classes, position_bands
from attncore.decoder.induction import induction, repeated_tokens
from attncore.decoder.probe import (
    ResidualEdit,
    additive_mask,
    band_allowed,
    decoder_pass,
    decoder_shape,
    layer_qkv,
)
from attncore.decoder.sinks import FUNCTION_WORDS, decoder_sinks, sink_variants, token_kind, value_drain
from attncore.decoder.streaming import (
    Cancelled,
    StreamSetting,
    ablations,
    default_settings,
    mean_se,
    stream_losses,
)
from attncore.decoder.text import shipped_text, text_windows
from attncore.errors import AttnInputError, ResourceLimitError
from attncore.sinks import sink_scores

pytestmark = pytest.mark.usefixtures("one_torch_thread")

V = 64


def _tiny(kind: str) -> torch.nn.Module:
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    common = dict(vocab_size=V, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, max_position_embeddings=256, attn_implementation="eager",
                  initializer_range=0.5)
    if kind == "llama":
        return LlamaForCausalLM(LlamaConfig(**common)).eval()
    return Qwen2ForCausalLM(Qwen2Config(**common)).eval()


@pytest.fixture(scope="module", params=["llama", "qwen2"])
def model(request: pytest.FixtureRequest) -> torch.nn.Module:
    return _tiny(request.param)


def _ids(L: int, seed: int = 1) -> torch.Tensor:
    return torch.randint(0, V, (1, L), generator=torch.Generator().manual_seed(seed))


def _hf(model: torch.nn.Module, ids: torch.Tensor, **kw: object):  # noqa: ANN202
    with torch.no_grad():
        return model(input_ids=ids, output_attentions=True, output_hidden_states=True, **kw)


def _nll(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.cross_entropy(logits.float(), targets, reduction="none")


# ---------------------------------------------------------------------------- the pass


def test_pass_summaries_equal_transformers_maps(model: torch.nn.Module) -> None:
    L = 30
    ids = _ids(L)
    p = decoder_pass(model, ids, maps=[(1, 3)], stripe_offset=7, stripe_from=12)
    out = _hf(model, ids)
    attn = torch.stack([a[0] for a in out.attentions]).float()  # (N, H, L, L)
    allowed = torch.ones(L, L, dtype=torch.bool).tril()
    torch.testing.assert_close(p.maps[(1, 3)], attn[1, 3])
    torch.testing.assert_close(p.alpha, sink_scores(attn, allowed))
    ent = -(attn * attn.clamp_min(1e-30).log()).sum(-1)
    torch.testing.assert_close(p.entropy, ent, atol=1e-5, rtol=1e-5)
    rest = attn[..., 1:] / attn[..., 1:].sum(-1, keepdim=True)
    ent_rest = -(rest * rest.clamp_min(1e-30).log()).sum(-1)
    torch.testing.assert_close(p.entropy_rest[..., 1:], ent_rest[..., 1:], atol=1e-4, rtol=1e-4)
    assert torch.isnan(p.entropy_rest[..., 0]).all()
    torch.testing.assert_close(p.first_weight, attn[..., 0])
    local = torch.stack([attn[..., i, max(0, i - 3):i + 1].sum(-1) for i in range(L)], dim=-1)
    torch.testing.assert_close(p.local_weight, local)
    stripe = torch.stack([attn[..., i, i - 7] for i in range(12, L)], dim=-1).mean(-1)
    torch.testing.assert_close(p.stripe, stripe)
    torch.testing.assert_close(p.nll, _nll(out.logits[0, :-1], ids[0, 1:]))
    N = decoder_shape(model).layers
    hs = torch.stack([h[0] for h in out.hidden_states[:N]])  # embeddings and layers 0..N-2
    torch.testing.assert_close(p.residual_norm[:N], hs.norm(dim=-1))
    torch.testing.assert_close(p.first_residual[:N], hs[:, 0])
    torch.testing.assert_close(p.rest_residual_mean[:N], hs[:, 1:].mean(1))


def test_value_norms_are_the_value_projection_norms(model: torch.nn.Module) -> None:
    ids = _ids(12)
    p = decoder_pass(model, ids, weights=False)
    shape = decoder_shape(model)
    out = _hf(model, ids)
    for n, layer in enumerate(model.model.layers):
        x = layer.input_layernorm(out.hidden_states[n])
        v = layer.self_attn.v_proj(x)[0].view(12, shape.kv_heads, shape.head_dim)
        torch.testing.assert_close(p.value_norm[n], v.norm(dim=-1).T.detach(), atol=1e-5, rtol=1e-5)
    assert p.alpha is None and p.entropy is None


def test_gqa_sdpa_equals_repeated_kv_and_the_model(model: torch.nn.Module) -> None:
    q, k, v, out = layer_qkv(model, _ids(16), 1)
    shape = decoder_shape(model)
    g = shape.heads // shape.kv_heads
    assert q.shape == (1, shape.heads, 16, shape.head_dim) and k.shape == (1, shape.kv_heads, 16, shape.head_dim)
    gqa = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    rep = torch.nn.functional.scaled_dot_product_attention(
        q, k.repeat_interleave(g, 1), v.repeat_interleave(g, 1), is_causal=True)
    torch.testing.assert_close(gqa, rep)
    torch.testing.assert_close(gqa.transpose(1, 2).reshape(1, 16, -1), out, atol=1e-5, rtol=1e-5)


# ---------------------------------------------------------------------------- masks


def test_band_mask_closed_form() -> None:
    a = band_allowed(6, 2, 1)
    want = torch.tensor([[i >= j and (i - j < 2 or j < 1) for j in range(6)] for i in range(6)])
    assert torch.equal(a, want)
    assert torch.equal(band_allowed(5), torch.ones(5, 5, dtype=torch.bool).tril())
    m = additive_mask(a)
    assert m.shape == (1, 1, 6, 6) and bool((m[0, 0][a] == 0).all()) and bool((m[0, 0][~a] < -1e30).all())
    with pytest.raises(AttnInputError):
        band_allowed(5, 0)


@pytest.mark.parametrize("window,sinks", [(5, 0), (5, 1), (4, 3)])
def test_one_layer_window_equals_a_cut_text_at_true_positions(window: int, sinks: int) -> None:
    """One layer: query i under the band = the model on the kept tokens only, with their true position ids."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    one = LlamaForCausalLM(LlamaConfig(vocab_size=V, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                       num_attention_heads=4, num_key_value_heads=2, initializer_range=0.5,
                                       attn_implementation="eager")).eval()
    L = 24
    ids = _ids(L, 3)
    p = decoder_pass(one, ids, allowed=band_allowed(L, window, sinks), weights=False)
    for i in (3, 10, 17, 22):
        keep = sorted(set(range(min(sinks, i + 1))) | set(range(max(0, i - window + 1), i + 1)))
        idx = torch.tensor(keep)
        with torch.no_grad():
            out = one(input_ids=ids[:, idx], position_ids=idx[None])
        want = _nll(out.logits[0, -1:], ids[0, i + 1:i + 2])
        torch.testing.assert_close(p.nll[i:i + 1], want, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("window,sinks", [(5, 0), (4, 2)])
def test_window_equals_a_rolling_cache(model: torch.nn.Module, window: int, sinks: int) -> None:
    """Several layers: the banded pass = decoding token by token with a KV cache whose evicted entries
    are masked out (each token's keys and values computed when it was newest, from its own window)."""
    from transformers import DynamicCache

    from attncore.models.generation import cache_kwarg, cache_of

    L = 20
    ids = _ids(L, 3)
    p = decoder_pass(model, ids, allowed=band_allowed(L, window, sinks), weights=False)
    cache = DynamicCache()
    got = []
    with torch.no_grad():
        for i in range(L - 1):
            keep = torch.tensor([float(j < sinks or i - j < window) for j in range(i + 1)])[None]
            out = model(input_ids=ids[:, i:i + 1], position_ids=torch.tensor([[i]]), attention_mask=keep,
                        use_cache=True, **{cache_kwarg(model): cache})
            cache = cache_of(out)
            got.append(_nll(out.logits[0, -1:], ids[0, i + 1:i + 2]))
    torch.testing.assert_close(p.nll, torch.cat(got), atol=1e-4, rtol=1e-4)


def test_the_window_changes_the_perplexity(model: torch.nn.Module) -> None:
    """Eviction takes effect: every window differs from dense past its width, and a window as long as
    the text equals dense (the bug of a 'reproduction' with the same number at every window)."""
    L = 40
    ids = _ids(L, 5)
    settings = default_settings(L)
    r = stream_losses(model, ids, settings)
    dense = r.nll[0]
    for s in settings[1:]:
        row = r.nll[r.index(s)]
        torch.testing.assert_close(row[: s.window], dense[: s.window])  # nothing evicted yet
        assert (row[s.window:] - dense[s.window:]).abs().max() > 1e-3, s.label
    assert len({round(r.ppl(s), 6) for s in settings}) == len(settings)
    full = stream_losses(model, ids, (StreamSetting(None), StreamSetting(L)))
    torch.testing.assert_close(full.nll[0], full.nll[1])


def test_stream_progress_and_cancel(model: torch.nn.Module) -> None:
    ids = _ids(20)
    calls: list[tuple[int, int, str]] = []
    settings = default_settings(20)
    stream_losses(model, ids, settings, progress=lambda d, t, s: calls.append((d, t, s.label)))
    assert [c[0] for c in calls] == list(range(1, 8)) and calls[-1][1] == 7
    with pytest.raises(Cancelled) as info:
        stream_losses(model, ids, settings, cancel=lambda: len(calls) >= 9,
                      progress=lambda d, t, s: calls.append((d, t, s.label)))
    part = info.value.partial
    assert part.settings == settings[:2] and part.nll.shape == (2, 19)


def test_mask_first_token_equals_the_text_without_it(model: torch.nn.Module) -> None:
    L = 18
    ids = _ids(L, 4)
    allowed = band_allowed(L)
    allowed[1:, 0] = False
    p = decoder_pass(model, ids, allowed=allowed, weights=False)
    with torch.no_grad():
        out = model(input_ids=ids[:, 1:], position_ids=torch.arange(1, L)[None])
    torch.testing.assert_close(p.nll[1:], _nll(out.logits[0, :-1], ids[0, 2:]), atol=1e-4, rtol=1e-4)
    abl = ablations(model, [ids[:, :12], ids[:, 6:]], 0, (0, 1))
    assert [a.name for a in abl] == ["delete first token", "zero massive dims", "mean-replace massive dims"]
    d0 = p.nll.double().mean() - decoder_pass(model, ids, weights=False).nll.double().mean()
    abl_full = ablations(model, [ids], 0, (0,))
    assert abs(abl_full[0].mean - float(d0)) < 1e-6 and math.isnan(abl_full[0].se)
    assert abs(abl_full[2].mean) < 1e-6  # one window: its mean is its own value, nothing changes
    first = [decoder_pass(model, w, weights=False).first_residual[1, [0, 1]] for w in (ids[:, :12], ids[:, 6:])]
    assert abl[2].values == pytest.approx(torch.stack(first).double().mean(0).tolist())
    assert all(abs(a.mean) > 0 for a in abl)
    assert abs(abl[1].se - float(abl[1].deltas.std()) / math.sqrt(2)) < 1e-12
    assert abl[1].margin == pytest.approx(12.706 * abl[1].se)  # t(0.975, 1): two windows
    assert math.isnan(abl_full[0].margin) and abl_full[0].sign == 0


def test_residual_edit_zero_and_mean() -> None:
    h = torch.arange(24.0).view(1, 4, 6)
    z = ResidualEdit(0, (1, 4), "zero").apply(h)
    assert z[0, 0, 1] == 0 and z[0, 0, 4] == 0 and torch.equal(z[0, 1:], h[0, 1:]) and z[0, 0, 0] == h[0, 0, 0]
    m = ResidualEdit(0, (2, 5), "set", (7.0, -1.5)).apply(h)
    assert m[0, 0, 2] == 7.0 and m[0, 0, 5] == -1.5 and torch.equal(m[0, 1:], h[0, 1:])
    with pytest.raises(AttnInputError):
        ResidualEdit(0, (1,), "half").apply(h)
    with pytest.raises(AttnInputError):
        ResidualEdit(0, (1, 2), "set", (1.0,)).apply(h)


def test_edit_at_a_layer_changes_only_what_follows(model: torch.nn.Module) -> None:
    ids = _ids(14)
    base = decoder_pass(model, ids, weights=False)
    edited = decoder_pass(model, ids, weights=False, edits=[ResidualEdit(0, (3, 5), "zero")])
    assert edited.first_residual[1, 3] == 0 and edited.first_residual[1, 5] == 0
    torch.testing.assert_close(edited.first_residual[0], base.first_residual[0])
    assert (edited.nll - base.nll).abs().max() > 1e-4


def test_mean_se_blocks() -> None:
    x = torch.arange(256.0)
    m, se = mean_se(x, block=64)
    blocks = x.view(4, 64).mean(1)
    assert m == pytest.approx(127.5) and se == pytest.approx(float(blocks.std()) / 2)
    assert math.isnan(mean_se(torch.tensor([1.0]))[1])


# ---------------------------------------------------------------------------- sinks


def _rest_scores(attn: torch.Tensor) -> torch.Tensor:
    """(N, H, L, L) causal maps -> (N, H, L) mean weight on key k >= 1 over queries i >= k, each row's keys
    1..i re-summed to 1 first (a loop over queries, written out); key 0 NaN."""
    N, H, L, _ = attn.shape
    out = torch.full((N, H, L), math.nan, dtype=torch.float64)
    a = attn.double()
    for k in range(1, L):
        rows = [a[..., i, k] / a[..., i, 1:i + 1].sum(-1) for i in range(k, L)]
        out[..., k] = torch.stack(rows).mean(0)
    return out


def test_decoder_sinks_from_scratch(model: torch.nn.Module) -> None:
    L = 26
    ids = _ids(L, 2)
    texts = ["\n" if i % 6 == 0 else "," if i % 6 == 3 else " the" if i % 6 == 4 else f"w{i}" for i in range(L)]
    s = decoder_sinks(model, ids, texts, eps=0.05, top=3)
    attn = torch.stack([a[0] for a in _hf(model, ids).attentions]).float()
    allowed = torch.ones(L, L, dtype=torch.bool).tril()
    first = attn[..., 0].mean(-1)  # every query sees the first token
    torch.testing.assert_close(s.first_score, first)
    torch.testing.assert_close(s.share, (first > 0.05).float().mean(-1))
    assert s.sink_heads == int((first > 0.05).sum())
    alpha = sink_scores(attn, allowed).mean((0, 1))
    rest = _rest_scores(attn).mean((0, 1))  # (L,)
    last = L - L // 8  # keys seen by fewer than L/8 queries are neither ranked nor in the kind means
    for kind, every in (("newline", 0), ("punctuation", 3), ("function", 4)):
        sel = [i for i in range(1, last) if i % 6 == every]
        assert s.kind_score[kind] == pytest.approx(float(rest[sel].mean()), rel=1e-5)
        # uniform attention over keys 1..i: query i gives each 1/i
        want = sum(sum(1 / i for i in range(k, L)) / (L - k) for k in sel) / len(sel)
        assert s.kind_uniform[kind] == pytest.approx(want, rel=1e-12)
    words = [i for i in range(1, last) if i % 6 in (1, 2, 5)]
    assert s.kind_score["word"] == pytest.approx(float(rest[words].mean()), rel=1e-5)
    assert s.attractors[0].position == int(rest[1:last].argmax()) + 1
    assert [a.position for a in s.attractors] == (rest[1:last].argsort(descending=True)[:8] + 1).tolist()
    top = s.attractors[0]
    assert top.score == pytest.approx(float(alpha[top.position]), rel=1e-5)
    assert top.rest_score == pytest.approx(float(rest[top.position]), rel=1e-5)
    assert s.lead == pytest.approx(float(rest[top.position] / rest[s.attractors[1].position]), rel=1e-5)
    assert all(a.position < last for a in s.attractors)
    assert s.top_dims.shape == (decoder_shape(model).layers + 1, 3)
    got = s.top_values.abs()
    p = decoder_pass(model, ids, weights=False)
    torch.testing.assert_close(got[:, 0], p.first_residual.abs().max(-1).values)


def test_rest_scores_under_a_window_mask(model: torch.nn.Module) -> None:
    """alpha_rest under a sliding window + the first token: each row re-summed over the keys it sees besides
    key 0, averaged over the queries that see key k (transformers' maps under the same 4-D mask)."""
    L, W = 20, 5
    ids = _ids(L, 3)
    allowed = band_allowed(L, W, sinks=1)
    p = decoder_pass(model, ids, allowed=allowed)
    attn = torch.stack([a[0] for a in _hf(model, ids, attention_mask=additive_mask(allowed)).attentions]).double()
    want = torch.zeros_like(p.alpha_rest, dtype=torch.float64)
    for k in range(1, L):
        qs = [i for i in range(L) if allowed[i, k]]
        want[..., k] = torch.stack([attn[..., i, k] / attn[..., i, 1:].sum(-1) for i in qs]).mean(0)
    assert torch.isnan(p.alpha_rest[..., 0]).all()
    torch.testing.assert_close(p.alpha_rest[..., 1:].double(), want[..., 1:], rtol=1e-5, atol=1e-6)


def test_value_drain_closed_form() -> None:
    vn = torch.tensor([[[1.0, 4.0, 2.0, 6.0]]])
    assert float(value_drain(vn)[0, 0]) == pytest.approx(0.25)


def test_token_kinds() -> None:
    assert [token_kind(t) for t in ("\n", " \n\n", ",", " .", "Ġ", " the", "The", " OF", "3", " theme", " there")] == [
        "newline", "newline", "punctuation", "punctuation", "word", "function", "function", "function", "word",
        "word", "function"]
    assert "the" in FUNCTION_WORDS and "citizen" not in FUNCTION_WORDS


def test_sink_variants(model: torch.nn.Module) -> None:
    ids = _ids(40)
    texts = [str(i) for i in range(40)]
    var = sink_variants(model, ids, texts, other_first=7, other_text="x", shift=3, length=20)
    assert [v.name for v in var] == ["as written", "another first token", "shifted by 3 tokens"]
    want = decoder_pass(model, ids[:, 3:23]).alpha[..., 0]
    torch.testing.assert_close(var[2].first_score, want)
    assert var[2].first_text == "3" and var[1].first_text == "x"
    with pytest.raises(AttnInputError):
        sink_variants(model, ids, texts, other_first=7, shift=30, length=20)


# ---------------------------------------------------------------------------- entropy


def test_position_bands() -> None:
    assert position_bands(10) == [(1, 2), (2, 4), (4, 8), (8, 10)]


def test_head_classes_counterfactual() -> None:
    first = torch.zeros(1, 3, 8)
    local = torch.zeros(1, 3, 8)
    first[0, 0] = 0.9
    local[0, 1] = 0.8
    assert head_classes(first, local) == [["sink-dominated", "local", "broad"]]
    first[0, 1] = 0.6  # now more sink than local
    assert head_classes(first, local)[0][1] == "sink-dominated"


def test_entropy_profile_medians(model: torch.nn.Module) -> None:
    p = decoder_pass(model, _ids(33))
    e = entropy_profile(p)
    assert sum(e.counts.values()) == p.entropy.shape[0] * p.entropy.shape[1]
    lo, hi = e.bands[-1]
    assert float(e.median["all"][-1]) == pytest.approx(float(p.entropy[..., lo:hi].median()))
    torch.testing.assert_close(e.uniform, torch.log(torch.arange(1, 34, dtype=torch.float64)))
    assert set(e.median) <= {"all", *CLASSES}


# ---------------------------------------------------------------------------- induction


def test_repeated_tokens_are_seeded_and_exclude() -> None:
    a = repeated_tokens(V, 10, 3, exclude=range(0, 60))
    assert torch.equal(a, repeated_tokens(V, 10, 3, exclude=range(0, 60)))
    assert torch.equal(a[0, :10], a[0, 10:]) and int(a.min()) >= 60
    assert not torch.equal(a, repeated_tokens(V, 10, 4, exclude=range(0, 60)))
    with pytest.raises(AttnInputError):
        repeated_tokens(V, 1, 0)


def test_induction_scores_from_scratch(model: torch.nn.Module) -> None:
    T = 12
    ind = induction(model, T, seed=5, top=2)
    out = _hf(model, ind.ids)
    attn = torch.stack([a[0] for a in out.attentions]).float()
    want = torch.stack([attn[..., T + j, j + 1] for j in range(T)], -1).mean(-1)
    torch.testing.assert_close(ind.score, want)
    nll = _nll(out.logits[0, :-1], ind.ids[0, 1:])
    assert ind.loss_first == pytest.approx(float(nll[: T - 1].mean()), rel=1e-5)
    assert ind.loss_second == pytest.approx(float(nll[T:].mean()), rel=1e-5)
    best = int(want.flatten().argmax())
    assert ind.top[0] == (best // want.shape[1], best % want.shape[1])
    torch.testing.assert_close(ind.maps[ind.top[0]], attn[ind.top[0]])


# ---------------------------------------------------------------------------- bad input and the text


def test_bad_input_is_plain(model: torch.nn.Module, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(AttnInputError, match="fewer than 2"):
        decoder_pass(model, _ids(1))
    with pytest.raises(AttnInputError, match="vocabulary|whole numbers"):
        decoder_pass(model, torch.tensor([[1, V + 3]]))
    with pytest.raises(AttnInputError, match="limit"):
        decoder_pass(model, _ids(40), max_tokens=30)
    with pytest.raises(AttnInputError, match="no head"):
        decoder_pass(model, _ids(5), maps=[(9, 0)])
    monkeypatch.setenv(MAX_BYTES_ENV, "64K")
    with pytest.raises(ResourceLimitError):
        decoder_pass(model, _ids(40))


def test_shipped_text_and_windows() -> None:
    text = shipped_text()
    assert 8_000 < len(text) < 16_000 and text.startswith("First Citizen:")
    ids = torch.arange(100)[None]
    w = text_windows(ids, 30, 3)
    assert [int(x[0, 0]) for x in w] == [0, 35, 70] and all(x.shape == (1, 30) for x in w)
    with pytest.raises(AttnInputError):
        text_windows(ids, 200, 2)


def test_the_cache_argument_is_named_as_the_installed_transformers_names_it() -> None:
    """transformers 5.17 takes ``past_key_values`` and swallows ``cache=`` in ``**kwargs`` (every step then
    decodes without its past: the rolling-cache test failed by 6 nats on such a machine); later 5.x take
    ``cache``. The name is read from the forward's signature, never assumed."""
    from attncore.models.generation import cache_kwarg

    class Old(torch.nn.Module):
        def forward(self, input_ids=None, past_key_values=None, **kwargs):  # noqa: ANN001, ANN003, ANN202
            return input_ids

    class New(torch.nn.Module):
        def forward(self, input_ids=None, cache=None, **kwargs):  # noqa: ANN001, ANN003, ANN202
            return input_ids

    assert cache_kwarg(Old()) == "past_key_values" and cache_kwarg(New()) == "cache"
