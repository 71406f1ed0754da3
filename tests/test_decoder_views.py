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
    np.testing.assert_allclose(decode(fig.data[0].error_y.array), [a.margin for a in abl], rtol=1e-6)
    f = view.ablation_frame(abl)
    assert f["windows"].tolist() == [2, 2, 2] and f["dims"].tolist() == ["", "1, 2", "1, 2"]
    np.testing.assert_allclose(f["± 95% (t)"], [12.706 * a.se for a in abl], rtol=1e-9)


def _abl(deltas: dict[str, list[float]], layer: int = 11) -> list:
    from attncore.decoder.streaming import Ablation

    return [Ablation(name=n, deltas=torch.tensor(d, dtype=torch.float64),
                     base=torch.full((len(d),), 3.0, dtype=torch.float64), layer=-1 if i == 0 else layer,
                     dims=() if i == 0 else (507,)) for i, (n, d) in enumerate(deltas.items())]


def test_ablation_frame_keeps_numbers_numeric_and_shows_missing_as_a_dash() -> None:
    """F7 (issue 44): a blank in the "after layer" column made it text beside numbers, and every render wrote an
    Arrow traceback to the server log. The column is numeric now (missing: NA), Arrow converts the frame, and
    the page's table shows the missing cell as "—"."""
    import pyarrow as pa

    abl = _abl({"delete first token": [0.05, 0.03, 0.06, 0.04], "zero massive dims": [9.1, 9.6, 9.4, 9.5]})
    f = view.ablation_frame(abl)
    assert str(f["after layer"].dtype) == "Int64" and f["after layer"].isna().tolist() == [True, False]
    assert all(np.issubdtype(f[c].dtype, np.number) for c in ("loss change", "± 95% (t)", "SE", "windows"))
    pa.Table.from_pandas(f)  # raises on a mixed column
    shown = view.ablation_table(abl)
    pa.Table.from_pandas(shown.data)
    assert shown.data["after layer"].tolist() == ["—", "11"] and shown.data["dims"].tolist() == ["—", "507"]
    assert ">0.0450<" in shown.to_html()


def test_ablation_sentence_reads_the_t_interval() -> None:
    abl = _abl({"delete first token": [0.05, 0.03, 0.06, 0.04], "zero massive dims": [9.1, 9.6, 9.4, 9.5]})
    text = view.ablation_sentence(abl, 256)
    se = float(torch.tensor([0.05, 0.03, 0.06, 0.04], dtype=torch.float64).std()) / 2
    assert text.startswith("Loss change over 4 windows of 256 tokens, nats per token (mean ± 95% t interval, "
                           "t(0.975, 3) = 3.182 × the standard error): ")
    assert f"delete first token +0.045 ± {3.182 * se:.3f}; zero massive dims +9.400 ± " in text


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
    # issue 44 item 7: the classes are said to depend on the length, with the length
    classes = view.classes_sentence(e)
    assert classes.startswith("Classes at 96 tokens:") and "depend on the length" in classes
    assert ", ".join(f"{k}: {c[k]}" for k in ("sink-dominated", "local", "broad")) in classes
    short = entropy_profile(decoder_pass(model, ids[:, :40]))
    assert view.classes_sentence(short).startswith("Classes at 40 tokens:")


def test_induction_views(model: torch.nn.Module) -> None:
    ind = induction(model, 16, seed=0, top=2)
    fig = view.induction_figure(ind, kv_heads=2)
    np.testing.assert_allclose(np.asarray(decode(fig.data[0].z), dtype=np.float64), ind.score.numpy(), rtol=1e-6)
    m = view.induction_map_figure(ind, ind.top[0])
    assert m.layout.meta["view"] == "dec_induction_map"
    text = view.induction_sentence(ind)
    a, b = ind.top[0]
    assert f"L{a}H{b} {float(ind.score[a, b]):.2f}" in text and f"{ind.loss_second:.2f}" in text
    # issue 44 item 7: the first copy's loss beside uniform guessing over the vocabulary, ln V
    assert ind.vocab == V
    assert (f"loss {ind.loss_first:.2f} nats on the first copy (uniform guessing over the {V:,}-token "
            f"vocabulary: ln V = {math.log(V):.2f})") in text
    assert f"{sum(1 / (16 + j + 1) for j in range(16)) / 16:.3f}" in text


def test_each_ablation_bar_prints_its_own_mean() -> None:
    """A +0.19-nat bar is invisible beside a +10-nat one on the shared axis, so each bar says its value (the
    Tour's screenshot showed only two bars); the labels are the bars' own means."""
    from attncore.decoder.streaming import Ablation
    from ui.views.decoder import ablation_figure

    deltas = {"delete first token": [0.1868, 0.1857], "zero massive dims": [10.95, 8.48],
              "mean-replace massive dims": [0.002, -0.0012]}
    abl = [Ablation(name=n, deltas=torch.tensor(d, dtype=torch.float64),
                    base=torch.tensor([3.0, 4.0], dtype=torch.float64), layer=11, dims=(507,), values=())
           for n, d in deltas.items()]
    bar = ablation_figure(abl).data[0]
    assert list(bar.text) == [f"{sum(d) / 2:+.3g}" for d in deltas.values()] == ["+0.186", "+9.71", "+0.0004"]
    assert bar.textposition == "outside" and bar.cliponaxis is False


def test_one_layer_convention(model: torch.nn.Module, ids: torch.Tensor) -> None:
    """Issue 44 item 5: one residual point, one layer number. Residual point p is the output of
    model.layers[p - 1]; the caption, chart and table name it 'after layer p - 1' (0-based, as the head grid
    and the ablations), the embeddings -1."""
    s = decoder_sinks(model, ids, _texts(96))
    with torch.no_grad():
        out = model(ids, output_hidden_states=True)
    for p in range(1, 3):  # the last hidden state has the final norm applied
        np.testing.assert_allclose(float(s.first_norm[p]), float(out.hidden_states[p][0, 0].norm()), rtol=1e-4)
    assert view.after_layer(0) == "after the embeddings" and view.after_layer(12) == "after layer 11"
    text = view.massive_sentence(s)
    assert text.startswith(f"The first token's norm peaks {view.after_layer(s.peak_layer)} at ")
    assert f"after layer {s.peak_layer}" not in text or s.peak_layer == 0
    fig = view.massive_figure(s)
    assert list(decode(fig.data[0].x)) == list(range(-1, 3)) and "−1 = embeddings" in fig.layout.xaxis.title.text
    frame = view.massive_frame(s)
    assert sorted(set(frame["after layer"])) == [-1, 0, 1, 2]


def test_stream_table_shows_a_dash_with_its_reason(model: torch.nn.Module, ids: torch.Tensor) -> None:
    """Issue 44 item 10: the dense row has no change against itself; its cells read "—" (st.dataframe prints
    a null as "None" whatever the Styler says, so they are text), and its note says why."""
    import pyarrow as pa

    from ui.widgets import presented_frame

    r = stream_losses(model, ids, default_settings(96))
    styled = view.stream_table(r)
    shown = styled.data
    raw = view.stream_frame(r)
    dense = shown.iloc[0]
    assert dense["setting"] == "dense" and dense["loss change"] == "—" and dense["± SE"] == "—"
    assert "no change against dense" in dense["note"] and shown["note"].iloc[1] == ""
    assert shown["loss change"].iloc[1] == f"{raw['loss change'].iloc[1]:+.4f}"
    assert shown["± SE"].iloc[1] == f"{raw['± SE'].iloc[1]:.4f}"
    assert not shown.isna().any().any()  # nothing for the grid to print as "None"
    pa.Table.from_pandas(shown)  # one type per column: Arrow takes it (no mixed numbers and text)
    assert view.STREAM_CONFIG == {"loss change": {"alignment": "right"}, "± SE": {"alignment": "right"}}
    text, right = presented_frame(styled, view.STREAM_CONFIG)  # presenter mode: the same cells
    assert text["loss change"].iloc[0] == "—" and "loss change" in right


def _ind_ablation(top3: float, top8: float) -> object:
    from attncore.decoder.induction import InductionAblation

    rand = {3: torch.tensor([1.1, 1.3, 1.2, 1.0], dtype=torch.float64),
            8: torch.tensor([1.4, 1.2, 1.5, 1.3], dtype=torch.float64)}
    return InductionAblation(copy_length=64, base=1.0, first_copy=10.2, sizes=(3, 8),
                             top={3: ((5, 1), (6, 2), (7, 0)), 8: tuple((i, 0) for i in range(8))},
                             top_loss={3: top3, 8: top8}, random_loss=rand)


def test_induction_ablation_sentence_and_frame_follow_the_numbers() -> None:
    a = _ind_ablation(2.5, 1.45)
    text = view.induction_ablation_sentence(a, 270, 49152)
    assert text.startswith("Loss on the second copy of 64 random tokens: 1.000 nats with every head (first copy "
                           "10.20; uniform guessing ln V = 10.8); ")
    assert ("zeroing the top 3 heads by induction score (1% of 270) changes it by +1.500 nats, more than every "
            "one of 4 random sets of 3 (largest +0.300); the random sets' median +0.150") in text
    assert ("zeroing the top 8 heads by induction score (3% of 270) changes it by +0.450 nats, and 1 of 4 random "
            "sets of 8 change it as much or more; the random sets' median +0.350") in text
    f = view.induction_ablation_frame(a)
    assert f["heads zeroed"].tolist() == [3, 8] and f["top heads"][0] == "L5H1, L6H2, L7H0"
    assert f["random sets as high"].tolist() == [0, 1]
    assert f["Δ vs none"].tolist() == pytest.approx([1.5, 0.45])
    assert "~32%" in view.crosbie_caption() and "arXiv 2407.07011" in view.crosbie_caption()
