"""The induction section's sentences and figures (ui.views.induction) without Streamlit: each sentence fed
counterfactual numbers says what those numbers say."""

from __future__ import annotations

import math

import numpy as np

from attncore.training.induction import summarize
from attncore.training.induction_model import uniform_scores
from tests.chart_data import decode
from ui.views import induction as view


def _rec(seed: int, ind_after: float, second_end: float, fall_at: int = 2) -> dict:
    steps = [0, 50, 100, 150, 200]
    second = [4.2] * fall_at + [second_end] * (len(steps) - fall_at)
    ind = [[[0.0], [0.05]]] * fall_at + [[[0.0], [ind_after]]] * (len(steps) - fall_at)
    prev = [[[0.06], [0.0]]] * fall_at + [[[0.7], [0.0]]] * (len(steps) - fall_at)
    return {"config": {"seed": seed}, "seed": seed, "steps": steps, "loss_first": [4.2] * len(steps),
            "loss_second": second, "induction": ind, "previous": prev, "prev_head": [0, 0], "ind_head": [1, 0]}


def test_verdict_turns_with_the_seeds_that_formed() -> None:
    every = view.verdict_sentence(summarize([_rec(s, 0.9, 0.1) for s in range(3)]))
    assert every.startswith("In every one of the 3 seeds an induction head formed: at the end the loss on the "
                            "second copy is 0.100 nats against 4.20 on the first")
    assert f"(ln 64 = {math.log(64):.2f}" in every
    none = view.verdict_sentence(summarize([_rec(s, 0.2, 0.1) for s in range(3)]))
    assert none.startswith("In none of the 3 seeds an induction head formed by the rule")
    some = view.verdict_sentence(summarize([_rec(0, 0.9, 0.1), _rec(1, 0.9, 3.0), _rec(2, 0.9, 0.1)]))
    assert some.startswith("In 2 of the 3 seeds an induction head formed")


def test_phase_and_scores_sentences_quote_their_numbers() -> None:
    s = summarize([_rec(0, 0.9, 0.1, 2), _rec(1, 0.8, 0.1, 3), _rec(2, 0.85, 0.1, 4)])
    text = view.phase_sentence(s)
    assert "seed 0: step 75, seed 1: step 125, seed 2: step 175" in text
    assert "came at step 125 (95% t interval" in text and "over 3 seeds" in text
    sc = view.scores_sentence(s, 16)
    u_ind, u_prev = uniform_scores(16)
    assert "induction head put 0.050 of its weight" in sc and "after it 0.850 (95% t interval" in sc
    assert "it rose" in sc and f"scores {u_ind:.3f} and {u_prev:.3f}" in sc
    flat = summarize([_rec(0, 0.01, 4.2)])
    assert "it did not rise" in view.scores_sentence(flat, 16)
    assert "after it 0.010:" in view.scores_sentence(flat, 16)  # one seed: no interval


def test_curves_figure_marks_each_seeds_phase_change_and_draws_the_means() -> None:
    runs = [_rec(s, 0.9, 0.1, 2 + s) for s in range(3)]
    fig = view.curves_figure(runs, [75.0, 125.0, 175.0]).to_plotly_json()
    assert fig["layout"]["meta"]["view"] == "tr-ind-curves"
    xs = sorted({sh["x0"] for sh in fig["layout"]["shapes"]})
    assert xs == [75.0, 125.0, 175.0]
    (mean,) = [t for t in fig["data"] if t["name"] == "loss, second copy, mean of 3 seeds"]
    np.testing.assert_allclose(decode(mean["y"]), np.mean([r["loss_second"] for r in runs], axis=0), rtol=1e-6)


def test_tour_lesson_turns_with_the_numbers() -> None:
    formed = view.tour_lesson(summarize([_rec(s, 0.9, 0.1, 2 + s) for s in range(3)]))
    assert formed.startswith("In all 3 seeds a 2-layer attention-only model learned to copy a repeated random "
                             "sequence: the second copy's loss fell from 4.20 to 0.100 nats, steepest at step 125")
    assert "within 50 of its 200 steps" in formed and "went from 0.050 before to 0.900 after" in formed
    failed = view.tour_lesson(summarize([_rec(s, 0.1, 4.2) for s in range(3)]))
    assert failed.startswith("In none of 3 seeds did a 2-layer attention-only model learn, by the rule")
    assert "within" not in failed  # no fall: no span said
