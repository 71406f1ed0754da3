"""The experiments command (a tiny smoke run) and the result files and model the app ships."""

from __future__ import annotations

import hashlib
import json
import math
import re
import shutil
import statistics
from pathlib import Path

import pytest

from attncore.device import resolve_device
from attncore.errors import AttnInputError
from attncore.training import (
    RESULT_NAMES,
    RESULTS_DIR,
    load_model,
    load_result,
    load_shipped_model,
    next_char_distribution,
)
from attncore.training.experiment_specs import SIZES
from attncore.training.experiments import first_token_sinks_baseline, lrs_to_seed, main, parse_seeds
from attncore.training.record import curves_differ, format_table
from tests.training_utils import SNIPPET

CORPUS = Path("/work/shared/data/tinyshakespeare.txt")
SEEDED = ("lr_sweep", "scaling", "sinks")  # the experiments whose cells --seeds seeds (null_attention seeds itself)
FALLBACK = SNIPPET * 40

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("exp")
    corpus = out / "corpus.txt"
    text = CORPUS.read_text(encoding="utf-8")[:30_000] if CORPUS.is_file() else FALLBACK
    corpus.write_text(text, encoding="utf-8")
    assert main(["all", "--out", str(out), "--scale", "tiny", "--corpus", str(corpus), "--threads", "1",
                 "--seeds", "0,1,2"]) == 0
    return out


def test_tiny_run_writes_three_complete_results_and_a_model(tiny_run: Path, capsys) -> None:
    for name in RESULT_NAMES:
        assert load_result(name, tiny_run)["complete"]
    for name in SEEDED:
        doc = load_result(name, tiny_run)
        assert doc["complete"] and doc["scale"] == "tiny" and doc["sizes"] == SIZES["tiny"][name]
        assert doc["command"].startswith("python -m attncore.training.experiments all")
        # device-aware: the command trains where "auto" resolves (CUDA on a GPU machine)
        assert {"cpu", "torch", "device"} <= set(doc["machine"])
        assert doc["machine"]["device"] == str(resolve_device("auto"))
        assert doc["git_commit"] and doc["wall_s"] > 0 and doc["corpus"]["chars"] > 0
        # no folder of this machine (issue 44, item 9): the corpus by name and SHA-256, the command portable
        assert doc["corpus"]["sha256"] == hashlib.sha256((tiny_run / "corpus.txt").read_bytes()).hexdigest()
        assert "path" not in doc["corpus"] and str(tiny_run.parent) not in doc["command"]
        assert f"--out {tiny_run.name} --scale tiny --corpus corpus.txt" in doc["command"]
        assert doc["seeds"] == [0, 1, 2] and doc["runs_trained"] == len(doc["runs"]) and "reused" not in doc
        assert doc["claim"] and doc["finding"] and doc["source_setup"]
        for run in doc["runs"]:
            assert run["seed"] == run["config"]["seed"] and run["config"]["dropout"] == 0.0
            assert run["best_val_loss"] == min(run["val_loss"])
            assert run["val_loss"][run["steps"].index(run["best_val_step"])] == run["best_val_loss"]
    m = load_model(tiny_run / "causal_model")
    assert m.config.variant == "standard" and m.meta["experiment"] == "lr_sweep"


def test_lr_sweep_seeds_the_best_rates_and_tabulates_every_cell(tiny_run: Path) -> None:
    doc = load_result("lr_sweep", tiny_run)
    lrs = SIZES["tiny"]["lr_sweep"]["lrs"]
    first = [(r["variant"], r["lr"]) for r in doc["runs"] if r["seed"] == 0]
    assert first == [(v, lr) for v in ("standard", "fully_scaled", "fully_scaled_rows") for lr in lrs]
    for v, seeded in doc["seeded_lrs"].items():
        finals = {r["lr"]: r["final_train_loss"] for r in doc["runs"] if r["variant"] == v and r["seed"] == 0}
        assert seeded == lrs_to_seed(finals)
        for seed in (1, 2):
            assert sorted(r["lr"] for r in doc["runs"] if r["variant"] == v and r["seed"] == seed) == seeded
    # one table row per cell: its seeds, mean and sd
    assert len(doc["table"]["rows"]) == len({(r["variant"], r["lr"]) for r in doc["runs"]})
    for row in doc["table"]["rows"]:
        finals = [r["final_train_loss"] for r in doc["runs"] if (r["variant"], r["lr"]) == (row[0], row[1])]
        assert row[2] == len(finals) and row[3] == pytest.approx(statistics.fmean(finals), rel=1e-4)
        assert row[4] == (pytest.approx(statistics.stdev(finals), rel=1e-3) if len(finals) > 1 else None)
    # the best cell per variant: lowest mean among the cells run at every seed
    for v, b in doc["best"].items():
        full = {lr: [r["final_train_loss"] for r in doc["runs"] if r["variant"] == v and r["lr"] == lr]
                for lr in lrs}
        full = {lr: f for lr, f in full.items() if len(f) == 3}
        assert b["lr"] == min(full, key=lambda lr: statistics.fmean(full[lr]))
        assert b["final_train_loss"] == pytest.approx(statistics.fmean(full[b["lr"]]), rel=1e-4)
    c = doc["comparisons"]["fully_scaled vs standard"]
    assert doc["reproduces"] == (None if not c["distinguishable"] else c["sign"] > 0)
    m = load_model(tiny_run / "causal_model")
    seed0 = next(r for r in doc["runs"] if r["variant"] == "standard" and r["lr"] == doc["best"]["standard"]["lr"]
                 and r["seed"] == 0)
    assert m.config.lr == doc["best"]["standard"]["lr"] and m.config.seed == 0
    assert m.meta["final_val_loss"] == seed0["final_val_loss"]


def test_lrs_to_seed_takes_the_best_and_its_better_neighbour() -> None:
    assert lrs_to_seed({1e-3: 2.0, 1e-2: 1.7, 1e-1: 1.8}) == [1e-2, 1e-1]
    assert lrs_to_seed({1e-3: 1.75, 1e-2: 1.7, 1e-1: 1.8}) == [1e-3, 1e-2]
    assert lrs_to_seed({1e-3: 1.5, 1e-2: 1.7, 1e-1: None}) == [1e-3, 1e-2]
    assert lrs_to_seed({1e-3: 1.5, 1e-2: None}) == [1e-3]
    assert lrs_to_seed({1e-3: None}) == []


def test_resume_keeps_identical_runs_after_a_bit_identical_check(tiny_run: Path, tmp_path: Path) -> None:
    out = tmp_path / "again"
    shutil.copytree(tiny_run, out)
    corpus = tiny_run / "corpus.txt"
    before = load_result("scaling", out)
    assert main(["scaling", "--out", str(out), "--scale", "tiny", "--corpus", str(corpus), "--threads", "1",
                 "--seeds", "0,1,2,3", "--resume"]) == 0
    doc = load_result("scaling", out)
    n_cells = len(SIZES["tiny"]["scaling"]["d_heads"]) * 2
    assert doc["reuse_check"]["identical"] and doc["reuse_check"]["name"] == before["runs"][0]["name"]
    assert doc["runs_trained"] == 1 + n_cells  # the check, then seed 3
    assert len(doc["reused"]) == len(before["runs"]) - 1
    assert {k["from_commit"] for k in doc["reused"]} == {before["git_commit"]}
    for old, new in zip(before["runs"], doc["runs"], strict=False):
        assert curves_differ(old, new) == []
    # a kept run that the machine would not reproduce: the command refuses to mix them
    bad = load_result("sinks", out)
    bad["runs"][0]["val_loss"][-1] += 1e-3
    (out / "sinks.json").write_text(json.dumps(bad), encoding="utf-8")
    assert main(["sinks", "--out", str(out), "--scale", "tiny", "--corpus", str(corpus), "--threads", "1",
                 "--seeds", "0,1,2", "--resume"]) == 2
    assert json.loads((out / "sinks.json").read_text(encoding="utf-8")) == bad  # left as it was


def test_the_command_trains_under_the_devices_budget(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      capsys) -> None:
    import attncore.training.experiments as experiments

    seen: list[object] = []

    def tiny_budget(device: object) -> int:
        seen.append(device)
        return 1000

    monkeypatch.setattr(experiments, "device_train_budget", tiny_budget)
    corpus = tmp_path / "c.txt"
    corpus.write_text(FALLBACK, encoding="utf-8")
    assert main(["scaling", "--out", str(tmp_path), "--scale", "tiny", "--corpus", str(corpus),
                 "--device", "cpu"]) == 2
    assert seen == [resolve_device("cpu")]
    assert "the limit is 1k" in capsys.readouterr().err


def test_seeds_argument() -> None:
    assert parse_seeds("0,1,2") == [0, 1, 2] and parse_seeds("0-2") == [0, 1, 2] and parse_seeds("5") == [5]
    for bad in ("", "a", "1,1", "-1", "0-"):
        with pytest.raises(AttnInputError):
            parse_seeds(bad)


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
    assert [(r["label"], r["seed"]) for r in doc["runs"]] == [
        (label, seed) for seed in (0, 1, 2) for label in ("softmax", "softmax1", "sink_logit", "gated")]
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


@pytest.mark.parametrize("name", SEEDED)
def test_shipped_results_are_complete_cpu_runs_with_three_seeds(name: str) -> None:
    doc = load_result(name)
    assert doc["complete"] and doc["scale"] == "cpu" and doc["sizes"] == SIZES["cpu"][name]
    assert doc["corpus"]["name"] == "tinyshakespeare.txt"
    assert (RESULTS_DIR / f"{name}.json").stat().st_size < 500_000
    assert doc["seeds"] == [0, 1, 2] and doc["machine"]["torch_threads"] == 1
    # the runs kept from the first (one-seed) run were checked: one of them, trained again, was bit-identical
    assert doc["reuse_check"]["identical"] and doc["reuse_check"]["differing"] == []
    # every kept run names the clean commit that trained it, and the file's own commit trained the rest
    assert all(re.fullmatch(r"[0-9a-f]{40}", k["from_commit"]) for k in doc["reused"])
    assert re.fullmatch(r"[0-9a-f]{40}", doc["git_commit"])
    assert doc["runs_trained"] + len(doc["reused"]) == len(doc["runs"])
    for run in doc["runs"]:
        # null_attention's first point is the untrained model (step 0: no training loss yet)
        first = 1 if name == "null_attention" else 0
        keys = ("train_loss", "val_loss") if name == "null_attention" else ("train_loss", "val_loss", "saturated_share")
        for key in keys:
            assert all(v is not None and math.isfinite(v) for v in run[key][first:]), (run["name"], key)
        assert len(run["train_loss"]) == len(run["steps"])
        assert run["config"].get("dropout", 0.0) == 0.0
    # every cell the verdicts compare has all three seeds
    cells: dict[tuple, list[int]] = {}
    for run in doc["runs"]:
        key = tuple(run.get(k) for k in ("variant", "lr", "d_head", "label"))
        cells.setdefault(key, []).append(run["seed"])
    if name == "lr_sweep":
        for v, b in doc["best"].items():
            assert sorted(cells[(v, b["lr"], None, None)]) == [0, 1, 2]
    else:
        assert all(sorted(seeds) == [0, 1, 2] for seeds in cells.values())


def test_shipped_lr_sweep_covers_five_log_spaced_rates_and_three_variants() -> None:
    doc = load_result("lr_sweep")
    lrs = sorted({r["lr"] for r in doc["runs"]})
    assert len(lrs) >= 5
    ratios = [b / a for a, b in zip(lrs, lrs[1:], strict=False)]
    assert max(ratios) == pytest.approx(min(ratios), rel=0.01)  # log-spaced
    assert {r["variant"] for r in doc["runs"]} == {"standard", "fully_scaled", "fully_scaled_rows"}


def test_shipped_model_is_the_best_standard_cells_first_seed_and_predicts_shakespeare() -> None:
    doc = load_result("lr_sweep")
    m = load_shipped_model()
    lr = doc["best"]["standard"]["lr"]
    run = next(r for r in doc["runs"] if r["variant"] == "standard" and r["lr"] == lr and r["seed"] == 0)
    assert m.config.variant == "standard" and m.config.lr == lr and m.config.seed == 0
    assert m.meta["final_val_loss"] == run["final_val_loss"]
    size = sum(p.stat().st_size for p in (RESULTS_DIR / "causal_model").iterdir())
    assert size < 8 * 1024**2
    dist = dict(next_char_distribution(m, "First Citizen:\nBefore we proceed any further, hear me spea"))
    assert dist["k"] > 0.5  # a trained model, not a random one


def test_sinks_finding_says_what_the_runs_show() -> None:
    from attncore.training.experiments import sinks_finding
    from attncore.training.verdicts import compare

    def run(label: str, seed: int, heads: int, top: float) -> dict:
        return {"label": label, "seed": seed, "diverged_at": None, "sink_heads": heads, "sink_alpha_max": top}

    cfg = SIZES["cpu"]["sinks"]["config"]
    none = {"softmax": [run("softmax", s, 0, 0.05) for s in range(3)],
            "softmax1": [run("softmax1", s, 0, 0.04) for s in range(3)]}
    flat = {"streaming": {"softmax": compare([1.8, 1.81, 1.79], [1.8, 1.805, 1.795]).to_dict(),
                          "softmax1": compare([1.8, 1.81, 1.79], [1.8, 1.81, 1.79]).to_dict()}}
    text = sinks_finding(none, flat, 0.074, cfg, 3)
    assert text.startswith("At this scale (3 layers, width 128, 4 heads, context 64, batch 32, 600 steps, 3 seeds")
    assert "No head of any model became a first-token sink (every head" in text
    assert "StreamingLLM comparison cannot test the claim at this scale" in text
    assert "changes no model's windowed loss distinguishably" in text
    some = {**none, "softmax": [run("softmax", s, 5, 0.9) for s in range(3)]}
    helps = {"streaming": {**flat["streaming"],
                           "softmax": compare([2.3, 2.31, 2.29], [1.8, 1.805, 1.79]).to_dict()}}
    text = sinks_finding(some, helps, 0.074, cfg, 3)
    assert "Sink heads formed" in text and "lowers the windowed loss for softmax" in text
    assert "cannot test the claim" not in text
