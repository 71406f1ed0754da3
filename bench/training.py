"""Benchmark: training throughput of attncore.training's character transformer.

Prints, for the default TrainConfig (4 layers, 4 heads, d_model 128, context 128, batch 32):
tokens/s of forward + backward, the achieved GFLOP/s against this machine's matmul rate at
the model's own GEMM shapes measured in the same run (the issue's target: >= 0.3 of it), and
each attention variant's forward + backward time relative to ``standard`` (timed in
alternation with it, so that the machine's drifting speed hits both alike), and ``standard``
computed through attncore's materialised attention (the reference path) against fused SDPA.

Then the Bigram-Backcopy task at the null_attention experiment's size (1 layer, 1 head, d_model 64,
context 64, batch 64): the on-the-fly sequence generator (``BigramBackcopy.sample``, vectorised
over the batch) against a per-token numpy loop as in Guo et al.'s ``BBM/data.py``, and a whole
training step (sampling + forward + backward + AdamW) per variant in tokens/s.

Run: python -m bench.training [--threads N] [--repeats R]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch
import torch.nn.functional as F

from attncore import resolve_device
from attncore.training import VARIANTS, CharTransformer, TrainConfig
from attncore.training.bbm import BigramBackcopy
from attncore.training.model import FUSED_VARIANTS
from attncore.training.null_attention import SIZES as NULL_SIZES
from attncore.training.train import make_optimizer
from bench.common import median_time

VOCAB = 65  # tiny Shakespeare's character count


def model_flops(cfg: TrainConfig, vocab: int) -> float:
    """Matmul FLOPs of one forward + backward over a batch (backward = 2x forward).

    Per token and layer: q, k, v and output projections 8 D^2, MLP 16 D^2, scores and
    weights x values 4 T D (the full T x T products, as the kernels compute them); the
    tied output layer 2 D V per token.
    """
    B, T, D, N = cfg.batch, cfg.context, cfg.d_model, cfg.n_layer
    per_token = N * (24 * D * D + 4 * T * D) + 2 * D * vocab
    return 3.0 * B * T * per_token


def matmul_rate(cfg: TrainConfig, vocab: int, device: torch.device, repeats: int) -> float:
    """FLOP/s of torch matmuls at the model's shapes, weighted as in one forward pass."""
    B, T, D, H, E = cfg.batch, cfg.context, cfg.d_model, cfg.n_head, cfg.d_head
    g = torch.Generator(device="cpu").manual_seed(0)

    def r(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=g).to(device)

    x, x4 = r(B * T, D), r(B * T, 4 * D)
    w3, w1, w4, w4t, wv = r(D, 3 * D), r(D, D), r(D, 4 * D), r(4 * D, D), r(D, vocab)
    q, k, v = r(B * H, T, E), r(B * H, T, E), r(B * H, T, E)
    a = r(B * H, T, T)
    work = [  # (flops, count per forward, fn)
        (2 * B * T * D * 3 * D, cfg.n_layer, lambda: x @ w3),
        (2 * B * T * D * D, cfg.n_layer, lambda: x @ w1),
        (2 * B * T * D * 4 * D, cfg.n_layer, lambda: x @ w4),
        (2 * B * T * 4 * D * D, cfg.n_layer, lambda: x4 @ w4t),
        (2 * B * H * T * T * E, cfg.n_layer, lambda: q @ k.transpose(1, 2)),
        (2 * B * H * T * T * E, cfg.n_layer, lambda: a @ v),
        (2 * B * T * D * vocab, 1, lambda: x @ wv),
    ]
    flops = sum(f * n for f, n, _ in work)
    seconds = sum(median_time(fn, repeats=repeats) * n for _, n, fn in work)
    return flops / seconds


def step_fn(model: CharTransformer, idx: torch.Tensor, tgt: torch.Tensor):
    """One forward + backward (gradients zeroed first)."""

    def run() -> None:
        model.zero_grad(set_to_none=True)
        logits, _ = model(idx)
        F.cross_entropy(logits.flatten(0, 1), tgt.flatten()).backward()

    return run


def main() -> None:
    p = argparse.ArgumentParser(description="training throughput")
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    p.add_argument("--repeats", type=int, default=5)
    args = p.parse_args()
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    device = resolve_device()
    cfg = TrainConfig()
    print(f"device {device}, torch {torch.__version__}, {torch.get_num_threads()} threads; default "
          f"TrainConfig: {cfg.n_layer} layers, {cfg.n_head} heads, d_model {cfg.d_model}, context "
          f"{cfg.context}, batch {cfg.batch}, vocab {VOCAB}")
    g = torch.Generator(device="cpu").manual_seed(0)
    idx = torch.randint(0, VOCAB, (cfg.batch, cfg.context), generator=g).to(device)
    tgt = torch.randint(0, VOCAB, (cfg.batch, cfg.context), generator=g).to(device)
    vocab = "".join(chr(32 + i) for i in range(VOCAB))
    models = {v: CharTransformer.create(cfg.replace(variant=v), vocab, torch.Generator().manual_seed(0))
              .to(device).train() for v in VARIANTS}
    tokens = cfg.batch * cfg.context

    std_step = step_fn(models["standard"], idx, tgt)
    t_std = median_time(std_step, repeats=args.repeats)
    rate = matmul_rate(cfg, VOCAB, device, args.repeats)
    t_std2 = median_time(std_step, repeats=args.repeats)
    t = min(t_std, t_std2)
    flops = model_flops(cfg, VOCAB)
    achieved = flops / t
    print(f"standard forward+backward: {t * 1e3:.1f} ms per batch of {tokens} tokens = "
          f"{tokens / t:,.0f} tokens/s ({t_std * 1e3:.1f} / {t_std2 * 1e3:.1f} ms before / after the "
          "matmul timing)")
    print(f"achieved {achieved / 1e9:.2f} GFLOP/s ({flops / 1e9:.2f} GFLOP per step) vs torch matmul at "
          f"the model's shapes {rate / 1e9:.2f} GFLOP/s: ratio {achieved / rate:.2f} (target >= 0.3)")

    print("variant cost, forward + backward, timed in alternation with standard (ratio = variant/standard):")
    reference = CharTransformer.create(cfg, vocab, torch.Generator().manual_seed(0)).to(device).train()
    reference.set_fused(False)
    entries = [(v, models[v], "fused SDPA" if v in FUSED_VARIANTS else "attncore materialised")
               for v in VARIANTS if v != "standard"]
    entries.append(("standard (reference)", reference, "attncore materialised, vs fused SDPA"))
    for name, model, path in entries:
        var_step = step_fn(model, idx, tgt)
        var_step()
        std_step()
        ts, tv = [], []
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            std_step()
            t1 = time.perf_counter()
            var_step()
            t2 = time.perf_counter()
            ts.append(t1 - t0)
            tv.append(t2 - t1)
        ms, mv = statistics.median(ts), statistics.median(tv)
        print(f"  {name:<20} {mv * 1e3:8.1f} ms  standard {ms * 1e3:8.1f} ms  ratio {mv / ms:5.2f}  "
              f"{tokens / mv:10,.0f} tokens/s  ({path})")
    bbm_bench(device, args.repeats)


def bbm_text() -> str:
    """A corpus for the task: tiny Shakespeare when it is at hand, else the built-in standard-library text."""
    from attncore.training.record import default_corpus  # noqa: PLC0415

    path = default_corpus()
    if path.is_file():
        return path.read_text(encoding="utf-8")
    from ui.corpus import stdlib_corpus  # noqa: PLC0415

    return stdlib_corpus().text


def numpy_loop_sample(task: BigramBackcopy, n: int, length: int, rng: np.random.Generator) -> np.ndarray:
    """The baseline: one ``rng.choice`` per token, as Guo et al.'s generator draws (BBM/data.py)."""
    cond, first = task.cond.numpy(), task.first.numpy()
    trig, V = set(task.triggers), task.size
    out = np.empty((n, length), dtype=np.int64)
    for b in range(n):
        seq = [task.bos, int(rng.choice(V, p=first))]
        while len(seq) < length:
            x = seq[-1]
            seq.append(seq[-2] if x in trig else int(rng.choice(V, p=cond[x])))
        out[b] = seq[:length]
    return out


def bbm_bench(device: torch.device, repeats: int) -> None:
    cfg0 = TrainConfig(**NULL_SIZES["cpu"]["config"])
    task = BigramBackcopy.from_text(bbm_text())
    B, T = cfg0.batch, cfg0.context
    tokens = B * T
    print(f"\nBigram-Backcopy task (null_attention's cpu size: {cfg0.n_layer} layer, {cfg0.n_head} head, "
          f"d_model {cfg0.d_model}, context {T}, batch {B}; {task.size} tokens, triggers "
          f"{[task.vocab[i] for i in task.triggers]}):")
    g = torch.Generator(device="cpu").manual_seed(0)
    rng = np.random.default_rng(0)
    t_ours = median_time(lambda: task.sample(B, T + 1, g), repeats=repeats)
    t_loop = median_time(lambda: numpy_loop_sample(task, B, T + 1, rng), repeats=max(1, repeats // 2))
    print(f"  sampling a batch: ours {t_ours * 1e3:.2f} ms ({tokens / t_ours:,.0f} tokens/s), per-token "
          f"numpy loop {t_loop * 1e3:.1f} ms ({tokens / t_loop:,.0f} tokens/s): ours is "
          f"{t_loop / t_ours:.0f}x faster")
    print("  one training step (sampling + forward + backward + AdamW), per variant:")
    for changes in NULL_SIZES["cpu"]["variants"]:
        cfg = cfg0.replace(**changes)
        model = CharTransformer.create(cfg, task.vocab, torch.Generator().manual_seed(0)).to(device).train()
        opt = make_optimizer(model, cfg)
        data_t: list[float] = []

        def step(model: CharTransformer = model, opt: torch.optim.Optimizer = opt,
                 times: list = data_t) -> None:
            t0 = time.perf_counter()
            batch = task.sample(B, T + 1, g).to(device)
            times.append(time.perf_counter() - t0)
            logits, _ = model(batch[:, :-1])
            opt.zero_grad(set_to_none=True)
            F.cross_entropy(logits.flatten(0, 1), batch[:, 1:].flatten()).backward()
            opt.step()

        t = median_time(step, repeats=repeats)
        share = statistics.median(data_t) / t
        name = cfg.variant + (f" b0={cfg.sink_init:g}" if cfg.variant == "sink_logit" else "")
        print(f"    {name:<18} {t * 1e3:7.1f} ms per step  {tokens / t:10,.0f} tokens/s  "
              f"(sampling {share:.0%})")


if __name__ == "__main__":
    main()
