"""The "Logit lens" section of Heatmaps' real text for a decoder (issue 40 item 4): what the residual stream
after every layer predicts at the selected query token, the final prediction's rank per layer, and each
head's direct contribution to the prediction's logit.

Data flow as everywhere: ``ui.cached_models.logit_lens`` -> ``attncore.decoder.lens`` -> ``ui.views.lens``
-> ``st``.
The section is a lazy expander: nothing runs until it is opened.
"""

from __future__ import annotations

import streamlit as st

from attncore.budget import fmt_bytes
from attncore.decoder.lens import lens_bytes
from attncore.decoder.probe import decoder_shape
from attncore.errors import AttnInputError
from attncore.models.tokens import display_tokens, tokenizer_kind
from ui import cached_models, widgets
from ui.page import PageContext
from ui.realtext import Chosen
from ui.text import plain
from ui.views import lens as view
from ui.views.decoder import head_labels

__all__ = ["LENS_OPEN", "LENS_TITLE", "is_lens_model", "lens_section"]

LENS_OPEN = "rt_lens_open"  # the expander's open state (a view, not a setting: not in the URL)
LENS_TITLE = "Logit lens: what each layer predicts here, and which heads write the prediction"


def is_lens_model(ch: Chosen) -> bool:
    """A transformers causal LM of the Llama family (decoder layers with ``self_attn.o_proj`` and ``mlp``)."""
    base = getattr(ch.lm.model, "model", None)
    blocks = getattr(base, "layers", None)
    return (bool(ch.lm.causal) and ch.lm.tokenizer is not None and hasattr(ch.lm.model, "lm_head")
            and blocks is not None and len(blocks) > 0
            and all(hasattr(b, "self_attn") and hasattr(b.self_attn, "o_proj") and hasattr(b, "mlp")
                    for b in blocks))


def lens_section(ch: Chosen, ctx: PageContext, *, key: str) -> None:
    """The expander: for the chosen query token, the lens table, the rank line and the heads' attribution."""
    if ch.token is None or not is_lens_model(ch):
        return
    box = widgets.lazy_expander(LENS_TITLE, LENS_OPEN, icon=":material/visibility:")
    if box is None:
        return
    with box:
        _draw(ch, ctx, key)


def _draw(ch: Chosen, ctx: PageContext, key: str) -> None:
    att, lm = ch.res.value, ch.lm
    i = int(ch.token or 0)
    L = len(att.tokens)
    st.markdown("The residual stream after layer ℓ, read as if it were the last: "
                "the final norm and the unembedding turn it into next-token probabilities (the logit lens). "
                "A head's direct contribution is its output times the unembedding, the final norm's scale "
                "frozen at this token.")
    st.latex(r"\mathrm{lens}_\ell = \mathrm{softmax}\big(W_U\,\mathrm{RMSNorm}(x_\ell)\big),\qquad "
             r"\Delta\mathrm{logit}_{\ell h}(t) = "
             r"\frac{(W_U)_t \odot w}{\mathrm{rms}(x_N)}\cdot W_O^{(\ell h)} z_h")
    if L < 2:
        st.info("The logit lens needs a text of at least 2 tokens.", icon=":material/info:")
        return
    try:
        need = lens_bytes(decoder_shape(lm.model), L)
        res = cached_models.logit_lens(ch.source, ch.text, ctx.device, i, L)  # admitted by its plan
    except AttnInputError as exc:
        st.info(f"The logit lens is not shown: {plain(exc)}", icon=":material/info:")
        return
    r = res.value
    tok = lm.tokenizer
    kind = tokenizer_kind(tok)

    def shown(ids: list[int]) -> list[str]:  # each token alone, as every other axis shows tokens
        return [display_tokens([t], kind)[0] for t in tok.convert_ids_to_tokens(ids)]

    top_tokens = [shown(row) for row in r.top_ids.tolist()]
    target, second = shown([r.target, r.contrast.token])
    note = r.note()
    if r.meaningful:
        st.caption(plain(note))
    else:
        st.warning(plain(note), icon=":material/warning:")
    flagged = [int(j) for j in r.flagged.nonzero().flatten().tolist()]
    if flagged and flagged != [i]:
        st.caption(plain(f"Positions flagged for massive activations in this text: "
                         f"{', '.join(f'{j} ({att.tokens[j]})' for j in flagged)}."))
    st.plotly_chart(view.lens_figure(r, top_tokens), key=f"chart_{key}_lens")
    st.caption(plain(view.rank_sentence(r, target, att.tokens[i])))
    st.plotly_chart(view.rank_figure(r, target), key=f"chart_{key}_rank")
    labels = head_labels(lm.heads, lm.kv_heads or lm.heads)
    st.plotly_chart(view.dla_figure(r, labels), key=f"chart_{key}_dla")
    st.caption(plain(view.dla_sentence(r, target, second)))
    widgets.caption_compute(ctx.device_label, res.seconds,
                            f"One hooked pass of {lm.name} over {L} tokens (about {fmt_bytes(need)} "
                            "estimated).")
    c1, c2 = st.columns(2)
    widgets.csv_download(lambda: view.lens_frame(r, top_tokens), f"logit_lens_token{i}.csv",
                         label="Download the lens (CSV)", key=f"dl_{key}_lens", where=c1)
    widgets.csv_download(lambda: view.dla_frame(r), f"logit_attribution_token{i}.csv",
                         label="Download the attribution (CSV)", key=f"dl_{key}_dla", where=c2)
