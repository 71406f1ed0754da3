"""Attention sinks, real decoder: "Which tokens to keep". A live run of the four eviction policies (window,
StreamingLLM, H2O, TOVA) at budgets T/16 .. T/2 beside dense on the shipped text, up to 1,024 tokens, one
decode at a time with a progress bar, partial results as each (policy, budget) finishes and a Stop button;
then the shipped 2,048-token run's view (complete file, else the partial one and how many decodes are in).

Widgets -> the process-wide store of finished decodes (admitted by the estimate of
:func:`attncore.decoder.plans.eviction_plan`) -> :mod:`attncore.decoder.eviction_read` ->
:mod:`ui.views.eviction` -> text.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

import streamlit as st
import torch

from attncore.decoder import eviction_read as er
from attncore.decoder.eviction import SINKS, EvictionResult, EvictionSetting, evict_decode
from attncore.decoder.eviction_run import RUN_POLICIES, load_eviction_run, run_budgets
from attncore.decoder.plans import eviction_plan
from attncore.decoder.sinks import token_kind
from attncore.errors import AttnInputError
from attncore.evidence.eviction import shipped_run_path
from attncore.models import load_bytes
from ui import cached_decoder, cached_models, widgets
from ui.admission import fmt_bytes, heavy
from ui.page import PageContext
from ui.realtext import MODEL_LOAD_BYTES
from ui.realtext import _ProgressBar as ProgressBar  # the first-load bar of the model picker
from ui.state import Param
from ui.text import plain
from ui.views import eviction as view

__all__ = ["KEEP_PARAMS", "RECORD", "keep_section", "panel_settings", "budget_problem", "shipped_section"]

RECORD = (0, 15, 29)  # the layers whose caches the live panel keeps (first, middle, last of SmolLM2's 30)
P_KL = Param("keep_L", 256, lo=32, hi=1024)
P_KB = Param("keep_b", 32, lo=1, hi=1024)  # the budget the per-position loss and the maps show
P_KLAY = Param("keep_layer", 15, options=RECORD)
P_KTXT = Param("keep_text", "prose", options=("prose", "code"))
KEEP_PARAMS = (P_KL, P_KB, P_KLAY, P_KTXT)
TEXT_NAMES = {"prose": "the Shakespeare excerpt", "code": "the standard-library module"}


class _Store:
    """Finished decodes (losses, kept positions, seconds), shared by the sessions of this process."""

    def __init__(self, size: int) -> None:
        self._d: OrderedDict[tuple[Any, ...], tuple[torch.Tensor, torch.Tensor, float]] = OrderedDict()
        self._lock = threading.Lock()
        self._size = size

    def get(self, key: tuple[Any, ...]) -> tuple[torch.Tensor, torch.Tensor, float] | None:
        with self._lock:
            return self._d.get(key)

    def put(self, key: tuple[Any, ...], value: tuple[torch.Tensor, torch.Tensor, float]) -> None:
        with self._lock:
            self._d[key] = value
            self._d.move_to_end(key)
            while len(self._d) > self._size:
                self._d.popitem(last=False)


@st.cache_resource
def keep_store() -> _Store:
    """The process-wide store of finished eviction decodes."""
    return _Store(96)


def _model(ctx: PageContext) -> Any:
    with heavy(max(MODEL_LOAD_BYTES, load_bytes("smollm2")), seconds=5.0, label="loading the model"):
        return cached_models.language_model("smollm2", ctx.device, progress=ProgressBar())


def budget_problem(b: int, L: int) -> str | None:
    """A plain message for a budget the panel cannot show (below the first k + 1 or above the length)."""
    if b < SINKS + 1:
        return (f"A budget of {b} keys cannot hold StreamingLLM's first {SINKS} tokens and a recent one: "
                "choose "
                f"at least {SINKS + 1}.")
    if b > L:
        return f"A budget of {b:,} keys is above the text's length ({L:,} tokens): choose at most {L:,}."
    return None


def panel_settings(L: int, b: int) -> tuple[EvictionSetting, ...]:
    """Dense, then the four policies at T/16 .. T/2 and at ``b`` (when it is none of them), budget by
    budget."""
    budgets = tuple(sorted({*run_budgets(L), b}))
    return (EvictionSetting("dense"), *(EvictionSetting(p, x) for x in budgets for p in RUN_POLICIES))


def _result(L: int, device: str, settings: tuple[EvictionSetting, ...]) -> EvictionResult | None:
    store = keep_store()
    have = [(s, store.get((L, device, s))) for s in settings]
    have = [(s, v) for s, v in have if v is not None]
    if not have:
        return None
    return EvictionResult(tuple(s for s, _ in have), torch.stack([v[0] for _, v in have]),
                          tuple(v[1] for _, v in have), RECORD, L, tuple(v[2] for _, v in have))


def _draw(r: EvictionResult | None, where: Any, key: str) -> er.PolicyLosses | None:
    """The budget chart and the winner sentence from what has finished (None before dense is in)."""
    if r is None or EvictionSetting("dense") not in r.settings:
        return None
    pl = er.from_result(r, "the shipped text")
    with where.container():
        st.plotly_chart(view.budget_figure(pl), key=key)
        st.caption(er.winner_sentence(pl))
    return pl


def run_keep(ctx: PageContext, L: int, settings: tuple[EvictionSetting, ...]) -> EvictionResult | None:
    """Stored decodes at once, the rest after the Run button, one by one with progress, partial results and
    Stop; the memory estimate is shown before it starts and the run is admitted by it."""
    key = "keep"
    store = keep_store()
    missing = [s for s in settings if store.get((L, ctx.device, s)) is None]
    flag_stop, flag_run = f"{key}__stopped", f"{key}__run"
    stopped = bool(st.session_state.pop(flag_stop, False))
    run_now = bool(st.session_state.pop(flag_run, False))
    slot = st.container()
    live = st.empty()
    if missing and (stopped or not run_now):
        lm = _model(ctx)
        ids = cached_decoder.shipped_ids(L, ctx.device)
        plan = eviction_plan(lm.model, ids, missing, RECORD)
        why = "Stopped. " if stopped else ""
        slot.info(f"{why}{len(missing)} of {len(settings)} decodes still to run ({L:,} tokens each, token by "
                  f"token): about {fmt_bytes(plan.nbytes)} and {plan.seconds:,.0f} s by its plan's estimate. "
                  "You can stop at any time; finished decodes are kept.", icon=":material/hourglass_top:")
        slot.button(f"Run {len(missing)} decode{'s' if len(missing) != 1 else ''}", key=f"{key}_btn",
                    type="primary", icon=":material/play_arrow:",
                    on_click=lambda: st.session_state.__setitem__(flag_run, True))
    elif missing:
        lm = _model(ctx)
        ids = cached_decoder.shipped_ids(L, ctx.device)
        plan = eviction_plan(lm.model, ids, missing, RECORD)
        bar = slot.progress(0.0, text=f"0 of {len(missing)} decodes")
        stop = slot.empty()
        stop.button("Stop", key=f"{key}_btn", icon=":material/stop:",
                    on_click=lambda: st.session_state.__setitem__(flag_stop, True))
        try:
            with plan.holding(), heavy(plan.nbytes, plan.seconds, label=plan.label, where=slot):
                for j, s in enumerate(missing):
                    d = evict_decode(lm.model, ids, s, record=RECORD)
                    store.put((L, ctx.device, s), (d.nll, d.kept, d.seconds))
                    bar.progress((j + 1) / len(missing), text=f"{j + 1} of {len(missing)} decodes (last: "
                                                              f"{s.label})")
                    _draw(_result(L, ctx.device, settings), live, key=f"chart_keep_budget_live_{j}")
        finally:
            bar.empty()
            stop.empty()
            live.empty()
    return _result(L, ctx.device, settings)


def keep_section(ctx: PageContext, where: Any) -> None:
    """The panel "Which tokens to keep" (its controls in ``where``)."""
    st.subheader("Which tokens to keep: KV-cache eviction at a fixed budget")
    L = int(widgets.slider(P_KL, "Eviction panel length (tokens)", where=where))
    b = int(widgets.number(P_KB, "Budget the maps show (keys)", where=where))
    layer = int(widgets.select(P_KLAY, "Layer the maps show", where=where))
    st.markdown(f"Decoding token by token with a cache of B keys per layer, the same B for every policy: a "
                f"**window** keeps the last B; **StreamingLLM** the first {SINKS} tokens and the last B "
                f"− {SINKS}; "
                "**H2O** half the budget for the keys with the most accumulated attention, half for "
                "recent ones; "
                "**TOVA** evicts the key the current query weighs least (averaged over the layer's "
                "heads). Keys "
                "stay at their true positions (StreamingLLM re-indexes them inside its cache).")
    st.latex(r"\text{ratio}(B) = \exp\Big(\tfrac{1}{T-B}\sum_{t \ge B} \ell^{\text{policy}}_t - "
             r"\ell^{\text{dense}}_t\Big)")
    live_part(ctx, L, b, layer)
    shipped_section(where)


def live_part(ctx: PageContext, L: int, b: int, layer: int) -> None:
    """The live run and its charts (a plain message for a budget it cannot show)."""
    problem = budget_problem(b, L)
    if problem is not None:
        st.warning(plain(problem), icon=":material/block:")
        return
    settings = panel_settings(L, b)
    r = run_keep(ctx, L, settings)
    if r is None or EvictionSetting("dense") not in r.settings:
        st.caption("Nothing decoded yet at this length: the charts appear as the decodes finish.")
        return
    pl = er.from_result(r, "the shipped text")
    st.plotly_chart(view.budget_figure(pl), key="chart_keep_budget")
    st.caption(er.winner_sentence(pl))
    widgets.table(view.table(pl))
    if b in pl.budgets and pl.policies(b):
        st.plotly_chart(view.loss_figure(pl, b), key="chart_keep_loss")
        texts = cached_decoder.decoder_tokens(L, ctx.device).texts
        marks = [i for i, t in enumerate(texts) if token_kind(t) == "punctuation"]
        maps = [(p, r.keep_map(EvictionSetting(p, b), layer)) for p in pl.policies(b)]
        st.plotly_chart(view.keep_map_figure(maps, b, layer, marks), key="chart_keep_map")
        st.caption(f"Layer {layer}, a budget of {b:,}: row t is what query t attends to; the diagonal "
                   "band is "
                   f"the recent tokens, column 0 the first token, the ticks above mark punctuation.")
        if b > 1 and (("window", b) in pl.rows and ("streaming", b) in pl.rows):
            st.caption(er.split_sentence(er.split(pl, b), "The shipped text"))
    st.plotly_chart(view.first_figure(pl), key="chart_keep_first")
    st.caption(er.first_token_sentence(pl))
    widgets.caption_compute(ctx.device_label, sum(r.seconds), f"{len(r.settings)} token-by-token decodes of "
                                                               f"{L:,} tokens")


TOVA_PROTOCOL = ("TOVA's paper (Oren et al. 2024, arXiv 2401.06104) compares these policies on larger LLMs "
                 "and longer texts; its numbers are not shown here, because its table could not be read "
                 "here and pinned to its model, data and cache size. The protocols also differ: the authors' "
                 "cache size does not count the current query (their cache of c is a budget of c + 1 here), "
                 "H2O's code keeps a set per head (one per layer here, as TOVA does), and StreamingLLM's "
                 "cache re-indexes positions inside it (true positions here). This run: SmolLM2-135M, one "
                 "text, at most 2,048 tokens.")


def shipped_section(where: Any) -> None:
    """The shipped 2,048-token run: the complete file, else the partial one, saying how many decodes are
    in."""
    box = st.expander("The shipped run at 2,048 tokens (prose and code)", key="keep_shipped_open",
                      on_change="rerun", icon=":material/inventory_2:")
    if not box.open:
        return
    with box:
        text = str(widgets.radio(P_KTXT, "Shipped eviction run's text", where=where, horizontal=True,
                                 labels={"prose": "Shakespeare", "code": "Python source"}))
        try:
            run = load_eviction_run(shipped_run_path())
        except AttnInputError:
            st.info("The shipped eviction run is not available.", icon=":material/draft:")
            return
        st.markdown(f"Shipped run: {er.run_progress(run)}")
        try:
            pl = er.from_run(run, text)
        except AttnInputError:
            st.info(f"No decode of {TEXT_NAMES[text]} is in yet.", icon=":material/draft:")
            return
        st.plotly_chart(view.budget_figure(pl, tag="keep_shipped_budget"), key="chart_keep_shipped_budget")
        st.caption(er.winner_sentence(pl))
        for b in pl.budgets:
            if ("window", b) in pl.rows and ("streaming", b) in pl.rows:
                st.caption(er.split_sentence(er.split(pl, b), plain(pl.text)))
        b0 = pl.budgets[0]
        grids = [(p, run.rows[(text, p, b0)]["occupancy"]) for p in pl.policies(b0)]
        st.plotly_chart(view.occupancy_figure(grids, pl.length, "keep_shipped_map"),
                        key="chart_keep_shipped_map")
        st.caption(f"Middle layer, a budget of {b0:,}: the share of each block of cells kept (steps down, "
                   f"positions across). {er.first_token_sentence(pl)}")
        widgets.table(view.table(pl))
        h = run.header
        st.caption(plain(f"Computed by `{h.get('command', '?')}` on {h.get('cpu', '?')} "
                         f"({h.get('cores', '?')} "
                         f"cores, {h.get('threads', '?')} torch threads), commit "
                         f"{str(h.get('commit', '?'))[:10]}, "
                         f"{h.get('date', '?')}; {pl.text}."))
        st.caption(TOVA_PROTOCOL)
