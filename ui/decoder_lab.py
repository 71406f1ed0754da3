"""A real decoder (SmolLM2) on the pages: the Attention sinks page's part "a real decoder" and the
Entropy vs length page's real-model view.

Widgets -> cached call (:mod:`ui.cached`) -> view (:mod:`ui.views.decoder`) -> text. The StreamingLLM
panel runs setting by setting with a progress bar and a Stop button; every finished setting is kept in
an in-process store, so a stopped panel shows what it has and a new run computes only what is missing.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import streamlit as st
import torch

from attncore.decoder.induction import MAX_COPY
from attncore.decoder.plans import stream_plan
from attncore.decoder.probe import MAX_DECODER_TOKENS, decoder_shape
from attncore.decoder.sinks import GU_TOKENS
from attncore.decoder.stream_run import STREAM_RUN_LENGTH, run_settings
from attncore.decoder.streaming import StreamResult, StreamSetting, default_settings, stream_losses
from attncore.decoder.text import MIN_TEXT_TOKENS, SHIPPED_TEXT_NAME, SHIPPED_TEXT_TITLE
from attncore.errors import AttnInputError
from attncore.evidence.decoder import MODEL_LABEL
from attncore.models import load_bytes
from ui import cached_decoder, cached_models, eviction_panel, realtext, widgets
from ui.admission import heavy
from ui.cached import Planned, text_key
from ui.page import PageContext
from ui.realtext import MODEL_LOAD_BYTES
from ui.realtext import _ProgressBar as ProgressBar  # the first-load bar of the model picker
from ui.state import Param
from ui.sweep import AUTO_RUN_S
from ui.text import plain
from ui.views import decoder as view
from ui.views import sink_position as pos_view

__all__ = ["DECODER_PARAMS", "ENTROPY_PARAMS", "SHIPPED_RUN_OPEN", "SHIPPED_RUN_TITLE", "ChosenText",
           "choose_text", "decoder_part", "entropy_part", "short_for_shift", "stream_store",
           "VARIANTS_OPEN", "variants_length"]

P_SRC = Param("dec_src", "shipped", options=("shipped", "own"))
P_TEXT = Param("dec_text", "")  # at most MAX_TEXT_CHARS characters (ui.realtext.long_text_box)
P_L = Param("dec_L", 256, lo=MIN_TEXT_TOKENS, hi=1024)
P_SHIFT = Param("dec_shift", 3, lo=1, hi=32)
P_SL = Param("dec_sl", 512, lo=64, hi=MAX_DECODER_TOKENS)
P_W1 = Param("dec_w1", 64, lo=4, hi=1024)
P_W2 = Param("dec_w2", 128, lo=4, hi=1024)
P_AW = Param("dec_aw", 4, lo=4, hi=8)  # at least 4 windows: a t interval over 2 is too wide to read
P_AL = Param("dec_al", 256, lo=32, hi=512)
P_T = Param("dec_T", 64, lo=4, hi=MAX_COPY)
P_HEAD = Param("dec_ih", 0, lo=0, hi=2)
DECODER_PARAMS = (P_SRC, P_TEXT, P_L, P_SHIFT, P_SL, P_W1, P_W2, P_AW, P_AL, P_T, P_HEAD)
P_EL = Param("ent_dl", 512, lo=16, hi=1024)
P_FIRST = Param("ent_dfirst", "with", options=("with", "without"))
P_SHOW = Param("ent_dec", False)
ENTROPY_PARAMS = (P_SHOW, P_EL, P_FIRST)

_STORE_SIZE = 64
POSITION_EPS = 0.3  # Gu et al.'s threshold, for where the sink goes


class _StreamStore:
    """Finished StreamingLLM settings (per-position losses), shared by the sessions of this process."""

    def __init__(self, size: int) -> None:
        self._d: OrderedDict[tuple[Any, ...], tuple[torch.Tensor, float]] = OrderedDict()
        self._lock = threading.Lock()
        self._size = size

    def get(self, key: tuple[Any, ...]) -> tuple[torch.Tensor, float] | None:
        with self._lock:
            v = self._d.get(key)
            if v is not None:
                self._d.move_to_end(key)
            return v

    def put(self, key: tuple[Any, ...], value: tuple[torch.Tensor, float]) -> None:
        with self._lock:
            self._d[key] = value
            self._d.move_to_end(key)
            while len(self._d) > self._size:
                self._d.popitem(last=False)


@st.cache_resource
def stream_store() -> _StreamStore:
    """The process-wide store of finished StreamingLLM settings."""
    return _StreamStore(_STORE_SIZE)


def _model(ctx: PageContext) -> Any:
    with heavy(max(MODEL_LOAD_BYTES, load_bytes("smollm2")), seconds=5.0, label="loading the model"):
        return cached_models.language_model("smollm2", ctx.device, progress=ProgressBar())


Call = tuple[Planned[Any], tuple[Any, ...]]


def _seconds(calls: Sequence[Call]) -> float:
    return sum(fn.plan(*args).seconds for fn, args in calls if fn.peek(*args) is None)


def run_or_wait(key: str, what: str, calls: Sequence[Call], defaults: Sequence[Call]) -> list[Any] | None:
    """The results of ``calls`` (planned cached computations and their arguments): at once when cached or
    when their plans' estimated seconds are within :data:`ui.sweep.AUTO_RUN_S` or the same section's at its
    defaults (``defaults``); otherwise None, with the estimate and a Run button (as the Entropy sweeps wait),
    and they run on the click. Each is admitted by its plan (:class:`ui.cached.Planned`)."""
    est = _seconds(calls)
    flag = f"{key}__run"
    if est > max(AUTO_RUN_S, _seconds(defaults)) and not st.session_state.pop(flag, False):
        st.info(f"{what}: about {est:,.0f} s of computing by its plan's estimate (a small server's rate), "
                "more than the default view's, so it waits for you.", icon=":material/hourglass_top:")
        st.button(f"Run (≈ {est:,.0f} s)", key=f"{key}_btn", type="primary", icon=":material/play_arrow:",
                  on_click=lambda: st.session_state.__setitem__(flag, True))
        return None
    return [fn(*args) for fn, args in calls]


@dataclass(frozen=True)
class ChosenText:
    """The text the sink heads and the variants read: ``text`` None for the shipped one; ``total`` its
    tokens (SmolLM2's tokenizer)."""

    text: str | None
    total: int

    @property
    def name(self) -> str:
        """What the captions call it."""
        if self.text is None:
            return f"{SHIPPED_TEXT_NAME}, shipped with the app"
        return f"your text, {self.total:,} token{'s' if self.total != 1 else ''}"


def _say_what(chosen: ChosenText | None = None) -> None:
    name = chosen.name if chosen is not None else f"{SHIPPED_TEXT_NAME}, shipped with the app"
    st.caption(f"Model: {MODEL_LABEL}. Text: {name}; the tokenizer adds no BOS token, so the first token is "
               "the text's own first token.")


def _shipped_note(what: str) -> None:
    """Said beside a section that stays on the shipped text while the user's own text is chosen."""
    if widgets.value(P_SRC) == "own":
        st.caption(f"{what} on the shipped text ({SHIPPED_TEXT_NAME}), not on yours.")


# ---------------------------------------------------------------------------- the sinks page


def decoder_part(ctx: PageContext, eps: float) -> None:
    """The Attention sinks page's part "a real decoder" (``eps``: the sink-head threshold)."""
    where = ctx.controls
    src = widgets.radio(P_SRC, "Text", where=where, horizontal=False,
                        labels={"shipped": f"Shipped excerpt ({SHIPPED_TEXT_TITLE})", "own": "Your own text"})
    L = widgets.slider(P_L, "Your length (tokens)", where=where)
    lm = _model(ctx)
    kv = decoder_shape(lm.model).kv_heads
    chosen = choose_text(ctx, src, L)
    if chosen is not None:
        _say_what(chosen)
    sinks_section(ctx, L, eps, kv, chosen)
    variants_section(ctx, where, eps, chosen)
    stream_section(ctx, where)
    eviction_panel.keep_section(ctx, where)
    ablation_section(ctx, where)
    induction_section(ctx, where, kv)


def choose_text(ctx: PageContext, src: str, L: int) -> ChosenText | None:
    """The shipped text, or the user's own from the text box (None, with a plain message, while it is
    empty or gives fewer than :data:`MIN_TEXT_TOKENS` tokens). Says when it has fewer tokens than asked."""
    if src == "shipped":
        return ChosenText(None, cached_decoder.decoder_tokens(L, ctx.device).total)
    text = realtext.long_text_box(
        P_TEXT, "Your text", height=120,
        help=f"Any text; SmolLM2's tokenizer reads it. The sink heads read its first {GU_TOKENS} tokens "
             f"(Gu et al.'s protocol) and its first {L} (your length), or all of it when it has fewer; at "
             f"least {MIN_TEXT_TOKENS} tokens. Ctrl+Enter applies it.")
    if not text.strip():
        st.info(f"Type or paste a text in the box above: the sink heads and the variants run on it (at least "
                f"{MIN_TEXT_TOKENS} tokens; {GU_TOKENS} for Gu et al.'s protocol, {L} for your length).",
                icon=":material/edit_note:")
        return None
    try:
        total = cached_decoder.decoder_tokens(L, ctx.device, text).total
    except AttnInputError as e:  # too short (the message holds numbers only, never the text)
        st.warning(f"Your text cannot be measured: {e}", icon=":material/short_text:")
        return None
    if total < min(L, GU_TOKENS):
        st.info(f"Your text gives {total:,} tokens, fewer than the {GU_TOKENS} of Gu et al.'s protocol and "
                f"your length ({L:,}): both measurements read all {total:,}.", icon=":material/short_text:")
    elif total < L:
        st.info(f"Your text gives {total:,} tokens, fewer than your length ({L:,}): that measurement reads "
                f"all {total:,}.", icon=":material/short_text:")
    elif total < GU_TOKENS:
        st.info(f"Your text gives {total:,} tokens, fewer than the {GU_TOKENS} of Gu et al.'s protocol: that "
                f"measurement reads all {total:,}.", icon=":material/short_text:")
    return ChosenText(text, total)


def _nothing_yet() -> None:
    st.caption("Nothing to measure until the text above gives enough tokens.")


def sink_lengths(s64: Any, sL: Any) -> tuple[str, list[tuple[str, np.ndarray]]]:
    """The sink sentence and the share curves at Gu et al.'s length and at L: one of each when the text
    makes the two lengths equal (a 56-token text: "At 56 tokens" once, one legend entry)."""
    gu = ("their protocol" if s64.length == GU_TOKENS
          else f"their protocol asks for {GU_TOKENS}; the text has {s64.length}")
    first = (f"{s64.length} tokens", s64.share.numpy())
    if sL.length == s64.length:
        return view.sink_sentence(s64, f"At {s64.length} tokens ({gu})"), [first]
    return (view.sink_sentence(s64, f"At {s64.length} tokens ({gu})") + " "
            + view.sink_sentence(sL, f"At {sL.length} tokens"),
            [first, (f"{sL.length} tokens", sL.share.numpy())])


def sinks_section(ctx: PageContext, L: int, eps: float, kv: int, chosen: ChosenText | None = None) -> None:
    st.subheader("Sink heads (Gu et al. 2024)")
    if chosen is None:
        _nothing_yet()
        return
    text = chosen.text
    key = text_key(text)
    sinks = cached_decoder._decoder_sinks
    # lengths cut to the text's tokens: a text of at most 64 tokens reads the same tokens at both, so the
    # second call is the first's cached result (one pass, not two: issue 41 item 7c)
    n64, nL, nd = (min(n, chosen.total) for n in (GU_TOKENS, L, P_L.default))
    got = run_or_wait("dec_sinks", f"The sink heads at {nL:,} tokens",
                      [(sinks, (n64, eps, ctx.device, key, text)),
                       (sinks, (nL, eps, ctx.device, key, text))],
                      [(sinks, (n64, eps, ctx.device, key, text)),
                       (sinks, (nd, eps, ctx.device, key, text))])
    if got is None:
        return
    small, big = got
    s64, sL = small.value, big.value
    st.plotly_chart(view.sink_grid_figure(sL, kv), key="chart_dec_sink_grid")
    sentence, shares = sink_lengths(s64, sL)
    st.caption(f"Text: {chosen.name}. " + sentence)
    widgets.caption_compute(ctx.device_label, small.seconds + big.seconds,
                            "two passes with every head's weights")
    st.plotly_chart(view.share_figure(shares), key="chart_dec_sink_share")
    st.markdown("**Which tokens draw weight besides the first?** The first token taken out of every query's "
                "weights (the rest re-summed to 1): mean score of each kind of token against what uniform "
                "attention over the same keys gives it (dashes).")
    st.plotly_chart(view.kind_figure(sL), key="chart_dec_kinds")
    st.caption(plain(view.kind_sentence(sL)))
    widgets.table(view.attractor_frame(sL))
    st.markdown("**Value-state drain**: the first token's value vector against the others'." if sL.sink_heads
                else "**Value norms** (no sink head at this length, so no drain to speak of).")
    st.plotly_chart(view.value_figure(sL), key="chart_dec_value")
    st.markdown("**Massive activations (Sun et al. 2024)**: the first token's residual stream against the "
                "others'.")
    st.plotly_chart(view.massive_figure(sL), key="chart_dec_massive")
    st.caption(view.massive_sentence(sL))
    widgets.csv_download(lambda: view.massive_frame(sL), "massive_activations.csv", key="dl_dec_massive")


VARIANTS_OPEN = "dec_var_open"  # the own-text variants' expander (a view, not a setting: not in the URL)


def variants_length(total: int, shift: int) -> int:
    """Tokens each variant reads: Gu et al.'s 64, or what the text has left after the shift when fewer
    (0 when the shift is not shorter than the text)."""
    return max(0, min(GU_TOKENS, total - shift))


def short_for_shift(total: int, shift: int) -> str | None:
    """The plain message when a text of ``total`` tokens shifted by ``shift`` leaves fewer than the
    :data:`MIN_TEXT_TOKENS` the variants need (None when it leaves enough): what is left, or that the
    shift passes the text's end, and the largest shift this text allows."""
    left = total - shift
    if left >= MIN_TEXT_TOKENS:
        return None
    what = (f"shifted by {shift} it leaves {left}" if left > 0
            else f"a shift of {shift} tokens {'is' if left == 0 else 'goes past'} its whole length")
    most = total - MIN_TEXT_TOKENS
    fix = (f"Lower the shift to {most} or less, or use a longer text." if most >= P_SHIFT.lo
           else f"Use a longer text: at least {MIN_TEXT_TOKENS + shift} tokens for a shift of {shift}.")
    return (f"Your text gives {total:,} tokens; {what}, fewer than the {MIN_TEXT_TOKENS} the variants need. "
            f"{fix}")


def variants_section(ctx: PageContext, where: Any, eps: float, chosen: ChosenText | None = None) -> None:
    st.subheader("Does content matter?")
    shift = widgets.slider(P_SHIFT, "Shift the text by (tokens)", where=where)
    if chosen is None:
        _nothing_yet()
        return
    n = variants_length(chosen.total, shift)
    short = short_for_shift(chosen.total, shift)
    if short is not None:
        st.info(short, icon=":material/short_text:")
        return
    if chosen.text is not None:  # a student's own text: three more passes, run when opened (issue 41 7c)
        box = st.expander(f"Run the three variants on your text ({n} tokens each)", key=VARIANTS_OPEN,
                          on_change="rerun", icon=":material/compare_arrows:")
        if not box.open:
            return
        with box:
            _variants(ctx, eps, chosen, shift, n)
        return
    _variants(ctx, eps, chosen, shift, n)  # the shipped text: cached at the server's warm-up (ui.warmup)


def _variants(ctx: PageContext, eps: float, chosen: ChosenText, shift: int, n: int) -> None:
    # at most 64 tokens: runs at once
    res = cached_decoder.decoder_variants(shift, eps, ctx.device, chosen.text, n)
    widgets.table(view.variants_frame(res.value))
    v = res.value
    fewer = "" if n == GU_TOKENS else f" (Gu et al.'s {GU_TOKENS} do not fit in the text shifted by {shift})"
    st.caption(f"Text: {chosen.name}. At {n} tokens{fewer}: {v[0].sink_heads} sink heads as written, "
               f"{v[1].sink_heads} with another first token, {v[2].sink_heads} with the text shifted by "
               f"{shift}.")


def _settings(L: int, w1: int, w2: int) -> tuple[StreamSetting, ...]:
    ws = tuple(sorted({min(w1, L - 1), min(w2, L - 1)}))
    return default_settings(L, ws)


def stream_section(ctx: PageContext, where: Any) -> None:
    st.subheader("StreamingLLM on real text")
    _shipped_note("This panel runs")
    L = widgets.slider(P_SL, "Panel length (tokens)", where=where)
    w1 = widgets.slider(P_W1, "Window 1 (keys)", where=where)
    w2 = widgets.slider(P_W2, "Window 2 (keys)", where=where)
    settings = _settings(L, w1, w2)
    st.markdown(f"{len(settings)} settings, one forward pass each under a banded mask at the true positions: "
                "at every layer query i sees keys i − W + 1 … i, plus the first k. That is a rolling KV "
                "cache; StreamingLLM's cache re-indexes positions inside it, here the kept first tokens sit "
                "at their true distance.")
    result = run_panel(ctx, L, settings)
    if result is not None and result.settings:
        st.plotly_chart(view.stream_figure(result), key="chart_dec_stream")
        st.caption(view.stream_sentence(result))
        widgets.table(view.stream_table(result), column_config=view.STREAM_CONFIG)
        widgets.caption_compute(ctx.device_label, sum(result.seconds),
                                f"{len(result.settings)} passes of {L} tokens")
        st.caption(view.streaming_llm_sentence(result))
    shipped_run_section()


SHIPPED_RUN_TITLE = (f"A shipped run at {STREAM_RUN_LENGTH:,} tokens ({len(run_settings())} settings)")
SHIPPED_RUN_OPEN = "dec_stream_run_open"  # the expander's open state (a view, not a setting: not in the URL)


def shipped_run_section() -> None:
    """The StreamingLLM run shipped with the package, in an expander read and drawn only when opened."""
    box = st.expander(SHIPPED_RUN_TITLE, key=SHIPPED_RUN_OPEN, on_change="rerun",
                      icon=":material/inventory_2:")
    if not box.open:
        return
    with box:
        try:
            run = cached_decoder.shipped_stream_run()
        except AttnInputError as exc:
            st.info(plain(f"The shipped run cannot be shown: {exc}"), icon=":material/draft:")
            return
        r = run.result
        windows = ", ".join(f"{w:,}" for w in sorted({s.window for s in r.settings if s.window}))
        kept = " and ".join(f"the first {k}" for k in sorted({s.sinks for s in r.settings if s.sinks}))
        st.markdown(f"The same measurement as above at {r.length:,} tokens, {len(r.settings)} settings: "
                    f"dense and windows of {windows} keys, each alone and with {kept or 'no first'} tokens "
                    "kept; "
                    "computed once by `python -m attncore.decoder.stream_run` and shipped with the app.")
        st.plotly_chart(view.stream_figure(r, tag="dec_stream_shipped"), key="chart_dec_stream_shipped")
        st.caption(view.stream_sentence(r))
        widgets.table(view.stream_table(r), column_config=view.STREAM_CONFIG)
        st.caption(plain(view.stream_run_caption(run)))
        st.caption(view.streaming_llm_sentence(r))


def run_panel(ctx: PageContext, L: int, settings: tuple[StreamSetting, ...]) -> StreamResult | None:
    """The panel's losses: stored settings at once, the rest after the Run button, with progress and Stop."""
    store = stream_store()
    key = "dec_stream"
    base = (L, ctx.device)
    found = {s: store.get((*base, s)) for s in settings}
    missing = [s for s, v in found.items() if v is None]
    flag_stop, flag_run = f"{key}__stopped", f"{key}__run"
    stopped = bool(st.session_state.pop(flag_stop, False))
    run_now = bool(st.session_state.pop(flag_run, False))
    slot = st.container()
    if missing and (stopped or not run_now):
        why = "Stopped. " if stopped else ""
        slot.info(f"{why}{len(missing)} of {len(settings)} settings still to run ({L:,} tokens each). "
                  "You can stop at any time; finished settings are kept.", icon=":material/hourglass_top:")
        slot.button(f"Run {len(missing)} setting{'s' if len(missing) != 1 else ''}", key=f"{key}_btn",
                    type="primary", icon=":material/play_arrow:",
                    on_click=lambda: st.session_state.__setitem__(flag_run, True))
    elif missing:
        lm = _model(ctx)
        ids = cached_decoder.shipped_ids(L, ctx.device)
        bar = slot.progress(0.0, text=f"0 of {len(missing)} settings")
        stop = slot.empty()
        stop.button("Stop", key=f"{key}_btn", icon=":material/stop:",
                    on_click=lambda: st.session_state.__setitem__(flag_stop, True))

        def progress(done: int, total: int, s: StreamSetting) -> None:
            bar.progress(done / total, text=f"{done} of {total} settings (last: {s.label})")

        plan = stream_plan(lm.model, ids, missing)  # its estimate; the settings run one by one (kept as done)
        try:
            with plan.holding(), heavy(plan.nbytes, plan.seconds, label=plan.label, where=slot):
                for s in missing:
                    t0 = time.perf_counter()
                    r = stream_losses(lm.model, ids, (s,))
                    store.put((*base, s), (r.nll[0], time.perf_counter() - t0))
                    progress(missing.index(s) + 1, len(missing), s)
        finally:
            bar.empty()
            stop.empty()
    done = [(s, store.get((*base, s))) for s in settings]
    have = [(s, v) for s, v in done if v is not None]
    if not have:
        return None
    return StreamResult(tuple(s for s, _ in have), torch.stack([v[0] for _, v in have]), L,
                        tuple(v[1] for _, v in have))


def ablation_section(ctx: PageContext, where: Any) -> None:
    st.subheader("Deleting the first token, and editing its massive dims")
    _shipped_note("The ablations run")
    n = widgets.slider(P_AW, "Text windows", where=where)
    L = widgets.slider(P_AL, "Window length (tokens)", where=where)
    got = run_or_wait("dec_abl", f"The ablations ({4 * n + 1} passes of {L:,} tokens)",
                      [(cached_decoder.decoder_ablations, (n, L, ctx.device))],
                      [(cached_decoder.decoder_ablations, (P_AW.default, P_AL.default, ctx.device))])
    if got is None:
        return
    res = got[0]
    abl = res.value
    st.markdown("Hiding the first token from every later query **is** deleting it: no later token reads "
                "it, and with rotary positions token 1 then computes what a first token computes. So the "
                "first bar is the cost of losing the text's first word, not of losing the sink; the sink "
                "moves to the new first token (below), and evicting it is StreamingLLM's window (above).")
    st.plotly_chart(view.ablation_figure(abl), key="chart_dec_ablation")
    widgets.table(view.ablation_table(abl))
    st.caption(view.ablation_sentence(abl, L))
    widgets.caption_compute(ctx.device_label, res.seconds, f"{4 * n} passes")
    position_section(ctx)


def position_section(ctx: PageContext) -> None:
    """Where the sink goes when the first token is deleted; the eviction test; Gu et al.'s inputs."""
    st.markdown(f"**Where the sink goes** (the shipped text's first {GU_TOKENS} tokens, sink heads above "
                f"{POSITION_EPS:g}):")
    res = cached_decoder.decoder_deletion(GU_TOKENS, ctx.device)  # admitted by its plan
    d = res.value
    st.plotly_chart(pos_view.deletion_figure(d, POSITION_EPS), key="chart_dec_deletion")
    widgets.table(pos_view.deletion_frame(d, POSITION_EPS))
    st.caption(pos_view.deletion_sentence(d, POSITION_EPS))
    try:
        st.caption(pos_view.eviction_sentence(pos_view.eviction(cached_decoder.shipped_stream_run().result)))
    except AttnInputError as exc:
        st.caption(plain(f"The eviction test reads the shipped StreamingLLM run, which cannot be read: "
                         f"{exc}"))
    widgets.caption_compute(ctx.device_label, res.seconds, "three passes")
    gu_section(ctx)


GU_OPEN = "dec_gu_open"  # the expander's open state (a view, not a setting: not in the URL)


def gu_section(ctx: PageContext) -> None:
    """Gu et al.'s inputs (six passes), in an expander run when opened."""
    box = st.expander(f"The sink is a position: Gu et al.'s inputs ({GU_TOKENS} tokens: natural text, random "
                      "tokens, one token repeated, each as is and with a newline first)", key=GU_OPEN,
                      on_change="rerun", icon=":material/shuffle:")
    if not box.open:
        return
    with box:
        gu = cached_decoder.decoder_gu_inputs(GU_TOKENS, ctx.seed, ctx.device)  # admitted by its plan
        widgets.table(pos_view.gu_frame(gu.value))
        st.caption(pos_view.gu_sentence(gu.value))
        st.caption(pos_view.gu_caption(MODEL_LABEL, GU_TOKENS, ctx.seed))
        widgets.caption_compute(ctx.device_label, gu.seconds, "six passes")


def induction_section(ctx: PageContext, where: Any, kv: int) -> None:
    st.subheader("Induction heads (Olsson et al. 2022)")
    T = widgets.slider(P_T, "Random tokens per copy", where=where)
    got = run_or_wait("dec_ind", f"The induction test (two passes of {2 * T:,} tokens)",
                      [(cached_decoder.decoder_induction, (T, ctx.seed, ctx.device))],
                      [(cached_decoder.decoder_induction, (P_T.default, ctx.seed, ctx.device))])
    if got is None:
        return
    res = got[0]
    ind = res.value
    st.plotly_chart(view.induction_figure(ind, kv), key="chart_dec_induction")
    st.caption(view.induction_sentence(ind))
    k = widgets.slider(P_HEAD, "Top head to show", where=where)
    k = min(k, len(ind.top) - 1)
    st.plotly_chart(view.induction_map_figure(ind, ind.top[k]), key="chart_dec_induction_map")
    widgets.caption_compute(ctx.device_label, res.seconds, "two passes")
    induction_ablation_section(ctx, T)


INDUCTION_ABLATION_OPEN = "dec_ind_abl_open"  # the expander's open state (a view, not a setting)


def induction_ablation_section(ctx: PageContext, T: int) -> None:
    """The top induction heads zeroed against random sets of the same size, in an expander run when opened."""
    sets = cached_decoder.INDUCTION_SETS
    box = st.expander(f"Zero the top induction heads against {sets} random sets (Crosbie & Shutova 2025)",
                      key=INDUCTION_ABLATION_OPEN, on_change="rerun", icon=":material/content_cut:")
    if not box.open:
        return
    with box:
        shape = decoder_shape(_model(ctx).model)
        res = cached_decoder.decoder_induction_ablation(T, ctx.seed, ctx.device)  # admitted by its plan
        a = res.value
        widgets.table(view.induction_ablation_frame(a))
        st.caption(view.induction_ablation_sentence(a, shape.layers * shape.heads, shape.vocab))
        st.caption(view.crosbie_caption())
        widgets.caption_compute(ctx.device_label, res.seconds,
                                f"{1 + len(a.sizes) * (1 + sets)} passes of {2 * T} tokens")


# ---------------------------------------------------------------------------- the entropy page


def entropy_part(ctx: PageContext) -> None:
    """Entropy vs length's real-model view: per-position entropy of SmolLM2's heads (behind a toggle)."""
    st.subheader("In a real model: SmolLM2")
    if not widgets.toggle(P_SHOW, "Real model (SmolLM2)", where=ctx.controls):
        st.caption("Switch on **Real model (SmolLM2)** in the sidebar to measure every head's entropy "
                   "against position on a shipped text: query i sees i + 1 keys, so uniform attention gives "
                   "ln(i + 1).")
        return
    L = widgets.slider(P_EL, "Tokens", where=ctx.controls)
    first = widgets.radio(P_FIRST, "First token", where=ctx.controls,
                          labels={"with": "with the first token", "without": "without it (renormalised)"})
    _say_what()
    got = run_or_wait("dec_ent", f"The entropy pass at {L:,} tokens",
                      [(cached_decoder.decoder_entropy, (L, ctx.device))],
                      [(cached_decoder.decoder_entropy, (P_EL.default, ctx.device))])
    if got is None:
        return
    res = got[0]
    e = res.value
    st.plotly_chart(view.entropy_figure(e, without_first=first == "without"), key="chart_dec_entropy")
    st.caption(view.entropy_sentence(e))
    st.caption(view.classes_sentence(e))
    widgets.caption_compute(ctx.device_label, res.seconds, "one pass with every head's weights")
    widgets.csv_download(lambda: _entropy_frame(e), "decoder_entropy.csv", key="dl_dec_entropy")


def _entropy_frame(e: Any) -> Any:
    import pandas as pd

    rows = {"band": [f"{lo}-{hi - 1}" for lo, hi in e.bands]}
    for name, v in e.median.items():
        rows[f"{name}"] = np.asarray(v)
    for name, v in e.median_rest.items():
        rows[f"{name} (no first token)"] = np.asarray(v)
    return pd.DataFrame(rows)
