"""The real-model tab's sentences and figures (ui.views.saturation_real*), fed counterfactual numbers: every
number a sentence quotes comes from its input, and every comparison word follows the numbers."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from attncore.decoder.scaling import FACTORS, STAT_NAMES, LogitSpread, ScaledRun
from ui.views import saturation_real as view
from ui.views import saturation_real_text as words


def _spread(std: list[float], a90: float, L: int = 100) -> LogitSpread:
    n = len(std)
    full = {name: torch.full((1, n), 0.5, dtype=torch.float64) for name in STAT_NAMES}
    full["std"] = torch.tensor([std], dtype=torch.float64)
    full["above90"] = torch.full((1, n), a90, dtype=torch.float64)
    full["above99"] = torch.full((1, n), a90 / 2, dtype=torch.float64)
    full["gap"] = torch.full((1, n), 3.25, dtype=torch.float64)
    full["jac"] = torch.full((1, n), 0.125, dtype=torch.float64)
    return LogitSpread(length=L, head_dim=64, scale=0.125, stats=full)


def _run(c: float, ppl: float, sat: float, sink: float, ent: float) -> ScaledRun:
    nll = torch.full((9,), math.log(ppl))
    return ScaledRun(factor=c, nll=nll, entropy=torch.full((2, 2), ent), first_score=torch.tensor(
        [[0.9 if i < round(4 * sink) else 0.1 for i in range(4)]]).view(2, 2), above90=torch.full((2, 2), sat),
        above99=torch.full((2, 2), sat / 2), eps=0.3, seconds=0.5)


GAUSS1 = {"above90": 0.02, "gap": 0.9, "jac": 0.3}


@pytest.mark.parametrize(("a90", "word"), [(0.40, "more saturated than"), (0.001, "less saturated than"),
                                           (0.0201, "about as saturated as")])
def test_spread_sentence_quotes_its_numbers(a90: float, word: str) -> None:
    s = words.spread_sentence(_spread([0.4, 1.0, 2.5, 9.0], a90, L=321), GAUSS1, "Model X")
    assert "On 321 tokens, the 4 heads of Model X spread" in s
    assert "**0.40 to 9.00**" in s and "(median 1.00)" in s  # torch's median: the lower middle value
    assert "2 of 4 heads are wider than 2 and 1 narrower than 0.5" in s
    assert "against 2% for N(0, 1) logits" in s and "is 3.25 against 0.90" in s and "0.125 against 0.300" in s
    assert f"the trained rows are {word} the law predicts" in s


def test_scale_sentence_follows_the_runs() -> None:
    runs = [_run(0.125, 900.0, 0.0, 0.0, 3.0), _run(1.0, 40.0, 0.25, 0.75, 1.5), _run(8.0, 250.0, 0.8, 0.5, 0.2)]
    gauss = {1.0: {"above90": 0.03}, 8.0: {"above90": 0.6}}
    s = words.scale_sentence(runs, gauss, 7)
    assert s.startswith("3 of 7 settings ran. Perplexity is lowest at **c = 1** (40.0).")
    assert "(c = 8) perplexity is **250.0**, 6.25× the trained scale's 40.0" in s
    assert "go from 25% to 80% (i.i.d. N(0, c²) rows predict 3% and 60%)" in s
    assert "from 1.50 to 0.20 nats" in s and "sink heads from 75% to 50%" in s
    assert "Flattening instead (c = 0.125) gives perplexity 900.0 and 0% sink heads." in s
    # a counterfactual world where the unscaled model is best: the sentence names it
    other = [_run(1.0, 40.0, 0.25, 0.75, 1.5), _run(8.0, 20.0, 0.8, 0.5, 0.2)]
    s2 = words.scale_sentence(other, {}, 7)
    assert "lowest at **c = 8** (20.0)" in s2 and "0.50× the trained" in s2 and "predict" not in s2
    assert "Flattening" not in s2
    assert words.scale_sentence([], {}, 7) == "No setting has run yet."
    assert "2 of 7 settings ran" in words.scale_sentence(runs[:2], gauss, 7) and "(c = 8)" not in \
        words.scale_sentence(runs[:2], gauss, 7)


def test_figures_carry_the_numbers() -> None:
    sp = _spread([0.4, 1.0, 2.5, 9.0], 0.3)
    sig = (0.0, 1.0, 2.0)
    gauss = {n: torch.tensor([0.1, 0.2, 0.3], dtype=torch.float64) for n in STAT_NAMES}
    fig = view.spread_figure(sp, sig, gauss)
    assert fig.layout.meta["view"] == "sat-real-spread"
    np.testing.assert_allclose(np.asarray(fig.data[0].x), [0.4, 1.0, 2.5, 9.0], rtol=1e-6)
    np.testing.assert_allclose(np.asarray(fig.data[1].y), [0.1, 0.2, 0.3], rtol=1e-6)
    assert fig.data[1].line.dash == "dash"
    for stat in view.HEAD_STATS:
        z = np.asarray(view.heads_figure(sp, stat, 2).data[0].z, dtype=float)
        np.testing.assert_allclose(z, sp[stat].numpy(), rtol=1e-6)
    frame = view.spread_frame(sp)
    assert list(frame["std"]) == [0.4, 1.0, 2.5, 9.0] and list(frame["head"]) == [0, 1, 2, 3]
    runs = [_run(c, 10.0 + c, 0.1 * i, 0.25, 1.0) for i, c in enumerate(FACTORS)]
    g = {n: torch.linspace(0, 1, len(FACTORS), dtype=torch.float64) for n in STAT_NAMES}
    sf = view.scale_figure(runs, FACTORS, g)
    assert sf.layout.meta["view"] == "sat-real-scale"
    np.testing.assert_allclose(np.asarray(sf.data[0].y), [10.0 + c for c in FACTORS], rtol=1e-5)
    table = view.scale_frame(runs)
    np.testing.assert_allclose(table["perplexity"], [10.0 + c for c in FACTORS], rtol=1e-5)
    np.testing.assert_allclose(table["rows > 0.9"], [0.1 * i for i in range(len(FACTORS))], atol=1e-6)


def test_tour_lesson_turns_with_the_numbers() -> None:
    one, eight = _run(1.0, 40.0, 0.25, 0.75, 1.5), _run(8.0, 250.0, 0.8, 0.5, 0.2)
    s = words.tour_lesson(64, one, eight, 0.03, 0.6)
    assert "on 64 tokens): perplexity goes from 40.0 to **250.0** (6.25× worse)" in s
    assert "rise from 25% to **80%** (i.i.d. N(0, c²) logits predict 3% and 60%)" in s
    assert "rows are more saturated than the seed's law predicts; without it most rows" in s
    # counterfactual: the unscaled model better, fewer rows saturated, the trained rows flatter than the law
    s2 = words.tour_lesson(64, _run(1.0, 40.0, 0.02, 0.75, 1.5), _run(8.0, 20.0, 0.005, 0.5, 0.2), 0.03, 0.6)
    assert "(0.50× better)" in s2 and "fall from 2% to **0.5%**" in s2
    assert "less saturated than the seed's law" in s2 and "fewer than half of the rows" in s2
