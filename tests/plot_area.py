"""The plot area a chart keeps (issue 41): a legend of many entries must not eat the figure.

Read from a figure's JSON as the page sent it (after :func:`ui.margins.fit_margins`, which puts a legend above or
below the plot into the top or bottom margin): the figure's height minus its top and bottom margins and minus
the rows of a horizontal legend drawn on the plot itself. A vertical legend sits beside the plot and takes width,
not height.
"""

from __future__ import annotations

import math
from typing import Any

from tests.legend_checks import swatches

__all__ = ["MIN_PLOT_FRACTION", "assert_plot_areas", "plot_fraction"]

MIN_PLOT_FRACTION = 0.5  # the plot keeps at least half the figure's height
DEFAULT_HEIGHT, DEFAULT_T, DEFAULT_B = 450, 100, 80  # what Plotly uses where the layout sets nothing
LEGEND_ROW_PX, LEGEND_FONT_PX, ENTRIES_PER_ROW = 19.0, 11.0, 3  # ui.margins' row height at 11 px


def _legend_on_plot(fig: dict[str, Any]) -> float:
    """Height (px) of a horizontal legend placed on the plot area (its y inside [0, 1] of the plot)."""
    lay = fig.get("layout", {})
    leg = lay.get("legend") or {}
    entries = len(swatches(fig))
    y = leg.get("y")
    if not entries or leg.get("orientation") != "h" or y is None or leg.get("yref") == "container":
        return 0.0
    if not 0.0 <= float(y) <= 1.0:
        return 0.0  # above or below the plot: in the margins
    font = (leg.get("font") or {}).get("size") or (lay.get("font") or {}).get("size") or LEGEND_FONT_PX
    return math.ceil(entries / ENTRIES_PER_ROW) * LEGEND_ROW_PX * float(font) / LEGEND_FONT_PX


def plot_fraction(fig: dict[str, Any]) -> float:
    """The plot area's share of the figure's height."""
    lay = fig.get("layout", {})
    h = float(lay.get("height") or DEFAULT_HEIGHT)
    m = lay.get("margin") or {}
    t = float(DEFAULT_T if m.get("t") is None else m["t"])
    b = float(DEFAULT_B if m.get("b") is None else m["b"])
    return (h - t - b - _legend_on_plot(fig)) / h


def assert_plot_areas(figs: list[dict[str, Any]], where: str) -> None:
    """Every chart with a legend (two or more entries) keeps at least half its height for the plot."""
    small = [((f["layout"].get("meta") or {}).get("view"), round(plot_fraction(f), 2), len(swatches(f)))
             for f in figs if len(swatches(f)) >= 2 and plot_fraction(f) < MIN_PLOT_FRACTION]
    assert not small, f"{where}: (view, plot fraction, legend entries) under {MIN_PLOT_FRACTION}: {small}"
