"""AppTest: the "Activation patching" expander of Heatmaps' real text on SmolLM2 (issue 40 item 5). Closed,
nothing of it is sent; opened on the factual-recall pair, it waits for its Run button, then both maps equal
attncore.decoder.patching run on the same pair and the sentence quotes their numbers; an own pair of different
token counts, or with an answer of two tokens, gets a plain message. The builders are checked on a tiny random
decoder, the sentence against made-up grids."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attncore.decoder.patching import PAIRS, Patching, activation_patching, pair_ids
from attncore.models import LoadedModel, load_model
from tests.chart_data import decode, figure, figures, no_errors, page_device, run_app, trace
from tests.tiny_decoders import tiny_decoder
from ui.views import patching as view
from ui.views.decoder import head_labels

HEATMAPS = "pages/1_Heatmaps.py"
OPEN = "rt-patch_open"


def _views(at) -> set[str]:  # noqa: ANN001
    return {(f["layout"].get("meta") or {}).get("view") for f in figures(at)}


@pytest.mark.usefixtures("one_torch_thread")
def test_builders_draw_attncore_numbers() -> None:
    lm = tiny_decoder("llama", layers=3, seed=3)
    pair = pair_ids(lm.tokenizer, "the cat sat on the mat", "the dog sat on the mat", "cat", "dog")
    r = activation_patching(lm.model, pair)
    toks = ["the", "<b>dog</b>", "sat", "on", "the", "mat"]
    fig = view.resid_figure(r, toks).to_plotly_json()
    np.testing.assert_allclose(decode(fig["data"][0]["z"]), r.resid.numpy())
    assert list(fig["data"][0]["x"])[1] == "1 &lt;b&gt;dog&lt;/b&gt;"  # drawn as typed, columns unique
    heads = view.heads_figure(r, head_labels(4, 2)).to_plotly_json()
    np.testing.assert_allclose(decode(heads["data"][0]["z"]), r.heads.numpy())
    df = view.patching_frame(r, toks)
    assert len(df) == 3 * 6 + 3 * 4
    np.testing.assert_allclose(df[df.part == "head"].recovered_share.to_numpy(), r.heads.numpy().reshape(-1))


def _made_up(resid: list[list[float]], heads: list[list[float]], done: int = 3) -> Patching:
    return Patching(clean_diff=2.0, corrupted_diff=-1.5, resid=torch.tensor(resid, dtype=torch.float64),
                    heads=torch.tensor(heads, dtype=torch.float64), resid_done=done, heads_done=done)


def test_the_sentence_reads_the_numbers() -> None:
    nan = float("nan")
    r = _made_up([[0.0, 0.9, 0.1], [0.0, 0.7, 0.3], [0.0, 0.2, 1.0]], [[0.05, 0.4], [0.0, -0.2], [0.3, 0.12]])
    s = view.patching_sentence(r, ["a", "b", "c"], "X", "Y")
    assert "is +2.00 on the clean prompt and -1.50 on the corrupted one" in s
    assert "layers 0–1 at position 1 (b), ≥ 0.70; layer 2 at position 2 (c), ≥ 1.00" in s
    assert "layer 0 head 1 (+0.40), layer 2 head 0 (+0.30), layer 2 head 1 (+0.12); 3 recover 0.10" in s
    assert "Computed so far" not in s
    # counterfactual: nothing over 0.5 in the residual, and a partial run
    r = _made_up([[0.0, 0.4, 0.1], [nan, nan, nan], [nan, nan, nan]], [[0.05, 0.4], [nan, nan], [nan, nan]], 1)
    s = view.patching_sentence(r, ["a", "b", "c"], "X", "Y")
    assert "Computed so far: 2 of 6 layer steps" in s
    assert "No single position of the residual stream recovers 0.5 or more in the 1 layers computed" in s
    assert "Of the 2 heads computed, the largest shares: layer 0 head 1 (+0.40), layer 0 head 0 (+0.05)" in s
    assert view.carriers(r) == [] and view.top_heads(r, 1) == [(0, 1, 0.4)]


@pytest.fixture(scope="module")
def lm() -> LoadedModel:
    return load_model("smollm2", page_device())


@pytest.mark.slow
@pytest.mark.usefixtures("one_torch_thread")
def test_the_patching_expander_equals_attncore(lm: LoadedModel) -> None:
    capital = PAIRS[1]
    at = run_app(HEATMAPS, timeout=900, rt_src="real", rt_model="smollm2", rt_text=capital.clean,
                 rt_pp=capital.key)
    no_errors(at)
    assert not _views(at) & {"patch-resid", "patch-heads"}  # closed: nothing computed or sent
    at.session_state[OPEN] = True
    at.run(timeout=900)
    no_errors(at)
    assert not _views(at) & {"patch-resid", "patch-heads"}  # waits for its Run button (estimate over 4 s)
    at.button(key="rt-patch_btn").click()
    at.run(timeout=900)
    no_errors(at)
    pair = pair_ids(lm.tokenizer, capital.clean, capital.corrupted, capital.answer, capital.wrong)
    r = activation_patching(lm.model, pair)
    np.testing.assert_allclose(decode(trace(figure(at, "patch-resid"))["z"]), r.resid.numpy(), atol=1e-4)
    np.testing.assert_allclose(decode(trace(figure(at, "patch-heads"))["z"]), r.heads.numpy(), atol=1e-4)
    caps = " ".join(c.value for c in at.caption).replace("\\", "")
    assert f"is {r.clean_diff:+.2f} on the clean prompt and {r.corrupted_diff:+.2f} on the corrupted one" in caps
    lay, h, v = view.top_heads(r, 1)[0]
    assert f"layer {lay} head {h} ({v:+.2f})" in caps
    # own pairs: different token counts, an answer of two tokens: plain messages, nothing drawn
    at.session_state["rt_pp"] = "own"
    at.run(timeout=900)
    at.text_input(key="rt-patch_corrupted").input("When John went to the store, Mary gave a drink to")
    at.button[[b.label for b in at.button].index("Use this pair")].click()
    at.run(timeout=900)
    no_errors(at)
    info = " ".join(i.value for i in at.info).replace("\\", "")
    assert "the clean prompt has 14 tokens and the corrupted one 12" in info
    at.text_input(key="rt-patch_corrupted").input("When John and Mary went to the store, Mary gave a drink to")
    at.text_input(key="rt-patch_answer").input(" Maryanne**x**")
    at.button[[b.label for b in at.button].index("Use this pair")].click()
    at.run(timeout=900)
    no_errors(at)
    info = " ".join(i.value for i in at.info).replace("\\", "")
    assert "the answer token is" in info and "not 1" in info
    assert not _views(at) & {"patch-resid", "patch-heads"}
