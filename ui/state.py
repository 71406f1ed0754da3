"""Page state: declared parameters, their bounds, and the URL round trip.

Every control of every page is declared as a :class:`Param` (URL name, default,
bounds or options). At the start of a run :func:`init` fills ``st.session_state``
from the URL (validated: out-of-range values are clamped and reported), else
from what the user last chose on that page in this session, else the default.
Widgets are then bound to those keys (see :mod:`ui.widgets`), and
:func:`sync_url` writes every non-default value back to ``st.query_params`` so
a copied URL reproduces the view.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import streamlit as st

__all__ = ["MAX_FREE_ITEMS", "QUOTE_CHARS", "Param", "init", "quote", "sync_url", "value"]

_PERSIST = "_attnlab_persist"
MAX_FREE_ITEMS = 16  # entries of a multi-value parameter without options, unless it declares its own cap
QUOTE_CHARS = 40  # characters of a URL value a notice quotes before "…"


def quote(v: Any, n: int = QUOTE_CHARS) -> str:
    """``repr(v)`` for a notice, cut to ``n`` characters and "…" (a URL value may be 60,000 long)."""
    text = repr(v) if isinstance(v, str) else str(v)
    return text if len(text) <= n else text[:n] + "…"


@dataclass(frozen=True)
class Param:
    """One URL-backed control.

    Attributes:
        key: session-state key and URL parameter name (short, unique per app).
        default: value when neither the URL nor the session says otherwise.
        lo, hi: inclusive numeric bounds (int / float params).
        options: allowed values (str params, or each item of a list param).
        multi: the value is a tuple of options (comma-separated in the URL): distinct entries, in
            the order given, at most :attr:`limit` of them.
        pattern: a str param's allowed values, as a regular expression the whole value must match
            (an id kept in the URL); the default is always allowed.
        max_items: the most entries a multi-value parameter takes (default: the number of its
            options, else :data:`MAX_FREE_ITEMS`).
    """

    key: str
    default: Any
    lo: float | None = None
    hi: float | None = None
    options: tuple[Any, ...] | None = None
    multi: bool = False
    max_items: int | None = None
    pattern: str | None = None

    @property
    def limit(self) -> int:
        """The most entries a multi-value parameter takes."""
        if self.max_items is not None:
            return self.max_items
        return len(self.options) if self.options is not None else MAX_FREE_ITEMS

    @property
    def kind(self) -> type:
        if self.multi:
            return tuple
        return type(self.default)

    def parse(self, raw: str) -> tuple[Any, str | None]:
        """Value for a URL string, and a notice when it had to be corrected."""
        try:
            if self.multi:
                items = tuple(s for s in raw.split(",") if s != "")
                return self._check_multi(items)
            if self.kind is bool:
                low = raw.strip().lower()
                if low in {"1", "true", "yes", "on"}:
                    return True, None
                if low in {"0", "false", "no", "off"}:
                    return False, None
                raise ValueError(raw)
            if self.kind is int:
                v, note = self.clamp(int(float(raw)))
            elif self.kind is float:
                v, note = self.clamp(float(raw))
            else:
                v, note = raw, None
                if self.pattern is not None and raw != self.default and not re.fullmatch(self.pattern, raw):
                    raise ValueError(raw)
            return (v, note) if note else self._check_option(v)
        except (ValueError, OverflowError):
            return self.default, f"URL value {self.key}={quote(raw)} is not valid; using {self.default!r}."

    def clamp(self, v: Any) -> tuple[Any, str | None]:
        """Clamp a number into [lo, hi]; NaN falls back to the default."""
        if isinstance(v, float) and not math.isfinite(v):
            return self.default, f"{self.key} must be a finite number; using {self.default!r}."
        if self.lo is not None and v < self.lo:
            return self.kind(self.lo), (f"{self.key}={quote(v)} is below its limit {self.lo:g}; "
                                        f"using {self.lo:g}.")
        if self.hi is not None and v > self.hi:
            return self.kind(self.hi), (f"{self.key}={quote(v)} is above its limit {self.hi:g}; "
                                        f"using {self.hi:g}.")
        return v, None

    def _check_option(self, v: Any) -> tuple[Any, str | None]:
        if self.options is not None and v not in self.options:
            return self.default, (
                f"{self.key}={quote(v)} is not one of {', '.join(map(str, self.options))}; "
                f"using {self.default!r}."
            )
        return v, None

    def _check_multi(self, items: tuple[Any, ...]) -> tuple[Any, str | None]:
        """Distinct entries in the order given, unknown ones dropped, at most :attr:`limit` kept; one
        notice says what was dropped. A repeated entry would train (or draw) the same thing twice."""
        distinct = tuple(dict.fromkeys(items))
        notes = []
        if len(distinct) < len(items):
            notes.append(f"repeated entries in {self.key} were dropped (each counts once)")
        kept = distinct
        if self.options is not None:
            kept = tuple(i for i in distinct if i in self.options)
            if len(kept) != len(distinct):
                notes.append(f"unknown entries in {self.key} were dropped")
        if len(kept) > self.limit:
            kept = kept[: self.limit]
            notes.append(f"{self.key} takes at most {self.limit} entries; the first {self.limit} are used")
        if not notes:
            return items, None
        return kept or self.default, "; ".join(notes) + "."

    def encode(self, v: Any) -> str:
        """The URL string for a value."""
        if self.multi:
            return ",".join(map(str, v))
        if self.kind is bool:
            return "1" if v else "0"
        if self.kind is float:
            return f"{v:.6g}"
        return str(v)


def _persisted() -> dict[str, Any]:
    return st.session_state.setdefault(_PERSIST, {})


def init(params: Iterable[Param]) -> list[str]:
    """Fill session state for ``params``: URL > last value this session > default.

    Returns notices for URL values that were out of range or malformed.
    """
    notices: list[str] = []
    saved = _persisted()
    query = st.query_params
    for p in params:
        if p.key in st.session_state:
            continue
        if p.key in query:
            v, note = p.parse(query[p.key])
            if note:
                notices.append(note)
        elif p.key in saved:
            v = saved[p.key]
        else:
            v = p.default
        if p.multi:
            v = list(v)
        st.session_state[p.key] = v
    return notices


def value(p: Param) -> Any:
    """The current value of a declared parameter."""
    v = st.session_state.get(p.key, p.default)
    return tuple(v) if p.multi else v


def sync_url(params: Sequence[Param]) -> None:
    """Write every non-default value to the URL and remember it for this session."""
    saved = _persisted()
    wanted: dict[str, str] = {}
    for p in params:
        if p.key not in st.session_state:
            continue
        v = value(p)
        saved[p.key] = v
        if v != p.default:
            wanted[p.key] = p.encode(v)
    if wanted != st.query_params.to_dict():
        st.query_params.from_dict(wanted)
