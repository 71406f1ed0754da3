"""Statistics of the null-attention runs (Guo et al.'s Bigram-Backcopy task): one run's numbers, read at its
sink head, and a variant's numbers over seeds.

Shared by the shipped experiment (:mod:`attncore.training.null_attention`), the grid over settings
(:mod:`attncore.training.sink_grid`, judged by :mod:`attncore.training.sink_verdicts`) and the app's live
runs, so all three decide "learned", "sink" and "transient sink" by the same rules:

* learned: the copy loss at the last evaluation point is at most :data:`COPY_TOL` nats and the mean KL
  divergence of the other positions' predictions from the true bigram rows at most :data:`KL_TOL`;
* the end weight: the weight non-trigger positions put on BOS, at the sink head, averaged over the last
  :data:`LAST_POINTS` evaluation points (one point can sit on a wobble: the gated model's seed 2 read
  0.322, 0.296, 0.282 at steps 500-600 of the shipped run);
* a sink: an end weight above ``SINK_THRESHOLD`` (0.3); a transient sink: the weight crossed 0.3 at some
  evaluation point but the end weight is not above it;
* an interval over seeds: mean ± ``t(0.975, n - 1)`` standard errors (Student's t, 4.30 at 3 seeds, 12.71 at
  2), a 95% interval if the seeds' end weights were normal; none from one seed.

Shape legend: ``N`` layers, ``H`` heads.
"""

from __future__ import annotations

import math
from typing import Any

from attncore.training.bbm import SINK_THRESHOLD, bbm_label, first_crossing
from attncore.training.verdicts import t_critical

__all__ = [
    "COPY_TOL",
    "KL_TOL",
    "LAST_POINTS",
    "STAT_KEYS",
    "end_steps",
    "end_weight",
    "mean_se",
    "run_facts",
    "summarise",
    "t_interval",
    "t_level",
]

COPY_TOL = 0.05  # nats: a copy loss below this counts as "learned the copy"
KL_TOL = 0.05  # nats: a mean KL divergence from the true bigram rows below this = "learned the bigrams"
LAST_POINTS = 3  # the sink verdict reads the mean of this many last evaluation points


def end_weight(curve: list[float | None], points: int = LAST_POINTS) -> float | None:
    """The mean of the last ``points`` values of a BOS-weight curve (those that are numbers; None if
    none is)."""
    xs = [float(v) for v in curve[-points:] if v is not None and math.isfinite(v)]
    return sum(xs) / len(xs) if xs else None


def end_steps(steps: list[int], points: int = LAST_POINTS) -> list[int]:
    """The evaluation steps :func:`end_weight` averages over."""
    return list(steps[-points:])


def t_level(z: float, df: int) -> float:
    """P(|T| < z) for Student's t with ``df`` degrees of freedom: the real level of a mean ± z standard
    errors over df + 1 seeds (z = 2 at 3 seeds: 2/sqrt(6) = 0.816, not 0.95). Simpson's rule on the
    density."""
    if df < 1 or not z > 0:
        return 0.0
    c = math.exp(math.lgamma((df + 1) / 2) - math.lgamma(df / 2)) / math.sqrt(df * math.pi)
    n = 2000
    h = z / n
    f = [c * (1 + (i * h) ** 2 / df) ** (-(df + 1) / 2) for i in range(n + 1)]
    half = h / 3 * (f[0] + f[-1] + 4 * sum(f[1:-1:2]) + 2 * sum(f[2:-1:2]))
    return 2 * half


def t_interval(values: list[float | None]) -> dict[str, Any]:
    """Mean of the values that are numbers, its standard error and its t interval: ``half`` =
    ``t(0.975, n - 1)`` x standard error, ``lo``/``hi`` = mean ∓ half (None with fewer than 2 values),
    with ``t`` and ``n``."""
    s = mean_se(values)
    n = s["n"]
    if n < 2 or s["se"] is None:
        return {**s, "t": None, "half": None, "lo": None, "hi": None}
    t = t_critical(n - 1)
    half = t * s["se"]
    return {**s, "t": t, "half": half, "lo": s["mean"] - half, "hi": s["mean"] + half}


def mean_se(values: list[float | None]) -> dict[str, Any]:
    """Mean, standard error of the mean (sample std / sqrt(n); None for n < 2), n, min and max of
    the values that are numbers."""
    xs = [float(v) for v in values if v is not None and math.isfinite(v)]
    n = len(xs)
    if not n:
        return {"mean": None, "se": None, "n": 0, "min": None, "max": None}
    m = sum(xs) / n
    se = math.sqrt(sum((x - m) ** 2 for x in xs) / (n - 1) / n) if n > 1 else None
    return {"mean": m, "se": se, "n": n, "min": min(xs), "max": max(xs)}


def _sink_head(probe: dict[str, Any]) -> tuple[int, int] | None:
    """(layer, head) with the largest BOS weight from non-trigger positions."""
    best, where = -1.0, None
    for li, row in enumerate(probe["bos_other"]):
        for h, v in enumerate(row or []):
            if v is not None and v > best:
                best, where = v, (li, h)
    return where


def _at(probe: dict[str, Any], key: str, where: tuple[int, int] | None) -> float | None:
    if where is None or probe.get(key) is None:
        return None
    row = probe[key][where[0]]
    return None if row is None else row[where[1]]


def _minus(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a - b


def run_facts(run: dict[str, Any]) -> dict[str, Any]:
    """One run's final numbers and curves, read at its sink head (the layer and head whose BOS weight
    from non-trigger positions is largest at the last evaluation point); ``bos_end`` is that weight
    averaged over the last :data:`LAST_POINTS` evaluation points (``end_steps``), ``sink`` whether it is
    above the threshold, ``transient`` whether the curve crossed it earlier without ending above it."""
    probes = run.get("probes") or []
    if not probes:
        return {"usable": False}
    last = probes[-1]
    where = _sink_head(last)
    ab, stream = run.get("ablation") or {}, run.get("streaming") or {}
    learned = (last.get("copy_loss") is not None and last["copy_loss"] <= COPY_TOL
               and last.get("bigram_excess") is not None and last["bigram_excess"] <= KL_TOL)
    other = [_at(p, "bos_other", where) for p in probes]
    share = [sum(p["sink_share"]) / len(p["sink_share"]) for p in probes]
    end = end_weight(other)
    crossing = first_crossing(run["steps"], other)
    sink = end is not None and end > SINK_THRESHOLD
    return {
        "usable": run.get("diverged_at") is None, "learned": learned, "where": where,
        "steps": run["steps"], "bos_other_curve": other, "bos_end": end,
        "end_steps": end_steps(run["steps"]), "sink": sink, "transient": crossing is not None and not sink,
        "peak": max((v for v in other if v is not None), default=None),
        "bos_trigger_curve": [_at(p, "bos_trigger", where) for p in probes],
        "sink_share_curve": share,
        "bos_other": other[-1], "bos_trigger": _at(last, "bos_trigger", where),
        "nowhere_other": _at(last, "nowhere_other", where),
        "nowhere_trigger": _at(last, "nowhere_trigger", where),
        "gate_other": _at(last, "gate_other", where), "gate_trigger": _at(last, "gate_trigger", where),
        "value_ratio": _at(last, "value_ratio", where), "sink_share": share[-1],
        "crossing": crossing, "copy_loss": last.get("copy_loss"),
        "bigram_loss": last.get("bigram_loss"), "bigram_excess": last.get("bigram_excess"),
        "bigram_entropy": last.get("bigram_entropy"),
        "ablation_copy": ab.get("copy_delta"), "ablation_bigram": ab.get("bigram_delta"),
        "window": stream.get("window_bigram"), "window_bos": stream.get("window_bos_bigram"),
        "full": stream.get("full_bigram"),
        "window_copy": stream.get("window_copy"), "window_bos_copy": stream.get("window_bos_copy"),
        "evict_bigram": _minus(stream.get("window_bigram"), stream.get("window_bos_bigram")),
        "evict_copy": _minus(stream.get("window_copy"), stream.get("window_bos_copy")),
    }


STAT_KEYS = ("bos_end", "bos_other", "bos_trigger", "nowhere_other", "nowhere_trigger", "gate_other",
             "gate_trigger", "value_ratio", "sink_share", "copy_loss", "bigram_loss", "bigram_excess",
             "bigram_entropy", "ablation_copy", "ablation_bigram", "window", "window_bos", "full",
             "evict_bigram", "evict_copy")


def summarise(runs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per variant (``label`` of the runs, in order of first appearance): over its distinct seeds (a
    seed's first run counts, a repeat of it is left out), the mean,
    standard error, min and max of every final number (:data:`STAT_KEYS`, read at each run's sink
    head), the seeds that learned the task, formed a sink (end weight, the mean of the last
    :data:`LAST_POINTS` evaluation points, above 0.3), crossed 0.3 at some point (and when), had a
    transient sink (crossed, then ended at or below 0.3), diverged; the evaluation steps the end weight
    averages (``end_steps``); and the BOS-weight curves (mean, min, max per step over the seeds that
    reached it)."""
    out: dict[str, dict[str, Any]] = {}
    for run in runs:
        label = bbm_label(run["config"], with_seed=False)
        entry = out.setdefault(label, {"label": label, "variant": run["config"]["variant"], "runs": []})
        if all(r["config"]["seed"] != run["config"]["seed"] for r in entry["runs"]):
            entry["runs"].append(run)  # a seed counts once: a repeat of the same run is no extra evidence
    for s in out.values():
        facts = [run_facts(r) for r in s["runs"]]
        ok = [f for f in facts if f.get("usable")]
        s["seeds"] = [r["config"]["seed"] for r in s["runs"]]
        s["n"] = len(facts)
        s["diverged"] = [(r["config"]["seed"], r["diverged_at"]) for r in s["runs"] if r.get("diverged_at")]
        s["n_usable"] = len(ok)
        s["n_learned"] = sum(1 for f in ok if f["learned"])
        s["n_sink"] = sum(1 for f in ok if f["sink"])
        s["n_transient"] = sum(1 for f in ok if f["transient"])
        s["end_steps"] = max((f["end_steps"] for f in ok), key=lambda st: st[-1] if st else -1, default=[])
        s["crossings"] = [f["crossing"] for f in ok]
        s["n_crossed"] = sum(1 for c in s["crossings"] if c is not None)
        for k in STAT_KEYS:
            s[k] = mean_se([f.get(k) for f in ok])
        s["curves"] = {k: _band([f["steps"] for f in facts if f.get("steps")],
                                [f[k] for f in facts if f.get("steps")])
                       for k in ("bos_other_curve", "bos_trigger_curve", "sink_share_curve")}
        keep = ("bos_end", "sink", "transient", "bos_other", "bos_trigger", "crossing", "learned",
                "nowhere_other", "value_ratio", "copy_loss", "bigram_excess")
        s["per_seed"] = [{"seed": r["config"]["seed"], **{k: f.get(k) for k in keep},
                          "diverged_at": r.get("diverged_at")} for r, f in zip(s["runs"], facts, strict=True)]
        del s["runs"]
    return out


def _band(steps: list[list[int]], curves: list[list[float | None]]) -> dict[str, list[Any]]:
    """Mean, min and max over the seeds at every step any of them reached (a diverged seed's curve stops)."""
    all_steps = sorted({s for ss in steps for s in ss})
    mean, lo, hi, n = [], [], [], []
    for st in all_steps:
        vals = [c[ss.index(st)] for ss, c in zip(steps, curves, strict=True) if st in ss]
        vals = [v for v in vals if v is not None]
        mean.append(sum(vals) / len(vals) if vals else None)
        lo.append(min(vals) if vals else None)
        hi.append(max(vals) if vals else None)
        n.append(len(vals))
    return {"steps": all_steps, "mean": mean, "min": lo, "max": hi, "n": n}


