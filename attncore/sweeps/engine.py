"""The torch engine: threaded streaming over torch.Generator draws (:func:`run_torch_sweeps`).

Callers go through :mod:`attncore.sweeps.dispatch` (``run_sweep`` and friends), which picks
this engine or the fused kernels for each sweep.

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
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field

import pandas as pd
import torch

from attncore.budget import oom_to_limit
from attncore.sweeps.draws import Tiles, draw_store, stream_bytes
from attncore.sweeps.progress import PARTIAL_FRACTIONS, Partial, Progress, SweepCancelled, Ticker
from attncore.sweeps.reduce import EXP_FLOOR, Acc, Reducer, frame, merge_into, new_acc, row_stats, summarise
from attncore.sweeps.rng import LANES, draw_queries, fill_logit_tile, row_groups, unit_generator
from attncore.sweeps.spec import SWEEP_DTYPES, SweepSpec, plan_blocks, units_per_key
from attncore.threads import single_threaded

__all__ = ["run_torch_sweeps", "stage_keys", "stream_key"]


# Leading segments of a tile no longer than this many keys are reduced together by a few segmented
# calls (Reducer.add_segments); longer ones one by one. Block 0 holds every length up to K: at four
# points per doubling, 36 of its 49 segments are this short and span only 4096 keys.
SEGMENTED_KEYS = 4096


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

    Staged runs report after about :data:`~attncore.sweeps.progress.PARTIAL_FRACTIONS` (1/16
    and 1/4) of the blocks, so a page can draw the short lengths while the long ones stream;
    unstaged runs have no barrier.
    """
    if not staged:
        return [n_blocks]
    ends = sorted({*(max(1, math.ceil(n_blocks * f)) for f in PARTIAL_FRACTIONS), n_blocks})
    return [e for e in ends if e <= n_blocks]


def stage_keys(spec: SweepSpec, device: torch.device | str) -> tuple[int, ...]:
    """Keys streamed when a staged run of ``spec`` alone reports (partial reports, then the end)."""
    block, _ = plan_blocks(spec, torch.device(device))
    n_max = max(spec.lengths)
    return tuple(min(n_max, e * block) for e in _stages(-(-n_max // block), True))


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
                                    floor_needed=floor_needed, sigmoid=job.sigmoid, offset=offset, key0=a)
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


def run_torch_sweeps(specs: Sequence[SweepSpec], device: torch.device, *, progress: Progress | None = None,
                     workers: int | None = None, cancel: threading.Event | None = None,
                     partial: Partial | None = None) -> list[pd.DataFrame]:
    """The torch engine over ``specs``: those on the same draws (:func:`stream_key`) share one stream.

    Validates every spec first (the torch engine's caps). ``partial(frames)`` is called from
    the calling thread after each stage but the last with one frame per spec of the lengths
    finished so far (None where a spec has none yet). Returns one frame per spec, in order.
    """
    specs = list(specs)
    for spec in specs:
        spec.validate()
    out: list[pd.DataFrame | None] = [None] * len(specs)
    groups: dict[tuple, list[int]] = {}
    for i, spec in enumerate(specs):
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
        if device.type != "cpu":
            frames = oom_to_limit(lambda sub=sub, cb=cb: _run_set(sub, device, 1, progress, cancel,
                                                                 _gpu_worker_init, cb),
                                  "this sweep", "Lower the query rows or d.")
        else:
            with _THREADS_LOCK, single_threaded() as prev_threads:  # one CPU sweep at a time; count restored
                n_workers = max(1, min(LANES, prev_threads if workers is None else int(workers)))
                frames = _run_set(sub, device, n_workers, progress, cancel, _worker_init, cb)
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
    ticker = Ticker(engine.total_work, progress, cancel)

    def poll() -> None:
        if shared.cancel.is_set():
            return
        if not ticker.tick(sum(shared.done)):
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
    ticker.finish()
    return [frame(r) for r in records]
