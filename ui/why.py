"""The "Why this head attends here" section of a real decoder's head view (issue 40 item 1): the selected
query's logits taken apart by :mod:`attncore.decoder.why`, folded in a lazy expander under the token's
views (Heatmaps' real text)."""

from __future__ import annotations

import streamlit as st

from attncore.decoder.why import sink_sentence
from attncore.errors import AttnInputError
from ui import cached_models, causal, realtext, widgets
from ui.page import PageContext
from ui.text import plain
from ui.views import why as why_views

__all__ = ["TITLE", "chosen_key", "section"]

TITLE = "Why this head attends here"


def chosen_key(logits) -> int:
    """The key whose pairs are drawn beside the first token's: the top key, or the top key after the first
    token when the first token is the top key (0 at query 0)."""
    n = int(logits.numel())
    top = int(logits.argmax())
    if top != 0 or n == 1:
        return top
    return 1 + int(logits[1:].argmax())


def exact_sentence(why) -> str:
    """How exactly the splits add up, measured on these numbers."""
    e_pair = float((why.pair.sum(-1) - why.logits).abs().max())
    e_cp = float(((why.content + why.position).sum(-1) - why.logits).abs().max())
    e_na = float((why.norm_part + why.angle_part - (why.logits - why.logits[why.ref])).abs().max())
    return (f"Every split is exact: over the {int(why.logits.numel())} keys the pairs sum to the logit "
            f"within {e_pair:.1e}, content + position within {e_cp:.1e}, the norm and angle parts to the "
            f"lead over the median key within {e_na:.1e} (float64). Content is the pair's score at relative "
            "distance 0 (the pre-rotary q·k); position is the rest, 0 for the query's own key.")


def section(ch: realtext.Chosen, ctx: PageContext, *, key: str) -> None:
    """The expander: the pairs chart (selected key against the first token), norm against cosine over the
    keys, the first token's summary sentence and every key's parts as a table. Only for rotary decoders."""
    if ch.token is None or ch.head is None:
        raise ValueError("the why section needs a chosen head and query token")
    if ch.source == causal.CAUSAL or not ch.lm.causal:
        return
    box = widgets.lazy_expander(TITLE, f"{key}_open", icon=":material/psychology:")
    if box is None:
        return
    with box:
        try:
            hv = realtext.vectors(ch, ctx).value
            if hv.tokens != ch.res.value.tokens:
                st.info("Not shown: the captured tokens differ from the map's.", icon=":material/info:")
                return
            res = cached_models.head_why(ch.source, ch.text, ctx.device, len(ch.res.value.tokens), ch.layer,
                                         ch.head, ch.token)
        except AttnInputError as exc:
            st.info(f"Not shown for this model: {plain(exc)}", icon=":material/info:")
            return
        why, sink = res.value
        labels = realtext.token_labels(ch.res.value)
        j = chosen_key(why.logits)
        st.caption(plain(why_views.key_sentence(why, j, labels)))
        left, right = st.columns(2)
        left.plotly_chart(why_views.pairs_figure(why, j, labels, view=f"{key}-pairs"),
                          key=f"chart_{key}_pairs")
        right.plotly_chart(why_views.norm_cos_figure(why, labels, view=f"{key}-normcos"),
                           key=f"chart_{key}_normcos")
        if sink is not None:
            st.caption(plain("The first token: " + sink_sentence(sink, tuple(labels))))
        st.caption(exact_sentence(why))
        widgets.table(why_views.parts_frame(why, labels))
