"""The league's ordering verdict (issue 43 item 2) and the weight-decay sweep's table (item 3): rank
correlations against scipy, the rule's outcomes on counterfactual leagues (an ordering that disagrees flips
it), and the sweep's settings and file."""

from __future__ import annotations

import math

import pytest
from scipy import stats

from attncore.training.league_verdict import (
    REFERENCE_ORDERINGS,
    kendall_tau_b,
    ordering_verdict,
    ordering_verdicts,
    spearman_rho,
)
from attncore.training.wd_sweep import FILE, WD_SWEEP, WEIGHT_DECAYS, load_sweep, main, sweep_key, wd_table
from tests.training_utils import SNIPPET

REF = REFERENCE_ORDERINGS["zuhri2025.t3"]


def test_rank_correlations_match_scipy_with_ties() -> None:
    cases = [([0.5, 0.2, 0.0, 0.0, 0.1, 0.0], [6, 5, 4, 3, 2, 1]),
             ([1, 2, 3, 4], [4, 3, 2, 1]),
             ([0.3, 0.3, 0.1, 0.7, 0.0], [1, 2, 3, 4, 5])]
    for x, y in cases:
        x, y = [float(v) for v in x], [float(v) for v in y]
        assert kendall_tau_b(x, y) == pytest.approx(stats.kendalltau(x, y).statistic, abs=1e-12)
        assert spearman_rho(x, y) == pytest.approx(stats.spearmanr(x, y).statistic, abs=1e-12)
    assert kendall_tau_b([0.0, 0.0, 0.0], [1.0, 2.0, 3.0]) is None  # one side constant: undefined
    assert spearman_rho([0.0, 0.0], [1.0, 2.0]) is None


def _league(rates_by_seed: dict[int, list[float]], lr: float = 1e-3) -> list[dict]:
    """League records whose sink rates, per seed, follow REF's order of variants."""
    return [{"config": {"variant": v, "lr": lr, "seed": s}, "sink_rate": rate, "diverged_at": None}
            for s, rates in rates_by_seed.items() for v, rate in zip(REF.order, rates, strict=True)]


AGREE = {0: [0.6, 0.5, 0.4, 0.3, 0.2, 0.0], 1: [0.5, 0.5, 0.25, 0.1, 0.0, 0.0], 2: [0.7, 0.4, 0.4, 0.2, 0.1, 0.0]}


def test_the_verdict_agrees_on_a_league_ordered_as_the_reference_and_flips_when_reversed() -> None:
    v = ordering_verdict(_league(AGREE), REF, 1e-3)
    assert v.outcome == "agrees" and v.seeds == [0, 1, 2]
    assert v.taus[0] == pytest.approx(1.0) and v.tau["lo"] > 0
    assert v.tau["mean"] == pytest.approx(sum(v.taus) / 3)
    assert f"{v.tau['mean']:+.2f}" in v.text and "agrees with the order read from Zuhri et al. 2025, Table 3 (issue 43's reading" in v.text
    # counterfactual: the same rates in reverse order -> disagrees, τ negated seed by seed
    rev = ordering_verdict(_league({s: r[::-1] for s, r in AGREE.items()}), REF, 1e-3)
    assert rev.outcome == "disagrees" and rev.taus == pytest.approx([-t for t in v.taus]) and rev.tau["hi"] < 0
    # one seed reversed among agreeing ones -> the interval spans 0
    mixed = ordering_verdict(_league({0: AGREE[0], 1: AGREE[1], 2: AGREE[2][::-1]}), REF, 1e-3)
    assert mixed.outcome == "undecided" and mixed.tau["lo"] < 0 < mixed.tau["hi"]
    assert "is undecided against" in mixed.text


def test_too_few_seeds_missing_variants_diverged_runs_and_other_lrs() -> None:
    one = ordering_verdict(_league({0: AGREE[0]}), REF, 1e-3)
    assert one.outcome == "too few seeds" and one.tau["n"] == 1 and "too few seeds for a verdict, which needs 2" in one.text
    runs = _league(AGREE)
    runs = [r for r in runs if not (r["config"]["seed"] == 2 and r["config"]["variant"] == "softpick")]
    assert ordering_verdict(runs, REF, 1e-3).seeds == [0, 1]  # seed 2 lacks a variant: left out
    runs[0]["diverged_at"] = 10  # seed 0's softmax diverged: seed 0 left out
    assert ordering_verdict(runs, REF, 1e-3).outcome == "too few seeds"
    flat = ordering_verdict(_league({0: [0.0] * 6, 1: [0.0] * 6}), REF, 1e-3)
    assert flat.taus == [None, None] and flat.outcome == "too few seeds"
    both = ordering_verdicts(_league(AGREE, 1e-2) + _league({s: r[::-1] for s, r in AGREE.items()}, 1e-3))
    assert [(v.lr, v.outcome) for v in both] == [(1e-3, "disagrees"), (1e-2, "agrees")]


def test_the_reference_ordering_ends_with_the_abstracts_zero() -> None:
    from attncore.citations import quoted

    assert REF.order[-1] == "softpick" and quoted("zuhri2025.softpick0").value == 0.0
    assert not REF.checked and "not shown" in REF.note


def test_sweep_settings_and_table(tmp_path) -> None:  # type: ignore[no-untyped-def]
    assert WEIGHT_DECAYS == (0.0, 0.1, 0.5, 1.0, 5.0) and WD_SWEEP["seeds"] == [0, 1, 2]
    corpus = tmp_path / "snippet.txt"
    corpus.write_text(SNIPPET * 20, encoding="utf-8")
    assert main(["--out", str(tmp_path / "out"), "--corpus", str(corpus), "--steps", "3", "--limit", "6"]) == 0
    header, runs = load_sweep(tmp_path / "out" / FILE)
    assert header["experiment"] == "weight_decay" and header["command"].startswith(
        "python -m attncore.training.wd_sweep --out out --corpus snippet.txt")
    assert str(tmp_path) not in (tmp_path / "out" / FILE).read_text(encoding="utf-8")
    assert [r["config"]["weight_decay"] for r in runs] == [0.0, 0.1, 0.5, 1.0, 5.0, 0.0]
    assert len({sweep_key(r["config"]) for r in runs}) == 6 and all(r["wall_s"] > 0 for r in runs)
    table = wd_table(runs)
    assert [c["weight_decay"] for c in table] == list(WEIGHT_DECAYS)
    c0 = table[0]
    assert c0["seeds"] == [0, 1] and c0["sink_rate"]["n"] == 2
    want = [r["loss"] for r in runs if r["config"]["weight_decay"] == 0.0]
    assert c0["loss"]["mean"] == pytest.approx(sum(want) / 2)
    assert c0["loss"]["half"] == pytest.approx(12.706 * abs(want[0] - want[1]) / 2, rel=1e-3)
    assert table[1]["loss"]["half"] is None and math.isfinite(table[1]["loss"]["mean"])
    # resume: nothing repeats
    assert main(["--out", str(tmp_path / "out"), "--corpus", str(corpus), "--steps", "3", "--limit", "1"]) == 0
    assert len(load_sweep(tmp_path / "out" / FILE)[1]) == 7
