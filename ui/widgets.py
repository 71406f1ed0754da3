"""Reusable controls bound to declared :class:`ui.state.Param` keys, returning plain values.

Each widget reads its bounds/options from the Param, so the UI can never offer a
value that the URL parser would reject.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pandas as pd
import streamlit as st

from ui.state import Param, value

__all__ = [
    "caption_compute",
    "csv_download",
    "multiselect",
    "safe_csv_frame",
    "number",
    "radio",
    "select",
    "select_slider",
    "slider",
    "text_area",
    "text_input",
    "toggle",
]


def _help(p: Param, text: str | None) -> str | None:
    if p.lo is None and p.hi is None:
        return text
    bounds = f"Range {p.lo:g}–{p.hi:g}."
    return f"{text} {bounds}" if text else bounds


def slider(p: Param, label: str, *, step: float | None = None, help: str | None = None,
           fmt: str | None = None, where: Any = st) -> Any:
    """A slider over ``[p.lo, p.hi]``."""
    kind = p.kind
    where.slider(label, min_value=kind(p.lo), max_value=kind(p.hi),
                 step=None if step is None else kind(step), key=p.key,
                 help=_help(p, help), format=fmt)
    return value(p)


def select_slider(p: Param, label: str, *, help: str | None = None,
                  fmt: Callable[[Any], str] = str, where: Any = st) -> Any:
    """A slider over the discrete ``p.options`` (e.g. powers of two)."""
    where.select_slider(label, options=list(p.options or ()), key=p.key, help=help,
                        format_func=fmt)
    return value(p)


def number(p: Param, label: str, *, step: float | None = None, help: str | None = None,
           fmt: str | None = None, where: Any = st) -> Any:
    """A number box bounded to ``[p.lo, p.hi]``."""
    kind = p.kind
    where.number_input(label, min_value=None if p.lo is None else kind(p.lo),
                       max_value=None if p.hi is None else kind(p.hi),
                       step=None if step is None else kind(step), key=p.key,
                       help=_help(p, help), format=fmt)
    return value(p)


def select(p: Param, label: str, *, labels: dict[Any, str] | None = None,
           help: str | None = None, where: Any = st) -> Any:
    """A drop-down over ``p.options``; ``labels`` maps option -> text shown."""
    names = labels or {}
    where.selectbox(label, options=list(p.options or ()), key=p.key, help=help,
                    format_func=lambda o: names.get(o, str(o)))
    return value(p)


def radio(p: Param, label: str, *, labels: dict[Any, str] | None = None,
          help: str | None = None, horizontal: bool = True, where: Any = st) -> Any:
    """Radio buttons over ``p.options``."""
    names = labels or {}
    where.radio(label, options=list(p.options or ()), key=p.key, help=help,
                horizontal=horizontal, format_func=lambda o: names.get(o, str(o)))
    return value(p)


def multiselect(p: Param, label: str, *, labels: dict[Any, str] | None = None,
                help: str | None = None, where: Any = st) -> tuple[Any, ...]:
    """Several of ``p.options``."""
    names = labels or {}
    where.multiselect(label, options=list(p.options or ()), key=p.key, help=help,
                      format_func=lambda o: names.get(o, str(o)))
    return value(p)


def pills(p: Param, label: str, *, labels: dict[Any, str] | None = None,
          help: str | None = None, where: Any = st) -> Any:
    """``p.options`` as buttons, one click each (several when ``p.multi``)."""
    names = labels or {}
    where.pills(label, options=list(p.options or ()), selection_mode="multi" if p.multi else "single",
                key=p.key, help=help, format_func=lambda o: names.get(o, str(o)))
    return value(p)


def toggle(p: Param, label: str, *, help: str | None = None, where: Any = st) -> bool:
    """An on/off switch."""
    where.toggle(label, key=p.key, help=help)
    return bool(value(p))


def text_input(p: Param, label: str, *, help: str | None = None, placeholder: str | None = None,
               max_chars: int | None = None, where: Any = st) -> str:
    """A one-line text box."""
    where.text_input(label, key=p.key, help=help, placeholder=placeholder, max_chars=max_chars)
    return str(value(p))


def text_area(p: Param, label: str, *, help: str | None = None, height: int | None = None,
              max_chars: int | None = None, where: Any = st) -> str:
    """A multi-line text box (Ctrl+Enter or leaving it applies the text)."""
    where.text_area(label, key=p.key, help=help, height=height, max_chars=max_chars)
    return str(value(p))


FORMULA_START = ("=", "+", "-", "@", "\t", "\r")  # a spreadsheet runs a cell that starts so as a formula


def _inert(v: Any) -> Any:
    return "'" + v if isinstance(v, str) and v.startswith(FORMULA_START) else v


def safe_csv_frame(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with every text cell (and column name) that a spreadsheet would run as a formula (it starts
    with ``=``, ``+``, ``-``, ``@``, a tab or a carriage return) prefixed with ``'``, which makes it text;
    numbers are left as they are (a negative number is a number, not a formula)."""
    out = df.copy()
    for col in out.columns:
        if out[col].dtype == object or pd.api.types.is_string_dtype(out[col]):
            out[col] = out[col].map(_inert)
    out.columns = [_inert(c) for c in out.columns]
    return out


def csv_download(data: pd.DataFrame | Callable[[], pd.DataFrame], filename: str, *,
                 label: str = "Download CSV", key: str | None = None, where: Any = st) -> None:
    """A CSV download button. Pass a callable to build the frame only when clicked."""

    def payload() -> bytes:
        df = data() if callable(data) else data
        return safe_csv_frame(df).to_csv(index=False).encode("utf-8")

    where.download_button(label, data=payload if callable(data) else payload(), file_name=filename,
                          mime="text/csv", key=key or f"dl_{filename}", on_click="ignore",
                          icon=":material/download:")


def caption_compute(device: str, seconds: float, extra: str = "", where: Any = st) -> None:
    """'Computed on <device> in <t> ms' under a chart."""
    ms = seconds * 1e3
    t = f"{ms:.0f} ms" if ms >= 10 else f"{ms:.1f} ms"
    where.caption(f"Computed by attncore on **{device}** in {t}." + (f" {extra}" if extra else ""))
