"""The Training lab's "An induction head forms": the shipped run's curves (mean over seeds, a thin line per
seed, the phase change marked), both heads' maps before and after it, a live run's curves, and every sentence
made from the numbers of :func:`attncore.training.induction.summarize`.

Builders take run records (:meth:`attncore.training.induction.InductionRun.curves`) and return figures or
strings; nothing here calls streamlit.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import plotly.graph_objects as go

from attncore.training.induction_model import FORMED_SCORE, VOCAB, uniform_scores
from ui import figures, maps
from ui.figures import PALETTE, Curve, Marker, Panel

__all__ = [
    "curves_figure",
    "head_name",
    "job_figure",
    "live_figure",
    "live_outcome",
    "maps_figure",
    "mean_series",
    "phase_sentence",
    "scale_sentence",
    "scores_sentence",
    "series",
    "tour_lesson",
    "verdict_sentence",
]

LN_V = math.log(VOCAB)
SEED_LINE = {"mode": "lines", "line": {"width": 1}, "opacity": 0.35, "showlegend": False}
COLORS = {"loss_first": PALETTE[7], "loss_second": PALETTE[0], "induction": PALETTE[1],
          "previous": PALETTE[2]}
NAMES = {"loss_first": "loss, first copy", "loss_second": "loss, second copy",
         "induction": "induction score (induction head)",
         "previous": "previous-token score (previous-token head)"}


def _view(fig: go.Figure, name: str) -> go.Figure:
    fig.update_layout(meta={"view": name})
    return fig


def head_name(head: Sequence[int]) -> str:
    """'layer 1 head 0'."""
    return f"layer {int(head[0])} head {int(head[1])}"


def series(rec: dict[str, Any], name: str) -> list[float]:
    """One run's series ``name`` ("loss_first", "loss_second", "induction": the induction head's score,
    "previous": the previous-token head's score) at its evaluation steps."""
    if name in ("loss_first", "loss_second"):
        return [float(v) for v in rec[name]]
    layer, head = rec["ind_head"] if name == "induction" else rec["prev_head"]
    return [float(row[layer][head]) for row in rec[name]]


def mean_series(runs: Sequence[dict[str, Any]], name: str) -> tuple[list[int], list[float]]:
    """(steps, mean over the runs of :func:`series`) over the evaluation steps all runs share."""
    n = min(len(r["steps"]) for r in runs)
    steps = [int(s) for s in runs[0]["steps"][:n]]
    vals = np.mean([series(r, name)[:n] for r in runs], axis=0)
    return steps, [float(v) for v in vals]


def _panels(runs: Sequence[dict[str, Any]], phase_steps: Sequence[float], per_seed: bool) -> list[Panel]:
    top = max(int(r["steps"][-1]) for r in runs) or 1
    panels = []
    for title, names, y_title, ref, ref_name in (
            ("Loss on each copy", ("loss_first", "loss_second"), "loss (nats)", LN_V,
             f"ln {VOCAB} = {LN_V:.2f} (uniform guessing)"),
            ("The two heads' scores", ("induction", "previous"), "mean weight on the stripe", FORMED_SCORE,
             f"{FORMED_SCORE:g} (an induction head, by the rule)")):
        curves = []
        for name in names:
            if per_seed and len(runs) > 1:
                curves += [Curve(f"{NAMES[name]}, seed {r['config']['seed']}", r["steps"], series(r, name),
                                 color=COLORS[name], extra={**SEED_LINE, "legendgroup": NAMES[name]})
                           for r in runs]
            x, y = mean_series(runs, name)
            label = NAMES[name] + (f", mean of {len(runs)} seeds" if len(runs) > 1 else "")
            curves.append(Curve(label, x, y, color=COLORS[name], extra={"legendgroup": NAMES[name]}))
        curves.append(Curve(ref_name, [0, top], [ref, ref], theory=True, color=PALETTE[7]))
        markers = [Marker(float(s), "phase change" if i == 0 else "", color=PALETTE[5])
                   for i, s in enumerate(phase_steps)]
        panels.append(Panel(title, curves, y_title=y_title, x_title="step", markers=markers,
                            y_range=(-0.02, 1.02) if ref == FORMED_SCORE else None))
    return panels


def curves_figure(runs: Sequence[dict[str, Any]], phase_steps: Sequence[float]) -> go.Figure:
    """The shipped run: loss on both copies, and the induction and previous-token scores, against the step;
    mean over the seeds (thick), each seed (thin), each seed's phase change (dotted)."""
    fig = figures.panel_grid(_panels(runs, phase_steps, per_seed=True), cols=2, height=380)
    return _view(fig, "tr-ind-curves")


def maps_figure(rec: dict[str, Any]) -> go.Figure:
    """Both heads' maps on the first evaluation sequence, before and after the phase change (2 x 2)."""
    m = rec["maps"]
    grids = [m["before"]["prev"], m["after"]["prev"], m["before"]["ind"], m["after"]["ind"]]
    T = len(rec["ids"]) // 2
    titles = [f"{kind} ({head_name(rec[h])}), step {m[when]['step']} ({when})"
              for kind, h in (("previous-token head", "prev_head"), ("induction head", "ind_head"))
              for when in ("before", "after")]
    fig = maps.heatmap_grid([np.asarray(g, dtype=np.float32) for g in grids], titles, cols=2, max_side=2 * T,
                            zmin=0.0, zmax=1.0, cell_height=300)
    return _view(fig, "tr-ind-maps")


def _probe_runs(probes: Sequence[dict[str, Any]], seed: int) -> dict[str, Any]:
    """A live job's probes so far as a run record (the heads: the largest score in each layer so far)."""
    last = probes[-1]
    ind_layer = np.asarray(last["induction"][1])
    prev_layer = np.asarray(last["previous"][0])
    return {"steps": [p["step"] for p in probes], "loss_first": [p["loss_first"] for p in probes],
            "loss_second": [p["loss_second"] for p in probes], "induction": [p["induction"] for p in probes],
            "previous": [p["previous"] for p in probes], "ind_head": [1, int(ind_layer.argmax())],
            "prev_head": [0, int(prev_layer.argmax())], "config": {"seed": seed}}


def live_figure(probes: Sequence[dict[str, Any]], *, title: str, total: int) -> go.Figure:
    """The running job's curves so far (the heads: the highest-scoring of each layer at the last point)."""
    if not probes:
        probes = [{"step": 0, "loss_first": LN_V, "loss_second": LN_V, "induction": [[0.0], [0.0]],
                   "previous": [[0.0], [0.0]]}]
    rec = _probe_runs(probes, 0)
    panels = _panels([rec], [], per_seed=False)
    fig = figures.panel_grid(panels, cols=2, height=340, title=title)
    for ax in ("xaxis", "xaxis2"):
        fig.layout[ax].range = [0, max(total, 1)]
    return _view(fig, "tr-ind-live")


def job_figure(records: Sequence[dict[str, Any]], phase_steps: Sequence[float]) -> go.Figure:
    """A finished live job's run(s): the same two panels, its phase change marked."""
    fig = figures.panel_grid(_panels(records, phase_steps, per_seed=True), cols=2, height=340,
                             title="this job")
    return _view(fig, "tr-ind-job")


# ---------------------------------------------------------------------------- sentences


def _interval(s: dict[str, Any], fmt: str = ".0f") -> str:
    if s.get("half") is None:
        return f"{s['mean']:{fmt}}"
    return f"{s['mean']:{fmt}} (95% t interval {s['lo']:{fmt}} to {s['hi']:{fmt}} over {s['n']} seeds)"


def verdict_sentence(summary: dict[str, Any]) -> str:
    """Whether an induction head formed, by the rule, in how many seeds, with the losses at the end."""
    n, k = summary["n"], summary["n_formed"]
    f, s = summary["loss_first_end"]["mean"], summary["loss_second_end"]["mean"]
    how = ("In every one of the" if k == n else "In none of the" if k == 0 else f"In {k} of the")
    verb = "formed" if k else "formed by the rule"
    return (f"{how} {n} seeds an induction head {verb}: at the end the loss on the second copy is {s:.3f} "
            f"nats against {f:.2f} on the first (ln {VOCAB} = {LN_V:.2f}: the first copy cannot be "
            f"predicted). Rule: the induction head's score after the phase change reaches {FORMED_SCORE:g} "
            "and the second copy's loss at the end is below half the first copy's.")


def phase_sentence(summary: dict[str, Any]) -> str:
    """Where the phase change came, over seeds and per seed."""
    per = ", ".join(f"seed {s['seed']}: step {s['phase_step']:g}" for s in summary["seeds"])
    spans = ", ".join(f"{s['begins']}–{s['ends']}" if s["begins"] is not None and s["ends"] is not None
                      else "no fall" for s in summary["seeds"])
    return (f"The phase change (the middle of the steepest fall of the second copy's loss between two "
            f"evaluation points) came at step {_interval(summary['phase_step'])}; {per}. The fall from 10% "
            f"to 90% of its whole took steps {spans}.")


def scores_sentence(summary: dict[str, Any], T: int) -> str:
    """The two heads' scores before and after the phase change, mean over seeds, beside those of a head that
    spreads its weight evenly (copies of ``T`` tokens)."""
    u_ind, u_prev = uniform_scores(T)
    ib, ia = summary["ind_before"], summary["ind_after"]
    pb, pa = summary["prev_before"], summary["prev_after"]
    rose = "rose" if ia["mean"] > ib["mean"] else "did not rise"
    return (f"Before the phase change the induction head put {ib['mean']:.3f} of its weight on the stripe "
            f"T − 1 below the diagonal and after it {_interval(ia, '.3f')}: it {rose}. The previous-token "
            f"head put {pb['mean']:.3f} on the key just before the query before, and {_interval(pa, '.3f')} "
            f"after (a head spreading its weight evenly over the keys it sees scores {u_ind:.3f} and "
            f"{u_prev:.3f}).")


def scale_sentence(header: dict[str, Any]) -> str:
    """The run's size and where it was made, from the result file's header."""
    c = header.get("config") or {}
    return (f"Scale: 2 layers × {c.get('n_head', '?')} head, attention only, width {c.get('d_model', '?')}, "
            f"sequences of {c.get('context', '?')} tokens (two copies; in training the copy's length varies, "
            f"so that no head can find the earlier copy by position alone) over a vocabulary of {VOCAB}, "
            f"batch {c.get('batch', '?')}, {c.get('steps', '?')} Adam steps at lr {c.get('lr', '?')}: far "
            "smaller than Olsson et al.'s models, and without their MLPs or natural text; the mechanism, not "
            "the size, is what is compared.")


def live_outcome(rec: dict[str, Any], s: dict[str, Any]) -> str:
    """One finished live run in a sentence (``s``: its :func:`~attncore.training.induction.seed_summary`)."""
    stop = " (stopped early)" if rec.get("cancelled") else ""
    head = "an induction head formed" if s["formed"] else "no induction head formed by the rule"
    return (f"Seed {s['seed']}{stop}, {rec.get('wall_s', 0):.0f} s: {head}; the second copy's loss went from "
            f"{s['loss_second_start']:.2f} to {s['loss_second_end']:.3f} nats (first copy "
            f"{s['loss_first_end']:.2f}), "
            f"the steepest fall at step {s['phase_step']:g}; the induction score {s['ind_before']:.3f} → "
            f"{s['ind_after']:.3f}.")


def tour_lesson(summary: dict[str, Any]) -> str:
    """The Tour step's lesson: the shipped run's phase change, losses and induction score, over its seeds."""
    n, k = summary["n"], summary["n_formed"]
    how = f"all {n}" if k == n else f"{k} of {n}"
    ib, ia = summary["ind_before"]["mean"], summary["ind_after"]["mean"]
    start = float(np.mean([s["loss_second_start"] for s in summary["seeds"]]))
    first, end = summary["loss_first_end"]["mean"], summary["loss_second_end"]["mean"]
    # from the last evaluation point before 10% of the fall to the first at 90%: the maps' two points
    spans = [s["after_step"] - s["before_step"] for s in summary["seeds"] if s["ends"] is not None]
    last = max(s["last_step"] for s in summary["seeds"])
    head = (f"In {how} seeds a 2-layer attention-only model learned to copy a repeated random sequence" if k
            else f"In none of {n} seeds did a 2-layer attention-only model learn, by the rule, to copy a "
                 "repeated random sequence")
    fast = (f" It made 10% to 90% of that fall within {max(spans)} of its {last} steps (the most of any "
            "seed, between the evaluation points around it)." if spans else "")
    return (f"{head}: the second copy's loss fell from {start:.2f} to {end:.3f} nats, steepest at step "
            f"{_interval(summary['phase_step'])}, while the first copy's stayed at {first:.2f} "
            f"(ln {VOCAB} = {LN_V:.2f}).{fast} The induction head's weight on the stripe went from {ib:.3f} "
            f"before to {ia:.3f} after.")
