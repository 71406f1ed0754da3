"""attncore.training.null_attention: statistics over seeds and the verdicts, fed counterfactual numbers
(each verdict must flip when its numbers do), and the shipped result."""

from __future__ import annotations

import math
import re
from typing import Any

import pytest

from attncore.errors import AttnInputError
from attncore.training import TrainConfig, load_result
from attncore.training.null_attention import (
    SHIPPED,
    SIZES,
    check_sizes,
    mean_se,
    run_facts,
    shipped_model,
    shipped_task,
    slug,
    summarise,
)
from attncore.training.null_verdicts import verdicts


def fake_run(variant: str = "standard", seed: int = 0, *, bos_other: float = 0.9, bos_trigger: float = 0.01,
             nowhere_other: float = 0.0, nowhere_trigger: float = 0.0, gate_other: float | None = None,
             gate_trigger: float | None = None, value_ratio: float = 0.2, copy_loss: float = 0.01,
             excess: float = 0.02, ablation: float = 0.3, evict: float = 0.2, curve: list[float] | None = None,
             diverged_at: int | None = None, sink_init: float = 0.0) -> dict[str, Any]:
    """A result-file run record with chosen final numbers (1 layer, 1 head); the default BOS-weight curve
    holds its final value over the last 3 evaluation points (the sink rule's end weight)."""
    curve = curve or [0.05, 0.5 * bos_other, bos_other, bos_other, bos_other]
    steps = [0, 50, 100, 150, 200][: len(curve)]
    probes = [{"bos_other": [[v]], "bos_trigger": [[bos_trigger]], "nowhere_other": [[nowhere_other]],
               "nowhere_trigger": [[nowhere_trigger]], "gate_other": [None if gate_other is None else [gate_other]],
               "gate_trigger": [None if gate_trigger is None else [gate_trigger]], "alpha0": [[0.8 * v]],
               "sink_share": [float(0.8 * v > 0.3)], "value_ratio": [[value_ratio]], "copy_loss": copy_loss,
               "bigram_loss": 2.3 + excess, "bigram_entropy": 2.3, "bigram_excess": excess, "loss": 1.7,
               "copy_acc": 1.0, "n_trigger": 100, "n_other": 300} for v in curve]
    return {"config": {"variant": variant, "seed": seed, "sink_init": sink_init}, "steps": steps, "probes": probes,
            "diverged_at": diverged_at,
            "ablation": {"bigram_delta": ablation, "copy_delta": 0.001},
            "streaming": {"window_bigram": 2.5 + evict, "window_bos_bigram": 2.5, "full_bigram": 2.6,
                          "window_copy": 0.1, "window_bos_copy": 0.1}}


def jitter(k: int, scale: float = 0.01) -> float:
    return (k - 1) * scale


def base_runs(**soft: Any) -> list[dict[str, Any]]:
    """Softmax with a sink and softmax1 without one, 3 seeds each (small seed-to-seed spread)."""
    runs = []
    for k in range(3):
        runs.append(fake_run("standard", k, **{"bos_other": 0.9 + jitter(k), **soft}))
        runs.append(fake_run("softmax1", k, bos_other=0.01 + jitter(k, 0.001), nowhere_other=0.97 + jitter(k),
                             nowhere_trigger=0.05, value_ratio=0.9 + jitter(k), ablation=0.001 + jitter(k, 0.001),
                             evict=0.0 + jitter(k, 0.001), curve=[0.05, 0.4, 0.01 + jitter(k, 0.001)]))
    return runs


def lines_for(runs: list[dict[str, Any]], label: str) -> list[str]:
    return verdicts(summarise(runs), 16)[label]


def test_mean_se_from_scratch() -> None:
    s = mean_se([1.0, 2.0, 4.0, None])
    m = 7 / 3
    sd = math.sqrt(((1 - m) ** 2 + (2 - m) ** 2 + (4 - m) ** 2) / 2)
    assert s["mean"] == pytest.approx(m) and s["se"] == pytest.approx(sd / math.sqrt(3))
    assert s["n"] == 3 and s["min"] == 1.0 and s["max"] == 4.0
    assert mean_se([0.5])["se"] is None and mean_se([])["mean"] is None


def test_summary_numbers_and_curves() -> None:
    sm = summarise(base_runs())
    assert list(sm) == ["softmax", "softmax1"]
    s = sm["softmax"]
    assert s["n"] == 3 and s["n_sink"] == 3 and s["n_learned"] == 3 and s["crossings"] == [50, 50, 50]
    assert s["bos_other"]["mean"] == pytest.approx(0.9)
    c = s["curves"]["bos_other_curve"]
    assert c["steps"] == [0, 50, 100, 150, 200] and c["max"][-1] == pytest.approx(0.91) and c["min"][-1] == pytest.approx(0.89)
    one = sm["softmax1"]
    assert one["n_sink"] == 0 and one["n_crossed"] == 3  # crossed 0.3 at step 50, gone by the end


def test_sink_verdict_flips_with_the_numbers() -> None:
    text = lines_for(base_runs(), "softmax")[1]
    assert text.startswith("softmax forms a sink in 3 of 3 seeds by step 50") and "0.900 ± 0.006" in text
    weak = lines_for(base_runs(bos_other=0.1, curve=[0.05, 0.1, 0.1]), "softmax")[1]
    assert weak.startswith("softmax does not form a sink (0 of 3 seeds above 0.3 at the end)")
    transient = lines_for(base_runs(), "softmax1")[1]
    assert "3 seeds crossed 0.3 on the way (step 50) and ended at or below it: a transient sink" in transient
    mixed = base_runs()
    mixed[0] = fake_run("standard", 0, bos_other=0.1, curve=[0.05, 0.1, 0.1])
    assert "forms a sink in 2 of 3 seeds only" in lines_for(mixed, "softmax")[1]


def test_overall_sentence_and_guo_et_al() -> None:
    overall = verdicts(summarise(base_runs()))["overall"][0]
    assert overall.startswith("Softmax forms a sink in 3/3 seeds. Without a sink at the end in any seed: softmax1.")
    assert ("non-trigger positions here: 0.90 at step 100, 0.90 at its last step (200); Guo et al.'s figure data "
            "(a file in their repository, not the paper's text) give 0.03 at step 100, 0.56 at step 300") in overall
    runs = base_runs(bos_other=0.1, curve=[0.05, 0.1, 0.1])
    assert verdicts(summarise(runs))["overall"][0].startswith("Softmax does not form a sink here (0/3 seeds)")
    runs = base_runs() + [fake_run("gated", k, bos_other=0.8) for k in range(3)]
    assert "Still with a sink in every seed: gated." in verdicts(summarise(runs))["overall"][0]


def test_no_sink_verdict_without_learning_the_task() -> None:
    runs = base_runs(copy_loss=1.5)
    lines = lines_for(runs, "softmax")
    assert lines[0].startswith("softmax learned the task in 0 of 3 seeds (")  # issue 32 F8: not "did not learn … in 0"
    assert "did not learn" not in lines[0]
    assert lines[1].startswith("No sink verdict for softmax")
    assert "learned the task in 0/3 seeds only, so no sink verdict" in verdicts(summarise(runs))["overall"][0]
    ok = lines_for(base_runs(), "softmax")[0]
    assert ok.startswith("softmax learned the task in 3 of 3 seeds (copy loss 0.010 ± 0.000 nats, 0 at best; at the "
                         "other positions its predictions are 0.020 ± 0.000 nats from the true bigram rows")


def test_comparison_with_softmax_flips() -> None:
    lower = lines_for(base_runs(), "softmax1")[2]
    assert lower.startswith("Its BOS weight from non-trigger positions is lower than softmax's")
    runs = base_runs()
    for r in runs:
        if r["config"]["variant"] == "softmax1":
            r["probes"][-1]["bos_other"] = [[0.9 + 0.02 * r["config"]["seed"]]]
    same = lines_for(runs, "softmax1")[2]
    assert "is not distinguishable from softmax's" in same


def test_nowhere_and_gate_verdicts_flip() -> None:
    assert "attends to nothing where it is not needed, and reads where it is" in lines_for(base_runs(), "softmax1")[3]
    runs = [r for r in base_runs() if r["config"]["variant"] == "standard"]
    runs += [fake_run("softmax1", k, bos_other=0.01, nowhere_other=0.2 + jitter(k), nowhere_trigger=0.05)
             for k in range(3)]
    assert "does not send most of its weight nowhere" in lines_for(runs, "softmax1")[3]
    gated = [fake_run("gated", k, bos_other=0.05, gate_other=0.1 + jitter(k), gate_trigger=0.8 + jitter(k))
             for k in range(3)]
    assert "it closes where the head is not needed" in lines_for(base_runs() + gated, "gated")[3]
    flipped = [fake_run("gated", k, bos_other=0.05, gate_other=0.8 + jitter(k), gate_trigger=0.1 + jitter(k))
               for k in range(3)]
    assert "more open where the head is not needed" in lines_for(base_runs() + flipped, "gated")[3]


def test_value_ablation_and_streaming_verdicts_flip() -> None:
    soft = lines_for(base_runs(), "softmax")
    assert "a value-state drain" in soft[2]
    # no sink, no drain: the same small value norm in a variant without a sink is only "smaller"
    assert "a value-state drain" not in lines_for(base_runs(), "softmax1")[4]
    assert "0.900 ± 0.006 times the mean value norm: smaller than a typical token's, but with no sink there is " \
        "nothing for it to drain" in lines_for(base_runs(), "softmax1")[4]
    assert "the model needs its BOS" in soft[3] and "+0.300" in soft[3]
    assert "evicting the sink hurts" in soft[4]
    flat = lines_for(base_runs(value_ratio=1.0, ablation=0.0, evict=0.0), "softmax")
    assert "not distinguishable from a typical token's" in flat[2]
    assert "BOS does not matter to it" in flat[3]
    assert "evicting BOS makes no difference" in flat[4]
    small = lines_for(base_runs(ablation=0.004, evict=0.003), "softmax")
    assert "a change beyond 2 standard errors but under 0.01 nats: BOS hardly matters to it" in small[3]
    assert "evicting BOS hardly matters" in small[4]
    relu = [fake_run("relu", k, bos_other=0.0, nowhere_other=0.99 + jitter(k, 0.001),
                     nowhere_trigger=0.8 + jitter(k)) for k in range(3)]
    assert "trigger positions included (with ReLU" in lines_for(base_runs() + relu, "ReLU")[3]


def test_one_seed_gives_numbers_but_no_comparison() -> None:
    runs = [fake_run("standard", 0), fake_run("softmax1", 0, bos_other=0.01, nowhere_other=0.97)]
    lines = lines_for(runs, "softmax1")
    assert "one seed, so no standard error and no verdict" in lines[2]
    assert "one seed" in lines[3]
    assert lines_for(runs, "softmax")[1].startswith("softmax forms a sink in 1 of 1 seed")


def test_diverged_seeds_are_named_and_left_out() -> None:
    runs = base_runs()
    runs.append(fake_run("softmax1", 3, diverged_at=12, curve=[0.05]))
    sm = summarise(runs)
    assert sm["softmax1"]["n"] == 4 and sm["softmax1"]["n_usable"] == 3
    assert "Seed 3 diverged at step 12." in lines_for(runs, "softmax1")[0]


def test_labels_slugs_and_sizes() -> None:
    assert slug("sink logit b₀=-5") == "sink_logit_b0_m5" and slug("ReLU") == "relu"
    assert list(SHIPPED.values()) == ["softmax", "softmax1", "sink logit b₀=0", "sink logit b₀=-5", "sigmoid",
                                      "gated", "ReLU"]
    assert SIZES["cpu"]["seeds"] >= 3 and SIZES["gpu"]["config"]["d_model"] == 256
    for sizes in SIZES.values():  # every scale is a valid run of every variant
        check_sizes(sizes)
        for changes in sizes["variants"]:
            TrainConfig(**{**sizes["config"], **changes})
    with pytest.raises(AttnInputError, match="streaming window"):
        check_sizes({**SIZES["tiny"], "window": 16})
    with pytest.raises(AttnInputError, match="no shipped model"):
        shipped_model("nope")


# ---------------------------------------------------------------------------- what ships


def shipped() -> dict[str, Any]:
    try:
        d = load_result("null_attention")
    except AttnInputError as exc:
        pytest.fail(f"the null_attention result does not ship: {exc}")
    if not d.get("complete"):
        pytest.fail("the shipped null_attention result is not complete")
    return d


def test_shipped_result_has_three_seeds_of_every_variant_and_its_models() -> None:
    d = shipped()
    sm = summarise(d["runs"])
    assert list(sm) == list(SHIPPED.values())
    for s in sm.values():
        assert s["n"] >= 3, s["label"]
    task = shipped_task()
    assert [task.vocab[i] for i in task.triggers] == d["task"]["triggers"]
    for name in SHIPPED:
        m = shipped_model(name)
        assert m.meta["seed"] == 0 and m.meta["label"] == SHIPPED[name] and m.config.n_layer == 1
    # every seed learned the task, so every sink verdict is drawn
    assert all(s["n_learned"] == s["n_usable"] == s["n"] for s in sm.values())


def check_null_attention_verdicts(d: dict[str, Any]) -> None:
    """Every variant's sink verdict names the counts and the mean it is computed from (a result file)."""
    sm = summarise(d["runs"])
    judged = verdicts(sm, (d.get("sizes") or {}).get("window"))
    for label, s in sm.items():
        lines = judged[label]
        assert lines[0].startswith(f"{label} learned the task in "
                                   f"{s['n_learned']} of {s['n_usable']} seed")
        if s["n_usable"] and s["n_learned"] == s["n_usable"]:
            n, k = s["n_usable"], s["n_sink"]
            want = (f"forms a sink in {k} of {n}" if k == n else "does not form a sink" if k == 0 else
                    f"forms a sink in {k} of {n} seeds only")
            assert want in lines[1], lines[1]
            shown = re.search(r"non-trigger positions put (\d+(?:\.\d+)?(?:e[-+]\d+)?)", lines[1]).group(1)
            mant, _, exp = shown.partition("e")
            last = 10 ** (-len(mant.partition(".")[2]) + int(exp or 0))  # the last digit printed
            assert abs(float(shown) - s["bos_end"]["mean"]) <= 0.5 * last, shown
            # the rule: the mean of the last 3 evaluation points, read off the curves here
            ends = [sum(c[-3:]) / 3 for c in (run_facts(r)["bos_other_curve"] for r in d["runs"]
                                              if r["label"] == label and r.get("diverged_at") is None)]
            assert k == sum(v > 0.3 for v in ends)


def test_shipped_verdicts_are_true_of_the_numbers() -> None:
    check_null_attention_verdicts(shipped())


def test_shipped_provenance_names_the_seeds_the_runs_used() -> None:
    """The tab's provenance line said 'seeds 0' (the command's default --seeds, which null_attention
    does not take) under three seeds per variant, and '1 layers, 1 heads'."""
    from ui.views.training_tables import provenance

    d = shipped()
    ran = sorted({r["config"]["seed"] for r in d["runs"]})
    assert ran == [0, 1, 2]
    line = provenance(d)
    assert "seeds 0, 1, 2." in line, line
    assert "Models: 1 layer, 1 head, d_model 64, context 64, batch 64, 600 steps, lr 0.01." in line, line
    # a file whose runs say nothing of their seeds falls back on the recorded list
    assert "seeds 4, 5." in provenance({"seeds": [4, 5], "runs": [{"label": "x"}]})


@pytest.mark.parametrize("se", [0.3, 0.04, 2e-3, 7e-5, 4e-6, 3e-7, 1e-9])
def test_a_nonzero_standard_error_never_prints_as_zero(se: float) -> None:
    """'0.00001 ± 0.00000' (sigmoid's BOS weight in a verdict) said the spread was zero; it was 4e-06."""
    from attncore.training.null_verdicts import _pm, _signed

    for text in (_pm({"mean": 2 * se, "se": se}), _signed({"mean": -2 * se, "se": se})):
        shown = float(text.split("±")[1])
        assert shown > 0 and abs(shown - se) <= 0.5 * se, text
        mean = float(text.split("±")[0])
        assert abs(abs(mean) - 2 * se) <= 0.5 * se + 1e-12, text


def test_the_measured_box_prints_small_weights_with_their_digits() -> None:
    """The tab's 'This run measured' box said 'softmax1 … (BOS weight 0.00 ± 0.00)' for 0.00034 ± 0.0001."""
    from ui.views.learned_sinks import measured_text

    def entry(mean: float, se: float) -> dict[str, Any]:
        return {"n_sink": 0, "n_usable": 3, "bos_end": {"mean": mean, "se": se}}

    text = measured_text({"softmax1": entry(3.4e-4, 1.0e-4), "sigmoid": entry(7.7e-6, 4e-6),
                          "ReLU": entry(0.0, 0.0), "softmax": {**entry(0.904, 0.074), "n_sink": 3}})
    assert "softmax1 0/3 seeds with a sink (BOS weight 0.0003 ± 0.0001)" in text
    assert "sigmoid 0/3 seeds with a sink (BOS weight 7.7e-06 ± 4e-06)" in text
    assert "ReLU 0/3 seeds with a sink (BOS weight 0.00 ± 0.00)" in text  # exactly zero in every seed
    assert "softmax 3/3 seeds with a sink (BOS weight 0.90 ± 0.07)" in text


def test_the_measured_numbers_are_the_end_weight_the_sink_rule_reads() -> None:
    """Audit: the 'This run measured' box and the Evidence sink rows printed the BOS weight at the last
    evaluation point (softmax 0.90, gated 0.13) beside a sink count decided by the mean of the last 3 points
    (0.88, 0.14). A seed whose last point alone is above 0.3 must print its end weight, below 0.3."""
    from attncore.evidence.shipped import BIAS_REMOVES_SINKS, SINKS_LEARNED, _sinks
    from attncore.training.null_attention import summarise
    from tests.test_sink_verdicts import grun
    from ui.views.learned_sinks import measured_text

    curve = {"standard": [0.1, 0.2, 0.25, 0.25, 0.31], "softmax1": [0.1, 0.05, 0.04, 0.03, 0.02]}
    runs = []
    for variant, c in curve.items():
        for seed in range(3):
            r = grun(variant, seed, 1e-2, "rotary", c, steps=200)
            runs.append(r)
    sm = summarise(runs)
    end = sum(curve["standard"][-3:]) / 3  # 0.27: no sink, though the last point reads 0.31
    assert sm["softmax"]["n_sink"] == 0 and sm["softmax"]["bos_other"]["mean"] == pytest.approx(0.31)
    text = measured_text(sm)
    assert f"softmax 0/3 seeds with a sink (BOS weight {end:.2f} ± 0.00)" in text, text
    m = _sinks.__wrapped__({"experiment": "null_attention", "runs": runs, "sizes": {"config": {"n_layer": 1}}})  # the reader, on these runs
    assert m.num("bos:softmax") == pytest.approx(end)
    for claim in (SINKS_LEARNED, BIAS_REMOVES_SINKS):
        assert f"softmax 0/3 seeds, BOS weight {end:.2f}" in claim.describe(m)


def test_the_sink_verdict_reads_the_mean_of_the_last_three_points() -> None:
    """The sink count was read from one evaluation point: a seed at 0.35, 0.34, 0.29 over steps 100-200 counted
    as no sink; the rule now averages the last 3 (0.327: a sink), and the shipped gated seed 2 (0.322, 0.296,
    0.282) is a transient sink that ends at 0.300, not above it."""
    soft = [fake_run("standard", k, curve=[0.05, 0.2, 0.35, 0.34, 0.29]) for k in range(3)]
    s = summarise(soft)["softmax"]
    assert s["n_sink"] == 3 and s["n_transient"] == 0 and s["end_steps"] == [100, 150, 200]
    assert s["bos_end"]["mean"] == pytest.approx((0.35 + 0.34 + 0.29) / 3)
    assert s["bos_other"]["mean"] == pytest.approx(0.29)  # the last point alone would say: no sink
    line = lines_for(soft, "softmax")[1]
    assert line.startswith("softmax forms a sink in 3 of 3 seeds by step 100") and "0.33" in line
    assert "over the last 3 evaluation points (steps 100–200)" in line
    fell = [fake_run("gated", k, curve=[0.05, 0.34, 0.322, 0.296, 0.282]) for k in range(3)]
    g = summarise(fell)["gated"]
    assert g["n_sink"] == 0 and g["n_transient"] == 3
    assert "3 seeds crossed 0.3 on the way (step 50) and ended at or below it: a transient sink" in \
        lines_for(fell, "gated")[1]
    shipped_gated = summarise(shipped()["runs"])["gated"]
    assert shipped_gated["n_sink"] == 0 and shipped_gated["n_transient"] == 1
    assert [p["transient"] for p in shipped_gated["per_seed"]] == [False, False, True]


def test_a_repeated_seed_counts_once() -> None:
    """Issue 32 F2: ``sk_vars=standard,standard`` trained each seed twice and counted the copies as seeds
    ('0 of 4 seeds', a standard error too small); a seed counts once, with the numbers of its first run."""
    runs = [fake_run("standard", k, bos_other=0.9 + jitter(k)) for k in range(2)]
    twice = runs + [fake_run("standard", k, bos_other=0.2) for k in range(2)]
    once, doubled = summarise(runs)["softmax"], summarise(twice)["softmax"]
    assert doubled["n"] == 2 and doubled["seeds"] == [0, 1]
    assert doubled["bos_other"] == once["bos_other"]
