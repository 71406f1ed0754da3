"""Benchmark: attncore.sweeps.entropy_vs_length against the machine's floor and a naive notebook.

Run ``python -m bench.entropy`` (``--quick`` stops at 2^20, ``--max-exp K`` at 2^K). For each
n = 2^16 .. 2^24 it prints, measured in this one run:

* the time and peak memory (RSS above the process's RSS right after importing torch and
  attncore) of both methods, with 64 query rows and d = 128, one length per call;
* the floor: the time the unavoidable work takes on this machine at the engine's own
  shapes and worker count -- drawing the random numbers (torch ``normal_``, float32), one
  ``exp`` per logit and, for ``vectors``, the two matmuls -- with rates measured right
  before each length, so that floor and timing see the same load;
* floor / time (1.0 = nothing but the unavoidable work);
* the naive reference where it fits in memory: the plain notebook approach that draws K
  (n, d) and V (n, d), forms the (64, n) scores, their softmax, p log p and p @ V in one go,
  and its ratio to each method.

Times are the best of two calls up to 2^21 (one above). Timings on a shared machine are
noisy: the load average is printed with every length.
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import threading
import time
from collections.abc import Callable

import torch

from attncore.sweeps import SweepSpec, _plan_blocks, run_sweep

Q, D, DV = 64, 128, 16
WORKERS = max(1, min(8, torch.get_num_threads()))
NAIVE_LIMIT_BYTES = 6 << 30  # skip the naive reference above this estimate


# --------------------------------------------------------------------------- memory


def _status(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field):
                return int(line.split()[1]) * 1024
    raise RuntimeError(field)


def _reset_peak() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def measure(fn: Callable[[], object], baseline: int) -> tuple[float, float]:
    """(seconds, peak RSS above baseline in MB) of one call."""
    _reset_peak()
    t0 = time.perf_counter()
    fn()
    dt = time.perf_counter() - t0
    return dt, (_status("VmHWM") - baseline) / 2**20


# --------------------------------------------------------------------------- floor


def _parallel_rate(work: Callable[[int], int], seconds: float = 0.25) -> float:
    """Items per second of ``work(worker_id) -> items`` run by WORKERS single-threaded threads."""
    done = [0] * WORKERS
    stop = time.perf_counter() + seconds

    def loop(i: int) -> None:
        torch.set_num_threads(1)
        while time.perf_counter() < stop:
            done[i] += work(i)

    prev = torch.get_num_threads()
    t0 = time.perf_counter()
    threads = [threading.Thread(target=loop, args=(i,)) for i in range(WORKERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - t0
    torch.set_num_threads(prev)
    return sum(done) / elapsed


def floor_rates() -> dict[str, float]:
    """Machine rates at the engine's shapes: normal_ samples/s, exp elements/s, matmul flop/s."""
    cpu = torch.device("cpu")
    b_log, rt_log = _plan_blocks(SweepSpec(lengths=(1,), queries=Q, d=D, method="logits"), cpu)
    b_vec, rt_vec = _plan_blocks(SweepSpec(lengths=(1,), queries=Q, d=D, method="vectors"), cpu)
    gens = [torch.Generator().manual_seed(i) for i in range(WORKERS)]
    tiles = [torch.empty(rt_log, b_log) for _ in range(WORKERS)]
    keys = [torch.empty(b_vec, D) for _ in range(WORKERS)]
    exp_out = [torch.empty(rt_log, b_log) for _ in range(WORKERS)]
    for t in tiles:
        t.normal_()
    qs = [torch.randn(rt_vec, D) for _ in range(WORKERS)]
    ks = [torch.randn(b_vec, D) for _ in range(WORKERS)]
    vs = [torch.randn(b_vec, DV) for _ in range(WORKERS)]
    sc = [torch.empty(rt_vec, b_vec) for _ in range(WORKERS)]
    ov = [torch.empty(rt_vec, DV) for _ in range(WORKERS)]

    def rng(i: int) -> int:
        keys[i].normal_(generator=gens[i])
        return keys[i].numel()

    def expo(i: int) -> int:
        torch.exp(tiles[i], out=exp_out[i])
        return tiles[i].numel()

    def mm(i: int) -> int:
        torch.matmul(qs[i], ks[i].T, out=sc[i])
        torch.matmul(sc[i], vs[i], out=ov[i])
        return 2 * rt_vec * b_vec * (D + DV)

    return {"rng": _parallel_rate(rng), "exp": _parallel_rate(expo), "flops": _parallel_rate(mm)}


def floor_seconds(method: str, n: int, rates: dict[str, float]) -> float:
    """The unavoidable work of one call at length n, at the measured rates."""
    block, _ = _plan_blocks(SweepSpec(lengths=(n,), queries=Q, d=D, method=method), torch.device("cpu"))
    keys = -(-n // block) * block  # the engine draws whole blocks
    if method == "logits":
        return keys * Q / rates["rng"] + keys * Q / rates["exp"]
    return (keys * (D + DV) / rates["rng"] + keys * Q / rates["exp"]
            + 2 * Q * keys * (D + DV) / rates["flops"])


# --------------------------------------------------------------------------- naive


def naive(n: int, seed: int = 0) -> float:
    """The notebook way: materialise everything for n keys, reduce; returns the mean entropy."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(Q, D, generator=g)
    k = torch.randn(n, D, generator=g)  # (n, d)
    v = torch.randn(n, D, generator=g)  # (n, d)
    scores = q @ k.T / math.sqrt(D)  # (Q, n)
    p = torch.softmax(scores, dim=-1)  # (Q, n)
    h = -(p * torch.log(p)).sum(-1)
    _ = p.amax(-1), (p * p).sum(-1), (p @ v).std()
    return float(h.mean())


def naive_bytes(n: int) -> int:
    return 4 * (2 * n * D + 5 * Q * n)  # K, V, scores, p, log p, p log p, p^2


# --------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="stop at n = 2^20")
    ap.add_argument("--max-exp", type=int, default=24, help="largest n = 2^K (default 24)")
    args = ap.parse_args(argv)
    top = min(args.max_exp, 20 if args.quick else 24)
    torch.set_flush_denormal(True)
    baseline = _status("VmRSS")
    print(f"bench.entropy: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
          f"torch {torch.__version__}, {torch.get_num_threads()} intra-op threads, {WORKERS} sweep workers")
    print(f"queries = {Q}, d = {D}, value dim = {DV} (vectors), float32 samples, float64 sums; "
          f"load average before: {os.getloadavg()[0]:.2f}")
    print(f"RSS after importing torch + attncore: {baseline / 2**20:.0f} MB (peaks below are above it)")
    rates = floor_rates()
    print(f"floor rates at the start ({WORKERS} workers): normal_ {rates['rng'] / 1e9:.3f} G samples/s, "
          f"exp {rates['exp'] / 1e9:.2f} G/s, matmul (engine shapes) {rates['flops'] / 1e9:.1f} GFLOP/s")
    run_sweep(SweepSpec(lengths=(1 << 16,), queries=Q, d=D), device="cpu")  # warm up
    header = (f"{'n':>5} {'method':>8} {'time s':>8} {'peak MB':>8} {'floor s':>8} {'floor/time':>10} "
              f"{'naive s':>8} {'naive MB':>9} {'naive/ours':>10} {'rng G/s':>8} {'load':>5}")
    print(header)
    print("-" * len(header))
    peak_max = 0.0
    for e in range(16, top + 1):
        n = 1 << e
        reps = 2 if e <= 21 else 1
        nv = None
        if naive_bytes(n) <= NAIVE_LIMIT_BYTES:
            nv = min((measure(lambda n=n: naive(n), baseline) for _ in range(reps)), key=lambda r: r[0])
        rates = floor_rates()
        for method in ("logits", "vectors"):
            spec = SweepSpec(lengths=(n,), queries=Q, d=D, method=method, value_dim=DV)
            t, peak = min((measure(lambda spec=spec: run_sweep(spec, device="cpu"), baseline)
                           for _ in range(reps)), key=lambda r: r[0])
            peak_max = max(peak_max, peak)
            fl = floor_seconds(method, n, rates)
            naive_cols = (f"{nv[0]:8.2f} {nv[1]:9.0f} {nv[0] / t:10.1f}" if nv else
                          f"{'-':>8} {'-':>9} {'(> ' + str(NAIVE_LIMIT_BYTES >> 30) + ' GB)':>10}")
            cols = f"{'2^' + str(e):>5} {method:>8} {t:8.2f} {peak:8.0f} {fl:8.2f} {fl / t:10.2f}"
            print(f"{cols} {naive_cols} {rates['rng'] / 1e9:8.3f} {os.getloadavg()[0]:5.2f}", flush=True)
    print(f"largest peak above the post-import RSS: {peak_max:.0f} MB; load average after: "
          f"{os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
