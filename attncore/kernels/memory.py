"""Peak memory of each call. CUDA: ``torch.cuda.max_memory_allocated`` in process (done by the
probe). CPU: the peak resident-set increase of one call, measured in a fresh process forked
from a long-lived helper that has imported torch and attncore and ran nothing
(``python -m attncore.kernels --serve``; :func:`warm_memory_measurement` starts it), with
Linux's peak mark reset before each call and one unmeasured call of the same path at the same
size first (thread pools, per-thread buffers, JIT'd kernels: paid once, not counted).
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from attncore.kernels.calls import clean_message, run_once
from attncore.kernels.cost import full_flops
from attncore.kernels.results import SizeResult
from attncore.kernels.spec import KernelInputs, KernelSpec, make_inputs

__all__ = ["measure_memory", "proc_status_kib", "reset_peak_rss", "serve", "warm_memory_measurement"]

def proc_status_kib(field_name: str) -> int:
    """A field of this process's /proc/self/status in KiB (``"VmRSS"``: resident now, ``"VmHWM"``:
    the peak since start or since :func:`reset_peak_rss`). Linux only: OSError elsewhere."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field_name + ":"):
                return int(line.split()[1])
    raise OSError(f"{field_name} not in /proc/self/status")


def reset_peak_rss() -> bool:
    """Reset the kernel's peak-RSS mark (VmHWM) to the current RSS; False where Linux refuses."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _memory_jobs(payload: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """In a fresh process: the peak RSS increase of each (L, S, name) job, in order, as it is measured.

    Where the peak mark cannot be reset only the first job is measured (the parent starts a
    new process for the rest).
    """
    torch.set_num_threads(int(payload["threads"]))
    spec = KernelSpec(**payload["spec"])
    libc = ctypes.CDLL(None) if sys.platform.startswith("linux") else None
    device = torch.device("cpu")
    measured = False
    inputs: dict[tuple[int, int], KernelInputs] = {}
    for L, S, name in payload["jobs"]:
        if (L, S) not in inputs:
            inputs.clear()
            gc.collect()
            inputs[(L, S)] = make_inputs(spec, L, S, device)
        x = inputs[(L, S)]
        try:  # one unmeasured call first: thread pools, per-thread buffers and kernels for this shape
            run_once(name, x, spec, device)
        except Exception as exc:
            yield {"job": [L, S, name], "error": clean_message(str(exc))[:200]}
            measured = True
            continue
        gc.collect()
        if libc is not None:
            libc.malloc_trim(0)
        reset = reset_peak_rss()
        if not reset and measured:
            break
        base = proc_status_kib("VmRSS")
        if not reset:
            base = max(base, proc_status_kib("VmHWM"))
        try:
            out = run_once(name, x, spec, device)
            peak = max(0, proc_status_kib("VmHWM") - base) * 1024
            del out
            yield {"job": [L, S, name], "bytes": peak}
        except Exception as exc:
            yield {"job": [L, S, name], "error": clean_message(str(exc))[:200]}
        measured = True
        if not reset:
            break


# The measuring processes are forked from a long-lived helper process that imported torch and
# this module once (about 2 s) and never ran an operation: each measurement still starts in a
# fresh process (a fork of it), without paying for the imports again.
_HELPER_LOCK = threading.Lock()
_helper: subprocess.Popen[bytes] | None = None


def _helper_env() -> dict[str, str]:
    root = str(Path(__file__).resolve().parents[2])
    return {**os.environ, "PYTHONPATH": root + os.pathsep + os.environ.get("PYTHONPATH", ""),
            "MALLOC_MMAP_THRESHOLD_": "65536", "ATTNCORE_DEVICE": "cpu"}


def _start_helper() -> subprocess.Popen[bytes]:
    """The measuring helper (``python -m attncore.kernels --serve``), started if not running."""
    global _helper
    if _helper is None or _helper.poll() is not None:
        root = str(Path(__file__).resolve().parents[2])
        _helper = subprocess.Popen([sys.executable, "-m", "attncore.kernels", "--serve"], cwd=root,
                                   env=_helper_env(), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                   stderr=subprocess.DEVNULL)
    return _helper


def warm_memory_measurement() -> None:
    """Start the measuring helper now (a server does it at start-up, off the first visitor's clock)."""
    with _HELPER_LOCK:
        _start_helper()


def _stop_helper() -> None:
    global _helper
    if _helper is not None:
        with contextlib.suppress(OSError):
            _helper.kill()
        with contextlib.suppress(Exception):
            _helper.wait(timeout=5)
    _helper = None


def serve() -> None:
    """``python -m attncore.kernels --serve``: one JSON payload per stdin line; for each, fork a
    process that measures its jobs (one JSON line per job on stdout), then say ``{"exit": code}``.

    Before the first payload it says ``{"ready": true}``. Nothing but imports happens before a fork
    (no torch thread pool exists yet), so forking is safe.
    """
    out = sys.stdout
    out.write(json.dumps({"ready": True}) + "\n")
    out.flush()
    for line in sys.stdin:
        if not line.strip():
            continue
        payload = json.loads(line)
        pid = os.fork()
        if pid == 0:  # the measuring process
            code = 0
            try:
                gc.freeze()  # the inherited heap (torch, this module) is not garbage: cheap gc.collect()
                for item in _memory_jobs(payload):
                    out.write(json.dumps(item) + "\n")
                    out.flush()
            except BaseException:  # noqa: BLE001 - reported as its exit code
                code = 1
            finally:
                os._exit(code)
        out.write(json.dumps({"pid": pid}) + "\n")
        out.flush()
        _, status = os.waitpid(pid, 0)
        out.write(json.dumps({"exit": os.waitstatus_to_exitcode(status)}) + "\n")
        out.flush()


def _read_lines(proc: subprocess.Popen[bytes], deadline: float, buf: bytearray) -> Iterator[dict[str, Any]]:
    """JSON lines from the helper's stdout until the deadline (select: never blocks past it)."""
    import select

    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    while True:
        while b"\n" in buf:
            line, _, rest = bytes(buf).partition(b"\n")
            buf[:] = rest
            if line.strip():
                yield json.loads(line)
        left = deadline - time.monotonic()
        if left <= 0:
            return
        ready, _, _ = select.select([fd], [], [], min(left, 0.25))
        if ready:
            chunk = os.read(fd, 1 << 16)
            if not chunk:  # the helper is gone
                return
            buf += chunk


def _measure_in_child(payload: dict[str, Any], deadline: float) -> tuple[list[dict[str, Any]], str | None]:
    """One measuring process forked by the helper: the results it gave before it ended or the
    deadline, and why it stopped early (None: it finished)."""
    with _HELPER_LOCK:
        proc = _start_helper()
        assert proc.stdin is not None
        buf = bytearray()
        done: list[dict[str, Any]] = []
        pid: int | None = None
        ready = False
        try:
            proc.stdin.write((json.dumps(payload) + "\n").encode())
            proc.stdin.flush()
        except OSError:
            _stop_helper()
            return [], "could not be started"
        for msg in _read_lines(proc, deadline, buf):
            if "ready" in msg:
                ready = True
            elif "pid" in msg:
                pid = int(msg["pid"])
            elif "exit" in msg:
                code = int(msg["exit"])
                return done, None if code == 0 else f"failed (exit code {code})"
            else:
                done.append(msg)
        # the deadline passed (or the helper died): stop the measuring process, keep the helper if it answers
        if pid is not None:
            with contextlib.suppress(OSError):
                os.kill(pid, 9)
            for msg in _read_lines(proc, time.monotonic() + 5, buf):
                if "exit" in msg:
                    break
                if "pid" not in msg and "ready" not in msg:
                    done.append(msg)
            else:
                _stop_helper()
        else:
            _stop_helper()  # still importing, or gone: the next measurement starts a new one
        if time.monotonic() < deadline:
            return done, "failed (the measuring helper stopped)"
        return done, "passed its time limit" if ready or pid is not None else \
            "passed its time limit before it was ready"


def _cpu_memory(
    spec: KernelSpec, jobs: list[tuple[int, int, str]], timeout: float
) -> tuple[dict[tuple[int, int, str], float], str]:
    """Peak RSS increase per job, measured in fresh (forked) processes within ``timeout`` seconds."""
    found: dict[tuple[int, int, str], float] = {}
    problems: list[str] = []
    deadline = time.monotonic() + timeout
    todo = list(jobs)
    spec_fields = {k: getattr(spec, k) for k in spec.__dataclass_fields__}
    while todo:
        left = deadline - time.monotonic()
        if left <= 0.05:
            problems.append(f"time limit ({timeout:.3g} s) reached before {len(todo)} measurement(s)")
            break
        payload = {"spec": spec_fields, "jobs": todo, "threads": torch.get_num_threads()}
        try:
            done, why = _measure_in_child(payload, deadline)
        except OSError as exc:  # could not start a process at all
            done, why = [], f"could not start ({clean_message(str(exc))[:120]})"
        stop = None if why is None else f"the measuring process {why}"
        if why == "passed its time limit":
            stop = f"the measuring process passed its time limit ({timeout:.3g} s)"
        if not done and stop is None:
            stop = "the measuring process returned nothing"
        for item in done:
            L, S, name = item["job"]
            if "bytes" in item:
                found[(int(L), int(S), str(name))] = float(item["bytes"])
            else:
                problems.append(f"{name} at {L}: {item['error']}")
        todo = todo[len(done):]
        if stop is not None:
            problems.append(stop + (f"; {len(todo)} measurement(s) left" if todo else ""))
            break
    note = ("peak resident-set increase over the call, measured in a fresh Python process "
            "(forked from a helper that imported torch and attncore and ran nothing; Linux's peak mark "
            "reset before each call, after one unmeasured call of the same path at the same size; inputs and "
            "mask allocated before it)")
    if problems:
        note += "; not measured: " + "; ".join(problems)
    return found, note


def _with_memory(sizes: list[SizeResult], spec: KernelSpec, device: torch.device,
                 timeout: float | None = None) -> tuple[list[SizeResult], str]:
    """``sizes`` with ``peak_bytes`` filled in, and the note saying how memory was measured."""
    if device.type == "cuda":
        return sizes, ("torch.cuda.max_memory_allocated during one call, minus what was allocated "
                       "before it (inputs and mask)")
    if device.type != "cpu":
        return sizes, "not measured on this device"
    jobs = [(s.L, s.S, r.name) for s in sizes for r in s.rows if r.status == "ran"]
    if not jobs:
        return sizes, "nothing ran"
    if timeout is None:
        flops = sum(2 * full_flops(spec, L, S) for L, S, _ in jobs)  # a warm-up and the measured call
        timeout = 30.0 + flops / 5e9  # ~1/4 of the development CPU's math-path rate: room for load
    found, note = _cpu_memory(spec, jobs, timeout)
    out = [replace(s, rows=tuple(replace(r, peak_bytes=found.get((s.L, s.S, r.name), r.peak_bytes))
                                 for r in s.rows)) for s in sizes]
    return out, note


def measure_memory(sizes: Sequence[SizeResult], spec: KernelSpec,
                   device: torch.device | str) -> tuple[list[SizeResult], str]:
    """Fill ``peak_bytes`` of every row that ran; returns the sizes and how memory was measured.

    CUDA: already measured in process by :func:`probe`. CPU: one fresh (forked) process measures
    every (size, backend) in turn (bounded in time; what it could not measure stays None).
    """
    return _with_memory(list(sizes), spec, torch.device(device))

