"""The Tour's predict-then-reveal and its exports (issue 41, items 3 and 4), drawn for ``pages/0_Tour.py``.

- :func:`gate`: with "Predict first" on (``tour_predict=1`` in the URL), a step that has a question
  (:mod:`ui.questions`) shows it and a Reveal button instead of its lesson and chart; the click keeps the
  student's answer in their session, counts it in the server's poll (:data:`ui.poll.POLL`, counts only) and
  reveals the lesson, the chart and whether the answer was right, by the numbers. In presenter mode the
  lecturer sees how the class answered.
- :func:`downloads`: the step's charts as offline HTML, the step or the whole Tour as an offline deck, and
  the worksheet (:mod:`ui.export`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any
from urllib.parse import urlencode

import pandas as pd
import streamlit as st

from ui import export, questions, widgets
from ui.poll import POLL
from ui.questions import Key, Question
from ui.state import Param, value
from ui.text import plain

__all__ = ["P_PREDICT", "Silent", "downloads", "gate", "step_values", "worksheet_items"]

P_PREDICT = Param("tour_predict", False)
_ANSWERS = "_tour_answers"  # qid -> (response, bucket): this session's answers
_REVEALED = "_tour_revealed"  # qids this session revealed
MAX_KEPT = 64  # answers one session keeps (the oldest dropped first)


class Silent:
    """A stand-in container that draws nothing: a step computed for the whole-Tour deck reads its controls'
    values from the session (URL > last value > default) without drawing its widgets a second time."""

    def __getattr__(self, name: str) -> Callable[..., None]:
        return lambda *args, **kwargs: None


def step_values(step: Any) -> dict[str, Any]:
    """The step's control values by URL name."""
    return {p.key: value(p) for p in step.params}


def _kept() -> tuple[dict[str, tuple[Any, int | None]], list[str]]:
    answers = st.session_state.setdefault(_ANSWERS, {})
    revealed = st.session_state.setdefault(_REVEALED, [])
    return answers, revealed


def _reveal(q: Question, k: Key, widget: str) -> None:
    """Reveal's click: keep the answer in the session, count it in the poll (moving an earlier count)."""
    answers, revealed = _kept()
    response = st.session_state.get(widget)
    bucket = questions.bucket(q, k, response)
    previous = answers.get(q.qid, (None, None))[1]
    if bucket is not None:
        POLL.record(q.qid, questions.buckets(q), bucket, previous)
        answers[q.qid] = (response, bucket)
        while len(answers) > MAX_KEPT:
            answers.pop(next(iter(answers)))
    if q.qid not in revealed:
        revealed.append(q.qid)
        del revealed[:-MAX_KEPT]


def _ask(q: Question, k: Key, where: Any) -> None:
    where.markdown(f"**Predict first.** {plain(q.prompt)}")
    widget = f"_tq_{q.qid}"
    if q.numeric:
        where.number_input(f"Your answer ({plain(q.unit)})" if q.unit else "Your answer", value=None,
                           min_value=-questions.NUMBER_LIMIT, max_value=questions.NUMBER_LIMIT, format="%g",
                           key=widget)
    else:
        where.radio("Your answer", options=list(range(len(q.options))), index=None, key=widget,
                    format_func=lambda i: plain(q.options[i]))
    where.button("Reveal", key="tour_reveal", type="primary", icon=":material/visibility:",
                 on_click=_reveal, args=(q, k, widget))


def _verdict(q: Question, k: Key, where: Any) -> None:
    answers, _ = _kept()
    response = answers.get(q.qid, (None, None))[0]
    right = questions.score(q, k, response)
    answer = (f"{k.value:.3g} ± {k.tolerance:.2g}" if q.numeric and k.value is not None
              else plain(q.options[k.correct]) if k.correct is not None else "?")
    said = ("no answer" if right is None else
            f"you said {response:g}" if q.numeric else f"you said “{plain(q.options[response])}”")
    text = f"{plain(q.prompt)} **Answer: {answer}** ({plain(k.why)}); {said}."
    if right:
        where.success(text, icon=":material/check:")
    elif right is None:
        where.info(text, icon=":material/visibility:")
    else:
        where.warning(text, icon=":material/close:")


COUNTS_EVERY_S = 5.0  # the lecturer's counts redraw themselves this often (a fragment: nothing else reruns)


def _counts(q: Question) -> None:
    t = POLL.tally(q.qid)
    if t is None:
        st.caption(f"How the class answered: no answers yet (updated every {COUNTS_EVERY_S:g} s).")
        return
    st.caption(f"How the class answered: {t.total} answer{'s' if t.total != 1 else ''} (counts only, on this "
               f"server since it started; updated every {COUNTS_EVERY_S:g} s).")
    frame = pd.DataFrame({"Answer": [plain(x) for x in t.labels], "Students": list(t.counts)})
    widgets.table(frame, key="tour_class")


def _class_counts(q: Question, where: Any) -> None:
    """Presenter mode: how the class answered this question (counts only), redrawn every few seconds."""
    with where:
        st.fragment(run_every=COUNTS_EVERY_S)(_counts)(q)


def gate(step: Any, shown: Any, ctx: Any, where: Any) -> bool:
    """Draw the step's question when "Predict first" is on; True when the lesson and chart may be shown."""
    if not value(P_PREDICT):
        return True
    q = questions.ask(step.key, step_values(step))
    if q is None:
        return True
    k = questions.key(q, step_values(step), shown.numbers)
    _, revealed = _kept()
    if q.qid in revealed:
        _verdict(q, k, where)
    else:
        _ask(q, k, where)
    if ctx.present:
        _class_counts(q, where)
    return q.qid in revealed


# ------------------------------------------------------------------------------------------ downloads


def step_url(number: int, step: Any, values: dict[str, Any]) -> str:
    """The Tour at this step in this state, with "Predict first" on (an absolute URL when the server's is
    known)."""
    query = {"tour": str(number), **{p.key: p.encode(values[p.key]) for p in step.params
                                     if values[p.key] != p.default}, P_PREDICT.key: "1"}
    base = ""
    try:
        url = str(st.context.url or "")
        base = url.split("?")[0].rsplit("/", 1)[0] + "/" if url.startswith(("http://", "https://")) else ""
    except Exception:  # noqa: BLE001  # no request context (AppTest): a relative link
        base = ""
    return f"{base}Tour?{urlencode(query)}"


def worksheet_items(steps: Sequence[Any]) -> list[export.Sheet]:
    """Every step's question at the session's control values, with its link."""
    items = []
    for i, step in enumerate(steps, start=1):
        values = step_values(step)
        q = questions.ask(step.key, values)
        if q is not None:
            items.append(export.Sheet(i, step.title, q, step_url(i, step, values)))
    return items


def downloads(steps: Sequence[Any], number: int, shown: Any, ctx: Any, where: Any) -> None:
    """The Tour's export row: this step's charts, this step or the whole Tour as a deck, the worksheet."""
    step = steps[number - 1]
    slide = export.Slide(f"{number} · {step.title}", shown.lesson, shown.caption, tuple(shown.figures))
    row = where.container(horizontal=True, gap="small", key="tour_exports")
    widgets.html_download("Step as slide (HTML)", lambda: export.deck_html([slide]),
                          f"tour-{number:02d}-{step.key}.html", key="tour_dl_step",
                          icon=":material/slideshow:", where=row)
    sheet = worksheet_items(steps)  # in the script run: the server's URL is known here, not at the click
    widgets.html_download("Worksheet (HTML)", lambda: export.worksheet_html(sheet), "tour-worksheet.html",
                          key="tour_dl_sheet", icon=":material/assignment:",
                          help="The Tour's questions with links and space for answers; the browser's Print → "
                               "Save as PDF makes a PDF of it.", where=row)
    if row.button("Whole Tour as slides…", key="tour_deck_make", icon=":material/playlist_play:",
                  help="Computes every step once (the real-decoder step loads SmolLM2), then offers the "
                       "deck."):
        # offered on the click's run only: the next run does not recompute every step
        slides = []
        for i, s in enumerate(steps, start=1):
            got = shown if i == number else s.show(ctx, Silent())
            slides.append(export.Slide(f"{i} · {s.title}", got.lesson, got.caption, tuple(got.figures)))
        widgets.html_download("Download the Tour deck (HTML)", lambda: export.deck_html(slides), "tour.html",
                              key="tour_dl_deck", where=row)
