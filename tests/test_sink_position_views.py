"""ui.views.sink_position: where the sink goes, the eviction test and Gu et al.'s inputs, every sentence
against the numbers it is made from, with counterfactual numbers (no model: hand-made results)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from attncore.decoder.position import FirstTokenDeletion, GuRow
from attncore.decoder.streaming import StreamResult, StreamSetting
from tests.chart_data import decode
from ui.views import sink_position as view


def _deletion(after_sinks: int, gap: float = 2e-5, cost: float = 0.29) -> FirstTokenDeletion:
    """3 layers x 4 heads: 10 heads above 0.3 on the first token, 0 on token 1, ``after_sinks`` once first."""
    first = torch.full((3, 4), 0.1)
    first.view(-1)[:10] = 0.9
    second = torch.full((3, 4), 0.01)
    new = torch.full((3, 4), 0.1)
    new.view(-1)[:after_sinks] = 0.8
    dense = torch.full((15,), 3.0)
    deleted = dense[1:] + cost
    masked = torch.cat([dense[:1], deleted + gap])
    return FirstTokenDeletion(
        length=16, nll_dense=dense, nll_masked=masked, nll_deleted=deleted, score_first=first,
        score_second=second, score_new_first=new, layer=11, norm_first=23841.9, norm_second=168.2,
        norm_new_first=23454.4, norm_rest=133.7, dims_first=torch.tensor([507, 247]),
        values_first=torch.tensor([23674.5, 1749.3]), dims_new_first=torch.tensor([507, 14]),
        values_new_first=torch.tensor([23289.0, 868.6]))


def test_deletion_sentence_and_table_read_the_numbers() -> None:
    d = _deletion(9)
    text = view.deletion_sentence(d, 0.3)
    assert text.startswith("Hiding the first token from every later query is deleting it: on tokens 2–15 the "
                           "two give the same loss within 2e-05 nats.")
    assert ("Deleted, the sink moves to the new first token: 9 of 12 heads give it more than 0.3 of their weight, "
            "against 10 on the original first token and 0 on the same token while it was second.") in text
    assert "after layer 11 is 23,454 (the original first token's 23,842, the other tokens' median 133.7)" in text
    assert "1 of its 2 largest dims are the original first token's" in text
    assert "by +0.290 nats per token: the cost of losing the text's first word." in text
    # counterfactual: the sink does not follow
    other = view.deletion_sentence(_deletion(2, cost=-0.01), 0.3)
    assert "the sink does not simply move: 2 of 12 heads" in other and "by -0.010 nats" in other
    f = view.deletion_frame(d, 0.3)
    assert f["sink heads (> 0.3)"].tolist() == [10, 0, 9]
    assert f["residual norm after layer 11"].tolist() == pytest.approx([23841.9, 168.2, 23454.4], abs=0.06)
    assert f["largest dims (value)"].tolist() == ["507 (23,674), 247 (1,749)", "—", "507 (23,289), 14 (869)"]
    fig = view.deletion_figure(d, 0.3)
    assert fig.layout.meta["view"] == "dec_deletion"
    ys = [np.asarray(decode(t.y), dtype=float) for t in fig.data]
    assert [y.tolist() for y in ys] == [[4, 4, 2], [0, 0, 0], [4, 4, 1]]


def _run(dense: float, alone: float, kept: float, W: int = 256, L: int = 2048) -> StreamResult:
    settings = (StreamSetting(None), StreamSetting(W), StreamSetting(W, 1), StreamSetting(W, 4))
    rows = [math.log(dense), math.log(alone), math.log(kept * 1.1), math.log(kept)]
    nll = torch.tensor(rows, dtype=torch.float32)[:, None].expand(4, L - 1).clone()
    return StreamResult(settings, nll, L, (1.0,) * 4)


def test_eviction_reads_the_run_and_says_its_ratios() -> None:
    e = view.eviction(_run(36.78, 77.02, 40.28))
    assert e is not None and (e.window, e.sinks, e.length) == (256, 4, 2048)
    assert e.alone_ratio == pytest.approx(77.02 / 36.78, rel=1e-5)
    text = view.eviction_sentence(e)
    assert text == ("Evicting the sink is StreamingLLM's window: at W = 256 of 2,048 tokens, a window alone raises "
                    "perplexity past it 2.09× over dense (77.02 against 36.78); keeping the first 4 tokens brings "
                    "it to 1.095×.")
    other = view.eviction_sentence(view.eviction(_run(10.0, 35.0, 10.5)))
    assert "3.50× over dense" in other and "1.050×" in other
    assert view.eviction(_run(36.78, 77.02, 40.28, W=128)) is None  # no window of 256 in that run
    assert "lacks" in view.eviction_sentence(None)


def _gu(name: str, prefix: str, sinks: int, top: int) -> GuRow:
    score = torch.full((2, 5), 0.1)
    score.view(-1)[:sinks] = 0.5
    tf = torch.zeros(2, 5)
    tf.view(-1)[:top] = 0.9
    return GuRow(name=name, prefix=prefix, first_score=score, top_first=tf, length=64)


def test_gu_table_and_sentence_follow_the_shares() -> None:
    rows = (_gu("natural text", "", 8, 8), _gu("random tokens", "", 7, 6), _gu("one token repeated", "", 0, 0),
            _gu("natural text", "\n", 8, 9), _gu("random tokens", "\n", 8, 8),
            _gu("one token repeated", "\n", 8, 8))
    f = view.gu_frame(rows)
    assert f["sink heads, ε = 0.3 (%)"].tolist() == [80.0, 70.0, 0.0, 80.0, 80.0, 80.0]
    assert f["sink heads, ε = 0.8 (%)"].tolist() == [0.0] * 6
    assert f["largest weight on token 0 (%)"].tolist() == [80.0, 60.0, 0.0, 90.0, 80.0, 80.0]
    assert f["first token"].tolist()[:1] == ["as is"] and f["first token"].tolist()[3] == "'\\n' put first"
    text = view.gu_sentence(rows)
    assert text.startswith("Sink heads (score > 0.3) at 64 tokens: natural text 80.0%, random tokens 70.0%, one "
                           "token repeated 0.0%. With '\\n' put first: natural text 80.0%")
    assert "the sink is gone; put a different token first and it returns" in text
    same = rows[:5] + (_gu("one token repeated", "\n", 1, 0),)
    assert "does not change the repeated input's sink heads much" in view.gu_sentence(same)
    cap = view.gu_caption("SmolLM2-135M-Instruct", 64, 7)
    assert "arXiv 2410.10781" in cap and "(seed 7)" in cap and "repeated 64 times" in cap


def test_benchmarks_doc_quotes_the_shipped_runs_eviction_test() -> None:
    """docs/benchmarks.md's eviction numbers are the shipped StreamingLLM run's, read by the page's own builder."""
    from pathlib import Path

    from attncore.decoder.stream_run import load_stream_run

    e = view.eviction(load_stream_run().result)
    assert e is not None
    doc = Path(__file__).resolve().parents[1] / "docs" / "benchmarks.md"
    readme = " ".join(doc.read_text(encoding="utf-8").split())
    assert (f"the window of {e.window} alone gives {e.alone:.2f} against dense {e.dense:.2f} "
            f"({e.alone_ratio:.2f}×)") in readme
    assert f"with the first {e.sinks} {e.kept:.2f} ({e.kept_ratio:.3f}×)" in readme
