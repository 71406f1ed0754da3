"""Experiment: does a fix remove the sink at every setting, or only at one? The sink grid.

``python -m attncore.training.sink_grid --out DIR`` trains the null-attention experiment's model
(:mod:`attncore.training.null_attention`: Guo et al.'s Bigram-Backcopy task, 1 layer, 1 head,
width 64) over a grid of settings: learning rate x position encoding (rotary, or learned absolute
positions as in Guo et al.) for softmax, softmax1 and a learned sink logit starting at 0, several
seeds each. Every finished run is appended at once to ``DIR/sink_grid.jsonl`` (one JSON record a
line, the first line the header: the command, the machine, the commit), so the command resumes
where it stopped: rerun it and the runs already in the file are skipped. The grid walks seed by
seed, so a partial file covers every cell at its first seeds.

Shape legend: ``N`` layers, ``H`` heads.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import torch

from attncore.device import cpu_model
from attncore.errors import AttnInputError
from attncore.provenance import file_record, git_commit, portable_command
from attncore.training import io as _io
from attncore.training.bbm import BigramBackcopy
from attncore.training.config import TrainConfig
from attncore.training.null_attention import SIZES as NULL_SIZES
from attncore.training.null_attention import held_out_sets, run_record, train_and_test
from attncore.training.record import default_corpus, shard_and_corpus

__all__ = ["FILE", "GRID", "grid_configs", "load_grid", "machine", "main", "run_key"]

FILE = "sink_grid.jsonl"

GRID: dict[str, Any] = {
    # the shipped null-attention size (1 layer, 1 head, width 64, sequences of 64, batch 64) ...
    "base": {**NULL_SIZES["cpu"]["config"], "steps": 1200, "warmup": 50, "eval_every": 50},
    # ... over these settings: the audit's lr 1e-3 kept a softmax1 sink; the shipped runs used 1e-2
    "lrs": [1e-3, 3e-3, 1e-2],
    "positions": ["rotary", "learned"],
    "variants": [dict(variant="standard"), dict(variant="softmax1"),
                 dict(variant="sink_logit", sink_init=0.0)],
    "seeds": [0, 1, 2],
}
"""The grid's settings. Steps: 1,200 at every rate (the audit's lr 1e-3 learned the task by then)."""


def grid_configs(grid: dict[str, Any] | None = None) -> list[TrainConfig]:
    """Every run of the grid in the order the command trains them: seed by seed, then position
    encoding, learning rate, variant (so a partial file covers every cell at its first seeds)."""
    g = grid or GRID
    base = TrainConfig(**g["base"])
    return [base.replace(seed=s, positions=pos, lr=lr, **v)
            for s in g["seeds"] for pos in g["positions"] for lr in g["lrs"] for v in g["variants"]]


def run_key(config: dict[str, Any]) -> str:
    """A run's identity in the file: its config as sorted JSON (old configs without ``positions``
    are rotary)."""
    return json.dumps({"positions": "rotary", **config}, sort_keys=True)


def load_grid(path: str | Path | None = None) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(header, runs) of a grid file (default: the one shipped in this package). A missing file gives
    an empty header and no runs; a line that is not JSON (a run cut off mid-write) is skipped."""
    p = Path(path) if path is not None else Path(_io.RESULTS_DIR) / FILE
    return _io.read_runs(p)


def machine() -> str:
    """The CPU, its logical CPUs, torch and its threads, for a result file's header."""
    return (f"{cpu_model()}, {os.cpu_count()} logical CPUs, torch {torch.__version__}, "
            f"{torch.get_num_threads()} thread(s)")


def main(argv: list[str] | None = None) -> int:
    """Command line entry point; returns the exit status."""
    p = argparse.ArgumentParser(prog="python -m attncore.training.sink_grid",
                                description=(__doc__ or "").split("\n")[0])
    p.add_argument("--out", required=True, type=Path, help=f"directory for {FILE} (appended to, resumed)")
    p.add_argument("--corpus", type=Path, default=None,
                   help="text file (default: ../shared/data/tinyshakespeare.txt)")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    p.add_argument("--limit", type=int, default=0, help="stop after this many new runs (0: the whole grid)")
    p.add_argument("--shard", default="0/1",
                   help="I/N: train only the runs whose place in the grid is I modulo N (N processes share "
                        "one file; each line is one append)")
    args = p.parse_args(argv)
    torch.set_num_threads(max(1, args.threads))
    got = shard_and_corpus(args.shard, args.corpus)
    if got is None:
        return 2
    shard, shards, text = got
    corpus = args.corpus or default_corpus()
    sizes = NULL_SIZES["cpu"]
    task = BigramBackcopy.from_text(text)
    path = args.out / FILE
    args.out.mkdir(parents=True, exist_ok=True)
    header, runs = load_grid(path)
    done = {run_key(r["config"]) for r in runs}
    if not header and shard == 0:
        header = {"kind": "header", "experiment": "sink_grid", "grid": GRID,
                  "command": portable_command("python -m attncore.training.sink_grid",
                                              argv if argv is not None else sys.argv[1:]),
                  "corpus": file_record(corpus), "machine": machine(), "git_commit": git_commit(),
                  "started": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
                  "tests": {k: sizes[k] for k in ("ablation_seqs", "stream_seqs", "stream_len", "window")}}
        with path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(header) + "\n")
    configs = grid_configs()
    todo = [c for i, c in enumerate(configs) if run_key(c.to_dict()) not in done and i % shards == shard]
    print(f"sink grid: {len(configs)} runs, {len(done)} already in {path}, {len(todo)} for shard "
          f"{shard}/{shards}", file=sys.stderr)
    held_out = held_out_sets(task, int(GRID["base"]["context"]), sizes)
    for trained, cfg in enumerate(todo):
        if args.limit and trained >= args.limit:
            break
        t0 = time.perf_counter()
        run = train_and_test(cfg, task, device="cpu", sizes=sizes, held_out=held_out)
        rec = run_record(run)
        rec["machine_load"] = os.getloadavg()[0]
        with path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(rec) + "\n")
        last = rec["probes"][-1] if rec.get("probes") else {}
        print(f"  {rec['name']} {cfg.positions} lr {cfg.lr:g}: BOS w {last.get('bos_other')} copy "
              f"{last.get('copy_loss')} ({time.perf_counter() - t0:.0f} s)", file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    try:
        raise SystemExit(main())
    except AttnInputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
