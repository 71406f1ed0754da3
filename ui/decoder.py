"""What only a decoder language model shows on the real-text views (the bundled SmolLM2): the next-token
distribution with a temperature, and a generated continuation with what each generated token attended to.

Data flow as everywhere: Params -> ``ui.cached`` (next-token logits cached by text, generation by its
settings) -> ``attncore.models.generation`` -> ``ui.views`` -> ``st``.
"""

from __future__ import annotations

from dataclasses import dataclass

import streamlit as st

from attncore.models.generation import MAX_NEW_TOKENS, MAX_TEMPERATURE, MIN_TEMPERATURE, next_distribution
from ui import cached_models, widgets
from ui.page import PageContext
from ui.realtext import Chosen
from ui.state import Param
from ui.text import plain
from ui.views import causal as causal_view
from ui.views import heatmaps as hm_view

__all__ = ["DecoderParams", "decoder_params", "generation_section", "is_decoder", "next_token_section"]


@dataclass(frozen=True)
class DecoderParams:
    """The URL-backed controls of the decoder sections (names carry the page's prefix)."""

    temperature: Param
    top_k: Param
    generate: Param
    n_new: Param
    mode: Param

    def all(self) -> tuple[Param, ...]:
        return (self.temperature, self.top_k, self.generate, self.n_new, self.mode)


def decoder_params(prefix: str) -> DecoderParams:
    """Params ``<prefix>dtemp`` (temperature), ``<prefix>dtopk`` (bars shown), ``<prefix>gen`` (generate
    on/off), ``<prefix>gn`` (new tokens) and ``<prefix>gmode`` (greedy or sampled from the seed)."""
    return DecoderParams(
        temperature=Param(f"{prefix}dtemp", 1.0, lo=MIN_TEMPERATURE, hi=MAX_TEMPERATURE),
        top_k=Param(f"{prefix}dtopk", 12, lo=1, hi=50),
        generate=Param(f"{prefix}gen", False),
        n_new=Param(f"{prefix}gn", 12, lo=1, hi=MAX_NEW_TOKENS),
        mode=Param(f"{prefix}gmode", "greedy", options=("greedy", "sample")),
    )


def is_decoder(ch: Chosen) -> bool:
    """True for a transformers causal language model (not the character transformer, which has its own)."""
    return bool(ch.lm.causal) and ch.lm.tokenizer is not None and hasattr(ch.lm.model, "lm_head")


def next_token_section(dp: DecoderParams, ch: Chosen, ctx: PageContext, *, key: str) -> None:
    """The next-token distribution after the text, with temperature and top-k sliders; grey ticks: τ = 1."""
    st.markdown("##### What comes next: the next-token distribution")
    left, right = st.columns(2)
    t = float(widgets.slider(dp.temperature, "Temperature τ (next token)", step=0.05, where=left,
                             help="The logits are divided by τ before the softmax: τ < 1 sharpens the "
                                  "distribution towards the likeliest token, τ > 1 flattens it."))
    k = int(widgets.slider(dp.top_k, "Tokens shown (top k)", where=right))
    res = cached_models.next_logits(ch.source, ch.text, ctx.device)  # admitted by its plan
    dist = next_distribution(ch.lm, res.value, t, k)
    ref = next_distribution(ch.lm, res.value, 1.0, k + 40)
    fig = causal_view.next_char_figure(dist, k, t, view=f"{key}-next", reference=ref)
    fig.update_xaxes(title="next token (␣ marks a leading space, ↵ a newline)")
    st.plotly_chart(fig, key=f"chart_{key}_next")
    shown = sum(q for _, q in dist)
    top_tok, top_p = dist[0]
    st.caption(plain(f"p(next token | text) = softmax(logits / τ) at τ = {t:g} over {ch.lm.name}'s "
                     f"{int(res.value.numel()):,} tokens; the likeliest is {top_tok} ({top_p:.1%}); the "
                     f"{len(dist)} bars hold {shown:.1%} of the probability."))


def generation_section(dp: DecoderParams, ch: Chosen, ctx: PageContext, *, key: str) -> None:
    """Generate a continuation (greedy or sampled from the page's seed) and draw, for the selected layer
    and head, the attention row of the query that predicted each generated token."""
    st.markdown("##### Generate a continuation: what each new token attended to")
    c1, c2, c3 = st.columns([1, 1.3, 1.3])
    on = widgets.toggle(dp.generate, "Generate", where=c1,
                        help="Runs the model token by token with its key/value cache, as a decoder "
                             "generates.")
    n = int(widgets.slider(dp.n_new, "New tokens", where=c2))
    mode = widgets.radio(dp.mode, "Choice", where=c3, horizontal=True,
                         labels={"greedy": "greedy (likeliest)", "sample": "sampled (seed, τ)"})
    if not on:
        st.caption("Switch on Generate to continue the text; every step keeps the attention of the query "
                   "that predicted the new token, for every layer and head.")
        return
    t = float(st.session_state.get(dp.temperature.key, dp.temperature.default))
    greedy = mode == "greedy"
    res = cached_models.generation(ch.source, ch.text, n, greedy, 1.0 if greedy else t,
                            0 if greedy else int(ctx.seed), ctx.device)  # admitted by its plan's estimate
    g = res.value
    how = "greedy: the likeliest token each step" if greedy else f"sampled at τ = {t:g} from seed {ctx.seed}"
    stop = " It stopped at the end-of-text token." if g.stopped else ""
    st.markdown(f"**Continuation** ({len(g.new)} tokens, {how}):")
    st.text(g.text)
    w = g.attentions[:, ch.layer, ch.head].numpy()  # (T, S)
    fig = hm_view.generation_figure(w, g.prompt, g.new, layer=ch.layer, head=ch.head)
    st.plotly_chart(fig, key=f"chart_{key}_gen")
    first = float(w[:, 0].mean())
    last = [float(w[s, len(g.prompt) - 1 + s]) for s in range(len(g.new))]
    st.caption(plain(
        f"Layer {ch.layer}, head {ch.head}: row t is the query that predicted generated token t (the "
        f"last prompt token for t = 0, then each new token in turn), over the keys it could see. Mean weight "
        f"on the first token {first:.3f}; on the query's own position {sum(last) / len(last):.3f}. Mean "
        f"probability of the chosen tokens {sum(g.probs) / len(g.probs):.3f}.{stop}"))
    widgets.caption_compute(ctx.device_label, res.seconds,
                            f"{len(g.new)} steps of {ch.lm.name} with its key/value cache after "
                            f"{len(g.prompt)} prompt tokens.")
