"""AppTest: the Tour's predict-then-reveal and its exports (issue 41, items 3 and 4). "Predict first" off by
default and carried by the URL; with it on, a step with a question hides its lesson and chart until Reveal;
the verdict against attncore's own numbers; one student's answer counted once in the lecturer's presenter
view (counts only); a moved control asks anew; the export buttons; every chart's camera button at the
presenter size in the session's format."""

from __future__ import annotations

import json
import math

import pytest
from streamlit.testing.v1 import AppTest

from attncore.dot_products import dot_histograms
from attncore.sinks import SinkSpec, normaliser_zoo
from tests.chart_data import figures, no_errors, page_device, run_app
from ui import questions, tour
from ui.poll import POLL
from ui.text import plain

pytestmark = pytest.mark.usefixtures("one_torch_thread")

PAGE = "pages/0_Tour.py"
KEYS = [s.key for s in tour.STEPS]
QUESTION_STEPS = [pytest.param(k, marks=pytest.mark.slow) if k == "real_sink" else k  # loads SmolLM2
                  for k in questions.QUESTIONS]


@pytest.fixture(autouse=True)
def _fresh_poll():
    POLL.clear()
    yield
    POLL.clear()


def run(**query: str) -> AppTest:
    return run_app(PAGE, timeout=900, **query)


def number(key: str) -> int:
    return KEYS.index(key) + 1


def answer_widget(at: AppTest):
    found = [w for w in (*at.radio, *at.number_input) if str(w.key).startswith("_tq_")]
    assert len(found) <= 1
    return found[0] if found else None


def texts(at: AppTest) -> str:
    return " ".join(str(e.value) for e in (*at.success, *at.warning, *at.info, *at.markdown, *at.caption))


def test_predict_first_is_off_by_default_and_its_toggle_hides_the_chart() -> None:
    at = run(tour="2")
    no_errors(at)
    toggle = at.toggle(key="tour_predict")
    assert toggle.value is False and len(figures(at)) == 1 and answer_widget(at) is None
    toggle.set_value(True).run()
    no_errors(at)
    assert at.query_params["tour_predict"] == "1"
    assert figures(at) == [] and answer_widget(at) is not None
    assert at.button(key="tour_reveal").label == "Reveal"


@pytest.mark.parametrize("key", QUESTION_STEPS)
def test_every_question_hides_the_step_until_reveal(key: str) -> None:
    at = run(tour=str(number(key)))
    shown = len(figures(at))
    lesson = [m.value for m in at.markdown][-1]
    at = run(tour=str(number(key)), tour_predict="1")
    no_errors(at)
    assert figures(at) == [] and lesson not in texts(at)
    q = questions.ask(key, {p.key: p.default for p in tour.STEPS[number(key) - 1].params})
    assert q is not None and q.prompt in texts(at).replace("\\", "")
    at.button(key="tour_reveal").click().run()  # revealed without an answer: nothing counted
    no_errors(at)
    assert len(figures(at)) == shown and lesson in texts(at) and "no answer" in texts(at)
    assert POLL.tally(q.qid) is None


def test_the_histogram_question_is_decided_by_attncores_spread() -> None:
    at = run(tour="2", tour_d="64", tour_predict="1")
    h = dot_histograms(64, 20_000, 60, seed=0, device=page_device())
    laws = [64.0, 8.0, 64 ** 0.25, 1.0]  # d, √d, ∜d, 1 at d = 64
    right = min(range(4), key=lambda i: abs(math.log(laws[i]) - math.log(h.std_raw)))
    assert right == 1  # √d, as the central limit theorem says
    answer_widget(at).set_value(right)
    at.button(key="tour_reveal").click().run()
    no_errors(at)
    assert len(at.success) == 1 and "Answer: like √d: std ≈ 8.00 at d = 64" in at.success[0].value
    assert len(figures(at)) == 1


def test_a_wrong_number_is_marked_wrong_and_the_sink_weight_is_attncores() -> None:
    at = run(tour=str(number("sink")), tour_predict="1")
    w = float(normaliser_zoo(SinkSpec(strength=6.0), page_device())["softmax"].sink_weight.mean())
    answer_widget(at).set_value(round(w - 0.3, 3))
    at.button(key="tour_reveal").click().run()
    no_errors(at)
    assert len(at.warning) == 1 and f"Answer: {w:.3g} ± 0.05" in at.warning[0].value


def test_the_lecturer_sees_the_class_counts_and_a_changed_answer_moves_its_count() -> None:
    students = [run(tour="2", tour_predict="1") for _ in range(3)]
    for at, choice in zip(students, (1, 1, 0), strict=True):
        answer_widget(at).set_value(choice)
        at.button(key="tour_reveal").click().run()
        no_errors(at)
    q = questions.ask("histograms", {"tour_d": 256})
    assert POLL.tally(q.qid).counts == (1, 2, 0, 0)
    lecturer = run(tour="2", tour_predict="1", present="1")
    no_errors(lecturer)
    table = lecturer.table[0].value if lecturer.table else lecturer.dataframe[0].value
    assert [int(c) for c in table["Students"]] == [1, 2, 0, 0] and list(table["Answer"]) == [plain(o) for o in q.options]
    assert "3 answers" in texts(lecturer)
    # the same student answers again: their one count moves
    again = students[2]
    again.session_state["_tour_revealed"] = []
    again.run()
    answer_widget(again).set_value(1)
    again.button(key="tour_reveal").click().run()
    assert POLL.tally(q.qid).counts == (0, 3, 0, 0)
    # students see no counts
    assert not students[0].table and "How the class answered" not in texts(students[0])


def test_moving_the_control_asks_a_new_question() -> None:
    at = run(tour="2", tour_predict="1")
    at.button(key="tour_reveal").click().run()
    assert len(figures(at)) == 1
    at.select_slider(key="tour_d").set_value(16).run()
    no_errors(at)
    assert figures(at) == [] and "q and k have 16 entries" in texts(at)
    at.select_slider(key="tour_d").set_value(1).run()  # no question at d = 1: the step is shown
    no_errors(at)
    assert len(figures(at)) == 1 and answer_widget(at) is None


def test_the_export_buttons_and_the_chart_image_format() -> None:
    at = run(tour="2")
    no_errors(at)
    labels = {b.proto.label: b.proto for b in at.get("download_button")}
    assert {"Step as slide (HTML)", "Worksheet (HTML)", "Charts as offline HTML"} <= set(labels)
    config = json.loads(at.get("plotly_chart")[0].proto.config)
    opts = config["toImageButtonOptions"]
    assert config["displayModeBar"] is True
    assert (opts["format"], opts["width"], opts["height"], opts["filename"]) == ("png", 1920, 1080, "sat-hist")
    at.radio(key="chart_image").set_value("svg").run()
    no_errors(at)
    assert json.loads(at.get("plotly_chart")[0].proto.config)["toImageButtonOptions"]["format"] == "svg"


@pytest.mark.slow
def test_the_whole_tour_deck_is_offered_after_its_button() -> None:
    at = run(tour="1")
    assert "Download the Tour deck (HTML)" not in {b.proto.label for b in at.get("download_button")}
    at.button(key="tour_deck_make").click().run()
    no_errors(at)
    assert "Download the Tour deck (HTML)" in {b.proto.label for b in at.get("download_button")}
