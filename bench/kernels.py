"""Benchmark: what F.scaled_dot_product_attention runs here, its time and memory against the
materialised paths (torch's math backend, attncore.attention with weights, the notebook
softmax(QK^T)V), with B = 1, H = 16, E = 64.

Times are medians of interleaved rounds (a round calls every path once, in turn) with the
interval of the median (min–max up to 8 rounds, then the order statistics that hold it with at
least 95% probability) and the machine's 1-minute load; ratios are the medians of the per-round
ratios to the default dispatch (the baseline), to two significant figures, with their interval.
Then the reference page's claims about FlashAttention with the verdict attncore.kernels.claims computes
from these numbers.

CPU: float32 at T = 512, 1k, 2k, 4k and float16 at 512 and 1k (half precision is slow on CPUs).
CUDA: float16 and float32 at T = 1k, 2k, 4k, 8k, 16k. Prints, asserts nothing. Materialised
paths whose L x S matrices would exceed the budget (--budget-gib, default 4 GiB on the CPU, half
the free GPU memory on CUDA) are skipped; the fused kernels still run.

Run: python -m bench.kernels [--lengths 512,1024] [--dtypes float32] [--rounds 9] [--mask causal]
"""

from __future__ import annotations

import argparse
import math
import time

import torch

from attncore import resolve_device
from attncore.kernels import (
    KernelSpec,
    SizeResult,
    check_claims,
    default_budget_bytes,
    fmt_ratio,
    measure_memory,
    paired_ratio,
    probe,
)
from attncore.kernels.claims import fmt3
from attncore.kernels.results import Spread

MIB = 1 << 20


def fmt_ms(s: Spread | None) -> str:
    if s is None:
        return "—"
    iv = "" if s.n < 2 else f"{fmt3(s.lo * 1e3)}–{fmt3(s.hi * 1e3)}"
    return f"{fmt3(s.median * 1e3):>8} {iv:>15}"


def fmt_ratio_iv(s: Spread | None) -> str:
    if s is None:
        return ""
    iv = "" if s.n < 2 or s.lo == s.hi else f"{fmt_ratio(s.lo)}–{fmt_ratio(s.hi)}"
    return f"{fmt_ratio(s.median):>5} {iv:>11}"


def fmt_err(e: float | None) -> str:
    if e is None:
        return "—"
    return "nan" if math.isnan(e) else f"{e:.1e}"


def print_size(res: SizeResult) -> None:
    base = res.row("default")
    load = res.load
    where = "" if load is None else (f"; load {load.before:.1f} → {load.after:.1f} on {load.cpus} CPUs, "
                                     f"torch threads: {load.threads}")
    print(f"  T = {res.L}: default dispatch -> {res.default_backend} ({res.choice_source}){where}")
    print(f"  {'path':<10} {'status':<9} {'dflt':<4} {'ms median':>8} {'interval':>15} {'n':>2} "
          f"{'x default':>5} {'interval':>11} {'GFLOP/s':>8} {'peak MiB':>9} {'x dflt':>6} {'max err':>8}  "
          "reason")
    for r in res.rows:
        m_ratio = (r.peak_bytes / base.peak_bytes) if (r.peak_bytes and base.peak_bytes) else None
        rate = (r.flops / 1e9 / r.time.median) if (r.flops and r.time and r.time.median > 0) else None
        print(f"  {r.name:<10} {r.status:<9} {'yes' if r.chosen else '':<4} {fmt_ms(r.time):>24} "
              f"{r.rounds if r.time else '':>2} {fmt_ratio_iv(paired_ratio(r, base)):>17} "
              f"{'' if rate is None else fmt3(rate):>8} "
              f"{'—' if r.peak_bytes is None else fmt3(r.peak_bytes / MIB):>9} "
              f"{'' if m_ratio is None else fmt_ratio(m_ratio):>6} {fmt_err(r.max_err):>8}  {r.reason[:120]}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--budget-gib", type=float, default=None)
    ap.add_argument("--lengths", default=None, help="comma-separated T (default: by device)")
    ap.add_argument("--dtypes", default=None, help="comma-separated dtypes (default: by device)")
    ap.add_argument("--rounds", type=int, default=9, help="interleaved timed rounds per size")
    ap.add_argument("--max-seconds", type=float, default=10.0,
                    help="stop adding rounds once the paths have spent this long each")
    ap.add_argument("--mask", default="none", choices=("none", "causal", "boolean", "float"))
    ap.add_argument("--no-memory", action="store_true", help="skip the memory measurement")
    args = ap.parse_args()
    device = resolve_device()
    cpu = device.type == "cpu"
    lengths = ([int(t) for t in args.lengths.split(",")] if args.lengths
               else [512, 1024, 2048, 4096] if cpu else [1024, 2048, 4096, 8192, 16384])
    dtypes = (args.dtypes.split(",") if args.dtypes
              else ["float32", "float16"] if cpu else ["float16", "float32"])
    budget = (args.budget_gib * (1 << 30) if args.budget_gib is not None
              else (4 << 30 if cpu else default_budget_bytes(device)))
    print(f"device {device}, torch {torch.__version__}, {torch.get_num_threads()} threads; B=1, H=16, E=64, "
          f"mask {args.mask}; up to {args.rounds} interleaved rounds; budget for materialised paths "
          f"{budget / (1 << 30):.1f} GiB")
    verdicts: list[str] = []
    for dtype in dtypes:
        spec = KernelSpec(heads=16, head_dim=64, dtype=dtype, mask=args.mask)
        ts = sorted(t for t in lengths if not (cpu and dtype in ("float16", "bfloat16") and t > 1024))
        t0 = time.perf_counter()
        sizes = [probe(spec, T, device, repeats=args.rounds, max_seconds=args.max_seconds,
                       budget_bytes=budget, measure_memory=False) for T in ts]
        note = "not measured"
        if not args.no_memory:
            sizes, note = measure_memory(sizes, spec, device)
        print(f"\n{dtype} ({time.perf_counter() - t0:.0f} s)")
        for res in sizes:
            print_size(res)
        print(f"  memory: {note}")
        for c in check_claims(sizes, spec, device):
            verdicts.append(f"  [{dtype}] {c.topic}: {c.verdict.upper()}\n      claim: {c.claim}\n"
                            f"      measured: {c.measured}\n      caveat: {c.caveat or '—'}")
    print("\nThe claims of the reference page “Scaled Dot-Product Attention” against these numbers, by the "
          "rules of attncore.kernels.claims:")
    print("\n".join(verdicts))


if __name__ == "__main__":
    main()
