"""Statistics and verdict rules for trained comparisons: seeds, spread, "not distinguishable".

Pure functions of numbers (no torch, no UI): the experiments command, the Training lab and
the Evidence page all judge the shipped training results with these rules, so a verdict
is computed, never written by hand.

The rule. A comparison of two cells (the same experiment at two settings, each trained
with several seeds) is decided only when both cells have at least :data:`MIN_SEEDS`
seeds. Its difference is ``mean(b) - mean(a)``; its standard error comes from the seeds:
paired over the shared seeds when both cells ran the same seeds (the same seed gives the
same initialisation and the same batches, so the per-seed difference removes that shared
noise), else Welch's unpaired form. The difference is *distinguishable* when it exceeds
its 95% margin, ``t(0.975, df) x standard error``; otherwise the verdict is "not
distinguishable at this scale". A difference of exactly zero is never distinguishable.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from attncore.stats import t_critical

__all__ = [
    "GRAPHCORE_FINAL_TRAIN_LOSS",
    "LR_VARIANTS",
    "MIN_SEEDS",
    "NOT_DISTINGUISHABLE",
    "CellStats",
    "Comparison",
    "LrSweepAnalysis",
    "ScalingAnalysis",
    "SinksAnalysis",
    "cell_stats",
    "compare",
    "compare_ratio",
    "compare_runs",
    "converged",
    "lr_sweep_analysis",
    "n_seeds",
    "runs_by",
    "scaling_analysis",
    "seed_of",
    "sink_heads",
    "sinks_analysis",
    "stats_of",
    "values_of",
    "scale_text",
    "second_half_median",
    "t_critical",
]

MIN_SEEDS = 3
NOT_DISTINGUISHABLE = "not distinguishable at this scale"

@dataclass(frozen=True)
class CellStats:
    """Summary of one cell's values over its seeds.

    Attributes:
        values: the per-seed values, in seed order.
        seeds: the seeds (aligned with ``values``).
        n: how many.
        mean: their mean.
        sd: the sample standard deviation (ddof 1; None for one value).
        se: the standard error of the mean, ``sd / sqrt(n)`` (None for one value).
        lo, hi: the smallest and largest value (the spread as a range).
    """

    values: tuple[float, ...]
    seeds: tuple[int, ...]
    n: int
    mean: float
    sd: float | None
    se: float | None
    lo: float
    hi: float

    def text(self, digits: int = 3) -> str:
        """'1.723 ± 0.012 (sd over 3 seeds, 1.710 to 1.735)' or '1.723 (1 seed)'."""
        if self.sd is None:
            return f"{self.mean:.{digits}f} (1 seed)"
        return (f"{self.mean:.{digits}f} ± {self.sd:.{digits}f} (sd over {self.n} seeds, "
                f"{self.lo:.{digits}f} to {self.hi:.{digits}f})")

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form."""
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in asdict(self).items()}


def cell_stats(values: Sequence[float], seeds: Sequence[int] | None = None) -> CellStats:
    """Mean, standard deviation, standard error and range of ``values`` (one per seed).

    Raises ValueError for no values or a non-finite one (a diverged run has no loss: leave it
    out and say so).
    """
    vals = tuple(float(v) for v in values)
    if not vals:
        raise ValueError("a cell needs at least one value")
    if not all(math.isfinite(v) for v in vals):
        raise ValueError(f"non-finite value in a cell: {vals}")
    sds = tuple(int(s) for s in seeds) if seeds is not None else tuple(range(len(vals)))
    if len(sds) != len(vals):
        raise ValueError("one seed per value")
    n = len(vals)
    mean = math.fsum(vals) / n
    if n > 1:
        sd = math.sqrt(math.fsum((v - mean) ** 2 for v in vals) / (n - 1))
        se: float | None = sd / math.sqrt(n)
    else:
        sd, se = None, None
    return CellStats(vals, sds, n, mean, sd, se, min(vals), max(vals))


@dataclass(frozen=True)
class Comparison:
    """Cell ``b`` against cell ``a`` under the module's rule.

    Attributes:
        a, b: the two cells.
        diff: ``mean(b) - mean(a)`` (for :func:`compare_ratio`: of the logs).
        se: the standard error of ``diff`` (None with fewer than 2 seeds in a cell).
        df: its degrees of freedom; ``margin``: ``t(0.975, df) x se``.
        paired: the per-seed differences were used (both cells ran the same seeds).
        sign: +1 (b higher), -1 (b lower) or 0 (not distinguishable / too few seeds).
        enough_seeds: both cells have at least ``min_seeds`` seeds.
    """

    a: CellStats
    b: CellStats
    diff: float
    se: float | None
    df: float | None
    margin: float | None
    paired: bool
    sign: int
    enough_seeds: bool
    min_seeds: int

    @property
    def distinguishable(self) -> bool:
        """The difference exceeds its 95% margin (and both cells have enough seeds)."""
        return self.sign != 0

    def word(self, higher: str = "higher", lower: str = "lower") -> str:
        """``higher`` / ``lower`` when distinguishable, else why it is not."""
        if not self.enough_seeds:
            return f"too few seeds to decide, {self.min_seeds} per cell needed"
        return {1: higher, -1: lower, 0: NOT_DISTINGUISHABLE}[self.sign]

    def margin_text(self, digits: int = 3) -> str:
        """'difference +0.123 ± 0.045 at 95%, paired over 3 seeds'."""
        how = f"paired over {self.a.n} seeds" if self.paired else f"Welch, {self.a.n} and {self.b.n} seeds"
        if self.margin is None:
            n = min(self.a.n, self.b.n)
            return f"difference {self.diff:+.{digits}f}, no margin from {n} seed{'s' if n != 1 else ''}"
        return f"difference {self.diff:+.{digits}f} ± {self.margin:.{digits}f} at 95%, {how}"

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form (with the verdict word)."""
        d = {k: v for k, v in asdict(self).items() if k not in ("a", "b")}
        d.update(a=self.a.to_dict(), b=self.b.to_dict(), distinguishable=self.distinguishable,
                 verdict=self.word())
        return d


def compare(a: Sequence[float], b: Sequence[float], *, seeds_a: Sequence[int] | None = None,
            seeds_b: Sequence[int] | None = None, min_seeds: int = MIN_SEEDS) -> Comparison:
    """Cell ``b`` against cell ``a`` (values per seed; see the module docstring for the rule).

    Paired when both cells list the same seeds in the same order (``seeds_a == seeds_b``,
    given or both left out with equal lengths), else Welch.
    """
    sa, sb = cell_stats(a, seeds_a), cell_stats(b, seeds_b)
    diff = sb.mean - sa.mean
    enough = sa.n >= min_seeds and sb.n >= min_seeds
    paired = sa.seeds == sb.seeds and sa.n >= 2
    se: float | None
    df: float | None
    if paired:
        d = cell_stats([y - x for x, y in zip(sa.values, sb.values, strict=True)])
        se, df = d.se, float(d.n - 1)
    elif sa.n >= 2 and sb.n >= 2:
        va, vb = (sa.se or 0.0) ** 2, (sb.se or 0.0) ** 2
        se = math.sqrt(va + vb)
        den = (va * va / (sa.n - 1) + vb * vb / (sb.n - 1))
        df = (va + vb) ** 2 / den if den > 0 else float(sa.n + sb.n - 2)
    else:
        se, df = None, None
    margin = None if se is None or df is None else t_critical(df) * se
    sign = 0
    if enough and margin is not None and diff != 0 and abs(diff) > margin:
        sign = 1 if diff > 0 else -1
    return Comparison(sa, sb, diff, se, df, margin, paired, sign, enough, min_seeds)


def compare_ratio(a: Sequence[float], b: Sequence[float], *, seeds_a: Sequence[int] | None = None,
                  seeds_b: Sequence[int] | None = None, min_seeds: int = MIN_SEEDS) -> Comparison:
    """:func:`compare` on the natural logs of positive values (gradient norms, times): ``diff`` is
    ``log(b / a)`` of the geometric means, so ``exp(diff)`` is the ratio. Raises ValueError
    for a value that is not positive."""
    if any(not v > 0 for v in [*a, *b]):
        raise ValueError("compare_ratio needs positive values")
    return compare([math.log(v) for v in a], [math.log(v) for v in b], seeds_a=seeds_a, seeds_b=seeds_b,
                   min_seeds=min_seeds)


def second_half_median(steps: Sequence[int], values: Sequence[float | None],
                       total_steps: int) -> float | None:
    """The median of ``values`` at the evaluation points past half of training (``step > total/2``).

    A robust per-run statistic for a noisy curve (the gradient norm jumps between evaluation
    points by a factor of seven in the shipped runs): one point can no longer decide a
    verdict. None where no finite value lies in the second half.
    """
    half = [float(v) for s, v in zip(steps, values, strict=True)
            if s > total_steps / 2 and v is not None and math.isfinite(v)]
    if not half:
        return None
    half.sort()
    m = len(half)
    return half[m // 2] if m % 2 else 0.5 * (half[m // 2 - 1] + half[m // 2])


# ---------------------------------------------------------------------------- result files
# The three shipped experiments, judged from their run records (the JSON written by
# ``python -m attncore.training.experiments``): the experiments command stores these
# analyses, and the pages recompute them from the runs, so a verdict cannot drift from them.

LR_VARIANTS = ("standard", "fully_scaled", "fully_scaled_rows")
# Graphcore's "Almost-scaled dot-product attention": final training loss read from its sweep figure.
GRAPHCORE_FINAL_TRAIN_LOSS = {"standard": 1.2, "fully_scaled": 1.4}


def seed_of(run: dict[str, Any]) -> int:
    """The seed of a run record (older records keep it only in their config)."""
    return int(run["seed"]) if run.get("seed") is not None else int(run["config"]["seed"])


def runs_by(runs: Sequence[dict[str, Any]], *keys: str) -> dict[tuple[Any, ...], list[dict[str, Any]]]:
    """Run records grouped by the values of ``keys`` (cells), in the order they first appear."""
    out: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for r in runs:
        out.setdefault(tuple(r[k] for k in keys), []).append(r)
    return out


def converged(runs: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The runs that did not diverge."""
    return [r for r in runs if r.get("diverged_at") is None]


def values_of(runs: Sequence[dict[str, Any]], key: str) -> tuple[list[float], list[int]]:
    """(values, seeds) of ``key`` over the converged runs that have it."""
    kept = [r for r in converged(runs) if r.get(key) is not None]
    return [float(r[key]) for r in kept], [seed_of(r) for r in kept]


def stats_of(runs: Sequence[dict[str, Any]], key: str) -> CellStats | None:
    """:func:`cell_stats` of ``key`` over a cell's converged runs (None when none has it)."""
    vals, seeds = values_of(runs, key)
    return cell_stats(vals, seeds) if vals else None


def compare_runs(a: Sequence[dict[str, Any]], b: Sequence[dict[str, Any]], key: str, *,
                 ratio: bool = False) -> Comparison | None:
    """:func:`compare` (or :func:`compare_ratio`) of ``key`` between two cells' converged runs."""
    va, sa = values_of(a, key)
    vb, sb = values_of(b, key)
    if not va or not vb:
        return None
    if ratio:
        if min(va + vb) <= 0:
            return None
        return compare_ratio(va, vb, seeds_a=sa, seeds_b=sb)
    return compare(va, vb, seeds_a=sa, seeds_b=sb)


def scale_text(config: dict[str, Any]) -> str:
    """'3 layers, width 128, 4 heads, context 64, batch 32, 500 steps' from a sizes config."""
    layers = config["n_layer"]
    parts = [f"{layers} layer{'s' if layers != 1 else ''}", f"width {config['d_model']}"]
    if "n_head" in config:
        parts.append(f"{config['n_head']} heads")
    parts += [f"context {config['context']}", f"batch {config['batch']}", f"{config['steps']} steps"]
    if config.get("dropout"):
        parts.append(f"dropout {config['dropout']:g}")
    return ", ".join(parts)


def n_seeds(doc: dict[str, Any]) -> int:
    """How many seeds the experiment planned (its ``seeds`` list; 1 for files made before seeds)."""
    return len(doc.get("seeds") or [0])


@dataclass(frozen=True)
class LrSweepAnalysis:
    """The learning-rate sweep judged: cells ``(variant, lr)``, each variant's best cell (the
    lowest mean final training loss among the cells run at every seed without divergence), and
    the comparisons of the best cells' final training losses (``"b vs a"``)."""

    cells: dict[tuple[str, float], list[dict[str, Any]]]
    best: dict[str, tuple[float, list[dict[str, Any]]]]
    comparisons: dict[str, Comparison]
    seeds: int


def lr_sweep_analysis(doc: dict[str, Any]) -> LrSweepAnalysis:
    """:class:`LrSweepAnalysis` of an ``lr_sweep`` result."""
    cells = runs_by(doc["runs"], "variant", "lr")
    k = n_seeds(doc)
    best: dict[str, tuple[float, list[dict[str, Any]]]] = {}
    for v in LR_VARIANTS:
        full = []
        for (vv, lr), runs in cells.items():
            st = stats_of(runs, "final_train_loss")
            if vv == v and st is not None and len(runs) >= k and len(converged(runs)) == len(runs):
                full.append((st.mean, lr, runs))
        if full:
            _, lr, runs = min(full, key=lambda t: (t[0], t[1]))
            best[v] = (lr, runs)
    comparisons: dict[str, Comparison] = {}
    for a, b in (("standard", "fully_scaled"), ("standard", "fully_scaled_rows"),
                 ("fully_scaled", "fully_scaled_rows")):
        if a in best and b in best:
            c = compare_runs(best[a][1], best[b][1], "final_train_loss")
            if c is not None:
                comparisons[f"{b} vs {a}"] = c
    return LrSweepAnalysis(cells, best, comparisons, k)


@dataclass(frozen=True)
class ScalingAnalysis:
    """The scaling ablation judged, per head dim: unscaled vs standard final validation loss
    (``loss``), the ratio of their second-half median query/key gradient norms (``grad``),
    and between consecutive head dims whether the per-seed loss gap grows (``gap_growth``,
    keyed ``"16->64"``). ``gap_grows``: True when every step up is a distinguishable growth,
    False when one is a distinguishable shrink, None otherwise."""

    cells: dict[tuple[str, int], list[dict[str, Any]]]
    d_heads: list[int]
    loss: dict[int, Comparison | None]
    grad: dict[int, Comparison | None]
    gap_growth: dict[str, Comparison | None]
    gap_grows: bool | None
    seeds: int


def scaling_analysis(doc: dict[str, Any]) -> ScalingAnalysis:
    """:class:`ScalingAnalysis` of a ``scaling`` result; (re)computes each run record's
    ``qk_grad_second_half_median`` and ``saturated_second_half_median`` from its curves."""
    for r in doc["runs"]:
        total = int(r["config"]["steps"])
        r["qk_grad_second_half_median"] = second_half_median(r["steps"], r["qk_grad_norm"], total)
        r["saturated_second_half_median"] = second_half_median(r["steps"], r["saturated_share"], total)
    cells = runs_by(doc["runs"], "variant", "d_head")
    d_heads = sorted({d for _, d in cells})
    loss: dict[int, Comparison | None] = {}
    grad: dict[int, Comparison | None] = {}
    gaps: dict[int, tuple[list[float], list[int]]] = {}
    for d in d_heads:
        s, u = cells.get(("standard", d), []), cells.get(("unscaled", d), [])
        loss[d] = compare_runs(s, u, "final_val_loss")
        grad[d] = compare_runs(s, u, "qk_grad_second_half_median", ratio=True)
        by_s = {seed_of(r): r["final_val_loss"] for r in converged(s)}
        by_u = {seed_of(r): r["final_val_loss"] for r in converged(u)}
        common = sorted(set(by_s) & set(by_u))
        gaps[d] = ([by_u[k] - by_s[k] for k in common], common)
    growth: dict[str, Comparison | None] = {}
    signs: list[int | None] = []
    for a, b in zip(d_heads, d_heads[1:], strict=False):
        (ga, sa), (gb, sb) = gaps[a], gaps[b]
        c = compare(ga, gb, seeds_a=sa, seeds_b=sb) if ga and gb else None
        growth[f"{a}->{b}"] = c
        signs.append(c.sign if c is not None and c.enough_seeds else None)
    grows = (True if signs and all(x == 1 for x in signs) else
             False if any(x == -1 for x in signs) else None)
    return ScalingAnalysis(cells, d_heads, loss, grad, growth, grows, n_seeds(doc))


@dataclass(frozen=True)
class SinksAnalysis:
    """The sinks experiment judged: per normaliser its sink-head counts per model (``heads``,
    out of ``heads_per_model``), the windowed StreamingLLM loss with the first tokens kept
    vs without (``streaming``, paired: the same models) and its final validation loss vs
    softmax's (``val_vs_softmax``); ``formed``: any head of any model is a sink head."""

    cells: dict[str, list[dict[str, Any]]]
    heads: dict[str, list[int]]
    heads_per_model: int
    streaming: dict[str, Comparison | None]
    val_vs_softmax: dict[str, Comparison | None]
    formed: bool
    top_alpha: float
    seeds: int


def sink_heads(run: dict[str, Any]) -> int:
    """Heads of one model whose first-token score α₀ exceeds the run's ε."""
    return sum(1 for row in run["sink_alpha"] for a in row if a > run["sink_eps"])


def sinks_analysis(doc: dict[str, Any]) -> SinksAnalysis:
    """:class:`SinksAnalysis` of a ``sinks`` result."""
    cells = {k[0]: v for k, v in runs_by(doc["runs"], "label").items()}
    heads: dict[str, list[int]] = {}
    streaming: dict[str, Comparison | None] = {}
    val: dict[str, Comparison | None] = {}
    per_model = 0
    top = 0.0
    for label, runs in cells.items():
        done = [r for r in converged(runs) if r.get("sink_alpha") is not None]
        heads[label] = [sink_heads(r) for r in done]
        for r in done:
            per_model = max(per_model, sum(len(row) for row in r["sink_alpha"]))
            top = max(top, max(a for row in r["sink_alpha"] for a in row))
        if done:
            w = [float(r["streaming"]["window_beyond"]) for r in done]
            ws = [float(r["streaming"]["window_sinks_beyond"]) for r in done]
            seeds = [seed_of(r) for r in done]
            streaming[label] = compare(w, ws, seeds_a=seeds, seeds_b=seeds)
        else:
            streaming[label] = None
        if label != "softmax" and "softmax" in cells:
            val[label] = compare_runs(cells["softmax"], runs, "final_val_loss")
    formed = any(k > 0 for ks in heads.values() for k in ks)
    return SinksAnalysis(cells, heads, per_model, streaming, val, formed, top, n_seeds(doc))
