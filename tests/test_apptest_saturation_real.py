"""AppTest: the Saturation & gradients page's tab "Real model" on SmolLM2 (64 and 128 tokens from the URL):
every control to every option, chart data equal to attncore.decoder.scaling's numbers, the intervention's
Run and Stop."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attncore.decoder.scaling import FACTORS, gaussian_rows, logit_spread, scaled_runs
from attncore.decoder.text import shipped_text, text_tokens
from attncore.evidence.decoder import MODEL_LABEL
from attncore.models import LoadedModel, load_model
from tests.chart_data import decode, figure, figures, no_errors, run_app
from ui.views import saturation_real as view
from ui.views import saturation_real_text as words

pytestmark = [pytest.mark.usefixtures("one_torch_thread"), pytest.mark.slow]
PAGE = "pages/3_Saturation_and_gradients.py"


@pytest.fixture(scope="module")
def lm() -> LoadedModel:
    return load_model("smollm2")


@pytest.fixture(autouse=True)
def empty_store() -> None:
    """The intervention's store is process-wide: the Tour's step (another test in this process) may have filled
    it at 64 tokens; each test here starts with it empty."""
    from ui.saturation_real import scale_store

    scale_store.clear()


def _ids(lm: LoadedModel, L: int) -> torch.Tensor:
    return text_tokens(lm.tokenizer, shipped_text(), L, min_tokens=2).ids


def _views(at) -> set[str]:
    return {(f.get("layout", {}).get("meta") or {}).get("view") for f in figures(at)}


def _arr(v) -> np.ndarray:
    return np.asarray(decode(v), dtype=np.float64)


def _markdown(at) -> str:
    return "\n".join(m.value for m in at.markdown)


def test_the_spread_and_every_control(lm: LoadedModel) -> None:
    at = run_app(PAGE, timeout=600, sat_tab="Real model", sat_rl="64")
    no_errors(at)
    assert _views(at) == {"sat-real-spread", "sat-real-heads"}  # the intervention waits for its Run button
    sp = logit_spread(lm.model, _ids(lm, 64))
    spread = figure(at, "sat-real-spread")
    heads = spread["data"][0]
    np.testing.assert_allclose(_arr(heads["x"]), sp["std"].flatten().numpy(), rtol=1e-5)
    np.testing.assert_allclose(_arr(heads["y"]), sp["jac"].flatten().numpy(), rtol=1e-5)
    g = gaussian_rows(view.SPREAD_SIGMAS, 64, seed=0)
    np.testing.assert_allclose(_arr(spread["data"][1]["y"]), g["jac"].numpy(), rtol=1e-5)
    assert words.spread_sentence(sp, words.gauss_at(g, view.SPREAD_SIGMAS)[1.0], MODEL_LABEL) in _markdown(at)
    for stat in view.HEAD_STATS:  # every option of the per-head map
        at.selectbox(key="sat_rstat").set_value(stat).run()
        no_errors(at)
        assert at.query_params.get("sat_rstat", "std") == stat  # a default leaves the URL
        z = _arr(figure(at, "sat-real-heads")["data"][0]["z"])
        np.testing.assert_allclose(z.reshape(sp[stat].shape), sp[stat].numpy(), rtol=1e-5, atol=1e-7)
    sp128 = logit_spread(lm.model, _ids(lm, 128))
    for L in (128, 256, 512):  # every option of the length; 128 checked against attncore
        at.select_slider(key="sat_rl").set_value(L).run()
        no_errors(at)
        assert at.query_params.get("sat_rl", "128") == str(L)
        assert f"On {L:,} tokens" in _markdown(at)
        if L == 128:
            x = _arr(figure(at, "sat-real-spread")["data"][0]["x"])
            np.testing.assert_allclose(x, sp128["std"].flatten().numpy(), rtol=1e-5)


def test_the_intervention_runs_stops_and_matches_attncore(lm: LoadedModel) -> None:
    at = run_app(PAGE, timeout=600, sat_tab="Real model", sat_rl="64")
    no_errors(at)
    at.session_state["sat_scale__stopped"] = True  # Stop pressed: nothing runs, the page says so
    at.run()
    assert any("Stopped." in i.value for i in at.info)
    at.button(key="sat_scale_btn").click().run()
    no_errors(at)
    runs = scaled_runs(lm.model, _ids(lm, 64), FACTORS)
    fig = figure(at, "sat-real-scale")
    ppl = [t for t in fig["data"] if t.get("name") == "SmolLM2" and t.get("xaxis", "x") in ("x", "x1")]
    assert len(ppl) == 1
    np.testing.assert_allclose(_arr(ppl[0]["x"]), FACTORS)
    np.testing.assert_allclose(_arr(ppl[0]["y"]), [r.perplexity for r in runs], rtol=1e-5)
    sat = [t for t in fig["data"] if t.get("name") == "SmolLM2" and t.get("xaxis") == "x4"][0]
    np.testing.assert_allclose(_arr(sat["y"]), [r.saturated90 for r in runs], atol=1e-6)
    g = gaussian_rows(FACTORS, 64, seed=0)
    law = [t for t in fig["data"] if t.get("xaxis") == "x4" and t.get("line", {}).get("dash") == "dash"][0]
    np.testing.assert_allclose(_arr(law["y"]), g["above90"].numpy(), rtol=1e-5)
    assert words.scale_sentence(runs, words.gauss_at(g, FACTORS), len(FACTORS)) in _markdown(at)
    assert lm.model.model.layers[0].self_attn.scaling == 0.125
