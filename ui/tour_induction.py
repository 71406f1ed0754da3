"""The Tour's step "An induction head forms": the Training lab's shipped induction run, read (no control).

:func:`show_induction` returns the parts of a :class:`ui.tour.Shown` (figures, lesson, the page's URL state,
caption, the numbers the lesson was made from); :data:`ui.tour.STEPS` wraps them, so this module needs
nothing from :mod:`ui.tour`.
"""

from __future__ import annotations

import re
from typing import Any

import plotly.graph_objects as go

from attncore.training.induction import summarize
from ui import cached_results
from ui.views import induction as view

__all__ = ["show_induction"]


Parts = tuple[tuple[go.Figure, ...], str, dict[str, str], str, dict[str, Any]]


def show_induction(ctx: Any, where: Any) -> Parts:
    """(figures, lesson, query, caption, numbers) of the step, from the shipped file."""
    header, runs = cached_results.induction_runs()
    if not runs:
        return ((), "The shipped induction run is not in this app yet.", {"tr_ind": "1"}, "", {})
    s = summarize(runs)
    fig = view.curves_figure(runs, [x["phase_step"] for x in s["seeds"]])
    for t in fig.data:  # one screen: the legend in short words (the caption says thick lines are the mean)
        if t.name:
            t.name = re.sub(r" \(an induction head, by the rule\)", ": the rule's line", t.name)
            t.name = re.sub(r" \(.*\)|, mean of \d+ seeds", "", t.name)
    c = header.get("config") or runs[0]["config"]
    caption = (f"The Training lab's shipped run: 2 layers × {c['n_head']} head, attention only, width "
               f"{c['d_model']}, {c['context'] // 2} random tokens twice, {s['n']} seeds (thick: their mean; "
               "dotted: each seed's phase change).")
    return (fig,), view.tour_lesson(s), {"tr_ind": "1"}, caption, {"summary": s}
