"""F11 (issue 44): one convention for an empty text box. Every text a model reads (the free-text inputs
edited in a text area: tests/test_text_injection.FREE_TEXT) left empty gives an info box that says what to
type, never an error box; for a tokenizer's model white space only counts as empty too."""

from __future__ import annotations

import pytest

from tests.chart_data import figures, no_errors, run_app
from tests.test_text_injection import FREE_TEXT, ONE_MODEL

pytestmark = pytest.mark.usefixtures("one_torch_thread")

TEXT_BOXES = sorted((script, key, state) for (script, key), (state, kind) in FREE_TEXT.items()
                    if kind == "text_area")
SAYS = {"rt_text": "Type or paste a text in the box above", "snk_text": "Type or paste a text in the box above",
        "dec_text": "Type or paste a text in the box above", "snk_ltext": "Type characters in the sidebar's box"}


def test_every_text_box_is_checked() -> None:
    assert {key for _, key, _ in TEXT_BOXES} == set(SAYS)


def cases() -> list:
    out = []
    for script, key, state in TEXT_BOXES:
        marks = [pytest.mark.slow] if key in ONE_MODEL else []  # loads SmolLM2
        out.append(pytest.param(script, key, state, "", marks=marks, id=f"{key}-empty"))
        if key in ("rt_text", "snk_text"):  # a tokenizer's model: white space gives no word
            out.append(pytest.param(script, key, state, " \n ", id=f"{key}-blank"))
    return out


@pytest.mark.parametrize(("script", "key", "state", "text"), cases())
def test_an_empty_text_box_says_what_to_type(script: str, key: str, state: dict[str, str], text: str) -> None:
    at = run_app(script, timeout=900, **state)
    no_errors(at)
    before = len(figures(at))
    was_empty = at.text_area(key=key).value == ""  # the decoder's own text starts empty
    at.text_area(key=key).set_value(text).run(timeout=900)
    no_errors(at)  # no red box
    assert not at.warning, [w.value for w in at.warning]
    infos = [i.value for i in at.info]
    assert any(SAYS[key] in i for i in infos), infos
    if not was_empty:
        assert len(figures(at)) < before  # the views that read the text wait for it
