"""Benchmark on a CUDA GPU: the fused entropy sweep vs the torch engine, the materialised softmax, the floor.

Run ``python -m bench.entropy --device cuda`` (or ``python -m bench.entropy_cuda``;
``--max-exp K`` stops at 2^K, default 30; ``--min-exp K`` starts at 2^K, default 16). For
each n, with 64 query rows, d = 128 and value dim 16, it prints, measured in this one process
on one GPU (best of 3 after a warm-up call; 2 above 2^24):

* ours: :func:`attncore.sweeps.fused.run_fused_sweep`, both methods, one length per call
  (the time includes drawing the queries and the float64 merge; the result is copied back);
* the torch engine (``run_sweep(..., engine="torch")``) on the same GPU, up to its cap 2^24;
* the materialised reference where it fits in GPU memory: the notebook way, K (n, d) and
  V (n, Dv) drawn with ``torch.randn``, the (64, n) scores, softmax, ``p log p``, ``p @ V``;
  above the memory estimate (or on an out-of-memory error) it says so;
* the fused floor: one Triton kernel with the same Philox draws and one ``exp`` per sample,
  nothing else (for ``vectors`` as many samples as the sweep draws, keys and values, with the
  vectors kernel's fast transform);
* ratios: floor/ours (1.0 = nothing but the floor), torch engine/ours, materialised/ours;
* which engine the dispatch (:func:`attncore.sweeps.engine_choice`) picks at that n.

Then it sets issue 25's targets against the measurements (logits: 2^24 <= 10 ms, 2^30 <= 0.6 s;
vectors: 2^24 <= 25 ms, 2^30 <= 1.5 s) and measures the crossovers: per method, the smallest
measured n from which the fused kernels beat the torch engine (and the materialised path) at
every larger measured n, beside the dispatch table's value (:data:`attncore.sweeps.CROSSOVERS`,
the one place they are written down; update it from these lines, with the GPU and versions).

``--tune`` instead times the vectors kernel's tile alternatives (keys per tile, head-dim chunk,
warps) at ``--tune-exp`` (default 2^24): the numbers to choose ``attncore.sweeps.fused``'s
BN / DCH from on a GPU. On a machine without CUDA it prints one line saying so and exits 0.
"""

from __future__ import annotations

import argparse
import gc
import math
import time
from collections.abc import Callable

import torch

Q, D, DV = 64, 128, 16
DEV = "cuda"  # a test runs this bench's logic through Triton's interpreter with DEV = "cpu"
# issue 25's targets (one H100/H200, 64 rows, d = 128, value dim 16); logits' are issue 12's, met on the H200
TARGETS_S = {("logits", 24): 0.010, ("logits", 30): 0.6, ("vectors", 24): 0.025, ("vectors", 30): 1.5}
# (keys per tile BN, head-dim chunk DCH, warps) tried by --tune; the first is the default
TUNE_TILES = ((32, 32, 4), (16, 32, 4), (64, 32, 4), (32, 64, 4), (32, 16, 4), (32, 32, 8))


def _cuda_time(fn: Callable[[], object], reps: int) -> float:
    """Best wall seconds of ``fn()`` over ``reps`` calls after one warm-up, synchronised."""
    fn()
    torch.cuda.synchronize()
    best = math.inf
    for _ in range(reps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        best = min(best, time.perf_counter() - t0)
    return best


def materialised(n: int, method: str, seed: int = 0) -> float:
    """The notebook way on the GPU: everything for n keys materialised, reduced; mean entropy."""
    dev = torch.device(DEV)
    g = torch.Generator(device=dev).manual_seed(seed)
    q = torch.randn(Q, D, generator=g, device=dev)
    if method == "logits":  # the logits shortcut materialised: (Q, n) Gaussian logits
        scores = torch.randn(Q, n, generator=g, device=dev) * (q.norm(dim=1, keepdim=True) / math.sqrt(D))
        v = None
    else:
        k = torch.randn(n, D, generator=g, device=dev)  # (n, d)
        v = torch.randn(n, DV, generator=g, device=dev)  # (n, Dv)
        scores = q @ k.T / math.sqrt(D)  # (Q, n)
    p = torch.softmax(scores, dim=-1)  # (Q, n)
    h = -(p * torch.log(p)).sum(-1)
    _ = p.amax(-1), (p * p).sum(-1)
    if v is not None:
        _ = (p @ v).std()
    return float(h.mean())


def materialised_bytes(n: int, method: str) -> int:
    keys = 0 if method == "logits" else 4 * n * (D + DV)
    return keys + 4 * 5 * Q * n  # scores, p, log p, p log p, p^2


def _free_bytes() -> int:
    free, _total = torch.cuda.mem_get_info()
    return int(free)


def _fmt(t: float | None) -> str:
    if t is None:
        return "-"
    return f"{t * 1e3:.2f} ms" if t < 1 else f"{t:.3f} s"


def crossover(times: dict[int, tuple[float | None, float | None]]) -> int | None:
    """The smallest exponent e from which ours beats the other path at every measured e' >= e.

    ``times[e] = (ours, other)``; ``other`` None where it cannot run (capped or out of memory):
    ours wins there. None when ours loses at the largest measured length.
    """
    best = None
    for e in sorted(times, reverse=True):
        ours, other = times[e]
        if ours is None or (other is not None and other <= ours):
            break
        best = e
    return best


def _tiles(bn: int, dch: int, warps: int) -> Callable:
    """attncore.sweeps.fused_plan.launch_plan with the vectors kernel's tiles replaced (for --tune)."""
    from dataclasses import replace

    from attncore.sweeps import fused

    original = fused.launch_plan

    def plan(spec):  # noqa: ANN001, ANN202
        p = original(spec)
        if spec.method != "vectors":
            return p
        n_dch = -(-spec.d // dch)
        return replace(p, key_align=bn, dch=dch, n_dch=n_dch, warps=warps,
                       samples_per_key=p.row_programs * (dch * n_dch + p.dvp))

    return plan


def tune(exp: int, reps: int) -> int:
    """Time the vectors kernel's tile alternatives at n = 2^exp (the draws differ by DCH, not the work)."""
    from attncore.sweeps import SweepSpec, fused, fused_plan

    spec = SweepSpec(lengths=(1 << exp,), queries=Q, d=D, method="vectors", value_dim=DV)
    original = fused.launch_plan
    print(f"vectors kernel tiles at n = 2^{exp}, {Q} rows, d = {D}, value dim {DV} (best of {reps}):")
    print(f"{'keys/tile':>9} {'d chunk':>7} {'warps':>5} {'time':>10} {'G/s':>7}")
    try:
        for bn, dch, warps in TUNE_TILES:
            fused.launch_plan = _tiles(bn, dch, warps)
            try:
                t = _cuda_time(lambda: fused.run_fused_sweep(spec, device=DEV), reps)
            except Exception as exc:  # a variant that does not compile or fit: say so, go on
                print(f"{bn:>9} {dch:>7} {warps:>5}  failed: {type(exc).__name__}: {str(exc)[:80]}")
                continue
            samples = (1 << exp) * fused.launch_plan(spec).samples_per_key
            print(f"{bn:>9} {dch:>7} {warps:>5} {_fmt(t):>10} {samples / t / 1e9:7.1f}", flush=True)
    finally:
        fused.launch_plan = original
    warps = 64 // fused_plan.ROWS_PER_WARP
    print(f"(the defaults: keys/tile {fused_plan.BN}, d chunk {fused_plan.DCH}, {warps} warps)")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--max-exp", type=int, default=30, help="largest n = 2^K (default 30)")
    ap.add_argument("--min-exp", type=int, default=16, help="smallest n = 2^K (default 16)")
    ap.add_argument("--reps", type=int, default=3, help="timed calls per measurement up to 2^24 (default 3)")
    ap.add_argument("--tune", action="store_true", help="time the vectors kernel's tile alternatives instead")
    ap.add_argument("--tune-exp", type=int, default=24, help="n = 2^K for --tune (default 24)")
    args, _ = ap.parse_known_args(argv)
    if not torch.cuda.is_available():
        print(f"bench.entropy --device cuda: no CUDA GPU on this machine (torch {torch.__version__}); "
              "nothing measured.")
        return 0
    from attncore.sweeps import CROSSOVERS, MAX_SWEEP_N, SweepSpec, engine_choice, max_sweep_n, run_sweep
    from attncore.sweeps.fused import run_fused_sweep
    from attncore.sweeps.fused_plan import fused_unavailable_reason, launch_plan
    from attncore.sweeps.fused_replay import fused_floor

    why = fused_unavailable_reason(DEV)
    if why is not None:
        print(f"bench.entropy --device cuda: the fused kernels cannot run here: {why}")
        return 0
    import triton

    if args.tune:
        return tune(args.tune_exp, args.reps)
    top = min(args.max_exp, max_sweep_n(DEV).bit_length() - 1)
    props = torch.cuda.get_device_properties(0)
    print(f"bench.entropy --device cuda: {props.name}, {props.total_memory / 2**30:.0f} GiB, "
          f"{props.multi_processor_count} SMs; torch {torch.__version__} (CUDA {torch.version.cuda}), "
          f"triton {triton.__version__}")
    print(f"queries = {Q}, d = {D}, value dim = {DV} (vectors); float32 samples, float64 merge; "
          f"best of {args.reps} after a warm-up ({min(2, args.reps)} above 2^24)")
    header = (f"{'n':>5} {'method':>8} {'ours':>10} {'GPU MB':>7} {'floor':>10} {'floor/ours':>10} "
              f"{'torch eng':>10} {'eng/ours':>8} {'materialised':>13} {'mat/ours':>8} {'ours G/s':>8} "
              f"{'dispatch':>8}")
    print(header)
    print("-" * len(header))
    results: dict[tuple[str, int], float] = {}
    mat_at: dict[tuple[str, int], float | None] = {}
    eng_at: dict[tuple[str, int], float | None] = {}
    for e in range(args.min_exp, top + 1):
        n = 1 << e
        reps = args.reps if e <= 24 else min(2, args.reps)
        for method in ("logits", "vectors"):
            spec = SweepSpec(lengths=(n,), queries=Q, d=D, method=method, value_dim=DV)
            samples = n * launch_plan(spec).samples_per_key
            floor_rows = launch_plan(spec).samples_per_key
            # the floor draws as the method's kernel does (vectors: the fast special functions)
            t_floor = _cuda_time(lambda: fused_floor(floor_rows, n, DEV, fast=method == "vectors"), reps)
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            base_mem = torch.cuda.memory_allocated()
            t_ours = _cuda_time(lambda: run_fused_sweep(spec, device=DEV), reps)
            peak_mb = (torch.cuda.max_memory_allocated() - base_mem) / 2**20
            results[(method, e)] = t_ours
            t_eng = None
            if n <= MAX_SWEEP_N:
                t_eng = _cuda_time(lambda: run_sweep(spec, device=DEV, engine="torch"),
                                   1 if e >= 22 else reps)
            t_mat: float | None = None
            mat_note = ""
            if materialised_bytes(n, method) < 0.8 * _free_bytes():
                try:
                    t_mat = _cuda_time(lambda: materialised(n, method), reps)
                except torch.cuda.OutOfMemoryError:
                    mat_note = "out of memory"
                gc.collect()
                torch.cuda.empty_cache()
            else:
                mat_note = f"(> {materialised_bytes(n, method) / 2**30:.0f} GB)"
            mat_at[(method, e)] = t_mat
            eng_at[(method, e)] = t_eng
            eng_cols = (f"{_fmt(t_eng):>10} {t_eng / t_ours:8.1f}" if t_eng is not None
                        else f"{'(capped)':>10} {'-':>8}")
            mat_cols = (f"{_fmt(t_mat):>13} {t_mat / t_ours:8.2f}" if t_mat is not None
                        else f"{mat_note:>13} {'-':>8}")
            print(f"{'2^' + str(e):>5} {method:>8} {_fmt(t_ours):>10} {peak_mb:7.1f} {_fmt(t_floor):>10} "
                  f"{t_floor / t_ours:10.2f} {eng_cols} {mat_cols} {samples / t_ours / 1e9:8.1f} "
                  f"{engine_choice(spec, DEV).name:>8}", flush=True)
    print("targets (issue 25, one H100/H200, 64 rows, d = 128, value dim 16):")
    for (method, e), limit in TARGETS_S.items():
        if (method, e) in results:
            t = results[(method, e)]
            print(f"  [{'met' if t <= limit else 'NOT met'}] {method} 2^{e} <= {_fmt(limit)}: {_fmt(t)}")
        else:
            print(f"  [not measured] {method} 2^{e} <= {_fmt(limit)}: outside 2^{args.min_exp}..2^{top}")
    slower = [(m, e) for (m, e), t in results.items()
              if (tm := mat_at.get((m, e))) is not None and t >= tm]
    print(f"  [{'met' if not slower else 'NOT met'}] faster than the materialised reference wherever it runs"
          + (f" (slower at {', '.join(f'{m} 2^{e}' for m, e in slower)})" if slower else ""))
    print(f"crossovers on this GPU ({props.name}), measured 2^{args.min_exp}..2^{top}: the smallest n "
          "from which the fused kernels are faster at every longer n")
    for method in ("logits", "vectors"):
        es = [e for (m, e) in results if m == method]
        vs_eng = crossover({e: (results[(method, e)], eng_at[(method, e)]) for e in es})
        vs_mat = crossover({e: (results[(method, e)], mat_at[(method, e)]) for e in es})
        table = CROSSOVERS[method].n.bit_length() - 1

        def fmt(x: int | None) -> str:
            return "never in range" if x is None else ("at every n measured" if x == min(es) else f"2^{x}")

        print(f"  {method:>7}: vs the torch engine {fmt(vs_eng)}; vs the materialised path {fmt(vs_mat)}; "
              f"the dispatch table (attncore.sweeps.CROSSOVERS) says 2^{table}"
              + ("" if vs_eng == table else " -> update it (with this GPU and these versions)"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
