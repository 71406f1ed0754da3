"""Running long attncore sweeps from a page: estimate, Run button, progress bar, Stop, cache.

A page hands :func:`run_sweeps` the :class:`~attncore.sweeps.SweepSpec` of every curve it
draws. Results already computed (in this server process) come back at once. For the
rest the time is estimated from a rate measured on this machine (a small calibration
sweep the first time, then refined by every real sweep); a job estimated under
``AUTO_RUN_S`` runs straight away, a longer one waits for a Run button and says how long
it will take (jobs no bigger than the page's default view always run at once, so a busy
machine cannot hide the first view). While it runs, a progress bar moves and a Stop button ends it between
chunks: clicking any widget makes Streamlit rerun the script, which interrupts the
sweep at its next progress update, and the Stop button's callback marks the rerun as
"stopped" so it does not start again by itself.

Results are kept in a bounded in-process store rather than ``st.cache_data``: a cached
function may not draw the progress bar (Streamlit would replay it on every cache hit).
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd
import streamlit as st

from attncore.budget import check_limit
from attncore.sweeps import SweepPlan, SweepSpec, check_sweep, max_sweep_work, plan, run_sweep, run_sweep_set
from attncore.sweeps.draws import draw_cache_bytes
from attncore.sweeps.engine import stream_key
from ui.admission import heavy

__all__ = ["AUTO_RUN_S", "PARTIAL_AFTER_S", "SweepResult", "estimate_seconds", "run_sweeps"]

AUTO_RUN_S = 4.0  # longer jobs wait for the Run button...
AUTO_RUN_WORK = 3 * 64 * (1 << 20)  # ...unless no bigger than the default view (3 curves, 64 rows, 2^20)
QUIET_S = 1.5  # sweeps estimated shorter than this run without a progress bar or Stop button
PARTIAL_AFTER_S = AUTO_RUN_S  # sweeps estimated longer than this draw their short lengths first
STORE_SIZE = 96  # sweeps kept (each a small DataFrame)
SWEEP_BYTES = 256 * 1024**2  # scratch of one running sweep (per-worker blocks), for admission; plus the
# draws it may keep for the next sweep (attncore.sweeps.draws, at most draw_cache_bytes())
FIRST_RATE = 1e-8  # seconds per work unit assumed before a rate is measured (2-core CPU, logits)
_LEARN_WORK = 1 << 26  # sweeps smaller than this say little about the rate


@dataclass(frozen=True)
class SweepResult:
    """Frames in the order of the specs and the seconds their sweeps took when computed."""

    frames: tuple[pd.DataFrame, ...]
    seconds: float
    computed: int  # how many sweeps ran now (the rest came from the store)


class _Store:
    """LRU store of finished sweeps, shared by every session of this server process."""

    def __init__(self, size: int):
        self.size = size
        self.items: OrderedDict[tuple[SweepSpec, str], tuple[pd.DataFrame, float]] = OrderedDict()
        self.lock = threading.Lock()

    def get(self, key: tuple[SweepSpec, str]) -> tuple[pd.DataFrame, float] | None:
        with self.lock:
            if key in self.items:
                self.items.move_to_end(key)
                return self.items[key]
        return None

    def put(self, key: tuple[SweepSpec, str], value: tuple[pd.DataFrame, float]) -> None:
        with self.lock:
            self.items[key] = value
            self.items.move_to_end(key)
            while len(self.items) > self.size:
                self.items.popitem(last=False)


@st.cache_resource(show_spinner=False)
def _store() -> _Store:
    return _Store(STORE_SIZE)


@st.cache_resource(show_spinner=False)
def _rates() -> dict[tuple[str, str, str], float]:
    """Seconds per work unit, per (device, method, engine): measured, then refined by real sweeps."""
    return {}


def _rate(spec: SweepSpec, device: str, costs: SweepPlan, i: int) -> float:
    """Seconds per work unit for spec i of ``costs``: its probe is timed once per (device, method, engine)."""
    rates = _rates()
    key = (device, spec.method, costs.engines[i])
    if key not in rates:
        if device.startswith("cuda"):  # compiles the kernels / starts the device: not part of the rate
            run_sweep(costs.probes[i], device=device, engine=costs.engines[i])
        t0 = time.perf_counter()
        run_sweep(costs.probes[i], device=device, engine=costs.engines[i])
        rates[key] = (time.perf_counter() - t0) / max(1, costs.probe_work[i])
    return rates[key]


def _set_key(specs: Sequence[SweepSpec], device: str, engine: str) -> tuple:
    """The rate of curves run together depends on how many passes they take: curves on shared draws
    (:func:`attncore.sweeps.engine.stream_key`) draw their random numbers once (about half a CPU sweep)."""
    return (device, specs[0].method, engine, len(specs), len({stream_key(s) for s in specs}))


def _shared(specs: Sequence[SweepSpec], costs: SweepPlan) -> bool:
    """The specs run as one set on one engine with one method (what :func:`_set_rate` calibrates)."""
    return len(specs) > 1 and len({(s.method, e) for s, e in zip(specs, costs.engines, strict=True)}) == 1


def _set_rate(specs: Sequence[SweepSpec], device: str, costs: SweepPlan) -> float:
    """Seconds per work unit of ``specs`` run together, calibrated on this server (issue 34: the sum of
    single-curve rates put a 25 s sweep of three curves on shared draws at 52 s): their probes are run as
    one set, as the sweep will run, once per :func:`_set_key` (then refined by real runs, :func:`_learn`)."""
    rates = _rates()
    key = _set_key(specs, device, costs.engines[0])
    if key not in rates:
        if device.startswith("cuda"):  # compiles the kernels / starts the device: not part of the rate
            run_sweep_set(costs.probes, device=device, engine=costs.engines[0])
        t0 = time.perf_counter()
        run_sweep_set(costs.probes, device=device, engine=costs.engines[0])
        rates[key] = (time.perf_counter() - t0) / max(1, sum(costs.probe_work))
    return rates[key]


def _learn(spec: SweepSpec, engine: str, device: str, work: int, seconds: float,
           together: Sequence[SweepSpec] = ()) -> None:
    if work < _LEARN_WORK or seconds <= 0:
        return  # too small to say much about the rate
    rates = _rates()
    key = _set_key(together, device, engine) if len(together) > 1 else (device, spec.method, engine)
    measured = seconds / work
    rates[key] = measured if key not in rates else 0.5 * rates[key] + 0.5 * measured


def estimate_seconds(specs: Sequence[SweepSpec], device: str, costs: SweepPlan | None = None) -> float:
    """Estimated seconds for the specs on this machine (from the measured rate; ``costs`` = their plan)."""
    costs = costs or plan(specs, device)
    if _shared(specs, costs):
        return costs.total * _set_rate(specs, device, costs)
    return sum(w * _rate(s, device, costs, i) for i, (s, w) in enumerate(zip(specs, costs.work, strict=True)))


def _fmt_s(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds >= 10 else f"{seconds:.1f} s"


def run_sweeps(specs: Sequence[SweepSpec], device: str, *, key: str, labels: Sequence[str] | None = None,
               where: Any = st, partial: Callable[[list[pd.DataFrame | None]], None] | None = None
               ) -> SweepResult | None:
    """Results of every spec, computing the missing ones with progress and a Stop button.

    The missing ones run together (:func:`attncore.sweeps.run_sweep_set`: curves on the same
    draws share them). ``partial(frames)``, if given, is called while a sweep estimated over
    :data:`PARTIAL_AFTER_S` and larger than the default view runs, with one frame per spec
    (stored ones whole, running ones with the lengths finished so far, None where there is
    none yet), so a page can draw the short lengths before the long ones finish.

    Returns None when the job waits for the Run button or was stopped (a message and the
    button are shown). Raises the specs' own input/limit errors before anything runs.
    """
    labels = list(labels) if labels is not None else [f"sweep {i + 1}" for i in range(len(specs))]
    for s in specs:
        check_sweep(s, device)  # the device's cap on n and its engine's limits
    store = _store()
    found = {i: store.get((s, device)) for i, s in enumerate(specs)}
    missing = [i for i, v in found.items() if v is None]
    if missing:
        todo = [specs[i] for i in missing]
        costs = plan(todo, device)
        total = costs.total
        limit = max_sweep_work(device)
        # each curve's work as a share of its engine's budget, in the units of this device's budget
        check_limit(costs.load * limit, limit, "the work of all curves together (random numbers drawn)",
                    "(about a minute on a 2-core CPU)" if limit < (1 << 36) else "(seconds of GPU time)",
                    "Compare fewer settings, or lower the largest n, the query rows or d.")
        flag_stop, flag_run = f"{key}__stopped", f"{key}__run"
        stopped = bool(st.session_state.pop(flag_stop, False))
        run_now = bool(st.session_state.pop(flag_run, False))
        if total <= AUTO_RUN_WORK and any((device, t.method, e) not in _rates()
                                          for t, e in zip(todo, costs.engines, strict=True)):
            # it runs at once whatever it costs: no calibration probe for a first small sweep
            # (its figure only picks the progress display); the run itself then measures the rate
            est = total * FIRST_RATE
        else:
            est = estimate_seconds(todo, device, costs)
        # one slot for "waiting" and "running": the progress bar and the Stop button take the places
        # of the message and the Run button, so no stale copy of either stays on screen
        slot = where.container()
        if stopped or (est > AUTO_RUN_S and total > AUTO_RUN_WORK and not run_now):
            why = ("The sweep was stopped before it finished. " if stopped else
                   f"This sweep draws {total / 1e9:.2f} G random numbers: about **{_fmt_s(est)}** on "
                   "this machine, so it waits for you. ")
            slot.info(why + "Press **Run sweep** to compute it; you can stop it at any time.",
                      icon=":material/hourglass_top:")
            slot.button(f"Run sweep (≈ {_fmt_s(est)})", key=f"{key}_btn", type="primary",
                        icon=":material/play_arrow:",
                        on_click=lambda: st.session_state.__setitem__(flag_run, True))
            return None
        known = [None if v is None else v[0] for v in found.values()]
        # a partial view costs a chart build and a browser redraw: worth it only for long sweeps
        _compute(specs, missing, costs, labels, device, key, est, store, slot,
                 partial if est > PARTIAL_AFTER_S and total > AUTO_RUN_WORK else None, known)
    frames, seconds = [], 0.0
    for i, s in enumerate(specs):
        df, sec = store.get((s, device)) or found[i]  # type: ignore[misc]
        frames.append(df)
        seconds += sec  # the time each sweep took when it was computed (now or earlier)
    return SweepResult(frames=tuple(frames), seconds=seconds, computed=len(missing))


def _compute(specs: Sequence[SweepSpec], missing: list[int], costs: SweepPlan, labels: Sequence[str],
             device: str, key: str, est: float, store: _Store, box: Any,
             partial: Callable[[list[pd.DataFrame | None]], None] | None = None,
             known: list[pd.DataFrame | None] | None = None) -> None:
    """Run the missing sweeps (``costs`` their plan) together, one progress bar."""
    work = costs.work
    total = max(1, sum(work))
    names = ", ".join(labels[i] for i in missing)
    what = f"{len(missing)} curves ({names})" if len(missing) > 1 else names
    quiet = est <= QUIET_S  # a short sweep: no bar (its redraws every 0.1 s cost the browser more)
    bar = None if quiet else box.progress(0.0, text=f"Sweeping… about {_fmt_s(est)}")
    stop_slot = box.empty()
    if not quiet:
        # the same key as the Run button: one widget that changes its label, so the browser swaps it
        # in place instead of keeping a stale Run button on screen for the whole sweep
        stop_slot.button("Stop", key=f"{key}_btn", icon=":material/stop:",
                         on_click=lambda: st.session_state.__setitem__(f"{key}__stopped", True))

    def progress(frac: float, msg: str) -> bool:
        if bar is not None:
            bar.progress(min(1.0, frac), text=f"{what}: {msg}")
        return True

    def on_partial(frames: list[pd.DataFrame | None]) -> None:
        if partial is None:
            return
        shown = list(known) if known is not None else [None] * len(specs)
        for i, f in zip(missing, frames, strict=True):
            shown[i] = f
        partial(shown)

    todo = [specs[i] for i in missing]
    try:
        # queue with other heavy work (ui.admission)
        with heavy(SWEEP_BYTES + draw_cache_bytes(), seconds=est, label="this sweep", where=box):
            t0 = time.perf_counter()
            frames = run_sweep_set(todo, device=device, progress=progress,
                                   partial=on_partial if partial is not None else None)
            sec = time.perf_counter() - t0
        for j, (i, df) in enumerate(zip(missing, frames, strict=True)):
            share = sec * work[j] / total  # curves on shared draws split the time by their work
            store.put((specs[i], device), (df, share))
        if len({(s.method, e) for s, e in zip(todo, costs.engines, strict=True)}) == 1:
            # the set as one: sharing makes it cheaper than its parts
            _learn(todo[0], costs.engines[0], device, total, sec, todo)
        else:
            for j, i in enumerate(missing):
                _learn(specs[i], costs.engines[j], device, work[j], sec * work[j] / total)
    finally:
        if bar is not None:
            bar.empty()
        stop_slot.empty()
