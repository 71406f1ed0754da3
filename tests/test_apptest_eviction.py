"""AppTest: the Attention sinks page's panel "Which tokens to keep" on SmolLM2 at 32 tokens: it waits for its
Run button with the memory estimate, then every chart's data equals attncore.decoder.eviction's numbers; every
control to every option; bad budgets in the URL get a plain message; the shipped run's view reads the file."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attncore.decoder import eviction_read as er
from attncore.decoder.eviction import EvictionSetting, evict_losses
from attncore.decoder.eviction_run import load_eviction_run
from attncore.decoder.text import shipped_text
from attncore.evidence.eviction import shipped_run_path
from attncore.models import LoadedModel, load_model
from tests.chart_data import decode, figure, figures, no_errors, run_app
from ui.eviction_panel import RECORD, _result, keep_store, panel_settings
from ui.text import plain
from ui.views.eviction import rolling

pytestmark = [pytest.mark.usefixtures("one_torch_thread"), pytest.mark.slow]
SINKS = "pages/4_Attention_sinks.py"
# the rest of the real decoder's part at its shortest (tests/test_apptest_decoder.py's lengths)
SHORT = dict(snk_view="decoder", dec_L="40", dec_sl="64", dec_w1="8", dec_w2="16", dec_aw="4", dec_al="32",
             dec_T="8", dec_shift="2", snk_eps="0.5")
L, B = 32, 8


@pytest.fixture(scope="module")
def lm() -> LoadedModel:
    return load_model("smollm2")


def _y(fig: dict, i: int) -> np.ndarray:
    return np.asarray(decode(fig["data"][i]["y"]), dtype=np.float64)


def test_keep_panel_waits_runs_and_equals_attncore(lm: LoadedModel) -> None:
    at = run_app(SINKS, timeout=900, **SHORT, keep_L=str(L), keep_b=str(B))
    no_errors(at)
    settings = panel_settings(L, B)
    assert len(settings) == 13  # dense + 4 policies at 5, 8, 16 (32/16 and 32/8 are raised to the first 4 + 1)
    waiting = [i.value for i in at.info if "decodes still to run" in i.value]
    assert waiting and f"13 of 13 decodes still to run ({L} tokens each" in waiting[0]
    assert "by its plan's estimate" in waiting[0] and " s by its plan's estimate" in waiting[0]
    at.button(key="keep_btn").click().run(timeout=900)
    no_errors(at)
    ids = lm.tokenizer(shipped_text(), return_tensors="pt")["input_ids"][:, :L]
    mine = (EvictionSetting("dense"), *(EvictionSetting(p, B) for p in ("window", "streaming", "h2o", "tova")))
    r = evict_losses(lm.model, ids, mine, record=RECORD)
    # the stored decodes equal attncore's, bit for bit
    for s in mine:
        got = keep_store().get((L, "cpu", s))
        assert got is not None
        torch.testing.assert_close(got[0], r.nll[r.index(s)], rtol=0, atol=0)
    pl = er.from_result(r, "t")
    fig = figure(at, "keep_budget")
    names = [d["name"] for d in fig["data"]]
    assert names == ["window", "window + first 4", "H2O", "TOVA", "dense (full cache)"]
    xs = list(decode(fig["data"][0]["x"]))
    assert xs == [5, 8, 16]
    for i, p in enumerate(("window", "streaming", "h2o", "tova")):
        np.testing.assert_allclose(_y(fig, i)[xs.index(B)], pl.ratio(p, B), rtol=1e-9)
    loss = figure(at, "keep_loss")
    for i, s in enumerate(mine):
        np.testing.assert_allclose(_y(loss, i), rolling(r.nll[r.index(s)].double().numpy()), rtol=1e-9)
    keep = figure(at, "keep_map")
    assert keep["layout"]["meta"] == {"view": "keep_map", "budget": B, "layer": 15}
    z = np.asarray(decode(_maps(keep)[3]["z"]))  # TOVA's map
    np.testing.assert_array_equal(z, r.keep_map(EvictionSetting("tova", B), 15).T.numpy().astype(np.uint8))
    first = figure(at, "keep_first")
    tova = next(d for d in first["data"] if d["name"] == "TOVA")
    assert float(_y_bar(tova, "8")) == pytest.approx(r.first_share(EvictionSetting("tova", B)), abs=1e-12)
    captions = " ".join(c.value for c in at.caption)
    full = er.from_result(_result(L, "cpu", settings), "t")
    assert plain(er.winner_sentence(full)) in captions or er.winner_sentence(full) in captions
    assert er.first_token_sentence(full) in captions
    # every option of the layer picker: the map follows, from the stored caches (no decode reruns)
    for layer in RECORD:
        at.selectbox(key="keep_layer").set_value(layer).run(timeout=900)
        no_errors(at)
        keep = figure(at, "keep_map")
        assert keep["layout"]["meta"]["layer"] == layer
        z = np.asarray(decode(_maps(keep)[0]["z"]))  # the window's map
        np.testing.assert_array_equal(z, r.keep_map(EvictionSetting("window", B), layer).T.numpy().astype(np.uint8))
    # the budget box: another stored budget redraws at once
    at.number_input(key="keep_b").set_value(16).run(timeout=900)
    no_errors(at)
    assert figure(at, "keep_map")["layout"]["meta"]["budget"] == 16
    assert not [i.value for i in at.info if "decodes still to run" in i.value]  # stored: nothing to run


def _maps(fig: dict) -> list[dict]:
    return [d for d in fig["data"] if d["type"] == "heatmap"]


def _y_bar(trace: dict, x: str) -> float:
    xs = [str(v) for v in trace["x"]]
    return float(np.asarray(decode(trace["y"]))[xs.index(x)])


@pytest.mark.parametrize(("raw", "said"), [
    ("3", "cannot hold StreamingLLM's first 4 tokens and a recent one: choose at least 5"),
    ("100", "above the text's length (32 tokens): choose at most 32"),
    ("many", "is not valid"),
])
def test_bad_budget_in_the_url_gets_a_plain_message(raw: str, said: str) -> None:
    at = run_app(SINKS, timeout=900, **SHORT, keep_L=str(L), keep_b=raw)
    assert not at.exception
    said_all = " ".join([w.value for w in at.warning] + [i.value for i in at.info] + [e.value for e in at.error]
                        + [m.value for m in at.markdown] + [c.value for c in at.caption])
    assert said in said_all
    assert "Traceback" not in said_all


def test_shipped_run_view_reads_the_file_and_says_how_many_decodes_are_in() -> None:
    at = run_app(SINKS, timeout=900, **SHORT)
    no_errors(at)
    # the length slider: another length waits for its own Run, with its own estimate (nothing decoded here)
    at.slider(key="keep_L").set_value(48).run(timeout=900)
    no_errors(at)
    n = len(panel_settings(48, 32))
    assert any(f"{n} of {n} decodes still to run (48 tokens each" in i.value for i in at.info)
    assert at.query_params["keep_L"] == ["48"] or at.query_params["keep_L"] == "48"
    views = [(f["layout"].get("meta") or {}).get("view") for f in figures(at)]
    assert "keep_shipped_budget" not in views  # closed: not read, not sent
    at.session_state["keep_shipped_open"] = True
    at.run(timeout=900)
    no_errors(at)
    run = load_eviction_run(shipped_run_path())
    for text in ("prose", "code"):
        at.radio(key="keep_text").set_value(text).run(timeout=900)
        no_errors(at)
        md = " ".join(m.value for m in at.markdown)
        assert f"Shipped run: {er.run_progress(run)}" in md
        if len(run.rows) < er.expected_decodes(run):
            assert f"{len(run.rows)} of {er.expected_decodes(run)} decodes; the rest still to be computed" in md
        try:
            pl = er.from_run(run, text)
        except Exception:
            assert any("No decode of" in i.value for i in at.info)
            continue
        fig = figure(at, "keep_shipped_budget")
        for d in fig["data"][:-1]:
            p = next(k for k, v in er.POLICY_NAMES.items() if v == d["name"])
            xs = list(decode(d["x"]))
            np.testing.assert_allclose(_y_fig(d), [pl.ratio(p, int(b)) for b in xs], rtol=1e-12)
        captions = " ".join(c.value for c in at.caption)
        assert er.winner_sentence(pl) in captions
        for b in pl.budgets:
            if ("window", b) in pl.rows and ("streaming", b) in pl.rows:
                assert er.split_sentence(er.split(pl, b), plain(pl.text)) in captions
        assert "/work" not in captions and "/home" not in captions
        assert "numbers are not shown here" in captions  # TOVA's table: the protocol in words, no numbers


def _y_fig(trace: dict) -> np.ndarray:
    return np.asarray(decode(trace["y"]), dtype=np.float64)
