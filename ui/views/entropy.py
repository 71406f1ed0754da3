"""Entropy vs length page: curve specs, the four-panel chart, its CSV and tables.

Plain functions over attncore results (DataFrames) returning Plotly figures and frames; the
page draws them. Kept out of the page file so tests can check the CSV and the figures
directly.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from attncore.sweeps import (
    COLUMNS,
    MAX_SWEEP_N,
    METHODS,
    SCALE_RULES,
    SWEEP_NORMALIZERS,
    EngineChoice,
    SweepSpec,
    fused_from,
)
from attncore.theory import (
    fully_scaled_multiplier,
    margin_for_half_weight,
    output_std_flat,
    output_std_onehot,
    peak_weight,
    ssmax_margin_for_half_weight,
    uniform_entropy,
)
from ui import figures
from ui.figures import PALETTE, Curve, Panel

__all__ = ["ASYMPTOTE_RTOL", "Controls", "Series", "asymptote_holds", "build_series", "engine_sentence",
           "figure1_charts", "figure1_frame", "lengths_for", "main_chart", "mark_stale", "n_label",
           "panel_frame", "partial_note", "seed_note", "sweep_spec", "theory_lengths", "validity_frame"]

RULE_SHORT = {"sqrt_d": "1/√d", "none": "unscaled", "ssmax": "SSMax", "llama4": "Llama 4"}
ERR_Z = 2.0  # error bars: +- 2 standard errors
# A large-n formula is drawn (and shown in the table) only where it is within 5 % of the exact value.
ASYMPTOTE_RTOL = 0.05
LEGEND_BELOW = {"orientation": "h", "yanchor": "top", "y": -0.22, "x": 0.0}


@dataclass(frozen=True)
class Series:
    """One curve: its legend label, colour, the sweep that measures it and the lengths shown.

    ``spec.lengths`` may be a superset of ``shown`` (see :func:`sweep_spec`).
    """

    label: str
    spec: SweepSpec
    color: str
    shown: tuple[int, ...] = ()

    def measured(self, df: pd.DataFrame) -> pd.DataFrame:
        """The rows of a sweep of ``spec`` at the shown lengths."""
        return df[df["n"].isin(self.shown or self.spec.lengths)].reset_index(drop=True)

    def in_range(self, th: pd.DataFrame) -> pd.DataFrame:
        """Theory rows inside the shown range of n."""
        ns = self.shown or self.spec.lengths
        return th[(th["n"] >= min(ns)) & (th["n"] <= max(ns))].reset_index(drop=True)


N_MIN_EXP = 4  # the smallest n the page offers is 2^4


def sweep_spec(spec: SweepSpec, per: int) -> SweepSpec:
    """What to actually sweep for ``spec`` (``per`` points per doubling): a fixed superset of lengths.

    When the logit scale does not depend on n (1/√d or no scaling, softmax family) every
    length up to the largest is a checkpoint of one streaming pass, so sweeping from 2^4 at
    the same ``per`` costs little more than the requested lengths, and the result is reused
    when only the smallest n changes. (Each checkpoint costs a merge and a summary: a denser
    superset, say four per doubling for every view, made the default view's sweep ~1.7x slower.)
    """
    if spec.scale_rule not in ("sqrt_d", "none") or spec.normalizer == "sigmoid":
        return spec
    hi = int(math.ceil(math.log2(max(spec.lengths))))
    grid = lengths_for(N_MIN_EXP, hi, per)
    return replace(spec, lengths=tuple(sorted(set(grid) | set(spec.lengths))))


def _pow2(e: int) -> str:
    sup = str(e).translate(str.maketrans("0123456789", "⁰¹²³⁴⁵⁶⁷⁸⁹"))
    return f"2{sup}"


def n_label(n: int) -> str:
    """'2¹⁶ = 65,536' for powers of two."""
    return f"{_pow2(int(math.log2(n)))} = {n:,}"


def engine_sentence(choices: list[EngineChoice], labels: list[str]) -> str:
    """The caption's sentence on the engine that ran each curve (attncore's reasons), one if they agree."""
    if len({c.reason for c in choices}) <= 1:
        return f"Engine: {choices[0].reason}." if choices else ""
    return "Engines: " + "; ".join(f"{lab}: {c.reason}" for lab, c in zip(labels, choices, strict=True)) + "."


def seed_note() -> str:
    """The line under the seed: where the draws come from and why the picture is reproducible.

    Built from attncore's dispatch table (:data:`attncore.sweeps.CROSSOVERS`): the engine
    depends only on the device, the method and the largest n.
    """
    parts = []
    for method in METHODS:
        n = fused_from(method)
        parts.append(f"n > {_pow2(int(math.log2(n - 1)))} ({method})" if n == MAX_SWEEP_N + 1 else
                     f"n ≥ {_pow2(int(math.log2(n)))} ({method})")
    return ("This page's sweeps draw their random numbers on the compute device. Which engine draws them "
            "depends only on the device, the method and the largest n: on CUDA the fused Triton kernels "
            f"(Philox) for {' and '.join(parts)}, torch's generator below that and on a CPU. So a URL "
            "shows the same picture every time on the same kind of device; another engine or device draws "
            "other numbers, with the same statistics within the error bars. The caption under the chart "
            "names the engine that ran.")


def lengths_for(lo: int, hi: int, ppo: int) -> tuple[int, ...]:
    """Powers of two from 2^lo to 2^hi with ``ppo`` points per doubling."""
    ks = np.arange(lo * ppo, hi * ppo + 1) / ppo
    return tuple(sorted({int(round(2.0**k)) for k in ks}))


@dataclass(frozen=True)
class Controls:
    """What the page's controls say (plain values)."""

    lo: int
    hi: int
    ppo: int
    d: int
    queries: int
    method: str
    vary: str
    taus: tuple[str, ...]
    rules: tuple[str, ...]
    norms: tuple[str, ...]
    tau: float
    rule: str
    norm: str
    s: float
    full: bool
    axis: str


def build_series(c: Controls, seed: int, dtype: str) -> list[Series]:
    """One :class:`Series` per compared value (or one), in a stable order."""
    lengths = lengths_for(c.lo, c.hi, c.ppo)
    base = SweepSpec(lengths=lengths, d=c.d, queries=c.queries, scale_rule=c.rule, temperature=c.tau,
                     normalizer=c.norm, method=c.method, seed=seed, ssmax_s=c.s, dtype=dtype)
    items: list[tuple[str, SweepSpec]] = []
    if c.vary == "temperature" and c.taus:
        for t in sorted(c.taus, key=float):
            items.append((f"τ = {t}", replace(base, temperature=float(t))))
    elif c.vary == "scale_rule" and c.rules:
        for r in [r for r in SCALE_RULES if r in c.rules]:
            items.append((RULE_SHORT[r], replace(base, scale_rule=r)))
    elif c.vary == "normalizer" and c.norms:
        for n in [n for n in SWEEP_NORMALIZERS if n in c.norms]:
            items.append((n, replace(base, normalizer=n)))
    else:
        items.append((f"{RULE_SHORT[c.rule]}, τ = {c.tau:g}, {c.norm}", base))
    # SSMax's s changes only SSMax curves: every other curve carries the default s, so moving the
    # slider finds them in the sweep store instead of recomputing them.
    items = [(label, spec if spec.scale_rule == "ssmax" else replace(spec, ssmax_s=SweepSpec.ssmax_s))
             for label, spec in items]
    return [Series(label, sweep_spec(spec, c.ppo), PALETTE[i % len(PALETTE)], shown=spec.lengths)
            for i, (label, spec) in enumerate(items)]


def theory_lengths(spec: SweepSpec) -> tuple[int, ...]:
    """Where to evaluate theory: the measured lengths plus a grid dense enough for smooth lines.

    Two points per doubling (one for SSMax, whose logit scale changes with every n and needs one
    quadrature per n): on the log-n axes every exact curve is smooth at that spacing.
    """
    lo, hi = int(math.log2(min(spec.lengths))), int(math.ceil(math.log2(max(spec.lengths))))
    per = 1 if spec.scale_rule == "ssmax" else 2
    grid = {int(round(2.0 ** (k / per))) for k in range(lo * per, hi * per + 1)}
    return tuple(sorted(grid | set(spec.lengths)))


def _measured(s: Series, df: pd.DataFrame, col: str, panel: int, what: str, unit: str,
              scale: np.ndarray | float = 1.0, **extra) -> Curve:
    y = df[col].to_numpy() * scale
    err = df[f"{col}_sem"].to_numpy() * scale * ERR_Z if f"{col}_sem" in df else None
    hover = f"{s.label}<br>n = %{{x:,.0f}}<br>{what} = %{{y:.4g}}{unit}"
    return Curve(s.label, df["n"].to_numpy(), y, err=err, color=s.color, hover=hover,
                 extra={"legendgroup": s.label, "showlegend": panel == 0, **extra})


def _theory(s: Series, th: pd.DataFrame, col: str, name: str, *, dotted: bool = False,
            scale: np.ndarray | float = 1.0, mask: np.ndarray | None = None,
            kind: str | None = None) -> Curve:
    y = th[col].to_numpy() * scale
    x = th["n"].to_numpy().astype(np.float64)
    if mask is not None:
        x, y = x[mask], y[mask]
    kind = kind or ("asymptote" if dotted else "exact")
    line = {"color": s.color, "dash": "dot" if dotted else "dash", "width": 1.6 if dotted else 2}
    return Curve(f"{s.label} · {kind}", x, y, theory=True, color=s.color,
                 hover=f"{s.label} · {kind}<br>n = %{{x:,.0f}}<br>{name} = %{{y:.4g}}",
                 extra={"legendgroup": s.label, "showlegend": False, "line": line})


def asymptote_holds(th: pd.DataFrame, col: str, exact: str) -> np.ndarray:
    """Where the large-n formula ``col`` lies within :data:`ASYMPTOTE_RTOL` of ``exact``, from that n on.

    A boolean mask over the rows (ascending n) of a theory frame: True from the first n at which
    the formula and every longer n stay within the tolerance (a formula that touches the exact
    curve by accident at a small n is not drawn there).
    """
    a, e = th[col].to_numpy(dtype=np.float64), th[exact].to_numpy(dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        ok = np.isfinite(a) & (e > 0) & (np.abs(a / e - 1.0) <= ASYMPTOTE_RTOL)
    return np.logical_and.accumulate(ok[::-1])[::-1]


def _reference(name: str, x: np.ndarray, y: np.ndarray) -> Curve:
    return Curve(name, x, y, theory=True, color=PALETTE[7],
                 hover=f"{name}<br>n = %{{x:,.0f}}<br>%{{y:.4g}}",
                 extra={"legendgroup": "bounds", "showlegend": False,
                        "line": {"color": PALETTE[7], "dash": "dashdot", "width": 1}})


def main_chart(series: list[Series], frames: list[pd.DataFrame], theories: list[pd.DataFrame],
               c: Controls) -> go.Figure:
    """The four panels: entropy, max weight, effective support, output std."""
    n_lo, n_hi = 2.0**c.lo, 2.0**c.hi
    xs = np.geomspace(n_lo, n_hi, 64)
    frac = c.axis == "fraction"
    # Per panel, drawing order (later on top): bounds, asymptotes, measurements, exact expectations,
    # so no dashed exact curve hides under a measured one.
    layers: dict[str, dict[str, list[Curve]]] = {p: {"ref": [], "asym": [], "meas": [], "exact": []}
                                                 for p in ("ent", "mxw", "eff", "out")}
    for s, df, th in zip(series, frames, theories, strict=True):
        nth = th["n"].to_numpy().astype(np.float64)
        ln_t = np.log(np.maximum(nth, 2)) if frac else 1.0
        h_col = "normalized_entropy" if frac else "entropy"
        layers["ent"]["meas"].append(_measured(s, df, h_col, 0, "H", "" if frac else " nats"))
        layers["ent"]["exact"].append(_theory(s, th, h_col, "E[H]"))
        layers["ent"]["asym"].append(_theory(s, th, "entropy_asymptote", "log n − σ²/2", dotted=True,
                                             scale=1.0 / ln_t,
                                             mask=asymptote_holds(th, "entropy_asymptote", "entropy")))
        layers["mxw"]["meas"].append(_measured(s, df, "max_weight", 1, "max weight", ""))
        layers["mxw"]["exact"].append(_theory(s, th, "max_weight", "E[max p]"))
        layers["mxw"]["asym"].append(_theory(s, th, "max_weight_asymptote", "Gumbel asymptote", dotted=True,
                                             mask=asymptote_holds(th, "max_weight_asymptote", "max_weight")))
        layers["eff"]["meas"].append(_measured(s, df, "effective_support", 2, "exp(mean H)", " keys"))
        layers["eff"]["exact"].append(_theory(s, th, "effective_support", "exp(E[H])"))
        layers["eff"]["asym"].append(_theory(
            s, th, "effective_support_asymptote", "n·e^{−σ²/2}", dotted=True,
            mask=asymptote_holds(th, "effective_support_asymptote", "effective_support")))
        layers["out"]["meas"].append(_measured(s, df, "output_std", 3, "std(output)", ""))
        layers["out"]["exact"].append(_theory(s, th, "output_std", "√E[Σp²]"))
        layers["out"]["asym"].append(_theory(s, th, "output_std_asymptote", "√(e^{σ²}/n)", dotted=True,
                                             mask=asymptote_holds(th, "output_std_asymptote", "output_std")))
        if c.full:
            m = np.asarray(fully_scaled_multiplier(df["n"].to_numpy()))
            marker = {"symbol": "circle-open", "size": 8, "color": s.color}
            layers["out"]["meas"].append(_measured(s, df, "output_std", 3, "std(output)·√(n/e)", "", scale=m,
                                                   mode="markers", marker=marker,
                                                   name=f"{s.label} · fully scaled"))
            layers["out"]["exact"].append(_theory(s, th, "output_std", "fully scaled √E[Σp²]·√(n/e)",
                                                  scale=np.asarray(fully_scaled_multiplier(nth)),
                                                  kind="fully scaled exact"))
    layers["ent"]["ref"].append(_reference("uniform: log n" if not frac else "uniform: 1", xs,
                                           np.ones_like(xs) if frac else np.asarray(uniform_entropy(xs))))
    layers["mxw"]["ref"].append(_reference("uniform: 1/n", xs, 1.0 / xs))
    layers["eff"]["ref"].append(_reference("uniform: n", xs, xs))
    layers["out"]["ref"] += [_reference("uniform row: 1/√n", xs, np.asarray(output_std_flat(xs))),
                             _reference("one-hot row: 1", xs, np.asarray(output_std_onehot(xs)))]
    ent, mxw, eff, out = ([*v["ref"], *v["asym"], *v["meas"], *v["exact"]] for v in layers.values())
    nx = {"x_title": "keys per row n", "log_x": True}
    panels = [Panel("Entropy (fraction of log n)" if frac else "Entropy H (nats)", ent,
                    "H / log n" if frac else "nats", **nx),
              Panel("Max weight", mxw, "max<sub>j</sub> p<sub>j</sub>", log_y=True, **nx),
              Panel("Effective support exp(H̄)", eff, "keys", log_y=True, **nx),
              Panel("Output std (unit-variance values)", out, "std", log_y=True, **nx)]
    legend = [figures.legend_key("measured (±2 s.e.)", symbol="circle"),
              figures.legend_key("exact expectation", dash="dash"),
              figures.legend_key(f"large-n asymptote (within {ASYMPTOTE_RTOL:.0%} of exact)", dash="dot")]
    if c.full:
        legend.append(figures.legend_key("fully scaled ×√(n/e)", dash="none", symbol="circle-open"))
    legend.append(figures.legend_key("uniform / one-hot bounds", dash="dashdot"))
    fig = figures.panel_grid(panels, legend=legend, height=2 * 340 + 70)
    fig.update_layout(meta={"view": "entropy-panels"})
    return fig


EMPTY_SWEEP = pd.DataFrame({c: pd.Series(dtype="int64" if c == "n" else "float64") for c in COLUMNS})
"""A sweep frame with no lengths yet (a curve whose sweep has not reported any)."""


def partial_note(n_done: int) -> str:
    """The line above the panels while a sweep streams."""
    return f"Measuring… the curves reach n ≤ {n_label(n_done)} so far; the longer lengths follow."


def mark_partial(fig: go.Figure, n_done: int) -> go.Figure:
    """The panels while a sweep streams: measured up to ``n_done`` so far (``meta.partial``). The page
    says so above the chart (:func:`partial_note`): a note on the figure sat over the panels' titles."""
    return fig.update_layout(meta={**(fig.layout.meta or {}), "partial": True, "n_done": int(n_done)})


def mark_stale(fig: go.Figure) -> go.Figure:
    """A copy of a panel figure marked as showing previous settings (greyed, ``meta.stale``); the page's
    warning above it says which settings (a label on the figure sat over the panels' titles)."""
    out = go.Figure(fig)
    out.update_traces(opacity=0.45)
    return out.update_layout(meta={**(fig.layout.meta or {}), "stale": True})


def panel_frame(series: list[Series], frames: list[pd.DataFrame],
                theories: list[pd.DataFrame]) -> pd.DataFrame:
    """Everything the four panels show, one row per curve and n, theory at the measured n."""
    parts = []
    for s, df, th in zip(series, frames, theories, strict=True):
        sp = s.spec
        t = th.set_index("n").reindex(df["n"].to_numpy())
        part = df.copy()
        part.insert(0, "curve", s.label)
        for col in ("seed", "queries", "d", "normalizer", "temperature", "scale_rule", "method"):
            part.insert(1, col, getattr(sp, col))
        for col in ("entropy", "max_weight", "effective_support", "output_std", "sum_sq", "entropy_asymptote",
                    "entropy_corrected", "max_weight_asymptote", "output_std_asymptote", "sigma2"):
            part[f"theory_{col}"] = t[col].to_numpy()
        part["fully_scaled_output_std"] = part["output_std"] * np.sqrt(part["n"] / np.e)
        parts.append(part)
    return pd.concat(parts, ignore_index=True)


def validity_frame(series: list[Series], frames: list[pd.DataFrame],
                   theories: list[pd.DataFrame]) -> pd.DataFrame:
    """Per curve, at its largest n: where the large-n formulas hold and how close they come.

    ``H asymptote`` and ``H with 1/n term`` are NaN (a blank cell) where the expansion is more than
    :data:`ASYMPTOTE_RTOL` from the exact value; outside its range an expansion can leave
    ``[0, log n]`` altogether (the 1/n term grows like ``e^{σ²}/n``). ``asymptotes within 5 % from n``
    is the first n of the theory grid from which the entropy asymptote stays that close (NaN: none).
    """
    rows = []
    for s, df, th in zip(series, frames, theories, strict=True):
        n = int(df["n"].iloc[-1])
        ok_a = asymptote_holds(th, "entropy_asymptote", "entropy")
        ok_c = asymptote_holds(th, "entropy_corrected", "entropy")
        i = int(np.flatnonzero(th["n"].to_numpy() == n)[0])
        t = th.iloc[i]
        from_n = float(th["n"].to_numpy()[ok_a][0]) if ok_a.any() else np.nan
        rows.append({"curve": s.label, "σ² at largest n": t["sigma2"],
                     "asymptote holds for n ≫ e^σ²": t["valid_from"],
                     f"asymptotes within {ASYMPTOTE_RTOL:.0%} from n": from_n,
                     "frozen below n ≈ e^(σ²/2)": t["frozen_below"],
                     "n": n, "H measured": df["entropy"].iloc[-1], "H exact": t["entropy"],
                     "H asymptote": t["entropy_asymptote"] if ok_a[i] else np.nan,
                     "H with 1/n term": t["entropy_corrected"] if ok_c[i] else np.nan})
    return pd.DataFrame(rows)


def figure1_frame(df: pd.DataFrame, peak: float, rest: float, s: float) -> pd.DataFrame:
    """The measured figure-1 rows with their closed forms, for the CSV."""
    n = df["n"].to_numpy()
    return df.assign(softmax_closed_form=np.asarray(peak_weight(n, peak, rest)),
                     ssmax_closed_form=np.asarray(peak_weight(n, peak, rest, s=s)), peak=peak, rest=rest, s=s)


def figure1_charts(df: pd.DataFrame, peak: float, rest: float, s: float,
                   n_max: float) -> tuple[go.Figure, go.Figure]:
    """Peak weight against n (measured over closed form) and the gap a key needs for weight 1/2."""
    x = np.geomspace(2, n_max, 200)
    n_arr = df["n"].to_numpy()
    curves = [
        Curve("softmax (measured)", n_arr, df["softmax"].to_numpy(), color=PALETTE[0],
              hover="softmax<br>n = %{x:,.0f}<br>peak weight = %{y:.4f}"),
        Curve("softmax (closed form)", x, np.asarray(peak_weight(x, peak, rest)), theory=True,
              color=PALETTE[0]),
        Curve(f"SSMax s = {s:g} (measured)", n_arr, df["ssmax"].to_numpy(), color=PALETTE[5],
              hover="SSMax<br>n = %{x:,.0f}<br>peak weight = %{y:.4f}"),
        Curve("SSMax (closed form)", x, np.asarray(peak_weight(x, peak, rest, s=s)), theory=True,
              color=PALETTE[5]),
    ]
    fig = figures.line_chart(curves, title="Weight on the peak key", x_title="keys n", y_title="weight",
                             log_x=True, height=430)
    fig.update_yaxes(range=[0, 1.02])
    fig.update_xaxes(exponentformat="power")
    fig.update_layout(meta={"view": "ssmax-figure1"}, legend=LEGEND_BELOW)
    gap = peak - rest
    margin = [Curve("softmax: log(n − 1)", x, np.asarray(margin_for_half_weight(x)), theory=True,
                    color=PALETTE[0]),
              Curve(f"SSMax: log(n − 1)/(s log n) → 1/s = {1 / s:.2f}", x,
                    np.asarray(ssmax_margin_for_half_weight(x, s)), theory=True, color=PALETTE[5]),
              Curve(f"your gap Δ = {gap:g}", x, np.full_like(x, gap), theory=True, color=PALETTE[7])]
    mfig = figures.line_chart(margin, title="Logit gap a key needs to keep half the weight", x_title="keys n",
                              y_title="gap (logit units)", log_x=True, height=430)
    mfig.update_xaxes(exponentformat="power")
    mfig.update_layout(meta={"view": "ssmax-margin"}, legend=LEGEND_BELOW)
    return fig, mfig
