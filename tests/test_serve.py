"""serve.py: the launcher warms the compute stack, then is exactly `streamlit run app.py <options>`."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import serve


def test_main_hands_its_options_to_streamlit_run(monkeypatch: pytest.MonkeyPatch) -> None:
    import streamlit.web.cli as cli

    seen: list[list[str]] = []
    warmed: list[bool] = []

    def fake_main() -> None:
        seen.append(list(sys.argv))
        raise SystemExit(3)

    monkeypatch.setattr(cli, "main", fake_main)
    monkeypatch.setattr(serve, "warm", lambda: warmed.append(True) or 0.1)
    monkeypatch.setattr(sys, "argv", ["serve.py"])
    assert serve.main(["--server.port", "8600", "--server.headless=true"]) == 3  # click's exit code
    assert warmed == [True]  # before the server starts
    assert seen == [["streamlit", "run", "app.py", "--server.port", "8600", "--server.headless=true"]]


def test_warm_loads_the_compute_stack_but_no_cached_page_code() -> None:
    seconds = serve.warm()
    assert seconds >= 0
    for name in ("torch", "pandas", "plotly.graph_objects", "attncore.sweeps", "attncore.kernels",
                 "transformers.models.bert.modeling_bert"):
        assert name in sys.modules
    # modules that define st.cache_data functions must be imported inside the server's runtime
    src = Path(serve.__file__).read_text()
    assert "import ui" not in src and "from ui" not in src


def test_main_stops_and_joins_the_training_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 32 F9: a server stopped during a job aborted once (a daemon thread inside torch at exit);
    serve.main stops the queue's worker when streamlit returns, whichever way."""
    import types

    import streamlit.web.cli as cli

    stopped: list[float] = []
    fake = types.ModuleType("ui.jobs")
    fake.QUEUE = types.SimpleNamespace(shutdown=lambda timeout: stopped.append(timeout) or True)
    monkeypatch.setitem(sys.modules, "ui.jobs", fake)
    monkeypatch.setattr(serve, "warm", lambda: 0.1)
    monkeypatch.setattr(sys, "argv", ["serve.py"])

    def fake_main() -> None:
        raise SystemExit(0)

    monkeypatch.setattr(cli, "main", fake_main)
    assert serve.main([]) == 0
    assert stopped == [10.0]
