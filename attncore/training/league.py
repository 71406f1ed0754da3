"""Experiment: which fix removes the sink? A league of normalisers and gates on the Bigram-Backcopy task.

``python -m attncore.training.league --out DIR`` trains the character transformer on Guo et al.'s
Bigram-Backcopy task (:mod:`attncore.training.bbm`) at 2 layers x 4 heads, so that a sink *rate* (a share of
heads) is defined, for every variant of :data:`LEAGUE` (softmax, softmax1, the gpt-oss sink logit starting at
0, ReLU attention, Qiu et al.'s elementwise and headwise output gates and their non-sparse control
0.5 + 0.5σ, softpick) x 2 learning rates x 3 seeds, and measures per run (:func:`league_record`):

* the sink rate at ε = :data:`~attncore.training.bbm.SINK_THRESHOLD` (0.3): the share of the model's heads
  whose mean weight on BOS from non-trigger positions, averaged over the last
  :data:`~attncore.training.sink_stats.LAST_POINTS` evaluation points (the sink grid's end weight,
  :func:`~attncore.training.sink_stats.end_weight`), exceeds ε;
* the weight sent nowhere (1 - the row's sum) from non-trigger positions, over the heads and the same points;
* the largest activation |x| and the kurtosis of the residual stream (:func:`residual_stats`), the
  massive-activation measures of the 2025 papers, on the held-out sequences after training;
* the task loss: held-out loss, copy loss, and the bigram positions' excess over the Bayes optimum.

Every finished run is appended at once to ``DIR/league.jsonl`` (one JSON record a line; the first line the
header: the command, the corpus by name and SHA-256, the machine, the commit, the settings), so the command
resumes where it stopped: rerun it and the runs already in the file are skipped. The league walks seed by
seed, so a partial file covers every cell at its first seeds. No line holds a path of this machine.

Shape legend: ``B`` sequences, ``T`` positions, ``D`` width, ``N`` layers, ``H`` heads.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from attncore.errors import AttnInputError
from attncore.provenance import git_commit
from attncore.training import io as _io
from attncore.training.bbm import SINK_THRESHOLD, BigramBackcopy, bbm_label, eval_sequences
from attncore.training.bbm_train import BBMResult, train_bbm
from attncore.training.config import TrainConfig
from attncore.training.model import CharTransformer
from attncore.training.record import default_corpus, shard_and_corpus
from attncore.training.sink_grid import machine
from attncore.training.sink_stats import LAST_POINTS, end_weight, t_interval

__all__ = [
    "FILE",
    "LEAGUE",
    "TABLE_KEYS",
    "league_configs",
    "league_table",
    "league_record",
    "load_league",
    "main",
    "residual_stats",
    "run_key",
    "sink_rate",
]

FILE = "league.jsonl"

LEAGUE: dict[str, Any] = {
    # Bigram-Backcopy at 2 layers x 4 heads (head dim 16), sequences of 64, batch 32
    "base": {"n_layer": 2, "n_head": 4, "d_model": 64, "context": 64, "batch": 32, "steps": 1000,
             "warmup": 50, "eval_every": 50, "weight_decay": 0.1, "dropout": 0.0, "positions": "rotary"},
    "lrs": [1e-3, 1e-2],
    "variants": [dict(variant="standard"), dict(variant="softmax1"),
                 dict(variant="sink_logit", sink_init=0.0), dict(variant="relu"), dict(variant="gated"),
                 dict(variant="gated_headwise"), dict(variant="gated_control"), dict(variant="softpick")],
    "seeds": [0, 1, 2],
}
"""The league's settings: every variant x learning rate x seed on :data:`LEAGUE` ``["base"]``."""


def league_configs(league: dict[str, Any] | None = None) -> list[TrainConfig]:
    """Every run in the order the command trains them: seed by seed, then learning rate, then variant."""
    g = league or LEAGUE
    base = TrainConfig(**g["base"])
    return [base.replace(seed=s, lr=lr, **v) for s in g["seeds"] for lr in g["lrs"] for v in g["variants"]]


def run_key(config: dict[str, Any]) -> str:
    """A run's identity in the file: (variant, initial sink logit where it has one, lr, seed) as JSON."""
    key = {"variant": config["variant"], "lr": float(config["lr"]), "seed": int(config["seed"])}
    if config["variant"] == "sink_logit":
        key["sink_init"] = float(config.get("sink_init", 0.0))
    return json.dumps(key, sort_keys=True)


def load_league(path: str | Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(header, runs) of a league file; a missing file gives an empty header and no runs, and a line that is
    not a JSON object (a run cut off mid-write) is skipped."""
    p = Path(path)
    return _io.read_runs(p)


# ---------------------------------------------------------------------------- measures


def sink_rate(probes: list[dict[str, Any]], points: int = LAST_POINTS,
              threshold: float = SINK_THRESHOLD) -> tuple[float | None, list[list[float | None]]]:
    """The share of heads whose end weight on BOS from non-trigger positions exceeds ``threshold``, and the
    end weights (N x H): per head, the mean of ``bos_other`` over the last ``points`` evaluation points
    (:func:`~attncore.training.sink_stats.end_weight`, the sink grid's rule). None when no head has one."""
    if not probes:
        return None, []
    n_layer = len(probes[-1]["bos_other"])
    ends: list[list[float | None]] = []
    for li in range(n_layer):
        n_head = len(probes[-1]["bos_other"][li] or [])
        row = []
        for h in range(n_head):
            curve = [(p["bos_other"][li] or [None] * n_head)[h] for p in probes]
            row.append(end_weight(curve, points))
        ends.append(row)
    vals = [v for row in ends for v in row if v is not None]
    return (sum(v > threshold for v in vals) / len(vals) if vals else None), ends


def _end_mean(probes: list[dict[str, Any]], key: str, points: int = LAST_POINTS) -> float | None:
    """The mean of a per-head probe key over every layer, head and last ``points`` evaluation point."""
    vals = [v for p in probes[-points:] for row in (p.get(key) or []) if row is not None for v in row
            if v is not None and math.isfinite(v)]
    return sum(vals) / len(vals) if vals else None


@torch.no_grad()
def residual_stats(model: CharTransformer, ids: Tensor) -> dict[str, Any]:
    """The residual stream of ``model`` on token ids ``ids`` (B, T) after every block, (B, T, D) each.

    Returns per layer ``max_abs`` (the largest |activation| over tokens and channels) and ``kurtosis`` (the
    Pearson kurtosis E[(x - μ)⁴] / σ⁴ of each token's D channels, 3 for Gaussian channels, averaged over
    tokens), and over the layers ``max_activation`` (the largest of ``max_abs``) and ``kurtosis_max``.
    Runs the model's own blocks (its variant, mask and positions) on the materialised path."""
    T = ids.shape[1]
    cos, sin = model.angles(torch.arange(T, device=ids.device))  # (T, E/2)
    x = model.tok(ids)  # (B, T, D)
    if model.config.positions == "learned":
        x = x + model.pos(torch.arange(T, device=ids.device))
    max_abs: list[float] = []
    kurt: list[float] = []
    for blk in model.blocks:
        x, _ = blk(x, cos, sin, None, False)  # (B, T, D)
        xd = x.double()
        max_abs.append(float(xd.abs().max()))
        c = xd - xd.mean(dim=-1, keepdim=True)
        var = c.square().mean(dim=-1)  # (B, T)
        k = c.pow(4).mean(dim=-1) / var.square().clamp_min(1e-300)  # (B, T)
        kurt.append(float(k.mean()))
    return {"max_abs": max_abs, "kurtosis": kurt, "max_activation": max(max_abs, default=None),
            "kurtosis_max": max(kurt, default=None)}


_PROBE_KEYS = ("loss", "copy_loss", "bigram_excess", "bos_other", "bos_trigger", "nowhere_other",
               "gate_other")


def _round(x: Any, digits: int = 6) -> Any:
    if isinstance(x, float):
        return x if not math.isfinite(x) else float(f"{x:.{digits}g}")
    if isinstance(x, list):
        return [_round(v, digits) for v in x]
    if isinstance(x, dict):
        return {k: _round(v, digits) for k, v in x.items()}
    return x


def league_record(result: BBMResult, residual: dict[str, Any]) -> dict[str, Any]:
    """The JSON record of one run: its settings, the league's measures (see the module docstring) and the
    curves (per evaluation point: the losses and the per-head BOS weight, weight sent nowhere and gate)."""
    probes = result.probes
    rate, ends = sink_rate(probes)
    last = probes[-1] if probes else {}
    rec = {
        "config": result.config.to_dict(), "name": bbm_label(result.config),
        "label": bbm_label(result.config, with_seed=False), "variant": result.config.variant,
        "sink_rate": rate, "bos_end": ends, "end_points": LAST_POINTS, "threshold": SINK_THRESHOLD,
        "nowhere_other": _end_mean(probes, "nowhere_other"),
        "nowhere_trigger": _end_mean(probes, "nowhere_trigger"),
        "max_activation": residual["max_activation"], "kurtosis": residual["kurtosis_max"],
        "residual": {"max_abs": residual["max_abs"], "kurtosis": residual["kurtosis"]},
        "loss": last.get("loss"), "copy_loss": last.get("copy_loss"),
        "bigram_excess": last.get("bigram_excess"),
        "final_train_loss": result.final_train_loss, "diverged_at": result.diverged_at,
        "steps": result.steps, "val_loss": result.val_loss, "train_loss": result.train_loss,
        "curves": [{k: p.get(k) for k in _PROBE_KEYS} for p in probes],
        "tokens_per_s": result.tokens_per_s, "wall_s": result.wall_s, "eval_s": result.eval_s,
        "device": result.device,
    }
    return _round(rec)


TABLE_KEYS = ("sink_rate", "nowhere_other", "max_activation", "kurtosis", "loss", "copy_loss",
              "bigram_excess")


def league_table(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per cell (variant label, learning rate), in order of first appearance: the seeds (a repeated seed
    counts once), the diverged seeds, and for each of :data:`TABLE_KEYS` the mean over the seeds that did not
    diverge with its t interval (:func:`~attncore.training.sink_stats.t_interval`: mean ± t(0.975, n - 1)
    standard errors; none from one seed)."""
    cells: dict[tuple[str, float], list[dict[str, Any]]] = {}
    for r in runs:
        key = (r["label"], float(r["config"]["lr"]))
        cell = cells.setdefault(key, [])
        if all(x["config"]["seed"] != r["config"]["seed"] for x in cell):
            cell.append(r)
    out = []
    for (label, lr), cell in cells.items():
        ok = [r for r in cell if r.get("diverged_at") is None]
        out.append({"label": label, "variant": cell[0]["variant"], "lr": lr,
                    "seeds": [r["config"]["seed"] for r in cell],
                    "diverged": [r["config"]["seed"] for r in cell if r.get("diverged_at") is not None],
                    **{k: t_interval([r.get(k) for r in ok]) for k in TABLE_KEYS}})
    return out


def train_league_run(config: TrainConfig, task: BigramBackcopy, device: str = "cpu") -> dict[str, Any]:
    """Train one run of the league and measure it (:func:`league_record`)."""
    result = train_bbm(config, task, device=device)
    held_out = eval_sequences(task, config.context)[:, :-1].to(result.model.device)  # (B, T)
    return league_record(result, residual_stats(result.model, held_out))


# ---------------------------------------------------------------------------- command


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _append(path: Path, record: dict[str, Any]) -> None:
    """Append ``record`` as one line; a line cut off mid-write before it (no newline at the file's end) is
    closed first, so it stays one unreadable line instead of swallowing this record."""
    with path.open("a+b") as f:
        f.seek(0, os.SEEK_END)
        if f.tell():
            f.seek(-1, os.SEEK_END)
            if f.read(1) != b"\n":
                f.write(b"\n")
        f.write((json.dumps(record, ensure_ascii=False) + "\n").encode("utf-8"))


def _command(args: argparse.Namespace, corpus: Path, prog: str = "python -m attncore.training.league") -> str:
    """The command line that made the file, with paths reduced to their last part (no machine paths)."""
    parts = [prog, "--out", args.out.name or "."]
    if args.corpus is not None:
        parts += ["--corpus", corpus.name]
    parts += ["--threads", str(args.threads)]
    if args.limit:
        parts += ["--limit", str(args.limit)]
    if args.steps:
        parts += ["--steps", str(args.steps)]
    if args.shard != "0/1":
        parts += ["--shard", args.shard]
    return " ".join(parts)


def _summary(runs: list[dict[str, Any]]) -> None:
    """Print each cell's mean sink rate and its t interval (the command's last lines)."""
    for c in league_table(runs):
        r = c["sink_rate"]
        half = "" if r["half"] is None else f" ± {r['half']:.3f}"
        mean = "n/a" if r["mean"] is None else f"{r['mean']:.3f}{half}"
        print(f"  {c['label']:>28} lr {c['lr']:g}: sink rate {mean} over {r['n']} seed(s)", file=sys.stderr)


def main(argv: list[str] | None = None, *, prog: str = "python -m attncore.training.league", file: str = FILE,
         experiment: str = "league", settings: dict[str, Any] | None = None,
         key: Callable[[dict[str, Any]], str] = run_key,
         summary: Callable[[list[dict[str, Any]]], None] = _summary, description: str | None = None) -> int:
    """Command line entry point; returns the exit status. The keyword arguments let another experiment on the
    league's machinery (the weight-decay sweep, :mod:`attncore.training.wd_sweep`) reuse it: its program name,
    file, experiment name, settings (the shape of :data:`LEAGUE`), run identity and closing summary."""
    p = argparse.ArgumentParser(prog=prog, description=description or (__doc__ or "").split("\n")[0])
    p.add_argument("--out", required=True, type=Path, help=f"directory for {file} (appended to, resumed)")
    p.add_argument("--corpus", type=Path, default=None,
                   help="text file (default: ../shared/data/tinyshakespeare.txt)")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    p.add_argument("--limit", type=int, default=0, help="stop after this many new runs (0: the whole league)")
    p.add_argument("--steps", type=int, default=0,
                   help="train this many steps per run instead of the league's (a smoke test; the header "
                        "says so)")
    p.add_argument("--shard", default="0/1",
                   help="I/N: train only the runs whose place in the league is I modulo N (N processes share "
                        "one file; each line is one append)")
    args = p.parse_args(argv)
    torch.set_num_threads(max(1, args.threads))
    got = shard_and_corpus(args.shard, args.corpus)
    if got is None:
        return 2
    shard, shards, text = got
    corpus = args.corpus or default_corpus()
    league = json.loads(json.dumps(settings or LEAGUE))
    if args.steps:
        b = league["base"]
        b["steps"] = int(args.steps)
        b["eval_every"] = max(1, min(b["eval_every"], b["steps"] // 4 or 1))
        b["warmup"] = min(b["warmup"], b["steps"] // 10)
    configs = league_configs(league)  # validates the settings before anything is written
    task = BigramBackcopy.from_text(text)
    path = args.out / file
    args.out.mkdir(parents=True, exist_ok=True)
    header, runs = load_league(path)
    if header and header.get("league") != league:
        print(f"{file} was made with other settings (its header's league differs); use another --out",
              file=sys.stderr)
        return 2
    done = {key(r["config"]) for r in runs}
    if not header and shard == 0:
        header = {"kind": "header", "experiment": experiment, "league": league,
                  "command": _command(args, corpus, prog),
                  "corpus": {"name": corpus.name, "sha256": _sha256(corpus), "chars": len(text)},
                  "task": task.to_dict(), "machine": machine(), "git_commit": git_commit(),
                  "started": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
                  "measures": {"sink_threshold": SINK_THRESHOLD, "end_points": LAST_POINTS}}
        _append(path, header)
    todo = [c for i, c in enumerate(configs) if key(c.to_dict()) not in done and i % shards == shard]
    print(f"{experiment}: {len(configs)} runs, {len(done)} already in {file}, {len(todo)} for shard "
          f"{shard}/{shards}", file=sys.stderr)
    for trained, cfg in enumerate(todo):
        if args.limit and trained >= args.limit:
            break
        t0 = time.perf_counter()
        rec = train_league_run(cfg, task)
        rec["machine_load"] = os.getloadavg()[0]
        _append(path, rec)
        print(f"  {rec['name']} lr {cfg.lr:g} wd {cfg.weight_decay:g}: sink rate {rec['sink_rate']}, "
              f"nowhere {rec['nowhere_other']}, max |x| {rec['max_activation']}, loss {rec['loss']} "
              f"({time.perf_counter() - t0:.0f} s)",
              file=sys.stderr, flush=True)
    summary(load_league(path)[1])
    return 0


if __name__ == "__main__":
    try:
        raise SystemExit(main())
    except AttnInputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
