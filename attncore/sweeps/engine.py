"""The threaded streaming engine: :func:`entropy_vs_length` / :func:`run_sweep` / :func:`run_sweep_set`.

Shapes (see the package legend): ``L`` query rows, ``n`` keys a row sees, ``d`` query/key
dim, ``Ev`` value dim, ``K`` keys per block, ``Lt`` rows per logit tile. The largest tensors
held are one block: logits ``(Lt, K)`` or ``(L, K)``, keys ``(K, d)``, values ``(K, Ev)``.

A sweep is a few passes (:meth:`SweepSpec.passes`: one per logit factor). Every pass of every
spec that draws the same random numbers (:func:`stream_key`) is a *job* of one stream: keys
``[0, n_max)`` are drawn once, in blocks, and each job reduces them with its own factor.
Workers pull (lane, row group) units from a queue (:mod:`attncore.sweeps.rng`), reduce every
tile into per-job, per-lane, per-segment sums (:mod:`attncore.sweeps.reduce`), and the lanes
are merged in lane order at every requested length, so results do not depend on the number
of workers, on staging (a run may stop after the first blocks to report the short lengths)
or on which other specs shared the stream. On a CPU the ``logits`` method's unit-variance draws
are kept for the next sweep on the same stream (:mod:`attncore.sweeps.draws`): they do not depend
on d, the temperature, the scale rule or the normaliser.
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

from attncore.budget import fmt_count, oom_to_limit
from attncore.device import resolve_device
from attncore.errors import Cancelled
from attncore.sweeps.draws import Tiles, draw_store, stream_bytes
from attncore.sweeps.reduce import EXP_FLOOR, Acc, Reducer, frame, merge_into, new_acc, row_stats, summarise
from attncore.sweeps.rng import LANES, draw_queries, fill_logit_tile, row_groups, unit_generator
from attncore.sweeps.spec import SWEEP_DTYPES, SweepSpec, plan_blocks, units_per_key
from attncore.threads import single_threaded

__all__ = ["Partial", "Progress", "SweepCancelled", "entropy_vs_length", "run_sweep", "run_sweep_set",
           "stream_key"]

Progress = Callable[[float, str], "bool | None"]


# Leading segments of a tile no longer than this many keys are reduced together by a few segmented
# calls (Reducer.add_segments); longer ones one by one. Block 0 holds every length up to K: at four
# points per doubling, 36 of its 49 segments are this short and span only 4096 keys.
SEGMENTED_KEYS = 4096


class SweepCancelled(Cancelled):
    """The progress callback returned False (or the cancel event was set) between chunks."""


# --------------------------------------------------------------------------- workers


@dataclass(frozen=True)
class _Job:
    """One streaming pass of one spec: keys [0, n_max) at one logit factor, snapshots at ``checkpoints``.

    Every job of a :class:`_Engine` reads the same random draws (the same z tiles, keys and
    values): a spec's passes (one per distinct factor, e.g. SSMax's per-n scale) and specs that
    differ only in the factor on ``q . k`` or in the normaliser share one stream.
    """

    spec_i: int  # which spec of the engine's list
    factor: float
    checkpoints: tuple[int, ...]
    bias: float  # sigmoid's -log n bias (0 for the softmax family)
    sigmoid: bool

    @property
    def n_max(self) -> int:
        return self.checkpoints[-1]


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


def stream_key(spec: SweepSpec) -> tuple:
    """Specs with equal keys draw the same random numbers and can share one streaming run.

    The draws depend on the method, seed, sizes and sample dtype, not on the scale rule,
    temperature or normaliser (those only set each row's factor and its reduction).
    """
    vec = spec.method == "vectors"
    return (spec.method, spec.seed, spec.d, spec.queries, spec.dtype, spec.value_dim if vec else 0)


def _stages(n_blocks: int, staged: bool) -> list[int]:
    """Block counts at which a run stops to report finished lengths (the last is ``n_blocks``).

    Staged runs report after about 1/16 and 1/4 of the blocks, so a page can draw the short
    lengths while the long ones stream; unstaged runs have no barrier.
    """
    if not staged:
        return [n_blocks]
    ends = sorted({max(1, -(-n_blocks // 16)), max(1, -(-n_blocks // 4)), n_blocks})
    return [e for e in ends if e <= n_blocks]


class _Engine:
    """Streams the shared draws of ``specs`` (one :func:`stream_key`) once, reducing every job.

    The accumulators live per (job, lane, segment); a (lane, row group) unit keeps its
    generator across stages, so staging changes nothing in the numbers.
    """

    def __init__(self, specs: Sequence[SweepSpec], device: torch.device, workers: int):
        base = specs[0]
        if any(stream_key(s) != stream_key(base) for s in specs):
            raise ValueError("specs of one engine must share their draws (stream_key).")
        self.specs = list(specs)
        self.spec = base
        self.device = device
        self.dtype = SWEEP_DTYPES[base.dtype]
        self.block, self.rt = plan_blocks(base, device)
        self.workers = workers
        self.vectors = base.method == "vectors"
        self.dv = base.value_dim if self.vectors else None
        self.q = draw_queries(base, device, self.dtype)  # (L, d)
        self.q_norm = torch.linalg.vector_norm(self.q.to(torch.float64), dim=1)  # (L,)
        self.fix_tail = self.dtype == torch.float32
        self.jobs: list[_Job] = []
        for i, s in enumerate(self.specs):
            for factor, lens in s.passes():
                bias = -math.log(max(lens)) if s.normalizer == "sigmoid" else 0.0
                self.jobs.append(_Job(i, factor, lens, bias, s.normalizer == "sigmoid"))
        self.n_max = max(j.n_max for j in self.jobs)
        self.n_blocks = -(-self.n_max // self.block)
        self.groups = row_groups(base)
        self.gens: dict[tuple[int, int], torch.Generator] = {}
        # logits on a CPU: z tiles kept from an earlier sweep on the same stream (attncore.sweeps.draws)
        self.stored: Tiles | None = None
        self.record: Tiles | None = None
        self.draw_key: tuple | None = None
        if not self.vectors and device.type == "cpu":
            self.draw_key = (base.seed, base.queries, base.dtype, self.fix_tail, self.block, self.rt,
                             tuple(self.groups))
            self.stored = draw_store().get(self.draw_key, self.n_blocks)
            if self.stored is None and draw_store().fits(self.stream_bytes):
                self.record = {}

    def unit_work(self, b: int, rows: int) -> int:
        """Work units of block b for ``rows`` query rows: the draws plus one reduction per job."""
        lo = b * self.block
        live = sum(1 for j in self.jobs if j.n_max > lo)
        per_key = units_per_key(self.spec)
        return self.block * per_key * rows // self.spec.queries * (1 + live) // 2

    @property
    def stream_bytes(self) -> int:
        """Bytes of this sweep's z tiles (logits), were they kept."""
        return stream_bytes(self.spec.queries, self.n_blocks * self.block, self.dtype)

    @property
    def total_work(self) -> int:
        return max(1, sum(self.unit_work(b, self.spec.queries) for b in range(self.n_blocks)))

    # (lane, row group) units of one stage, pulled one at a time; each unit's blocks in order
    def _run_units(self, b_lo: int, b_hi: int, next_unit: Callable[[], tuple[int, int] | None],
                   accs: dict[tuple[int, int, int], Acc], shared: _Shared, wid: int) -> None:
        spec, dev, dt = self.spec, self.device, self.dtype
        torch.set_flush_denormal(True)
        K = self.block
        red = Reducer(spec, self.rt, K, dev, dt)
        z_buf = torch.empty(self.rt, K, device=dev, dtype=dt)
        one = torch.ones(self.rt, dtype=torch.float64, device=dev)
        # normal_ never returns below -5.77 std in float32 (24-bit Box-Muller), -8.6 in float64
        low_z = 5.8 if dt == torch.float32 else 8.7
        if self.vectors:
            keys = torch.empty(K, spec.d, device=dev, dtype=dt)
            vals = torch.empty(K, spec.value_dim, device=dev, dtype=dt)
            qk = torch.empty(spec.queries, K, device=dev, dtype=dt)
            q = self.q
        stds = [self.q_norm * j.factor for j in self.jobs]  # (L,) float64 per job
        stds_dt = [st.to(dt) for st in stds]
        # whether a job's tiles may need EXP_FLOOR: its widest row against the tile's largest max
        # (a bound: the widest shifted logit is at least -(max z + low) std; one clamp too many costs a pass)
        std_hi = [float(st.max()) for st in stds]
        while (unit := next_unit()) is not None:
            lane, gi = unit
            g = self.gens.get(unit)
            if g is None and self.stored is None:
                g = self.gens[unit] = unit_generator(spec, lane, gi, dev)
            r_lo, r_hi = self.groups[gi]
            first = lane + ((b_lo - lane + LANES - 1) // LANES) * LANES if b_lo > lane else lane
            for b in range(first, b_hi, LANES):
                if shared.cancel.is_set():
                    return
                lo = b * K
                live = [(ji, j) for ji, j in enumerate(self.jobs) if j.n_max > lo]
                if self.vectors:
                    keys.normal_(generator=g)
                    vals.normal_(generator=g)
                    torch.matmul(q, keys.T, out=qk)  # (L, K): q . k, scaled per job below
                for r0 in range(r_lo, r_hi, self.rt):
                    rt = min(r_hi, r0 + self.rt) - r0
                    x_full = red.x[:rt]
                    if not self.vectors:
                        tile = (lane, gi, b, r0)
                        if self.stored is not None:
                            zs, zmax = self.stored[tile]  # the same draws, kept (read only)
                        else:
                            zs = z_buf[:rt]
                            zmax = fill_logit_tile(zs, one[:rt], g, self.fix_tail)  # unit-std draws, maxima
                            zs.sub_(zmax[:, None])  # z - max z <= 0: every job's shifted logits are std * zs
                            if self.record is not None:
                                self.record[tile] = (zs.clone(), zmax.clone())
                        z_hi = float(zmax.max()) + low_z
                    for ji, job in live:
                        hi = min((b + 1) * K, job.n_max)
                        segs = _segments(lo, hi, job.checkpoints)
                        whole = len(segs) == 1 and segs[0][1] - segs[0][0] == K
                        floor_needed = True
                        offset = None  # what x_full is already shifted by (logits: the tile's max)
                        if self.vectors:
                            torch.mul(qk[r0: r0 + rt], job.factor, out=x_full)  # (rt, K)
                        else:
                            s32 = stds_dt[ji][r0: r0 + rt]
                            mx = zmax * s32  # std > 0: the max of the products is the product of the max
                            floor_needed = z_hi * std_hi[ji] > -EXP_FLOOR - 1
                            if whole and not job.sigmoid:  # the common case: one multiply, no shift
                                red.add_shifted((ji, segs[0][2]), zs, s32, mx, r0, floor_needed)
                                continue
                            torch.mul(zs, s32[:, None], out=x_full)  # shifted logits
                            if job.sigmoid:
                                x_full.add_(mx[:, None])  # sigmoid reads the logits themselves
                            else:
                                offset = mx
                        short = 0  # leading short segments (the many small lengths of block 0): one call
                        while (not self.vectors and short < len(segs)
                               and segs[short][1] - segs[short][0] <= SEGMENTED_KEYS):
                            short += 1
                        if short >= 2:
                            red.add_segments([(ji, s) for _, _, s in segs[:short]],
                                             [(a - lo, e - lo) for a, e, _ in segs[:short]], rt, job.bias, r0,
                                             floor_needed=floor_needed, sigmoid=job.sigmoid, offset=offset)
                            segs = segs[short:]
                        for a, e, s in segs:
                            m = x_full[:, a - lo: e - lo].amax(dim=1)
                            v = vals[a - lo: e - lo] if self.vectors else None
                            red.add((ji, s), a - lo, e - lo, rt, m, v, job.bias, r0,
                                    floor_needed=floor_needed, sigmoid=job.sigmoid, offset=offset)
                for ji, job in live:
                    for _, _, s in _segments(lo, min((b + 1) * K, job.n_max), job.checkpoints):
                        red.flush((ji, s), accs[(ji, lane, s)], slice(r_lo, r_hi), job.sigmoid)
                shared.done[wid] += self.unit_work(b, r_hi - r_lo)

    def run(self, shared: _Shared, pool: ThreadPoolExecutor, poll: Callable[[], None],
            partial: Callable[[list[list[dict]]], None] | None = None) -> list[list[dict]]:
        """Stream every job; return per spec the summary records (one per length).

        ``partial(records)`` is called after each stage but the last with the records of the
        lengths finished so far.
        """
        L = self.spec.queries
        lanes_used = sorted({b % LANES for b in range(self.n_blocks)})
        # sums only where a lane's blocks meet a segment (most of a block's many short lengths
        # lie in lane 0's first block)
        accs = {}
        for ji, j in enumerate(self.jobs):
            for b in range(-(-j.n_max // self.block)):
                for _, _, s in _segments(b * self.block, min((b + 1) * self.block, j.n_max), j.checkpoints):
                    if (ji, b % LANES, s) not in accs:
                        accs[(ji, b % LANES, s)] = new_acc(L, self.dv, self.device, j.sigmoid)
        totals = [new_acc(L, self.dv, self.device, j.sigmoid) for j in self.jobs]
        next_s = [0] * len(self.jobs)
        records: list[list[dict]] = [[] for _ in self.specs]
        q_norm = self.q_norm.cpu()
        stages = _stages(self.n_blocks, partial is not None)
        b_lo = 0
        for k, b_hi in enumerate(stages):
            units = [(lane, gi) for lane in lanes_used for gi in range(len(self.groups))
                     if any(b_lo <= b < b_hi for b in range(lane, self.n_blocks, LANES))]
            self._run_stage(b_lo, b_hi, units, accs, shared, pool, poll)
            done_keys = b_hi * self.block
            # merge lanes (in lane order) per segment, then prefix over segments, per job
            for ji, job in enumerate(self.jobs):
                spec = self.specs[job.spec_i]
                while next_s[ji] < len(job.checkpoints) and job.checkpoints[next_s[ji]] <= done_keys:
                    s = next_s[ji]
                    n = job.checkpoints[s]
                    for lane in lanes_used:
                        if (ji, lane, s) in accs:
                            merge_into(totals[ji], accs[(ji, lane, s)], job.sigmoid)
                    rows = {key: v.detach().to("cpu") for key, v in row_stats(totals[ji], n, spec).items()}
                    records[job.spec_i].append(summarise(n, rows, spec, job.factor, q_norm))
                    next_s[ji] += 1
            if partial is not None and k < len(stages) - 1:
                partial(records)
            b_lo = b_hi
        if self.record is not None and self.draw_key is not None:  # complete: every tile was drawn
            draw_store().put(self.draw_key, self.record, self.stream_bytes, self.n_blocks)
        return records

    def _run_stage(self, b_lo: int, b_hi: int, units: list[tuple[int, int]],
                   accs: dict[tuple[int, int, int], Acc], shared: _Shared, pool: ThreadPoolExecutor,
                   poll: Callable[[], None]) -> None:
        w = max(1, min(self.workers, len(units)))
        # Workers pull units as they finish (the two vCPUs here run normal_ at different
        # speeds, so a fixed split left one idle). A unit's numbers do not depend on who runs
        # it, and units write disjoint (lane, rows) sums, so results stay worker-independent.
        queue, lock = list(reversed(units)), threading.Lock()

        def next_unit() -> tuple[int, int] | None:
            with lock:
                return queue.pop() if queue else None

        futures: list[Future] = [pool.submit(self._run_units, b_lo, b_hi, next_unit, accs, shared, i)
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
    return run_sweep_set([spec], device=device, progress=progress, workers=workers, cancel=cancel,
                         engine=engine)[0]


Partial = Callable[[list["pd.DataFrame | None"]], None]


def run_sweep_set(specs: Sequence[SweepSpec], *, device: str | torch.device | None = None,
                  progress: Progress | None = None, workers: int | None = None,
                  cancel: threading.Event | None = None, engine: str | None = None,
                  partial: Partial | None = None) -> list[pd.DataFrame]:
    """Several sweeps at once; specs that draw the same random numbers share one stream.

    Specs with equal :func:`stream_key` (the same method, seed, d, query rows, value dim and
    dtype: e.g. curves that differ only in temperature, scale rule or normaliser) are run by
    one streaming pass over their common draws, each reduced with its own factor, so the
    random numbers (about half of a CPU sweep's time) are drawn once. Each result equals
    :func:`run_sweep` of that spec alone (the same draws; ``run_sweep`` is this with one spec).

    Args:
        specs: the sweeps. device, progress, workers, cancel, engine: as :func:`entropy_vs_length`
            (``progress`` covers all of them).
        partial: if given, called from the calling thread as the torch engine finishes the
            short lengths (after about 1/16 and 1/4 of the keys), with one frame per spec of
            the lengths done so far (None where a spec has none yet); the final frames are the
            return value.

    Returns:
        One DataFrame per spec, in order, as :func:`entropy_vs_length` returns.
    """
    from attncore.sweeps.fused import choose_engine, run_fused_sweep  # fused imports this module

    dev = resolve_device(device)
    specs = list(specs)
    out: list[pd.DataFrame | None] = [None] * len(specs)
    groups: dict[tuple, list[int]] = {}
    for i, spec in enumerate(specs):
        if choose_engine(engine, dev, spec.dtype) == "fused":
            out[i] = run_fused_sweep(spec, device=dev, progress=progress, cancel=cancel)
            continue
        spec.validate()
        groups.setdefault(stream_key(spec), []).append(i)
    for idx in groups.values():
        sub = [specs[i] for i in idx]

        def on_partial(frames: list[pd.DataFrame | None], idx: list[int] = idx) -> None:
            if partial is not None:
                shown = list(out)
                for i, f in zip(idx, frames, strict=True):
                    shown[i] = f
                partial(shown)

        cb = on_partial if partial is not None else None
        if dev.type != "cpu":
            frames = oom_to_limit(lambda sub=sub, cb=cb: _run_set(sub, dev, 1, progress, cancel,
                                                                 _gpu_worker_init, cb),
                                  "this sweep", "Lower the query rows or d.")
        else:
            with _THREADS_LOCK, single_threaded() as prev_threads:  # one CPU sweep at a time; count restored
                n_workers = max(1, min(LANES, prev_threads if workers is None else int(workers)))
                frames = _run_set(sub, dev, n_workers, progress, cancel, _worker_init, cb)
        for i, f in zip(idx, frames, strict=True):
            out[i] = f
    return [f for f in out if f is not None]


def _run_set(specs: list[SweepSpec], dev: torch.device, workers: int, progress: Progress | None,
             cancel: threading.Event | None, init: Callable[[], None],
             partial: Callable[[list[pd.DataFrame | None]], None] | None) -> list[pd.DataFrame]:
    """The torch engine over specs sharing one stream, on ``workers`` threads started with ``init``."""
    engine = _Engine(specs, dev, workers)
    shared = _Shared(done=[0] * workers)
    if cancel is not None and cancel.is_set():
        raise SweepCancelled("the sweep was stopped before it started.")
    total_units = engine.total_work
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
        frac = min(1.0, sum(shared.done) / total_units)
        eta = (now - t0) * (1 - frac) / frac if frac > 0.02 else float("nan")
        msg = f"{frac:.0%} of {fmt_count(total_units)} random numbers" + \
            (f", about {eta:.0f} s left" if math.isfinite(eta) else "")
        if progress(frac, msg) is False:
            shared.cancel.set()

    def on_stage(records: list[list[dict]]) -> None:
        if partial is not None:
            partial([frame(r) if r else None for r in records])

    try:
        with ThreadPoolExecutor(max_workers=workers, initializer=init,
                                thread_name_prefix="attncore-sweep") as pool:
            records = engine.run(shared, pool, poll, on_stage if partial is not None else None)
    finally:
        # let go of the tiles (kept ones live on in the store): an engine left in a reference cycle
        # would otherwise hold up to draw_cache_bytes() until some later garbage collection
        engine.record = engine.stored = None
    if progress is not None:
        progress(1.0, "done")
    return [frame(r) for r in records]
