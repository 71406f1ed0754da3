"""The Saturation & gradients page's tab "Real model": the sources' 1/√d argument held against SmolLM2.

Widgets -> cached call (:mod:`ui.cached_scaling`) -> view (:mod:`ui.views.saturation_real`) -> text
(:mod:`ui.views.saturation_real_text`). The intervention (every logit times c) runs setting by setting with a
progress bar and a Stop button; every finished setting is kept in an in-process store, so a stopped run shows
what it has and the next run computes only what is missing (as the StreamingLLM panel does).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

import streamlit as st

from attncore.decoder.plans import scaling_plan
from attncore.decoder.probe import decoder_shape
from attncore.decoder.scaling import FACTORS, ScaledRun, scaled_run
from attncore.decoder.text import SHIPPED_TEXT_TITLE
from attncore.evidence.decoder import MODEL_LABEL
from attncore.models import load_bytes
from ui import cached_models, cached_scaling, widgets
from ui.admission import heavy
from ui.cached_decoder import shipped_ids
from ui.decoder_lab import run_or_wait
from ui.page import PageContext
from ui.realtext import MODEL_LOAD_BYTES
from ui.realtext import _ProgressBar as ProgressBar  # the first-load bar of the model picker
from ui.state import Param
from ui.views import saturation_real as view
from ui.views import saturation_real_text as words

__all__ = ["REAL_PARAMS", "all_runs", "real_model", "scale_store"]

P_RL = Param("sat_rl", 128, options=(64, 128, 256, 512))
P_RSTAT = Param("sat_rstat", "std", options=tuple(view.HEAD_STATS))
REAL_PARAMS = (P_RL, P_RSTAT)
_STORE_SIZE = 64


class _ScaleStore:
    """Finished intervention settings, shared by the sessions of this process: (L, device, c) -> run."""

    def __init__(self, size: int) -> None:
        self._d: OrderedDict[tuple[Any, ...], ScaledRun] = OrderedDict()
        self._lock = threading.Lock()
        self._size = size

    def get(self, key: tuple[Any, ...]) -> ScaledRun | None:
        with self._lock:
            return self._d.get(key)

    def put(self, key: tuple[Any, ...], run: ScaledRun) -> None:
        with self._lock:
            self._d[key] = run
            self._d.move_to_end(key)
            while len(self._d) > self._size:
                self._d.popitem(last=False)


@st.cache_resource
def scale_store() -> _ScaleStore:
    """The process-wide store of finished intervention settings."""
    return _ScaleStore(_STORE_SIZE)


def _model(ctx: PageContext) -> Any:
    with heavy(max(MODEL_LOAD_BYTES, load_bytes("smollm2")), seconds=5.0, label="loading the model"):
        return cached_models.language_model("smollm2", ctx.device, progress=ProgressBar())


def real_model(ctx: PageContext) -> None:
    """The tab: the real heads' spread beside the seed's law, then the intervention."""
    st.markdown(f"The argument for 1/√d assumes unit-variance, independent q and k: then q·k/√d ~ N(0, 1). "
                f"Here is what a trained model's heads actually produce ({MODEL_LABEL}, the shipped text, "
                f"*{SHIPPED_TEXT_TITLE}*), and what its softmax does when the scale is changed at inference.")
    st.latex(r"s_{ij}=\frac{q_i\cdot k_j}{\sqrt d}\ \ (j\le i),\qquad"
             r"\text{seed: } s_{ij}\sim\mathcal N(0,1),\qquad"
             r"\text{intervention: } s_{ij}\to c\,s_{ij},\ c=\sqrt{d}=8\ \text{is no }1/\sqrt d")
    side = ctx.controls
    side.markdown("#### Real model")
    L = widgets.select_slider(P_RL, "Tokens of the shipped text", fmt=lambda v: f"{v:,}", where=side)
    stat = widgets.select(P_RSTAT, "Per-head map", labels=view.HEAD_STATS, where=side)
    lm = _model(ctx)
    spread_section(ctx, L, stat, decoder_shape(lm.model).kv_heads)
    st.divider()
    scale_section(ctx, L, lm)


def spread_section(ctx: PageContext, L: int, stat: str, kv_heads: int) -> None:
    st.markdown("##### The spread of the scaled logits, head by head")
    got = run_or_wait("sat_spread", f"The logit statistics ({L:,} tokens)",
                      [(cached_scaling.decoder_spread, (L, ctx.device))],
                      [(cached_scaling.decoder_spread, (P_RL.default, ctx.device))])
    if got is None:
        return
    res = got[0]
    sp = res.value
    gauss = cached_scaling.gaussian_rows(view.SPREAD_SIGMAS, L, ctx.seed)
    st.plotly_chart(view.spread_figure(sp, view.SPREAD_SIGMAS, gauss.value), key="chart_sat-real-spread")
    at = words.gauss_at(gauss.value, view.SPREAD_SIGMAS)
    st.markdown(words.spread_sentence(sp, at[1.0], MODEL_LABEL))
    st.plotly_chart(view.heads_figure(sp, stat, kv_heads), key="chart_sat-real-heads")
    widgets.csv_download(lambda: view.spread_frame(sp), f"logit_spread_L{L}.csv", label="Download (CSV)",
                         key="dl_sat_real_spread")
    widgets.caption_compute(ctx.device_label, res.seconds + gauss.seconds,
                            "q and k rebuilt in each layer's attention with the model's own rotary; rows "
                            f"are queries 1..{L - 1} (query 0 sees one key). Dashed: 4 draws of i.i.d. "
                            f"N(0, σ²) causal logits of {L:,} rows per σ through the same statistics "
                            f"(seed {ctx.seed}).")


def scale_section(ctx: PageContext, L: int, lm: Any) -> None:
    st.markdown("##### Every logit times c, at inference")
    st.markdown("One forward pass of the shipped text per c, with every head's `scaling` set to c/√d "
                "(restored after the pass): c < 1 flattens every row, c > 1 sharpens it, c = 8 = √64 is "
                "attention without its 1/√d. Equivalent to a softmax temperature of 1/c in every head.")
    runs = run_panel(ctx, L, lm)
    if not runs:
        return
    gauss = cached_scaling.gaussian_rows(FACTORS, L, ctx.seed)
    st.plotly_chart(view.scale_figure(runs, FACTORS, gauss.value), key="chart_sat-real-scale")
    st.markdown(words.scale_sentence(runs, words.gauss_at(gauss.value, FACTORS), len(FACTORS)))
    widgets.table(view.scale_frame(runs))
    widgets.csv_download(lambda: view.scale_frame(runs), f"scale_intervention_L{L}.csv",
                         label="Download (CSV)", key="dl_sat_real_scale")
    st.caption(words.CAVEAT)
    widgets.caption_compute(ctx.device_label, sum(r.seconds for r in runs),
                            f"{len(runs)} eager passes of {L:,} tokens; sink heads: Gu et al.'s "
                            f"first-token score above {runs[0].eps:g}; saturated rows: queries 1..{L - 1}. "
                            f"Dashed: i.i.d. N(0, c²) causal rows (seed {ctx.seed}).")


def all_runs(ctx: Any, L: int, lm: Any) -> list[ScaledRun]:
    """Every factor at once, without a Run button (the Tour's step, at a short length), through the same store
    as the page's panel, so "Open this in full" shows the same runs."""
    store = scale_store()
    base = (L, ctx.device)
    missing = [c for c in FACTORS if store.get((*base, c)) is None]
    if missing:
        ids = shipped_ids(L, ctx.device)
        plan = scaling_plan(lm.model, ids, tuple(missing))
        with plan.holding(), heavy(plan.nbytes, plan.seconds, label=plan.label):
            for c in missing:
                store.put((*base, c), scaled_run(lm.model, ids, c))
    return [r for c in FACTORS if (r := store.get((*base, c))) is not None]


def run_panel(ctx: PageContext, L: int, lm: Any) -> list[ScaledRun]:
    """The finished settings: stored ones at once, the rest after the Run button, with progress and Stop."""
    store = scale_store()
    key = "sat_scale"
    base = (L, ctx.device)
    missing = [c for c in FACTORS if store.get((*base, c)) is None]
    flag_stop, flag_run = f"{key}__stopped", f"{key}__run"
    stopped = bool(st.session_state.pop(flag_stop, False))
    run_now = bool(st.session_state.pop(flag_run, False))
    slot = st.container()
    if missing and (stopped or not run_now):
        why = "Stopped. " if stopped else ""
        slot.info(f"{why}{len(missing)} of {len(FACTORS)} settings still to run ({L:,} tokens each). "
                  "You can stop at any time; finished settings are kept.", icon=":material/hourglass_top:")
        slot.button(f"Run {len(missing)} setting{'s' if len(missing) != 1 else ''}", key=f"{key}_btn",
                    type="primary", icon=":material/play_arrow:",
                    on_click=lambda: st.session_state.__setitem__(flag_run, True))
    elif missing:
        ids = shipped_ids(L, ctx.device)
        bar = slot.progress(0.0, text=f"0 of {len(missing)} settings")
        stop = slot.empty()
        stop.button("Stop", key=f"{key}_btn", icon=":material/stop:",
                    on_click=lambda: st.session_state.__setitem__(flag_stop, True))
        partial = slot.empty()
        plan = scaling_plan(lm.model, ids, tuple(missing))  # its estimate; the settings run one by one
        try:
            with plan.holding(), heavy(plan.nbytes, plan.seconds, label=plan.label, where=slot):
                for i, c in enumerate(missing):
                    store.put((*base, c), scaled_run(lm.model, ids, c))
                    bar.progress((i + 1) / len(missing),
                                 text=f"{i + 1} of {len(missing)} settings (last: c = {c:g})")
                    done = [r for f in FACTORS if (r := store.get((*base, f))) is not None]
                    partial.dataframe(view.scale_frame(done), hide_index=True)  # partial results as they come
        finally:
            bar.empty()
            stop.empty()
            partial.empty()
    return [r for c in FACTORS if (r := store.get((*base, c))) is not None]
