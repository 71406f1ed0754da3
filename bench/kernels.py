"""Benchmark: what F.scaled_dot_product_attention runs here, its time and memory against the
materialised paths (torch's math backend, attncore.attention with weights, the notebook
softmax(QK^T)V), at T = 1k, 4k, 16k with B = 1, H = 16, E = 64.

CPU: float32 at every T and float16 at 1k (half precision is slow on CPUs). CUDA: float16 and
float32 at every T. Prints, asserts nothing. Materialised paths whose L x S matrices would
exceed the budget (--budget-gib, default 4 GiB on the CPU, half the free GPU memory on CUDA)
are skipped; the fused kernels still run.

Run: python -m bench.kernels [--budget-gib 4] [--lengths 1024,4096,16384]
"""

from __future__ import annotations

import argparse
import math
import time

import torch

from attncore import resolve_device
from attncore.kernels import KernelSpec, SizeResult, default_budget_bytes, measure_memory, probe

MIB = 1 << 20


def fmt_ms(s: float | None) -> str:
    return "—" if s is None else f"{s * 1e3:10.1f}"


def fmt_mib(b: float | None) -> str:
    return "—" if b is None else f"{b / MIB:9.1f}"


def fmt_err(e: float | None) -> str:
    if e is None:
        return "—"
    return "nan" if math.isnan(e) else f"{e:.1e}"


def print_size(res: SizeResult) -> None:
    base = res.row("default")
    print(f"  T = {res.L}: default dispatch -> {res.default_backend} ({res.choice_source})")
    print(f"  {'backend':<10} {'status':<9} {'default':<7} {'time ms':>10} {'x default':>9} "
          f"{'peak MiB':>9} {'x default':>9} {'max err':>8}  reason")
    for r in res.rows:
        t_ratio = (r.seconds / base.seconds) if (r.seconds and base.seconds) else None
        m_ratio = (r.peak_bytes / base.peak_bytes) if (r.peak_bytes and base.peak_bytes) else None
        print(f"  {r.name:<10} {r.status:<9} {'yes' if r.chosen else '':<7} {fmt_ms(r.seconds):>10} "
              f"{'' if t_ratio is None else f'{t_ratio:9.2f}':>9} {fmt_mib(r.peak_bytes):>9} "
              f"{'' if m_ratio is None else f'{m_ratio:9.1f}':>9} {fmt_err(r.max_err):>8}  "
              f"{r.reason[:150]}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--budget-gib", type=float, default=None)
    ap.add_argument("--lengths", default="1024,4096,16384")
    args = ap.parse_args()
    device = resolve_device()
    lengths = [int(t) for t in args.lengths.split(",")]
    budget = (args.budget_gib * (1 << 30) if args.budget_gib is not None
              else (4 << 30 if device.type == "cpu" else default_budget_bytes(device)))
    print(f"device {device}, torch {torch.__version__}, {torch.get_num_threads()} threads; "
          f"B=1, H=16, E=64, no mask; budget for materialised paths {budget / (1 << 30):.1f} GiB")
    plans = ([("float32", t) for t in lengths] + [("float16", t) for t in lengths if t <= 1024]
             if device.type == "cpu" else [(d, t) for d in ("float16", "float32") for t in lengths])
    summary: list[str] = []
    for dtype, T in plans:
        spec = KernelSpec(heads=16, head_dim=64, dtype=dtype)
        t0 = time.perf_counter()
        res = probe(spec, T, device, repeats=3, max_seconds=10.0, budget_bytes=budget,
                    measure_memory=False)
        res, note = measure_memory([res], spec, device)
        res = res[0]
        print(f"{dtype} (probe took {time.perf_counter() - t0:.0f} s)")
        print_size(res)
        print(f"  memory: {note}")
        fused = res.row("default")
        for name in ("math", "notebook", "attncore"):
            r = res.row(name)
            if r.seconds and fused.seconds and r.peak_bytes and fused.peak_bytes:
                summary.append(f"  {dtype} T={T}: {name} / default ({res.default_backend}): time "
                               f"{r.seconds / fused.seconds:.2f}x, peak memory "
                               f"{r.peak_bytes / fused.peak_bytes:.1f}x "
                               f"({r.peak_bytes / MIB:.0f} vs {fused.peak_bytes / MIB:.1f} MiB)")
            elif r.status == "skipped":
                summary.append(f"  {dtype} T={T}: {name} skipped ({r.reason})")
    print("Source 004 says FlashAttention gives 2-4x wall-clock speedups and O(T) instead of O(T^2) "
          "memory. Here (materialised / fused):")
    print("\n".join(summary))


if __name__ == "__main__":
    main()
