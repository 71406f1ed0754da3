"""Kernels page: time and memory against T, the backend table, and the common claims about
FlashAttention beside this machine's numbers with their verdicts. Results of :mod:`attncore.kernels`
in, DataFrame / go.Figure / text out."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import torch

from attncore.kernels import (
    BACKENDS,
    BASELINES,
    LABELS,
    Claim,
    KernelSpec,
    SizeResult,
    fmt_ratio,
    growth_fit,
    noise_flags,
    paired_ratio,
)
from attncore.kernels.claims import FIT_SIZES, SOURCE, fmt3
from attncore.kernels.cost import call_flops, full_flops
from ui.figures import PALETTE, Curve, legend_below, legend_key, line_chart, log_ticks

__all__ = ["LABELS", "ONLINE_SOFTMAX", "SCORE_MATRICES", "TABLE_LEGEND", "backend_frame", "claims_caption",
           "claims_frame", "fmt", "fmt_err", "guide_caption", "load_sentence", "mark_partial",
           "memory_figure", "partial_note", "table_caption", "table_frame", "time_figure", "work_sentence",
           "TIME_RANGE_HELP", "X_RANGE_HELP"]

MIB = float(1 << 20)
COLORS: dict[str, str] = {"flash": PALETTE[0], "efficient": PALETTE[2], "cudnn": PALETTE[3],
                          "math": PALETTE[5], "default": PALETTE[4], "attncore": PALETTE[1],
                          "notebook": PALETTE[7]}
GUIDE = "#888888"
ORDER = (*BACKENDS, "default", *BASELINES)
NOISE = "not larger than a smaller T's (noise)"

# The key formula: the materialised path keeps the scores and the weights, two (B, H, L, S) matrices.
SCORE_MATRICES = (r"\text{materialised: } \underbrace{2\,B\,H\,L\,S}_{\text{scores and weights}}"
                  r"\ \text{numbers}\qquad\text{fused: } \underbrace{B\,H\,L\,E}_{\text{output}}"
                  r"+\ \text{one tile per thread}")
# The online softmax, every step (attncore.kernels.online_softmax_attention runs exactly these).
ONLINE_SOFTMAX = (r"m_i \leftarrow \max(m_i, \max_j s_{ij}),\quad "
                  r"\ell_i \leftarrow \ell_i e^{m_i^{\text{old}}-m_i}+\sum_j e^{s_{ij}-m_i},\quad "
                  r"o_i \leftarrow o_i e^{m_i^{\text{old}}-m_i}+\sum_j e^{s_{ij}-m_i} v_j;"
                  r"\quad\text{after the last block: } o_i \leftarrow o_i / \ell_i")


def fmt(x: float) -> str:
    """Three significant digits, no exponent for everyday sizes (:func:`attncore.kernels.claims.fmt3`)."""
    return fmt3(x)


def fmt_err(x: float) -> str:
    """An error as the table shows it (NaN where the output itself is NaN)."""
    return "NaN" if math.isnan(x) else f"{x:.2e}"


def backend_frame(sizes: Sequence[SizeResult]) -> pd.DataFrame:
    """One row per (T, backend): status, torch's reason, default choice, time, memory, errors.

    Columns: ``T``, ``backend`` (the attncore.kernels name), ``label``, ``status``,
    ``accepted`` (yes / no / not tried), ``default`` (yes on the backend the default dispatch
    runs; ``→ name`` on the default row), ``time_ms`` (median of the rounds), ``time_lo_ms`` /
    ``time_hi_ms`` (the median's interval, :func:`attncore.kernels.results.spread`),
    ``rounds``, ``noise_of`` (the smaller T whose median time is at
    least this one's, NaN when the time grew), ``x_default`` (median of the per-round ratios to the
    default dispatch's time) with ``x_lo`` / ``x_hi``, ``gflop`` (the flops this path does per
    call, in 1e9), ``gflop_s`` (``gflop`` / median time), ``peak_MiB``, ``max_err``,
    ``masked_rows_err``, ``nonfinite_rows``, ``rows_compared``, ``reason``.
    """
    recs = []
    for s in sizes:
        base = s.row("default")
        for r in s.rows:
            accepted = {True: "yes", False: "no", None: "not tried"}[r.accepted]
            default = "yes" if r.chosen else ""
            if r.name == "default":
                default = f"→ {s.default_backend}" if s.default_backend else "unknown"
            t, x = r.time, paired_ratio(r, base)
            recs.append({
                "T": s.L, "backend": r.name, "label": LABELS[r.name], "status": r.status,
                "accepted": accepted, "default": default,
                "time_ms": None if t is None else t.median * 1e3,
                "time_lo_ms": None if t is None else t.lo * 1e3,
                "time_hi_ms": None if t is None else t.hi * 1e3,
                "rounds": r.rounds,
                "x_default": None if x is None else x.median,
                "x_lo": None if x is None else x.lo, "x_hi": None if x is None else x.hi,
                "gflop": None if r.flops is None else r.flops / 1e9,
                "gflop_s": (None if (r.flops is None or t is None or t.median <= 0)
                            else r.flops / 1e9 / t.median),
                "peak_MiB": None if r.peak_bytes is None else r.peak_bytes / MIB,
                "max_err": r.max_err, "masked_rows_err": r.masked_err,
                "nonfinite_rows": r.nonfinite_rows, "rows_compared": r.rows_compared,
                "reason": r.reason,
            })
    cols = ["T", "backend", "label", "status", "accepted", "default", "time_ms", "time_lo_ms", "time_hi_ms",
            "rounds", "noise_of", "x_default", "x_lo", "x_hi", "gflop", "gflop_s", "peak_MiB", "max_err",
            "masked_rows_err", "nonfinite_rows", "rows_compared", "reason"]
    df = pd.DataFrame.from_records(recs, columns=cols).astype(
        {c: float for c in ("time_ms", "time_lo_ms", "time_hi_ms", "noise_of", "x_default", "x_lo", "x_hi",
                            "gflop", "gflop_s", "peak_MiB", "max_err", "masked_rows_err")})
    for name in df["backend"].unique():
        sub = df[(df.backend == name) & df.time_ms.notna()]
        if len(sub):
            flags = noise_flags(sub["T"].tolist(), sub["time_ms"].tolist())
            df.loc[sub.index, "noise_of"] = [np.nan if f is None else f for f in flags]
    return df


# What a table cell says where a backend has no number (TABLE_LEGEND explains each).
NOT_RUN = {"refused": "refused", "out of memory": "out of memory", "failed": "failed"}
DASH = "—"
TABLE_COLUMNS = ["T", "label", "accepted", "default", "time_ms", "time_range", "x_default", "x_range",
                 "gflop_s", "peak_MiB", "max_err", "masked_rows_err", "nonfinite_rows", "reason"]
TABLE_LEGEND = ("**refused**: torch would not run this backend for this call (its reason is in the last "
                "column); **skipped**: not run, its L × S matrices would need the memory shown in the time "
                "column, more than the budget; "
                "**not measured**: “Measure peak memory” is off; **—**: nothing to report (no query row is "
                "fully masked, or dropout makes every output random so no error is given). "
                "**noise**: the median time is not larger than at a smaller T (named), so it shows no trend.")


# Column help: the ranges are the median's order-statistic interval (results.spread), min–max only
# below 9 rounds; the table's caption says which and how often it holds the median.
TIME_RANGE_HELP = ("interval of the rounds' median: their fastest and slowest, or from 9 rounds the 2nd "
                   "fastest and the 2nd slowest (the caption says which, and its coverage)")
X_RANGE_HELP = "interval of the per-round ratios' median, by the same order statistics as the time's range"


def _span(lo: str, hi: str) -> str:
    """``lo–hi``, or one number where both ends print alike (as the claims write a ratio's interval)."""
    return lo if lo == hi else f"{lo}–{hi}"


def _gib(n: float) -> str:
    return f"{n / (1 << 30):.3g} GiB" if n >= (1 << 30) else f"{n / MIB:.3g} MiB"


def table_frame(sizes: Sequence[SizeResult], frame: pd.DataFrame | None = None) -> pd.DataFrame:
    """The backend table as shown: every cell a string, a word where there is no number.

    Same rows and numbers as :func:`backend_frame` (formatted: times, rates and memory to three
    significant digits, ratios to two, errors as ``%.2e``); ``time_range`` is the interval of the
    rounds' median (:func:`attncore.kernels.results.spread`: min–max below 9 rounds, then order
    statistics; ``· noise (≤ T = t)`` added where the time did not grow), ``x_range`` the same
    interval of the per-round ratios. A backend that did not run says ``refused``, ``skipped``
    (the time column:
    ``skipped: needs ~X``, the budget estimate of its matrices), ``out of memory`` or ``failed``
    in each number column; ``not measured`` for memory when it was off; ``—`` where nothing
    applies (see :data:`TABLE_LEGEND`). ``frame``: :func:`backend_frame` of ``sizes`` when the caller
    has it already (it is computed otherwise).
    Columns: :data:`TABLE_COLUMNS`.
    """
    df = (backend_frame(sizes) if frame is None else frame).set_index(["T", "backend"])
    recs = []
    for s in sizes:
        for r in s.rows:
            row = df.loc[(s.L, r.name)]
            if r.status == "skipped":
                gone: str | None = ("skipped: needs ~" + _gib(r.estimated_bytes)
                                    if r.estimated_bytes is not None else "skipped")
            else:
                gone = NOT_RUN.get(r.status)
            short = "skipped" if r.status == "skipped" else gone  # the time column says how much
            x, t = row["x_default"], r.time
            trange = DASH if t is None or t.n < 2 else f"{fmt(t.lo * 1e3)}–{fmt(t.hi * 1e3)}"
            if not math.isnan(row["noise_of"]):
                trange += f" · noise (≤ T = {int(row['noise_of'])})"
            recs.append({
                "T": s.L, "label": row["label"], "accepted": row["accepted"], "default": row["default"],
                "time_ms": gone or (DASH if t is None else fmt(t.median * 1e3)),
                "time_range": short or trange,
                "x_default": short or (DASH if math.isnan(x) else fmt_ratio(x)),
                "x_range": short or (DASH if math.isnan(x) or row["x_lo"] == row["x_hi"]
                                     else _span(fmt_ratio(row["x_lo"]), fmt_ratio(row["x_hi"]))),
                "gflop_s": short or (DASH if math.isnan(row["gflop_s"]) else fmt(row["gflop_s"])),
                "peak_MiB": short or ("not measured" if r.peak_bytes is None else fmt(r.peak_bytes / MIB)),
                "max_err": short or (DASH if r.max_err is None else fmt_err(r.max_err)),
                "masked_rows_err": short or (DASH if r.masked_err is None else fmt_err(r.masked_err)),
                "nonfinite_rows": short or (str(r.nonfinite_rows) if r.rows_compared else DASH),
                "reason": r.reason,
            })
    return pd.DataFrame.from_records(recs, columns=TABLE_COLUMNS)


def _guide(name: str, power: int, fit_curve: str, pts: tuple[np.ndarray, np.ndarray, np.ndarray],
           xs: np.ndarray, dash: str) -> tuple[Curve, dict] | None:
    ts, ys, among = pts
    fit = growth_fit(ts, ys, slope=power, among=among)
    if fit is None:
        return None
    curve = Curve(f"{name} guide", xs, fit.at(xs), theory=True, color=GUIDE,
                  hover=f"{name} guide<br>T %{{x:.0f}}<br>%{{y:.4g}}",
                  extra={"line": {"color": GUIDE, "dash": dash, "width": 1.5}})
    return curve, {"curve": fit_curve, "ts": [int(t) for t in fit.ts], "coef": fit.coef, "power": power}


def _chart(df: pd.DataFrame, column: str, y_title: str, view: str, fit_t2: str, fit_t1: str, unit: str,
           spread: bool) -> go.Figure:
    """Measured curves (the rounds' range as error bars where ``spread``; noise points hollow, off the
    line) and T², T guides fitted over the largest sizes of the named curves."""
    curves: list[Curve] = []
    trusted: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
    any_noise = False
    for name in ORDER:
        sub = df[(df.backend == name) & df[column].notna() & (df[column] > 0)].sort_values("T")
        if not len(sub):
            continue
        noisy = sub["noise_of"].notna().to_numpy() if spread else np.zeros(len(sub), bool)
        hover = f"{LABELS[name]}<br>T %{{x:.0f}}<br>%{{y:.4g}} {unit}"
        for part, pts in (("", sub[~noisy]), ("noise", sub[noisy])):
            if not len(pts):
                continue
            x, y = pts["T"].to_numpy(np.float64), pts[column].to_numpy(np.float64)
            extra: dict = {"legendgroup": name}
            if spread:
                extra["error_y"] = {"type": "data", "symmetric": False, "visible": True, "thickness": 1.2,
                                    "array": (pts["time_hi_ms"] - pts[column]).to_numpy(np.float32),
                                    "arrayminus": (pts[column] - pts["time_lo_ms"]).to_numpy(np.float32)}
            if part:
                any_noise = True
                extra.update(mode="markers", showlegend=False,
                             marker={"symbol": "circle-open", "size": 9, "color": COLORS[name]})
                hover = (f"{LABELS[name]}<br>T %{{x:.0f}}<br>%{{y:.4g}} {unit}<br>"
                         "not larger than a smaller T's: noise")
            else:
                trusted[name] = (x, y, sub["T"].to_numpy(np.float64))
            curves.append(Curve(LABELS[name] + (f" · {part}" if part else ""), x, y, color=COLORS[name],
                                hover=hover, extra=extra))
    xs = np.unique(df["T"].to_numpy(np.float64))
    fits: dict[str, dict] = {}
    for key, power, pick, dash in (("O(T²)", 2, fit_t2, "dash"), ("O(T)", 1, fit_t1, "dot")):
        for n in (pick, "default", *trusted):
            if n in trusted:
                made = _guide(key, power, n, trusted[n], xs, dash)
                if made is not None:
                    curves.append(made[0])
                    fits[key] = made[1]
                else:  # every one of its largest sizes is noise: no line rather than one through a small T
                    fits[key] = {"curve": n, "ts": [], "coef": None, "power": power}
                break
    if any_noise:
        curves.append(legend_key(NOISE, dash="none", symbol="circle-open", color=GUIDE))
    fig = line_chart(curves, x_title="T (= L = S)", y_title=y_title, log_x=True, log_y=True, height=400)
    fig.update_xaxes(tickvals=list(xs), ticktext=[f"{int(t)}" for t in xs])
    log_ticks(fig)
    fig.update_layout(meta={"view": view, "fits": fits})
    return legend_below(fig)


def time_figure(df: pd.DataFrame) -> go.Figure:
    """Median time per call against T, log-log, with the rounds' range; T² and T guides fitted to the
    default dispatch's largest sizes (noise points left out)."""
    return _chart(df, "time_ms", "time per call (ms)", "kernels_time", "default", "default", "ms",
                  spread=True)


def mark_partial(fig: go.Figure) -> go.Figure:
    """The time chart while larger sizes are still being timed (``layout.meta.partial``; the page says so
    under the chart, :func:`partial_note`)."""
    return fig.update_layout(meta={**(fig.layout.meta or {}), "partial": True})


def partial_note(done: Sequence[int], rest: Sequence[int]) -> str:
    """The line under a partial time chart: which sizes it shows and which are being timed."""
    return (f"Measuring… the chart shows T = {_and(done)} so far; T = {_and(rest)} "
            f"{'is' if len(rest) == 1 else 'are'} being timed (the largest sizes take most of the time).")


def memory_figure(df: pd.DataFrame) -> go.Figure:
    """Peak extra memory against T, log-log; T² fitted to math's largest sizes, T to the default's."""
    return _chart(df, "peak_MiB", "peak extra memory (MiB)", "kernels_memory", "math", "default", "MiB",
                  spread=False)


def guide_caption(time_fig: go.Figure, memory_fig: go.Figure) -> str:
    """Which curve and which sizes each guide line is fitted to (read from the figures' meta)."""
    parts = []
    for what, fig in (("time", time_fig), ("memory", memory_fig)):
        fits = (fig.layout.meta or {}).get("fits", {})
        lines = []
        for key, f in fits.items():
            ts, name = f["ts"], "T²" if key == "O(T²)" else "T"
            if not ts:
                lines.append(f"no {name} line, {LABELS[f['curve']]}'s largest sizes are all noise")
                continue
            at = f"T = {ts[0]}" if len(ts) == 1 else f"T = {ts[0]}–{ts[-1]}"
            lines.append(f"{name} fitted to {LABELS[f['curve']]} at {at}")
        if lines:
            parts.append(f"{what}: " + ", ".join(lines))
    return ("Dashed: a T² line; dotted: a T line, each fitted (least squares on log-log, slope fixed) over "
            f"the {FIT_SIZES} largest sizes of one curve (noise left out), where fixed costs matter least ("
            + "; ".join(parts) + "). Bars: the interval of the median from the timed rounds (see the "
            "table's caption); hollow: a time not larger than at a smaller T, noise rather than a trend, "
            "left out of the lines and fits. Every path does O(T²) work, so at large T every time curve "
            "approaches the T² slope; memory is what separates fused from materialised.")


def work_sentence(spec: KernelSpec, device: str = "cpu", lengths: Sequence[int] = ()) -> str:
    """What work each path does for this spec (the causal mask changes it).

    Under ``is_causal`` the fused kernel's share of the full flops comes from
    :func:`attncore.kernels.cost.call_flops` at each of ``lengths`` on ``device``: torch's CPU
    flash kernel skips only whole key blocks of 512 above a query block's diagonal, so it does
    all the work up to T = 512; the CUDA kernels do about half at every T.
    """
    if spec.mask != "causal":
        return "Both do the same 4·B·H·L·S·E flops; what changes is memory, below against T on this machine."
    shares: dict[str, list[int]] = {}
    for t in sorted({int(t) for t in lengths}):
        share = call_flops("flash", spec, t, t, device) / full_flops(spec, t, t)
        shares.setdefault(f"{100 * share:.3g}%", []).append(t)
    where = "; ".join(f"{pct} at T = {_and(ts)}" for pct, ts in shares.items())
    if torch.device(device).type == "cpu":
        how = ("torch's CPU flash kernel skips only whole key blocks of 512 that lie above a query block's "
               "diagonal, so of those flops it does " + (where or "all up to T = 512"))
    else:
        how = ("the fused kernels stop each block of queries at the diagonal and do about half of them"
               + (f": {where}" if where else ""))
    return ("Under the causal mask they do not do the same work: the materialised paths compute all "
            f"4·B·H·L·S·E flops and then hide about half; {how}. The table's GFLOP/s counts each path's own "
            "work.")


def _and(ts: Sequence[int]) -> str:
    """``128, 256 and 512``."""
    names = [str(t) for t in ts]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def load_sentence(sizes: Sequence[SizeResult]) -> str:
    """The machine's load while the sizes were timed, as one sentence ('' when not recorded)."""
    loads = [s.load for s in sizes if s.load is not None]
    vals = [v for ld in loads for v in (ld.before, ld.after) if math.isfinite(v)]
    if not loads or not vals:
        return ""
    ld = loads[-1]
    busy = any(x.busy for x in loads)
    tail = ": busy, so every time is inflated and the rounds spread wider." if busy else "."
    return (f"Machine load (1-minute average) {min(vals):.1f}–{max(vals):.1f} on {ld.cpus} CPUs, torch "
            f"threads: {ld.threads}{tail}")


def claims_frame(claims: Sequence[Claim]) -> pd.DataFrame:
    """The claims beside this machine's numbers. Columns: ``topic``, ``claim``, ``measured``,
    ``verdict``, ``caveat``."""
    return pd.DataFrame([{"topic": c.topic, "claim": c.claim, "measured": c.measured, "verdict": c.verdict,
                          "caveat": c.caveat or DASH} for c in claims],
                        columns=["topic", "claim", "measured", "verdict", "caveat"])


def _pct_floor(p: float) -> str:
    """A lower bound as a percentage, rounded down to 0.1 % so "at least" stays true
    (0.9375, the min–max of 5 rounds, is "93.7%", never "94%")."""
    return f"{math.floor(p * 1000 + 1e-9) / 10:g}%"


def table_caption(sizes: Sequence[SizeResult], spec: KernelSpec, memory_note: str, masked_rows: bool,
                  budget: float) -> str:
    """How the table's numbers were measured: one sentence per column group, from the results."""
    spreads = [r.time for s in sizes for r in s.rows if r.status == "ran" and r.time is not None]
    rounds = sorted({sp.n for sp in spreads})
    n = "no" if not rounds else str(rounds[0]) if len(rounds) == 1 else f"{rounds[0]}–{rounds[-1]}"
    kinds = sorted({(sp.n, sp.interval, sp.coverage) for sp in spreads if sp.n > 1})
    ranges = " or ".join(f"{what} of {k} rounds" if what == "min–max" else f"the {what}"
                         for k, what, _ in kinds)
    cover = min((c for _, _, c in kinds), default=None)
    parts = [f"Time: median of {n} interleaved rounds after a warm-up call (a round calls every path once, "
             "in turn, so a drift in the machine's speed hits them alike)"
             + (f"; the range is the interval of the median, {ranges}, which holds it with at least "
                f"{_pct_floor(cover)} probability for independent rounds." if kinds else "."),
             "× default: the median of the per-round ratios to the default dispatch's time; GFLOP/s: each "
             "path's own flops over its median time" + (" (under the causal mask the fused kernels skip the "
                                                        "blocks above the diagonal)." if spec.mask == "causal"
                                                        else " (4·B·H·L·S·E for every path).")]
    load = load_sentence(sizes)
    if load:
        parts.append(load)
    parts.append(f"Memory: {memory_note}.")
    parts.append("Error: against attncore.attention in float64 on the same inputs, over the rows counted in "
                 "the CSV (all rows up to a size, a spread sample beyond).")
    if masked_rows:
        parts.append("The fully masked query rows (reference output 0) are always among them.")
    if spec.dropout > 0:
        parts.append("Dropout makes every output random, so no error is given.")
    parts.append(f"Materialised paths are skipped where their L × S matrices would exceed {_gib(budget)}.")
    return " ".join(parts)


def claims_caption(device: str) -> str:
    """Where the claims come from and what this device's kernels are."""
    text = (f"The claims are quoted from the reference page “{SOURCE}”, after FlashAttention's own numbers "
            "(Dao et al., 2022), measured on GPUs.")
    if device.startswith("cpu"):
        text += (" This is a CPU: its “flash” backend is torch's blocked CPU kernel with the same online "
                 "softmax, not Dao et al.'s CUDA FlashAttention, so the speed and memory claims are “not "
                 "testable here” (the CPU kernel's numbers are shown, not judged) and the default-backend "
                 "verdict says no more than “holds with a caveat”.")
    return text
