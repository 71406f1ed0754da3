"""The sink experiment over settings, in the Training lab's tab "A sink forms": the verdict on both sink
claims, the grid (variant x setting) as a clickable map, and the picked cell's curves over its seeds.

Widgets (the picked cell, also set by a click on the map) -> cached call
(:func:`ui.cached_results.sink_claims`) -> view (:mod:`ui.views.sink_grid`) -> text. Every sentence comes from
:mod:`attncore.training.sink_verdicts`.
"""

from __future__ import annotations

from typing import Any

import streamlit as st

from attncore.training.null_attention import SHIPPED, slug
from attncore.training.null_attention import SIZES as NULL_SIZES
from attncore.training.sink_grid import GRID
from attncore.training.sink_verdicts import RULE_TEXT, Cell, Setting, SinkClaims
from ui import cached_results, widgets
from ui.state import Param
from ui.text import plain
from ui.views import sink_grid as view
from ui.views.realtext import picked

__all__ = ["GRID_PARAMS", "details_text", "grid_controls", "grid_section", "verdict_text"]

_CPU = NULL_SIZES["cpu"]["config"]
_SHIPPED_SETTING = Setting("rotary", float(_CPU["lr"]), int(_CPU["steps"]))
SETTINGS: tuple[Setting, ...] = tuple(sorted(
    {Setting(p, float(lr), int(GRID["base"]["steps"])) for p in GRID["positions"] for lr in GRID["lrs"]}
    | {_SHIPPED_SETTING}))
P_GVAR = Param("sk_gvar", "softmax1", options=tuple(SHIPPED))
P_GSET = Param("sk_gset", Setting("rotary", 1e-3, int(GRID["base"]["steps"])).key(),
               options=tuple(s.key() for s in SETTINGS))
GRID_PARAMS = (P_GVAR, P_GSET)
CHART_KEY = "chart_sk_grid"


def grid_controls(where: Any) -> tuple[str, str]:
    """The picked cell: (variant slug, setting key)."""
    where.markdown("#### A sink forms: over settings")
    var = widgets.select(P_GVAR, "Cell: variant", labels=SHIPPED, where=where,
                         help="The grid cell whose curves are shown (a click on the map picks one too).")
    setting = widgets.select(P_GSET, "Cell: setting", labels={s.key(): s.text() for s in SETTINGS},
                             where=where, help="Position encoding, peak learning rate and steps of the cell.")
    return str(var), str(setting)


def _on_pick() -> None:
    """A click on the map: its (row, column) -> the two selects (callbacks run before the script)."""
    state = st.session_state.get(CHART_KEY)
    try:
        points = state["selection"]["points"] if state is not None else []
    except (KeyError, TypeError):
        points = []
    pick = picked(points, ("row", "col"))
    if pick is None:
        return
    claims, _ = cached_results.sink_claims()
    rows, cols = view.axes(claims.cells)
    if 0 <= pick["row"] < len(rows) and 0 <= pick["col"] < len(cols):
        var, key = slug(rows[pick["row"]]), cols[pick["col"]].key()
        if var in (P_GVAR.options or ()) and key in (P_GSET.options or ()):
            st.session_state[P_GVAR.key], st.session_state[P_GSET.key] = var, key


def verdict_text(claims: SinkClaims) -> str:
    """The verdict over settings, both claims in one sentence each, as markdown-safe text."""
    return f"**Verdict over settings.** {plain(claims.fixes.headline)} {plain(claims.sinks.headline)}"


def details_text(claims: SinkClaims) -> str:
    """Both verdicts with every setting they name and their numbers, as markdown-safe text."""
    return f"- {plain(claims.fixes.text)}\n- {plain(claims.sinks.text)}"


def _provenance(header: dict[str, Any], claims: SinkClaims) -> str:
    grid = [c for c in claims.cells if c.source == "grid"]
    ran, planned = sum(c.n_run for c in grid), sum(c.planned for c in grid)
    if not header:
        return ("No sink grid file ships with this app; the map shows the shipped run's setting only "
                f"({ran} runs).")
    return (f"The grid: {ran} of its {planned} runs so far, made by `{header.get('command', '?')}` on "
            f"{header.get('machine', '?')} from commit {str(header.get('git_commit') or '?')[:10]} (started "
            f"{header.get('started', '?')}); each run appended as it finished, so the file grows until the "
            "grid is done. The shipped column (rotary, lr 0.01, 600 steps) is null_attention.json.")


def grid_section(ctx: Any) -> None:
    """The verdict over settings, the map of cells and the picked cell's curves."""
    var, key = grid_controls(ctx.controls)
    claims, header = cached_results.sink_claims()
    st.markdown("##### The same experiment over settings")
    st.markdown("Whether a fix removes the sink can depend on where it is trained. The same model and task "
                "over learning rate × position encoding (rotary, or learned absolute positions as in Guo et "
                "al.) for softmax, softmax1 and a sink logit starting at 0, with the shipped run as one more "
                "setting. Each cell: the weight non-trigger positions put on BOS at the end, its 95% "
                "interval, and the seeds with a sink.")
    st.markdown(verdict_text(claims))
    with st.expander("The settings behind the verdict, with their numbers", icon=":material/gavel:"):
        st.markdown(details_text(claims))
    label = SHIPPED.get(var, "")
    setting = next((s for s in SETTINGS if s.key() == key), None)
    selected = (label, setting) if setting is not None else None
    st.plotly_chart(view.grid_figure(claims.cells, selected), key=CHART_KEY, selection_mode="points",
                    on_select=_on_pick)
    st.caption(plain(RULE_TEXT) + " Blank cells: not run yet, not learned, or diverged (they say which). "
               "Click a cell for its curves.")
    cell = next((c for c in claims.cells if (c.label, c.setting) == selected), None)
    _cell_part(cell, label, setting)
    frame = view.grid_frame(claims.cells)
    with st.expander("Every cell of the grid (table)", icon=":material/table:"):
        widgets.table(view.grid_table(claims.cells), column_config=view.GRID_CONFIG)
        widgets.csv_download(frame, "sink_grid_cells.csv", label="Download the cells (CSV)", key="dl_sk_grid")
    st.caption(_provenance(header, claims))


def _cell_part(cell: Cell | None, label: str, setting: Setting | None) -> None:
    where = f"{label} at {setting.text()}" if setting is not None else label
    if cell is None:
        st.info(plain(f"{where}: this variant was not trained at this setting (the grid trains softmax, "
                      "softmax1 and the sink logit at 0; the other variants ran at the shipped "
                      "setting only)."),
                icon=":material/grid_off:")
        return
    if not cell.seeds:
        st.info(plain(f"{where}: not run yet (0 of {cell.planned} seeds); the grid is still running."),
                icon=":material/hourglass_top:")
        return
    st.plotly_chart(view.cell_curves_figure(cell), key="chart_sk_grid_cell")
    per = "; ".join(f"seed {f['seed']}: {_seed_words(f)}" for f in cell.per_seed)
    steps = cell.end_steps
    span = f"steps {steps[0]}–{steps[-1]}" if len(steps) > 1 else "the last step"
    st.caption(plain(f"{where}, {cell.seeds_text()}, the weight on BOS from non-trigger positions: {per}. "
                     f"The end weight averages {span} (shaded)."))


def _seed_words(f: dict[str, Any]) -> str:
    """'end weight 0.416, a sink' / 'diverged at step 120' for one seed of a cell."""
    if f["diverged_at"] is not None:
        return f"diverged at step {f['diverged_at']}"
    kind = "a sink" if f["sink"] else "a transient sink" if f["transient"] else "no sink"
    return f"end weight {f['bos_end']:.3f}, {kind}" + ("" if f["learned"] else ", task not learned")
