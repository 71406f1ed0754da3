"""Reusable controls bound to declared :class:`ui.state.Param` keys, returning plain values.

Each widget reads its bounds/options from the Param, so the UI can never offer a
value that the URL parser would reject.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import pandas as pd
import streamlit as st
from pandas.io.formats.style import Styler

from ui.state import Param, value
from ui.text import plain

__all__ = [
    "caption_compute",
    "csv_download",
    "lazy_expander",
    "multiselect",
    "safe_csv_frame",
    "number",
    "presented_frame",
    "presenting",
    "radio",
    "select",
    "select_slider",
    "slider",
    "table",
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


def html_download(label: str, data: Callable[[], str], filename: str, *, key: str,
                  icon: str = ":material/download:", help: str | None = None, where: Any = st) -> None:
    """A download button for an HTML file built only when clicked (an offline chart page, deck or worksheet:
    its text is escaped where it is built, in ``ui.export``)."""
    where.download_button(label, data=lambda: data().encode("utf-8"), file_name=filename, mime="text/html",
                          key=key, on_click="ignore", icon=icon, help=help)


def lazy_expander(label: str, key: str, *, icon: str | None = None, expanded: bool = False,
                  where: Any = st) -> Any | None:
    """An expander whose content is computed and sent only while it is open: the container to draw into,
    or None while it is closed (issue 34: a new tab draws its first chart sooner when the depth folded
    below it is not sent with it; opening it reruns the page once). ``key`` holds the open state, a view
    and not a setting, so it is not in the URL; it must not be a Param's URL name."""
    box = where.expander(label, expanded=expanded, key=key, icon=icon, on_change="rerun")
    return box if box.open else None


PRESENT_KEY = "present"  # presenter mode's session-state key and URL name (ui.page declares its Param)
TABLE_MAX_ROWS = 15  # presenter mode: a longer table scrolls inside TABLE_HEIGHT px (its header stays put)
TABLE_HEIGHT = 640
LONG_WORD = 24  # presenter tables: a word longer than this may break anywhere; shorter ones never break
_SOFT_BREAK = re.compile(r"_(?=\w)")  # snake_case and SCREAMING_CASE names may wrap after an underscore
_WORDS = re.compile(r"[\s\u200b/-]+")


def _soft_breaks(text: str) -> str:
    """``text`` with a zero-width space after each underscore inside a name ("scaled_dot_product_attention",
    "FLASH_ATTENTION"), where a presenter table may wrap it instead of cutting a word in two."""
    return _SOFT_BREAK.sub("_\u200b", text)


def _longest_word(text: str) -> int:
    return max((len(w) for w in _WORDS.split(text)), default=0)


def presenting() -> bool:
    """Presenter mode is on in this session (read from session state, not from a script run's flag:
    fragments rerun without ``ui.page.run_page``)."""
    return st.session_state.get(PRESENT_KEY) is True


def _cell(v: Any, fmt: str | None = None) -> str:
    """One cell as the presented table prints it: blank for a missing value, numbers by ``fmt`` (a printf
    format, as ``st.column_config.NumberColumn`` takes) or to at most 4 decimals, text escaped."""
    if v is None or v is pd.NA or v is pd.NaT:
        return ""
    if isinstance(v, bool | np.bool_):
        return "yes" if v else "no"
    if isinstance(v, int | np.integer):
        return plain(fmt % v if fmt else str(int(v)))
    if isinstance(v, float | np.floating):
        v = float(v)
        if math.isnan(v):
            return ""
        if fmt:
            return plain(fmt % v)
        if v == 0 or 1e-4 <= abs(v) < 1e15:
            text = f"{v:.4f}".rstrip("0").rstrip(".")
            return plain(text if text not in ("", "-0") else "0")
        return plain(f"{v:.4g}")
    return plain(v)


def presented_frame(data: pd.DataFrame | Styler, column_config: Mapping[str, Any] | None = None
                    ) -> tuple[pd.DataFrame, list[str]]:
    """The table ``st.dataframe`` would draw from ``data`` and ``column_config``, as text for ``st.table``
    (which reads every cell and header as Markdown): the config's labels and number formats applied, a
    Styler's own formats kept (``Styler.format``: precision, ``na_rep``), every text escaped with
    :func:`ui.text.plain`. Also returns the columns to align right (numbers, and those the config aligns
    right), by their shown names."""
    styler = data if isinstance(data, Styler) else None
    frame = styler.data if styler is not None else data
    config = column_config or {}
    funcs = styler._display_funcs if styler is not None else {}  # the cells Styler.format was given
    out: dict[str, list[str]] = {}
    right: list[str] = []
    for j, col in enumerate(frame.columns):
        cfg = config.get(col) or {}
        fmt = (cfg.get("type_config") or {}).get("format")
        fmt = fmt if isinstance(fmt, str) and "%" in fmt else None
        name = plain(cfg.get("label") or col)
        column = frame.iloc[:, j]
        out[name] = [plain(funcs[(i, j)](v)) if (i, j) in funcs else _cell(v, fmt)
                     for i, v in enumerate(column)]
        numeric = pd.api.types.is_numeric_dtype(column) and not pd.api.types.is_bool_dtype(column)
        if cfg.get("alignment") == "right" or (numeric and cfg.get("alignment") is None):
            right.append(name)
    index = [plain(i) for i in frame.index] if not isinstance(frame.index, pd.RangeIndex) else None
    return pd.DataFrame(out, index=index), right


def table(data: pd.DataFrame | Styler, *, column_config: Mapping[str, Any] | None = None,
          hide_index: bool | None = True, key: str | None = None, width: Any = "stretch",
          where: Any = st) -> None:
    """A table of ``data``: ``st.dataframe`` (a canvas grid: sortable, searchable) normally; in presenter
    mode an HTML table (``st.table``), whose text presenter mode's CSS sets to 16.8 px. The grid's text
    is drawn at the theme's size (14 px), which page CSS cannot reach and which is one setting for the
    whole server, so no session could enlarge it alone (issue 34). ``key`` names the element (the table's
    container in presenter mode, class ``st-key-<key>``)."""
    if not presenting():
        where.dataframe(data, hide_index=hide_index, width=width, column_config=column_config, key=key)
        return
    frame, right = presented_frame(data, column_config)
    texts = [c for c in frame.columns if c not in right]
    frame[texts] = frame[texts].map(lambda v: _soft_breaks(str(v)))
    # !important: st.table aligns each cell inline by its type (text: left), over a plain Styler rule; a
    # number is never broken across lines ("5.51e-" / "07"), the text columns wrap instead
    shown = (frame.style.set_properties(subset=right, **{"text-align": "right !important"}) if right
             else frame.style)
    cols = [j for j, c in enumerate(frame.columns) if c in right]
    # The cell's Markdown paragraph, inside the cell, is what wraps: at spaces, hyphens and the soft breaks
    # after underscores, never inside a word (break-word: a column is at least its longest word wide). Only a
    # word longer than LONG_WORD may break anywhere, so that the table still fits the page.
    long = [(i, j) for j, c in enumerate(frame.columns) if c not in right
            for i, v in enumerate(frame[c]) if _longest_word(str(v)) > LONG_WORD]
    shown = shown.set_table_styles([{"selector": "td p", "props": "overflow-wrap: break-word;"}]
                                   + [{"selector": f"td.row{i}.col{j} p", "props": "overflow-wrap: anywhere;"}
                                      for i, j in long]
                                   + [{"selector": f"td.col{j} p", "props": "white-space: nowrap !important;"}
                                      for j in cols],
                                   overwrite=False)
    box = where.container(key=key) if key else where
    box.table(shown, hide_index=hide_index, width=width,
              height="content" if len(frame) <= TABLE_MAX_ROWS else TABLE_HEIGHT)


def caption_compute(device: str, seconds: float, extra: str = "", where: Any = st) -> None:
    """'Computed on <device> in <t> ms' under a chart."""
    ms = seconds * 1e3
    t = f"{ms:.0f} ms" if ms >= 10 else f"{ms:.1f} ms"
    where.caption(f"Computed by attncore on **{device}** in {t}." + (f" {extra}" if extra else ""))
