"""Evidence: every checkable claim of the five source texts, measured here, with a verdict by rule."""

from __future__ import annotations

import streamlit as st

from attncore.evidence import CLAIMS, EXACT, LIVE, SHIPPED, SOURCES, Claim, Row, judge
from ui import cached_results, widgets
from ui.page import PageContext, run_page
from ui.state import Param
from ui.views import evidence as view

# Sources: none chosen = all five; one click on a source shows only its claims (issue 34: the multiselect of
# all five took four clicks to reach one).
P_SRC = Param("ev_src", (), options=tuple(SOURCES), multi=True)
P_VERDICT = Param("ev_v", tuple(view.VERDICT_KEYS), options=tuple(view.VERDICT_KEYS), multi=True)
PARAMS = (P_SRC, P_VERDICT)
# The table fits the page: fixed column shares, and long identifiers (attncore.kernels.notebook_attention)
# may break anywhere.
TABLE_CSS = """<style>
[data-testid=stTable] table { table-layout: fixed; width: 100%; }
[data-testid=stTable] th:nth-child(1) { width: 34%; } [data-testid=stTable] th:nth-child(2) { width: 20%; }
[data-testid=stTable] th:nth-child(3) { width: 22%; } [data-testid=stTable] th:nth-child(4) { width: 24%; }
[data-testid=stTable] td p { overflow-wrap: anywhere; }
</style>"""


def controls(where) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Widgets: the source and verdict filters (empty = all)."""
    where.markdown("#### Filter the claims")
    sources = widgets.pills(
        P_SRC,
        "Sources",
        where=where,
        labels={k: s.short for k, s in SOURCES.items()},
        help="Click a text to show only its claims, more texts to add theirs; none chosen shows all five "
             "(a claim several texts make is listed under each).",
    )
    verdicts = widgets.multiselect(P_VERDICT, "Verdicts", where=where, labels=view.VERDICT_KEYS)
    return tuple(sources) or tuple(SOURCES), tuple(view.VERDICT_KEYS[v] for v in verdicts) or tuple(
        view.VERDICT_KEYS.values()
    )


def measure(ctx: PageContext, claims: list[Claim], stamp: float, note: str) -> list[Row]:
    """Cached calls, one per claim, with a progress bar over them."""
    bar = st.progress(0.0, text=note)
    rows = []
    for i, c in enumerate(claims):
        bar.progress(
            i / max(1, len(claims)), text=f"{note} {i + 1} of {len(claims)}: {c.key.replace('_', ' ')}"
        )
        res = cached_results.evidence_measurement(c.key, ctx.device, ctx.seed, ctx.dtype, stamp)
        measured, j = judge(c, res.value)
        rows.append(Row(c, res.value, measured, j, res.seconds))
    bar.empty()
    return rows


def shown(
    rows: list[Row], pending: list[Claim], sources: tuple[str, ...], verdicts: tuple[str, ...]
) -> tuple[list[Row], list[Claim]]:
    """The rows (and pending claims) the filters keep."""
    keep = lambda c: bool(set(c.sources) & set(sources))  # noqa: E731
    return (
        [r for r in rows if keep(r.claim) and r.judgement.verdict in verdicts],
        [c for c in pending if keep(c)],
    )


def draw(
    slots: list,
    ctx: PageContext,
    rows: list[Row],
    pending: list[Claim],
    sources: tuple[str, ...],
    verdicts: tuple[str, ...],
    final: bool,
) -> None:
    """View and text: the overview chart, the summary and the filtered table, into their placeholders."""
    chart, words, table = slots
    fig = view.verdict_figure(rows)
    chart.plotly_chart(fig, key="chart_ev_verdicts" if final else None)
    kept, waiting = shown(rows, pending, sources, verdicts)
    every = len(kept) + len(waiting) == len(rows) + len(pending)
    words.markdown(
        f"**All five texts:** {view.summary(rows)}"
        + ("" if every else f" **Shown:** {view.summary(kept)}")
        + (
            f" {len(waiting)} more (timings, models, the gradient sweep) are being measured."
            if waiting
            else ""
        )
        + " A claim that several texts make counts once here and under each text in the chart."
    )
    if kept or waiting:
        table.table(
            view.display_frame(view.frame(kept, waiting, ctx.device_label), present=ctx.present),
            hide_index=True,
            border="horizontal",
        )
    else:
        table.info("No claim matches these filters.", icon=":material/filter_alt_off:")


def explain(rows: list[Row]) -> None:
    with st.expander("How a verdict is reached", icon=":material/gavel:"):
        st.markdown(
            "Each claim is quoted from its text and tested by attncore; a rule with a stated tolerance (the "
            "**Rule** in its *tested by* cell) turns the numbers into one of five verdicts, and the caveat "
            "is written from the same numbers. **holds**: the measurement agrees within the tolerance "
            "(standard errors for random draws, half a unit of the last printed digit for printed numbers, a "
            "95% margin over seeds for training runs). **holds with a caveat**: it agrees, but only under a "
            "condition the text does not state, or with too few seeds to know the spread. **does not hold "
            "here**: the measurement disagrees, at this machine's scale. **misprint in the source**: a "
            "printed number cannot be right (the arithmetic itself rules it out). **not testable here**: the "
            "test cannot run on this machine or the shipped runs cannot decide it; the caveat says why."
        )
        n = {
            b: sum(r.measurement.basis == b and not r.measurement.missing for r in rows)
            for b in (LIVE, EXACT, SHIPPED)
        }
        st.markdown(
            f"**live** ({n[LIVE]} rows): computed now by attncore on this page's device, seed and precision "
            f"(the sidebar), at the default settings of the page its link opens. **exact** ({n[EXACT]}): "
            f"arithmetic, closed forms or quadrature, the same on every machine. **shipped** ({n[SHIPPED]}): "
            "read from the runs shipped with the app, not rerun here: the training runs "
            "(attncore/training/results), which the Training lab shows in full, and SmolLM2's StreamingLLM "
            "run at 2,048 tokens (attncore/decoder/results), which Attention sinks shows."
        )


def body(ctx: PageContext) -> None:
    st.title("Evidence")
    st.html(TABLE_CSS)
    st.markdown(
        "Every checkable claim of the five source texts, tested by attncore on this machine: what it "
        "measured, a verdict computed by a stated rule, the caveat a careful reviewer would add, and a link "
        "to the view that shows it."
    )
    sources, verdicts = controls(ctx.controls)
    stamp = cached_results.results_stamp()
    fast, slow = [c for c in CLAIMS if not c.slow], [c for c in CLAIMS if c.slow]
    rows = measure(ctx, fast, stamp, "Measuring claim")
    slots = [st.empty(), st.empty(), st.empty()]
    # The fast rows are drawn first only while the slower ones are still to be measured on this server
    setting = (ctx.device, ctx.seed, ctx.dtype, stamp)
    measured = cached_results.evidence_slow_measured()
    if setting not in measured:
        draw(slots, ctx, rows, slow, sources, verdicts, final=False)
    rows += measure(ctx, slow, stamp, "Measuring the slower claims:")
    measured.add(setting)
    draw(slots, ctx, rows, [], sources, verdicts, final=True)
    kept, _ = shown(rows, [], sources, verdicts)
    widgets.csv_download(
        lambda: view.frame(kept, (), ctx.device_label),
        "evidence.csv",
        label="Download the table (CSV)",
        key="dl_ev_table",
    )
    widgets.caption_compute(
        ctx.device_label,
        sum(r.seconds for r in rows),
        f"{len(rows)} tests, seed {ctx.seed}, {ctx.dtype} inputs for the timing rows; each result is kept "
        "for this device and seed, so a filter change redraws at once.",
    )
    explain(rows)
    references()


def references() -> None:
    """Text: every source in full (the rows link here when a text has no address) and the papers the tests
    follow."""
    st.subheader("References", anchor=view.REFERENCES_ANCHOR)
    st.markdown(view.references_markdown())


run_page(
    title="Evidence",
    icon=":material/fact_check:",
    params=PARAMS,
    body=body,
    oom_hint="Switch to the CPU in the sidebar's Compute section.",
)
