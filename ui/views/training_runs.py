"""Training lab: a training run's record as the page shows it: its duration and outcome, the calibration
of its estimate, its live loss curves, the comparison of runs and the table of runs
(live runs from :mod:`ui.jobs`).

Pure functions of run records; no streamlit calls.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from attncore.training.train import best_val
from ui import figures
from ui.figures import PALETTE, Curve
from ui.job_cost import Estimate
from ui.views.training import finite_points

__all__ = [
    "calibration_text",
    "compare_figure",
    "duration",
    "live_figure",
    "outcome",
    "record_name",
    "runs_table",
    "shown_corpus",
    "stop_note",
]


def duration(seconds: float) -> str:
    """A time estimate in words: 'under 1 s', 'about 9 s', 'about 2.5 min'."""
    if seconds < 1:
        return "under 1 s"
    return f"about {seconds:.0f} s" if seconds < 90 else f"about {seconds / 60:.1f} min"


def _secs(x: float) -> str:
    return f"{x * 1000:.0f} ms" if x < 1 else f"{x:.1f} s"


def calibration_text(est: Estimate) -> str:
    """Where an estimate comes from: the times measured on this server, per attention path."""
    parts = []
    for c in est.calibrations:
        path = "torch's fused attention" if c.key[7] else "attncore's materialised attention"
        parts.append(f"{_secs(c.step_s)} per step, {_secs(c.eval_s)} per evaluation and {_secs(c.setup_s)} "
                     f"to set up a run with {path}")
    return ("measured on this server by timing a few real steps of this model size: " + "; ".join(parts)
            + ". The machine's load changes it.")


def outcome(rec: dict[str, Any]) -> str:
    """One line per finished run (markdown; its label is made by the app, not typed): how it ended,
    and the best validation point when it was not the last one; never a NaN."""
    steps = len(rec["batch_loss"])
    head = f"**{rec['label']}**: "
    if rec.get("diverged_at") is not None:
        tail = f"diverged at step {rec['diverged_at']}"
        if rec.get("final_val_loss") is not None:
            tail += f"; the last validation loss before that was {rec['final_val_loss']:.3f}"
        return head + tail + "."
    parts = []
    if rec.get("final_train_loss") is not None:
        parts.append(f"final training loss {rec['final_train_loss']:.3f}")
    if rec.get("final_val_loss") is not None:
        parts.append(f"validation {rec['final_val_loss']:.3f}")
        best, at = best_val(rec.get("steps") or [], rec.get("val_loss") or [])
        if best is not None and at != (rec.get("steps") or [None])[-1]:
            parts.append(f"best validation {best:.3f} at step {at}")
    stopped = " (stopped)" if rec.get("cancelled") else ""
    return (head + ", ".join(parts or ["no step finished"]) + f" after {steps} steps{stopped}, "
            f"{rec['tokens_per_s']:,.0f} tokens/s on {rec['device']}.")


def record_name(rec: dict[str, Any]) -> str:
    """A unique, readable name for a kept run."""
    c = rec["config"]
    when = str(rec.get("created_utc", ""))[11:16]
    return (f"{rec['label']} · {c['n_layer']}×{c['d_model']} · {len(rec['batch_loss'])} steps · {when} UTC · "
            f"{rec['id'][-8:]}")


def stop_note(rec: dict[str, Any]) -> str:
    """' (diverged at step k)' or ' (stopped at step k)' behind a run's name in a legend; '' for a run that
    finished."""
    if rec.get("diverged_at") is not None:
        return f" (diverged at step {rec['diverged_at']})"
    if rec.get("cancelled"):
        return f" (stopped at step {len(rec.get('batch_loss') or [])})"
    return ""


def live_figure(batch_loss: Sequence[float], eval_steps: Sequence[int], eval_loss: Sequence[float], *,
                title: str, total: int | None = None) -> go.Figure:
    """The running job: every step's batch loss and the validation points so far."""
    x, y = finite_points(np.arange(1, len(batch_loss) + 1), batch_loss)
    curves = [Curve("training batch loss", x, y, color=PALETTE[0],
                    extra={"mode": "lines", "line": {"color": PALETTE[0], "width": 1.5}})]
    ex, ey = finite_points(eval_steps, eval_loss)
    curves.append(Curve("validation loss", ex, ey, color=PALETTE[1]))
    fig = figures.line_chart(curves, title=title, x_title="step", y_title="loss (nats/char)", height=340)
    if total:
        fig.update_xaxes(range=[0, total])
    figures.legend_below(fig)
    return fig.update_layout(meta={"view": "tr-live"})


def compare_figure(records: Sequence[dict[str, Any]], *, view: str = "tr-compare",
                   title: str = "validation loss of the chosen runs") -> go.Figure:
    """Validation loss against step, one line per kept run; a diverged run's line stops where it did."""
    curves = []
    for i, rec in enumerate(records):
        x, y = finite_points(rec["steps"], rec["val_loss"])
        name = record_name(rec) if view == "tr-compare" else rec["label"]
        curves.append(Curve(name + stop_note(rec), x, y, color=PALETTE[i % len(PALETTE)]))
    fig = figures.line_chart(curves, title=title, x_title="step", y_title="validation loss (nats/char)",
                             height=380)
    figures.legend_below(fig)
    return fig.update_layout(meta={"view": view})


OTHER_UPLOAD = "another session's upload"
UNMARKED = "not shown (kept before uploads were marked)"


def shown_corpus(rec: dict[str, Any], own_jobs: Collection[str] | None) -> str:
    """The corpus name a session may see for a kept run: its own runs' and the server's corpora (built in,
    a corpus folder) by name; another session's upload, or a run kept before uploads were marked, not
    (an upload's name is its owner's: issue 32). ``own_jobs`` None: every name (a script, no session)."""
    name = str(rec.get("corpus", ""))
    if own_jobs is None or rec.get("job") in own_jobs or rec.get("corpus_kind") == "server":
        return name
    return OTHER_UPLOAD if rec.get("corpus_kind") == "upload" else UNMARKED


def runs_table(records: Sequence[dict[str, Any]], own_jobs: Collection[str] | None = None) -> pd.DataFrame:
    """One row per kept run: what it was and how it ended (the corpus as :func:`shown_corpus` says)."""
    rows = []
    for rec in records:
        c = rec["config"]
        rows.append({
            "run": record_name(rec), "variant": c["variant"], "lr": c["lr"], "layers": c["n_layer"],
            "heads": c["n_head"], "d_model": c["d_model"], "context": c["context"], "batch": c["batch"],
            "steps run": len(rec["batch_loss"]), "steps asked": c["steps"],
            "final train loss": rec.get("final_train_loss"), "final val loss": rec.get("final_val_loss"),
            "best val loss": best_val(rec.get("steps") or [], rec.get("val_loss") or [])[0],
            "best val step": best_val(rec.get("steps") or [], rec.get("val_loss") or [])[1],
            "diverged at": "" if rec.get("diverged_at") is None else rec["diverged_at"],
            "stopped": bool(rec.get("cancelled")), "tokens/s": round(float(rec.get("tokens_per_s", 0.0))),
            "device": rec.get("device", ""), "corpus": shown_corpus(rec, own_jobs),
        })
    return pd.DataFrame(rows)
