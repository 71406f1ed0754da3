"""bench.training_gpu: its verdict follows the numbers; without CUDA it says so and trains nothing."""

from __future__ import annotations

import pytest
import torch

from bench import training_gpu


def test_the_verdict_follows_the_numbers() -> None:
    assert training_gpu.verdict(1.45, 3000, 210.0).startswith("target met")
    assert training_gpu.verdict(1.45, 4750, 340.0).startswith("target missed on time")
    assert training_gpu.verdict(1.52, 2500, None).startswith("target missed: best validation loss 1.520")
    assert training_gpu.verdict(None, None, None).startswith("no evaluation point")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only message; on CUDA it would train")
def test_without_cuda_it_prints_one_line(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sys.argv", ["bench.training_gpu"])
    training_gpu.main()
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1 and "no CUDA device" in out[0]


def test_a_tiny_run_reports_its_points_and_a_verdict() -> None:
    from attncore.training import TrainConfig
    from tests.training_utils import SNIPPET

    cfg = TrainConfig(n_layer=1, n_head=2, d_model=16, context=16, batch=4, steps=6, warmup=2, eval_every=3,
                      dropout=0.2)
    lines = list(training_gpu.run(cfg, SNIPPET * 3, "cpu", 5.0, name="cpu"))
    assert [ln.split()[1] for ln in lines[:2]] == ["3/6", "6/6"]
    assert "6 of 6 steps" in lines[2] and "dropout 0.2" in lines[2]
    assert lines[-1].startswith("target missed: best validation loss")  # a 6-step model is far from 1.47
