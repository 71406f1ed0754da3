"""AppTest: the Attention sinks page's part "a real decoder" and Entropy vs length's real-model view on
SmolLM2, at short lengths from the URL; every chart's data equals attncore.decoder's numbers."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import pytest
import torch
from streamlit.testing.v1 import AppTest

from attncore.decoder.entropy import entropy_profile
from attncore.decoder.induction import induction
from attncore.decoder.position import delete_first_token, gu_inputs
from attncore.decoder.probe import MAX_DECODER_TOKENS, decoder_pass
from attncore.decoder.sinks import GU_TOKENS, KINDS, decoder_sinks
from attncore.decoder.stream_run import load_stream_run
from attncore.decoder.streaming import ablations, default_settings, massive_point, stream_losses
from attncore.decoder.text import shipped_text, text_windows
from attncore.models import LoadedModel, load_model
from tests.chart_data import decode, figure, no_errors, run_app
from ui.text import plain
from ui.views import decoder as view
from ui.views.decoder import ablation_sentence, auto_block, kind_sentence, loss_curve
from ui.views.sink_position import deletion_sentence, eviction, eviction_sentence, gu_frame, gu_sentence

pytestmark = [pytest.mark.usefixtures("one_torch_thread"), pytest.mark.slow]
SINKS = "pages/4_Attention_sinks.py"
SHORT = dict(snk_view="decoder", dec_L="40", dec_sl="64", dec_w1="8", dec_w2="16", dec_aw="4", dec_al="32",
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


@contextmanager
def arrow_log() -> Iterator[list[logging.LogRecord]]:
    """Every record Streamlit's dataframe conversion logs (its Arrow fallback logs at INFO, with a traceback)."""
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    log = logging.getLogger("streamlit.dataframe_util")
    handler, level = Keep(level=logging.DEBUG), log.level
    log.addHandler(handler)
    log.setLevel(logging.DEBUG)
    try:
        yield records
    finally:
        log.removeHandler(handler)
        log.setLevel(level)


def test_decoder_part_charts_equal_attncore(lm: LoadedModel) -> None:
    with arrow_log() as logged:
        at = run_app(SINKS, timeout=900, **SHORT)
    no_errors(at)
    # F7 (issue 44): no table of the part falls back from Arrow (each fallback logged a traceback)
    assert not [r.getMessage() for r in logged if "Arrow" in r.getMessage()]
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
    # issue 44 item 5: the residual point in 0-based layers, as the head grid and the ablations
    assert view.massive_sentence(s) in captions and view.after_layer(s.peak_layer) in captions
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
    captions = " ".join(c.value for c in at.caption)
    assert "(uniform guessing over the 49,152-token vocabulary: ln V = 10.80)" in captions  # issue 44 item 7
    assert view.streaming_llm_sentence(r) in captions  # Table 1, then Table 2's row apart
    check_ablations_and_position(at, lm)


def check_ablations_and_position(at: AppTest, lm: LoadedModel) -> None:
    """The ablations over 4 windows of 32 tokens with their t intervals, where the sink goes when the first
    token is deleted, and Gu et al.'s inputs: charts, tables and sentences against attncore."""
    ids, _ = _ids(lm, MAX_DECODER_TOKENS)
    layer, dims = massive_point(lm.model, ids[:, :32])
    abl = ablations(lm.model, text_windows(ids, 32, 4), layer, dims)
    fig = figure(at, "dec_ablation")
    np.testing.assert_allclose(_y(fig, 0), [a.mean for a in abl], rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(decode(fig["data"][0]["error_y"]["array"]), [a.margin for a in abl], rtol=1e-3)
    captions = [c.value for c in at.caption]
    assert ablation_sentence(abl, 32) in captions
    d = delete_first_token(lm.model, ids[:, :GU_TOKENS])
    assert deletion_sentence(d, 0.3) in captions
    trace = figure(at, "dec_deletion")["data"][2]
    assert list(decode(trace["y"])) == (d.score_new_first > 0.3).sum(-1).tolist()
    assert eviction_sentence(eviction(load_stream_run().result)) in captions
    assert not [t for t in at.dataframe if "input" in t.value.columns]  # Gu et al.'s inputs: closed, not run


def check_gu_inputs(at: AppTest, lm: LoadedModel) -> None:
    """Gu et al.'s inputs (the expander opened): the table and sentence against attncore."""
    ids, _ = _ids(lm, GU_TOKENS)
    newline = int(lm.tokenizer("\n", add_special_tokens=False)["input_ids"][0])
    rows = gu_inputs(lm.model, ids, seed=0, prefix_id=newline, prefix_text="\n",
                     exclude=lm.tokenizer.all_special_ids)
    assert gu_sentence(rows) in [c.value for c in at.caption]
    shown = [t.value for t in at.dataframe if "input" in t.value.columns]
    assert len(shown) == 1
    np.testing.assert_allclose(shown[0]["sink heads, ε = 0.3 (%)"].to_numpy(),
                               gu_frame(rows)["sink heads, ε = 0.3 (%)"].to_numpy(), atol=1e-9)


def test_entropy_real_model_view(lm: LoadedModel) -> None:
    at = run_app("pages/2_Entropy_vs_length.py", timeout=900, ent_lo="4", ent_hi="8", ent_dec="1", ent_dl="48")
    no_errors(at)
    ids, _ = _ids(lm, 48)
    e = entropy_profile(decoder_pass(lm.model, ids))
    fig = figure(at, "dec_entropy")
    np.testing.assert_allclose(_y(fig, 0), e.median["all"].numpy(), rtol=1e-4)
    captions = " ".join(c.value for c in at.caption)
    assert view.classes_sentence(e) in captions and "Classes at 48 tokens" in captions  # issue 44 item 7
    at.radio(key="ent_dfirst").set_value("without").run(timeout=900)
    np.testing.assert_allclose(_y(figure(at, "dec_entropy"), 0), e.median_rest["all"].numpy(), rtol=1e-4)


def test_shipped_stream_run_expander_draws_the_stored_losses() -> None:
    """Closed, the shipped 2,048-token run sends nothing; opened, its chart's data are the stored losses'
    block means, and its sentences are made from the stored numbers."""
    from attncore.decoder.stream_run import load_stream_run
    from attncore.evidence.decoder import MODEL_LABEL
    from tests.chart_data import figures
    from ui.decoder_lab import GU_OPEN, INDUCTION_ABLATION_OPEN, SHIPPED_RUN_OPEN, SHIPPED_RUN_TITLE
    from ui.views.decoder import stream_run_caption, stream_sentence, streaming_llm_sentence

    at = run_app(SINKS, timeout=900, **SHORT)
    no_errors(at)
    assert SHIPPED_RUN_TITLE == "A shipped run at 2,048 tokens (16 settings)"
    assert any(e.label == SHIPPED_RUN_TITLE for e in at.expander)
    views = {(f["layout"].get("meta") or {}).get("view") for f in figures(at)}
    assert "dec_stream_shipped" not in views  # closed: not sent
    assert not [t for t in at.dataframe if "heads zeroed" in t.value.columns]  # closed: not run
    at.session_state[SHIPPED_RUN_OPEN] = True
    at.session_state[INDUCTION_ABLATION_OPEN] = True
    at.session_state[GU_OPEN] = True
    at.run(timeout=900)
    no_errors(at)
    check_induction_ablation(at)
    check_gu_inputs(at, load_model("smollm2"))
    run = load_stream_run()
    r = run.result
    fig = figure(at, "dec_stream_shipped")
    assert len(fig["data"]) == 16 + 2  # the settings, then a legend key per dash (first 1, first 4)
    for i, s in enumerate(r.settings):
        assert fig["data"][i]["name"] == s.label
        np.testing.assert_allclose(_y(fig, i), loss_curve(r.nll[i].numpy(), auto_block(2048))[1], rtol=1e-6)
    captions = " ".join(c.value for c in at.caption)
    assert stream_sentence(r) in captions
    assert streaming_llm_sentence(r) in captions
    assert "5158.07" in captions and "past token 1,024 of 2,048" in captions
    assert MODEL_LABEL.split(",")[0] in captions and run.header["date"] in captions
    assert f"{run.seconds_per_pass:.1f} s a pass" in stream_run_caption(run)


def check_induction_ablation(at: AppTest) -> None:
    """The expander's table and sentence: the top 3 and 8 heads (1% and 3% of 270) and 20 random sets each,
    zeroed on the 8 seeded random tokens repeated, against attncore directly."""
    from attncore.decoder.induction import ablate_induction_heads
    from ui.views.decoder import induction_ablation_frame, induction_ablation_sentence

    lm = load_model("smollm2")
    ind = induction(lm.model, 8, seed=0, exclude=lm.tokenizer.all_special_ids)
    a = ablate_induction_heads(lm.model, ind, sets=20, seed=0)
    assert a.sizes == (3, 8) and all(len(v) == 20 for v in a.random_loss.values())
    shown = [t.value for t in at.dataframe if "heads zeroed" in t.value.columns]
    assert len(shown) == 1
    want = induction_ablation_frame(a)
    assert shown[0]["top heads"].tolist() == want["top heads"].tolist()
    np.testing.assert_allclose(shown[0]["loss, top heads zeroed"], want["loss, top heads zeroed"], rtol=1e-4)
    np.testing.assert_allclose(shown[0]["random: median"], want["random: median"], rtol=1e-4)
    assert induction_ablation_sentence(a, 270, lm.model.config.vocab_size) in [c.value for c in at.caption]
