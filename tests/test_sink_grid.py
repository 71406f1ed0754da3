"""attncore.training.sink_grid: the grid's order, a run's key, reading a file with a line cut off, and the
command resuming and sharding on tiny sizes (every run trained once, none twice)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from attncore.training import sink_grid
from attncore.training.null_attention import SIZES as NULL_SIZES
from tests.training_utils import SNIPPET

pytestmark = pytest.mark.usefixtures("one_torch_thread")

TINY_GRID: dict[str, Any] = {
    "base": dict(NULL_SIZES["tiny"]["config"], steps=4, eval_every=2),
    "lrs": [1e-3, 1e-2],
    "positions": ["rotary", "learned"],
    "variants": [dict(variant="standard"), dict(variant="softmax1")],
    "seeds": [0, 1],
}


def test_grid_configs_walk_seed_then_positions_then_rate_then_variant() -> None:
    configs = sink_grid.grid_configs(TINY_GRID)
    assert len(configs) == 2 * 2 * 2 * 2
    got = [(c.seed, c.positions, c.lr, c.variant) for c in configs]
    want = [(s, p, lr, v) for s in (0, 1) for p in ("rotary", "learned") for lr in (1e-3, 1e-2)
            for v in ("standard", "softmax1")]
    assert got == want
    assert all(c.steps == 4 and c.d_model == 16 for c in configs)
    full = sink_grid.grid_configs()
    assert len(full) == 3 * 2 * 3 * 3
    assert {c.sink_init for c in full if c.variant == "sink_logit"} == {0.0}
    assert [c.seed for c in full[:18]] == [0] * 18  # a partial file covers every cell at seed 0 first


def test_run_key_is_the_sorted_config_and_old_configs_are_rotary() -> None:
    c = sink_grid.grid_configs(TINY_GRID)[0].to_dict()
    assert sink_grid.run_key(c) == sink_grid.run_key(dict(reversed(list(c.items()))))
    old = {k: v for k, v in c.items() if k != "positions"}
    assert sink_grid.run_key(old) == sink_grid.run_key(c)
    assert sink_grid.run_key({**c, "positions": "learned"}) != sink_grid.run_key(c)
    assert sink_grid.run_key({**c, "lr": 0.003}) != sink_grid.run_key(c)


def test_load_grid_skips_a_cut_off_line_and_a_missing_file(tmp_path: Path) -> None:
    p = tmp_path / "g.jsonl"
    assert sink_grid.load_grid(p) == ({}, [])
    runs = [{"name": f"r{k}", "config": {"seed": k}} for k in range(3)]
    lines = [json.dumps({"kind": "header", "experiment": "sink_grid"})] + [json.dumps(r) for r in runs]
    p.write_text("\n".join(lines[:3]) + "\n" + lines[3][:25] + "\n[1, 2]\n" + json.dumps({"no": "config"}) + "\n")
    header, got = sink_grid.load_grid(p)
    assert header["experiment"] == "sink_grid"
    assert got == runs[:2]


def _run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *args: str) -> int:
    monkeypatch.setattr(sink_grid, "GRID", TINY_GRID)
    monkeypatch.setattr(sink_grid, "NULL_SIZES", {"cpu": NULL_SIZES["tiny"]})
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(SNIPPET * 20, encoding="utf-8")
    return sink_grid.main(["--out", str(tmp_path / "out"), "--corpus", str(corpus), *args])


def _keys(tmp_path: Path) -> list[str]:
    return [sink_grid.run_key(r["config"]) for r in sink_grid.load_grid(tmp_path / "out" / sink_grid.FILE)[1]]


def test_the_command_resumes_where_it_stopped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert _run(tmp_path, monkeypatch, "--limit", "3") == 0
    first = _keys(tmp_path)
    want = [sink_grid.run_key(c.to_dict()) for c in sink_grid.grid_configs(TINY_GRID)]
    assert first == want[:3]
    assert _run(tmp_path, monkeypatch) == 0
    assert _keys(tmp_path) == want  # the first three kept, the rest appended once, in grid order
    lines = (tmp_path / "out" / sink_grid.FILE).read_text().splitlines()
    assert sum(1 for line in lines if json.loads(line).get("kind") == "header") == 1
    header = json.loads(lines[0])
    assert header["grid"] == TINY_GRID and header["command"].startswith("python -m attncore.training.sink_grid")
    # no folder of this machine (issue 44, item 9): --out by its name, the corpus by name and SHA-256
    assert header["command"] == "python -m attncore.training.sink_grid --out out --corpus corpus.txt --limit 3"
    assert header["corpus"] == {"name": "corpus.txt",
                                "sha256": hashlib.sha256((SNIPPET * 20).encode("utf-8")).hexdigest()}
    assert str(tmp_path) not in lines[0]
    runs = sink_grid.load_grid(tmp_path / "out" / sink_grid.FILE)[1]
    # learned positions end at the context: no streaming test for them, the ablation for every run
    assert all((r["streaming"] is None) == (r["config"]["positions"] == "learned") for r in runs)
    assert all(r["ablation"] is not None for r in runs)
    assert _run(tmp_path, monkeypatch) == 0  # nothing left: nothing appended
    assert _keys(tmp_path) == want


def test_shards_split_the_grid_and_share_one_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    want = [sink_grid.run_key(c.to_dict()) for c in sink_grid.grid_configs(TINY_GRID)]
    assert _run(tmp_path, monkeypatch, "--shard", "1/2") == 0
    assert _keys(tmp_path) == want[1::2]
    assert _run(tmp_path, monkeypatch, "--shard", "0/2") == 0
    got = _keys(tmp_path)
    assert sorted(got) == sorted(want) and len(set(got)) == len(want)
    assert _run(tmp_path, monkeypatch, "--shard", "2/2") == 2
