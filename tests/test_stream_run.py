"""The shipped StreamingLLM run (attncore/decoder/results/stream_2048.npz): the loader against the file,
the file against SmolLM2 recomputed live on a prefix, and the Evidence row it feeds (its rule flipped by
counterfactual stored runs)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch

import attncore.evidence.decoder as D
from attncore.decoder.stream_run import (
    SHIPPED_STREAM_FILE,
    STREAM_RUN_LENGTH,
    StreamRun,
    load_stream_run,
    run_settings,
    save_stream_run,
    shipped_stream_ids,
)
from attncore.decoder.streaming import StreamResult, StreamSetting, stream_losses
from attncore.errors import AttnInputError
from attncore.evidence import CAVEAT, FAILS, SHIPPED, UNTESTABLE, Setting, claim, evaluate

pytestmark = pytest.mark.usefixtures("one_torch_thread")
PREFIX = 256


@pytest.fixture(scope="module")
def run() -> StreamRun:
    return load_stream_run()


def test_loader_reads_the_shipped_file(run: StreamRun) -> None:
    r = run.result
    assert SHIPPED_STREAM_FILE.stat().st_size < 1_000_000
    assert r.settings == run_settings() and len(r.settings) == 16
    assert r.length == STREAM_RUN_LENGTH == 2048
    assert r.nll.shape == (16, 2047) and r.nll.dtype == torch.float32
    assert bool(torch.isfinite(r.nll).all()) and float(r.nll.min()) >= 0.0
    assert len(r.seconds) == 16 and all(s > 0 for s in r.seconds)
    assert run.seconds_per_pass == pytest.approx(sum(r.seconds) / 16)
    for i, s in enumerate(r.settings):  # perplexity recomputed from the stored row
        assert r.ppl(s) == pytest.approx(math.exp(float(np.mean(r.nll[i].numpy().astype(np.float64)))))
        start = s.window or 0
        assert r.ppl(s, start) == pytest.approx(math.exp(float(np.mean(r.nll[i, start:].double().numpy()))))
    h = run.header
    for key in ("command", "cpu", "cores", "torch", "threads", "commit", "date", "model", "text", "length"):
        assert key in h, key
    assert h["length"] == 2048 and h["model"] == D.MODEL_LABEL and "Coriolanus" in h["text"]
    assert h["command"].startswith("python -m attncore.decoder.stream_run")


def test_save_and_load_round_trip(tmp_path: Path) -> None:
    settings = (StreamSetting(None), StreamSetting(8), StreamSetting(8, 4))
    nll = torch.rand(3, 31, generator=torch.Generator().manual_seed(0))
    r = StreamResult(settings, nll, 32, (0.5, 0.25, 0.125))
    save_stream_run(tmp_path / "x.npz", r, {"model": "m", "length": 32})
    back = load_stream_run(tmp_path / "x.npz")
    assert back.result.settings == settings and back.result.length == 32
    assert torch.equal(back.result.nll, nll) and back.result.seconds == (0.5, 0.25, 0.125)
    assert back.header == {"model": "m", "length": 32}
    with pytest.raises(AttnInputError, match="no stored"):
        load_stream_run(tmp_path / "missing.npz")


@pytest.mark.slow
def test_stored_losses_equal_smollm2_on_a_prefix(run: StreamRun) -> None:
    """A causal model's loss at query i depends on tokens 0..i + 1 only: the first 255 stored losses of a
    setting equal a live pass over the first 256 tokens (dense, and a window with the first 4 kept)."""
    try:
        from attncore.models import load_model

        lm = load_model("smollm2")
    except (AttnInputError, ImportError, OSError) as exc:
        pytest.skip(f"SmolLM2 cannot be loaded here: {exc}")
    ids = shipped_stream_ids(lm.tokenizer, PREFIX)
    assert torch.equal(ids, shipped_stream_ids(lm.tokenizer)[:, :PREFIX])
    settings = (StreamSetting(None), StreamSetting(64, 4))
    live = stream_losses(lm.model, ids, settings)
    r = run.result
    for i, s in enumerate(settings):
        stored = r.nll[r.index(s), : PREFIX - 1]
        np.testing.assert_allclose(live.nll[i].numpy(), stored.numpy(), atol=1e-4, rtol=0)


def _variant(run: StreamRun, path: Path, copy: dict[StreamSetting, StreamSetting]) -> Path:
    """The shipped run with some rows replaced by others' (``copy``: target -> source), saved to ``path``."""
    r = run.result
    nll = r.nll.clone()
    for target, source in copy.items():
        nll[r.index(target)] = r.nll[r.index(source)]
    save_stream_run(path, StreamResult(r.settings, nll, r.length, r.seconds), run.header)
    return path


def test_evidence_row_reads_the_shipped_run(run: StreamRun) -> None:
    m = D.measure_window_shipped(Setting())
    assert not m.missing and m.basis == SHIPPED
    W = D.STREAM_WINDOW
    r = run.result
    assert m.num("L") == 2048 and m.num("W") == W
    assert m.num("ppl_window") == pytest.approx(r.ppl(StreamSetting(W), W))
    assert m.num("ppl_keep4") == pytest.approx(r.ppl(StreamSetting(W, 4), W))
    d, se = r.delta(StreamSetting(W), StreamSetting(None), W)
    assert m.num("d_window") == pytest.approx(d) and m.err("d_window") == pytest.approx(se)
    assert "2,048 tokens" in m.scale and "shipped run" in m.scale and run.header["date"] in m.scale
    row = evaluate(claim("llm_window_2048"), Setting())
    assert row.measured.startswith("at 2,048 tokens, perplexity past 256 tokens")
    assert row.judgement == claim("llm_window").judge(m)  # the live row's rule


def test_counterfactual_stored_runs_flip_the_verdict(run: StreamRun, tmp_path: Path) -> None:
    """Stored runs where evicting the first tokens changes nothing: the window's rows copied from dense
    (the window misses nothing: fails), or the first 4 kept copied from the window alone (no recovery)."""
    W = D.STREAM_WINDOW
    dense, win, keep4 = StreamSetting(None), StreamSetting(W), StreamSetting(W, 4)
    j = claim("llm_window_2048").judge
    shipped = j(D.measure_window_shipped(Setting())).verdict
    nothing_missed = D.measure_window_shipped(Setting(), _variant(run, tmp_path / "a.npz", {win: dense,
                                                                                            keep4: dense}))
    assert j(nothing_missed).verdict == FAILS and "nothing outside it was missed" in j(nothing_missed).caveat
    no_recovery = D.measure_window_shipped(Setting(), _variant(run, tmp_path / "b.npz", {keep4: win}))
    assert j(no_recovery).verdict == CAVEAT and "recover only 0%" in j(no_recovery).caveat
    assert j(nothing_missed).verdict != shipped or j(no_recovery).verdict != shipped
    gone = D.measure_window_shipped(Setting(), tmp_path / "gone.npz")
    assert gone.missing and evaluate(claim("llm_window_2048"), Setting()).judgement.verdict != UNTESTABLE


def test_captions_are_made_from_the_stored_numbers(run: StreamRun) -> None:
    from ui.views.decoder import stream_run_caption, streaming_llm_sentence

    r = run.result
    text = streaming_llm_sentence(r)
    base = r.ppl(StreamSetting(None), 1024)
    for s in (StreamSetting(1024), StreamSetting(1024, 1), StreamSetting(1024, 4)):
        assert f"{s.label} {r.ppl(s, 1024):,.2f} ({r.ppl(s, 1024) / base:.3f}× dense)" in text
    assert "0 + 1024 (window) 5158.07; 4 + 1020 5.40;" in text and f"dense {base:,.2f}" in text
    # Table 2's Llama-2-7B row stands apart, with its own model, text and cache
    assert text.index("Table 1 (Llama-2-13B") < text.index("Table 2 (Llama-2-7B, 400K tokens")
    assert "1 + 4095 11.88; 2 + 4094 10.51" in text and "1 + 1023" not in text and "5.33" not in text
    short = StreamResult(r.settings[:4], r.nll[:4], r.length, r.seconds[:4])  # no window of 1,024
    assert "Here" not in streaming_llm_sentence(short)
    cap = stream_run_caption(run)
    assert f"{sum(r.seconds):.0f} s in all" in cap and run.header["commit"][:10] in cap and "2,048 tokens" in cap


def test_benchmarks_doc_table_is_the_shipped_run(run: StreamRun) -> None:
    """docs/benchmarks.md's table of the shipped run says what the file holds."""
    readme = (Path(__file__).resolve().parent.parent / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    r = run.result
    for W in sorted({s.window for s in r.settings if s.window}):
        base = r.ppl(StreamSetting(None), W)
        cells = [f"{W:,}", f"{base:.2f}", f"{r.ppl(StreamSetting(W), W):.2f} "
                 f"({r.ppl(StreamSetting(W), W) / base:.2f}×)"]
        cells += [f"{r.ppl(StreamSetting(W, k), W):.2f} ({r.ppl(StreamSetting(W, k), W) / base:.3f}×)" for k in (1, 4)]
        assert "| " + " | ".join(cells) + " |" in readme, cells
    assert f"{sum(r.seconds):.0f} s" in readme and f"Dense over all 2,047 predictions: {r.ppl(StreamSetting(None)):.2f}" in readme
    m = D.measure_window_shipped(Setting())
    recovered = (m.num("d_window") - m.num("d_keep4")) / m.num("d_window")
    assert f"+{m.num('d_window'):.3f} ± {m.err('d_window'):.3f} nats/token" in " ".join(readme.split())
    assert f"recover {recovered:.0%} of it" in readme and f"{m.num('ppl_window') / m.num('ppl_dense'):.2f}×" in readme
    assert claim("llm_window_2048").judge(m).verdict == "holds" and "holds by the live row's rule" in readme
