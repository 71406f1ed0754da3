"""Tour: a lecture in fourteen steps, each a live view of one page at a small size (ui.tour.STEPS)."""

from __future__ import annotations

import streamlit as st

from ui import reveal, widgets
from ui.page import PageContext, run_page
from ui.state import Param, value
from ui.tour import STEPS, Shown, Step, step_params

P_STEP = Param("tour", 1, lo=1, hi=len(STEPS))
PARAMS = (P_STEP, reveal.P_PREDICT, *step_params())
CHART_PX = 420  # the tallest a step's chart is drawn (presenter mode: 1.15 times): a 720 px screen holds it


def _move(delta: int) -> None:
    """Previous / Next: the step number moves (the URL follows it when the run ends)."""
    st.session_state[P_STEP.key] = min(max(1, int(st.session_state[P_STEP.key]) + delta), len(STEPS))


def navigation(i: int) -> None:
    """Previous, the step picker and Next, on one row above the step."""
    prev, pick, nxt = st.columns([1, 4, 1], vertical_alignment="center")
    prev.button("← Previous", key="tour_prev", on_click=_move, args=(-1,), disabled=i <= 1, width="stretch")
    pick.selectbox("Step", options=list(range(1, len(STEPS) + 1)), key=P_STEP.key,
                   label_visibility="collapsed",
                   format_func=lambda k: f"Step {k} of {len(STEPS)} · {STEPS[k - 1].title}")
    nxt.button("Next →", key="tour_next", on_click=_move, args=(1,), disabled=i >= len(STEPS),
               type="primary", width="stretch")


def full_query(step: Step, shown: Shown, ctx: PageContext) -> dict[str, str]:
    """The page behind the step in this step's state, with the shared settings that differ from default."""
    query = dict(shown.query)
    if ctx.seed != 0:
        query["seed"] = str(ctx.seed)
    if ctx.dtype != "float32":
        query["dtype"] = ctx.dtype
    if ctx.present:
        query["present"] = "1"
    return query


def body(ctx: PageContext) -> None:
    i = int(value(P_STEP))
    step = STEPS[i - 1]
    st.title(f"Tour · {step.title}")
    navigation(i)
    # one screen: the lesson, the controls and the caption beside the chart(s), never above them
    text, charts = st.columns([1, 2], gap="medium")
    lesson = text.container(key="tour_lesson")
    controls = text.container(key="tour_controls")
    shown = step.show(ctx, controls)
    if reveal.gate(step, shown, ctx, lesson):  # "Predict first": the question until Reveal is pressed
        lesson.markdown(shown.lesson)
        slots = charts.columns(2) if len(shown.figures) == 2 else [charts for _ in shown.figures]
        for k, (slot, fig) in enumerate(zip(slots, shown.figures, strict=True)):  # side by side: one screen
            if (fig.layout.height or 450) > CHART_PX:
                fig.update_layout(height=CHART_PX)
            slot.plotly_chart(fig, key=f"chart_tour_{step.key}_{k}")
    text.caption(shown.caption)
    text.page_link(step.page, label="Open this in full", icon=":material/open_in_new:",
                   query_params=full_query(step, shown, ctx))
    widgets.toggle(reveal.P_PREDICT, "Predict first", where=ctx.controls,
                   help="Each step with a question asks it first and shows its lesson and chart on Reveal.")
    reveal.downloads(STEPS, i, shown, ctx,
                     st.expander("Export: slides and worksheet", icon=":material/download:"))


run_page(title="Tour", icon=":material/tour:", params=PARAMS, body=body)
