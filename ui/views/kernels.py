"""Kernels page: time and memory against T, the backend table, and the common claims about
FlashAttention beside this machine's numbers. Results of :mod:`attncore.kernels` in, DataFrame /
go.Figure out."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from attncore.kernels import BACKENDS, BASELINES, SizeResult
from ui.figures import PALETTE, Curve, legend_below, line_chart, log_ticks

__all__ = ["LABELS", "TABLE_LEGEND", "backend_frame", "claims_frame", "fmt", "fmt_err", "growth_exponent",
           "guide_caption", "memory_figure", "table_frame", "time_figure"]

MIB = float(1 << 20)
LABELS: dict[str, str] = {
    "flash": "flash (FLASH_ATTENTION)",
    "efficient": "memory-efficient (EFFICIENT_ATTENTION)",
    "cudnn": "cuDNN (CUDNN_ATTENTION)",
    "math": "math (MATH)",
    "default": "default dispatch",
    "attncore": "attncore.attention (with weights)",
    "notebook": "notebook softmax(QKᵀ)V",
}
COLORS: dict[str, str] = {"flash": PALETTE[0], "efficient": PALETTE[2], "cudnn": PALETTE[3],
                          "math": PALETTE[5], "default": PALETTE[4], "attncore": PALETTE[1],
                          "notebook": PALETTE[7]}
GUIDE = "#888888"
ORDER = (*BACKENDS, "default", *BASELINES)


def backend_frame(sizes: Sequence[SizeResult]) -> pd.DataFrame:
    """One row per (T, backend): status, torch's reason, default choice, time, memory, errors.

    Columns: ``T``, ``backend`` (the attncore.kernels name), ``label``, ``status``,
    ``accepted`` (yes / no / not tried), ``default`` (yes on the backend the default dispatch
    runs; ``→ name`` on the default row), ``time_ms``, ``x_default`` (time / the default
    dispatch's time), ``peak_MiB``, ``max_err``, ``masked_rows_err``, ``nonfinite_rows``,
    ``rows_compared``, ``reason``.
    """
    recs = []
    for s in sizes:
        base = s.row("default").seconds
        for r in s.rows:
            accepted = {True: "yes", False: "no", None: "not tried"}[r.accepted]
            default = "yes" if r.chosen else ""
            if r.name == "default":
                default = f"→ {s.default_backend}" if s.default_backend else "unknown"
            recs.append({
                "T": s.L, "backend": r.name, "label": LABELS[r.name], "status": r.status,
                "accepted": accepted, "default": default,
                "time_ms": None if r.seconds is None else r.seconds * 1e3,
                "x_default": (r.seconds / base) if (r.seconds is not None and base) else None,
                "peak_MiB": None if r.peak_bytes is None else r.peak_bytes / MIB,
                "max_err": r.max_err, "masked_rows_err": r.masked_err,
                "nonfinite_rows": r.nonfinite_rows, "rows_compared": r.rows_compared,
                "reason": r.reason,
            })
    cols = ["T", "backend", "label", "status", "accepted", "default", "time_ms", "x_default", "peak_MiB",
            "max_err", "masked_rows_err", "nonfinite_rows", "rows_compared", "reason"]
    return pd.DataFrame.from_records(recs, columns=cols).astype(
        {"time_ms": float, "x_default": float, "peak_MiB": float, "max_err": float,
         "masked_rows_err": float})


# What a table cell says where a backend has no number (TABLE_LEGEND explains each).
NOT_RUN = {"refused": "refused", "out of memory": "out of memory", "failed": "failed"}
DASH = "—"
TABLE_COLUMNS = ["T", "label", "accepted", "default", "time_ms", "x_default", "peak_MiB", "max_err",
                 "masked_rows_err", "nonfinite_rows", "reason"]
TABLE_LEGEND = ("**refused**: torch would not run this backend for this call (its reason is in the last "
                "column); **skipped**: not run, its L × S matrices would need the memory shown in the time "
                "column, more than the budget; "
                "**not measured**: “Measure peak memory” is off; **—**: nothing to report (no query row is "
                "fully masked, or dropout makes every output random so no error is given).")


def _gib(n: float) -> str:
    return f"{n / (1 << 30):.3g} GiB" if n >= (1 << 30) else f"{n / MIB:.3g} MiB"


def fmt_err(x: float) -> str:
    """An error as the table shows it (NaN where the output itself is NaN)."""
    return "NaN" if math.isnan(x) else f"{x:.2e}"


def table_frame(sizes: Sequence[SizeResult]) -> pd.DataFrame:
    """The backend table as shown: every cell a string, a word where there is no number.

    Same rows and numbers as :func:`backend_frame` (formatted: times and memory to three
    significant digits, errors as ``%.2e``); a backend that did not run says ``refused``,
    ``skipped`` (the time column: ``skipped: needs ~X``, the budget estimate of its matrices),
    ``out of memory`` or ``failed`` in each number column; ``not measured`` for memory when it was off; ``—``
    where nothing applies (see :data:`TABLE_LEGEND`).
    Columns: ``T``, ``label``, ``accepted``, ``default``, ``time_ms``, ``x_default``,
    ``peak_MiB``, ``max_err``, ``masked_rows_err``, ``nonfinite_rows``, ``reason``.
    """
    df = backend_frame(sizes)
    recs = []
    for s in sizes:
        for r in s.rows:
            row = df[(df["T"] == s.L) & (df["backend"] == r.name)].iloc[0]
            if r.status == "skipped":
                gone: str | None = ("skipped: needs ~" + _gib(r.estimated_bytes)
                                    if r.estimated_bytes is not None else "skipped")
            else:
                gone = NOT_RUN.get(r.status)
            short = "skipped" if r.status == "skipped" else gone  # the time column says how much

            x = row["x_default"]
            recs.append({
                "T": s.L, "label": row["label"], "accepted": row["accepted"], "default": row["default"],
                "time_ms": gone or (DASH if r.seconds is None else fmt(r.seconds * 1e3)),
                "x_default": short or (DASH if math.isnan(x) else f"{x:.2f}"),
                "peak_MiB": short or ("not measured" if r.peak_bytes is None else fmt(r.peak_bytes / MIB)),
                "max_err": short or (DASH if r.max_err is None else fmt_err(r.max_err)),
                "masked_rows_err": short or (DASH if r.masked_err is None else fmt_err(r.masked_err)),
                "nonfinite_rows": short or (str(r.nonfinite_rows) if r.rows_compared else DASH),
                "reason": r.reason,
            })
    return pd.DataFrame.from_records(recs, columns=TABLE_COLUMNS)


def _series(df: pd.DataFrame, column: str) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    out: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for name in ORDER:
        sub = df[(df.backend == name) & df[column].notna() & (df[column] > 0)].sort_values("T")
        if len(sub):
            out[name] = (sub["T"].to_numpy(np.float64), sub[column].to_numpy(np.float64))
    return out


def _guides(xs: np.ndarray, anchors: dict[str, tuple[float, float]]) -> list[Curve]:
    """Dashed T^2 and T lines through the given anchor points (x0, y0)."""
    curves = []
    for name, power, dash in (("O(T²)", 2, "dash"), ("O(T)", 1, "dot")):
        if name not in anchors:
            continue
        x0, y0 = anchors[name]
        ys = y0 * (xs / x0) ** power
        curves.append(Curve(f"{name} guide", xs, ys, theory=True, color=GUIDE,
                            hover=f"{name} guide<br>T %{{x:.0f}}<br>%{{y:.4g}}",
                            extra={"line": {"color": GUIDE, "dash": dash, "width": 1.5}}))
    return curves


def _chart(df: pd.DataFrame, column: str, y_title: str, view: str, anchor_t2: str, anchor_t1: str,
           unit: str) -> go.Figure:
    series = _series(df, column)
    curves = [Curve(LABELS[n], x, y, color=COLORS[n],
                    hover=f"{LABELS[n]}<br>T %{{x:.0f}}<br>%{{y:.4g}} {unit}")
              for n, (x, y) in series.items()]
    xs = np.unique(df["T"].to_numpy(np.float64))
    anchors, through = {}, {}
    for key, pick in (("O(T²)", anchor_t2), ("O(T)", anchor_t1)):
        for n in (pick, "default", *series):
            if n in series:
                anchors[key] = (float(series[n][0][0]), float(series[n][1][0]))
                through[key] = n
                break
    fig = line_chart([*curves, *_guides(xs, anchors)], x_title="T (= L = S)", y_title=y_title,
                     log_x=True, log_y=True, height=400)
    fig.update_xaxes(tickvals=list(xs), ticktext=[f"{int(t)}" for t in xs])
    log_ticks(fig)
    fig.update_layout(meta={"view": view, "anchors": {k: list(v) for k, v in anchors.items()},
                            "through": through})
    return legend_below(fig)


def time_figure(df: pd.DataFrame) -> go.Figure:
    """Median time per call against T, log-log; O(T²) and O(T) guides through the default's first point."""
    return _chart(df, "time_ms", "time per call (ms)", "kernels_time", "default", "default", "ms")


def memory_figure(df: pd.DataFrame) -> go.Figure:
    """Peak extra memory against T, log-log; O(T²) through math's first point, O(T) through the default's."""
    return _chart(df, "peak_MiB", "peak extra memory (MiB)", "kernels_memory", "math", "default", "MiB")


def guide_caption(time_fig: go.Figure, memory_fig: go.Figure) -> str:
    """Which curve's first point each guide line passes through (read from the figures' meta)."""
    parts = []
    for what, fig in (("time", time_fig), ("memory", memory_fig)):
        through = (fig.layout.meta or {}).get("through", {})
        lines = [f"{'T²' if k == 'O(T²)' else 'T'} through {LABELS[n]}'s first point"
                 for k, n in through.items()]
        if lines:
            parts.append(f"{what}: " + ", ".join(lines))
    return ("Dashed: a T² line; dotted: a T line (" + "; ".join(parts) + "). Every path does O(T²) "
            "work, so at large T every time curve approaches the T² slope; memory is what separates "
            "fused from materialised.")


def growth_exponent(df: pd.DataFrame, backend: str, column: str) -> float | None:
    """Least-squares slope of log(column) against log(T) over the backend's positive points (≥ 2 T)."""
    x, y = _series(df, column).get(backend, (np.empty(0), np.empty(0)))
    if len(x) < 2:
        return None
    return float(np.polyfit(np.log(x), np.log(y), 1)[0])


def _largest_common(df: pd.DataFrame, a: str, b: str, column: str) -> tuple[int, float, float] | None:
    pa = df[(df.backend == a) & df[column].notna()].set_index("T")[column]
    pb = df[(df.backend == b) & df[column].notna()].set_index("T")[column]
    common = sorted(set(pa.index) & set(pb.index))
    if not common:
        return None
    t = common[-1]
    return int(t), float(pa[t]), float(pb[t])


def fmt(x: float) -> str:
    """Three significant digits, no exponent for everyday sizes."""
    return f"{x:.3g}"


def claims_frame(df: pd.DataFrame, chosen: Sequence[tuple[int, str | None]]) -> pd.DataFrame:
    """What is commonly said of SDPA and FlashAttention (Dao et al. 2022) beside this machine's
    numbers (``measured`` is built from ``df`` and ``chosen``, the (T, backend) pairs of the
    default dispatch).

    Columns: ``topic``, ``claim``, ``measured``.
    """
    names = sorted({c for _, c in chosen if c})
    if len(names) == 1 and all(c for _, c in chosen):
        picked = f"the default dispatch ran {LABELS[names[0]]} at every T of this sweep."
    else:
        picked = "the default dispatch ran " + "; ".join(
            f"{LABELS[c] if c else 'a backend it could not name'} at T = {t}" for t, c in chosen) + "."
    rows = [{"topic": "default backend",
             "claim": "“Uses FlashAttention under the hood”; FlashAttention “is now the default "
                           "backend in PyTorch's F.scaled_dot_product_attention”.",
             "measured": picked}]
    speed = []
    for name in ("math", "notebook", "attncore"):
        hit = _largest_common(df, name, "default", "time_ms")
        if hit is not None:
            t, slow, fast = hit
            speed.append(f"{LABELS[name]} took {fmt(slow)} ms, the default dispatch {fmt(fast)} ms at "
                         f"T = {t}: {fmt(slow / fast)}× as long")
    rows.append({"topic": "speed",
                 "claim": "FlashAttention gives “2-4x wall-clock speedups”.",
                 "measured": "; ".join(speed) + "." if speed else
                 "no materialised path ran beside the default dispatch (all skipped by the budget)."})
    mem = []
    for name in ("default", "math"):
        a = growth_exponent(df, name, "peak_MiB")
        if a is not None:
            mem.append(f"{LABELS[name]}: peak memory grows as T^{a:.2f} (least-squares slope on log-log)")
    hit = _largest_common(df, "math", "default", "peak_MiB")
    if hit is not None:
        t, big, small = hit
        mem.append(f"at T = {t} math needed {fmt(big)} MiB, the default dispatch {fmt(small)} MiB "
                   f"({fmt(big / small)}×)")
    rows.append({"topic": "memory",
                 "claim": "FlashAttention reduces memory “from O(T^2) to O(T)”.",
                 "measured": "; ".join(mem) + "." if mem else
                 "memory was not measured at two or more T for these paths."})
    return pd.DataFrame(rows, columns=["topic", "claim", "measured"])
