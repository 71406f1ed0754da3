"""The Training lab's section "Which fix removes the sink?": the league of normalisers and gates (a table and
chart ordered by sink rate, the verdict against the paper's ordering, one cell's curves) and the weight-decay
sweep beside Gu et al.'s setting.

Widgets (learning rate, measure, cell, sweep measure) -> cached calls
(:func:`ui.cached_results.league_results`, :func:`ui.cached_results.wd_results`) -> views
(:mod:`ui.views.training_league`) -> text. Every sentence comes from the numbers of
:mod:`attncore.training.league_verdict` and the tables.
"""

from __future__ import annotations

from typing import Any

import streamlit as st

from attncore.training.league import LEAGUE, league_configs
from attncore.training.league_verdict import REFERENCE_ORDERINGS, cell_curves, ordered_cells
from attncore.training.wd_sweep import WD_SWEEP
from ui import cached_results, widgets
from ui.state import Param
from ui.text import plain
from ui.views import training_league as view

__all__ = ["LEAGUE_OPEN", "LEAGUE_PARAMS", "TITLE", "league_section"]

TITLE = "Which fix removes the sink? A league of normalisers and gates, and weight decay"
LEAGUE_OPEN = "lg_open"  # the expander's open state (a view, not a setting: not in the URL)

LRS = tuple(f"{lr:g}" for lr in LEAGUE["lrs"])
VARIANTS = tuple(v["variant"] for v in LEAGUE["variants"])
P_LLR = Param("lg_lr", LRS[0], options=LRS)
P_LMEAS = Param("lg_meas", "sink_rate", options=tuple(view.MEASURES))
P_LCELL = Param("lg_cell", "standard", options=VARIANTS)
P_WMEAS = Param("lg_wdmeas", "sink_rate", options=tuple(view.MEASURES))
LEAGUE_PARAMS = (P_LLR, P_LMEAS, P_LCELL, P_WMEAS)
PLANNED = len(league_configs())
WD_PLANNED = len(league_configs(WD_SWEEP))


def _controls(where: list[Any]) -> tuple[float, str, str, str]:
    lr = widgets.select(P_LLR, "League: learning rate", where=where[0],
                        help="The league's table, chart and verdict at this peak learning rate.")
    measure = widgets.select(P_LMEAS, "League: chart measure", labels=view.MEASURES, where=where[1])
    names = {v: view.variant_name(v) for v in VARIANTS}
    cell = widgets.select(P_LCELL, "League: cell's curves", labels=names,
                          where=where[2],
                          help="The variant whose evaluation curves (one line per seed) are drawn.")
    wd_measure = widgets.select(P_WMEAS, "Weight decay: chart measure", labels=view.MEASURES, where=where[3])
    return float(lr), str(measure), str(cell), str(wd_measure)


def league_section(ctx: Any) -> None:
    """A folded section (computed and sent only while open, issue 34): the league, its verdict and a cell's
    curves; then the weight-decay sweep."""
    box = widgets.lazy_expander(TITLE, LEAGUE_OPEN, icon=":material/leaderboard:")
    if box is None:
        return
    with box:
        _league_part()


def _league_part() -> None:
    st.markdown("Eight ways to attend, trained side by side on Bigram-Backcopy (2 layers x 4 heads) at two "
                "learning rates x 3 seeds: softmax, softmax1, the gpt-oss sink logit, ReLU attention, "
                "Qiu et al.'s sigmoid output gate (elementwise, per head, and the non-sparse control "
                "0.5 + 0.5σ) and softpick. A head is a sink when its mean weight on BOS from non-trigger "
                "positions over the last evaluation points exceeds 0.3; the sink rate is the share of heads.")
    cols = st.columns(4)
    lr, measure, cell, wd_measure = _controls(cols)
    name, header, runs, table, verdicts = cached_results.league_results()
    st.caption(plain(view.status_text(name, len(runs), PLANNED, header)))
    cells = ordered_cells(table, lr)
    if not cells:
        st.info(f"No run of the league at learning rate {lr:g} is in the file yet.",
                icon=":material/hourglass_top:")
    else:
        st.plotly_chart(view.league_figure(cells, measure), key="chart_league")
        widgets.table(view.cells_frame(cells))
        widgets.csv_download(lambda: view.cells_frame(cells), "league.csv", label="Download the league (CSV)",
                             key="dl_league")
    verdict = next((v for v in verdicts if v.lr == lr), None)
    ref = verdict.reference if verdict is not None else REFERENCE_ORDERINGS["zuhri2025.t3"]
    st.markdown("**Against the paper's ordering.** " + plain(view.reference_text(ref)))
    if verdict is not None:
        st.markdown(plain(verdict.text))
    curves = cell_curves(runs, cell, lr)
    if curves:
        st.plotly_chart(view.curves_figure(curves, cell, lr), key="chart_league_curves")
    st.caption(plain(view.curves_text(curves, cell, lr)))
    _wd_part(wd_measure)


def _wd_part(measure: str) -> None:
    header, runs, cells = cached_results.wd_results()
    st.markdown("##### What weight decay does to the sink")
    st.markdown(plain(view.gu_setting_text(WD_SWEEP["base"])))
    st.markdown(plain(view.wd_text(cells, WD_PLANNED)))
    if cells:
        st.plotly_chart(view.wd_figure(cells, measure), key="chart_wd_sweep")
        widgets.table(view.wd_frame(cells))
        if header:
            st.caption(plain(f"Made by `{header.get('command', '?')}` on {header.get('machine', '?')} from "
                             f"commit {str(header.get('git_commit') or '?')[:10]}; "
                             f"{sum(r.get('wall_s') or 0 for r in runs) / 60:.0f} min of training in all."))
