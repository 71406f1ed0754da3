"""Predict, then reveal (issue 41, item 3): the question registry, its scoring and the class poll, fed
counterfactual numbers (change the numbers, and the correct option changes with them); the exported files'
text escaped."""

from __future__ import annotations

import math
import threading

import numpy as np
import plotly.graph_objects as go
import pytest

from ui import export, questions
from ui.poll import MAX_BUCKETS, Poll
from ui.questions import Question, ask, bucket, buckets, key, score
from ui.tour import STEPS

DEFAULTS = {p.key: p.default for s in STEPS for p in s.params}


def asked(step: str, **values) -> Question:
    q = ask(step, {**DEFAULTS, **values})
    assert q is not None
    return q


def correct(step: str, numbers: dict, **values) -> int:
    q = asked(step, **values)
    k = key(q, {**DEFAULTS, **values}, numbers)
    assert k.correct is not None
    return k.correct


def test_every_question_belongs_to_a_tour_step_with_the_controls_it_reads() -> None:
    steps = {s.key for s in STEPS}
    assert set(questions.QUESTIONS) <= steps
    assert len(questions.QUESTIONS) >= 8
    for name in questions.QUESTIONS:
        q = asked(name)
        assert q.step == name and q.prompt
        assert len(q.options) <= questions.CHOICE_LIMIT <= MAX_BUCKETS


def test_histograms_the_law_nearest_the_measured_spread_is_correct() -> None:
    q = asked("histograms", tour_d=256)
    assert q.options[1].startswith("like √d: std ≈ 16.0")  # the options are made from d
    assert correct("histograms", {"std_raw": 16.1}, tour_d=256) == 1  # √256 = 16
    assert correct("histograms", {"std_raw": 250.0}, tour_d=256) == 0  # counterfactual: grows like d
    assert correct("histograms", {"std_raw": 1.02}, tour_d=256) == 3  # counterfactual: does not grow
    assert correct("histograms", {"std_raw": 4.1}, tour_d=256) == 2  # ∜256 = 4
    for d in (4, 16, 64, 1024):  # asked at every d but 1
        assert ask("histograms", {**DEFAULTS, "tour_d": d}) is not None
    assert "≈ 8.00 at d = 64" in asked("histograms", tour_d=64).options[1]  # the control moves the options


def test_histograms_is_not_asked_where_the_laws_coincide() -> None:
    assert ask("histograms", {**DEFAULTS, "tour_d": 1}) is None  # every law gives std 1 at d = 1
    assert ask("learned", DEFAULTS) is None and ask("no-such-step", DEFAULTS) is None


def test_numeric_questions_take_the_measured_number_and_a_tolerance() -> None:
    q = asked("stages", tour_dk=64)
    k = key(q, DEFAULTS, {"raw_std": 8.0, "scaled_std": 1.0})
    assert k.value == pytest.approx(8.0) and k.tolerance == pytest.approx(0.8)
    assert score(q, k, 8.5) is True and score(q, k, 9.0) is False and score(q, k, None) is None
    k2 = key(q, DEFAULTS, {"raw_std": 8.0, "scaled_std": 4.0})  # counterfactual: a fade of 2
    assert score(q, k2, 8.0) is False and score(q, k2, 2.1) is True
    qs = asked("sink", tour_s=6.0)
    ks = key(qs, DEFAULTS, {"sink_weight": 0.93})
    assert score(qs, ks, 0.9) is True and score(qs, ks, 0.5) is False
    assert (bucket(qs, ks, 0.5), bucket(qs, ks, 0.93), bucket(qs, ks, 1.5)) == (0, 1, 2)
    for bad in ("nan", float("inf"), "x", 1e300, None):
        assert score(qs, ks, bad) is None and bucket(qs, ks, bad) is None
    qx = asked("saturation", tour_sn=4)
    assert key(qx, DEFAULTS, {"crossing": 5.69}).value == pytest.approx(5.69)


def test_jacobian_overflow_entropy_memory_follow_their_numbers() -> None:
    assert correct("jacobian", {"j_scaled": 0.6, "j_unscaled": 0.05}) == 0
    assert correct("jacobian", {"j_scaled": 0.05, "j_unscaled": 0.6}) == 2
    assert correct("jacobian", {"j_scaled": 0.5, "j_unscaled": 0.45}) == 1
    assert correct("overflow", {"first_naive": 11.1, "stable_fails": False}) == 0
    assert correct("overflow", {"first_naive": None, "stable_fails": False}) == 2
    assert correct("overflow", {"first_naive": 11.1, "stable_fails": True}) == 1
    n = np.array([16, 16384])
    assert correct("entropy", {"entropy": np.array([2.3, 9.2]), "n": n}) == 0
    assert correct("entropy", {"entropy": np.array([2.3, 2.4]), "n": n}) == 1
    assert correct("entropy", {"entropy": np.array([9.0, 2.0]), "n": n}) == 2
    assert correct("memory", {"materialised": 1000.0, "fused": 9.0}) == 2  # ~111x -> 100x
    assert correct("memory", {"materialised": 1000.0, "fused": 1.2}) == 3
    assert asked("memory", tour_T=65536).prompt.startswith("At T = 65,536 tokens")


def test_real_sink_where_the_sink_goes_is_decided_by_the_head_counts() -> None:
    """Delete the first token: the sink moves to token 1 when it is a sink for at least half as many heads
    (ui.views.sink_position.sink_moved's rule), else it does not simply move."""
    from ui.views.sink_position import sink_moved
    assert correct("real_sink", {"moved": (120, 3, 100)}) == 0 and sink_moved(120, 100)
    assert correct("real_sink", {"moved": (120, 3, 10)}) == 1 and not sink_moved(120, 10)


def test_choice_scoring_takes_only_an_option_index() -> None:
    q = asked("jacobian")
    k = key(q, DEFAULTS, {"j_scaled": 0.6, "j_unscaled": 0.05})
    assert score(q, k, 0) is True and score(q, k, 1) is False
    for bad in (None, -1, 3, "0", 0.0, True):
        assert score(q, k, bad) is None and bucket(q, k, bad) is None
    assert buckets(q) == q.options


def test_a_question_id_changes_with_its_wording() -> None:
    a, b = asked("sink", tour_s=6.0), asked("sink", tour_s=2.0)
    assert a.qid != b.qid and a.qid == asked("sink", tour_s=6.0).qid and a.qid.startswith("sink:")


# ------------------------------------------------------------------------------------------ the poll


def test_the_poll_counts_moves_and_is_bounded() -> None:
    p = Poll(max_questions=3)
    labels = ("a", "b", "c")
    p.record("q1", labels, 0)
    p.record("q1", labels, 0)
    p.record("q1", labels, 2, previous=0)  # one student changed their answer
    t = p.tally("q1")
    assert t is not None and t.counts == (1, 0, 1) and t.total == 2
    p.record("q1", labels, 5)  # no such bucket: ignored
    assert p.tally("q1").total == 2
    p.record("q1", ("x",) * 50, 0)  # other labels: a fresh count, at most MAX_BUCKETS of them
    assert p.tally("q1").counts == (1,) + (0,) * (MAX_BUCKETS - 1)
    for i in range(10):
        p.record(f"z{i}", labels, 1)
    assert len(p) == 3 and p.tally("q1") is None and p.tally("z9").counts == (0, 1, 0)
    p.clear()
    assert len(p) == 0


def test_the_poll_loses_no_count_under_threads() -> None:
    p = Poll()

    def many() -> None:
        for _ in range(2000):
            p.record("q", ("a", "b"), 1)

    threads = [threading.Thread(target=many) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert p.tally("q").counts == (0, 16_000)


# ------------------------------------------------------------------------------------------ exported files

EVIL = '</script><script>alert(1)</script><b>x</b>'


def test_the_worksheet_escapes_and_links_every_question() -> None:
    q = Question("sink", EVIL, ("<i>a</i>", "b & c"))
    page = export.worksheet_html([export.Sheet(1, EVIL, q, 'Tour?tour=7&x="><script>'),
                                  export.Sheet(2, "n", asked("stages"), "Tour?tour=1")])
    assert "<script" not in page and "<b>" not in page and "<i>" not in page
    assert "&lt;i&gt;a&lt;/i&gt;" in page and "b &amp; c" in page
    assert 'href="Tour?tour=7&amp;x=&quot;&gt;' in page
    assert page.count('class="q"') == 2 and "Print" in page


def test_decks_and_chart_files_hold_escaped_text_and_unbreakable_json() -> None:
    fig = go.Figure(go.Scatter(x=[1, 2], y=[3, 4], name=EVIL)).update_layout(meta={"view": "a/b c"})
    deck = export.deck_html([export.Slide(EVIL, EVIL, EVIL, (fig, fig))])
    assert deck.count("<script") == 4  # plotly.js, two figures' JSON, the navigation; nothing from the text
    assert "alert(1)</script>" not in deck and "&lt;b&gt;x&lt;/b&gt;" in deck
    assert "cdn.plot.ly/plotly" not in deck.split("</head>")[1] and "ArrowRight" in deck
    assert export.filename(fig) == "a-b-c"
    single = export.figure_html(fig)
    assert len(single) > 3_000_000 and "toImageButtonOptions" in single  # plotly.js inline
    cfg = export.chart_config("svg", "x")["toImageButtonOptions"]
    assert (cfg["format"], cfg["width"], cfg["height"], cfg["scale"]) == ("svg", 1920, 1080, 1)
    assert export.chart_config("gif")["toImageButtonOptions"]["format"] == "png"
    assert math.isclose(export.PRESENTER_SIZE[0] / export.PRESENTER_SIZE[1], 16 / 9)


def test_the_readme_says_what_the_code_does() -> None:
    from pathlib import Path

    from ui.poll import MAX_QUESTIONS
    text = (Path(__file__).resolve().parents[1] / "docs" / "pages.md").read_text()  # the README links it
    words = {8: "eight", 9: "nine", 10: "ten", 11: "eleven"}
    assert f"{words[len(questions.QUESTIONS)]} steps ask a question first" in text
    assert f"at most {MAX_QUESTIONS} questions" in text
    assert "saves the chart at {}×{} as PNG or SVG".format(*export.PRESENTER_SIZE) in text
