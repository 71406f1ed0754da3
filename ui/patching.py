"""The "Activation patching" section of Heatmaps' real text for a decoder (issue 40 item 5): a clean and a
corrupted prompt, and the share of their logit difference that each layer's residual stream (per position)
and each head's output give back when copied from the clean run into the corrupted one.

Data flow: widgets -> :func:`attncore.decoder.plans.patching_plan` (admitted by its estimate, layer by layer
with a progress bar and a Stop button) -> :mod:`ui.views.patching` -> text. Finished and stopped results are
kept per prompt pair in the real models' result cache (:func:`ui.cached.result_cache`), so a stopped run
shows what it has and continues from there.
The section is a lazy expander: nothing runs until it is opened. The pair's texts are typed in the section
and kept in the session (not in the URL); the URL holds which pair.
"""

from __future__ import annotations

import time
from typing import Any

import streamlit as st

from attncore.budget import fmt_bytes
from attncore.decoder.patching import PAIRS, PairIds, Patching, pair_ids, patch_bytes
from attncore.decoder.plans import patching_plan
from attncore.decoder.probe import decoder_shape
from attncore.errors import AttnInputError
from attncore.models import canonical_source
from attncore.models.tokens import display_tokens, tokenizer_kind
from ui import widgets
from ui.admission import heavy
from ui.cached import Timed, rerun_pending, result_cache, text_key
from ui.lens import is_lens_model
from ui.page import PageContext
from ui.realtext import Chosen
from ui.state import Param
from ui.sweep import AUTO_RUN_S
from ui.text import plain
from ui.views import patching as view
from ui.views.decoder import head_labels

__all__ = ["KIND", "OWN", "PARAMS", "P_PAIR", "TITLE", "section"]

TITLE = "Activation patching: which layers, positions and heads carry the answer"
OWN = "own"
P_PAIR = Param("rt_pp", PAIRS[0].key, options=(*(p.key for p in PAIRS), OWN))
PARAMS = (P_PAIR,)
LABELS = {**{p.key: p.title for p in PAIRS}, OWN: "Your own pair"}
OWN_FIELDS = (("clean", "Clean prompt"), ("corrupted", "Corrupted prompt (same number of tokens)"),
              ("answer", "Clean answer (one token, with its leading space)"),
              ("wrong", "Corrupted answer (one token)"))
KIND = "patching"  # the results' kind in ui.cached.result_cache (finished and stopped runs alike)


def section(ch: Chosen, ctx: PageContext, *, key: str) -> None:
    """The expander: the pair picker, the two maps of recovered shares and the sentence that reads them."""
    if not is_lens_model(ch):
        return
    box = widgets.lazy_expander(TITLE, f"{key}_open", icon=":material/swap_horiz:")
    if box is None:
        return
    with box:
        _draw(ch, ctx, key)


def _texts(choice: str, key: str) -> tuple[str, str, str, str]:
    if choice != OWN:
        p = next(p for p in PAIRS if p.key == choice)
        return p.clean, p.corrupted, p.answer, p.wrong
    first = PAIRS[0]
    with st.form(f"{key}_form", border=False):
        vals = [st.text_input(label, value=getattr(first, name), key=f"{key}_{name}", max_chars=1000)
                for name, label in OWN_FIELDS]
        st.form_submit_button("Use this pair", icon=":material/check:")
    return vals[0], vals[1], vals[2], vals[3]


def _draw(ch: Chosen, ctx: PageContext, key: str) -> None:
    lm = ch.lm
    st.markdown("Run the corrupted prompt with one activation copied in from the clean prompt's run: how "
                "much of the logit difference between the two answers comes back? Each cell is one patch: "
                "the residual stream entering a layer at one position, or one head's output (its slice of "
                "the input of `o_proj`, every position).")
    st.latex(r"\text{share} = \frac{m_\text{patched} - m_\text{corrupted}}"
             r"{m_\text{clean} - m_\text{corrupted}},\qquad "
             r"m = \mathrm{logit}(\text{answer}) - \mathrm{logit}(\text{wrong})")
    choice = widgets.radio(P_PAIR, "Prompt pair", labels=LABELS)
    clean, corrupted, answer, wrong = _texts(choice, key)
    try:
        pair = pair_ids(lm.tokenizer, clean, corrupted, answer, wrong)
    except AttnInputError as exc:
        st.info(plain(f"Not patched: {exc}"), icon=":material/info:")
        return
    kind = tokenizer_kind(lm.tokenizer)
    tokens = display_tokens(lm.tokenizer.convert_ids_to_tokens(pair.corrupted[0].tolist()), kind)
    st.caption(plain(f"Clean: “{clean}” → “{answer}”. Corrupted: “{corrupted}” → “{wrong}”. "
                     f"{pair.length} tokens each."))
    texts = (clean, corrupted, answer, wrong)
    k = (KIND, canonical_source(ch.source), ctx.device, *(text_key(t) for t in texts))
    try:
        got = _run(ch, ctx, pair, k, key)
    except AttnInputError as exc:
        st.info(plain(f"Not patched: {exc}"), icon=":material/info:")
        return
    if got is None:
        return
    r, seconds = got
    st.caption(plain(view.patching_sentence(r, tokens, answer.strip() or answer, wrong.strip() or wrong)))
    left, right = st.columns([3, 2])
    if r.resid is not None:
        left.plotly_chart(view.resid_figure(r, tokens), key=f"chart_{key}_resid")
    if r.heads is not None:
        right.plotly_chart(view.heads_figure(r, head_labels(lm.heads, lm.kv_heads or lm.heads)),
                           key=f"chart_{key}_heads")
    need = patch_bytes(decoder_shape(lm.model), pair.length)
    widgets.caption_compute(ctx.device_label, seconds,
                            f"Batched passes of {lm.name}: per layer one of {pair.length} rows (a position "
                            f"each) and one of {lm.heads} rows (a head each), about {fmt_bytes(need)} "
                            "estimated.")
    widgets.csv_download(lambda: view.patching_frame(r, tokens), "activation_patching.csv",
                         label="Download the shares (CSV)", key=f"dl_{key}_patch")


def _run(ch: Chosen, ctx: PageContext, pair: PairIds, k: tuple[Any, ...],
         key: str) -> tuple[Patching, float] | None:
    """The stored result, or a Run / Continue button, or the run itself with a progress bar and Stop."""
    store = result_cache()
    hit: Timed[Patching] | None = store.get(k)
    got = (hit.value, hit.seconds) if hit is not None else None
    if got is not None and got[0].complete:
        return got
    flag_stop, flag_run = f"{key}__stopped", f"{key}__run"
    stopped = bool(st.session_state.pop(flag_stop, False))
    run_now = bool(st.session_state.pop(flag_run, False))
    partial, before = got if got is not None else (None, 0.0)
    plan = patching_plan(ch.lm.model, pair, resume=partial)
    slot = st.container()
    if stopped or not (run_now or (partial is None and plan.seconds <= AUTO_RUN_S)):
        done = f"Stopped after {partial.steps[0]} of {partial.steps[1]} layer steps. " if partial else ""
        slot.info(f"{done}Patching runs {2 * ch.lm.layers} batched passes: about {plan.seconds:,.0f} s by "
                  "its plan's estimate (a small server's rate). You can stop at any time; what is done is "
                  "kept.",
                  icon=":material/hourglass_top:")
        slot.button("Continue" if partial else "Run patching", key=f"{key}_btn", type="primary",
                    icon=":material/play_arrow:",
                    on_click=lambda: st.session_state.__setitem__(flag_run, True))
        return got
    bar = slot.progress(0.0, text="patching: the clean and corrupted passes")
    stop = slot.empty()
    stop.button("Stop", key=f"{key}_btn", icon=":material/stop:",
                on_click=lambda: st.session_state.__setitem__(flag_stop, True))
    t0 = time.perf_counter()

    def progress(done: int, total: int, r: Patching) -> None:
        store.put(k, Timed(r, before + time.perf_counter() - t0))  # kept first: the bar may end the run
        bar.progress(done / total, text=f"{done} of {total} layer steps")

    plan = patching_plan(ch.lm.model, pair, progress=progress, cancel=rerun_pending, resume=partial)
    try:
        with plan.holding(), heavy(plan.nbytes, plan.seconds, label=plan.label, where=slot):
            r = plan.run()
    finally:
        bar.empty()
        stop.empty()
    seconds = before + time.perf_counter() - t0
    store.put(k, Timed(r, seconds))
    return r, seconds
