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

__all__ = [
    "MIN_SEEDS",
    "NOT_DISTINGUISHABLE",
    "CellStats",
    "Comparison",
    "cell_stats",
    "compare",
    "compare_ratio",
    "second_half_median",
    "t_critical",
]

MIN_SEEDS = 3
NOT_DISTINGUISHABLE = "not distinguishable at this scale"

# Two-sided 95% critical values of Student's t for 1..30 degrees of freedom (t(0.975, df)).
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160,
         2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056,
         2.052, 2.048, 2.045, 2.042)


def t_critical(df: float) -> float:
    """t(0.975, df): the two-sided 95% critical value; a fractional df (Welch) is rounded down,
    which makes the margin wider (the conservative side); df above 30 uses 1.96 + the 30's gap."""
    if not math.isfinite(df) or df < 1:
        return math.inf
    k = int(math.floor(df))
    return _T975[k - 1] if k <= len(_T975) else 1.96 + (_T975[-1] - 1.96) * 30 / k


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
            return f"too few seeds to decide (need {self.min_seeds} per cell)"
        return {1: higher, -1: lower, 0: NOT_DISTINGUISHABLE}[self.sign]

    def margin_text(self, digits: int = 3) -> str:
        """'difference +0.123 ± 0.045 (95% margin, paired over 3 seeds)'."""
        how = f"paired over {self.a.n} seeds" if self.paired else f"Welch, {self.a.n} and {self.b.n} seeds"
        if self.margin is None:
            return f"difference {self.diff:+.{digits}f} (no margin: {how})"
        return f"difference {self.diff:+.{digits}f} ± {self.margin:.{digits}f} (95% margin, {how})"

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
