"""KV-cache eviction (attncore.decoder.eviction) against the dense model, the banded masks, a full forward
pass replayed under the caches each policy kept, and from-scratch versions of the four selection rules."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch

from attncore.decoder.eviction import (
    SINKS,
    EvictionResult,
    EvictionSetting,
    evict_decode,
    evict_losses,
    eviction_cost,
    h2o_recent,
    victim,
)
from attncore.decoder.probe import additive_mask, band_allowed, decoder_pass, decoder_shape
from attncore.errors import AttnInputError, Cancelled, ResourceLimitError
from tests.tiny_decoders import tiny_decoder

pytestmark = pytest.mark.usefixtures("one_torch_thread")

FAMILIES = ("llama", "qwen2")
SCORED = ("h2o", "tova")


def _ids(L: int, seed: int = 0, vocab: int = 33) -> torch.Tensor:
    return torch.randint(0, vocab, (1, L), generator=torch.Generator().manual_seed(seed))


@pytest.fixture(scope="module", params=FAMILIES)
def model(request: pytest.FixtureRequest) -> torch.nn.Module:
    return tiny_decoder(request.param, layers=3, heads=4, kv_heads=2, head_dim=8, seed=1).model.eval()


# ---- from-scratch selection rules (plain Python over lists) ----

def scratch_victim(policy: str, budget: int, sinks: int, pos: list[int], t: int, now: list[float],
                   acc: list[float]) -> int:
    """The position evicted from a full cache after step t, by the papers' rules written out directly."""
    if policy == "window":
        return min(pos)
    if policy == "streaming":
        return min(p for p in pos if p >= sinks)
    if policy == "h2o":
        recent = budget - budget // 2  # positions the next query sees as recent, itself included
        protected = set(range(t - recent + 2, t + 1))
        cand = [(acc[i], p) for i, p in enumerate(pos) if p not in protected]
        return min(cand)[1]
    if policy == "tova":
        return min((now[i], p) for i, p in enumerate(pos))[1]
    raise ValueError(policy)


def _victim_pos(policy: str, budget: int, pos: list[int], t: int, now: list[float], acc: list[float],
                sinks: int = SINKS) -> int:
    p = torch.tensor(pos)
    slot = victim(EvictionSetting(policy, budget, sinks), p, t, torch.tensor(now), torch.tensor(acc))
    return int(p[slot])


# hand-made patterns: slots in scrambled order; the sink (position 0) draws most weight
PATTERNS: list[dict[str, Any]] = [
    dict(pos=[5, 0, 9, 2, 7, 8, 1, 3], t=9, now=[0.05, 0.5, 0.1, 0.02, 0.08, 0.15, 0.04, 0.06],
         acc=[0.3, 4.0, 0.1, 0.2, 0.9, 0.5, 0.25, 0.6]),
    # ties: TOVA's and H2O's lowest scores appear twice; the lower position goes
    dict(pos=[6, 4, 10, 0, 3, 9, 8, 2], t=10, now=[0.1, 0.05, 0.2, 0.3, 0.05, 0.1, 0.1, 0.1],
         acc=[0.5, 0.5, 0.2, 3.0, 0.7, 0.4, 0.5, 0.9]),
    # the newest key is the least attended: TOVA evicts it
    dict(pos=[0, 1, 2, 3, 4, 5], t=5, now=[0.4, 0.2, 0.15, 0.15, 0.09, 0.01],
         acc=[2.0, 1.0, 0.5, 0.3, 0.2, 0.01]),
]


@pytest.mark.parametrize("policy", ["window", "streaming", "h2o", "tova"])
@pytest.mark.parametrize("pattern", range(len(PATTERNS)))
@pytest.mark.parametrize("sinks", [1, 4])
def test_each_rule_on_a_hand_made_pattern(policy: str, pattern: int, sinks: int) -> None:
    p = PATTERNS[pattern]
    budget = len(p["pos"])
    want = scratch_victim(policy, budget, sinks, p["pos"], p["t"], p["now"], p["acc"])
    assert _victim_pos(policy, budget, p["pos"], p["t"], p["now"], p["acc"], sinks) == want


def test_the_hand_made_choices_are_the_expected_ones() -> None:
    """The rules spelled out on the first pattern (budget 8, step 9): not just two codes agreeing."""
    p = PATTERNS[0]
    args = (p["pos"], p["t"], p["now"], p["acc"])
    assert _victim_pos("window", 8, *args) == 0  # the oldest, the sink included
    assert _victim_pos("streaming", 8, *args) == 5  # the oldest after the first 4
    assert _victim_pos("streaming", 8, *args, sinks=1) == 1
    # H2O: recent half = 4 keys for the next query, so 7, 8, 9 are protected; lowest accumulated of the rest
    assert h2o_recent(8) == 4 and _victim_pos("h2o", 8, *args) == 2
    assert _victim_pos("tova", 8, *args) == 2  # weight 0.02
    q = PATTERNS[2]
    assert _victim_pos("tova", 6, q["pos"], q["t"], q["now"], q["acc"]) == 5  # the newest key itself


# ---- the decode against dense, the banded mask and a full forward ----

def test_cached_decode_equals_a_full_forward_at_every_step(model: torch.nn.Module) -> None:
    L = 40
    ids = _ids(L, 2)
    with torch.no_grad():
        full = model(input_ids=ids).logits[0, :-1].float()  # (T, V)
    for s in (EvictionSetting("dense"), EvictionSetting("tova", L), EvictionSetting("h2o", L + 7)):
        d = evict_decode(model, ids, s, logits=True)
        assert d.logits is not None
        torch.testing.assert_close(d.logits, full, atol=2e-5, rtol=1e-5)
        # every step's cache is the whole prefix
        kp = d.kept.long()  # (R, T, L)
        for t in (0, 7, L - 2):
            assert kp[:, t, : t + 1].tolist() == [list(range(t + 1))] * kp.shape[0]
            assert bool((kp[:, t, t + 1:] == -1).all())


@pytest.mark.parametrize("policy", ["window", "streaming", "h2o", "tova"])
def test_a_budget_at_least_the_length_equals_dense(model: torch.nn.Module, policy: str) -> None:
    L = 30
    ids = _ids(L, 3)
    dense = decoder_pass(model, ids, weights=False).nll
    for budget in (L, L + 10):
        r = evict_decode(model, ids, EvictionSetting(policy, budget))
        torch.testing.assert_close(r.nll, dense, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("budget,sinks", [(5, 0), (9, 0), (6, 1), (9, 4)])
def test_window_and_streaming_equal_the_banded_mask(model: torch.nn.Module, budget: int, sinks: int) -> None:
    L = 36
    ids = _ids(L, 4)
    policy = "window" if sinks == 0 else "streaming"
    r = evict_decode(model, ids, EvictionSetting(policy, budget, sinks), record=(0, 2))
    ref = decoder_pass(model, ids, allowed=band_allowed(L, budget - sinks, sinks), weights=False).nll
    torch.testing.assert_close(r.nll, ref, atol=1e-5, rtol=1e-5)
    allowed = band_allowed(L, budget - sinks, sinks)[:-1]  # (T, L): the keys each query sees
    for j in range(2):
        got = torch.zeros_like(allowed)
        kp = r.kept[j].long()
        for t in range(L - 1):
            got[t, kp[t][kp[t] >= 0]] = True
        assert torch.equal(got, allowed)
    assert (r.nll - decoder_pass(model, ids, weights=False).nll).abs().max() > 1e-3  # eviction took effect


def _replay(model: torch.nn.Module, ids: torch.Tensor, kept: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """A full forward pass where layer i's queries see only the keys its cache held (kept (N, T, Bk)): the
    losses (T,) and each layer's weights (H, L, L), from the model's own eager attention."""
    N = decoder_shape(model).layers
    L = int(ids.shape[1])
    masks = []
    for i in range(N):
        allowed = torch.zeros(L, L, dtype=torch.bool)
        for t in range(L - 1):
            kp = kept[i, t].long()
            allowed[t, kp[kp >= 0]] = True
        allowed[L - 1, :] = True  # the last token predicts nothing
        masks.append(additive_mask(allowed))
    weights: list[torch.Tensor] = [torch.empty(0)] * N
    handles = []
    for i, layer in enumerate(model.model.layers):
        def pre(_m: Any, args: Any, kwargs: dict[str, Any], i: int = i) -> Any:
            kwargs["attention_mask"] = masks[i]
            return args, kwargs

        def post(_m: Any, _a: Any, out: Any, i: int = i) -> None:
            weights[i] = out[1][0].float()  # (H, L, L)

        handles.append(layer.self_attn.register_forward_pre_hook(pre, with_kwargs=True))
        handles.append(layer.self_attn.register_forward_hook(post))
    try:
        with torch.no_grad():
            logits = model(input_ids=ids, attention_mask=masks[0]).logits[0, :-1].float()
    finally:
        for h in handles:
            h.remove()
    nll = torch.nn.functional.cross_entropy(logits, ids[0, 1:], reduction="none")
    return nll, weights


@pytest.mark.parametrize("policy", SCORED + ("streaming",))
@pytest.mark.parametrize("budget", [6, 9])
def test_each_policy_replays_from_scratch(model: torch.nn.Module, policy: str, budget: int) -> None:
    """The losses of the decode equal a full forward under the per-layer caches it reports, and every
    eviction equals the from-scratch rule applied to that forward's own weights (H2O's accumulated score
    summed from the weight maps' columns, TOVA's from the query's row)."""
    L = 32
    ids = _ids(L, 5)
    s = EvictionSetting(policy, budget, 2)
    d = evict_decode(model, ids, s)
    nll, weights = _replay(model, ids, d.kept)
    torch.testing.assert_close(d.nll, nll, atol=1e-5, rtol=1e-5)
    evictions = 0
    for i, w in enumerate(weights):
        wm = w.mean(0).double()  # (L, L) weights averaged over heads
        for t in range(L - 2):
            here = [int(p) for p in d.kept[i, t] if p >= 0]
            nxt = {int(p) for p in d.kept[i, t + 1] if p >= 0}
            if len(here) < budget:
                assert nxt == set(here) | {t + 1}
                continue
            acc = [float(wm[: t + 1, p].sum()) for p in here]  # weights since it entered (0 before)
            now = [float(wm[t, p]) for p in here]
            out = scratch_victim(policy, budget, 2, here, t, now, acc)
            assert nxt == (set(here) - {out}) | {t + 1}, (i, t)
            evictions += 1
    assert evictions > 10


def test_the_policies_keep_different_tokens(model: torch.nn.Module) -> None:
    L, B = 40, 8
    ids = _ids(L, 6)
    settings = [EvictionSetting("dense")] + [EvictionSetting(p, B) for p in ("window", "streaming", "h2o", "tova")]
    r = evict_losses(model, ids, settings, record=(1,))
    assert r.nll.shape == (5, L - 1) and r.layers == (1,) and len(r.kept) == 5
    maps = [r.keep_map(s, 1) for s in settings]  # (L, T) each
    assert all(m.shape == (L, L - 1) for m in maps)
    assert int(maps[0].sum()) == sum(t + 1 for t in range(L - 1))
    for m in maps[1:]:
        assert int(m.sum(0).max()) == B and bool((m.sum(0)[B - 1:] == B).all())
    # the window, StreamingLLM and TOVA keep different sets; H2O may coincide with StreamingLLM on a random
    # model (the first keys have accumulated weight longest: they stay as heavy hitters)
    assert len({tuple(m.flatten().tolist()) for m in maps[1:]}) >= 3
    assert not torch.equal(maps[1], maps[4]) and not torch.equal(maps[2], maps[4])
    # the window holds t - 7..t at full steps t = 7..38: 4 + 3 + 2 + 1 first-4 slots of 32 x 8
    assert r.first_share(settings[1]) == pytest.approx(10 / (32 * B))
    assert r.first_share(settings[2]) == pytest.approx(SINKS / B)
    assert math.isnan(r.first_share(settings[0]))
    dense = r.ppl(settings[0])
    assert dense == pytest.approx(math.exp(float(r.nll[0].double().mean())))
    assert all(r.ppl(s) != dense for s in settings[1:])


def test_keep_map_and_first_share_on_a_hand_made_result() -> None:
    kept = torch.tensor([[[0, -1, -1], [0, 1, -1], [0, 1, 2], [0, 2, 3], [2, 3, 4]]], dtype=torch.int16)
    s = EvictionSetting("tova", 3)
    r = EvictionResult((s,), torch.zeros(1, 5), (kept,), (0,), 6, (1.0,))
    m = r.keep_map(s, 0)
    assert m.shape == (6, 5)
    assert m[:, 3].tolist() == [True, False, True, True, False, False]
    assert m[0].tolist() == [True, True, True, True, False]
    # full steps 2, 3, 4: first-4 slots 3 + 3 + 2 of 9
    assert r.first_share(s, 4) == pytest.approx(8 / 9)
    assert r.first_share(s, 1) == pytest.approx(2 / 9)


# ---- bad input, progress, cancel, cost ----

@pytest.mark.parametrize("setting,match", [
    (EvictionSetting("lru", 8), "unknown eviction policy"),
    (EvictionSetting("window", 1), "at least 2"),
    (EvictionSetting("tova", None), "at least 2"),
    (EvictionSetting("streaming", 4, 4), "at least k \\+ 1 = 5"),
    (EvictionSetting("h2o", 8.5), "whole number"),  # type: ignore[arg-type]
])
def test_bad_settings_get_a_plain_message(model: torch.nn.Module, setting: EvictionSetting, match: str) -> None:
    with pytest.raises(AttnInputError, match=match):
        evict_decode(model, _ids(12), setting)


def test_bad_ids_and_layers(model: torch.nn.Module) -> None:
    with pytest.raises(AttnInputError, match="at least 2"):
        evict_decode(model, _ids(1), EvictionSetting("window", 4))
    assert evict_decode(model, _ids(8), EvictionSetting("window", 4), record=()).kept.shape == (0, 7, 4)
    with pytest.raises(AttnInputError, match="recorded layers"):
        evict_decode(model, _ids(8), EvictionSetting("window", 4), record=(5,))
    with pytest.raises(AttnInputError, match="1 to"):
        evict_losses(model, _ids(8), [])


def test_progress_and_cancel(model: torch.nn.Module) -> None:
    ids = _ids(20)
    settings = [EvictionSetting(p, 6) for p in ("window", "h2o", "tova")]
    calls: list[tuple[int, int, str]] = []
    evict_losses(model, ids, settings, progress=lambda d, t, s: calls.append((d, t, s.label)))
    assert calls == [(1, 3, "window 6"), (2, 3, "H2O 6"), (3, 3, "TOVA 6")]
    with pytest.raises(Cancelled) as info:
        evict_losses(model, ids, settings, cancel=lambda: len(calls) >= 5,
                     progress=lambda d, t, s: calls.append((d, t, s.label)))
    part = info.value.partial  # type: ignore[attr-defined]
    assert part.settings == tuple(settings[:2]) and part.nll.shape == (2, 19) and len(part.kept) == 2


def test_cost_grows_with_the_request_and_is_checked(model: torch.nn.Module,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    shape = decoder_shape(model)
    small = eviction_cost(shape, 64, [EvictionSetting("tova", 8)], 1)
    big = eviction_cost(shape, 64, [EvictionSetting("tova", 32)], 1)
    more = eviction_cost(shape, 64, [EvictionSetting("tova", 32)] * 3, shape.layers)
    assert 0 < small.nbytes < big.nbytes < more.nbytes and 0 < small.seconds < big.seconds < more.seconds
    # the kept positions alone: P R T Bk int16
    assert more.nbytes >= 2 * 3 * shape.layers * 63 * 32
    monkeypatch.setenv("ATTNCORE_MAX_BYTES", "1K")
    with pytest.raises(ResourceLimitError, match="decoding 64 tokens"):
        evict_decode(model, _ids(64), EvictionSetting("tova", 32))


def test_unsupported_attention_is_refused() -> None:
    m = tiny_decoder("llama", layers=1).model
    m.model.layers[0].self_attn.q_norm = torch.nn.Identity()
    with pytest.raises(AttnInputError, match="normalises q/k"):
        evict_decode(m, _ids(8), EvictionSetting("window", 4))


@pytest.mark.slow
def test_smollm2_short_text() -> None:
    """SmolLM2 on 48 tokens of the shipped text: dense = the model's pass, window 16 + first 4 = the band."""
    try:
        from attncore.models import load_model

        lm = load_model("smollm2")
    except (AttnInputError, ImportError, OSError) as exc:
        pytest.skip(f"SmolLM2 cannot be loaded here: {exc}")
    from attncore.decoder.stream_run import shipped_stream_ids

    ids = shipped_stream_ids(lm.tokenizer, 48)
    r = evict_losses(lm.model, ids, [EvictionSetting("dense"), EvictionSetting("streaming", 20),
                                     EvictionSetting("tova", 20)], record=(0,))
    dense = decoder_pass(lm.model, ids, weights=False).nll
    band = decoder_pass(lm.model, ids, allowed=band_allowed(48, 16, 4), weights=False).nll
    torch.testing.assert_close(r.nll[0], dense, atol=2e-4, rtol=1e-4)
    torch.testing.assert_close(r.nll[1], band, atol=2e-4, rtol=1e-4)
    assert bool(torch.isfinite(r.nll[2]).all())
