"""AppTest: the Attention sinks page's part "a real decoder" on the user's own text (issue 30, item 3).
Switch the text to "Your own text", type one, and the sink grid, the share curves and the variants equal
attncore.decoder's numbers on SmolLM2's tokens of that text; the captions name it; an empty or too short
text gets a plain message and markdown / HTML in it is seen as typed."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from attncore.decoder.sinks import GU_TOKENS, decoder_sinks, sink_variants
from attncore.decoder.text import MIN_TEXT_TOKENS, SHIPPED_TEXT_NAME
from attncore.models import LoadedModel, load_model
from attncore.plan import Plan
from tests.chart_data import decode, figure, no_errors, run_app
from tests.test_text_injection import ALL, assert_plain
from ui.decoder_lab import VARIANTS_OPEN

pytestmark = [pytest.mark.usefixtures("one_torch_thread"), pytest.mark.slow]
SINKS = "pages/4_Attention_sinks.py"
SHORT = dict(snk_view="decoder", dec_L="40", dec_sl="64", dec_w1="8", dec_w2="16", dec_aw="4", dec_al="32",
             dec_T="8", dec_shift="2", snk_eps="0.5")
# between 40 (the length asked) and 64 (Gu et al.'s protocol) SmolLM2 tokens: both notes are exercised
TEXT = ("The quick brown fox jumps over the lazy dog.\nA second line, with commas; and a colon: here.\n\n"
        "Third paragraph: it ends with a question? Yes, and then one more short line.\n")


@pytest.fixture(scope="module")
def lm() -> LoadedModel:
    return load_model("smollm2")


def _tokens(lm: LoadedModel, text: str) -> tuple[torch.Tensor, list[str]]:
    ids = lm.tokenizer(text, return_tensors="pt")["input_ids"]
    return ids, [lm.tokenizer.decode([int(i)]) for i in ids[0]]


def _captions(at) -> str:  # noqa: ANN001
    return " ".join(c.value for c in at.caption)


def _variants(at) -> pd.DataFrame:  # noqa: ANN001
    return next(d.value for d in at.dataframe if "sink heads" in d.value.columns)


def test_own_text_charts_equal_attncore(lm: LoadedModel) -> None:
    at = run_app(SINKS, timeout=900, **SHORT)
    no_errors(at)
    assert f"Text: {SHIPPED_TEXT_NAME}, shipped with the app." in _captions(at)
    at.radio(key="dec_src").set_value("own").run(timeout=900)
    no_errors(at)
    assert any("Type or paste a text" in i.value for i in at.info)
    assert not [f for f in at.get("plotly_chart") if "dec_sink_grid" in f.proto.spec]
    at.text_area(key="dec_text").set_value(TEXT).run(timeout=900)
    no_errors(at)
    ids, texts = _tokens(lm, TEXT)
    total = ids.shape[1]
    assert 40 < total < GU_TOKENS
    s = decoder_sinks(lm.model, ids[:, :40], texts[:40], eps=0.5)
    s_all = decoder_sinks(lm.model, ids, texts, eps=0.5)  # Gu et al.'s 64 do not fit: the whole text
    grid = np.asarray(decode(figure(at, "dec_sink_grid")["data"][0]["z"]), dtype=np.float64)
    np.testing.assert_allclose(grid, s.first_score.numpy(), rtol=1e-4, atol=1e-6)
    share = figure(at, "dec_sink_share")["data"]
    np.testing.assert_allclose(np.asarray(decode(share[0]["y"]), dtype=np.float64), s_all.share.numpy(),
                               atol=1e-6)
    np.testing.assert_allclose(np.asarray(decode(share[1]["y"]), dtype=np.float64), s.share.numpy(), atol=1e-6)
    caps = _captions(at)
    assert f"Text: your text, {total} tokens. " in caps
    assert f"At {total} tokens (their protocol asks for {GU_TOKENS}; the text has {total}): " \
           f"{s_all.sink_heads} of 270 heads" in caps
    assert f"At 40 tokens: {s.sink_heads} of 270 heads" in caps
    assert SHIPPED_TEXT_NAME not in caps.split("This panel runs")[0]
    assert any(f"Your text gives {total} tokens, fewer than the {GU_TOKENS} of Gu et al.'s protocol" in i.value
               for i in at.info)
    # does content matter: on the same text, at what is left after the shift of 2, run when opened
    assert not any("sink heads" in d.value.columns for d in at.dataframe)  # closed: not run
    at.session_state[VARIANTS_OPEN] = True
    at.run(timeout=900)
    no_errors(at)
    caps = _captions(at)
    other = int(lm.tokenizer(" the", add_special_tokens=False)["input_ids"][0])
    var = sink_variants(lm.model, ids, texts, other_first=other, other_text=" the", shift=2, length=total - 2,
                        eps=0.5)
    df = _variants(at)
    assert df["sink heads"].tolist() == [v.sink_heads for v in var]
    np.testing.assert_allclose(df["mean first-token score"], [v.mean_score for v in var], rtol=1e-4)
    assert df["first token"].tolist() == [repr(texts[0]), repr(" the"), repr(texts[2])]
    assert f"At {total - 2} tokens (Gu et al.'s {GU_TOKENS} do not fit in the text shifted by 2): " \
           f"{var[0].sink_heads} sink heads as written" in caps
    # the panels that stay on the shipped text say so
    assert f"This panel runs on the shipped text ({SHIPPED_TEXT_NAME}), not on yours." in caps
    assert f"The ablations run on the shipped text ({SHIPPED_TEXT_NAME}), not on yours." in caps
    assert at.query_params["dec_src"] == "own" and at.query_params["dec_text"] == TEXT


def test_bad_text_is_plain(lm: LoadedModel) -> None:
    short = "Hello there, world."
    n = lm.tokenizer(short, return_tensors="pt")["input_ids"].shape[1]
    assert n < MIN_TEXT_TOKENS
    at = run_app(SINKS, timeout=900, **SHORT, dec_src="own", dec_text=short)
    no_errors(at)
    warned = " ".join(w.value for w in at.warning)
    assert f"the text gives {n} tokens; the measurements need at least {MIN_TEXT_TOKENS}." in warned
    assert "Nothing to measure until the text above gives enough tokens." in _captions(at)
    at.text_area(key="dec_text").set_value("   \n ").run(timeout=900)
    no_errors(at)
    assert any("Type or paste a text" in i.value for i in at.info) and not at.warning
    # markdown, HTML, LaTeX and shortcodes are read as text and shown as typed wherever they appear
    payload = " ".join(ALL)
    at.text_area(key="dec_text").set_value(payload).run(timeout=900)
    no_errors(at)
    assert_plain(at, "dec_text with every payload")
    ids, texts = _tokens(lm, payload)
    s = decoder_sinks(lm.model, ids[:, :40], texts[:40], eps=0.5)
    grid = np.asarray(decode(figure(at, "dec_sink_grid")["data"][0]["z"]), dtype=np.float64)
    np.testing.assert_allclose(grid, s.first_score.numpy(), rtol=1e-4, atol=1e-6)
    assert f"Text: your text, {ids.shape[1]} tokens. " in _captions(at)
    assert at.text_area(key="dec_text").value == payload


def test_a_shift_past_a_short_text_says_so_plainly(lm: LoadedModel) -> None:
    """F8: dec_shift=32 on a 24-token text said the shift 'leaves -8' tokens."""
    text = "The quick brown fox jumps over the lazy dog. A second line, with commas; and a colon here."
    total = lm.tokenizer(text, return_tensors="pt")["input_ids"].shape[1]
    assert MIN_TEXT_TOKENS <= total < 32
    at = run_app(SINKS, timeout=900, **{**SHORT, "dec_shift": "32"}, dec_src="own", dec_text=text)
    no_errors(at)
    said = [i.value for i in at.info if "the variants need" in i.value]
    assert said == [f"Your text gives {total} tokens; a shift of 32 tokens goes past its whole length, fewer "
                    f"than the {MIN_TEXT_TOKENS} the variants need. Lower the shift to {total - MIN_TEXT_TOKENS} "
                    "or less, or use a longer text."], said
    assert not any("sink heads" in d.value.columns for d in at.dataframe)  # no variants table


def test_a_short_own_text_first_view_is_one_pass(lm: LoadedModel, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 41 item 7c: a text of at most 64 tokens (and the length asked) reads the same tokens at Gu et al.'s
    64 and at L, so the first view runs one pass of the sink heads, not two; the variants run when opened."""
    from ui import cached

    text = "Every student in the class typed a sentence of their own, and the model read each one of them."
    total = lm.tokenizer(text, return_tensors="pt")["input_ids"].shape[1]
    assert MIN_TEXT_TOKENS <= total <= 40
    ran: list[str] = []
    real = Plan.run
    monkeypatch.setattr(Plan, "run", lambda self: ran.append(self.label) or real(self))
    cached.result_cache().clear()
    at = run_app(SINKS, timeout=900, **SHORT, dec_src="own", dec_text=text)
    no_errors(at)
    assert ran.count("the sink heads") == 1 and "the three variants" not in ran, ran
    ids, texts = _tokens(lm, text)
    s = decoder_sinks(lm.model, ids, texts, eps=0.5)
    grid = np.asarray(decode(figure(at, "dec_sink_grid")["data"][0]["z"]), dtype=np.float64)
    np.testing.assert_allclose(grid, s.first_score.numpy(), rtol=1e-4, atol=1e-6)
    assert len(figure(at, "dec_sink_share")["data"]) == 1  # one length: one curve
    at.session_state[VARIANTS_OPEN] = True
    at.run(timeout=900)
    no_errors(at)
    assert ran.count("the sink heads") == 1 and ran.count("the three variants") == 1, ran
    assert _variants(at)["sink heads"].tolist()
