"""The shipped causal character model as a model choice of the real-text views.

``ui.realtext`` offers it beside MiniLM; :func:`load` turns it into the same
(:class:`attncore.models.LoadedModel`, :class:`attncore.models.TextAttention`) pair the Heatmaps
and Attention sinks pages already draw, and :func:`next_char_section` adds what only a decoder
has: the distribution of the next character, with a temperature slider over it.

Text the model cannot read: characters outside its vocabulary are dropped with a note that
names them (through ``ui.text.plain``: never rendered as markdown); past
:data:`attncore.training.MAX_VIEW_CHARS` characters the text is cut with a note; empty text is a
plain error.
"""

from __future__ import annotations

from dataclasses import dataclass

import streamlit as st

from attncore.models import LoadedModel, TextAttention
from attncore.training import MAX_VIEW_CHARS, CharTransformer, KnownText, known_text, shipped_model_path
from ui import cached_models, widgets
from ui.cached import Timed
from ui.page import PageContext
from ui.state import Param, value
from ui.text import plain
from ui.views import causal as causal_view

__all__ = [
    "CAUSAL",
    "LABEL",
    "NAME",
    "NextParams",
    "explain",
    "is_causal",
    "load",
    "next_char_section",
    "next_params",
    "prepare",
]

CAUSAL = "causal"  # the value of the model picker's Param
NAME = "character transformer"
LABEL = "character transformer (causal, trained here)"
MAX_NAMED = 20  # unknown characters named in the note (then "and N more")


@dataclass(frozen=True)
class NextParams:
    """The URL-backed controls of the next-character chart (names carry the page's prefix)."""

    temperature: Param
    top_k: Param

    def all(self) -> tuple[Param, ...]:
        return (self.temperature, self.top_k)


def next_params(prefix: str) -> NextParams:
    """Params ``<prefix>ntemp`` (temperature 0.1–5) and ``<prefix>topk`` (bars shown, 1–65)."""
    return NextParams(temperature=Param(f"{prefix}ntemp", 1.0, lo=0.1, hi=5.0),
                      top_k=Param(f"{prefix}topk", 12, lo=1, hi=65))


def is_causal(lm: LoadedModel) -> bool:
    """True when ``lm`` is the shipped character model (as :func:`load` returns it)."""
    return isinstance(lm.model, CharTransformer)


def _model(ctx: PageContext) -> Timed[CharTransformer]:
    return cached_models.causal_model(ctx.device)


def prepare(text: str, ctx: PageContext) -> KnownText:
    """The characters of ``text`` the model reads (unknown ones dropped, the rest cut at the limit)."""
    return known_text(_model(ctx).value, text, MAX_VIEW_CHARS)


def _notes(kt: KnownText) -> None:
    if kt.unknown:
        named = ", ".join(f"{plain(c)} (U+{ord(c):04X})" for c in kt.unknown[:MAX_NAMED])
        more = f" and {len(kt.unknown) - MAX_NAMED} more" if len(kt.unknown) > MAX_NAMED else ""
        st.info(f"The character model knows only the characters of the text it was trained on, so "
                f"{kt.n_unknown} character{'s' if kt.n_unknown != 1 else ''} outside its vocabulary "
                f"{'were' if kt.n_unknown != 1 else 'was'} dropped: {named}{more}.",
                icon=":material/filter_alt:")
    if kt.cut:
        st.info(f"The text has {kt.limit + kt.cut:,} characters the model knows; the views read the first "
                f"{kt.limit}, so the last {kt.cut:,} were cut.", icon=":material/content_cut:")


def load(text: str, ctx: PageContext) -> tuple[LoadedModel, Timed[TextAttention]]:
    """The shipped model and its attention maps on ``text``, with notes on what was dropped or cut."""
    m = _model(ctx)
    model = m.value
    kt = known_text(model, text, MAX_VIEW_CHARS)
    _notes(kt)
    res = cached_models.causal_attention(kt.text, ctx.device)
    c = model.config
    lm = LoadedModel(name=NAME, path=str(shipped_model_path()), model=model, tokenizer=None,
                     layers=c.n_layer, heads=c.n_head, token_limit=MAX_VIEW_CHARS, device=ctx.device,
                     seconds=m.seconds)
    return lm, res


def explain(lm: LoadedModel) -> None:
    """What the character model is, in numbers read from the shipped model itself."""
    model: CharTransformer = lm.model
    c, meta = model.config, model.meta
    loss = meta.get("final_train_loss")
    trained = (f", final training loss {float(loss):.3f} nats per character" if loss is not None else "")
    st.caption(
        f"The {NAME} was trained in this app (Training lab, experiment 1: the best standard-attention "
        f"run{trained}) on tiny Shakespeare: {c.n_layer} layers × {c.n_head} heads, width {c.d_model}, "
        f"{len(model.vocab)} characters, a context of {c.context} characters. It is a decoder: character "
        "*i* attends to itself and the characters before it, so every map is 0 above the diagonal. Each "
        "token is one character (␣ is a space, ↵ a newline)."
    )


def next_char_section(np_: NextParams, text: Param, ctx: PageContext, *, view: str, key: str) -> None:
    """The next-character distribution of the text in ``text`` (the text box's Param) as bars,
    with temperature and top-k sliders."""
    model = _model(ctx).value
    kt = known_text(model, str(value(text)), MAX_VIEW_CHARS)
    st.markdown("##### What comes next: the next-character distribution")
    left, right = st.columns(2)
    t = float(widgets.slider(np_.temperature, "Temperature τ (next character)", step=0.05, where=left,
                             help="The logits are divided by τ before the softmax: τ < 1 sharpens the "
                                  "distribution towards the likeliest character, τ > 1 flattens it."))
    k = min(int(widgets.slider(np_.top_k, "Characters shown (top k)", where=right)), len(model.vocab))
    res = cached_models.causal_next_chars(kt.text, t, ctx.device)
    dist = res.value
    ref = cached_models.causal_next_chars(kt.text, 1.0, ctx.device).value
    st.plotly_chart(causal_view.next_char_figure(dist, k, t, view=view, reference=ref), key=f"chart_{key}")
    shown = sum(q for _, q in dist[:k])
    ctx_note = (f"the model reads the last {model.config.context} of the {len(kt.text)} characters (its "
                "training context)" if len(kt.text) > model.config.context
                else f"the model reads all {len(kt.text)} characters")
    ticks = " The grey ticks are the same characters at τ = 1." if abs(t - 1.0) > 1e-12 else ""
    st.caption(f"p(next character | text) = softmax(logits / τ) at τ = {t:g}; {ctx_note}. The {k} bars hold "
               f"{shown:.1%} of the probability.{ticks}")
    widgets.csv_download(lambda: causal_view.next_char_frame(dist, t), "next_character.csv",
                         label="Download the next-character distribution (CSV)", key=f"dl_{key}")
