"""The entropy sweep fused into Triton kernels: random numbers drawn in-kernel, nothing of size n in memory.

Shape legend: ``R`` query rows, ``n`` keys a row sees, ``d`` query/key dim, ``Dv`` value dim,
``P`` programs (key chunks) of one launch. The largest tensors are the partial sums of one
launch ``(P, R, 4 + Dv)`` and the queries ``(R, d)``: memory stays flat in n, to ``n = 2**30``.

Same statistics as :mod:`attncore.sweeps` (same spec, scale rules, temperatures,
normalisers, queries and reductions; see its module doc): each program of a kernel keeps,
per query row, the running max ``m``, ``s0 = sum e^{x-m}``, ``s1 = sum (x-m) e^{x-m}``,
``s2 = sum e^{2(x-m)}`` and ``o = sum e^{x-m} v`` (sigmoid: max weight, ``sum w``,
``sum w log w``, ``sum w^2``, ``sum w v``) over its chunk of keys in float32, with the
online max rescaling; the host merges the chunks' partials in float64 with torch ops on the
device (the same merge as the engine) and :func:`attncore.sweeps.reduce.row_stats` /
``summarise`` turn the sums into the table. Only the random numbers differ: the kernels
draw from Philox (counter-based, seeded from ``(seed, stream)``) instead of the engine's
``torch.Generator`` lanes, so fused and torch results agree within their standard errors,
not to the digit. The queries are the engine's (drawn with ``torch.Generator`` on the
device), so ``logit_std`` and ``logit_factor`` agree exactly.

* ``logits``: one program reduces ``RB`` rows over a chunk of keys, drawing ``z`` in
  groups of ``GROUP`` keys (four Gaussians per Philox call) and one ``exp`` per sample.
* ``vectors``: one program owns ``BR`` query rows (64, or 128 from 65 rows on) and a chunk of
  keys; each tile of ``BN`` keys and their values is drawn once, rounded to tf32 and shared
  by the rows through ``tl.dot`` on the tensor cores (queries split into two tf32 parts:
  float32-accurate logits from two passes). Each warp owns 16 whole rows, so the running max
  and sums never leave a warp. More than 128 rows are split into row tiles that draw the same
  keys again (each from the same counters).

The tail: the Gaussian's radius uniform has 40 bits (not 32), so samples reach 7.54
standard deviations and are correct in the tail to well beyond the largest of ``2^36``
draws (see :mod:`attncore.sweeps.fused_kernels`); no redraws are needed. The CUDA tests check the
max weight against the exact quadrature of :mod:`attncore.row_theory` at 2^20..2^30.

Scheduling: a pass is cut into launches of :data:`LAUNCH_SAMPLES` random numbers (about
20 ms on an H100 at the measured 198-241 G samples/s); the
partial merge of each launch is queued right behind it. The host never reads a value back
inside a sweep: on CUDA it waits on the event of the launch *before* the one just queued (the
GPU always has the next launch queued), then reports progress and checks cancellation. On the CPU the kernels
run in Triton's interpreter (``TRITON_INTERPRET=1`` set before triton is imported): slow,
for tests at small n.

Which engine runs a sweep is decided in one place, :mod:`attncore.sweeps.dispatch` (on CUDA
these kernels from the measured crossover lengths on, the torch engine below them);
:mod:`attncore.sweeps.fused_plan` only says whether the kernels can run on a device
(:func:`~attncore.sweeps.fused_plan.fused_unavailable_reason`), what they cost
(:func:`~attncore.sweeps.fused_plan.fused_work`) and how a spec is launched; this module runs the
sweep, and :mod:`attncore.sweeps.fused_replay` replays its draws (the reference).
"""

from __future__ import annotations

import math
import threading
from collections import deque
from collections.abc import Callable, Generator
from dataclasses import dataclass

import pandas as pd
import torch
from torch import Tensor

from attncore.budget import oom_to_limit
from attncore.device import resolve_device
from attncore.errors import AttnInputError
from attncore.sweeps.fused_plan import (
    GROUP,
    OPTS,
    STREAM_KEYS,
    STREAM_LOGITS,
    STREAM_VALUES,
    LaunchPlan,
    fused_unavailable_reason,
    fused_work,
    kernels_module,
    launch_plan,
    mix64,
    validate_fused,
)
from attncore.sweeps.progress import PARTIAL_FRACTIONS, Progress, SweepCancelled, Ticker
from attncore.sweeps.reduce import (
    VALUE_BATCHES,
    Acc,
    frame,
    merge_into,
    new_acc,
    row_stats,
    summarise,
)
from attncore.sweeps.rng import draw_queries
from attncore.sweeps.spec import SweepSpec

__all__ = [
    "FixedInputs",
    "advance",
    "fused_sweep_steps",
    "key_batches",
    "report_points",
    "run_fused_sweep",
    "split_tf32",
    "tf32_round",
]


# --------------------------------------------------------------------------- tf32 operands


def tf32_round(x: Tensor) -> Tensor:
    """``x`` (float32) rounded to the nearest tf32 number (10 mantissa bits, ties away from zero).

    The same bit operation as the kernels' ``_tf32``: the vectors kernel draws its keys and
    values as float32 Gaussians rounded this way (a relative change below 2^-11 per number:
    no statistic of the sweep can see it), so the tensor cores multiply them exactly.
    """
    b = x.to(torch.float32).contiguous().view(torch.int32)
    return ((b + 0x1000) & -0x2000).view(torch.float32)


def split_tf32(x: Tensor, width: int) -> tuple[Tensor, Tensor]:
    """``x`` (R, d) as two tf32 parts ``(hi, lo)`` (R, width), zero-padded: ``hi + lo = x`` to 2^-22.

    Two tf32 tensor-core products with a tf32 operand k, ``hi k + lo k``, give ``x . k`` to
    float32 accuracy (each product is exact; the sums are float32), at two passes where the
    three of TF32x3 (which also splits k) were needed.
    """
    R, d = x.shape
    hi = torch.zeros(R, width, device=x.device, dtype=torch.float32)
    lo = torch.zeros(R, width, device=x.device, dtype=torch.float32)
    hi[:, :d] = tf32_round(x.to(torch.float32))
    lo[:, :d] = tf32_round((x.to(torch.float64) - hi[:, :d].to(torch.float64)).to(torch.float32))
    return hi, lo


def _dot_precision(interpret: bool) -> str:
    """tl.dot's input precision: tf32 on the GPU (the operands are tf32 numbers), exact when interpreted."""
    return "ieee" if interpret else "tf32"


# --------------------------------------------------------------------------- fixed inputs (test hook)


@dataclass(frozen=True)
class FixedInputs:
    """Given inputs instead of Philox draws: the kernels' reduction on known numbers (tests).

    logits: ``z`` (R, n) unit-std logits (the kernel multiplies row r by ``|q_r| * factor``).
    vectors: ``keys`` (n, d) and ``values`` (n, Dv), which the kernel rounds to tf32 as it does
    its own draws (:func:`tf32_round`). ``n`` must cover the spec's largest length.
    """

    z: Tensor | None = None
    keys: Tensor | None = None
    values: Tensor | None = None


# --------------------------------------------------------------------------- engine


class _Fused:
    """Runs the passes of one spec on one device with the fused kernels."""

    def __init__(self, spec: SweepSpec, device: torch.device, fixed: FixedInputs | None = None,
                 chunk: int | None = None, launch_keys: int | None = None):
        self.spec, self.device, self.fixed = spec, device, fixed
        self.k = kernels_module()
        self.plan = launch_plan(spec)
        self.chunk_override, self.launch_override = chunk, launch_keys
        self.sigmoid = spec.normalizer == "sigmoid"
        self.vectors = spec.method == "vectors"
        self.dv = spec.value_dim if self.vectors else 0
        self.q = draw_queries(spec, device, torch.float32)  # (R, d), the engine's queries
        self.q_norm = torch.linalg.vector_norm(self.q.to(torch.float64), dim=1)  # (R,)
        self.seed_logits = mix64(spec.seed, STREAM_LOGITS)
        self.seed_keys = mix64(spec.seed, STREAM_KEYS)
        self.seed_values = mix64(spec.seed, STREAM_VALUES)
        self.interpret = device.type != "cuda"
        self.fixed_args = self._fixed_args(fixed)

    def _fixed_args(self, fixed: FixedInputs | None) -> tuple[Tensor, Tensor, Tensor, int]:
        dev, f32 = self.device, torch.float32
        dummy = torch.zeros(1, device=dev, dtype=f32)
        if fixed is None:
            return dummy, dummy, dummy, 1
        n_max = max(self.spec.lengths)
        R = self.spec.queries
        if not self.vectors:
            if fixed.z is None or fixed.z.shape[0] != R or fixed.z.shape[1] < n_max:
                raise AttnInputError(f"fixed logits must be (R={R}, n>={n_max}).")
            z = fixed.z.to(device=dev, dtype=f32).contiguous()
            return z, dummy, dummy, int(z.shape[1])
        if fixed.keys is None or fixed.values is None:
            raise AttnInputError("the vectors method needs fixed keys and values.")
        keys, vals = fixed.keys, fixed.values
        if keys.shape[0] < n_max or keys.shape[1] != self.spec.d or vals.shape != (keys.shape[0], self.dv):
            raise AttnInputError(f"fixed keys must be (n>={n_max}, d={self.spec.d}) and values "
                                 f"(n, {self.dv}).")
        n = int(keys.shape[0])
        kp = torch.zeros(n, self.plan.dch * self.plan.n_dch, device=dev, dtype=f32)
        kp[:, : self.spec.d] = keys.to(device=dev, dtype=f32)
        vp = torch.zeros(n, self.plan.dvp, device=dev, dtype=f32)
        vp[:, : self.dv] = vals.to(device=dev, dtype=f32)
        return dummy, kp, vp, n

    def _launch(self, buf: Tensor, factor_arg: tuple[Tensor, ...], lo: int, hi: int, chunk: int,
                bias: float) -> Tensor:
        """Queue one launch over keys [lo, hi); returns its partials (P, R, W) (a view of buf)."""
        spec, plan, k = self.spec, self.plan, self.k
        R = spec.queries
        programs = -(-(hi - lo) // chunk)
        W = 4 + self.dv
        part = buf[: programs * R * W].view(programs, R, W)
        grid = (plan.row_programs, programs)
        z, kp, vp, n_fixed = self.fixed_args
        fixed = self.fixed is not None
        if self.vectors:
            q_hi, q_lo = factor_arg
            k._vectors_kernel[grid](
                part, q_hi, q_lo, kp, vp, self.seed_keys, self.seed_values, lo, hi, chunk, R, plan.n_dch,
                self.dv, bias, n_fixed, SIGMOID=self.sigmoid, FIXED=fixed, BR=plan.row_block,
                BN=plan.key_align, DCH=plan.dch, DVP=plan.dvp, DOT_PREC=_dot_precision(self.interpret),
                FAST=not self.interpret, num_warps=plan.warps, num_stages=1, **OPTS)
        else:
            (std,) = factor_arg
            k._logits_kernel[grid](part, std, z, self.seed_logits, lo, hi, chunk, R, bias, n_fixed,
                                  SIGMOID=self.sigmoid, FIXED=fixed, RB=plan.row_block, GROUP=GROUP, **OPTS)
        return part

    def _fold(self, part: Tensor) -> Acc:
        """Merge the partials of one launch (P, R, W) over P, in float64 on the device.

        Vectors: the outputs and ``s2`` of program p go to batch ``p mod B`` (:data:`VALUE_BATCHES`).
        """
        p = part.to(torch.float64)
        m_p = p[..., 0]
        P = p.shape[0]
        if self.sigmoid:
            m, al = m_p.amax(0), torch.ones_like(m_p)
            a, b, c = p[..., 1].sum(0), p[..., 2].sum(0), p[..., 3].sum(0)
        else:
            m = m_p.amax(0)  # (R,)
            al = torch.exp(m_p - m)  # (P, R); empty programs (m_p = -1e30) get 0
            a = (al * p[..., 1]).sum(0)
            b = (al * (p[..., 2] + (m_p - m) * p[..., 1])).sum(0)
            c = (al * al * p[..., 3]).sum(0)
        if not self.vectors:
            return Acc(m=m, a=a, b=b, c=c, empty=False)
        batch = torch.arange(P, device=p.device) % VALUE_BATCHES  # (P,)
        R = p.shape[1]
        o = torch.zeros(VALUE_BATCHES, R, self.dv, device=p.device, dtype=p.dtype)
        o.index_add_(0, batch, al[..., None] * p[..., 4:])
        cb = torch.zeros(VALUE_BATCHES, R, device=p.device, dtype=p.dtype)
        cb.index_add_(0, batch, al * al * p[..., 3])
        return Acc(m=m, a=a, b=b, c=c, o=o.permute(1, 0, 2), cb=cb.T, empty=False)

    def launches(self, checkpoints: tuple[int, ...]) -> list[tuple[int, int, int, int]]:
        """[(segment, lo, hi, chunk)] covering keys [0, n_max), cut at the checkpoints."""
        return _launches(self.plan, checkpoints, self.chunk_override, self.launch_override)

    def run_pass(self, factor: float, checkpoints: tuple[int, ...], bias: float,
                 tick: Callable[[int], None]) -> list[dict[str, Tensor]]:
        """Stream one pass; per-row stats at each checkpoint (on the host). ``tick(samples)``: after each
        launch."""
        steps = self.pass_steps(factor, checkpoints, bias, tick)
        while True:
            try:
                next(steps)
            except StopIteration as done:
                return done.value

    def pass_steps(self, factor: float, checkpoints: tuple[int, ...], bias: float,
                   tick: Callable[[int], None], report_after: frozenset[int] = frozenset()
                   ) -> Generator[list[dict[str, Tensor]], None, list[dict[str, Tensor]]]:
        """:meth:`run_pass` as a generator: after checkpoint ``s`` in ``report_after`` it yields the
        host stats of checkpoints ``0 .. s`` (one copy to the host: a synchronisation); otherwise
        nothing is read back until the pass ends. Returns the stats of every checkpoint.
        """
        spec, dev = self.spec, self.device
        R = spec.queries
        if self.vectors:
            width = self.plan.dch * self.plan.n_dch
            arg: tuple[Tensor, ...] = split_tf32(self.q.to(torch.float64) * factor, width)  # 2 x (R, width)
        else:
            arg = ((self.q_norm * factor).to(torch.float32),)  # (R,) row std of the logits
        plan = self.launches(checkpoints)
        biggest = max(-(-(hi - lo) // chunk) for _, lo, hi, chunk in plan)
        buf = torch.empty(biggest * R * (4 + self.dv), device=dev, dtype=torch.float32)
        total = new_acc(R, self.dv or None, dev, self.sigmoid)
        names: list[str] = []
        shapes: list[tuple[int, ...]] = []  # each stat's shape after the row dim
        snaps: list[Tensor] = []  # per finished checkpoint: its row stats stacked (K, R...), on the device
        in_flight: deque = deque()
        for i, (s, lo, hi, chunk) in enumerate(plan):
            part = self._launch(buf, arg, lo, hi, chunk, bias)
            merge_into(total, self._fold(part), self.sigmoid)
            if dev.type == "cuda":
                ev = torch.cuda.Event()
                ev.record()
                in_flight.append(ev)
                while len(in_flight) > 1:  # keep one launch queued behind the one running
                    in_flight.popleft().synchronize()
            tick((hi - lo) * self.plan.samples_per_key)
            if i + 1 < len(plan) and plan[i + 1][0] == s:
                continue
            # checkpoint s is complete: snapshot its stats (a copy: the sums change in place later)
            st = row_stats(total, checkpoints[s], spec)
            if not names:
                names = list(st)
                shapes = [tuple(st[k].shape[1:]) for k in names]
            snaps.append(_stack_stats(st, names))
            if s in report_after:
                yield _host_stats(snaps, names, shapes)
        return _host_stats(snaps, names, shapes)


def _launches(plan: LaunchPlan, checkpoints: tuple[int, ...], chunk: int | None = None,
              launch_keys: int | None = None) -> list[tuple[int, int, int, int]]:
    """[(segment, lo, hi, chunk)] covering keys [0, n_max) of one pass, cut at the checkpoints."""
    out = []
    prev = 0
    for s, c in enumerate(checkpoints):
        if c <= prev:
            continue
        ch = plan.chunk(c - prev, chunk)
        step = plan.launch_keys(ch, launch_keys)
        for lo in range(prev, c, step):
            out.append((s, lo, min(c, lo + step), ch))
        prev = c
    return out


def key_batches(spec: SweepSpec, checkpoints: tuple[int, ...], n: int) -> Tensor:
    """The value batch of each of the first ``n`` keys of a pass to ``checkpoints`` (n,), int64.

    The kernels keep one partial per program; program p of a launch goes to batch
    ``p mod B`` (:data:`~attncore.sweeps.reduce.VALUE_BATCHES`): a fixed function of the spec and
    the pass, which the reference (:func:`attncore.sweeps.fused_replay.fused_reference_sweep`) follows.
    """
    out = torch.empty(n, dtype=torch.int64)
    for _, lo, hi, chunk in _launches(launch_plan(spec), checkpoints):
        if lo >= n:
            break
        keys = torch.arange(lo, min(hi, n))
        out[lo: min(hi, n)] = ((keys - lo) // chunk) % VALUE_BATCHES
    return out


def _stack_stats(stats: dict[str, Tensor], names: list[str]) -> Tensor:
    """Row stats (each (R, ...)) as one (R, K) tensor: a copy (the sums change in place later)."""
    return torch.cat([stats[k].reshape(stats[k].shape[0], -1) for k in names], dim=1)


def _host_stats(snaps: list[Tensor], names: list[str], shapes: list[tuple[int, ...]]
                ) -> list[dict[str, Tensor]]:
    """Snapshots back on the host as per-checkpoint dicts (one copy: one synchronisation)."""
    host = torch.stack(snaps).to("cpu")  # (C, R, K)
    out = []
    for c in range(host.shape[0]):
        col, d = 0, {}
        for k, shape in zip(names, shapes, strict=True):
            w = math.prod(shape)
            d[k] = host[c, :, col: col + w].reshape(host.shape[1], *shape)
            col += w
        out.append(d)
    return out


def report_points(spec: SweepSpec) -> list[tuple[int, int]]:
    """(pass, checkpoint) after which a staged fused run of ``spec`` reports its finished lengths.

    The first checkpoints at which the random numbers drawn reach the
    :data:`~attncore.sweeps.progress.PARTIAL_FRACTIONS` of the sweep's (never the last one).
    """
    per_key = launch_plan(spec).samples_per_key
    total = fused_work(spec)
    thresholds = [f * total for f in PARTIAL_FRACTIONS]
    passes = spec.passes()
    out, done, k = [], 0, 0
    for pi, (_, lens) in enumerate(passes):
        prev = 0
        for ci, c in enumerate(lens):
            done += (c - prev) * per_key
            prev = c
            last = pi == len(passes) - 1 and ci == len(lens) - 1
            if k < len(thresholds) and done >= thresholds[k] and not last:
                out.append((pi, ci))
            while k < len(thresholds) and done >= thresholds[k]:
                k += 1
    return out


def run_fused_sweep(spec: SweepSpec, *, device: str | torch.device | None = None,
                    progress: Progress | None = None, cancel: threading.Event | None = None,
                    partial: Callable[[pd.DataFrame], None] | None = None,
                    fixed: FixedInputs | None = None, chunk: int | None = None,
                    launch_keys: int | None = None) -> pd.DataFrame:
    """:func:`attncore.sweeps.entropy_vs_length` through the fused kernels (same columns).

    Args:
        spec: the sweep; ``n`` up to :data:`MAX_SWEEP_N_CUDA` on CUDA, float32 only.
        device: CUDA, or the CPU when triton runs its interpreter (tests).
        progress: ``progress(fraction_done, message)`` between launches (about every 0.1 s);
            returning ``False`` stops the sweep. cancel: an event; setting it stops the sweep.
        partial: if given, called with the frame of the lengths finished so far at the
            :func:`report_points` (after about 1/16 and 1/4 of the random numbers).
        fixed: test hook, :class:`FixedInputs` instead of random draws.
        chunk, launch_keys: override keys per program / per launch (tests: results must not
            depend on them beyond float32 rounding).

    Raises:
        AttnInputError / ResourceLimitError: bad or too large arguments, or the fused kernels
            cannot run on this device (the message says why).
        SweepCancelled: stopped by ``progress`` or ``cancel``.
    """
    steps = fused_sweep_steps(spec, device=device, progress=progress, cancel=cancel,
                              staged=partial is not None, fixed=fixed, chunk=chunk, launch_keys=launch_keys)
    while True:
        done, frame_now = advance(steps)
        if done:
            return frame_now
        if partial is not None:
            partial(frame_now)


def fused_sweep_steps(spec: SweepSpec, *, device: str | torch.device | None = None,
                      progress: Progress | None = None, cancel: threading.Event | None = None,
                      staged: bool = True, fixed: FixedInputs | None = None, chunk: int | None = None,
                      launch_keys: int | None = None) -> Generator[pd.DataFrame, None, pd.DataFrame]:
    """:func:`run_fused_sweep` one stage at a time: validates ``spec`` at once, then (driven by
    :func:`advance`) yields the frame of the lengths finished at each :func:`report_points`
    (with ``staged``) and returns the final frame. Several of them advanced in turn report
    their short lengths together (:func:`attncore.sweeps.run_sweep_set`).
    """
    dev = resolve_device(device)
    why = fused_unavailable_reason(dev)
    if why is not None:
        raise AttnInputError(f"the fused sweep cannot run here: {why}")
    validate_fused(spec, dev)
    if cancel is not None and cancel.is_set():
        raise SweepCancelled("the sweep was stopped before it started.")
    return _steps(spec, dev, progress, cancel, staged, fixed, chunk, launch_keys)


def advance(steps: Generator[pd.DataFrame, None, pd.DataFrame]) -> tuple[bool, pd.DataFrame]:
    """Run a :func:`fused_sweep_steps` generator to its next report: ``(finished, frame)``.

    A CUDA out-of-memory error becomes a plain ``ResourceLimitError``.
    """
    def step() -> tuple[bool, pd.DataFrame]:
        try:
            return False, next(steps)
        except StopIteration as done:
            return True, done.value

    return oom_to_limit(step, "this sweep",
                        "Lower the query rows (or d and the value dim for the vectors method).")


def _steps(spec: SweepSpec, dev: torch.device, progress: Progress | None, cancel: threading.Event | None,
           staged: bool, fixed: FixedInputs | None, chunk: int | None, launch_keys: int | None
           ) -> Generator[pd.DataFrame, None, pd.DataFrame]:
    eng = _Fused(spec, dev, fixed=fixed, chunk=chunk, launch_keys=launch_keys)
    ticker = Ticker(fused_work(spec), progress, cancel)
    done = [0]

    def tick(samples: int) -> None:
        done[0] += samples
        if not ticker.tick(done[0]):
            raise SweepCancelled("the sweep was stopped.")

    points = report_points(spec) if staged else []
    records: list[dict] = []
    q_norm = eng.q_norm.cpu()
    for pi, (factor, lens) in enumerate(spec.passes()):
        bias = -math.log(max(lens)) if spec.normalizer == "sigmoid" else 0.0
        steps = eng.pass_steps(factor, lens, bias, tick, frozenset(ci for p, ci in points if p == pi))
        while True:
            try:
                so_far = next(steps)
            except StopIteration as finished:
                stats = finished.value
                break
            # the lengths of earlier passes and those of this one finished so far
            yield frame(records + [summarise(n, rows, spec, factor, q_norm)
                                   for n, rows in zip(lens, so_far, strict=False)])
        records.extend(summarise(n, rows, spec, factor, q_norm) for n, rows in zip(lens, stats, strict=True))
    ticker.finish()
    return frame(records)
