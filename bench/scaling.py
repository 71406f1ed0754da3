"""Benchmark: the 1/sqrt(E) intervention (attncore.decoder.scaling) against plain transformers forwards.

In one run, on the shipped text's first ``--tokens`` tokens with SmolLM2 (offline): seven plain transformers
forwards with the loss (torch's fused SDPA, the model's own kernel; every ``self_attn.scaling`` set to c / 8
for each), seven plain eager forwards (the implementation that returns weights), then
:func:`attncore.decoder.scaling.scaled_runs` over the seven factors (eager, each layer's weights summarised in
a hook), and :func:`~attncore.decoder.scaling.logit_spread` once. Prints wall and the process's CPU seconds
(the fairer number on a shared machine), the ratio to the SDPA forwards, the budget (12 s on an idle 2-core
machine for the seven settings at 512 tokens), the largest loss difference from the plain forwards (the same
computation), each factor's perplexity, and the load average.

Run: python -m bench.scaling [--tokens 512] [--threads 0]
"""

from __future__ import annotations

import argparse
import math
import os
import time
from collections.abc import Callable, Sequence

import torch

from attncore.decoder.scaling import FACTORS, logit_spread, scaled_runs, scaling
from attncore.decoder.text import shipped_text, text_tokens
from attncore.models.modules import attention_implementation

BUDGET_S = 12.0


def plain_losses(model: torch.nn.Module, ids: torch.Tensor, impl: str) -> list[float]:
    """Mean nll of one plain forward per factor (the scaling changed as the intervention changes it)."""
    out = []
    with attention_implementation(model, impl), torch.inference_mode():
        for c in FACTORS:
            with scaling(model, c):
                logits = model(input_ids=ids, use_cache=False).logits[0, :-1].float()
            out.append(float(torch.nn.functional.cross_entropy(logits, ids[0, 1:])))
    return out


def clock(fn: Callable[[], object]) -> tuple[float, float, object]:
    t0, c0 = time.perf_counter(), time.process_time()
    res = fn()
    return time.perf_counter() - t0, time.process_time() - c0, res


def main(argv: Sequence[str] | None = None) -> int:
    """Time the plain forwards, the intervention and the spread; print one line each."""
    p = argparse.ArgumentParser(prog="python -m bench.scaling", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tokens", type=int, default=512)
    p.add_argument("--threads", type=int, default=0)
    args = p.parse_args(argv)
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    from attncore.models import load_model

    lm = load_model("smollm2")
    model = lm.model.eval()
    ids = text_tokens(lm.tokenizer, shipped_text(), args.tokens, min_tokens=2).ids
    L = int(ids.shape[1])
    print(f"SmolLM2, {L} tokens of the shipped text, {len(FACTORS)} factors, torch threads "
          f"{torch.get_num_threads()}, load average before {os.getloadavg()[0]:.1f}")
    plain_losses(model, ids[:, :16], "sdpa")  # warm-up
    scaled_runs(model, ids[:, :16], (1.0,))
    sdpa_s, sdpa_cpu, sdpa = clock(lambda: plain_losses(model, ids, "sdpa"))
    eager_s, eager_cpu, _ = clock(lambda: plain_losses(model, ids, "eager"))
    ours_s, ours_cpu, runs = clock(lambda: scaled_runs(model, ids, FACTORS))
    spread_s, spread_cpu, _ = clock(lambda: logit_spread(model, ids))
    print(f"{'transformers forwards, SDPA (x7)':<40} {sdpa_s:7.2f} s  (CPU {sdpa_cpu:7.2f} s)")
    print(f"{'transformers forwards, eager (x7)':<40} {eager_s:7.2f} s  (CPU {eager_cpu:7.2f} s)")
    flag = "ok" if ours_s <= BUDGET_S else f"over the {BUDGET_S:g} s budget"
    print(f"{'attncore scaled_runs (x7, with weights)':<40} {ours_s:7.2f} s  (CPU {ours_cpu:7.2f} s)  "
          f"ratio to SDPA {ours_s / sdpa_s:5.2f} (CPU {ours_cpu / sdpa_cpu:5.2f}), to eager "
          f"{ours_s / eager_s:5.2f}  ({flag})")
    print(f"{'attncore logit_spread (x1)':<40} {spread_s:7.2f} s  (CPU {spread_cpu:7.2f} s)")
    assert isinstance(runs, tuple) and isinstance(sdpa, list)
    diff = max(abs(r.loss - s) for r, s in zip(runs, sdpa, strict=True))
    print(f"largest mean-loss difference from the SDPA forwards: {diff:.2e} nats")
    print("perplexity per c: " + ", ".join(f"c={r.factor:g}: {r.perplexity:,.2f}" for r in runs))
    print("check: perplexity from the SDPA forwards: "
          + ", ".join(f"{math.exp(s):,.2f}" for s in sdpa))
    print(f"load average after {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
