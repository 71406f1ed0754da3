"""The induction run (attncore.training.induction_model / induction): the scores against a from-scratch loop
and the real decoder's definition, a hand-built induction circuit scoring high and a random model low, the
phase-change rule on counterfactual curves, a short seeded run learning to copy, determinism, and the shipped
file recomputed at its first evaluation points."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from attncore.errors import AttnInputError
from attncore.synthetic import make_generator
from attncore.training.induction import (
    FILE,
    formed,
    load_runs,
    run_record,
    seed_summary,
    summarize,
    train_induction,
)
from attncore.training.induction_model import (
    VOCAB,
    AttentionOnly,
    copy_losses,
    hand_built_circuit,
    induction_config,
    induction_score,
    phase_change,
    previous_token_score,
    repeated_batch,
    training_batch,
    uniform_scores,
)
from attncore.training.io import RESULTS_DIR

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _reference_scores(w: torch.Tensor, T: int) -> tuple[float, float]:
    """(induction, previous-token) score of one (2T, 2T) map by plain loops."""
    ind = sum(float(w[i, i - T + 1]) for i in range(T, 2 * T)) / T
    prev = sum(float(w[i, i - 1]) for i in range(1, 2 * T)) / (2 * T - 1)
    return ind, prev


def test_scores_match_a_loop_and_the_decoders_stripe() -> None:
    T = 7
    g = make_generator(3)
    w = torch.rand(2, 3, 2 * T, 2 * T, generator=g, dtype=torch.float64).tril()
    w = w / w.sum(-1, keepdim=True)
    ind, prev = induction_score(w, T), previous_token_score(w)
    for a in range(2):
        for b in range(3):
            ri, rp = _reference_scores(w[a, b], T)
            assert float(ind[a, b]) == pytest.approx(ri, rel=1e-12)
            assert float(prev[a, b]) == pytest.approx(rp, rel=1e-12)
    # attncore.decoder.probe's stripe: queries i >= T on key i - (T - 1)
    diag = torch.diagonal(w, offset=-(T - 1), dim1=-2, dim2=-1)
    start = max(T, T - 1) - (T - 1)
    assert torch.allclose(diag[..., start:].mean(-1), ind)


def test_hand_built_circuit_scores_high_and_copies() -> None:
    V, T = VOCAB, 8
    m = hand_built_circuit(V, T)
    g = make_generator(0)
    first = torch.stack([torch.randperm(V, generator=g)[:T] for _ in range(16)])  # no token twice in a copy
    ids = torch.cat([first, first], dim=1)
    with torch.no_grad():
        logits, w = m(ids)  # w: (N, B, H, L, L)
    ind = induction_score(w, T).mean(1)  # (N, H)
    prev = previous_token_score(w).mean(1)
    # exactly 1 - 1/(2T): query T's token also matches key 0 (whose layer-0 head can only attend to itself,
    # so its "previous token" is its own), and splits its weight in half between key 0 and key 1
    assert float(ind[1, 0]) == pytest.approx(1 - 1 / (2 * T), abs=1e-6)
    assert float(prev[0, 0]) == pytest.approx(1.0, abs=1e-6)
    assert float(ind[0, 0]) < 0.2 and float(prev[1, 0]) < 0.3  # each head does its own job only
    first_loss, second = copy_losses(logits, ids)
    assert second < 0.25 < math.log(V) * 0.5 < first_loss  # query T splits: about ln 2 / (T - 1)


def test_random_model_scores_low_and_cannot_copy() -> None:
    T = 16
    m = AttentionOnly(VOCAB, 2 * T, 64, 2, 1, make_generator(0))
    ids = repeated_batch(32, T, make_generator(1))
    with torch.no_grad():
        logits, w = m(ids)
    assert float(induction_score(w, T).max()) < 0.15 and float(previous_token_score(w).max()) < 0.2
    first, second = copy_losses(logits, ids)
    assert abs(second - first) < 0.3 and first > math.log(VOCAB) - 0.5


def test_training_batch_repeats_a_varied_period() -> None:
    T = 16
    ids = training_batch(200, T, make_generator(5))
    periods = []
    for row in ids:
        P = next(p for p in range(T, 1, -1) if torch.equal(row[2 * T - p:], row[2 * T - 2 * p: 2 * T - p]))
        periods.append(P)
    assert min(periods) >= T // 4 and max(periods) == T and len(set(periods)) > T // 2
    assert torch.equal(repeated_batch(3, T, make_generator(5))[:, :T], repeated_batch(3, T, make_generator(5))[:, T:])


def test_phase_change_rule_on_counterfactual_curves() -> None:
    steps = [0, 100, 200, 300, 400, 500]
    sudden = phase_change(steps, [4.0, 4.0, 3.9, 1.0, 0.2, 0.1])
    assert sudden.step == 250 and sudden.rate == pytest.approx(29.0)
    assert sudden.begins == 300 and sudden.ends == 400 and (sudden.before_index, sudden.after_index) == (2, 4)
    late = phase_change(steps, [4.0, 4.0, 4.0, 4.0, 3.9, 0.5])
    assert late.step == 450 and late.ends == 500
    flat = phase_change(steps, [4.0] * 6)
    assert flat.fall == 0 and flat.begins is None and flat.ends is None
    with pytest.raises(AttnInputError):
        phase_change([0], [4.0])


def _record(ind_after: float, second: float, first: float = 4.2) -> dict:
    return {"config": {"seed": 0}, "steps": [0, 50, 100], "loss_first": [4.2, 4.2, first],
            "loss_second": [4.2, 3.0, second], "induction": [[[0.0], [0.02]], [[0.0], [0.3]], [[0.0], [ind_after]]],
            "previous": [[[0.05], [0.0]], [[0.4], [0.0]], [[0.6], [0.0]]], "prev_head": [0, 0], "ind_head": [1, 0]}


def test_formed_rule_turns_with_the_numbers() -> None:
    assert formed(seed_summary(_record(0.9, 0.1)))
    assert not formed(seed_summary(_record(0.3, 0.1)))  # the score too low
    assert not formed(seed_summary(_record(0.9, 2.5)))  # the second copy not learned
    s = summarize([_record(0.9, 0.1), _record(0.3, 0.1)])
    assert s["n"] == 2 and s["n_formed"] == 1 and s["ind_after"]["mean"] == pytest.approx(0.6)
    assert s["phase_step"]["half"] is not None and s["seeds"][0]["ind_before"] == pytest.approx(0.02)


SHORT = {"copy": 8, "d_model": 64, "batch": 64, "steps": 400, "lr": 2e-2, "eval_every": 50}


@pytest.mark.slow
def test_short_seeded_run_learns_to_copy() -> None:
    a = train_induction(induction_config(0, **SHORT))
    s = seed_summary(a.curves())
    assert a.loss_second[-1] < 0.5 * a.loss_first[-1], (a.loss_first, a.loss_second)
    assert a.loss_first[-1] > math.log(VOCAB) - 0.3  # the first copy stays unpredictable
    assert s["ind_before"] < 0.2 < 0.5 < s["ind_after"] and s["prev_before"] < 0.2 < 0.5 < s["prev_after"]
    assert s["formed"] and 0 < s["phase_step"] < SHORT["steps"]


def test_a_seed_gives_the_same_run_and_another_seed_another() -> None:
    cfg = induction_config(0, **{**SHORT, "steps": 40, "eval_every": 20})
    a, b = train_induction(cfg), train_induction(cfg)
    assert a.loss_second == b.loss_second and a.induction == b.induction and a.maps == b.maps
    assert a.batch_loss == b.batch_loss
    c = train_induction(cfg.replace(seed=1))
    assert c.batch_loss != a.batch_loss and c.loss_second[0] != a.loss_second[0]
    assert c.ids == a.ids  # the evaluation batch is the same for every seed


def test_progress_and_cancel() -> None:
    cfg = induction_config(1, copy=8, d_model=32, batch=8, steps=30, eval_every=10)
    seen: list[tuple] = []
    r = train_induction(cfg, progress=lambda *a: seen.append(a), cancel=lambda: len(seen) > 15)
    assert r.cancelled and r.steps[:2] == [0, 10] and r.steps[-1] == len(r.batch_loss)
    probes = [a for a in seen if a[4] is not None]
    assert [p[0] for p in probes][:2] == [0, 10] and probes[1][3] == r.loss_second[1]


def test_config_refuses_unknown_settings() -> None:
    with pytest.raises(AttnInputError):
        induction_config(0, layers=3)


def test_shipped_file_is_recomputed_at_its_first_points() -> None:
    header, runs = load_runs(RESULTS_DIR / FILE)
    if not runs:
        pytest.skip("no shipped induction run in this checkout")
    assert not any(part.startswith(("/", "~")) for part in header["command"].split())  # no machine path
    assert header["command"] == "python -m attncore.training.induction --out attncore/training/results"
    rec = next(r for r in runs if r["seed"] == 0)
    every = int(rec["config"]["eval_every"])
    again = run_record(train_induction(induction_config(0, steps=2 * every), device="cpu"))  # made on a CPU
    for k in ("loss_first", "loss_second"):
        assert again[k] == pytest.approx(rec[k][:3], abs=1e-5)
    np.testing.assert_allclose(again["induction"], rec["induction"][:3], atol=1e-5)
    np.testing.assert_allclose(again["previous"], rec["previous"][:3], atol=1e-5)
    assert [r["seed"] for r in runs] == [0, 1, 2] and summarize(runs)["n"] == 3


def test_uniform_scores_are_those_of_an_even_causal_map() -> None:
    T = 16
    w = torch.ones(2 * T, 2 * T, dtype=torch.float64).tril()
    w = w / w.sum(-1, keepdim=True)
    ind, prev = uniform_scores(T)
    assert float(induction_score(w, T)) == pytest.approx(ind, rel=1e-12)
    assert float(previous_token_score(w)) == pytest.approx(prev, rel=1e-12)
