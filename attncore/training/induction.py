"""Training the induction model (:mod:`attncore.training.induction_model`) and the shipped run's command.

``python -m attncore.training.induction --out DIR`` trains :data:`~attncore.training.induction_model.SIZE`
with seeds 0, 1, 2 (one CPU thread) and appends each finished seed at once to ``DIR/induction.jsonl`` (the
first line the header: the command, the machine, the commit, the size; each run its wall time), so the
command resumes where it stopped: rerun it and the seeds already in the file are skipped.

Shape legend as in :mod:`attncore.training.induction_model`: ``N`` layers, ``H`` heads per layer, ``L = 2T``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from attncore.device import resolve_device
from attncore.errors import AttnInputError
from attncore.provenance import git_commit, portable_command
from attncore.synthetic import make_generator
from attncore.training import io as _io
from attncore.training.config import TrainConfig
from attncore.training.induction_model import (
    EVAL_SEED,
    FORMED_SCORE,
    SIZE,
    VOCAB,
    AttentionOnly,
    Phase,
    copy_losses,
    induction_config,
    induction_score,
    phase_change,
    previous_token_score,
    repeated_batch,
    training_batch,
)
from attncore.training.sink_grid import machine  # the result headers' one machine line
from attncore.training.sink_stats import t_interval

__all__ = ["FILE", "SEEDS", "InductionRun", "formed", "load_runs", "main", "run_record", "seed_summary",
           "summarize", "train_induction"]

FILE = "induction.jsonl"
SEEDS = (0, 1, 2)
MAP_DIGITS = 3  # the maps' weights in a record, rounded (a 64 x 64 map: about 20 KB of JSON)

Progress = Callable[..., None]  # (step, total, batch loss, second-copy loss, probe dict)
Cancel = Callable[[], bool]


@dataclass(frozen=True)
class InductionRun:
    """One training run of the induction model (lists aligned with ``steps``).

    Attributes:
        config: the run's settings (``context = 2T``).
        steps: the evaluation steps (0: the untrained model; every ``eval_every``; the last step run).
        loss_first, loss_second: mean loss on the first copy's tokens 1..T-1 and on the second's T+1..2T-1
            of the fixed evaluation batch (nats).
        val_loss: the mean loss over every predicted token of that batch (the Training lab's kept runs
            compare it with the character models' validation loss).
        induction, previous: (N, H) nested lists per step, every head's induction and previous-token score.
        batch_loss: every step's training loss (all predicted positions).
        prev_head, ind_head: (layer, head) of the previous-token head (layer 0, highest previous-token score
            at the end) and of the induction head (layer 1, highest induction score at the end).
        maps: "before" / "after" -> {"step": s, "prev": (L, L) nested list, "ind": (L, L)}: the two heads'
            maps on the first evaluation sequence at the points of
            :class:`~attncore.training.induction_model.Phase`.
        ids: the first evaluation sequence (2T tokens), the one the maps are drawn on.
        cancelled: Stop ended the run early; wall_s: its seconds.
    """

    config: TrainConfig
    steps: list[int]
    loss_first: list[float]
    loss_second: list[float]
    val_loss: list[float]
    induction: list[list[list[float]]]
    previous: list[list[list[float]]]
    batch_loss: list[float]
    prev_head: tuple[int, int]
    ind_head: tuple[int, int]
    maps: dict[str, dict[str, Any]]
    ids: list[int]
    cancelled: bool = False
    wall_s: float = 0.0
    device: str = "cpu"
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def copy(self) -> int:
        """T."""
        return self.config.context // 2

    def phase(self) -> Phase:
        """The phase change by :func:`~attncore.training.induction_model.phase_change`'s rule."""
        return phase_change(self.steps, self.loss_second)

    def curves(self) -> dict[str, Any]:
        """The JSON-able part (no model)."""
        return {"config": self.config.to_dict(), "vocab_size": VOCAB, "steps": self.steps,
                "loss_first": self.loss_first, "loss_second": self.loss_second, "induction": self.induction,
                "previous": self.previous, "batch_loss": self.batch_loss, "prev_head": list(self.prev_head),
                "ind_head": list(self.ind_head), "maps": self.maps, "ids": self.ids,
                "cancelled": self.cancelled, "wall_s": self.wall_s, "device": self.device,
                "formed_score": FORMED_SCORE, "val_loss": self.val_loss, "final_val_loss": self.val_loss[-1],
                "train_loss": [None] * len(self.steps), "diverged_at": None,
                "final_train_loss": sum(tail) / len(tail)
                if (tail := self.batch_loss[-self.config.eval_every:]) else None,
                "tokens_per_s": len(self.batch_loss) * self.config.batch * self.config.context / self.wall_s
                if self.wall_s > 0 else 0.0}


def _rounded(w: torch.Tensor) -> list[list[float]]:
    return [[round(float(x), MAP_DIGITS) for x in row] for row in w.tolist()]


def train_induction(config: TrainConfig, text: str = "", *, device: str | torch.device | None = None,
                    progress: Progress | None = None, cancel: Cancel | None = None) -> InductionRun:
    """Train the attention-only model of ``config`` (from :func:`induction_config`) with Adam on fresh
    repeated random sequences every step; at step 0, every ``eval_every`` steps and the last step: both
    copies' losses and every head's scores on a fixed evaluation batch (seeded :data:`EVAL_SEED`).

    The model is drawn from a generator seeded ``config.seed``, the batches from ``config.seed + 1``.
    ``text`` is unused (the job queue's runner signature: the task is random tokens). ``progress(step,
    total, batch loss, second-copy loss, probe)`` after each step (the probe dict at evaluation points);
    ``cancel()`` before each step stops the run, keeping what it measured.
    """
    if config.n_layer != 2 or config.context % 2 or config.variant != "standard":
        raise AttnInputError("the induction run is a 2-layer softmax model on two copies (an even context).")
    t0 = time.perf_counter()
    dev = resolve_device(device)
    T, B = config.context // 2, config.batch
    model = AttentionOnly(VOCAB, config.context, config.d_model, 2, config.n_head,
                          make_generator(config.seed), positions=config.positions).to(dev)
    data_gen = make_generator(config.seed + 1)
    eval_ids = repeated_batch(int(SIZE["eval_batch"]), T, make_generator(EVAL_SEED)).to(dev)  # (B', 2T)
    opt = torch.optim.Adam(model.parameters(), lr=config.lr)
    steps: list[int] = []
    lf: list[float] = []
    ls: list[float] = []
    val_loss: list[float] = []
    ind: list[list[list[float]]] = []
    prev: list[list[list[float]]] = []
    maps_at: list[torch.Tensor] = []  # per evaluation point: (N, H, L, L) on the first evaluation sequence
    batch_loss: list[float] = []
    cancelled = False

    def evaluate(step: int) -> dict[str, Any]:
        with torch.no_grad():
            logits, w = model(eval_ids)  # w: (N, B', H, L, L)
        first, second = copy_losses(logits, eval_ids)
        val = float(torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, VOCAB),
                                                      eval_ids[:, 1:].reshape(-1)))
        i_s = induction_score(w, T).mean(dim=1)  # (N, H)
        p_s = previous_token_score(w).mean(dim=1)
        steps.append(step)
        lf.append(first)
        val_loss.append(val)
        ls.append(second)
        ind.append(i_s.tolist())
        prev.append(p_s.tolist())
        maps_at.append(w[:, 0].cpu())
        return {"loss_first": first, "loss_second": second, "induction": i_s.tolist(),
                "previous": p_s.tolist()}

    def report(step: int, loss: float | None, probe: dict[str, Any] | None) -> None:
        if progress is not None:
            progress(step, config.steps, loss, None if probe is None else probe["loss_second"], probe)

    report(0, None, evaluate(0))
    for step in range(1, config.steps + 1):
        if cancel is not None and cancel():
            cancelled = True
            break
        if config.warmup:
            for group in opt.param_groups:
                group["lr"] = config.lr * min(1.0, step / config.warmup)
        ids = training_batch(B, T, data_gen).to(dev)
        logits, _ = model(ids)
        loss = torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, VOCAB), ids[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        batch_loss.append(float(loss.detach()))
        probe = evaluate(step) if step % config.eval_every == 0 or step == config.steps else None
        report(step, batch_loss[-1], probe)
    if steps[-1] != len(batch_loss) and batch_loss:  # stopped between evaluation points
        evaluate(len(batch_loss))
    layer0 = torch.tensor(prev[-1][0])
    layer1 = torch.tensor(ind[-1][1])
    ph, hi = (0, int(layer0.argmax())), (1, int(layer1.argmax()))
    if len(steps) >= 2:
        phase = phase_change(steps, ls)
        points = {"before": phase.before_index, "after": phase.after_index}
    else:
        points = {"before": 0, "after": 0}
    maps = {name: {"step": steps[i], "prev": _rounded(maps_at[i][ph[0], ph[1]]),
                   "ind": _rounded(maps_at[i][hi[0], hi[1]])} for name, i in points.items()}
    return InductionRun(config=config, steps=steps, loss_first=lf, loss_second=ls, val_loss=val_loss,
                        induction=ind,
                        previous=prev, batch_loss=batch_loss, prev_head=ph, ind_head=hi, maps=maps,
                        ids=eval_ids[0].tolist(), cancelled=cancelled, wall_s=time.perf_counter() - t0,
                        device=str(dev))


# ---------------------------------------------------------------------------- what a run says


def seed_summary(rec: dict[str, Any]) -> dict[str, Any]:
    """One run record (:meth:`InductionRun.curves`) in numbers: its phase change (:class:`Phase` as a dict),
    the induction head's induction score and the previous-token head's previous-token score at the points
    before and after it, both copies' losses at the last point, and whether an induction head formed
    (:func:`formed`)."""
    steps = [int(s) for s in rec["steps"]]
    ph = phase_change(steps, [float(v) for v in rec["loss_second"]])
    (pl, phh), (il, ih) = rec["prev_head"], rec["ind_head"]
    b, a = ph.before_index, ph.after_index
    out = {"seed": int(rec["config"]["seed"]), "phase_step": ph.step, "rate": ph.rate, "begins": ph.begins,
           "ends": ph.ends, "before_step": steps[b], "after_step": steps[a],
           "ind_before": float(rec["induction"][b][il][ih]),
           "ind_after": float(rec["induction"][a][il][ih]),
           "prev_before": float(rec["previous"][b][pl][phh]),
           "prev_after": float(rec["previous"][a][pl][phh]),
           "loss_first_end": float(rec["loss_first"][-1]), "loss_second_end": float(rec["loss_second"][-1]),
           "loss_second_start": float(rec["loss_second"][0]), "last_step": steps[-1]}
    out["formed"] = formed(out)
    return out


def formed(s: dict[str, Any]) -> bool:
    """The rule: an induction head formed when the induction head's score after the phase change reaches
    :data:`~attncore.training.induction_model.FORMED_SCORE` and the second copy's loss at the end is below
    half the first copy's (the model predicts what it has seen, not what it has not)."""
    return s["ind_after"] >= FORMED_SCORE and s["loss_second_end"] < 0.5 * s["loss_first_end"]


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Every seed's :func:`seed_summary` and, over the seeds, the phase step's and the scores' mean with
    its 95% t interval (``t_interval``: ``half`` None from one seed) and how many seeds formed a head."""
    per = [seed_summary(r) for r in runs]
    keys = ("phase_step", "ind_before", "ind_after", "prev_before", "prev_after", "loss_first_end",
            "loss_second_end")
    return {"seeds": per, "n": len(per), "n_formed": sum(s["formed"] for s in per),
            **{k: t_interval([s[k] for s in per]) for k in keys}}


# ---------------------------------------------------------------------------- the shipped run


def run_record(run: InductionRun) -> dict[str, Any]:
    """A run as one line of the result file: its curves, its phase change and the machine's load."""
    ph = run.phase()
    return {**run.curves(), "seed": run.config.seed,
            "phase": {"step": ph.step, "rate": ph.rate, "begins": ph.begins, "ends": ph.ends,
                      "fall": ph.fall}}


def load_runs(path: str | Path | None = None) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(header, runs) of a result file (default: the one shipped in this package). A missing file gives an
    empty header and no runs; a line that is not JSON (a run cut off mid-write) is skipped."""
    p = Path(path) if path is not None else Path(_io.RESULTS_DIR) / FILE
    header, runs = _io.read_runs(p)
    return header, sorted(runs, key=lambda r: int(r.get("seed", 0)))


def main(argv: list[str] | None = None) -> int:
    """Command line entry point; returns the exit status."""
    p = argparse.ArgumentParser(prog="python -m attncore.training.induction",
                                description=(__doc__ or "").split("\n")[0])
    p.add_argument("--out", required=True, type=Path, help=f"directory for {FILE} (appended to, resumed)")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    p.add_argument("--seeds", type=int, nargs="+", default=list(SEEDS), help="seeds (default 0 1 2)")
    args = p.parse_args(argv)
    torch.set_num_threads(max(1, args.threads))
    path = args.out / FILE
    args.out.mkdir(parents=True, exist_ok=True)
    header, runs = load_runs(path)
    done = {int(r["seed"]) for r in runs}
    if not header:
        header = {"kind": "header", "experiment": "induction", "size": SIZE, "vocab": VOCAB,
                  "config": induction_config(0).to_dict(),
                  "command": portable_command("python -m attncore.training.induction",
                                              argv if argv is not None else sys.argv[1:]),
                  "machine": machine(), "git_commit": git_commit(),
                  "started": time.strftime("%Y-%m-%d %H:%M:%S %Z")}
        with path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(header) + "\n")
    for seed in [s for s in args.seeds if s not in done]:
        run = train_induction(induction_config(seed), device="cpu")
        rec = run_record(run) | {"machine_load": os.getloadavg()[0]}
        with path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(rec) + "\n")
        print(f"  seed {seed}: phase change at step {rec['phase']['step']:g}, loss second copy "
              f"{run.loss_second[0]:.2f} -> {run.loss_second[-1]:.2f}, induction score "
              f"{run.induction[-1][1]} ({run.wall_s:.0f} s)", file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    try:
        raise SystemExit(main())
    except AttnInputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
