"""Helpers for reading Plotly figures back out of AppTest elements.

Plotly 7 stores arrays in the figure JSON as ``{"bdata": base64, "dtype": "f4", "shape": "L, S"}``;
these helpers decode them so tests can compare chart data with attncore's numbers.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np


def page_device() -> str:
    """The device a page computes on with the default sidebar ("auto", ATTNCORE_DEVICE wins):
    tests compare a page with attncore run on this device, so they pass on a GPU as on a laptop."""
    from attncore.device import resolve_device

    return str(resolve_device("auto"))


def decode(value: Any) -> np.ndarray:
    """A Plotly array (plain list or base64 ``bdata`` dict) as a numpy array."""
    if isinstance(value, dict) and "bdata" in value:
        arr = np.frombuffer(base64.b64decode(value["bdata"]), dtype=np.dtype(value["dtype"]))
        shape = value.get("shape")
        if shape:
            dims = [int(s) for s in str(shape).split(",")]
            arr = arr.reshape(dims)
        return arr
    return np.asarray(value)


def figures(at: Any) -> list[dict]:
    """Every plotly chart on an AppTest page as figure JSON."""
    return [json.loads(el.proto.spec) for el in at.get("plotly_chart")]


def figure(at: Any, view: str) -> dict:
    """The one figure whose ``layout.meta.view`` equals ``view``."""
    found = [f for f in figures(at) if (f.get("layout", {}).get("meta") or {}).get("view") == view]
    views = [(f.get("layout", {}).get("meta") or {}).get("view") for f in figures(at)]
    assert len(found) == 1, f"expected one chart with view={view!r}; charts: {views}"
    return found[0]


def trace(fig: dict, index: int = 0) -> dict:
    return fig["data"][index]


def traces_named(fig: dict, name: str) -> list[dict]:
    return [t for t in fig["data"] if t.get("name") == name]


def no_errors(at: Any) -> None:
    """Assert the page rendered without an exception or error box."""
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]


ROOT = __import__("pathlib").Path(__file__).resolve().parents[1]


def run_app(script: str, timeout: float = 120, **query: str) -> Any:
    """Run a page (path relative to the repo root) in AppTest with URL query values.

    The app is entered through app.py, as in the browser, so page links resolve.
    """
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=timeout)
    if script != "app.py":
        at.switch_page(script)
    for k, v in query.items():
        at.query_params[k] = v
    return at.run()


def set_widget(at: Any, kind: str, key: str, value: Any) -> Any:
    """Set one widget (``kind`` is the AppTest accessor, e.g. ``"slider"``) and rerun."""
    getattr(at, kind)(key=key).set_value(value)
    return at.run()


def url_value(value: Any) -> str:
    """How ui.state writes a value into the URL."""
    if isinstance(value, bool):
        return "1" if value else "0"
    return f"{value:.6g}" if isinstance(value, float) else str(value)


def all_data(at: Any) -> list[np.ndarray]:
    """Every float z and y array of every chart on the page."""
    out = []
    for f in figures(at):
        for t in f["data"]:
            for k in ("z", "y"):
                if k in t and isinstance(t[k], dict | list):
                    a = decode(t[k])
                    if a.dtype.kind == "f":
                        out.append(a.copy())
    return out


def same(a: list[np.ndarray], b: list[np.ndarray]) -> bool:
    """Two lists of chart arrays hold the same numbers."""
    return len(a) == len(b) and all(x.shape == y.shape and np.allclose(x, y, equal_nan=True)
                                    for x, y in zip(a, b, strict=True))


def walk(at: Any, changes: Iterable[tuple[str, str, Any]], check: Callable[[Any], None],
         defaults: Iterable[tuple[str, Any]] = ()) -> None:
    """Apply each (widget kind, key, value): the charts must follow attncore, change, and the URL keep up.

    ``defaults`` lists (key, value) pairs that equal the parameter's default, so the URL omits them.
    """
    omitted = set(defaults)
    before = all_data(at)
    for kind, key, value in changes:
        set_widget(at, kind, key, value)
        assert at.session_state[key] == value, key
        check(at)
        now = all_data(at)
        assert not same(now, before), f"{key} changed nothing"
        before = now
        if (key, value) in omitted:
            assert key not in at.query_params, key
        else:
            assert at.query_params[key] == url_value(value), key
