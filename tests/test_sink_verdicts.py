"""attncore.training.sink_verdicts: the sink claims judged over a grid of settings. Counterfactual grids flip
each verdict (every / some / none / untested), partial grids say what was run, intervals use Student's t."""

from __future__ import annotations

import math
from typing import Any

import pytest

from attncore.training.sink_grid import load_grid
from attncore.training.sink_verdicts import (
    DENOMINATOR,
    FIXES,
    RULE_TEXT,
    Setting,
    grid_cells,
    interval_text,
    sink_claims,
)

VARIANTS = [dict(variant="standard"), dict(variant="softmax1"), dict(variant="sink_logit", sink_init=0.0)]
HEADER = {"kind": "header", "grid": {"base": {"steps": 200}, "lrs": [1e-3, 1e-2],
                                     "positions": ["rotary", "learned"], "variants": VARIANTS, "seeds": [0, 1, 2]}}
SINK = [0.05, 0.4, 0.8, 0.8, 0.8]
NONE = [0.05, 0.02, 0.01, 0.01, 0.01]
GONE = [0.05, 0.5, 0.1, 0.05, 0.02]  # crossed 0.3 at step 50, ended below it: transient


def grun(variant: str, seed: int, lr: float, positions: str, curve: list[float], *, steps: int = 200,
         copy_loss: float = 0.01, excess: float = 0.02, sink_init: float = 0.0,
         diverged_at: int | None = None) -> dict[str, Any]:
    """A grid run record (1 layer, 1 head) with this BOS-weight curve from non-trigger positions."""
    probes = [{"bos_other": [[v]], "bos_trigger": [[0.01]], "nowhere_other": [[0.0]], "nowhere_trigger": [[0.0]],
               "gate_other": [None], "gate_trigger": [None], "alpha0": [[v]], "sink_share": [float(v > 0.3)],
               "value_ratio": [[0.2]], "copy_loss": copy_loss, "bigram_loss": 2.3 + excess, "bigram_entropy": 2.3,
               "bigram_excess": excess} for v in curve]
    return {"config": {"variant": variant, "seed": seed, "lr": lr, "positions": positions, "steps": steps,
                       "sink_init": sink_init},
            "steps": [steps * i // (len(curve) - 1) for i in range(len(curve))], "probes": probes,
            "diverged_at": diverged_at, "ablation": None, "streaming": None}


def full_grid(fix_curve: Any = NONE, soft_curve: Any = SINK, seeds: int = 3, **kw: Any) -> list[dict[str, Any]]:
    """Every cell of HEADER's grid at ``seeds`` seeds; curves may be functions of (lr, positions, seed)."""
    def pick(c: Any, lr: float, pos: str, s: int) -> list[float]:
        return c(lr, pos, s) if callable(c) else c

    runs = []
    for s in range(seeds):
        for pos in ("rotary", "learned"):
            for lr in (1e-3, 1e-2):
                runs.append(grun("standard", s, lr, pos, pick(soft_curve, lr, pos, s)))
                runs.append(grun("softmax1", s, lr, pos, pick(fix_curve, lr, pos, s), **kw))
                runs.append(grun("sink_logit", s, lr, pos, pick(fix_curve, lr, pos, s), **kw))
    return runs


def test_interval_is_student_t_for_the_number_of_seeds() -> None:
    runs = [grun("standard", s, 1e-3, "rotary", [0.1, 0.5, v, v, v]) for s, v in enumerate((0.4, 0.5, 0.9))]
    (cell,) = [c for c in grid_cells({}, runs)]
    xs = [0.4, 0.5, 0.9]
    m = sum(xs) / 3
    se = math.sqrt(sum((x - m) ** 2 for x in xs) / 2 / 3)
    assert cell.end["mean"] == pytest.approx(m) and cell.end["t"] == pytest.approx(4.303)
    assert cell.end["half"] == pytest.approx(4.303 * se) and cell.end["lo"] == pytest.approx(m - 4.303 * se)
    assert interval_text(cell.end) == f"{m:.2f} ± {4.303 * se:.2f}, a 95% t interval over 3 seeds (t = 4.30)"
    (two,) = grid_cells({}, runs[:2])
    assert two.end["t"] == pytest.approx(12.706) and two.end["half"] == pytest.approx(12.706 * 0.05 / 1)
    (one,) = grid_cells({}, runs[:1])
    assert one.end["half"] is None and interval_text(one.end) == "0.40, one seed: no interval"
    assert "t = 4.30 at 3 seeds, 12.71 at 2" in RULE_TEXT and "last 3 evaluation points" in RULE_TEXT


def test_cells_list_every_planned_setting_and_say_what_ran() -> None:
    runs = full_grid(seeds=1)
    cells = grid_cells(HEADER, runs)
    assert len(cells) == 3 * 4
    assert {c.status for c in cells if c.label == "softmax"} == {"sink"}
    assert all(c.n_run == 1 and c.planned == 3 and c.seeds_text() == "1 of 3 seeds run" for c in cells)
    settings = sorted({c.setting for c in cells})
    assert settings == [Setting("learned", 1e-3, 200), Setting("learned", 1e-2, 200),
                        Setting("rotary", 1e-3, 200), Setting("rotary", 1e-2, 200)]
    fewer = [r for r in runs if r["config"]["positions"] == "rotary"]
    cells = grid_cells(HEADER, fewer)
    assert sum(c.status == "not run" for c in cells) == 6 and len(cells) == 12
    shipped = {"sizes": {"seeds": 3}, "runs": [grun("standard", s, 1e-2, "rotary", SINK, steps=600) for s in range(3)]
               + [grun("gated", s, 1e-2, "rotary", GONE, steps=600) for s in range(3)]}
    cells = grid_cells(HEADER, fewer, shipped)
    gated = [c for c in cells if c.label == "gated"]
    assert len(gated) == 1 and gated[0].source == "shipped" and gated[0].setting == Setting("rotary", 0.01, 600)
    assert gated[0].n_sink == 0 and gated[0].n_transient == 3


def test_fix_verdict_every_some_none_untested() -> None:
    every = sink_claims(HEADER, full_grid()).fixes
    assert every.kind == "every" and len(every.held) == 8 and not every.failed
    assert every.headline == "A denominator bias (softmax1, sink logit b₀=0) removes the sink at every setting tried."
    assert every.text.startswith("A denominator bias (softmax1, sink logit b₀=0) removes the sink at every setting "
                                 "tried: softmax1 at learned, lr 0.001, 200 steps (no sink in 3 of 3 seeds; end "
                                 "weight 0.01 ± 0.00, a 95% t interval over 3 seeds (t = 4.30))")
    assert "partial" not in every.text
    # one seed of softmax1 at lr 1e-3 with rotary positions keeps its sink: "some", and the setting is named
    some = sink_claims(HEADER, full_grid(
        fix_curve=lambda lr, pos, s: SINK if (lr, pos, s) == (1e-3, "rotary", 0) else NONE)).fixes
    assert some.kind == "some" and some.headline.endswith("removes the sink at some settings only.")
    assert "Kept: softmax1 at rotary, lr 0.001, 200 steps (a sink in 1 of 3 seeds; end weight" in some.text
    assert set(some.failed) == {(f, Setting("rotary", 1e-3, 200)) for f in FIXES} and len(some.held) == 6
    none = sink_claims(HEADER, full_grid(fix_curve=SINK)).fixes
    assert none.kind == "none" and none.text.startswith(
        "A denominator bias (softmax1, sink logit b₀=0) removes the sink at none of the settings tried: it kept one at")
    # softmax without a sink anywhere: nothing to remove, so no setting tests the claim
    untested = sink_claims(HEADER, full_grid(soft_curve=NONE)).fixes
    assert untested.kind == "untested" and not untested.held and len(untested.skipped) == 8
    assert "no sink, but nothing to remove: softmax no sink in 3 of 3 seeds there" in untested.text
    # a fix that keeps a sink counts against the claim even where softmax has none
    assert sink_claims(HEADER, full_grid(soft_curve=NONE, fix_curve=SINK)).fixes.kind == "none"


def test_not_learned_cells_enter_no_verdict() -> None:
    runs = full_grid(fix_curve=lambda lr, pos, s: SINK if lr == 1e-3 else NONE)
    assert sink_claims(HEADER, runs).fixes.kind == "some"
    for r in runs:  # the fixes at lr 1e-3 never learned the copy: their sinks no longer count
        if r["config"]["lr"] == 1e-3 and r["config"]["variant"] != "standard":
            for p in r["probes"]:
                p["copy_loss"] = 1.5
    v = sink_claims(HEADER, runs).fixes
    assert v.kind == "every" and len(v.held) == 4
    assert "softmax1 at rotary, lr 0.001, 200 steps (not learned: 0 of 3 seeds learned the task)" in v.text
    for r in runs:
        if r["config"]["variant"] != "standard":
            for p in r["probes"]:
                p["bigram_excess"] = 0.2
    assert sink_claims(HEADER, runs).fixes.kind == "untested"


def test_softmax_verdict_every_some_none() -> None:
    assert sink_claims(HEADER, full_grid()).sinks.kind == "every"
    some = sink_claims(HEADER, full_grid(soft_curve=lambda lr, pos, s: NONE if pos == "learned" else SINK)).sinks
    assert some.kind == "some" and "in none at learned, lr 0.001, 200 steps (no sink in 3 of 3 seeds" in some.text
    mixed = sink_claims(HEADER, full_grid(soft_curve=lambda lr, pos, s: NONE if s == 2 else SINK)).sinks
    assert mixed.kind == "some" and "in some seeds at learned, lr 0.001, 200 steps (a sink in 2 of 3 seeds" in mixed.text
    assert sink_claims(HEADER, full_grid(soft_curve=NONE)).sinks.kind == "none"
    assert sink_claims(HEADER, full_grid(soft_curve=NONE)).sinks.headline == \
        "Softmax forms a sink at none of the settings tried."
    assert sink_claims(HEADER, full_grid(soft_curve=NONE, copy_loss=1.0)).sinks.kind == "none"
    assert sink_claims(HEADER, []).sinks.kind == "untested"


def test_partial_grids_say_what_ran() -> None:
    runs = full_grid()[:5]  # seed 0: softmax, softmax1, sink logit at learned 1e-3, then softmax, softmax1 at 1e-2
    v = sink_claims(HEADER, runs)
    assert v.fixes.kind == "every" and len(v.fixes.held) == 3
    assert "(no sink in 1 of 1 seed, 1 of 3 seeds run; end weight 0.01, one seed: no interval)" in v.fixes.text
    assert v.fixes.text.endswith("The grid is partial: 5 of the 36 runs of softmax, softmax1, sink logit b₀=0 so far, 5 cells with fewer seeds than "
                                 "planned, 7 of 12 cells not run yet; a verdict covers only what was run.")
    assert "The grid is partial: 2 of the 12 runs of softmax so far" in v.sinks.text
    assert v.fixes.headline == ("A denominator bias (softmax1, sink logit b₀=0) removes the sink at every setting "
                                "tried (the grid so far: 5 of its 36 runs).")
    # a cell with 2 of 3 seeds: its interval uses t at 1 degree of freedom
    two = [r for r in full_grid() if r["config"]["seed"] < 2]
    cell = next(c for c in grid_cells(HEADER, two) if c.label == "softmax")
    assert cell.seeds_text() == "2 of 3 seeds run" and cell.end["t"] == pytest.approx(12.706)


def test_transient_and_diverged_seeds() -> None:
    v = sink_claims(HEADER, full_grid(fix_curve=GONE)).fixes
    assert v.kind == "every" and "no sink in 3 of 3 seeds, a transient sink in 3" in v.text
    runs = full_grid()
    runs = [r for r in runs if not (r["config"]["variant"] == "softmax1" and r["config"]["lr"] == 1e-2
                                    and r["config"]["positions"] == "learned")]
    runs += [grun("softmax1", s, 1e-2, "learned", [0.05, 0.1], diverged_at=60) for s in range(3)]
    v = sink_claims(HEADER, runs).fixes
    assert "softmax1 at learned, lr 0.01, 200 steps (every seed diverged, 3 of 3 seeds run)" in v.text


def test_the_shipped_snapshot_verdict_is_true_of_its_cells() -> None:
    from attncore.training.io import load_result

    header, runs = load_grid()
    claims = sink_claims(header, runs, load_result("null_attention"))
    by = {(c.label, c.setting): c for c in claims.cells}
    shipped = Setting("rotary", 0.01, 600)
    assert by[("softmax", shipped)].status == "sink" and by[("gated", shipped)].n_sink == 0
    for label, s in claims.fixes.held:
        assert by[(label, s)].variant in DENOMINATOR and by[(label, s)].n_sink == 0 and by[("softmax", s)].status == "sink"
    for label, s in claims.fixes.failed:
        assert by[(label, s)].n_sink > 0 and by[(label, s)].learned
    assert (FIXES[0], shipped) in claims.fixes.held
    ran = sum(c.n_run for c in claims.cells if c.source == "grid")
    if ran < 54:
        assert f"The grid is partial: {ran} of the 54 runs of softmax, softmax1, sink logit b₀=0 so far" \
            in claims.fixes.text
    kinds = {"every": not claims.fixes.failed, "none": not claims.fixes.held,
             "some": bool(claims.fixes.held and claims.fixes.failed)}
    assert kinds[claims.fixes.kind]


def test_streaming_sentence_says_plainly_when_the_toy_does_not_reproduce_the_claim() -> None:
    from attncore.training.io import load_result
    from attncore.training.null_attention import summarise
    from attncore.training.sink_stats import mean_se
    from attncore.training.sink_verdicts import streaming_claim_sentence

    d = load_result("null_attention")
    soft = summarise(d["runs"])["softmax"]
    text = streaming_claim_sentence(soft, 16)
    e, a = soft["evict_bigram"]["mean"], soft["ablation_bigram"]["mean"]
    assert text.startswith("The toy does not reproduce StreamingLLM's claim that a window fails once the sink is "
                           "evicted: for softmax, evicting BOS from a sliding window of 16 tokens changes the loss")
    assert f"by {e:+.4f} nats (95% t interval" in text and f"every query by {a:+.4f} nats" in text
    assert f"{e:+.4f}" == "+0.0007" and f"{a:+.4f}" == "+0.0039"  # the shipped numbers the issue quotes
    hurts = {**soft, "evict_bigram": mean_se([0.20, 0.25, 0.22])}
    assert streaming_claim_sentence(hurts).startswith("The toy reproduces StreamingLLM's claim: for softmax")
    big_but_unsure = {**soft, "evict_bigram": mean_se([0.5, -0.4, 0.1])}
    assert streaming_claim_sentence(big_but_unsure).startswith("The toy does not reproduce")
    assert "No streaming test ran" in streaming_claim_sentence({**soft, "evict_bigram": mean_se([])})


def test_the_real_level_of_two_standard_errors() -> None:
    """Mean ± 2 standard errors over 3 seeds is an ~82% interval (t with 2 df: P(|T| < z) = z / sqrt(2 + z²)), over 2
    seeds ~70% (Cauchy: 2 atan(z) / π); the t quantiles give 95%."""
    from attncore.training.sink_stats import t_level

    assert t_level(2.0, 2) == pytest.approx(2 / math.sqrt(6), abs=1e-9)
    assert t_level(2.0, 1) == pytest.approx(2 * math.atan(2.0) / math.pi, abs=1e-9)
    assert t_level(4.303, 2) == pytest.approx(0.95, abs=1e-4) and t_level(12.706, 1) == pytest.approx(0.95, abs=1e-4)
    assert t_level(1.96, 10_000) == pytest.approx(0.95, abs=1e-3)


def test_a_repeated_seed_counts_once_in_a_cell() -> None:
    runs = full_grid(seeds=2)
    twice = runs + [grun("standard", 0, 1e-3, "rotary", NONE)]  # seed 0 again, another curve
    cell = next(c for c in grid_cells(HEADER, twice) if c.label == "softmax" and c.setting.lr == 1e-3
                and c.setting.positions == "rotary")
    assert cell.seeds == (0, 1) and cell.n_sink == 2 and cell.end["mean"] == pytest.approx(0.8)


def test_softmax_headline_counts_only_the_settings_where_it_learned() -> None:
    """Audit: 'every setting tried' was printed while two of the settings tried had not learned the task (they
    enter no verdict); the headline now says which settings it covers, counted from the cells."""
    runs = full_grid()
    for r in runs:  # softmax at lr 1e-3 never learns the copy: 2 of its 4 settings enter no verdict
        if r["config"]["lr"] == 1e-3 and r["config"]["variant"] == "standard":
            for p in r["probes"]:
                p["copy_loss"] = 1.5
    v = sink_claims(HEADER, runs).sinks
    assert v.kind == "every" and len(v.held) == 2 and len(v.skipped) == 2
    assert v.headline == "Softmax forms a sink at every setting where it learned the task (2 of the 4 settings tried)."
    assert v.text.startswith("Softmax forms a sink at every setting where it learned the task (2 of the 4 settings "
                             "tried): learned, lr 0.01, 200 steps")
    none = sink_claims(HEADER, [r for r in full_grid(soft_curve=NONE) if not (
        r["config"]["lr"] == 1e-3 and r["config"]["variant"] == "standard" and r["config"]["positions"] == "rotary")]
        + [r for r in runs if r["config"]["lr"] == 1e-3 and r["config"]["variant"] == "standard"
           and r["config"]["positions"] == "rotary"]).sinks
    assert none.kind == "none"
    assert none.headline == "Softmax forms a sink at none of the settings where it learned the task (3 of the 4 " \
        "settings tried)."
    # every setting learned: the plain wording
    assert sink_claims(HEADER, full_grid()).sinks.headline == "Softmax forms a sink at every setting tried."
