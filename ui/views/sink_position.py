"""The sink is a position: figure, table and sentence builders for deleting the first token (where the sink
goes), Gu et al.'s inputs and StreamingLLM's eviction test, on the Attention sinks page's real decoder and
the Tour.

Results of :mod:`attncore.decoder.position` and :mod:`attncore.decoder.streaming` in, ``go.Figure`` /
``DataFrame`` / plain sentences out; no streamlit. Every figure sets ``layout.meta.view``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from torch import Tensor

from attncore.decoder.position import GU_THRESHOLDS, FirstTokenDeletion, GuRow
from attncore.decoder.streaming import StreamResult, StreamSetting
from ui import figures
from ui.figures import PALETTE, Curve, line_chart

__all__ = [
    "EVICTION_WINDOW",
    "Eviction",
    "deletion_figure",
    "deletion_frame",
    "deletion_sentence",
    "eviction",
    "eviction_sentence",
    "gu_caption",
    "gu_frame",
    "gu_sentence",
    "sink_moved",
]

EVICTION_WINDOW = 256  # the window the eviction test quotes (the Evidence row on the window reads the same)


def sink_moved(before: int, after: int) -> bool:
    """The sink moved: the new first token is a sink for at least half as many heads as the original was."""
    return after >= before / 2


def deletion_figure(d: FirstTokenDeletion, eps: float) -> go.Figure:
    """Sink heads per layer (first-token score above ``eps``): on the original first token, on token 1 while
    it is second, and on token 1 once the first token is deleted."""
    N = d.score_first.shape[0]
    x = np.arange(N)
    curves = [
        Curve(name="original first token", x=x, y=(d.score_first > eps).sum(-1).numpy().astype(np.float64),
              color=PALETTE[0]),
        Curve(name="token 1, second", x=x, y=(d.score_second > eps).sum(-1).numpy().astype(np.float64),
              color=PALETTE[7]),
        Curve(name="token 1 once the first is deleted", x=x,
              y=(d.score_new_first > eps).sum(-1).numpy().astype(np.float64), color=PALETTE[1]),
    ]
    fig = line_chart(curves, x_title="layer", y_title=f"heads with score > {eps:g}", height=300)
    return figures.legend_below(fig).update_layout(meta={"view": "dec_deletion"})


def _dims(idx: Tensor, vals: Tensor) -> str:
    return ", ".join(f"{int(i)} ({float(v):,.0f})" for i, v in zip(idx.tolist(), vals.tolist(), strict=True))


def deletion_frame(d: FirstTokenDeletion, eps: float) -> pd.DataFrame:
    """Before and after the deletion: the sink heads, the mean score, the residual norm and largest dims after
    the chosen layer, for the original first token, token 1 while second and token 1 once first."""
    a, b, c = d.sink_heads(eps)
    return pd.DataFrame({
        "token": ["original first token", "token 1, second", "token 1 once first"],
        f"sink heads (> {eps:g})": [a, b, c],
        "mean score": [round(float(d.score_first.mean()), 4), round(float(d.score_second.mean()), 4),
                       round(float(d.score_new_first.mean()), 4)],
        f"residual norm after layer {d.layer}": [round(d.norm_first, 1), round(d.norm_second, 1),
                                                 round(d.norm_new_first, 1)],
        "largest dims (value)": [_dims(d.dims_first, d.values_first), "—",
                                 _dims(d.dims_new_first, d.values_new_first)],
    })


def deletion_sentence(d: FirstTokenDeletion, eps: float) -> str:
    """The equivalence (the gap between masked and deleted losses), where the sink goes, and the cost."""
    a, b, c = d.sink_heads(eps)
    heads = int(d.score_first.numel())
    k = int(d.dims_first.numel())
    moved = (f"the sink moves to the new first token: {c} of {heads} heads give it more than {eps:g} of "
             f"their weight, against {a} on the original first token and {b} on the same token while it was "
             f"second" if sink_moved(a, c) else
             f"the sink does not simply move: {c} of {heads} heads give the new first token more than "
             f"{eps:g}, against {a} on the original first token and {b} on the same token while it was "
             "second")
    return (f"Hiding the first token from every later query is deleting it: on tokens 2–{d.length - 1} the "
            f"two give the same loss within {d.equivalence_gap:.1g} nats. Deleted, {moved}. Its residual "
            f"norm after layer {d.layer} is {d.norm_new_first:,.0f} (the original first token's "
            f"{d.norm_first:,.0f}, the other tokens' median {d.norm_rest:,.1f}), and {d.shared_dims} of its "
            f"{k} largest dims are the original first token's. Deleting it changes the loss on tokens "
            f"2–{d.length - 1} by {d.cost:+.3f} nats per token: the cost of losing the text's first word.")


@dataclass(frozen=True)
class Eviction:
    """StreamingLLM's eviction test read from a run: perplexity past a window of ``window`` keys over dense
    there, for the window alone and with the first ``sinks`` tokens kept; ``length`` the run's tokens."""

    window: int
    sinks: int
    length: int
    dense: float
    alone: float
    kept: float

    @property
    def alone_ratio(self) -> float:
        """Window alone ÷ dense."""
        return self.alone / self.dense

    @property
    def kept_ratio(self) -> float:
        """Window + first k ÷ dense."""
        return self.kept / self.dense


def eviction(r: StreamResult, window: int = EVICTION_WINDOW, sinks: int | None = None) -> Eviction | None:
    """:class:`Eviction` at ``window`` from a run (the largest kept-first setting there by default); None
    when the run lacks dense, the window alone or the window with first tokens."""
    dense, alone = StreamSetting(None), StreamSetting(window)
    kept = [s for s in r.settings if s.window == window and s.sinks and (sinks is None or s.sinks == sinks)]
    if dense not in r.settings or alone not in r.settings or not kept or r.length <= window + 1:
        return None
    k = max(kept, key=lambda s: s.sinks)
    return Eviction(window=window, sinks=k.sinks, length=r.length, dense=r.ppl(dense, window),
                    alone=r.ppl(alone, window), kept=r.ppl(k, window))


def eviction_sentence(e: Eviction | None) -> str:
    """'Evicting the sink is StreamingLLM's test: at W = 256 of 2,048 tokens ...'."""
    if e is None:
        return "The shipped StreamingLLM run lacks the settings of the eviction test."
    return (f"Evicting the sink is StreamingLLM's window: at W = {e.window:,} of {e.length:,} tokens, a "
            f"window alone raises perplexity past it {e.alone_ratio:.2f}× over dense ({e.alone:.2f} against "
            f"{e.dense:.2f}); keeping the first {e.sinks} tokens brings it to {e.kept_ratio:.3f}×.")


def gu_frame(rows: Sequence[GuRow]) -> pd.DataFrame:
    """Per input (and special token first or not): the share of sink heads at each eps of
    :data:`GU_THRESHOLDS` and of heads whose queries mostly put their largest weight on token 0 (percent, one
    decimal as the sentence says them)."""
    out: dict[str, list[object]] = {"input": [r.name for r in rows],
                                    "first token": [repr(r.prefix) + " put first" if r.prefix else "as is"
                                                    for r in rows]}
    for eps in GU_THRESHOLDS:
        out[f"sink heads, ε = {eps:g} (%)"] = [round(100.0 * r.share(eps), 1) for r in rows]
    out["largest weight on token 0 (%)"] = [round(100.0 * r.top_share, 1) for r in rows]
    return pd.DataFrame(out)


def gu_caption(model: str, length: int, seed: int) -> str:
    """The model and the protocol under the table of Gu et al.'s inputs."""
    return (f"Model: {model}. Protocol: Gu et al. 2025 (\"When Attention Sink Emerges in Language Models: An "
            f"Empirical View\", ICLR 2025, arXiv 2410.10781): a head's score is its mean weight on token 0 "
            f"over the {length} queries, a sink head above ε; natural text is the shipped text's first "
            f"{length} tokens, random tokens are drawn uniformly from the vocabulary without its special "
            f"tokens (seed {seed}), one such token is repeated {length} times. The last column counts the "
            "heads most of whose queries put their largest weight on token 0.")


def gu_sentence(rows: Sequence[GuRow]) -> str:
    """What the inputs show: the sink heads on natural text, random tokens and one token repeated, and
    with the special token first, at eps 0.3."""
    eps = GU_THRESHOLDS[0]
    plain = [r for r in rows if not r.prefix]
    pre = [r for r in rows if r.prefix]
    if not plain:
        return "No input ran."
    L = plain[0].length
    said = ", ".join(f"{r.name} {100 * r.share(eps):.1f}%" for r in plain)
    text = f"Sink heads (score > {eps:g}) at {L} tokens: {said}."
    if pre:
        tok = repr(pre[0].prefix)
        text += (f" With {tok} put first: " + ", ".join(f"{r.name} {100 * r.share(eps):.1f}%" for r in pre)
                 + ".")
    rep = [r for r in plain if r.name == "one token repeated"]
    rep_pre = [r for r in pre if r.name == "one token repeated"]
    if rep and rep_pre:
        a, b = rep[0].share(eps), rep_pre[0].share(eps)
        if b > a + 0.25:
            text += (" One token repeated has no distinct first token, and the sink is gone; put a "
                     "different token first and it returns: the sink is the first position once the first "
                     "token differs from the rest, whatever the words.")
        elif math.isclose(a, b, abs_tol=0.25):
            text += " Putting a different token first does not change the repeated input's sink heads much."
        else:
            text += " Putting a different token first lowers the repeated input's sink heads."
    return text
