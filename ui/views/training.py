"""Training lab: the figures and plain-words verdicts of the shipped experiments (their tables are
:mod:`ui.views.training_tables`, a live run's record :mod:`ui.views.training_runs`).

Everything here is a pure function of a result dict (the JSON written by
``python -m attncore.training.experiments``): no streamlit calls. Every verdict sentence is computed
from the numbers it quotes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import plotly.graph_objects as go

from attncore.training.inspect import QKStatistics
from attncore.training.verdicts import (
    GRAPHCORE_FINAL_TRAIN_LOSS,
    NOT_DISTINGUISHABLE,
    CellStats,
    cell_stats,
    converged,
    lr_sweep_analysis,
    scale_text,
    scaling_analysis,
    seed_of,
    sinks_analysis,
    stats_of,
)
from ui import figures
from ui.figures import PALETTE, Curve, Panel
from ui.views.sinks import labelled_heatmap

__all__ = [
    "STREAM_KEYS",
    "TAB_TITLES",
    "best_runs",
    "entropy_page_sentence",
    "finite_points",
    "init_variance_sentence",
    "lr_sweep_curves",
    "lr_sweep_figure",
    "lr_sweep_measured",
    "lr_sweep_verdict",
    "scaling_figure",
    "scaling_measured",
    "scaling_verdict",
    "shown",
    "sink_counts",
    "sink_labels",
    "streaming_stats",
    "sinks_alpha_figure",
    "sinks_measured",
    "sinks_verdict",
    "streaming_figure",
]

VARIANT_COLORS = {"standard": PALETTE[0], "fully_scaled": PALETTE[5], "fully_scaled_rows": PALETTE[1],
                  "unscaled": PALETTE[5], "ssmax": PALETTE[2], "softmax1": PALETTE[3],
                  "sink_logit": PALETTE[4], "gated": PALETTE[6]}
SINK_COLORS = {"softmax": PALETTE[0], "softmax1": PALETTE[3], "sink_logit": PALETTE[4], "gated": PALETTE[6]}
# The Training lab's tab of each shipped experiment (attncore.training.RESULT_NAMES); the open tab is in
# the URL as tr_tab=<title>, which the Tour's links write too.
TAB_TITLES = {"lr_sweep": "1 · Fully scaled attention", "scaling": "2 · Without 1/√d",
              "sinks": "3 · First-token attention (Shakespeare)", "null_attention": "4 · A sink forms"}


def shown(x: float) -> float:
    """A loss as the page prints it (3 decimals); comparisons and differences use these values,
    so that every difference a sentence quotes is the difference of the numbers it quotes."""
    return float(f"{x:.3f}")


# ---------------------------------------------------------------------------- shared


def _view(fig: go.Figure, name: str) -> go.Figure:
    fig.update_layout(meta={"view": name})
    return fig


def finite_points(xs: Sequence[Any], ys: Sequence[Any]) -> tuple[np.ndarray, np.ndarray]:
    """The points whose y is a finite number (the files hold only those, this double-checks)."""
    x = np.asarray(xs, dtype=np.float64)
    y = np.asarray([np.nan if v is None else v for v in ys], dtype=np.float64)
    ok = np.isfinite(y)
    return x[ok], y[ok]


# ---------------------------------------------------------------------------- experiment 1: lr sweep


def _variants(d: dict[str, Any]) -> list[str]:
    out: list[str] = []
    for r in d.get("runs", []):
        if r["variant"] not in out:
            out.append(r["variant"])
    return out


def _mean_curve(runs: Sequence[dict[str, Any]], key: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(steps, mean, sd) of a curve over a cell's converged runs, at the steps they all reached."""
    done = converged(runs)
    if not done:
        return np.zeros(0), np.zeros(0), np.zeros(0)
    n = min(len(r["steps"]) for r in done)
    steps = np.asarray(done[0]["steps"][:n], dtype=np.float64)
    vals = np.asarray([[np.nan if v is None else v for v in r[key][:n]] for r in done], dtype=np.float64)
    sd = vals.std(axis=0, ddof=1) if len(done) > 1 else np.zeros(n)
    return steps, vals.mean(axis=0), sd


def lr_sweep_figure(d: dict[str, Any]) -> go.Figure:
    """Final training loss against learning rate, one line per variant: the mean over each rate's
    converged seeds, error bars ±1 sd where a rate has several seeds (diverged runs left out)."""
    a = lr_sweep_analysis(d)
    curves = []
    for v in _variants(d):
        xs, ys, es, spread = [], [], [], []
        for (vv, lr), runs in sorted(a.cells.items(), key=lambda kv: kv[0][1]):
            st = stats_of(runs, "final_train_loss") if vv == v else None
            if st is not None:
                xs.append(lr)
                ys.append(st.mean)
                es.append(st.sd or 0.0)  # no bar for one seed (its sd is undefined, said in the hover)
                spread.append("one seed: no sd" if st.sd is None else f"±{st.sd:.4f} (sd) over {st.n} seeds")
        curves.append(Curve(v, np.asarray(xs), np.asarray(ys), err=np.asarray(es),
                            color=VARIANT_COLORS.get(v),
                            hover=f"{v}<br>lr %{{x:.3g}}<br>mean final training loss "
                                  f"%{{y:.4f}}<br>%{{customdata}}",
                            extra={"customdata": spread}))
    fig = figures.line_chart(curves, title="final training loss vs learning rate (mean ± sd over seeds)",
                             x_title="peak learning rate", y_title="final training loss (nats/char)",
                             log_x=True, height=380)
    lrs = sorted({r["lr"] for r in d.get("runs", [])})
    fig.update_xaxes(tickvals=lrs, ticktext=[f"{x:.2g}" for x in lrs])  # exactly the rates swept
    figures.legend_below(fig)
    return _view(fig, "tr-lr")


def best_runs(d: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """For each variant, the runs (one per seed) of its best cell (see
    :func:`attncore.training.verdicts.lr_sweep_analysis`)."""
    return {v: runs for v, (_, runs) in lr_sweep_analysis(d).best.items()}


def lr_sweep_curves(d: dict[str, Any]) -> go.Figure:
    """Training (solid) and validation (dotted) loss against step at each variant's best rate,
    the mean over its seeds."""
    curves = []
    for v, (lr, runs) in lr_sweep_analysis(d).best.items():
        color = VARIANT_COLORS.get(v)
        n = len(converged(runs))
        x, y, _ = _mean_curve(runs, "train_loss")
        curves.append(Curve(f"{v} (lr {lr:g}) training", x, y, color=color,
                            hover=f"{v} training, mean of {n}<br>step %{{x}}<br>%{{y:.4f}}"))
        x, y, _ = _mean_curve(runs, "val_loss")
        curves.append(Curve(f"{v} (lr {lr:g}) validation", x, y, color=color,
                            hover=f"{v} validation, mean of {n}<br>step %{{x}}<br>%{{y:.4f}}",
                            extra={"mode": "lines", "line": {"color": color, "dash": "dot", "width": 2}}))
    fig = figures.line_chart(curves, title="learning curves at each variant's best rate (mean over seeds)",
                             x_title="step", y_title="loss (nats/char)", height=380)
    figures.legend_below(fig)
    return _view(fig, "tr-lr-curves")


def lr_sweep_measured(d: dict[str, Any]) -> str:
    """This run's counterpart of the numbers in Graphcore's "Almost-scaled dot-product attention"."""
    parts = []
    for v, (lr, runs) in lr_sweep_analysis(d).best.items():
        st = stats_of(runs, "final_train_loss")
        if st is not None:
            parts.append(f"{v} {st.text()} at lr {lr:g}")
    return "Final training loss at each variant's best learning rate: " + "; ".join(parts) + "."


def _lr_of(d: dict[str, Any]) -> str:
    """The peak learning rate the runs of ``d`` share ('?' when they differ)."""
    lrs = {r["config"]["lr"] for r in d.get("runs", [])}
    return f"{lrs.pop():g}" if len(lrs) == 1 else "?"


def _seeds_phrase(k: int) -> str:
    return f"{k} seed{'s' if k != 1 else ''}"


def lr_sweep_verdict(d: dict[str, Any]) -> list[str]:
    """Plain-words verdict on the Graphcore post's claim, computed from the runs in ``d``."""
    a = lr_sweep_analysis(d)
    cfg = (d.get("sizes") or {}).get("config") or {}
    out: list[str] = []
    s_run, f_run = a.best.get("standard"), a.best.get("fully_scaled")
    if s_run is None or f_run is None:
        return ["Not enough runs converged at every seed to compare the variants."]
    s, f = stats_of(s_run[1], "final_train_loss"), stats_of(f_run[1], "final_train_loss")
    assert s is not None and f is not None
    seeded = max(len(runs) for runs in a.cells.values())
    post = GRAPHCORE_FINAL_TRAIN_LOSS
    out.append(f"Scale: {scale_text(cfg)}; {_seeds_phrase(seeded)} at each variant's best rate and its "
               "better neighbour, one at the other rates. Mean final training loss at the best rates: "
               f"{s.mean:.2f} (standard) / {f.mean:.2f} (fully scaled) here, against {post['standard']:.1f} "
               f"/ {post['fully_scaled']:.1f} in the post, whose model size and training length are not "
               "stated.")
    c = a.comparisons.get("fully_scaled vs standard")
    if c is not None:
        word = c.word("fully scaled trains worse, the ordering the Graphcore post reports",
                      "fully scaled trains better, against the Graphcore post's ordering")
        out.append(f"At each variant's best learning rate, fully scaled attention ended at {f.text()} nats "
                   f"per character against {s.text()} for standard attention; {c.margin_text()}: {word}.")
    r = a.best.get("fully_scaled_rows")
    c2 = a.comparisons.get("fully_scaled_rows vs fully_scaled")
    if r is not None and c2 is not None:
        rs = stats_of(r[1], "final_train_loss")
        assert rs is not None
        rel = (c2.word("higher than", "lower than") if c2.sign else
               f"{NOT_DISTINGUISHABLE} from" if c2.enough_seeds else "too few seeds to compare with")
        out.append("The causal-aware per-row form (each row scaled by the keys it sees) ended at "
                   f"{rs.text()}: {rel} the key-length form ({c2.margin_text()}).")
    lrs = sorted({x["lr"] for x in d["runs"]})
    for v, (lr, _) in a.best.items():
        if len(lrs) > 1 and lr in (lrs[0], lrs[-1]):
            end = "largest" if lr == lrs[-1] else "smallest"
            out.append(f"For {v} the best rate is the {end} one tried ({lr:g}), so a wider sweep might find "
                       "a lower loss.")
    div = [x for x in d["runs"] if x.get("diverged_at") is not None]
    if div:
        names = ", ".join(f"{x['name']} (seed {seed_of(x)}) at step {x['diverged_at']}" for x in div)
        out.append(f"{len(div)} of {len(d['runs'])} runs diverged ({names}); their curves stop there and the "
                   "sweep plot leaves them out.")
    # "at least": rounded down, so the printed bound never exceeds the smaller gap (0.4488 is 0.44, not 0.45)
    gap = math.floor(100 * min(s.mean - post["standard"], f.mean - post["fully_scaled"]) + 1e-9) / 100
    ratio = lrs[1] / lrs[0] if len(lrs) > 1 else 1.0
    out.append("What this run cannot show: whether the ordering holds at the post's scale, since these "
               f"models stop at least {gap:.2f} nats per character above its losses; each best rate is known "
               f"only to within the sweep's factor of {ratio:.2g}; and the best rates are picked on the same "
               "seeds that judge them, which flatters every variant a little.")
    return out


def entropy_page_sentence(d: dict[str, Any]) -> str:
    """The Entropy page's counterpart of the Graphcore post's result: this app's own measurement, in one
    sentence whose every number is read from the learning-rate sweep ``d``."""
    a = lr_sweep_analysis(d)
    cfg = (d.get("sizes") or {}).get("config") or {}
    lrs = sorted({r["lr"] for r in d["runs"]})
    corpus = (d.get("corpus") or {}).get("name", "the corpus")
    setup = (f"a character model of {cfg['n_layer']} layers and width {cfg['d_model']}, {cfg['steps']} steps "
             f"on {corpus}, {len(lrs)} learning rates from {lrs[0]:g} to {lrs[-1]:g}"
             if cfg and lrs else "a small character model")
    if "standard" not in a.best or "fully_scaled" not in a.best:
        return f"This app ran the comparison itself ({setup}), but not enough runs converged to compare."
    (ls, rs), (lf, rf) = a.best["standard"], a.best["fully_scaled"]
    s, f = stats_of(rs, "final_train_loss"), stats_of(rf, "final_train_loss")
    assert s is not None and f is not None
    c = a.comparisons.get("fully_scaled vs standard")
    verdict = NOT_DISTINGUISHABLE if c is None else c.word(
        "worse, the ordering the post reports, at a smaller scale",
        "better, so the post's ordering did not reproduce at this scale")
    return (f"This app ran the comparison itself ({setup}, {_seeds_phrase(s.n)} at the best rates). At each "
            f"variant's best learning rate, fully scaled attention (rate {lf:g}) ended at a mean final "
            f"training loss of {f.mean:.3f} nats per character against {s.mean:.3f} for standard attention "
            f"(rate {ls:g}): {verdict}.")


# ---------------------------------------------------------------------------- experiment 2: scaling


INIT_STD = 0.02  # CharTransformer.create: linear weights ~ N(0, 0.02²)


def init_variance_sentence(stats: QKStatistics, d_model: int) -> str:
    """What ``Var(q·k) = d_head`` means for these models: it assumes unit-variance entries, while
    their q and k at initialisation have the variance their small weights give them (measured)."""
    per_entry = d_model * INIT_STD**2
    return ("That identity assumes independent entries of variance 1. These models start smaller: after the "
            f"first LayerNorm, with width {d_model} and weights drawn from N(0, {INIT_STD}²), an entry of q "
            f"or k has variance about {d_model} × {INIT_STD}² = {per_entry:.3f}; measured at initialisation, "
            f"{stats.var_q:.3f} (q) and {stats.var_k:.3f} (k), and Var(q·k) = {stats.dot_per_dim:.4f} × "
            f"d_head (at d_head {stats.d_head}, over {stats.n_dots:,} query-key pairs; {per_entry ** 2:.4f} "
            "for independent entries). So the unscaled logits start with a standard deviation of "
            f"{math.sqrt(stats.dot_per_dim * 16):.2f} at d_head 16 and "
            f"{math.sqrt(stats.dot_per_dim * 256):.2f} at 256; they grow as training enlarges the weights.")


def scaling_figure(d: dict[str, Any]) -> go.Figure:
    """Per head dim: validation loss (top row), share of saturated rows (middle row) and the
    query/key gradient norm (bottom row, log scale) against step, each the mean over seeds."""
    a = scaling_analysis(d)
    loss, sat, grad = [], [], []
    half = ((d.get("sizes") or {}).get("config") or {}).get("steps", 0) / 2
    for dh in a.d_heads:
        lc, sc, gc = [], [], []
        heads = None
        for variant in ("standard", "unscaled"):
            runs = a.cells.get((variant, dh), [])
            if not runs:
                continue
            heads = runs[0]["config"]["n_head"]
            color = VARIANT_COLORS[variant]
            n = len(converged(runs))
            for out, key in ((lc, "val_loss"), (sc, "saturated_share"), (gc, "qk_grad_norm")):
                x, y, _ = _mean_curve(runs, key)
                out.append(Curve(variant, x, y, color=color, extra={"legendgroup": variant},
                                 hover=f"{variant}, mean of {n}<br>step %{{x}}<br>%{{y:.4g}}"))
        loss.append(Panel(f"d_head {dh} ({heads} head{'s' if heads != 1 else ''}): validation loss", lc,
                          y_title="nats/char",
                          x_title="step"))
        sat.append(Panel(f"d_head {dh}: rows with max weight > 0.99", sc, y_title="share of rows",
                         x_title="step", y_range=(0.0, 1.0)))
        # the half's bound in the axis title: in the panel's title it ran into the next panel's (issue 34)
        grad.append(Panel(f"d_head {dh}: |∂loss/∂W_q,k|", gc,
                          y_title="gradient norm", x_title=f"step (second half: right of {half:g})",
                          log_y=True))
    fig = figures.panel_grid([*loss, *sat, *grad], cols=max(1, len(a.d_heads)), height=880)
    return _view(fig, "tr-scaling")


def scaling_measured(d: dict[str, Any]) -> str:
    """This run's counterpart of the "Why √d Matters" tutorial's claim (means over seeds)."""
    a = scaling_analysis(d)
    parts = []
    for dh in a.d_heads:
        s = stats_of(a.cells.get(("standard", dh), []), "final_val_loss")
        u = stats_of(a.cells.get(("unscaled", dh), []), "final_val_loss")
        parts.append(f"d_head {dh}: validation loss " + (f"{s.mean:.3f}" if s else "diverged") + " scaled, "
                     + (f"{u.mean:.3f}" if u else "diverged") + " unscaled")
    return "; ".join(parts) + f" (means over {_seeds_phrase(a.seeds)})."


def scaling_verdict(d: dict[str, Any]) -> list[str]:
    """Plain-words verdict on the "Why √d Matters" tutorial's scaling claims, from the runs in ``d``."""
    a = scaling_analysis(d)
    cfg = (d.get("sizes") or {}).get("config") or {}
    out = [f"Scale: {scale_text(cfg)}, learning rate {_lr_of(d)} for both variants, {_seeds_phrase(a.seeds)} "
           "per cell. The tutorial runs no experiment: its \"When Scaling Matters Most\" table predicts "
           "that scaling matters more the larger the head dim, and its scaling-ablation exercise asks for "
           "this comparison."]
    for dh in a.d_heads:
        s_runs, u_runs = a.cells.get(("standard", dh), []), a.cells.get(("unscaled", dh), [])
        div = [r for r in u_runs if r.get("diverged_at") is not None]
        if div:
            out.append(f"At d_head {dh} unscaled attention diverged in {len(div)} of {len(u_runs)} runs "
                       f"(first at step {min(r['diverged_at'] for r in div)}).")
        c = a.loss.get(dh)
        if c is None:
            continue
        ss = stats_of(s_runs, "saturated_second_half_median")
        us = stats_of(u_runs, "saturated_second_half_median")
        sat = (f"; in the second half of training a median {us.mean:.1%} of its attention rows were "
               f"saturated against {ss.mean:.1%}" if ss and us else "")
        out.append(f"At d_head {dh}, unscaled attention ended at a validation loss of {c.b.text()} against "
                   f"{c.a.text()} with the 1/√d scaling: {c.word('worse', 'better')} "
                   f"({c.margin_text()}){sat}.")
    if len(a.d_heads) >= 2:
        steps = ", ".join(f"{k.replace('->', ' to ')}: {c.diff:+.3f} ± {(c.margin or 0):.3f}"
                          for k, c in a.gap_growth.items() if c is not None)
        out.append({True: "The gap grows with every step up in head dim, as the tutorial's table predicts",
                    False: "The gap shrinks at a step up in head dim, against the tutorial's table",
                    None: f"Whether the gap grows with every step up in head dim is {NOT_DISTINGUISHABLE}"}
                   [a.gap_grows] + f" (change of the per-seed gap: {steps}).")
    parts = []
    for dh in a.d_heads:
        g = a.grad.get(dh)
        if g is None:
            continue
        word = g.word("larger", "smaller")
        spread = ""
        if g.margin is not None and math.isfinite(g.margin):  # the 95% interval the verdict rests on
            lo, hi = math.exp(g.diff - g.margin), math.exp(g.diff + g.margin)
            spread = (f", 95% interval {lo:.2f} to {hi:.2f} {'paired over' if g.paired else 'over'} "
                      f"{min(g.a.n, g.b.n)} seeds")
        parts.append(f"d_head {dh}: {math.exp(g.b.mean):.3g} unscaled vs {math.exp(g.a.mean):.3g} scaled, "
                     f"ratio {math.exp(g.diff):.2g} ({word}){spread}")
    if parts:
        out.append("Query/key gradient norm, median over the evaluation points of the second half of "
                   f"training, geometric mean over seeds: {'; '.join(parts)}. The vanishing-gradient "
                   "argument expects smaller gradients without the scaling.")
    out.append("What this run cannot show: one learning rate serves both variants, so part of a gap may be "
               f"a rate that suits one of them better rather than saturation; {cfg.get('steps', '?')} steps "
               f"of a {cfg.get('n_layer', '?')}-layer model say nothing about longer training; the gradient "
               "norm is read before clipping and only at the evaluation points.")
    return out


# ---------------------------------------------------------------------------- experiment 3: sinks


def sink_counts(run: dict[str, Any]) -> tuple[int, int]:
    """(sink heads, heads) of one model: heads whose first-token metric α₀ exceeds the run's ε."""
    a = np.asarray(run["sink_alpha"], dtype=np.float64)
    return int((a > run["sink_eps"]).sum()), int(a.size)


def sink_labels(d: dict[str, Any]) -> list[str]:
    """The normalisers of a sinks result, in run order."""
    return list(sinks_analysis(d).cells)


def sinks_alpha_figure(d: dict[str, Any], label: str) -> go.Figure:
    """α₀ per layer and head for one normaliser: the mean over its seeds' models."""
    a = sinks_analysis(d)
    runs = [r for r in converged(a.cells[label]) if r.get("sink_alpha") is not None]
    z = np.mean([np.asarray(r["sink_alpha"], dtype=np.float64) for r in runs], axis=0)
    n, h = z.shape
    k = sum(a.heads[label])
    fig = labelled_heatmap(z, [str(j) for j in range(h)], [str(i) for i in range(n)],
                           title=f"{label}: {k} sink heads in {len(runs)} "
                                 f"model{'s' if len(runs) != 1 else ''}",
                           x_title="head", y_title="layer", value_name="mean α₀", zmin=0.0, zmax=1.0,
                           height=int(min(420, 130 + 40 * n)))
    return _view(fig, f"tr-sinks-{label}")


STREAM_KEYS = (("full_beyond", "full cache"), ("window_beyond", "window"),
               ("window_sinks_beyond", "window + first tokens"))


def streaming_stats(d: dict[str, Any]) -> dict[str, dict[str, CellStats]]:
    """Per normaliser, per cache policy (:data:`STREAM_KEYS`): the loss beyond the context over seeds."""
    out: dict[str, dict[str, CellStats]] = {}
    for label, runs in sinks_analysis(d).cells.items():
        done = [r for r in converged(runs) if r.get("streaming")]
        if done:
            seeds = [seed_of(r) for r in done]
            out[label] = {key: cell_stats([float(r["streaming"][key]) for r in done], seeds)
                          for key, _ in STREAM_KEYS}
    return out


def streaming_figure(d: dict[str, Any]) -> go.Figure:
    """StreamingLLM test: loss beyond the training context for each normaliser and cache policy,
    the mean over seeds with ±1 sd; the y axis starts at zero."""
    stats = streaming_stats(d)
    labels = list(stats)
    st0 = next(r["streaming"] for r in d["runs"] if r.get("streaming"))
    fig = go.Figure()
    for i, (key, name) in enumerate(STREAM_KEYS):
        y = [stats[lb][key].mean for lb in labels]
        e = [stats[lb][key].sd or 0.0 for lb in labels]
        fig.add_trace(go.Bar(x=labels, y=figures.as_f32(y), name=name, marker_color=PALETTE[i % len(PALETTE)],
                             error_y={"type": "data", "array": figures.as_f32(e), "visible": True},
                             hovertemplate=f"{name}<br>%{{x}}<br>%{{y:.4f}} ± %{{error_y.array:.4f}} "
                                           "(sd)<extra></extra>"))
    fig.update_layout(barmode="group", bargap=0.2, bargroupgap=0.05)
    fig.update_xaxes(type="category", tickangle=0)
    top = max(s.mean + (s.sd or 0.0) for per in stats.values() for s in per.values())
    fig.update_yaxes(title="nats/char (axis from 0)", range=[0.0, 1.08 * top])
    figures.style(fig, title=f"loss beyond the context (window {st0['window']} keys, {st0['sinks']} first "
                             "tokens kept), mean ± sd over seeds", height=360)
    figures.legend_below(fig)
    return _view(fig, "tr-streaming")


def sinks_measured(d: dict[str, Any]) -> str:
    a = sinks_analysis(d)
    parts = [f"{label} {sum(ks)} of {a.heads_per_model * len(ks)}" for label, ks in a.heads.items()]
    eps = next(r["sink_eps"] for r in d["runs"] if r.get("sink_eps") is not None)
    return ("Sink heads (α₀ > ε = " + f"{eps:g}), summed over {_seeds_phrase(a.seeds)}: " + "; ".join(parts)
            + ".")


def sinks_verdict(d: dict[str, Any]) -> list[str]:
    """Plain-words verdict on the null-attention argument and StreamingLLM, from the runs in ``d``."""
    a = sinks_analysis(d)
    cfg = (d.get("sizes") or {}).get("config") or {}
    eps = next(r["sink_eps"] for r in d["runs"] if r.get("sink_eps") is not None)
    uni = d.get("alpha_uniform", d["runs"][0].get("sink_alpha_uniform"))
    out = [f"Scale: {scale_text(cfg)}, learning rate {_lr_of(d)}, {_seeds_phrase(a.seeds)} per normaliser, "
           "against the 7-billion-parameter and larger models in which StreamingLLM found sinks."]
    for label, runs in a.cells.items():
        done = [r for r in converged(runs) if r.get("sink_alpha") is not None]
        if not done:
            out.append(f"{label}: every run diverged.")
            continue
        means = [float(np.mean(r["sink_alpha"])) for r in done]
        st = cell_stats(means, [seed_of(r) for r in done])
        models = f"{len(done)} model{'s' if len(done) != 1 else ''}"
        heads = a.heads_per_model * len(done)
        out.append(f"{label}: {sum(a.heads[label])} of {heads} heads over {models} are sink heads "
                   f"(α₀ > {eps:g}); the mean α₀ is {st.text()} against {uni:.3f} under uniform causal "
                   "attention.")
    if not a.formed:
        how = ("every head gives the first token less weight than uniform attention would"
               if a.top_alpha < uni else "no head's α₀ exceeds the threshold")
        out.append(f"No sinks formed in any of these models: {how} (largest α₀ {a.top_alpha:.3f}, uniform "
                   f"{uni:.3f}). So softmax1 and the sink logit had no sinks to remove, and the StreamingLLM "
                   "column cannot test the claim here: it shows only how these models behave past their "
                   "training context.")
    elif "softmax" in a.heads:
        base = sum(a.heads["softmax"])
        for fix in ("softmax1", "sink_logit"):
            if fix in a.heads:
                k = sum(a.heads[fix])
                word = "fewer sink heads than" if k < base else "more sink heads than" if k > base else \
                    "as many sink heads as"
                tail = (", as the null-attention argument expects." if k < base else
                        "; the null-attention argument expects fewer.")
                out.append(f"{fix} has {word} softmax ({k} against {base}, over all seeds){tail}")
    stream = streaming_stats(d)
    if "softmax" in stream:
        s = stream["softmax"]
        c = a.streaming["softmax"]
        st0 = next(r["streaming"] for r in a.cells["softmax"] if r.get("streaming"))
        if c is not None:
            word = c.word("raises it", "lowers it")
            out.append(f"With softmax, a sliding window of {st0['window']} keys scores "
                       f"{s['window_beyond'].text()} nats per character beyond the training context; keeping "
                       f"the first {st0['sinks']} tokens too gives {s['window_sinks_beyond'].mean:.3f}: "
                       f"{word} ({c.margin_text()}); the full cache scores {s['full_beyond'].mean:.3f}.")
        windows = [*s["window_beyond"].values, *s["window_sinks_beyond"].values]
        if min(s["full_beyond"].values) > max(windows):
            out.append(f"Past the training context the full cache ({s['full_beyond'].mean:.3f}) is worse "
                       "than either window in every seed: these models have not learned to use positions "
                       "beyond those they were trained on.")
    vals = [f"{label} {c.b.mean:.3f} ({c.word('higher', 'lower')}; {c.margin_text()})"
            for label, c in a.val_vs_softmax.items() if c is not None]
    if vals and "softmax" in a.cells:
        base = stats_of(a.cells["softmax"], "final_val_loss")
        if base is not None:
            out.append(f"Final validation loss against softmax's {base.text()}: " + "; ".join(vals) + ".")
    why = ("where they form, since none formed here" if not a.formed else
           "in models large enough to rely on them (these have a few hundred thousand parameters)")
    out.append(f"What this run cannot show: whether softmax1 or a sink logit removes sinks {why}. The bars "
               "of the streaming chart start at zero, so differences of a few hundredths that the table "
               "shows are hard to see in them.")
    return out
