"""ui.views.decoder: chart data and sentences equal attncore.decoder's numbers (tiny random Llama, GQA)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from attncore.decoder.entropy import entropy_profile
from attncore.decoder.induction import induction
from attncore.decoder.probe import decoder_pass
from attncore.decoder.sinks import decoder_sinks, sink_variants
from attncore.decoder.streaming import StreamSetting, ablations, default_settings, stream_losses
from tests.chart_data import decode
from ui.views import decoder as view

pytestmark = pytest.mark.usefixtures("one_torch_thread")
V = 64


@pytest.fixture(scope="module")
def model() -> torch.nn.Module:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    return LlamaForCausalLM(LlamaConfig(vocab_size=V, hidden_size=32, intermediate_size=64, num_hidden_layers=3,
                                        num_attention_heads=4, num_key_value_heads=2, initializer_range=0.5,
                                        attn_implementation="eager")).eval()


@pytest.fixture(scope="module")
def ids() -> torch.Tensor:
    return torch.randint(0, V, (1, 96), generator=torch.Generator().manual_seed(2))


def _texts(L: int) -> list[str]:
    return ["\n" if i % 7 == 0 else "." if i % 7 == 3 else " the" if i % 7 == 5 else f"w{i}" for i in range(L)]


def _ys(fig) -> list[np.ndarray]:  # noqa: ANN001
    return [np.asarray(decode(t.y), dtype=np.float64) for t in fig.data]


def test_sink_views(model: torch.nn.Module, ids: torch.Tensor) -> None:
    s = decoder_sinks(model, ids, _texts(96))
    fig = view.sink_grid_figure(s, kv_heads=2)
    assert fig.layout.meta["view"] == "dec_sink_grid"
    np.testing.assert_allclose(np.asarray(decode(fig.data[0].z), dtype=np.float64), s.first_score.numpy(), rtol=1e-6)
    assert list(fig.data[0].x) == ["h0·kv0", "h1·kv0", "h2·kv1", "h3·kv1"]
    share = view.share_figure([("64 tokens", s.share.numpy()), ("96 tokens", s.share.numpy() / 2)])
    np.testing.assert_allclose(_ys(share)[1], s.share.numpy() / 2)
    kinds = view.kind_figure(s)
    order = ("newline", "punctuation", "function", "word")
    assert list(kinds.data[0].x) == ["line breaks", "punctuation", "function words", "other words"]
    np.testing.assert_allclose(_ys(kinds)[0], [s.kind_score[k] for k in order], rtol=1e-6)
    np.testing.assert_allclose(_ys(kinds)[1], [s.kind_uniform[k] for k in order], rtol=1e-6)
    val = view.value_figure(s)
    np.testing.assert_allclose(_ys(val)[1], s.value_ratio[:, 1].numpy(), rtol=1e-6)
    mas = view.massive_figure(s)
    np.testing.assert_allclose(_ys(mas)[0], s.first_norm.numpy(), rtol=1e-6)
    frame = view.massive_frame(s)
    assert len(frame) == s.top_dims.numel() and frame["dim"].iloc[0] == int(s.top_dims[0, 0])
    att = view.attractor_frame(s)
    assert att["position"].tolist() == [a.position for a in s.attractors]
    np.testing.assert_allclose(att["first token out"], [a.rest_score for a in s.attractors])
    text = view.sink_sentence(s, "At 96 tokens")
    assert f"{s.sink_heads} of {s.heads} heads" in text and f"{float(s.first_score.mean()):.3f}" in text


def test_kind_sentence_from_the_numbers(model: torch.nn.Module, ids: torch.Tensor) -> None:
    s = decoder_sinks(model, ids, _texts(96))
    text = view.kind_sentence(s)
    for kind, label in (("newline", "line breaks"), ("punctuation", "punctuation"), ("function", "function words"),
                        ("word", "other words")):
        assert f"{label} {s.kind_score[kind] / s.kind_uniform[kind]:.2f}×" in text
    assert "keys 84..95 left out" in text  # 96 - 96 // 8: the last 12 keys are not compared
    top, nxt = s.attractors[0], s.attractors[1]
    assert f"{top.text!r} at position {top.position}" in text and f"mean score {top.score:.3f}" in text
    assert f"{top.rest_score:.3f} with the first token taken out" in text
    assert f"{top.rest_score / nxt.rest_score:.2f}× the next key, {nxt.text!r} at {nxt.position}" in text
    # another text: the sentence follows its numbers (a ' the' everywhere but the first: all function words)
    s2 = decoder_sinks(model, ids, ["\n"] + [" the"] * 95)
    t2 = view.kind_sentence(s2)
    assert "function words" in t2 and "other words" not in t2 and "a function word" in t2


def test_sink_sentence_counterfactual(model: torch.nn.Module, ids: torch.Tensor) -> None:
    s = decoder_sinks(model, ids, _texts(96), eps=0.0)
    assert f"{s.heads} of {s.heads} heads (100%)" in view.sink_sentence(s, "x")
    s2 = decoder_sinks(model, ids, _texts(96), eps=0.99)
    assert f"0 of {s2.heads} heads (0%)" in view.sink_sentence(s2, "x") and "0 of 3 layers" in view.sink_sentence(s2, "x")


def test_variants_frame(model: torch.nn.Module, ids: torch.Tensor) -> None:
    var = sink_variants(model, ids, _texts(96), other_first=5, other_text="x", length=32)
    f = view.variants_frame(var)
    assert f["sink heads"].tolist() == [v.sink_heads for v in var]
    assert f["mean first-token score"].tolist() == pytest.approx([v.mean_score for v in var])


def test_stream_views(model: torch.nn.Module, ids: torch.Tensor) -> None:
    r = stream_losses(model, ids, default_settings(96))
    fig = view.stream_figure(r, block=16)
    assert fig.layout.meta["view"] == "dec_stream" and len(fig.data) == 7 + 2  # and a key per dash (first 1, 4)
    x, y = view.loss_curve(r.nll[2].numpy(), 16)
    np.testing.assert_allclose(_ys(fig)[2], r.nll[2, :80].double().view(5, 16).mean(1).numpy(), rtol=1e-6)
    assert x[0] == 7.5
    assert view.auto_block(96) == 6 and view.auto_block(4096) == 32 and view.auto_block(8) == 1
    np.testing.assert_allclose(_ys(view.stream_figure(r))[0], view.loss_curve(r.nll[0].numpy(), 6)[1], rtol=1e-6)
    frame = view.stream_frame(r)
    w = r.settings[1]
    assert frame["perplexity past the window"].iloc[1] == pytest.approx(r.ppl(w, w.window))
    d, se = r.delta(w, StreamSetting(None), w.window)
    assert frame["loss change"].iloc[1] == pytest.approx(d) and frame["± SE"].iloc[1] == pytest.approx(se)
    assert math.isnan(frame["loss change"].iloc[0])
    text = view.stream_sentence(r)
    assert f"{r.ppl(r.settings[3], 12) / r.ppl(StreamSetting(None), 12):.3g}×" in text
    only = stream_losses(model, ids, (StreamSetting(12),))
    assert "did not run" in view.stream_sentence(only)


def test_ablation_views(model: torch.nn.Module, ids: torch.Tensor) -> None:
    abl = ablations(model, [ids[:, :48], ids[:, 48:]], 0, (1, 2))
    fig = view.ablation_figure(abl)
    np.testing.assert_allclose(_ys(fig)[0], [a.mean for a in abl], rtol=1e-6)
    np.testing.assert_allclose(decode(fig.data[0].error_y.array), [a.se for a in abl], rtol=1e-6)
    f = view.ablation_frame(abl)
    assert f["windows"].tolist() == [2, 2, 2] and f["dims"].tolist() == ["", "1, 2", "1, 2"]


def test_entropy_views(model: torch.nn.Module, ids: torch.Tensor) -> None:
    e = entropy_profile(decoder_pass(model, ids))
    fig = view.entropy_figure(e)
    assert fig.layout.meta["view"] == "dec_entropy"
    np.testing.assert_allclose(_ys(fig)[0], e.median["all"].numpy())
    np.testing.assert_allclose(_ys(fig)[-1], np.log(np.arange(1, 97)))
    rest = view.entropy_figure(e, without_first=True)
    np.testing.assert_allclose(_ys(rest)[0], e.median_rest["all"].numpy())
    text = view.entropy_sentence(e)
    c = e.counts
    assert f"{c['broad']} broad" in text and f"{float(e.median['all'][-1]):.2f} nats" in text


def test_induction_views(model: torch.nn.Module) -> None:
    ind = induction(model, 16, seed=0, top=2)
    fig = view.induction_figure(ind, kv_heads=2)
    np.testing.assert_allclose(np.asarray(decode(fig.data[0].z), dtype=np.float64), ind.score.numpy(), rtol=1e-6)
    m = view.induction_map_figure(ind, ind.top[0])
    assert m.layout.meta["view"] == "dec_induction_map"
    text = view.induction_sentence(ind)
    a, b = ind.top[0]
    assert f"L{a}H{b} {float(ind.score[a, b]):.2f}" in text and f"{ind.loss_second:.2f}" in text
    assert f"{sum(1 / (16 + j + 1) for j in range(16)) / 16:.3f}" in text


def test_each_ablation_bar_prints_its_own_mean() -> None:
    """A +0.19-nat bar is invisible beside a +10-nat one on the shared axis, so each bar says its value (the
    Tour's screenshot showed only two bars); the labels are the bars' own means."""
    from attncore.decoder.streaming import Ablation
    from ui.views.decoder import ablation_figure

    deltas = {"mask first token": [0.1868, 0.1857], "zero massive dims": [10.95, 8.48],
              "mean-replace massive dims": [0.002, -0.0012]}
    abl = [Ablation(name=n, deltas=torch.tensor(d, dtype=torch.float64),
                    base=torch.tensor([3.0, 4.0], dtype=torch.float64), layer=11, dims=(507,), values=())
           for n, d in deltas.items()]
    bar = ablation_figure(abl).data[0]
    assert list(bar.text) == [f"{sum(d) / 2:+.3g}" for d in deltas.values()] == ["+0.186", "+9.71", "+0.0004"]
    assert bar.textposition == "outside" and bar.cliponaxis is False
