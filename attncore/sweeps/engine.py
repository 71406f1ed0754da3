"""The threaded streaming engine: :func:`entropy_vs_length` / :func:`run_sweep`.

Shapes (see the package legend): ``L`` query rows, ``n`` keys a row sees, ``d`` query/key
dim, ``Ev`` value dim, ``K`` keys per block, ``Lt`` rows per logit tile. The largest tensors
held are one block: logits ``(Lt, K)`` or ``(L, K)``, keys ``(K, d)``, values ``(K, Ev)``.

A sweep is a few passes (:meth:`SweepSpec.passes`); a pass streams keys ``[0, n_max)`` in
blocks, workers pull (lane, row group) units from a queue (:mod:`attncore.sweeps.rng`),
reduce every tile into per-lane, per-segment sums (:mod:`attncore.sweeps.reduce`), and the
lanes are merged in lane order at every requested length, so results do not depend on
the number of workers.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import torch
from torch import Tensor

from attncore.budget import fmt_count, oom_to_limit
from attncore.device import resolve_device
from attncore.errors import Cancelled
from attncore.sweeps.reduce import EXP_FLOOR, Acc, Reducer, frame, merge_into, new_acc, row_stats, summarise
from attncore.sweeps.rng import LANES, draw_queries, fill_logit_tile, row_groups, unit_generator
from attncore.sweeps.spec import SWEEP_DTYPES, SweepSpec, plan_blocks, units_per_key
from attncore.threads import single_threaded

__all__ = ["Progress", "SweepCancelled", "entropy_vs_length", "run_sweep"]

Progress = Callable[[float, str], "bool | None"]


class SweepCancelled(Cancelled):
    """The progress callback returned False (or the cancel event was set) between chunks."""


# --------------------------------------------------------------------------- workers


@dataclass
class _PassJob:
    """One streaming pass: keys [0, n_max) in blocks, snapshots at ``checkpoints``."""

    factor: float
    checkpoints: tuple[int, ...]
    n_blocks: int
    bias: float  # sigmoid's -log n bias (0 for the softmax family)


@dataclass
class _Shared:
    done: list[int] = field(default_factory=list)  # work units done per worker
    cancel: threading.Event = field(default_factory=threading.Event)


def _segments(lo: int, hi: int, checkpoints: Sequence[int]) -> list[tuple[int, int, int]]:
    """Split keys [lo, hi) at checkpoints: [(start, stop, segment index)]."""
    out = []
    start = lo
    for s, c in enumerate(checkpoints):
        prev = 0 if s == 0 else checkpoints[s - 1]
        if c <= start or prev >= hi:
            continue
        a, b = max(start, prev), min(hi, c)
        if b > a:
            out.append((a, b, s))
            start = b
    return out


class _Engine:
    """Runs passes for one spec on one device; the accumulators live per lane and segment."""

    def __init__(self, spec: SweepSpec, device: torch.device, workers: int):
        self.spec = spec
        self.device = device
        self.dtype = SWEEP_DTYPES[spec.dtype]
        self.block, self.rt = plan_blocks(spec, device)
        self.workers = workers
        self.sigmoid = spec.normalizer == "sigmoid"
        self.dv = spec.value_dim if spec.method == "vectors" else None
        self.q = draw_queries(spec, device, self.dtype)  # (L, d)
        self.q_norm = torch.linalg.vector_norm(self.q.to(torch.float64), dim=1)  # (L,)
        self.fix_tail = self.dtype == torch.float32

    # (lane, row group) units of one pass, pulled one at a time; each unit's blocks in order
    def _run_units(self, job: _PassJob, next_unit: Callable[[], tuple[int, int] | None],
                   accs: dict[tuple[int, int], Acc], shared: _Shared, wid: int) -> None:
        spec, dev, dt = self.spec, self.device, self.dtype
        torch.set_flush_denormal(True)
        K = self.block
        n_max = job.checkpoints[-1]
        groups = row_groups(spec)
        red = Reducer(spec, self.rt, K, dev, dt)
        if spec.method == "vectors":
            keys = torch.empty(K, spec.d, device=dev, dtype=dt)
            vals = torch.empty(K, spec.value_dim, device=dev, dtype=dt)
            qf = (self.q.to(torch.float64) * job.factor).to(dt)  # (L, d)
        else:
            std = self.q_norm * job.factor  # (L,) float64
            # normal_ never returns below -5.77 std in float32 (24-bit Box-Muller), -8.6 in float64
            low = (5.8 if dt == torch.float32 else 8.7) * std
        while (unit := next_unit()) is not None:
            lane, gi = unit
            g = unit_generator(spec, lane, gi, dev)
            r_lo, r_hi = groups[gi]
            unit_work = self.block_units * (r_hi - r_lo) // spec.queries
            for b in range(lane, job.n_blocks, LANES):
                if shared.cancel.is_set():
                    return
                lo, hi = b * K, min((b + 1) * K, n_max)
                segs = _segments(lo, hi, job.checkpoints)
                whole = len(segs) == 1 and segs[0][1] - segs[0][0] == K
                if spec.method == "vectors":
                    keys.normal_(generator=g)
                    vals.normal_(generator=g)
                for r0 in range(r_lo, r_hi, self.rt):
                    rt = min(r_hi, r0 + self.rt) - r0
                    x_full = red.x[:rt]
                    floor_needed = True
                    if spec.method == "vectors":
                        torch.matmul(qf[r0: r0 + rt], keys.T, out=x_full)  # (rt, K)
                        mx = None
                    else:
                        mx = fill_logit_tile(x_full, std[r0: r0 + rt], g, self.fix_tail)
                        # the widest shifted logit of the tile is at least -(max + low)
                        widest = mx.to(torch.float64) + low[r0: r0 + rt]
                        floor_needed = bool((widest > -EXP_FLOOR - 1).any())
                    for a, e, s in segs:
                        m = mx if whole and mx is not None else x_full[:, a - lo: e - lo].amax(dim=1)
                        v = None if spec.method == "logits" else vals[a - lo: e - lo]
                        red.add(s, a - lo, e - lo, rt, m, v, job.bias, r0, floor_needed=floor_needed)
                for _, _, s in segs:
                    red.flush(s, accs[(lane, s)], slice(r_lo, r_hi))
                shared.done[wid] += unit_work

    @property
    def block_units(self) -> int:
        """Work units of one block (see :func:`sweep_work`)."""
        return self.block * units_per_key(self.spec)

    def run_pass(self, job: _PassJob, shared: _Shared, pool: ThreadPoolExecutor,
                 poll: Callable[[], None]) -> list[dict[str, Tensor]]:
        """Stream one pass; return per-row stats at each checkpoint."""
        L = self.spec.queries
        lanes_used = sorted({b % LANES for b in range(job.n_blocks)})
        accs = {(lane, s): new_acc(L, self.dv, self.device, self.sigmoid)
                for lane in lanes_used for s in range(len(job.checkpoints))}
        units = [(lane, gi) for lane in lanes_used for gi in range(len(row_groups(self.spec)))]
        w = max(1, min(self.workers, len(units)))
        # Workers pull units as they finish (the two vCPUs here run normal_ at different
        # speeds, so a fixed split left one idle). A unit's numbers do not depend on who runs
        # it, and units write disjoint (lane, rows) sums, so results stay worker-independent.
        queue, lock = list(reversed(units)), threading.Lock()

        def next_unit() -> tuple[int, int] | None:
            with lock:
                return queue.pop() if queue else None

        futures: list[Future] = [pool.submit(self._run_units, job, next_unit, accs, shared, i)
                                 for i in range(w)]
        pending = set(futures)
        try:
            while pending:
                done, pending = wait(pending, timeout=0.1, return_when=FIRST_COMPLETED)
                for f in done:
                    f.result()  # re-raise worker errors
                poll()
        except BaseException:
            shared.cancel.set()
            wait(futures)
            raise
        if shared.cancel.is_set():
            raise SweepCancelled("the sweep was stopped.")
        # merge lanes (in lane order) per segment, then prefix over segments
        total = new_acc(L, self.dv, self.device, self.sigmoid)
        out = []
        for s, n in enumerate(job.checkpoints):
            for lane in lanes_used:
                merge_into(total, accs[(lane, s)], self.sigmoid)
            out.append({k: v.detach().to("cpu") for k, v in row_stats(total, n, self.spec).items()})
        return out




# One CPU sweep at a time (they use every core). torch's thread count is process-wide: the
# workers set it to 1 inside attncore.threads.single_threaded, which restores the count the
# process had when its last user leaves (sweeps, training runs), so overlaps cannot leak a 1.
_THREADS_LOCK = threading.Lock()


def _worker_init() -> None:
    """CPU worker: single-threaded (the workers are the parallelism), denormals flushed."""
    torch.set_num_threads(1)
    torch.set_flush_denormal(True)


def _gpu_worker_init() -> None:
    """CUDA feeder thread: leaves the process's CPU thread count alone."""
    torch.set_flush_denormal(True)


def entropy_vs_length(
    lengths: Sequence[int],
    *,
    d: int = 64,
    queries: int = 64,
    scale_rule: str = "sqrt_d",
    temperature: float = 1.0,
    normalizer: str = "softmax",
    method: str = "logits",
    seed: int = 0,
    device: str | torch.device | None = None,
    progress: Progress | None = None,
    ssmax_s: float = 0.43,
    value_dim: int = 16,
    dtype: str = "float32",
    workers: int | None = None,
    cancel: threading.Event | None = None,
    engine: str | None = None,
) -> pd.DataFrame:
    """Row statistics of attention against the number of keys n, streamed (see the module doc).

    Args:
        lengths: the key counts n to report, each in ``[1, max_sweep_n(device)]``: ``2**24``
            with the torch engine, ``2**30`` with the fused kernels on CUDA.
        d: query/key dimension. queries: query rows L (independent queries) averaged per n.
        scale_rule: ``sqrt_d``, ``none``, ``ssmax`` (factor ``s log n`` on top of
            ``1/sqrt d``) or ``llama4``. temperature: divides the logits (> 0).
        normalizer: ``softmax``, ``softmax1`` or ``sigmoid`` (bias ``-log n``).
        method: ``logits`` (exact-distribution shortcut) or ``vectors`` (real q, k, v).
        seed: seeds every draw; the same seed, device and spec give the same numbers.
        device: ``None`` = CUDA if present, else CPU. ssmax_s: SSMax's s.
        value_dim: Ev of the values (vectors method; the output spread is measured over L x Ev).
        dtype: ``float32`` (default) or ``float64`` samples; sums are float64 either way.
        workers: CPU worker threads (default: torch's intra-op thread count, at most 8);
            each runs single-threaded with its own generators. CUDA uses one.
        progress: ``progress(fraction_done, message)`` called from the calling thread about
            every 0.1 s; returning ``False`` (or raising) stops the sweep between chunks.
        cancel: an optional event; setting it stops the sweep between chunks.
        engine: ``None``/``"auto"`` (the ``ATTNCORE_SWEEP_ENGINE`` environment variable, else
            the fused Triton kernels on CUDA for float32 and the torch engine otherwise),
            ``"torch"`` or ``"fused"`` (on the CPU only through Triton's interpreter, for
            tests). The fused kernels draw other random numbers (Philox): the same
            statistics within their standard errors, not to the digit (:mod:`attncore.sweeps.fused`).

    Returns:
        A DataFrame, one row per distinct n (ascending), columns :data:`COLUMNS`: means over
        the L rows with standard errors (``*_sem``) of entropy (nats, of the row renormalised
        to sum 1), entropy / log n, max weight, effective support ``exp(mean H)`` (the
        perplexity of the average row, error by the delta method), output std,
        ``sum p^2`` and row sum; ``logit_std`` (rms over rows of the logits' std) and
        ``logit_factor`` (the factor on ``q . k`` at that n).

    Raises:
        AttnInputError / ResourceLimitError: bad or too large arguments (plain message).
        SweepCancelled: the progress callback returned False or ``cancel`` was set.
    """
    spec = SweepSpec(lengths=tuple(int(n) if isinstance(n, (int, np.integer)) and not isinstance(n, bool)
                                   else n for n in lengths),
                     d=d, queries=queries, scale_rule=scale_rule, temperature=temperature,
                     normalizer=normalizer, method=method, seed=seed, ssmax_s=ssmax_s,
                     value_dim=value_dim, dtype=dtype)
    return run_sweep(spec, device=device, progress=progress, workers=workers, cancel=cancel, engine=engine)


def run_sweep(spec: SweepSpec, *, device: str | torch.device | None = None, progress: Progress | None = None,
              workers: int | None = None, cancel: threading.Event | None = None,
              engine: str | None = None) -> pd.DataFrame:
    """:func:`entropy_vs_length` for a ready :class:`SweepSpec` (``engine`` as there)."""
    from attncore.sweeps.fused import choose_engine, run_fused_sweep  # fused imports this module

    dev = resolve_device(device)
    if choose_engine(engine, dev, spec.dtype) == "fused":
        return run_fused_sweep(spec, device=dev, progress=progress, cancel=cancel)
    spec.validate()
    if dev.type != "cpu":
        return oom_to_limit(lambda: _run_sweep(spec, dev, 1, progress, cancel, _gpu_worker_init),
                            "this sweep", "Lower the query rows or d.")
    with _THREADS_LOCK, single_threaded() as prev_threads:  # one CPU sweep at a time; count restored
        n_workers = max(1, min(LANES, prev_threads if workers is None else int(workers)))
        return _run_sweep(spec, dev, n_workers, progress, cancel, _worker_init)


def _run_sweep(spec: SweepSpec, dev: torch.device, workers: int, progress: Progress | None,
               cancel: threading.Event | None, init: Callable[[], None]) -> pd.DataFrame:
    """The torch engine on ``workers`` threads started with ``init`` (thread settings are the caller's)."""
    engine = _Engine(spec, dev, workers)
    shared = _Shared(done=[0] * workers)
    if cancel is not None and cancel.is_set():
        raise SweepCancelled("the sweep was stopped before it started.")
    total_units = max(1, sum(-(-max(lens) // engine.block) * engine.block_units
                             for _, lens in spec.passes()))
    finished_units = 0
    t0 = time.perf_counter()
    last = [0.0]

    def poll() -> None:
        if cancel is not None and cancel.is_set():
            shared.cancel.set()
        if progress is None or shared.cancel.is_set():
            return
        now = time.perf_counter()
        if now - last[0] < 0.1:
            return
        last[0] = now
        frac = min(1.0, (finished_units + sum(shared.done)) / total_units)
        eta = (now - t0) * (1 - frac) / frac if frac > 0.02 else float("nan")
        msg = f"{frac:.0%} of {fmt_count(total_units)} random numbers" + \
            (f", about {eta:.0f} s left" if math.isfinite(eta) else "")
        if progress(frac, msg) is False:
            shared.cancel.set()

    records: list[dict] = []
    with ThreadPoolExecutor(max_workers=workers, initializer=init,
                            thread_name_prefix="attncore-sweep") as pool:
        for factor, lens in spec.passes():
            n_blocks = -(-max(lens) // engine.block)
            bias = -math.log(max(lens)) if spec.normalizer == "sigmoid" else 0.0
            job = _PassJob(factor=factor, checkpoints=lens, n_blocks=n_blocks, bias=bias)
            shared.done = [0] * workers
            stats = engine.run_pass(job, shared, pool, poll)
            finished_units += n_blocks * engine.block_units
            for n, rows in zip(lens, stats, strict=True):
                records.append(summarise(n, rows, spec, factor, engine.q_norm.cpu()))
    if progress is not None:
        progress(1.0, "done")
    return frame(records)


