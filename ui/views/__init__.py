"""Figure and table builders, one module per page (arrays in, go.Figure / DataFrame out; no streamlit calls)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import pandas as pd

__all__ = ["MISSING", "dash_missing", "right_aligned"]

MISSING = "—"  # a cell with no number: never "None" (st.dataframe prints a null as "None", whatever its Styler)


def _missing(v: Any) -> bool:
    return v is None or v is pd.NA or (isinstance(v, float) and math.isnan(v))


def dash_missing(frame: pd.DataFrame, formats: Mapping[str, str]) -> pd.DataFrame:
    """A copy of ``frame`` whose ``formats`` columns are text: each number by its format ('{:+.4f}'), a
    missing one as :data:`MISSING`. A text column holds no null for the grid to print as "None", and no mix of
    numbers and text for Arrow to refuse; the row says why it is missing (a note or status column)."""
    out = frame.copy()
    for col, fmt in formats.items():
        out[col] = [MISSING if _missing(v) else fmt.format(v) for v in frame[col]]
    return out


def right_aligned(columns: Any) -> dict[str, dict[str, str]]:
    """A column config (plain dicts, as ``st.dataframe`` takes) that aligns these text columns of numbers
    right, as the grid aligns numbers."""
    return {str(c): {"alignment": "right"} for c in columns}
