"""What the fuzz and injection tests need to know about a page: its URL parameters and every text
its elements carry.

:func:`page_params` reads a page's declared :class:`ui.state.Param` list (the shared sidebar's
included) by running the page script with ``run_page`` replaced, so a new page or parameter is
fuzzed without being listed anywhere. :func:`element_texts` walks an AppTest run and yields every
string field of every element and block (labels, bodies, help, options, tab titles, chart specs).
"""

from __future__ import annotations

import json
import runpy
import threading
from collections.abc import Iterator
from functools import cache
from typing import Any

from google.protobuf.message import Message

from tests.chart_data import ROOT
from ui.nav import PAGES
from ui.state import Param

__all__ = ["ALL_PAGES", "FieldText", "chart_strings", "element_texts", "page_params"]

ALL_PAGES: tuple[str, ...] = ("app.py", *(p.path for p in PAGES))


class _Declared(Exception):  # noqa: N818 - a signal, not an error
    pass


@cache
def page_params(script: str) -> tuple[Param, ...]:
    """Every Param a page reads from the URL: the shared ones (device, seed, dtype, present) and its own.

    The page script runs in a thread of its own, as Streamlit runs it: ``ui.page.run_page`` flushes
    denormal floats to zero in the thread that runs it (``torch.set_flush_denormal``), which must
    not change the numbers of the tests that run after this one in the main thread.
    """
    found: list[tuple[Param, ...] | BaseException] = []

    def probe() -> None:
        import ui.page

        def declared(**kwargs: Any) -> None:
            raise _Declared(tuple(kwargs["params"]))

        original = ui.page.run_page
        ui.page.run_page = declared
        try:
            runpy.run_path(str(ROOT / script), run_name="__page_probe__")
            found.append(AssertionError(f"{script} never called run_page"))
        except _Declared as got:
            found.append((*ui.page.GLOBAL_PARAMS, *got.args[0]))
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
            found.append(exc)
        finally:
            ui.page.run_page = original

    worker = threading.Thread(target=probe, name=f"page-probe {script}")
    worker.start()
    worker.join()
    (result,) = found
    if isinstance(result, BaseException):
        raise result
    return result


class FieldText:
    """One string of one element: its element type (``markdown``, ``warning``, ``tab``...), the
    field's dotted path in the element's protobuf, and the text."""

    __slots__ = ("element", "field", "text")

    def __init__(self, element: str, field: str, text: str) -> None:
        self.element, self.field, self.text = element, field, text

    def __repr__(self) -> str:
        return f"{self.element}.{self.field}={self.text[:120]!r}"


def _strings(msg: Message, path: str = "") -> Iterator[tuple[str, str]]:
    for fd, val in msg.ListFields():
        name = f"{path}.{fd.name}" if path else fd.name
        items = val if isinstance(val, list | tuple) or (hasattr(val, "__len__") and not isinstance(
            val, str | bytes | Message)) else [val]
        for v in items:
            if isinstance(v, Message):
                yield from _strings(v, name)
            elif isinstance(v, str):
                yield name, v


def _nodes(node: Any) -> Iterator[Any]:
    yield node
    for child in (getattr(node, "children", None) or {}).values():
        yield from _nodes(child)


def element_texts(at: Any) -> Iterator[FieldText]:
    """Every string field of every element and block of an AppTest run (main area and sidebar)."""
    for node in _nodes(at._tree):
        proto = getattr(node, "proto", None)
        if isinstance(proto, Message):
            for field, text in _strings(proto):
                yield FieldText(str(getattr(node, "type", type(node).__name__)), field, text)


def chart_strings(spec: str) -> Iterator[tuple[str, str]]:
    """Every string a Plotly figure (JSON) holds, with its path; ``layout.meta`` (never drawn) left out."""

    def walk(x: Any, path: str) -> Iterator[tuple[str, str]]:
        if isinstance(x, str):
            yield path, x
        elif isinstance(x, dict):
            if "bdata" in x:  # a typed array (numbers, base64)
                return
            for k, v in x.items():
                if path == "layout" and k == "meta":
                    continue
                yield from walk(v, f"{path}.{k}" if path else k)
        elif isinstance(x, list):
            for i, v in enumerate(x):
                yield from walk(v, f"{path}[{i}]")

    yield from walk(json.loads(spec), "")
