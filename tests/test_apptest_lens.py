"""AppTest: the "Logit lens" expander of Heatmaps' real text on SmolLM2 (issue 40 item 4). Closed, nothing of it
is sent; opened, the lens table, the rank line and the heads' attribution equal attncore.decoder.lens run on the
same tokens, the sentences quote those numbers, and the first token's lens carries the massive-activation
warning built from its measured norms. The builders themselves are checked on a tiny random decoder."""

from __future__ import annotations

import html

import numpy as np
import pytest
import torch

from attncore.decoder.lens import logit_lens
from attncore.models import LoadedModel, load_model, tokenize
from attncore.models.tokens import display_tokens
from tests.chart_data import decode, figure, figures, no_errors, page_device, run_app, trace
from tests.tiny_decoders import tiny_decoder
from ui.lens import LENS_OPEN
from ui.views import lens as view
from ui.views.decoder import head_labels

HEATMAPS = "pages/1_Heatmaps.py"
TEXT = "The capital of France is"


def _views(at) -> set[str]:  # noqa: ANN001
    return {(f["layout"].get("meta") or {}).get("view") for f in figures(at)}


def test_builders_draw_attncore_numbers() -> None:
    lm = tiny_decoder("llama", layers=3)
    ids = lm.tokenizer("the cat sat on the mat . the dog", return_tensors="pt")["input_ids"]
    r = logit_lens(lm.model, ids, 5, top=4)
    toks = [lm.tokenizer.convert_ids_to_tokens(row) for row in r.top_ids.tolist()]
    fig = view.lens_figure(r, toks).to_plotly_json()
    np.testing.assert_allclose(decode(fig["data"][0]["z"]), r.top_probs.numpy())
    assert fig["data"][0]["text"] == [[html.escape(t, quote=False) for t in row] for row in toks]  # as typed
    assert "&lt;/s&gt;" in str(fig["data"][0]["text"]) and list(fig["data"][0]["y"]) == ["emb", "0", "1", "2"]
    rank = view.rank_figure(r, "x").to_plotly_json()
    np.testing.assert_allclose(decode(rank["data"][0]["y"]), r.target_rank.numpy() + 1.0)
    np.testing.assert_allclose(decode(rank["data"][0]["x"]), np.arange(-1, 3))
    dla = view.dla_figure(r, head_labels(4, 2)).to_plotly_json()
    np.testing.assert_allclose(decode(dla["data"][0]["z"]), r.attribution.heads.numpy(), rtol=1e-6)
    assert list(dla["data"][0]["x"]) == head_labels(4, 2) and list(dla["data"][0]["y"]) == ["0", "1", "2"]
    diff = view.dla_figure(r, head_labels(4, 2), difference=True).to_plotly_json()
    np.testing.assert_allclose(decode(diff["data"][0]["z"]), r.difference().numpy(), rtol=1e-6)
    df = view.dla_frame(r)
    assert df["prediction"].sum() == pytest.approx(r.attribution.logit, rel=1e-5)
    assert df["difference"].sum() == pytest.approx(r.attribution.logit - r.contrast.logit, rel=1e-4, abs=1e-5)
    lf = view.lens_frame(r, toks)
    assert lf["prediction_rank"].tolist() == (r.target_rank + 1).tolist() and lf["top1"].tolist() == \
        [t[0] for t in toks]
    # the sentence follows the rank line: made up ranks, the settled point moves
    fake = type(r)(**{**r.__dict__, "target_rank": torch.tensor([7, 0, 2, 0])})
    assert view.settled_point(fake) == 3
    assert "ranks it 8 at the embeddings and has it on top only after the last layer" in view.rank_sentence(
        fake, "x", "y")
    fake = type(r)(**{**r.__dict__, "target_rank": torch.tensor([3, 0, 0, 0])})
    assert "has it on top from layer 0 on" in view.rank_sentence(fake, "x", "y")
    assert view.top_heads(np.array([[0.1, 0.5], [0.5, -1.0]]), 2) == [(0, 1, 0.5), (1, 0, 0.5)]


@pytest.fixture(scope="module")
def lm() -> LoadedModel:
    return load_model("smollm2", page_device())


@pytest.mark.slow
@pytest.mark.usefixtures("one_torch_thread")
def test_the_lens_expander_equals_attncore(lm: LoadedModel) -> None:
    at = run_app(HEATMAPS, timeout=900, rt_src="real", rt_model="smollm2", rt_text=TEXT, rt_layer="3",
                 rt_head="4", rt_tok="4")
    no_errors(at)
    assert not _views(at) & {"lens", "lens-rank", "lens-dla"}  # closed: nothing computed or sent
    at.session_state[LENS_OPEN] = True
    at.run(timeout=900)
    no_errors(at)
    ids = tokenize(lm, TEXT).ids
    r = logit_lens(lm.model, ids, 4)
    tok = lm.tokenizer
    z = decode(trace(figure(at, "lens"))["z"])
    np.testing.assert_allclose(z, r.top_probs.numpy(), rtol=1e-4, atol=1e-6)
    assert trace(figure(at, "lens"))["text"][-1][0] == "␣Paris"  # the display form, as on every axis
    shown = " ".join(str(t) for row in trace(figure(at, "lens"))["text"] for t in row)
    assert not {"Ġ", "Ċ", "▁"} & set(shown)  # issue 41 item 1: no raw byte-level marks
    np.testing.assert_allclose(decode(trace(figure(at, "lens-rank"))["y"]), r.target_rank.numpy() + 1.0)
    np.testing.assert_allclose(decode(trace(figure(at, "lens-dla"))["z"]), r.attribution.heads.numpy(),
                               rtol=1e-4, atol=1e-5)
    target = display_tokens(tok.convert_ids_to_tokens([r.target]))[0]
    caps = " ".join(c.value for c in at.caption)
    assert f"the model predicts {target} (p = {float(r.target_prob[-1]):.1%})" in caps.replace("\\", "")
    assert f"all heads {float(r.attribution.heads.sum()):+.2f}" in caps
    assert "Positions flagged for massive activations in this text: 0" in caps.replace("\\", "")
    # the first token: its lens reads the sink's massive activations, and the page says so from the norms
    at.session_state["rt_tok"] = 0
    at.run(timeout=900)
    no_errors(at)
    r0 = logit_lens(lm.model, ids, 0)
    warn = " ".join(w.value for w in at.warning).replace("\\", "")
    assert "Position 0's lens is not a prediction" in warn
    assert f"{float(r0.norm_ratio[0]):,.1f}x the median position's" in warn
