"""AppTest: the Attention sinks page's part "a real decoder" and Entropy vs length's real-model view on
SmolLM2, at short lengths from the URL; every chart's data equals attncore.decoder's numbers."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attncore.decoder.entropy import entropy_profile
from attncore.decoder.induction import induction
from attncore.decoder.probe import decoder_pass
from attncore.decoder.sinks import KINDS, decoder_sinks
from attncore.decoder.streaming import default_settings, stream_losses
from attncore.decoder.text import shipped_text
from attncore.models import LoadedModel, load_model
from tests.chart_data import decode, figure, no_errors, run_app
from ui.text import plain
from ui.views.decoder import auto_block, kind_sentence, loss_curve

pytestmark = [pytest.mark.usefixtures("one_torch_thread"), pytest.mark.slow]
SINKS = "pages/4_Attention_sinks.py"
SHORT = dict(snk_view="decoder", dec_L="40", dec_sl="64", dec_w1="8", dec_w2="16", dec_aw="2", dec_al="32",
             dec_T="8", dec_shift="2", snk_eps="0.5")


@pytest.fixture(scope="module")
def lm() -> LoadedModel:
    return load_model("smollm2")


def _ids(lm: LoadedModel, L: int) -> tuple[torch.Tensor, list[str]]:
    ids = lm.tokenizer(shipped_text(), return_tensors="pt")["input_ids"][:, :L]
    return ids, [lm.tokenizer.decode([int(i)]) for i in ids[0]]


def _z(fig: dict) -> np.ndarray:
    return np.asarray(decode(fig["data"][0]["z"]), dtype=np.float64)


def _y(fig: dict, i: int) -> np.ndarray:
    return np.asarray(decode(fig["data"][i]["y"]), dtype=np.float64)


def test_decoder_part_charts_equal_attncore(lm: LoadedModel) -> None:
    at = run_app(SINKS, timeout=900, **SHORT)
    no_errors(at)
    ids, texts = _ids(lm, 40)
    s = decoder_sinks(lm.model, ids, texts, eps=0.5)
    np.testing.assert_allclose(_z(figure(at, "dec_sink_grid")), s.first_score.numpy(), rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(_y(figure(at, "dec_sink_share"), 1), s.share.numpy(), atol=1e-6)
    np.testing.assert_allclose(_y(figure(at, "dec_massive"), 0), s.first_norm.numpy(), rtol=1e-4)
    np.testing.assert_allclose(_y(figure(at, "dec_value"), 0), s.value_ratio[:, 0].numpy(), rtol=1e-4)
    captions = " ".join(c.value for c in at.caption)
    assert f"At 40 tokens: {s.sink_heads} of 270 heads" in captions and "more than ε = 0.5" in captions
    # what else draws weight: the kinds with the first token taken out, their sentence from the same numbers
    kinds = [k for k in KINDS if k in s.kind_score]
    np.testing.assert_allclose(_y(figure(at, "dec_kinds"), 0), [s.kind_score[k] for k in kinds], rtol=1e-4)
    np.testing.assert_allclose(_y(figure(at, "dec_kinds"), 1), [s.kind_uniform[k] for k in kinds], rtol=1e-6)
    assert plain(kind_sentence(s)) in captions
    # the StreamingLLM panel waits for its button, then draws every setting
    assert any("7 of 7 settings still to run" in i.value for i in at.info)
    at.button(key="dec_stream_btn").click().run(timeout=900)
    no_errors(at)
    ids64, _ = _ids(lm, 64)
    r = stream_losses(lm.model, ids64, default_settings(64, (8, 16)))
    fig = figure(at, "dec_stream")
    assert len(fig["data"]) == 7 + 2  # the settings, then a legend key per dash (first 1, first 4)
    for i in range(7):
        np.testing.assert_allclose(_y(fig, i), loss_curve(r.nll[i].numpy(), auto_block(64))[1], rtol=1e-4)
    ind = induction(lm.model, 8, seed=0, exclude=lm.tokenizer.all_special_ids)
    np.testing.assert_allclose(_z(figure(at, "dec_induction")), ind.score.numpy(), rtol=1e-4, atol=1e-6)


def test_entropy_real_model_view(lm: LoadedModel) -> None:
    at = run_app("pages/2_Entropy_vs_length.py", timeout=900, ent_lo="4", ent_hi="8", ent_dec="1", ent_dl="48")
    no_errors(at)
    ids, _ = _ids(lm, 48)
    e = entropy_profile(decoder_pass(lm.model, ids))
    fig = figure(at, "dec_entropy")
    np.testing.assert_allclose(_y(fig, 0), e.median["all"].numpy(), rtol=1e-4)
    at.radio(key="ent_dfirst").set_value("without").run(timeout=900)
    np.testing.assert_allclose(_y(figure(at, "dec_entropy"), 0), e.median_rest["all"].numpy(), rtol=1e-4)


def test_shipped_stream_run_expander_draws_the_stored_losses() -> None:
    """Closed, the shipped 2,048-token run sends nothing; opened, its chart's data are the stored losses'
    block means, and its sentences are made from the stored numbers."""
    from attncore.decoder.stream_run import load_stream_run
    from attncore.evidence.decoder import MODEL_LABEL, STREAMING_LLM_TABLE
    from tests.chart_data import figures
    from ui.decoder_lab import SHIPPED_RUN_OPEN, SHIPPED_RUN_TITLE
    from ui.views.decoder import stream_run_caption, stream_sentence, streaming_llm_sentence

    at = run_app(SINKS, timeout=900, **SHORT)
    no_errors(at)
    assert SHIPPED_RUN_TITLE == "A shipped run at 2,048 tokens (16 settings)"
    assert any(e.label == SHIPPED_RUN_TITLE for e in at.expander)
    views = {(f["layout"].get("meta") or {}).get("view") for f in figures(at)}
    assert "dec_stream_shipped" not in views  # closed: not sent
    at.session_state[SHIPPED_RUN_OPEN] = True
    at.run(timeout=900)
    no_errors(at)
    run = load_stream_run()
    r = run.result
    fig = figure(at, "dec_stream_shipped")
    assert len(fig["data"]) == 16 + 2  # the settings, then a legend key per dash (first 1, first 4)
    for i, s in enumerate(r.settings):
        assert fig["data"][i]["name"] == s.label
        np.testing.assert_allclose(_y(fig, i), loss_curve(r.nll[i].numpy(), auto_block(2048))[1], rtol=1e-6)
    captions = " ".join(c.value for c in at.caption)
    assert stream_sentence(r) in captions
    assert streaming_llm_sentence(r, STREAMING_LLM_TABLE) in captions
    assert "5,158.07" in captions and "past token 1,024 of 2,048" in captions
    assert MODEL_LABEL.split(",")[0] in captions and run.header["date"] in captions
    assert f"{run.seconds_per_pass:.1f} s a pass" in stream_run_caption(run)
