"""Benchmark: the Training lab's GPU-scale model against issue 25's target, in one run.

Trains the ``--scale gpu`` configuration of ``python -m attncore.training.experiments`` (nanoGPT's
shakespeare-char setup: 6 layers, 6 heads, width 384, context 256, batch 64, dropout 0.2, 5,000
steps) with standard attention at lr 1e-3 on tiny Shakespeare, and prints the best and final
validation loss, the step of the best, tokens/s and the wall time beside the target: a validation
loss <= 1.47 (what nanoGPT reports for this setup) within 5 minutes on one H100/H200. The run is
stopped at ``--minutes`` (default 6: the target's 5 and room to see whether it gets there late).

Without CUDA it prints one line saying so (the CPU would need hours for this size).

Run: python -m bench.training_gpu [--minutes M] [--corpus PATH] [--lr LR]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Iterator
from pathlib import Path

import torch

from attncore.training import TrainConfig, train
from attncore.training.experiment_specs import SIZES
from attncore.training.record import default_corpus

TARGET_VAL = 1.47  # nanoGPT's shakespeare-char validation loss at this size
TARGET_S = 300.0  # within 5 minutes


def verdict(best_val: float | None, best_step: int | None, seconds_to_target: float | None) -> str:
    """One line: whether the run met the target, from its numbers."""
    if best_val is None:
        return "no evaluation point was made: target not measured"
    if seconds_to_target is not None and seconds_to_target <= TARGET_S:
        return (f"target met: validation loss {best_val:.3f} <= {TARGET_VAL} "
                f"(first reached after {seconds_to_target:.0f} s <= {TARGET_S:.0f} s)")
    if seconds_to_target is not None:
        return (f"target missed on time: validation loss reached {TARGET_VAL} only after "
                f"{seconds_to_target:.0f} s (> {TARGET_S:.0f} s)")
    return f"target missed: best validation loss {best_val:.3f} at step {best_step} (> {TARGET_VAL})"


def main() -> None:
    p = argparse.ArgumentParser(description="GPU-scale training against issue 25's target")
    p.add_argument("--minutes", type=float, default=6.0, help="stop the run after this long")
    p.add_argument("--corpus", type=Path, default=None, help="default: ../shared/data/tinyshakespeare.txt")
    p.add_argument("--lr", type=float, default=1e-3)
    args = p.parse_args()
    if not torch.cuda.is_available():
        print("bench.training_gpu: no CUDA device here; the GPU-scale target (val <= 1.47 within 5 min) "
              "is measured on a GPU only.")
        return
    corpus = args.corpus or default_corpus()
    text = corpus.read_text(encoding="utf-8")
    cfg = TrainConfig(**{**SIZES["gpu"]["lr_sweep"]["config"], "variant": "standard", "lr": args.lr})
    for line in run(cfg, text, "cuda", args.minutes, name=torch.cuda.get_device_name(0)):
        print(line, flush=True)


def run(cfg: TrainConfig, text: str, device: str, minutes: float, name: str) -> Iterator[str]:
    """Train ``cfg`` on ``text`` for at most ``minutes``; yields a line per evaluation point, then the
    summary and the verdict."""
    t0 = time.perf_counter()
    reached: list[float] = []
    lines: list[str] = []

    def progress(step: int, total: int, loss: float, val: float | None) -> None:
        if val is not None:
            elapsed = time.perf_counter() - t0
            lines.append(f"  step {step:5d}/{total}  train {loss:.3f}  val {val:.3f}  {elapsed:6.1f} s")
            if val <= TARGET_VAL and not reached:
                reached.append(elapsed)

    def late() -> bool:
        return time.perf_counter() - t0 > minutes * 60

    r = train(cfg, text, device=device, progress=progress, cancel=late)
    yield from lines
    stopped = " (stopped at the time limit)" if r.cancelled else ""
    yield (f"{name}: {cfg.n_layer} layers x {cfg.d_model}, context {cfg.context}, batch {cfg.batch}, "
           f"dropout {cfg.dropout}, lr {cfg.lr:g}; {len(r.batch_loss)} of {cfg.steps} steps in "
           f"{r.wall_s:.0f} s ({r.tokens_per_s:,.0f} tokens/s){stopped}")
    if r.best_val_loss is not None and r.final_val_loss is not None:
        yield (f"validation loss: best {r.best_val_loss:.3f} at step {r.best_val_step}, final "
               f"{r.final_val_loss:.3f}; target <= {TARGET_VAL} within {TARGET_S:.0f} s")
    yield verdict(r.best_val_loss, r.best_val_step, reached[0] if reached else None)

if __name__ == "__main__":
    main()
