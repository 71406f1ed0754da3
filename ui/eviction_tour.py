"""The Tour's step "What survives in the cache": the shipped eviction run (2,048 tokens of the shipped text on
SmolLM2; the complete file, else the partial one, saying how many decodes are in), never a live decode.

:func:`keep_parts` returns the parts of a :class:`ui.tour.Shown` (figures, lesson, page state, caption,
numbers); ``ui.tour`` wraps them, so this module does not import the Tour's registry.
"""

from __future__ import annotations

from typing import Any

import plotly.graph_objects as go

from attncore.decoder import eviction_read as er
from attncore.decoder.eviction_run import load_eviction_run
from attncore.errors import AttnInputError
from attncore.evidence.eviction import shipped_run_path
from ui.views import eviction as view

__all__ = ["keep_lesson", "keep_parts"]


def keep_lesson(progress: str, pl: er.PolicyLosses | None) -> str:
    """The step's lesson from the run's numbers: how many decodes are in, who wins at the smallest budget (the
    one the map shows; the page has the others: one screen holds one), and how much of the window's loss the
    first tokens recover there."""
    if pl is None:
        return f"The shipped eviction run holds {progress} None of the prose is decoded yet."
    out = [f"The shipped eviction run holds {progress}", er.winner_sentence(pl, pl.budgets[:1])]
    for b in pl.budgets:
        if ("window", b) in pl.rows and ("streaming", b) in pl.rows:
            out.append(er.split_sentence(er.split(pl, b), "On the prose"))
            break
    return " ".join(out)


Parts = tuple[tuple[go.Figure, ...], str, dict[str, str], str, dict[str, Any]]


def keep_parts(ctx: Any, where: Any) -> Parts:
    """(figures, lesson, page state, caption, numbers) of the step, read from the shipped run's file."""
    query = {"snk_view": "decoder"}
    try:
        run = load_eviction_run(shipped_run_path())
    except AttnInputError:
        return (), "The shipped eviction run is not available.", query, "", {}
    progress = er.run_progress(run)
    try:
        pl = er.from_run(run, "prose")
    except AttnInputError:
        return (), keep_lesson(progress, None), query, "", {"decodes": len(run.rows)}
    # one screen: the budget chart alone (a map of what each policy keeps needs the page's width: "Open this
    # in full" shows it)
    figs = (view.budget_figure(pl, tag="tour_keep_budget"),)
    caption = (f"SmolLM2-135M decoding {pl.length:,} tokens of the shipped text token by token with a cache "
               "of B keys: perplexity past B over dense's, per policy (the page shows what each keeps).")
    numbers = {"decodes": len(run.rows), "budgets": pl.budgets}
    return figs, keep_lesson(progress, pl), query, caption, numbers
