"""Saturation & gradients page, its real-model tab: the sentences, each built from the numbers it quotes
(:mod:`attncore.decoder.scaling`'s results). Plain functions, no streamlit calls."""

from __future__ import annotations

import math
from collections.abc import Sequence

from torch import Tensor

from attncore.decoder.scaling import LEVELS, LogitSpread, ScaledRun

__all__ = ["CAVEAT", "gauss_at", "scale_sentence", "spread_sentence", "tour_lesson"]

CAVEAT = ("Inference only: the model was trained with 1/√d, and changing the scale afterwards measures what "
          "the trained weights do with sharper or flatter rows, not whether training without the scale would "
          "stall.")


def _pct(x: float) -> str:
    return f"{100 * x:.0f}%" if x == 0 or x >= 0.01 else f"{100 * x:.1f}%"


def _than(a: float, b: float, word: str) -> str:
    """'more <word> than' / 'less <word> than' / 'about as <word> as' (within 5% or 0.005)."""
    if math.isclose(a, b, rel_tol=0.05, abs_tol=0.005):
        return f"about as {word} as"
    return f"more {word} than" if a > b else f"less {word} than"


def spread_sentence(sp: LogitSpread, gauss_at_1: dict[str, float], model: str) -> str:
    """The real heads' spread against the seed's unit-variance law (``gauss_at_1``: the statistics of
    i.i.d. N(0, 1) rows of the same length)."""
    std = sp["std"].flatten()
    n = int(std.numel())
    wide, narrow = int((std > 2).sum()), int((std < 0.5).sum())
    a90, a99 = float(sp["above90"].mean()), float(sp["above99"].mean())
    gap, jac = float(sp["gap"].mean()), float(sp["jac"].mean())
    g90, ggap, gjac = gauss_at_1["above90"], gauss_at_1["gap"], gauss_at_1["jac"]
    return (
        f"On {sp.length:,} tokens, the {n} heads of {model} spread their scaled logits q·k/√d with std "
        f"**{float(std.min()):.2f} to {float(std.max()):.2f}** (median {float(std.median()):.2f}); the "
        f"seed's law says 1. {wide} of {n} heads are wider than 2 and {narrow} narrower than 0.5. "
        f"{_pct(a90)} of their rows put more than {LEVELS[0]:g} of the weight on one key ({_pct(a99)} more "
        f"than {LEVELS[1]:g}), against {_pct(g90)} for N(0, 1) logits on the same rows; the mean gap "
        f"between a row's largest and second logit is {gap:.2f} against {ggap:.2f}, and the mean ‖J‖_F "
        f"{jac:.3f} against {gjac:.3f}: the trained rows are "
        f"{_than(a90, g90, 'saturated')} the law predicts."
    )


def _at(runs: Sequence[ScaledRun], c: float) -> ScaledRun | None:
    return next((r for r in runs if r.factor == c), None)


def scale_sentence(runs: Sequence[ScaledRun], gauss: dict[float, dict[str, float]], total: int) -> str:
    """What multiplying every logit by c did, from the runs finished so far (``total`` asked for);
    ``gauss[c]`` the statistics of i.i.d. N(0, c²) rows of the same length."""
    if not runs:
        return "No setting has run yet."
    best = min(runs, key=lambda r: r.loss)
    parts = [f"{len(runs)} of {total} settings ran. Perplexity is lowest at **c = {best.factor:g}** "
             f"({best.perplexity:,.1f})."]
    one, eight = _at(runs, 1.0), _at(runs, 8.0)
    if one is not None and eight is not None:
        g1, g8 = gauss.get(1.0, {}), gauss.get(8.0, {})
        law = (f" (i.i.d. N(0, c²) rows predict {_pct(g1['above90'])} and {_pct(g8['above90'])})"
               if g1 and g8 else "")
        parts.append(
            f"Without the 1/√d (c = 8) perplexity is **{eight.perplexity:,.1f}**, "
            f"{eight.perplexity / one.perplexity:.2f}× the trained scale's {one.perplexity:,.1f}; the rows "
            f"with max weight above {LEVELS[0]:g} go from {_pct(one.saturated90)} to "
            f"{_pct(eight.saturated90)}{law}, the mean entropy from {one.mean_entropy:.2f} to "
            f"{eight.mean_entropy:.2f} nats, and the sink heads from {_pct(one.sink_share)} to "
            f"{_pct(eight.sink_share)}.")
    low = _at(runs, min(r.factor for r in runs))
    if one is not None and low is not None and low.factor < 1:
        parts.append(f"Flattening instead (c = {low.factor:g}) gives perplexity {low.perplexity:,.1f} and "
                     f"{_pct(low.sink_share)} sink heads.")
    return " ".join(parts)


def gauss_at(gauss: dict[str, Tensor], sigmas: Sequence[float]) -> dict[float, dict[str, float]]:
    """{sigma: {name: value}} from :func:`attncore.decoder.scaling.gaussian_rows`' (P,) tensors."""
    return {float(s): {n: float(v[i]) for n, v in gauss.items()} for i, s in enumerate(sigmas)}


def tour_lesson(L: int, one: ScaledRun, eight: ScaledRun, law1: float, law8: float) -> str:
    """The Tour's sentence: the trained scale (``one``, c = 1) against no 1/√d (``eight``, c = 8) on L tokens;
    ``law1`` / ``law8`` the saturated-row share i.i.d. N(0, c²) rows predict."""
    ratio = eight.perplexity / one.perplexity
    worse = "worse" if ratio > 1 else "better"
    rise = "rise" if eight.saturated90 > one.saturated90 else "fall"
    most = "most" if eight.saturated90 > 0.5 else "fewer than half of the"
    return (f"Take SmolLM2's 1/√d away at inference (every logit times 8, on {L} tokens): perplexity goes "
            f"from {one.perplexity:,.1f} to **{eight.perplexity:,.1f}** ({ratio:.2f}× {worse}) and the rows "
            f"with max weight above {LEVELS[0]:g} {rise} from {_pct(one.saturated90)} to "
            f"**{_pct(eight.saturated90)}** (i.i.d. N(0, c²) logits predict {_pct(law1)} and {_pct(law8)}). "
            f"With its scale the trained model's rows are {_than(one.saturated90, law1, 'saturated')} the "
            f"seed's law predicts; without it {most} rows are (almost) one-hot. Inference only: it does not "
            f"test whether training without the scale would stall.")
