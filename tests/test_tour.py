"""The Tour's registry and lesson sentences, without Streamlit: each sentence fed counterfactual numbers says
what those numbers say (the wording turns with them), and the registry is what the page and its links need."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from ui import tour
from ui.nav import PAGES
from ui.views import tour as view

ROOT = Path(__file__).resolve().parents[1]


def test_registry_is_complete_and_points_at_real_pages() -> None:
    keys = [s.key for s in tour.STEPS]
    assert len(keys) == len(set(keys)) and 8 <= len(keys) <= 16
    pages = {e.path for e in PAGES}
    params = [p.key for p in tour.step_params()]
    assert len(params) == len(set(params))
    for s in tour.STEPS:
        assert s.page in pages and (ROOT / s.page).is_file(), s.page
        assert len(s.params) <= 2
        assert all(p.key.startswith("tour_") for p in s.params)
    assert PAGES[0].path == "pages/0_Tour.py"  # first in the navigation


def test_stages_lesson_quotes_its_numbers() -> None:
    text = view.stages_lesson(64, 8.27, 1.03, 0.125, 0.31)
    assert "std 8.27 (theory √d_k = 8.00)" in text and "std 1.03" in text
    assert "1/√d_k = 0.125" in text and "faded 8.00 times" in text and "averages 0.31" in text
    assert "faded 32.0 times" in view.stages_lesson(1024, 33.1, 1.0, 1 / 32, 0.2)


def test_histogram_lesson() -> None:
    text = view.histogram_lesson(256, 20_000, 16.04, 0.081, 1.0025, 0.0051)
    assert text.startswith("Over 20,000 draws at d = 256, q·k has std 16.0 ± 0.081 (theory √d = 16.0)")
    assert "std 1.00 ± 0.0051" in text


def test_saturation_lesson_verdict_turns_with_the_numbers() -> None:
    below = view.saturation_lesson(4, 0.99, 5.70, 5.69, 8.0)
    assert "from x = 5.70 (closed form 5.69), below the std 8.00" in below
    above = view.saturation_lesson(4096, 0.99, 12.9, 12.9, 8.0)
    assert "above the std 8.00" in above


def test_jacobian_lesson_turns_when_scaling_passes_less() -> None:
    more = view.jacobian_lesson(16, 0.305, 0.172, 64, 1.7, 0.335)
    assert "1.8 times as much gradient reaches the scores when they are scaled" in more
    less = view.jacobian_lesson(16, 0.1, 0.3, 64, 1.7, 0.335)
    assert "scaling passes 3.0 times less gradient back" in less
    assert "σ = √64 = 8.00" in more and "The peak, 0.335, is at σ ≈ 1.7" in more


def test_interpolate_is_linear_in_log_x() -> None:
    x, y = [1.0, 100.0], [0.0, 2.0]
    assert view.interpolate(x, y, 10.0) == pytest.approx(1.0)
    assert view.interpolate(x, y, 1.0) == 0.0


def test_overflow_lesson() -> None:
    text = view.overflow_lesson("float16", 11.2202, 11.09, False)
    assert "first returns NaN or ∞ at x = 11.22" in text and "at x = 11.09" in text
    assert "stays finite and exact" in text
    never = view.overflow_lesson("float64", None, 709.8, False)
    assert "stays finite over the range" in never
    assert "fails too" in view.overflow_lesson("float16", 11.2, 11.09, True)


def test_entropy_lesson_compares_with_log_n() -> None:
    text = view.entropy_lesson(16, 16_384, 2.37, 9.23, 1.0, 0.226, 0.0023)
    assert f"log n − σ²/2 = {math.log(16) - 0.5:.2f} and {math.log(16_384) - 0.5:.2f}" in text
    assert "from 2.37 to 9.23 nats" in text and "from 0.226 to 0.0023" in text
    sharper = view.entropy_lesson(16, 16_384, 1.0, 7.0, 2.0, 0.5, 0.01)
    assert f"{math.log(16) - 2.0:.2f}" in sharper and "(σ = 2.00)" in sharper


def test_sink_lesson() -> None:
    text = view.sink_lesson(6.0, 0.89, 0.88, 0.031, 0.034, 0.273)
    assert "logit is 6 (real keys: 0 ± 1) takes 0.89 of every row (theory 0.88)" in text
    assert "output RMS is 0.031 (theory 0.034) against 0.273 without it" in text


def test_learned_lesson_names_the_variants_with_and_without_a_sink() -> None:
    rows = [("softmax", 3, 3, 0.90), ("softmax1", 0, 3, 0.0003), ("gated", 0, 3, 0.13),
            ("sink logit b₀=-5", 3, 3, 0.83)]
    text = view.learned_lesson(rows, 0.3, "Over the grid: at some settings only.")
    assert text.startswith("In the shipped runs (one setting: rotary positions, learning rate 0.01, 600 steps) "
                           "softmax formed a sink in 3 of 3 seeds (BOS weight 0.90); ")
    assert text.endswith("over the last 3 evaluation points, from positions with nothing to copy. Over the grid: "
                         "at some settings only.")
    assert "sink logit b₀=-5 formed a sink in 3 of 3 seeds (BOS weight 0.83)" in text
    assert "softmax1, gated in none (BOS weight at most 0.13)" in text
    assert "more than 0.3 of the weight" in text
    nobody = view.learned_lesson([("softmax", 0, 3, 0.1)], 0.3)
    assert "formed a sink" not in nobody and "softmax in none (BOS weight at most 0.1)" in nobody
    assert view.learned_lesson([], 0.3) == "No finished run to read."


def test_memory_lesson() -> None:
    text = view.memory_lesson(4096, 4, 3 * 4 * 4096**2 * 4, 5.2 * 2**20)
    assert "holds 768.0 MiB" in text and "flash kernel 5.2 MiB, 148 times less" in text
    assert "1.0 GiB" in view.memory_lesson(8192, 1, 2**30, 2**20)


def test_evidence_lesson() -> None:
    assert view.evidence_lesson("d2l", "6 claims: 6 hold.", 0) == "d2l, checked on this machine: 6 claims: 6 hold."
    assert view.evidence_lesson("x", "1 claim: 1 holds.", 1).endswith("adds 1 slower test.")
    assert view.evidence_lesson("x", "", 2).endswith("adds 2 slower tests.")


def test_figures_carry_their_view_and_numbers() -> None:
    import pandas as pd

    df = pd.DataFrame({"n": [16, 32], "entropy": [2.3, 3.0], "entropy_sem": [0.05, 0.04]})
    th = pd.DataFrame({"n": [16, 23, 32], "entropy": [2.27, 2.6, 2.97]})
    fig = view.entropy_figure(df, th)
    assert fig.layout.meta["view"] == "tour-entropy"
    measured = [t for t in fig.data if t.name == "measured (±2 s.e.)"][0]
    np.testing.assert_allclose(measured.y, [2.3, 3.0], rtol=1e-6)
    np.testing.assert_allclose(measured.error_y.array, [0.1, 0.08], rtol=1e-6)
    mem = view.memory_figure([256, 512], [2**20, 4 * 2**20], [2**19, 2**19], 512)
    assert mem.layout.meta["view"] == "tour-memory"
    np.testing.assert_allclose([t for t in mem.data if t.name == "math: T × T matrices"][0].y, [1.0, 4.0])


def test_evidence_summary_agrees_in_number() -> None:
    """Correction: one row read '1 hold with a caveat'; a count of one takes the singular."""
    from types import SimpleNamespace

    from attncore.evidence import CAVEAT, HOLDS, MISPRINT
    from ui.views import evidence as ev_view

    def rows(*verdicts: str) -> list:
        return [SimpleNamespace(judgement=SimpleNamespace(verdict=v)) for v in verdicts]

    assert ev_view.summary(rows(HOLDS, HOLDS, CAVEAT, MISPRINT)) == \
        "4 claims: 2 hold, 1 holds with a caveat, 1 is a misprint in the source."
    assert ev_view.summary(rows(CAVEAT, CAVEAT)) == "2 claims: 2 hold with a caveat."


def test_the_step_count_the_pages_state_is_the_registrys() -> None:
    words = {10: "ten", 11: "eleven", 12: "twelve", 13: "thirteen", 14: "fourteen", 15: "fifteen", 16: "sixteen"}
    n = words[len(tour.STEPS)]
    assert f"a lecture in {n} steps" in PAGES[0].summary
    assert "TOUR.summary" in (ROOT / "app.py").read_text(encoding="utf-8")  # the home page says the entry's words
    for doc in ("README.md", "docs/pages.md"):
        assert f"a lecture in {n} steps" in (ROOT / doc).read_text(encoding="utf-8"), doc


def test_real_sink_lesson_follows_the_deletion_the_interval_and_the_eviction() -> None:
    from ui.views.sink_position import Eviction

    ev = Eviction(window=256, sinks=4, length=2048, dense=36.78, alone=77.02, kept=40.28)
    text = view.real_sink_lesson(213, 270, 64, 0.3, (213, 0, 217), 11, 23454.4, 23841.9, 0.046, 0.021, 4, 128,
                                 ev)
    assert text.startswith("In SmolLM2, 213 of 270 heads (79%) put more than 0.3 of their weight on the first "
                           "token at 64 tokens. Hiding that token from every query deletes it, and the sink moves: "
                           "token 1, a sink for 0 heads while second, becomes one for 217 once first (residual "
                           "norm after layer 11: 23,454, the original first token's 23,842).")
    assert ("Deleting it changes the loss by +0.046 ± 0.021 nats per token over 4 windows of 128 tokens (95% t "
            "interval): what losing the text's first word costs, not what losing the sink costs.") in text
    assert text.endswith("at W = 256 of 2,048 tokens, a window alone raises perplexity past it 2.09× over dense "
                         "(77.02 against 36.78); keeping the first 4 tokens brings it to 1.095×.")
    # counterfactual numbers: the interval holds 0, is below 0; the sink does not follow; no shipped run
    assert "no change beyond the noise" in view.real_sink_lesson(213, 270, 64, 0.3, (213, 0, 217), 11, 1.0, 2.0,
                                                                 0.01, 0.02, 4, 128, ev)
    assert "does slightly better" in view.real_sink_lesson(213, 270, 64, 0.3, (213, 0, 217), 11, 1.0, 2.0,
                                                           -0.05, 0.02, 4, 128, ev)
    other = view.real_sink_lesson(87, 270, 64, 0.3, (87, 3, 20), 11, 1.0, 2.0, 0.2, 0.05, 5, 128, None)
    assert "the sink does not simply move: token 1 draws more than 0.3 in 20 heads once first (3 while second)" \
        in other
    assert "over 5 windows" in other and "StreamingLLM" not in other
