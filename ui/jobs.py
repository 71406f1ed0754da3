"""Background training jobs for the Training lab: one at a time per server, the rest queued.

A :class:`Job` is a list of :class:`~attncore.training.TrainConfig` (variants x learning
rates) on one corpus. :data:`QUEUE` (process-wide) runs one job at a time in a daemon thread
that calls :func:`attncore.training.train` with progress and cancel callbacks; every session
sees the same queue, so a second user's job waits and can show its position. Pages only read
snapshots (:meth:`Job.snapshot`), never the live lists. What a job may cost, and how long it will
take, is :mod:`ui.job_cost`.

Finished runs are kept as small JSON files (config + curves, no weights) in the cache folder
(:func:`cache_dir`: ``ATTNLAB_CACHE_DIR``, else ``$XDG_CACHE_HOME/attention-lab/runs``, else
``~/.cache/attention-lab/runs``). A folder that cannot be written (read-only, full) costs
nothing but the listing: the run stays in memory for this server's lifetime and the job
carries a plain note.

One browser session cannot crowd out the others (issue 32): it may have at most
:func:`jobs_per_session` jobs queued or running (``ATTNLAB_JOBS_PER_SESSION``, default 1); a job
stops at :func:`job_seconds` (``ATTNLAB_JOB_SECONDS``, default 900 s); a job whose session has
ended (its tab closed, and no reloaded page took the job back within :data:`ENDED_GRACE_S`
seconds) is cancelled. A finished job keeps its records, not its corpus text. :meth:`JobQueue.shutdown`
stops and joins the worker (at interpreter exit, and from ``serve.py``).
"""

from __future__ import annotations

import atexit
import contextlib
import json
import logging
import os
import re
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from attncore.errors import AttnInputError
from attncore.threads import single_threaded
from attncore.training import TrainConfig, TrainResult, train
from ui.admission import admit

__all__ = [
    "CACHE_DIR_ENV",
    "ENDED_GRACE_S",
    "JOB_ID_PATTERN",
    "JOB_SECONDS_ENV",
    "JOBS_PER_SESSION_ENV",
    "MAX_QUEUE",
    "MAX_RUNS_LISTED",
    "QUEUE",
    "Job",
    "JobQueue",
    "StoreError",
    "cache_dir",
    "job_seconds",
    "jobs_per_session",
    "session_alive",
    "session_id",
    "list_runs",
    "load_run",
    "run_label",
    "save_run",
]

log = logging.getLogger("attnlab")

CACHE_DIR_ENV = "ATTNLAB_CACHE_DIR"
MAX_QUEUE = 8  # jobs waiting or running, all sessions together
MAX_RUNS_LISTED = 200
MAX_RUN_FILE_BYTES = 2 * 1024**2
TRAINING_BYTES = 512 * 1024**2  # a small model, its optimiser state and a batch: its admission estimate
_ID = re.compile(r"^[A-Za-z0-9-]{1,64}$")
JOB_ID_PATTERN = r"[0-9a-f]{32}"  # a job's id (uuid4 hex): what a page keeps in its URL to find its job again
JOBS_PER_SESSION_ENV = "ATTNLAB_JOBS_PER_SESSION"
JOB_SECONDS_ENV = "ATTNLAB_JOB_SECONDS"
DEFAULT_JOBS_PER_SESSION = 1
DEFAULT_JOB_SECONDS = 900.0
ENDED_GRACE_S = 30.0  # a session gone this long (no reload took its job back) has ended
ALIVE_CHECK_S = 1.0  # how often a running job asks whether its session is still there


def _env_number(name: str, default: float, lo: float) -> float:
    try:
        v = float(os.environ.get(name, "").strip() or default)
    except ValueError:
        return default
    return max(lo, v) if v == v else default


def jobs_per_session() -> int:
    """Jobs one browser session may have queued or running (``ATTNLAB_JOBS_PER_SESSION``, default 1)."""
    return int(_env_number(JOBS_PER_SESSION_ENV, DEFAULT_JOBS_PER_SESSION, 1))


def job_seconds() -> float:
    """The time cap of one job, seconds (``ATTNLAB_JOB_SECONDS``, default 900): it stops there, keeping
    the runs it finished."""
    return _env_number(JOB_SECONDS_ENV, DEFAULT_JOB_SECONDS, 1.0)


_TOKEN = "_attnlab_session_token"


def session_id() -> str:
    """This browser session, as ``<runtime session id>:<token>`` ('' outside a script run: scripts and
    tests own no session). The token, kept in the session's state, tells apart sessions that share a
    runtime id (AppTest gives every app the same one)."""
    try:
        import streamlit as st
        from streamlit.runtime.scriptrunner import get_script_run_ctx
    except ImportError:  # pragma: no cover - streamlit is a dependency of ui
        return ""
    ctx = get_script_run_ctx(suppress_warning=True)
    if ctx is None:
        return ""
    token = st.session_state.setdefault(_TOKEN, uuid.uuid4().hex)
    return f"{ctx.session_id}:{token}"


def session_alive(owner: str) -> bool:
    """Whether the server's runtime still has the session of ``owner`` (a :func:`session_id`) connected
    (True without a runtime, as in AppTest and scripts, where nothing can tell)."""
    sid = owner.rpartition(":")[0]
    if not sid:
        return True
    try:
        from streamlit.runtime import Runtime
    except ImportError:  # pragma: no cover
        return True
    if not Runtime.exists():
        return True
    return Runtime.instance().is_active_session(sid)


# ---------------------------------------------------------------------------- the cache folder


class StoreError(Exception):
    """The cache folder could not be written; the message is plain words for the page."""


def cache_dir() -> Path:
    """Where finished runs are kept (see the module docstring)."""
    env = os.environ.get(CACHE_DIR_ENV, "").strip()
    if env:
        return Path(env).expanduser()
    base = os.environ.get("XDG_CACHE_HOME", "").strip() or str(Path.home() / ".cache")
    return Path(base).expanduser() / "attention-lab" / "runs"


def save_run(record: dict[str, Any], directory: Path | None = None) -> Path:
    """Write one run record as ``<id>.json`` (atomically); StoreError when the folder refuses it."""
    d = directory or cache_dir()
    path = d / f"{record['id']}.json"
    tmp = d / f".{record['id']}.tmp"
    try:
        d.mkdir(parents=True, exist_ok=True)
        tmp.write_text(json.dumps(record, separators=(",", ":")), encoding="utf-8")
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        why = exc.strerror or type(exc).__name__
        raise StoreError(f"This run could not be kept in the server's run folder ({why}); it is shown here "
                         f"and listed until the server restarts. Set {CACHE_DIR_ENV} to a writable "
                         "folder to keep runs.") from exc
    return path


def _read(path: Path) -> dict[str, Any] | None:
    try:
        if path.stat().st_size > MAX_RUN_FILE_BYTES:
            return None
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or not _ID.match(str(data.get("id", ""))) or "config" not in data:
        return None
    return data


def list_runs(directory: Path | None = None) -> list[dict[str, Any]]:
    """Kept runs, newest first (at most :data:`MAX_RUNS_LISTED`), plus this server's unsaved ones."""
    d = directory or cache_dir()
    found: dict[str, dict[str, Any]] = {}
    try:
        paths = sorted(d.glob("*.json"), key=lambda p: p.name, reverse=True)[: 4 * MAX_RUNS_LISTED]
    except OSError:
        paths = []
    for p in paths:
        rec = _read(p)
        if rec is not None:
            found[rec["id"]] = rec
    for rec in QUEUE.unsaved():
        found.setdefault(rec["id"], rec)
    runs = sorted(found.values(), key=lambda r: str(r.get("created_utc", "")), reverse=True)
    return runs[:MAX_RUNS_LISTED]


def load_run(run_id: str, directory: Path | None = None) -> dict[str, Any] | None:
    """One kept run by id (None when it is not there)."""
    if not _ID.match(run_id):
        return None
    for rec in QUEUE.unsaved():
        if rec["id"] == run_id:
            return rec
    return _read((directory or cache_dir()) / f"{run_id}.json")


def run_label(config: TrainConfig | dict[str, Any]) -> str:
    """'standard · lr 0.003' for a config."""
    c = config.to_dict() if isinstance(config, TrainConfig) else config
    return f"{c['variant']} · lr {c['lr']:g}"


# ---------------------------------------------------------------------------- jobs


@dataclass
class Job:
    """One Run press: its configs run one after the other on ``text``.

    ``state``: ``queued``, ``running``, ``done``, ``cancelled`` (Stop pressed: what was trained
    is kept) or ``failed`` (``error`` says why, in plain words).
    """

    id: str
    configs: list[TrainConfig]
    text: str
    corpus: str
    device: str
    state: str = "queued"
    error: str | None = None
    notes: list[str] = field(default_factory=list)
    records: list[dict[str, Any]] = field(default_factory=list)
    current: int = 0
    step: int = 0
    total: int = 0
    batch_loss: list[float] = field(default_factory=list)
    eval_steps: list[int] = field(default_factory=list)
    eval_loss: list[float] = field(default_factory=list)
    run_started: float = 0.0
    cancel_requested: bool = False
    # Another kind of training (the Bigram-Backcopy task): the function that trains one config instead of
    # attncore's ``train`` (same arguments; its progress may pass a fifth one, the evaluation point's
    # probe), and how to name a run; probes: the running config's probes so far.
    runner: Callable[..., Any] | None = None
    namer: Callable[[TrainConfig], str] | None = None
    probes: list[dict[str, Any]] = field(default_factory=list)
    submitted: float = field(default_factory=time.time)
    # Who asked (a Streamlit session id, '' for none), whether the corpus was an upload (its name is then
    # shown to that session only), the corpus's length (the text itself is dropped when the job ends),
    # why it stopped when it was not the Stop button, and the clocks of the time cap and of the owner's
    # absence.
    owner: str = ""
    upload: bool = False
    chars: int = 0
    stop_reason: str | None = None
    started: float | None = None
    gone_since: float | None = None
    checked: float = 0.0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def active(self) -> bool:
        return self.state in ("queued", "running")

    def snapshot(self) -> dict[str, Any]:
        """A consistent copy of the state for drawing (the worker keeps writing the job)."""
        with self._lock:
            elapsed = time.perf_counter() - self.run_started if self.state == "running" else 0.0
            cfg = self.configs[min(self.current, len(self.configs) - 1)]
            return {
                "id": self.id, "state": self.state, "error": self.error, "notes": list(self.notes),
                "records": list(self.records), "current": self.current, "n_runs": len(self.configs),
                "label": (self.namer or run_label)(cfg), "step": self.step, "total": self.total,
                "probes": list(self.probes),
                "batch_loss": list(self.batch_loss), "eval_steps": list(self.eval_steps),
                "eval_loss": list(self.eval_loss), "corpus": self.corpus, "stop_reason": self.stop_reason,
                "tokens_per_s": self.step * cfg.batch * cfg.context / elapsed if elapsed > 0 else 0.0,
                "configs": [c.to_dict() for c in self.configs],
            }


def _record(job: Job, result: TrainResult, index: int) -> dict[str, Any]:
    curves = result.curves()
    now = datetime.now(UTC)
    return {
        "id": f"{now:%Y%m%d-%H%M%S}-{job.id[:6]}-{index}",
        "created_utc": now.isoformat(timespec="seconds"),
        "job": job.id,
        "label": run_label(result.config),
        "corpus": job.corpus,
        "corpus_kind": "upload" if job.upload else "server",
        "corpus_chars": job.chars or len(job.text),
        **curves,
    }


class JobQueue:
    """One worker thread, first come first served; ``train_fn`` is attncore's ``train``."""

    def __init__(self, train_fn: Callable[..., TrainResult] = train, store: Path | None = None,
                 alive: Callable[[str], bool] = session_alive) -> None:
        """``alive(session_id)``: whether a job's session is still there (the runtime's session manager)."""
        self._train = train_fn
        self._store = store
        self._alive = alive
        self._stopping = False
        self._cond = threading.Condition()
        self._waiting: list[Job] = []
        self._running: Job | None = None
        self._jobs: dict[str, Job] = {}
        self._unsaved: list[dict[str, Any]] = []
        self._thread: threading.Thread | None = None

    # -- asking
    def submit(self, configs: list[TrainConfig], text: str, *, corpus: str, device: str,
               runner: Callable[..., Any] | None = None,
               namer: Callable[[TrainConfig], str] | None = None, owner: str | None = None,
               upload: bool = False) -> Job:
        """Queue a job (``runner``/``namer``: see :class:`Job`; ``owner``: the session, by default the one
        running this script; ``upload``: the corpus was uploaded); AttnInputError when nothing is asked,
        the session already has :func:`jobs_per_session` active jobs, or the queue is full."""
        if not configs:
            raise AttnInputError("pick at least one variant and one learning rate.")
        owner = session_id() if owner is None else owner
        with self._cond:
            if self._stopping:
                raise AttnInputError("the server is shutting down; no new training job starts.")
            self._drop_ended()
            limit = jobs_per_session()
            if owner and sum(j.owner == owner and j.active for j in self._jobs.values()) >= limit:
                raise AttnInputError(f"This page already has {limit} training job{'s' if limit != 1 else ''} "
                                     "queued or running (the limit per session on this server); stop it or "
                                     "wait for it to finish, then run again.")
            if len(self._waiting) + (self._running is not None) >= MAX_QUEUE:
                raise AttnInputError(f"{MAX_QUEUE} training jobs are already queued on this server; "
                                     "try again when one has finished.")
            job = Job(uuid.uuid4().hex, list(configs), text, corpus, device, runner=runner, namer=namer,
                      owner=owner, upload=upload, chars=len(text))
            self._jobs[job.id] = job
            self._waiting.append(job)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._work, name="attnlab-training", daemon=True)
                self._thread.start()
            self._cond.notify_all()
        return job

    def adopt(self, job: Job, owner: str) -> None:
        """A reloaded page (a new session) takes its job back: the job is ``owner``'s from now on."""
        with self._cond:
            job.owner = owner
            job.gone_since = None

    def owned(self, owner: str) -> list[Job]:
        """The jobs of session ``owner`` still known to the queue (active and finished), oldest first."""
        with self._cond:
            return [j for j in self._jobs.values() if owner and j.owner == owner]

    def _ended(self, job: Job, now: float) -> bool:
        """Whether ``job``'s session has been gone for :data:`ENDED_GRACE_S` (caller holds the lock or is the
        worker); a session seen again resets the clock."""
        if not job.owner or self._alive(job.owner):
            job.gone_since = None
            return False
        if job.gone_since is None:
            job.gone_since = now
        return now - job.gone_since >= ENDED_GRACE_S

    def _drop_ended(self) -> None:
        """Cancel the queued jobs whose session has ended (caller holds the lock)."""
        now = time.monotonic()
        for job in [j for j in self._waiting if self._ended(j, now)]:
            self._waiting.remove(job)
            self._finish(job, "cancelled", "the page that started it was closed")

    @staticmethod
    def _finish(job: Job, state: str, reason: str | None = None) -> None:
        """End ``job``: its state, why (when it was not the Stop button), and its corpus text dropped."""
        with job._lock:
            job.state = state
            if reason and job.stop_reason is None:
                job.stop_reason = reason
            job.text = ""  # the runs keep what the result view needs; the corpus may be megabytes

    def _should_stop(self, job: Job) -> bool:
        """The cancel callback of a running job: Stop, the time cap, or its session gone."""
        if job.cancel_requested:
            return True
        now = time.monotonic()
        if job.started is not None and now - job.started > job_seconds():
            job.stop_reason = f"it reached the time limit of {job_seconds():.0f} s per job on this server"
            job.cancel_requested = True
            return True
        if now - job.checked >= ALIVE_CHECK_S:
            job.checked = now
            if self._ended(job, now):
                job.stop_reason = "the page that started it was closed"
                job.cancel_requested = True
                return True
        return False

    def shutdown(self, timeout: float = 10.0) -> bool:
        """Stop the worker (the server is stopping): queued jobs are cancelled, the running one stops before
        its next step, and the worker thread is joined; True when it has ended within ``timeout`` s."""
        with self._cond:
            self._stopping = True
            for job in self._waiting:
                self._finish(job, "cancelled", "the server stopped")
            self._waiting.clear()
            if self._running is not None:
                self._running.stop_reason = self._running.stop_reason or "the server stopped"
                self._running.cancel_requested = True
            self._cond.notify_all()
            thread = self._thread
        if thread is None or thread is threading.current_thread():
            return True
        thread.join(timeout)
        return not thread.is_alive()

    def get(self, job_id: str | None) -> Job | None:
        with self._cond:
            return self._jobs.get(job_id or "")

    def position(self, job: Job) -> int | None:
        """How many jobs are ahead of ``job`` (the running one included); 0 = running; None = finished."""
        with self._cond:
            if job is self._running:
                return 0
            if job in self._waiting:
                return self._waiting.index(job) + (self._running is not None)
            return None

    def running(self) -> Job | None:
        with self._cond:
            return self._running

    def waiting(self) -> int:
        with self._cond:
            return len(self._waiting)

    def cancel(self, job: Job) -> None:
        """Stop a job: a queued one never starts; a running one stops before its next step."""
        with self._cond:
            if job in self._waiting:
                self._waiting.remove(job)
                self._finish(job, "cancelled")
            job.cancel_requested = True

    def unsaved(self) -> list[dict[str, Any]]:
        """Runs the cache folder refused (kept in memory for this server's lifetime)."""
        with self._cond:
            return list(self._unsaved)

    def wait(self, job: Job, timeout: float = 60.0) -> bool:
        """Block until ``job`` has finished (tests and scripts); True if it did."""
        deadline = time.monotonic() + timeout
        while job.active and time.monotonic() < deadline:
            time.sleep(0.02)
        return not job.active

    # -- the worker
    def _work(self) -> None:
        while True:
            with self._cond:
                while not self._waiting and not self._stopping:
                    self._cond.wait()
                if self._stopping:
                    return
                self._drop_ended()
                if not self._waiting:
                    continue
                job = self._waiting.pop(0)
                self._running = job
                job.state = "running"
                job.started = time.monotonic()
            state, error = "done", None
            try:
                self._run(job)
                state = "cancelled" if job.cancel_requested else "done"
            except AttnInputError as exc:
                state, error = "failed", str(exc)
            except MemoryError:
                state = "failed"
                error = "That run needs more memory than this machine has; pick a smaller size."
            except Exception as exc:  # the worker must survive anything
                log.exception("training job %s failed", job.id)
                state = "failed"
                error = f"The run stopped with an unexpected error ({type(exc).__name__}: {exc})."
            finally:
                job.error = error
                self._finish(job, state)
                with self._cond:
                    self._running = None
                    # Finished jobs stay readable by id; keep the newest 64.
                    done = [j for j in self._jobs.values() if not j.active and j is not job]
                    for old in done[: max(0, len(self._jobs) - 64)]:
                        self._jobs.pop(old.id, None)

    def _run(self, job: Job) -> None:
        # One CPU thread for training: on a small machine torch's spinning worker threads would
        # otherwise fight the page threads (and each other) for the cores; restored afterwards.
        # attncore.threads counts its users, so a sweep overlapping this run cannot leak a 1.
        # Training takes a place in the server's admission queue (ui.admission) like sweeps do.
        with admit(TRAINING_BYTES, seconds=60.0, label="a training run"):
            if not job.device.startswith("cpu"):
                self._run_configs(job)
                return
            with single_threaded():
                self._run_configs(job)

    def _run_configs(self, job: Job) -> None:
        for i, cfg in enumerate(job.configs):
            if job.cancel_requested:
                break
            with job._lock:
                job.current, job.step, job.total = i, 0, cfg.steps
                job.batch_loss, job.eval_steps, job.eval_loss, job.probes = [], [], [], []
                job.run_started = time.perf_counter()

            def progress(step: int, total: int, loss: float | None, val: float | None,
                         probe: dict[str, Any] | None = None) -> None:
                with job._lock:
                    job.step, job.total = step, total
                    if loss is not None:  # None: the Bigram-Backcopy runner's step-0 probe
                        job.batch_loss.append(loss)
                    if val is not None:
                        job.eval_steps.append(step)
                        job.eval_loss.append(val)
                    if probe is not None:
                        job.probes.append({"step": step, **probe})

            result = (job.runner or self._train)(cfg, job.text, device=job.device, progress=progress,
                                                 cancel=lambda: self._should_stop(job))
            rec = _record(job, result, i)
            del result  # the model: only curves are kept
            try:
                save_run(rec, self._store)
            except StoreError as exc:
                with self._cond:
                    self._unsaved.append(rec)
                    del self._unsaved[:-50]
                with job._lock:
                    if str(exc) not in job.notes:
                        job.notes.append(str(exc))
            with job._lock:
                job.records.append(rec)


QUEUE = JobQueue()
atexit.register(QUEUE.shutdown)  # join the worker before the interpreter tears torch down (issue 32 F9)
