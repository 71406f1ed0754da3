"""The experiments command (a tiny smoke run) and the result files and model the app ships."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from attncore.errors import AttnInputError
from attncore.training import (
    RESULT_NAMES,
    RESULTS_DIR,
    load_model,
    load_result,
    load_shipped_model,
    next_char_distribution,
)
from attncore.training.experiments import SIZES, first_token_sinks_baseline, format_table, main
from tests.training_utils import SNIPPET

CORPUS = Path("/work/shared/data/tinyshakespeare.txt")
FALLBACK = SNIPPET * 40

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("exp")
    corpus = out / "corpus.txt"
    text = CORPUS.read_text(encoding="utf-8")[:30_000] if CORPUS.is_file() else FALLBACK
    corpus.write_text(text, encoding="utf-8")
    assert main(["all", "--out", str(out), "--scale", "tiny", "--corpus", str(corpus), "--threads", "1"]) == 0
    return out


def test_tiny_run_writes_three_complete_results_and_a_model(tiny_run: Path, capsys) -> None:
    for name in RESULT_NAMES:
        doc = load_result(name, tiny_run)
        assert doc["complete"] and doc["scale"] == "tiny" and doc["sizes"] == SIZES["tiny"][name]
        assert doc["command"].startswith("python -m attncore.training.experiments all")
        assert {"cpu", "torch", "device"} <= set(doc["machine"]) and doc["machine"]["device"] == "cpu"
        assert doc["git_commit"] and doc["wall_s"] > 0 and doc["corpus"]["chars"] > 0
        assert len(doc["table"]["rows"]) == len(doc["runs"])
        assert doc["claim"] and doc["finding"]
    m = load_model(tiny_run / "causal_model")
    assert m.config.variant == "standard" and m.meta["experiment"] == "lr_sweep"


def test_lr_sweep_table_and_best_model_agree_with_the_runs(tiny_run: Path) -> None:
    doc = load_result("lr_sweep", tiny_run)
    lrs = SIZES["tiny"]["lr_sweep"]["lrs"]
    assert [(r["variant"], r["lr"]) for r in doc["runs"]] == [
        (v, lr) for v in ("standard", "fully_scaled", "fully_scaled_rows") for lr in lrs]
    for run, row in zip(doc["runs"], doc["table"]["rows"], strict=True):
        assert row == [run["variant"], run["lr"], run["final_train_loss"], run["final_val_loss"], run["diverged_at"]]
        assert run["final_train_loss"] == run["train_loss"][-1]
    std = [r for r in doc["runs"] if r["variant"] == "standard" and r["diverged_at"] is None]
    best = min(std, key=lambda r: r["final_train_loss"])
    assert doc["best"]["standard"]["lr"] == best["lr"]
    m = load_model(tiny_run / "causal_model")
    assert m.meta["final_val_loss"] == best["final_val_loss"] and m.config.lr == best["lr"]
    assert doc["reproduces"] == (doc["best"]["fully_scaled"]["final_train_loss"]
                                 > doc["best"]["standard"]["final_train_loss"])


def test_scaling_runs_keep_the_width_and_vary_the_head_dim(tiny_run: Path) -> None:
    doc = load_result("scaling", tiny_run)
    width = SIZES["tiny"]["scaling"]["config"]["d_model"]
    for run in doc["runs"]:
        assert run["config"]["d_model"] == width
        assert run["config"]["d_model"] // run["config"]["n_head"] == run["d_head"]
        assert len(run["saturated_share"]) == len(run["steps"])
    assert sorted({r["d_head"] for r in doc["runs"]}) == SIZES["tiny"]["scaling"]["d_heads"]


def test_sinks_runs_hold_heatmaps_and_streaming(tiny_run: Path) -> None:
    doc = load_result("sinks", tiny_run)
    assert [r["label"] for r in doc["runs"]] == ["softmax", "softmax1", "sink_logit", "gated"]
    cfg = SIZES["tiny"]["sinks"]["config"]
    for run in doc["runs"]:
        assert len(run["sink_alpha"]) == cfg["n_layer"] and len(run["sink_alpha"][0]) == cfg["n_head"]
        s = run["streaming"]
        assert s["n_tokens"] == 8 * cfg["context"] and s["window"] == SIZES["tiny"]["sinks"]["window"]
    assert doc["alpha_uniform"] == pytest.approx(first_token_sinks_baseline(cfg["context"]), rel=1e-3)


def test_load_result_errors(tmp_path: Path) -> None:
    with pytest.raises(AttnInputError, match="unknown"):
        load_result("nope")
    with pytest.raises(AttnInputError, match="no result"):
        load_result("sinks", tmp_path)
    (tmp_path / "sinks.json").write_text(json.dumps({"experiment": "scaling"}))
    with pytest.raises(AttnInputError, match="not a result"):
        load_result("sinks", tmp_path)


def test_format_table() -> None:
    t = format_table(["a", "bb"], [[1.23456, None], ["x", 2]])
    assert t.splitlines() == ["a      bb", "-----  --", "1.235  - ", "x      2 "]


# ---------------------------------------------------------------------------- what ships


@pytest.mark.parametrize("name", RESULT_NAMES)
def test_shipped_results_are_complete_cpu_runs(name: str) -> None:
    doc = load_result(name)
    assert doc["complete"] and doc["scale"] == "cpu" and doc["sizes"] == SIZES["cpu"][name]
    assert doc["corpus"]["name"] == "tinyshakespeare.txt"
    assert (RESULTS_DIR / f"{name}.json").stat().st_size < 500_000
    for run in doc["runs"]:
        # null_attention's first point is the untrained model (step 0: no training loss yet)
        first = 1 if name == "null_attention" else 0
        keys = ("train_loss", "val_loss") if name == "null_attention" else ("train_loss", "val_loss", "saturated_share")
        for key in keys:
            assert all(v is not None and math.isfinite(v) for v in run[key][first:]), (run["name"], key)
        assert len(run["train_loss"]) == len(run["steps"])


def test_shipped_lr_sweep_covers_five_log_spaced_rates_and_three_variants() -> None:
    doc = load_result("lr_sweep")
    lrs = sorted({r["lr"] for r in doc["runs"]})
    assert len(lrs) >= 5
    ratios = [b / a for a, b in zip(lrs, lrs[1:], strict=False)]
    assert max(ratios) == pytest.approx(min(ratios), rel=0.01)  # log-spaced
    assert {r["variant"] for r in doc["runs"]} == {"standard", "fully_scaled", "fully_scaled_rows"}


def test_shipped_model_is_the_best_standard_run_and_predicts_shakespeare() -> None:
    doc = load_result("lr_sweep")
    m = load_shipped_model()
    assert m.config.variant == "standard" and m.config.lr == doc["best"]["standard"]["lr"]
    assert m.meta["final_val_loss"] == doc["best"]["standard"]["final_val_loss"]
    size = sum(p.stat().st_size for p in (RESULTS_DIR / "causal_model").iterdir())
    assert size < 8 * 1024**2
    dist = dict(next_char_distribution(m, "First Citizen:\nBefore we proceed any further, hear me spea"))
    assert dist["k"] > 0.5  # a trained model, not a random one


def test_sinks_finding_says_what_the_rows_show() -> None:
    from attncore.training.experiments import sinks_finding

    no_sinks = [["softmax", 1.8, 0.03, 0.05, "0/12", 2.5, 1.78, 1.79, -0.01],
                ["softmax1", 1.8, 0.03, 0.04, "0/12", 2.4, 1.78, 1.78, 0.0]]
    text = sinks_finding(no_sinks, 0.074)
    assert "No head of any model became a first-token sink (every head" in text
    assert "does not lower the windowed loss" in text and "worse than either window" in text
    sinks = [["softmax", 1.8, 0.4, 0.9, "5/12", 1.7, 2.3, 1.8, 0.5],
             ["softmax1", 1.8, 0.03, 0.04, "0/12", 2.4, 1.78, 1.78, 0.0]]
    text = sinks_finding(sinks, 0.074)
    assert "Sink heads formed" in text and "lowers the windowed loss for softmax." in text
    assert "worse than either window" not in text
