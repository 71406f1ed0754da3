"""The verdict rules of attncore.training.verdicts: each verdict changes when the numbers do."""

from __future__ import annotations

import math
import statistics

import pytest

from attncore.training.verdicts import (
    MIN_SEEDS,
    NOT_DISTINGUISHABLE,
    cell_stats,
    compare,
    compare_ratio,
    second_half_median,
    t_critical,
)


def test_cell_stats_match_the_statistics_module() -> None:
    vals = [1.72, 1.75, 1.70]
    s = cell_stats(vals, [0, 1, 2])
    assert s.n == 3 and s.mean == pytest.approx(statistics.fmean(vals))
    assert s.sd == pytest.approx(statistics.stdev(vals)) and s.se == pytest.approx(statistics.stdev(vals) / 3**0.5)
    assert (s.lo, s.hi) == (1.70, 1.75) and s.seeds == (0, 1, 2)
    assert s.text() == f"{s.mean:.3f} ± {s.sd:.3f} (sd over 3 seeds, 1.700 to 1.750)"
    one = cell_stats([2.0])
    assert one.sd is None and one.se is None and one.text() == "2.000 (1 seed)"
    with pytest.raises(ValueError):
        cell_stats([])
    with pytest.raises(ValueError):
        cell_stats([1.0, math.nan])


def test_t_critical_is_students_table() -> None:
    assert t_critical(2) == 4.303 and t_critical(4) == 2.776 and t_critical(4.9) == 2.776  # rounded down
    assert t_critical(0.5) == math.inf and 1.96 < t_critical(100) < t_critical(30) == 2.042
    scipy_stats = pytest.importorskip("scipy.stats")
    for df in (1, 2, 3, 5, 10, 20, 30):
        assert t_critical(df) == pytest.approx(scipy_stats.t.ppf(0.975, df), abs=1e-3)


def test_a_difference_beyond_its_margin_is_a_verdict_and_within_it_is_not() -> None:
    a = [1.72, 1.73, 1.71]
    worse = compare(a, [1.85, 1.86, 1.84])
    assert worse.paired and worse.sign == 1 and worse.word("worse", "better") == "worse"
    assert worse.diff == pytest.approx(0.13)
    better = compare(a, [1.60, 1.61, 1.59])
    assert better.sign == -1 and better.word("worse", "better") == "better"
    # the same mean difference with a spread as large as the difference: not distinguishable
    noisy = compare(a, [1.85 + 0.2, 1.86 - 0.25, 1.84 + 0.05])
    assert noisy.sign == 0 and noisy.word() == NOT_DISTINGUISHABLE and not noisy.distinguishable
    level = compare(a, list(a))
    assert level.diff == 0 and level.sign == 0


def test_pairing_removes_the_noise_the_seeds_share() -> None:
    # seed effects of +-0.1 shared by both cells: paired sees a steady +0.02, Welch sees noise
    a = [1.60, 1.70, 1.80]
    b = [1.62, 1.721, 1.819]
    paired = compare(a, b, seeds_a=[0, 1, 2], seeds_b=[0, 1, 2])
    welch = compare(a, b, seeds_a=[0, 1, 2], seeds_b=[3, 4, 5])
    assert paired.paired and paired.sign == 1
    assert not welch.paired and welch.sign == 0 and welch.df is not None and welch.df == pytest.approx(4, abs=0.1)
    assert paired.margin_text().endswith("at 95%, paired over 3 seeds")
    assert welch.margin_text().endswith("at 95%, Welch, 3 and 3 seeds")


def test_fewer_than_three_seeds_never_decide() -> None:
    c = compare([1.0, 1.01], [2.0, 2.01])
    assert not c.enough_seeds and c.sign == 0 and c.word().startswith("too few seeds")
    one = compare([1.0], [2.0])
    assert one.se is None and one.margin is None and one.sign == 0
    assert compare([1.0, 1.01, 1.0], [2.0, 2.01, 2.0], min_seeds=MIN_SEEDS).sign == 1


def test_compare_ratio_works_on_logs() -> None:
    c = compare_ratio([0.2, 0.22, 0.18], [0.02, 0.025, 0.018])
    assert c.sign == -1 and math.exp(c.diff) == pytest.approx(
        statistics.geometric_mean([0.02, 0.025, 0.018]) / statistics.geometric_mean([0.2, 0.22, 0.18]))
    assert compare_ratio([0.2, 0.22, 0.18], [0.21, 0.19, 0.2]).sign == 0
    with pytest.raises(ValueError):
        compare_ratio([0.0, 1.0, 1.0], [1.0, 1.0, 1.0])


def test_second_half_median_ignores_the_first_half_and_one_outlier() -> None:
    steps = [25, 50, 75, 100, 125, 150, 175, 200, 225, 250, 275, 300]
    # the shipped d_head 256 unscaled run's pattern: the last point alone is 7x below its neighbour
    vals = [5.0, 4.0, 3.0, 2.0, 1.0, 0.9, 0.30, 0.35, 0.40, 0.45, 0.49, 0.071]
    assert second_half_median(steps, vals, 300) == pytest.approx(statistics.median(vals[6:]))
    vals_last_high = [*vals[:-1], 3.0]
    assert second_half_median(steps, vals_last_high, 300) == pytest.approx(statistics.median(vals_last_high[6:]))
    assert second_half_median([10, 20], [1.0, None], 300) is None
