"""The Tour's own builders: each step's one sentence of lesson, generated from the numbers the step
shows, and the two small figures no page draws in this form (one entropy panel, the memory of a
materialised path against a fused one). Every other step reuses the page's own builder.

Plain functions of numbers: no streamlit, so ``tests/test_tour.py`` feeds them counterfactual numbers.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from ui import figures
from ui.figures import PALETTE, Curve, Marker, Panel
from ui.views.sink_position import Eviction, eviction_sentence, sink_moved

__all__ = [
    "entropy_figure",
    "entropy_lesson",
    "evidence_lesson",
    "histogram_lesson",
    "interpolate",
    "jacobian_lesson",
    "learned_lesson",
    "memory_figure",
    "memory_lesson",
    "overflow_lesson",
    "real_sink_lesson",
    "saturation_lesson",
    "sink_lesson",
    "stages_lesson",
]


def _g(x: float, digits: int = 3) -> str:
    """A number with ``digits`` significant digits, no exponent for everyday sizes."""
    return f"{x:#.{digits}g}".rstrip(".")


def _bytes(n: float) -> str:
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n:.0f} B"


# ------------------------------------------------------------------------------------------ lessons


def stages_lesson(d_k: int, raw_std: float, scaled_std: float, scale: float, top_weight: float) -> str:
    """Step 'stages': the spread of the raw and scaled scores, the fade factor and the rows' top weight."""
    return (f"At d_k = {d_k} the raw scores q·k spread with std {_g(raw_std)} (theory √d_k = "
            f"{_g(math.sqrt(d_k))}); multiplied by 1/√d_k = {_g(scale)} they spread with std "
            f"{_g(scaled_std)}, so map 2 is map 1 faded {_g(1 / scale)} times, and a row's largest weight "
            f"averages {top_weight:.2f}.")


def histogram_lesson(d: int, samples: int, std_raw: float, se_raw: float, std_scaled: float,
                     se_scaled: float) -> str:
    """Step 'histograms': the measured spread of q·k before and after dividing by √d."""
    return (f"Over {samples:,} draws at d = {d}, q·k has std {_g(std_raw)} ± {se_raw:.2g} (theory √d = "
            f"{_g(math.sqrt(d))}); divided by √d it has std {_g(std_scaled)} ± {se_scaled:.2g}, "
            "whatever d is.")


def saturation_lesson(n: int, level: float, crossing: float, x_star: float, std_64: float) -> str:
    """Step 'saturation': where one score above n − 1 zeros takes ``level`` of the row."""
    verdict = "below" if crossing < std_64 else "above"
    return (f"With n = {n} entries, one score x above n − 1 zeros takes {level:g} of the weight from x = "
            f"{crossing:.2f} (closed form {x_star:.2f}), {verdict} the std {_g(std_64)} of unscaled scores "
            "at d = 64.")


def interpolate(x: Sequence[float], y: Sequence[float], at: float) -> float:
    """y at ``at`` on a log-x polyline (the measured sweep between its points)."""
    return float(np.interp(math.log(at), np.log(np.asarray(x, dtype=np.float64)), np.asarray(y, np.float64)))


def jacobian_lesson(n: int, j_scaled: float, j_unscaled: float, d: int, peak_sigma: float,
                    peak: float) -> str:
    """Step 'jacobian': E‖J‖ at σ = 1 (scaled) against σ = √d (unscaled), and where it peaks."""
    ratio = j_scaled / j_unscaled if j_unscaled > 0 else math.inf
    compare = (f"{ratio:.1f} times as much gradient reaches the scores when they are scaled" if ratio >= 1
               else f"scaling passes {1 / ratio:.1f} times less gradient back")
    return (f"Rows of {n} logits with spread σ = 1 (scaled attention) pass back E‖J‖ = {j_scaled:.3f}; "
            f"with σ = √{d} = {_g(math.sqrt(d))} (unscaled, d = {d}) {j_unscaled:.3f}: {compare}. The peak, "
            f"{peak:.3f}, is at σ ≈ {_g(peak_sigma, 2)}.")


def overflow_lesson(dtype: str, first_naive: float | None, limit: float, stable_fails: bool) -> str:
    """Step 'overflow': the first x at which the naive softmax of [x, 0, 0, 0] is not finite, against
    ``limit`` = log of the dtype's largest number (where exp overflows)."""
    naive = (f"the naive softmax eˣ/Σeˣ of [x, 0, 0, 0] first returns NaN or ∞ at x = {first_naive:.4g}"
             if first_naive is not None else "the naive softmax of [x, 0, 0, 0] stays finite over the range")
    stable = "fails too" if stable_fails else "stays finite and exact"
    return (f"In {dtype}, {naive} (eˣ passes the largest {dtype} number at x = {limit:.4g}); subtracting "
            f"the row's max first, the stable softmax {stable}.")


def entropy_lesson(n0: int, n1: int, h0: float, h1: float, sigma: float, m0: float, m1: float) -> str:
    """Step 'entropy': the entropy and top weight at the shortest and the longest row."""
    return (f"From n = {n0:,} to {n1:,} keys the entropy climbs from {h0:.2f} to {h1:.2f} nats, against "
            f"log n − σ²/2 = {math.log(n0) - sigma**2 / 2:.2f} and {math.log(n1) - sigma**2 / 2:.2f} "
            f"(σ = {_g(sigma)}): the row flattens, and its largest weight falls from {m0:.3f} to {m1:.4f}.")


def sink_lesson(strength: float, sink_weight: float, theory_weight: float, rms: float, theory_rms: float,
                rms_no_sink: float) -> str:
    """Step 'sink': the sink's share of the row and the output it leaves (its value is zero)."""
    return (f"A sink token whose logit is {strength:g} (real keys: 0 ± 1) takes {sink_weight:.2f} of every "
            f"row (theory {theory_weight:.2f}); its value is zero, so the output RMS is {rms:.3f} (theory "
            f"{theory_rms:.3f}) against {rms_no_sink:.3f} without it: the head writes almost nothing.")


def learned_lesson(rows: Sequence[tuple[str, int, int, float | None]], threshold: float,
                   over_settings: str = "") -> str:
    """Step 'learned': per variant (label, seeds with a sink, usable seeds, BOS weight from positions that
    have nothing to copy, averaged over the last 3 evaluation points: what the sink rule reads); a sink is
    such a weight above ``threshold``. ``over_settings``: the verdict over the grid of settings, said after
    (the shipped runs are one setting)."""
    sinks = [r for r in rows if r[1] > 0]
    none = [r for r in rows if r[1] == 0 and r[2] > 0]
    said = []
    for label, n_sink, n_usable, bos in sinks:
        w = "" if bos is None else f" (BOS weight {bos:.2f})"
        said.append(f"{label} formed a sink in {n_sink} of {n_usable} seeds{w}")
    if none:
        top = max((r[3] for r in none if r[3] is not None), default=None)
        most = "" if top is None else f" (BOS weight at most {top:.2g})"
        said.append(f"{', '.join(r[0] for r in none)} in none{most}")
    if not said:
        return "No finished run to read."
    after = f" {over_settings}" if over_settings else ""
    return (f"In the shipped runs (one setting: rotary positions, learning rate 0.01, 600 steps) "
            f"{'; '.join(said)}. A sink: more than {threshold:g} of the weight on the first token over the "
            f"last 3 evaluation points, from positions with nothing to copy.{after}")


def real_sink_lesson(sink_heads: int, heads: int, length: int, eps: float, moved: tuple[int, int, int],
                     layer: int, norm_new: float, norm_first: float, cost_mean: float, cost_margin: float,
                     windows: int, window: int, evict: Eviction | None) -> str:
    """Step 'real sink': the sink heads of a real decoder; deleting the first token (which is what hiding it
    from every query does) and where the sink goes (``moved``: heads above ``eps`` on the original first
    token, on token 1 while second, on token 1 once first; the new first token's residual norm after
    ``layer`` against the original's); the deletion's loss change with its 95% t interval over ``windows``
    windows (a cost when the whole interval is above 0); and StreamingLLM's eviction test from its run."""
    before, second, after = moved
    if sink_moved(before, after):
        where = (f"the sink moves: token 1, a sink for {second} heads while second, becomes one for "
                 f"{after} once first (residual norm after layer {layer}: {norm_new:,.0f}, the original "
                 f"first token's {norm_first:,.0f})")
    else:
        where = (f"the sink does not simply move: token 1 draws more than {eps:g} in {after} heads once "
                 f"first ({second} while second)")
    lo, hi = cost_mean - cost_margin, cost_mean + cost_margin
    if lo > 0:
        verdict = "what losing the text's first word costs, not what losing the sink costs"
    elif hi < 0:
        verdict = "the model does slightly better without that word"
    else:
        verdict = "no change beyond the noise over these windows"
    evicted = f" {eviction_sentence(evict)}" if evict is not None else ""
    return (f"In SmolLM2, {sink_heads} of {heads} heads ({sink_heads / heads:.0%}) put more than {eps:g} of "
            f"their weight on the first token at {length} tokens. Hiding that token from every query deletes "
            f"it, and {where}. Deleting it changes the loss by {cost_mean:+.3f} ± {cost_margin:.3f} nats per "
            f"token over {windows} windows of {window} tokens (95% t interval): {verdict}.{evicted}")


def memory_lesson(T: int, heads: int, materialised: float, fused: float) -> str:
    """Step 'memory': bytes of the L × S matrices against a fused kernel's, at one length."""
    return (f"At T = {T:,} with {heads} heads, the math path holds {_bytes(materialised)} of T × T matrices; "
            f"the flash kernel {_bytes(fused)}, {materialised / fused:,.0f} times less, and the gap grows "
            "with T because it never forms the matrix.")


def evidence_lesson(source: str, summary: str, slow: int) -> str:
    """Step 'evidence': the verdict counts of one source's claims measured here."""
    later = f" The Evidence page adds {slow} slower test{'s' if slow != 1 else ''}." if slow else ""
    return f"{source}, checked on this machine: {summary}{later}"


# ------------------------------------------------------------------------------------------ figures


def entropy_figure(df: pd.DataFrame, th: pd.DataFrame) -> go.Figure:
    """One panel: the measured entropy (±2 s.e.), its exact expectation and log n."""
    n = df["n"].to_numpy(np.float64)
    curves = [
        Curve("uniform attention", n, np.log(n), theory=True, color=PALETTE[7],
              hover="uniform: log n = %{y:.4f} nats at n = %{x:,.0f}"),
        Curve("exact expectation", th["n"].to_numpy(np.float64), th["entropy"].to_numpy(), theory=True,
              color=PALETTE[1]),
        Curve("measured (±2 s.e.)", n, df["entropy"].to_numpy(), err=2 * df["entropy_sem"].to_numpy(),
              color=PALETTE[0], hover="n = %{x:,.0f}<br>H = %{y:.4f} nats<extra></extra>"),
    ]
    fig = figures.line_chart(curves, x_title="keys per row n", y_title="entropy H (nats)", log_x=True,
                             height=380)
    figures.legend_below(fig)
    return fig.update_layout(meta={"view": "tour-entropy"})


def memory_figure(lengths: Sequence[int], materialised: Sequence[float], fused: Sequence[float],
                  T: int) -> go.Figure:
    """Bytes against T for the materialised (math) path and the fused flash kernel, log-log."""
    mib = 2.0**20
    panel = Panel("memory of one call", curves=[
        Curve("math: T × T matrices", lengths, np.asarray(materialised) / mib, color=PALETTE[5],
              hover="T = %{x:,}<br>%{y:,.1f} MiB<extra>math</extra>"),
        Curve("flash: blocks only", lengths, np.asarray(fused) / mib, color=PALETTE[0],
              hover="T = %{x:,}<br>%{y:,.2f} MiB<extra>flash</extra>")],
        markers=[Marker(float(T), f" T = {T:,}")], x_title="sequence length T", y_title="MiB",
        log_x=True, log_y=True)
    fig = figures.panel_grid([panel], cols=1, height=380)
    return fig.update_layout(meta={"view": "tour-memory"})
