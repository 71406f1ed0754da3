"""The home page says which numbers are computed live and which ship with the app."""

from __future__ import annotations

import json

from attncore.training import RESULT_NAMES, RESULTS_DIR, shipped_model_path
from tests.chart_data import no_errors, run_app


def test_home_says_which_numbers_are_shipped() -> None:
    at = run_app("app.py")
    no_errors(at)
    text = "\n".join(m.value for m in at.markdown)
    assert "Every number on these pages is computed live" not in text  # false: the training results ship
    assert "computed live by **attncore**" in text and "except what ships with the app" in text
    assert "the results of the Training lab's experiments" in text
    assert "`python -m attncore.training.experiments`" in text
    assert "all-MiniLM-L6-v2, SmolLM2-135M-Instruct and the character model" in text
    # what the sentence names really ships, and was made by that command
    for name in RESULT_NAMES:
        doc = json.loads((RESULTS_DIR / f"{name}.json").read_text(encoding="utf-8"))
        assert doc["command"].startswith("python -m attncore.training.experiments")
    assert (shipped_model_path() / "model.json").is_file()
