"""attncore.decoder.eviction_read and the Evidence row on the eviction run: t intervals against a hand
computation, the winner and the split against sums done by hand, every sentence from its numbers, and the
verdict rule flipped by counterfactual cells."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from attncore.decoder import eviction_read as er
from attncore.decoder.eviction_run import load_eviction_run, run_budgets
from attncore.evidence import CAVEAT, FAILS, HOLDS, Measurement, Setting, claim
from attncore.evidence.eviction import cells, measure_sink_recovery, shipped_run_path
from attncore.stats import t_critical

T = 640  # steps; a budget of 64 leaves 9 blocks of 64


def _noise(seed: int, scale: float = 0.05) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(T, generator=g, dtype=torch.float64) * scale


def _pl(levels: dict[str, float], budget: int = 64, seed: int = 0) -> er.PolicyLosses:
    """Dense at 2 nats + noise; each policy ``levels[p]`` nats above it past the budget, plus its own noise."""
    dense = 2.0 + _noise(seed)
    rows = {}
    for i, (p, d) in enumerate(levels.items()):
        x = dense.clone()
        x[budget:] += d + _noise(seed + 1 + i)[budget:]
        rows[(p, budget)] = x
    first = {(p, budget): 0.01 * (i + 1) for i, p in enumerate(levels)}
    return er.PolicyLosses("t", T + 1, dense, rows, first)


def test_block_interval_is_the_t_interval_of_block_means() -> None:
    x = torch.cat([torch.full((64,), v, dtype=torch.float64) for v in (1.0, 2.0, 3.0)])
    iv = er.block_interval(x)
    half = t_critical(2) * 1.0 / math.sqrt(3)
    assert (iv.mean, iv.n) == (2.0, 3)
    assert iv.lo == pytest.approx(2.0 - half) and iv.hi == pytest.approx(2.0 + half)
    one = er.block_interval(torch.ones(70))
    assert one.n == 1 and math.isnan(one.lo)


def test_winner_ratio_and_sentence_follow_the_numbers() -> None:
    pl = _pl({"window": 1.0, "streaming": 0.2, "h2o": 0.1, "tova": 0.3})
    w = er.winner(pl, 64)
    assert (w.best, w.second) == ("h2o", "streaming")
    manual = math.exp(float(pl.rows[("h2o", 64)][64:].mean()) - float(pl.dense[64:].mean()))
    assert w.ratio == pytest.approx(manual, rel=1e-12)
    assert w.gap is not None and w.gap.mean == pytest.approx(
        float((pl.rows[("streaming", 64)] - pl.rows[("h2o", 64)])[64:].mean()))
    s = er.winner_sentence(pl)
    assert s.startswith(f"At 64 keys H2O is lowest ({w.ratio:.3f}× dense perplexity), {w.gap.mean:.3f} "
                        "nats/token below window + first 4 (95% t interval")
    # counterfactual: H2O and StreamingLLM within noise of each other -> a tie, not a win
    tie = _pl({"window": 1.0, "streaming": 0.1, "h2o": 0.1, "tova": 0.3})
    assert "within noise of" in er.winner_sentence(tie)


def test_split_and_its_sentence() -> None:
    pl = _pl({"window": 1.0, "streaming": 0.2, "h2o": 0.1, "tova": 0.3})
    sp = er.split(pl, 64)
    w = pl.rows[("window", 64)][64:] - pl.dense[64:]
    s = pl.rows[("streaming", 64)][64:] - pl.dense[64:]
    assert sp.window.mean == pytest.approx(float(w.mean()))
    assert sp.sink.mean == pytest.approx(float((w - s).mean()))
    assert sp.lacks.mean == pytest.approx(float(s.mean()))
    assert sp.explained == pytest.approx(float((w - s).mean() / w.mean()))
    assert sp.most.above_zero and sp.best_policy == "h2o"
    text = er.split_sentence(sp, "Prose")
    assert f"recovers {sp.sink.text()} ({sp.explained:.0%})" in text
    assert f"the remaining {sp.lacks.text()} is context the window lacks" in text
    assert f"the best policy, H2O, stays {sp.best.text()} above dense" in text
    short = er.PolicyLosses("t", 100, pl.dense[:99], {k: v[:99] for k, v in pl.rows.items()}, {})
    said = er.split_sentence(er.split(short, 64), "Prose")  # 35 tokens past the budget: no interval
    assert "no interval: fewer than 2 blocks of 64 tokens" in said and "too few tokens past the budget" in said
    assert "within noise" not in said and "nan" not in said
    flat = er.split(_pl({"window": 0.0, "streaming": 0.0}), 64)
    assert "within noise of dense" in er.split_sentence(flat, "Prose")


def test_first_token_sentence() -> None:
    pl = _pl({"window": 1.0, "streaming": 0.2, "h2o": 0.1, "tova": 0.3})
    s = er.first_token_sentence(pl)
    assert "at 64 keys (keeping them costs 4 of 64 slots, 6.2%)" in s
    assert "window 1.0%, window + first 4 2.0%, H2O 3.0%, TOVA 4.0%" in s


def _cell(explained: float, most_lo: float, window_lo: float = 0.5, beyond: tuple | None = None,
          text: str = "prose", budget: int = 128) -> dict:
    return {"text": text, "budget": budget, "explained": explained, "best": "tova" if beyond else "streaming",
            "others": ["h2o", "tova"], "window": (1.0, window_lo, 1.5), "sink": (explained, 0.1, 2.0),
            "lacks": (1 - explained, 0.05, 0.5), "most": (explained - 0.5, most_lo, most_lo + 0.4),
            "beyond": beyond}


def _m(cs: list[dict], decodes: int = 34) -> Measurement:
    return Measurement({"cells": tuple(cs), "decodes": decodes, "expected": 34})


def test_the_verdict_rule_flips_with_the_cells() -> None:
    j = claim("llm_sink_recovers").judge
    good = [_cell(0.8, 0.2, budget=b) for b in (128, 256)] + [_cell(0.7, 0.1, text="code")]
    h = j(_m(good))
    assert h.verdict == HOLDS and "recover 70% to 80%" in h.caveat and "all 3 text and budget cells" in h.caveat
    assert "no other policy beats the window + first 4 beyond noise" in h.caveat
    # one cell where the first tokens recover less than half: a caveat naming it
    mixed = j(_m([*good[:2], _cell(0.3, -0.4, text="code")]))
    assert mixed.verdict == CAVEAT and "not in code at 128 keys (30%)" in mixed.caveat
    # less than half everywhere: fails
    assert j(_m([_cell(0.2, -0.6), _cell(0.3, -0.6, text="code")])).verdict == FAILS
    # a partial run cannot hold for the budgets it lacks
    part = j(_m(good, decodes=4))
    assert part.verdict == CAVEAT and "only from 4 of 34 decodes" in part.caveat
    # a window that loses nothing: nothing to recover
    assert "no loss for the first tokens" in j(_m([_cell(0.8, 0.2, window_lo=-0.1)])).caveat
    # TOVA beyond the sink, significantly
    more = j(_m([_cell(0.8, 0.2, beyond=(0.1, 0.05, 0.15))]))
    assert "recovers significantly more than the first 4 in 1 of 1 (TOVA prose at 128 keys)" in more.caveat


def _write_run(path: Path, L: int = 161) -> None:
    header = {"kind": "header", "length": L, "budgets": list(run_budgets(L)), "policies": ["window", "streaming"],
              "texts": {"prose": {"name": "tiny"}}, "date": "d", "cpu": "c"}
    dense = (2.0 + _noise(1)[: L - 1]).tolist()
    b = run_budgets(L)[0]
    rows = [{"kind": "row", "text": "prose", "policy": "dense", "budget": None, "nll": dense}]
    for p, d in (("window", 1.0), ("streaming", 0.1)):
        x = [v + (d if i >= b else 0.0) + float(e) for i, (v, e) in enumerate(zip(dense, _noise(7 + len(rows)), strict=False))]
        rows.append({"kind": "row", "text": "prose", "policy": p, "budget": b, "nll": x,
                     "first_share": {"4": [0.0 if p == "window" else 4 / b] * 2}})
    path.write_text("".join(json.dumps(r) + "\n" for r in (header, *rows)), encoding="utf-8")


def test_measure_reads_a_run_file_and_says_when_it_cannot(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    _write_run(path)
    m = measure_sink_recovery(Setting(), path)
    assert not m.missing and m.num("decodes") == 3 and m.num("expected") == 17
    (c,) = m["cells"]
    pl = er.from_run(load_eviction_run(path), "prose")
    sp = er.split(pl, c["budget"])
    assert c["explained"] == pytest.approx(sp.explained) and c["most"][1] == pytest.approx(sp.most.lo)
    assert "3 of 17 decodes in" in m.scale
    gone = measure_sink_recovery(Setting(), tmp_path / "nothing.jsonl")
    assert gone.missing.startswith("the shipped eviction run cannot be read: no stored eviction run at")
    assert str(tmp_path) not in gone.missing


def test_the_shipped_file_and_its_progress() -> None:
    run = load_eviction_run(shipped_run_path())
    total = er.expected_decodes(run)
    assert total == 34
    said = er.run_progress(run)
    assert said == ("all 34 decodes." if len(run.rows) >= 34 else
                    f"{len(run.rows)} of 34 decodes; the rest still to be computed.")
    cs = cells(run)
    assert cs, "the shipped run holds at least dense, the window and the window + first 4 at one budget"
    m = measure_sink_recovery(Setting())
    assert claim("llm_sink_recovers").judge(m).verdict in (HOLDS, CAVEAT, FAILS)
    assert "/work" not in m.scale and "/home" not in m.scale
