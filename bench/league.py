"""Benchmark: training-step throughput of every league variant beside softmax at the league's size.

One training step (Bigram-Backcopy sampling + forward + backward + AdamW) at the league's settings
(:data:`attncore.training.league.LEAGUE` ``["base"]``: 2 layers x 4 heads, d_model 64, context 64, batch 32),
for each variant timed in alternation with softmax (round by round, so the machine's drifting speed and the
load of other processes hit both alike): the median step of each, their ratio (issue 43's target: within
1.5x of softmax), and the load average before and after (this machine is shared).

Run: python -m bench.league [--threads N] [--rounds R] [--steps S]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F

from attncore.training import CharTransformer, TrainConfig
from attncore.training.bbm import BigramBackcopy
from attncore.training.league import LEAGUE
from attncore.training.record import default_corpus
from attncore.training.train import make_optimizer

TARGET = 1.5


def make_step(cfg: TrainConfig, task: BigramBackcopy) -> Callable[[], None]:
    """One training step of a fresh model of ``cfg`` (seed 0) on batches of ``task``."""
    model = CharTransformer.create(cfg, task.vocab, torch.Generator().manual_seed(0)).train()
    opt = make_optimizer(model, cfg)
    g = torch.Generator().manual_seed(1)
    B, T = cfg.batch, cfg.context

    def step() -> None:
        batch = task.sample(B, T + 1, g)
        logits, _ = model(batch[:, :-1])
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(logits.flatten(0, 1), batch[:, 1:].flatten()).backward()
        opt.step()

    return step


def timed(fn: Callable[[], None], steps: int) -> float:
    """Seconds per call over ``steps`` calls."""
    t0 = time.perf_counter()
    for _ in range(steps):
        fn()
    return (time.perf_counter() - t0) / steps


def main() -> None:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--rounds", type=int, default=5, help="alternating rounds per variant")
    p.add_argument("--steps", type=int, default=5, help="training steps per timing")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    base = TrainConfig(**LEAGUE["base"], lr=LEAGUE["lrs"][0])
    task = BigramBackcopy.from_text(default_corpus().read_text(encoding="utf-8"))
    tokens = base.batch * base.context
    load0 = os.getloadavg()
    print(f"League size: {base.n_layer} layers x {base.n_head} heads, d_model {base.d_model}, context "
          f"{base.context}, batch {base.batch}; torch {torch.__version__}, {args.threads} thread(s), "
          f"{os.cpu_count()} logical CPUs; load average {load0[0]:.1f} / {load0[1]:.1f} / {load0[2]:.1f}")
    soft = make_step(base.replace(variant="standard"), task)
    soft()
    print(f"{'variant':<16} {'ms/step':>8} {'softmax':>8} {'ratio':>6}  tokens/s   within {TARGET:g}x")
    worst = 0.0
    for v in LEAGUE["variants"]:
        if v["variant"] == "standard":
            continue
        ours = make_step(base.replace(**v), task)
        ours()
        t_ours, t_soft = [], []
        for _ in range(args.rounds):
            t_ours.append(timed(ours, args.steps))
            t_soft.append(timed(soft, args.steps))
        a, b = statistics.median(t_ours), statistics.median(t_soft)
        worst = max(worst, a / b)
        print(f"{v['variant']:<16} {a * 1e3:8.1f} {b * 1e3:8.1f} {a / b:6.2f}  {tokens / a:8,.0f}   "
              f"{'yes' if a / b <= TARGET else 'NO'}")
    load1 = os.getloadavg()
    print(f"worst ratio {worst:.2f} (target {TARGET:g}); load average after {load1[0]:.1f} / "
          f"{load1[1]:.1f} / {load1[2]:.1f}")


if __name__ == "__main__":
    main()
