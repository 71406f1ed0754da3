"""Entropy vs length: a softmax row flattens as n grows; measured to 2^24 keys, with theory."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
import streamlit as st

from attncore.sweeps import METHODS, SCALE_RULES, SWEEP_NORMALIZERS, SweepSpec
from attncore.theory import (
    fully_scaled_multiplier,
    margin_for_half_weight,
    output_std_flat,
    output_std_onehot,
    peak_weight,
    ssmax_margin_for_half_weight,
    uniform_entropy,
)
from ui import figures, widgets
from ui.cached import entropy_theory, peak_weights
from ui.figures import PALETTE, Curve, Panel
from ui.page import PageContext, run_page
from ui.state import Param
from ui.sweep import run_sweeps

TAU_OPTIONS = ("0.25", "0.5", "1", "2", "4")
RULE_LABELS = {"sqrt_d": "1/√d (standard)", "none": "none (raw q·k)", "ssmax": "SSMax: s·log n/√d",
               "llama4": "Llama 4 NoPE: (1 + 0.1·log(⌊n/8192⌋+1))/√d"}
RULE_SHORT = {"sqrt_d": "1/√d", "none": "unscaled", "ssmax": "SSMax", "llama4": "Llama 4"}
NORM_LABELS = {"softmax": "softmax", "softmax1": "softmax1 (off-by-one)", "sigmoid": "sigmoid (b = −log n)"}
VARY_LABELS = {"temperature": "temperature τ", "scale_rule": "scale rule", "normalizer": "normaliser",
               "none": "nothing (one curve)"}
METHOD_LABELS = {"logits": "logits (exact shortcut: n numbers per row)",
                 "vectors": "vectors (real q, k, v: n·(d + 16) numbers)"}
N_EXPONENTS = tuple(range(4, 25))

P_LO = Param("ent_lo", 4, lo=4, hi=24)
P_HI = Param("ent_hi", 20, lo=4, hi=24)
P_PPO = Param("ent_ppo", 1, options=(1, 2, 4))
P_D = Param("ent_d", 64, options=(8, 16, 32, 64, 128, 256, 512, 1024))
P_Q = Param("ent_q", 64, options=(1, 4, 16, 32, 64, 128, 256, 512, 1024))
P_METHOD = Param("ent_method", "logits", options=METHODS)
P_VARY = Param("ent_vary", "temperature", options=tuple(VARY_LABELS))
P_TAUS = Param("ent_taus", ("0.5", "1", "2"), options=TAU_OPTIONS, multi=True)
P_RULES = Param("ent_rules", ("sqrt_d", "ssmax", "llama4"), options=SCALE_RULES, multi=True)
P_NORMS = Param("ent_norms", ("softmax", "softmax1", "sigmoid"), options=SWEEP_NORMALIZERS, multi=True)
P_TAU = Param("ent_tau", 1.0, lo=0.1, hi=10.0)
P_RULE = Param("ent_rule", "sqrt_d", options=SCALE_RULES)
P_NORM = Param("ent_norm", "softmax", options=SWEEP_NORMALIZERS)
P_S = Param("ent_s", 0.43, lo=0.05, hi=2.0)
P_FULL = Param("ent_full", True)
P_AXIS = Param("ent_axis", "nats", options=("nats", "fraction"))
P_PEAK = Param("ent_peak", 3.0, lo=-10.0, hi=10.0)
P_REST = Param("ent_rest", -2.0, lo=-10.0, hi=10.0)
PARAMS = (P_LO, P_HI, P_PPO, P_D, P_Q, P_METHOD, P_VARY, P_TAUS, P_RULES, P_NORMS, P_TAU, P_RULE, P_NORM,
          P_S, P_FULL, P_AXIS, P_PEAK, P_REST)
RANGE_KEY = "ent_n"  # the range slider's own key; P_LO / P_HI carry its value in the URL
FIG1_MAX_EXP = 20  # figure-1 rows are materialised: n <= 2^20
ERR_Z = 2.0  # error bars: +- 2 standard errors
LEGEND_BELOW = {"orientation": "h", "yanchor": "top", "y": -0.22, "x": 0.0}


@dataclass(frozen=True)
class Series:
    """One curve: its legend label, colour and the sweep that measures it."""

    label: str
    spec: SweepSpec
    color: str


def _pow2(e: int) -> str:
    sup = str(e).translate(str.maketrans("0123456789", "⁰¹²³⁴⁵⁶⁷⁸⁹"))
    return f"2{sup}"


def _n_label(n: int) -> str:
    return f"{_pow2(int(math.log2(n)))} = {n:,}"


def n_range(where) -> tuple[int, int]:
    """The range slider over powers of two, kept in the URL as ent_lo / ent_hi (exponents).

    The slider is a range slider because it gets a pair as ``value`` (its starting point,
    from the URL); afterwards it keeps its own state and the two exponents follow it.
    """
    lo, hi = sorted((int(st.session_state[P_LO.key]), int(st.session_state[P_HI.key])))
    a, b = where.select_slider("Sequence lengths n", options=[2**e for e in N_EXPONENTS],
                               value=(2**lo, 2**hi), key=RANGE_KEY, format_func=_n_label,
                               help="Keys per row, from 2⁴ to 2²⁴ = 16.8M. Each row is streamed: no n × n "
                                    "matrix is ever formed.")
    lo, hi = int(math.log2(a)), int(math.log2(b))
    st.session_state[P_LO.key], st.session_state[P_HI.key] = lo, hi
    return lo, hi


def lengths_for(lo: int, hi: int, ppo: int) -> tuple[int, ...]:
    """Powers of two from 2^lo to 2^hi with ``ppo`` points per doubling."""
    ks = np.arange(lo * ppo, hi * ppo + 1) / ppo
    return tuple(sorted({int(round(2.0**k)) for k in ks}))


@dataclass(frozen=True)
class Controls:
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


def controls(where) -> Controls:
    """Draw the sidebar controls and return what they say."""
    where.markdown("#### Sweep")
    lo, hi = n_range(where)
    ppo = widgets.select_slider(P_PPO, "Points per doubling of n", where=where)
    d = widgets.select_slider(P_D, "Head dim d", where=where,
                              help="q and k have d coordinates; with 1/√d scaling the logits' spread does "
                                   "not depend on d (only |q|²/d fluctuates a little).")
    queries = widgets.select_slider(P_Q, "Query rows", where=where,
                                    help="Independent queries averaged at every n (error bars: ±2 s.e.).")
    method = widgets.radio(P_METHOD, "Method", labels=METHOD_LABELS, horizontal=False, where=where)
    where.markdown("#### Compare")
    vary = widgets.select(P_VARY, "Vary", labels=VARY_LABELS, where=where,
                          help="Draw one curve per value of this setting; the others stay as set below.")
    taus, rules, norms = P_TAUS.default, P_RULES.default, P_NORMS.default
    if vary == "temperature":
        taus = widgets.multiselect(P_TAUS, "Temperatures τ (logits ÷ τ·√d)", where=where)
    elif vary == "scale_rule":
        rules = widgets.multiselect(P_RULES, "Scale rules", labels=RULE_LABELS, where=where)
    elif vary == "normalizer":
        norms = widgets.multiselect(P_NORMS, "Normalisers", labels=NORM_LABELS, where=where)
    tau, rule, norm = P_TAU.default, P_RULE.default, P_NORM.default
    if vary != "temperature":
        tau = widgets.slider(P_TAU, "Temperature τ", step=0.05, where=where,
                             help="Divides the logits: τ < 1 sharpens, τ > 1 flattens.")
    if vary != "scale_rule":
        rule = widgets.select(P_RULE, "Scale rule", labels=RULE_LABELS, where=where)
    if vary != "normalizer":
        norm = widgets.select(P_NORM, "Normaliser", labels=NORM_LABELS, where=where)
    s = widgets.slider(P_S, "SSMax s", step=0.01, where=where,
                       help="SSMax multiplies the logits by s·log n (the paper's figure uses s = 0.43).")
    where.markdown("#### Display")
    full = widgets.toggle(P_FULL, "Show the fully scaled output ×√(n/e)", where=where)
    axis = widgets.radio(P_AXIS, "Entropy axis", labels={"nats": "nats", "fraction": "fraction of log n"},
                         where=where)
    return Controls(lo=lo, hi=hi, ppo=int(ppo), d=int(d), queries=int(queries), method=method, vary=vary,
                    taus=tuple(taus), rules=tuple(rules), norms=tuple(norms), tau=float(tau), rule=rule,
                    norm=norm, s=float(s), full=bool(full), axis=axis)


def build_series(c: Controls, seed: int, dtype: str) -> list[Series]:
    """One :class:`Series` per compared value (or one), in a stable order."""
    lengths = lengths_for(c.lo, c.hi, c.ppo)
    base = SweepSpec(lengths=lengths, d=c.d, queries=c.queries, scale_rule=c.rule, temperature=c.tau,
                     normalizer=c.norm, method=c.method, seed=seed, ssmax_s=c.s, dtype=dtype)
    items: list[tuple[str, SweepSpec]] = []
    if c.vary == "temperature" and c.taus:
        for t in sorted(c.taus, key=float):
            items.append((f"τ = {t}", SweepSpec(**{**base.__dict__, "temperature": float(t)})))
    elif c.vary == "scale_rule" and c.rules:
        for r in [r for r in SCALE_RULES if r in c.rules]:
            items.append((RULE_SHORT[r], SweepSpec(**{**base.__dict__, "scale_rule": r})))
    elif c.vary == "normalizer" and c.norms:
        for n in [n for n in SWEEP_NORMALIZERS if n in c.norms]:
            items.append((n, SweepSpec(**{**base.__dict__, "normalizer": n})))
    else:
        items.append((f"{RULE_SHORT[c.rule]}, τ = {c.tau:g}, {c.norm}", base))
    return [Series(label, spec, PALETTE[i % len(PALETTE)]) for i, (label, spec) in enumerate(items)]


def theory_lengths(spec: SweepSpec) -> tuple[int, ...]:
    """Where to evaluate theory: the measured lengths plus a grid dense enough for smooth lines.

    Rules whose logit scale changes with n need one quadrature per n, so they get a coarser grid.
    """
    lo, hi = int(math.log2(min(spec.lengths))), int(math.ceil(math.log2(max(spec.lengths))))
    per = 4 if spec.scale_rule in ("sqrt_d",) else 2 if spec.scale_rule in ("none", "llama4") else 1
    if spec.normalizer == "sigmoid":
        per = min(per, 2)
    grid = {int(round(2.0 ** (k / per))) for k in range(lo * per, hi * per + 1)}
    return tuple(sorted(grid | set(spec.lengths)))


def theory_for(s: Series) -> tuple[pd.DataFrame, float]:
    sp = s.spec
    res = entropy_theory(theory_lengths(sp), sp.d, sp.scale_rule, sp.temperature, sp.normalizer, sp.ssmax_s)
    return res.value, res.seconds


def explain() -> None:
    st.markdown(
        "A query spreads one unit of attention over the n keys it sees. With logits of a fixed "
        "spread σ, every extra key takes a share: the row flattens, its entropy climbs like log n and "
        "its largest weight falls. To stay sharp, a head must produce ever larger logits as n grows. "
        "Below, every curve is measured by **attncore** streaming rows of up to 2²⁴ keys (no n × n "
        "matrix), and the dashed lines are exact expectations computed by quadrature."
    )
    st.latex(r"H \approx \log n - \frac{\sigma^2}{2},\qquad "
             r"\max_j p_j \approx \frac{e^{\sigma z_{\max}}}{n\,e^{\sigma^2/2}},\qquad "
             r"\operatorname{std}(o) = \sqrt{\textstyle\sum_j p_j^2} \approx \sqrt{\frac{e^{\sigma^2}}{n}}")
    st.markdown(
        "Here σ² is the logits' variance (1 for unit Gaussian q, k with 1/√d scaling and τ = 1). The "
        "dotted large-n asymptotes hold once n is well past e^{σ²}; below about e^{σ²/2} the row is "
        "*frozen*: a handful of keys carry nearly all the weight. The output of attention over "
        "unit-variance values shrinks like √(e^{σ²}/n) (Graphcore's log-normal rule); multiplying by "
        "√(n/e) (\"fully scaled\" attention) restores unit scale at σ = 1."
    )


def _measured(s: Series, df: pd.DataFrame, col: str, panel: int, what: str, unit: str,
              scale: np.ndarray | float = 1.0, **extra) -> Curve:
    y = df[col].to_numpy() * scale
    err = df[f"{col}_sem"].to_numpy() * scale * ERR_Z if f"{col}_sem" in df else None
    hover = f"{s.label}<br>n = %{{x:,.0f}}<br>{what} = %{{y:.4g}}{unit}"
    return Curve(s.label, df["n"].to_numpy(), y, err=err, color=s.color, hover=hover,
                 extra={"legendgroup": s.label, "showlegend": panel == 0, **extra})


def _theory(s: Series, th: pd.DataFrame, col: str, name: str, *, dotted: bool = False,
            scale: np.ndarray | float = 1.0, mask: np.ndarray | None = None) -> Curve:
    y = th[col].to_numpy() * scale
    x = th["n"].to_numpy().astype(np.float64)
    if mask is not None:
        x, y = x[mask], y[mask]
    kind = "asymptote" if dotted else "exact"
    line = {"color": s.color, "dash": "dot" if dotted else "dash", "width": 1.6 if dotted else 2}
    return Curve(f"{s.label} · {kind}", x, y, theory=True, color=s.color,
                 hover=f"{s.label} · {kind}<br>n = %{{x:,.0f}}<br>{name} = %{{y:.4g}}",
                 extra={"legendgroup": s.label, "showlegend": False, "line": line})


def _reference(name: str, x: np.ndarray, y: np.ndarray) -> Curve:
    return Curve(name, x, y, theory=True, color=PALETTE[7],
                 hover=f"{name}<br>n = %{{x:,.0f}}<br>%{{y:.4g}}",
                 extra={"legendgroup": "bounds", "showlegend": False,
                        "line": {"color": PALETTE[7], "dash": "dashdot", "width": 1}})


def main_chart(series: list[Series], frames: list[pd.DataFrame], theories: list[pd.DataFrame],
               c: Controls) -> figures.go.Figure:
    """The four panels: entropy, max weight, effective support, output std."""
    n_lo, n_hi = 2.0**c.lo, 2.0**c.hi
    xs = np.geomspace(n_lo, n_hi, 64)
    frac = c.axis == "fraction"
    ent, mxw, eff, out = [], [], [], []
    for s, df, th in zip(series, frames, theories, strict=True):
        nth = th["n"].to_numpy().astype(np.float64)
        valid = nth >= th["valid_from"].to_numpy()
        ln_t = np.log(np.maximum(nth, 2)) if frac else 1.0
        h_col = "normalized_entropy" if frac else "entropy"
        ent += [_measured(s, df, h_col, 0, "H", "" if frac else " nats"),
                _theory(s, th, h_col, "E[H]"),
                _theory(s, th, "entropy_asymptote", "log n − σ²/2", dotted=True, scale=1.0 / ln_t,
                        mask=valid & (th["entropy_asymptote"].to_numpy() > 0))]
        mxw += [_measured(s, df, "max_weight", 1, "max weight", ""),
                _theory(s, th, "max_weight", "E[max p]"),
                _theory(s, th, "max_weight_asymptote", "Gumbel asymptote", dotted=True,
                        mask=valid & np.isfinite(th["max_weight_asymptote"].to_numpy()))]
        eff += [_measured(s, df, "effective_support", 2, "exp(mean H)", " keys"),
                _theory(s, th, "effective_support", "exp(E[H])"),
                _theory(s, th, "effective_support_asymptote", "n·e^{−σ²/2}", dotted=True,
                        mask=valid & (th["entropy_asymptote"].to_numpy() > 0))]
        out += [_measured(s, df, "output_std", 3, "std(output)", ""),
                _theory(s, th, "output_std", "√E[Σp²]"),
                _theory(s, th, "output_std_asymptote", "√(e^{σ²}/n)", dotted=True, mask=valid)]
        if c.full:
            m = np.asarray(fully_scaled_multiplier(df["n"].to_numpy()))
            marker = {"symbol": "circle-open", "size": 8, "color": s.color}
            out.append(_measured(s, df, "output_std", 3, "std(output)·√(n/e)", "", scale=m, mode="markers",
                                 marker=marker, name=f"{s.label} · fully scaled"))
            out.append(_theory(s, th, "output_std", "fully scaled √E[Σp²]·√(n/e)",
                               scale=np.asarray(fully_scaled_multiplier(nth))))
    ent.append(_reference("uniform: log n" if not frac else "uniform: 1", xs,
                          np.ones_like(xs) if frac else np.asarray(uniform_entropy(xs))))
    mxw.append(_reference("uniform: 1/n", xs, 1.0 / xs))
    eff.append(_reference("uniform: n", xs, xs))
    out += [_reference("uniform row: 1/√n", xs, np.asarray(output_std_flat(xs))),
            _reference("one-hot row: 1", xs, np.asarray(output_std_onehot(xs)))]
    panels = [Panel("Entropy (fraction of log n)" if frac else "Entropy H (nats)", ent,
                    "H / log n" if frac else "nats"),
              Panel("Max weight", mxw, "max_j p_j", log_y=True),
              Panel("Effective support exp(H̄)", eff, "keys", log_y=True),
              Panel("Output std (unit-variance values)", out, "std", log_y=True)]
    legend = [figures.legend_key("measured (±2 s.e.)", symbol="circle"),
              figures.legend_key("exact expectation", dash="dash"),
              figures.legend_key("large-n asymptote", dash="dot")]
    if c.full:
        legend.append(figures.legend_key("fully scaled ×√(n/e)", dash="none", symbol="circle-open"))
    legend.append(figures.legend_key("uniform / one-hot bounds", dash="dashdot"))
    fig = figures.panel_grid(panels, x_title="keys per row n", legend=legend, row_height=340)
    fig.update_layout(meta={"view": "entropy-panels"})
    return fig


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


def metrics(s: Series, df: pd.DataFrame, th: pd.DataFrame) -> None:
    """The first curve at its longest n: measured against exact theory."""
    last = df.iloc[-1]
    n = int(last["n"])
    t = th.set_index("n").loc[n]
    cols = st.columns(4)
    quiet = {"delta_color": "off", "delta_arrow": "off"}
    cols[0].metric(f"Entropy at n = {_n_label(n)}", f"{last['entropy']:.3f} nats",
                   f"exact {t['entropy']:.3f} · log n = {math.log(n):.3f}", **quiet,
                   help="Measured mean over query rows; exact expectation by quadrature; "
                        "log n is the uniform maximum.")
    cols[1].metric("Max weight", f"{last['max_weight']:.3g}",
                   f"exact {t['max_weight']:.3g} · 1/n = {1 / n:.2g}", **quiet)
    cols[2].metric("Effective support exp(H)", f"{last['effective_support']:,.0f} keys",
                   f"exact {t['effective_support']:,.0f} · {last['effective_support'] / n:.1%} of n", **quiet)
    full = last["output_std"] * math.sqrt(n / math.e)
    cols[3].metric("Output std", f"{last['output_std']:.3g}",
                   f"exact {t['output_std']:.3g} · fully scaled {full:.3f}", **quiet)


def validity_table(series: list[Series], frames: list[pd.DataFrame], theories: list[pd.DataFrame]) -> None:
    rows = []
    for s, df, th in zip(series, frames, theories, strict=True):
        n = int(df["n"].iloc[-1])
        t = th.set_index("n").loc[n]
        rows.append({"curve": s.label, "σ² at largest n": t["sigma2"],
                     "asymptote holds for n ≫ e^σ²": t["valid_from"],
                     "frozen below n ≈ e^(σ²/2)": t["frozen_below"],
                     "n": n, "H measured": df["entropy"].iloc[-1], "H exact": t["entropy"],
                     "H asymptote": t["entropy_asymptote"], "H with 1/n term": t["entropy_corrected"]})
    st.dataframe(pd.DataFrame(rows), hide_index=True, width="stretch",
                 column_config={"asymptote holds for n ≫ e^σ²": st.column_config.NumberColumn(format="%.3g"),
                                "frozen below n ≈ e^(σ²/2)": st.column_config.NumberColumn(format="%.3g"),
                                "σ² at largest n": st.column_config.NumberColumn(format="%.3f"),
                                "H measured": st.column_config.NumberColumn(format="%.4f"),
                                "H exact": st.column_config.NumberColumn(format="%.4f"),
                                "H asymptote": st.column_config.NumberColumn(format="%.4f"),
                                "H with 1/n term": st.column_config.NumberColumn(format="%.4f")})
    st.caption("The 1/n term: E[H] ≈ log n − σ²/2 + (σ²e^{σ²} − (e^{σ²} − 1)/2)/n (second-order delta "
               "method). Unscaled logits at d = 64 have σ² = 64: the asymptote would need n ≫ e⁶⁴ ≈ 6·10²⁷, "
               "so such a row stays frozen at every length you can run.")


def figure1(ctx: PageContext) -> None:
    """SSMax paper, figure 1: one key at a fixed logit against a growing crowd."""
    st.subheader("One spike against a growing crowd")
    st.markdown(
        "The setup of figure 1 in Nakanishi's *Scalable-Softmax Is Superior for Attention* (2025): one "
        "key has logit +3, every other key −2. Softmax lets the crowd win: the spike keeps 0.600 of the "
        "weight at n = 100 but only 0.129 at n = 1000. SSMax multiplies the logits by s·log n, so the "
        "gap the spike needs grows with n as fast as the crowd does."
    )
    st.latex(r"p_{\text{peak}} = \frac{1}{1 + (n-1)\,e^{-\Delta}}\ \ \text{(softmax)},\qquad "
             r"p_{\text{peak}} = \frac{1}{1 + (n-1)\,n^{-s\Delta}}\ \ \text{(SSMax)},\qquad "
             r"\Delta = \text{peak} - \text{rest}")
    c1, c2 = st.columns(2)
    peak = widgets.slider(P_PEAK, "Peak logit", step=0.5, where=c1)
    rest = widgets.slider(P_REST, "Other logits", step=0.5, where=c2)
    s = float(st.session_state[P_S.key])
    ns = tuple(sorted({2**k for k in range(1, FIG1_MAX_EXP + 1)} | {10**k for k in range(1, 7)}))
    res = peak_weights(ns, float(peak), float(rest), s, ctx.device)
    df = res.value
    x = np.geomspace(2, 2.0**FIG1_MAX_EXP, 200)
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
    left, right = st.columns(2)
    left.plotly_chart(fig, key="chart_fig1")
    right.plotly_chart(mfig, key="chart_margin")
    at = df.set_index("n")
    cross = f" softmax drops below ½ at n = 1 + e^Δ ≈ {1 + math.exp(gap):,.0f}." if 0 < gap < 40 else ""
    sm, ss = at["softmax"], at["ssmax"]
    st.caption(f"Measured with attncore's normalisers on materialised rows: softmax {sm[100]:.3f} at n = 100 "
               f"and {sm[1000]:.3f} at n = 1000; SSMax {ss[100]:.3f} and {ss[1000]:.3f}.{cross} "
               "Right: closed forms only.")
    widgets.csv_download(df.assign(softmax_closed_form=np.asarray(peak_weight(n_arr, peak, rest)),
                                   ssmax_closed_form=np.asarray(peak_weight(n_arr, peak, rest, s=s)),
                                   peak=peak, rest=rest, s=s),
                         "ssmax_figure1.csv", label="Download figure-1 data (CSV)", key="dl_ent_fig1")
    widgets.caption_compute(ctx.device_label, res.seconds, f"{len(ns)} rows up to n = 2²⁰.")


def body(ctx: PageContext) -> None:
    st.title("Entropy vs length")
    explain()
    c = controls(ctx.controls)
    dtype = "float64" if ctx.dtype == "float64" else "float32"
    if ctx.dtype in ("float16", "bfloat16"):
        st.info("Sweeps draw float32 samples and add them up in float64; half precision applies to the "
                "Heatmaps page only.", icon=":material/info:")
    if c.vary != "none" and not {"temperature": c.taus, "scale_rule": c.rules, "normalizer": c.norms}[c.vary]:
        st.warning("Nothing is selected to compare; showing one curve with the settings below it.")
    series = build_series(c, ctx.seed, dtype)
    result = run_sweeps([s.spec for s in series], ctx.device, key="ent_sweep",
                        labels=[s.label for s in series])
    if result is not None:
        with st.spinner("Computing the exact expectations (quadrature)…"):
            th = [theory_for(s) for s in series]
        theories = [t for t, _ in th]
        metrics(series[0], result.frames[0], theories[0])
        st.plotly_chart(main_chart(series, list(result.frames), theories, c), key="chart_entropy")
        frames = list(result.frames)
        widgets.csv_download(lambda: panel_frame(series, frames, theories), "entropy_vs_length.csv",
                             label="Download these curves (CSV)", key="dl_ent_panels")
        work = sum(s.spec.queries * max(s.spec.lengths) for s in series)
        reused = "" if result.computed == len(series) else \
            f" {len(series) - result.computed} of {len(series)} curves reused from an earlier run."
        widgets.caption_compute(ctx.device_label, result.seconds,
                                f"{len(series)} curves × {len(series[0].spec.lengths)} lengths, {c.queries} "
                                f"query rows, method {c.method}, up to {work / 1e6:,.0f}M logits per curve "
                                f"set; theory in {sum(t for _, t in th) * 1e3:.0f} ms.{reused}")
        with st.expander("Where the large-n formulas hold", expanded=False):
            validity_table(series, list(result.frames), theories)
    figure1(ctx)


run_page(title="Entropy vs length", icon=":material/trending_up:", params=PARAMS, body=body)
