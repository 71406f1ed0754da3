"""Issue 32: a classroom server that one link cannot take down.

Unit tests of the causes the independent fuzz found: multi-value URL parameters (repeats, length),
the size of a job checked before its configs are built, URL notices of bounded length, the job
queue's per-session limit, ended sessions, time cap and memory, CSV cells that a spreadsheet would
run as formulas, and the worker's shutdown. Page-level tests (AppTest) live beside each page's own.
"""

from __future__ import annotations

import csv
import gc
import io
import threading
import time
import tracemalloc
import types
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from attncore.errors import AttnInputError
from attncore.training import TrainConfig
from tests.chart_data import figures, run_app
from ui import admission, cached_results, job_cost, job_panel, jobs, widgets
from ui.state import MAX_FREE_ITEMS, QUOTE_CHARS, Param, quote
from ui.widgets import FORMULA_START, safe_csv_frame

VARIANTS = ("standard", "fully_scaled", "relu")


# ---------------------------------------------------------------------------- F1, F2: multi-value params


def test_repeated_entries_are_dropped_with_a_notice() -> None:
    p = Param("tr_var", ("standard",), options=VARIANTS, multi=True)
    v, note = p.parse(",".join(["relu", "standard"] * 3000))
    assert v == ("relu", "standard")
    assert note is not None and note.startswith("repeated entries in tr_var were dropped")
    # no repeat, no notice; the order is the one given
    assert p.parse("relu,standard") == (("relu", "standard"), None)


def test_unknown_and_repeated_entries_are_both_said() -> None:
    p = Param("tr_var", ("standard",), options=VARIANTS, multi=True)
    v, note = p.parse("relu,zz,relu")
    assert v == ("relu",)
    assert "repeated entries in tr_var" in note and "unknown entries in tr_var were dropped" in note


def test_a_free_list_is_capped() -> None:
    p = Param("tr_cmp", (), multi=True)
    v, note = p.parse(",".join(f"id{i}" for i in range(5000)))
    assert v == tuple(f"id{i}" for i in range(MAX_FREE_ITEMS))
    assert note == f"tr_cmp takes at most {MAX_FREE_ITEMS} entries; the first {MAX_FREE_ITEMS} are used."
    q = Param("xs", (), multi=True, max_items=3)
    assert q.parse("a,b,c,d")[0] == ("a", "b", "c")
    assert q.parse("a,b,c") == (("a", "b", "c"), None)


def test_the_list_of_options_is_its_own_cap() -> None:
    p = Param("ev_v", ("a",), options=("a", "b", "c"), multi=True)
    assert p.limit == 3
    # at most len(options) distinct known entries exist: a long list of them is cut by dedup
    assert p.parse("c,b,a,a,b,c" * 100)[0] == ("c", "b", "a")


# ---------------------------------------------------------------------------- F10: notices quote briefly


@pytest.mark.parametrize("param", [
    Param("dtype", "float32", options=("float32", "float16")),
    Param("L", 16, lo=1, hi=1024),
    Param("tau", 1.0, lo=0.1, hi=10.0),
    Param("flag", False),
    Param("tr_var", ("standard",), options=VARIANTS, multi=True),
])
def test_a_notice_quotes_at_most_forty_characters(param: Param) -> None:
    raw = "A" * 60_000 if param.kind is not int else "9" * 300
    _, note = param.parse(raw)
    assert note is not None and len(note) < 200, len(note or "")
    if param.options is not None and not param.multi or param.kind is bool:
        assert "'" + "A" * (QUOTE_CHARS - 1) + "…" in note


def test_quote() -> None:
    assert quote("abc") == "'abc'"
    assert quote("x" * 100) == "'" + "x" * (QUOTE_CHARS - 1) + "…"
    assert quote(10**80) == str(10**80)[:QUOTE_CHARS] + "…"
    assert quote(3) == "3"


# ---------------------------------------------------------------------------- F1: the product's size first


class _Counting:
    """Stands in for TrainConfig: counts what is built and fails past ``most``."""

    def __init__(self, most: int) -> None:
        self.built, self.most = 0, most

    def __call__(self, **kwargs: object) -> dict[str, object]:
        self.built += 1
        assert self.built <= self.most, "make_configs built more configs than a Run may train"
        return kwargs


def test_make_configs_checks_the_size_before_building(monkeypatch: pytest.MonkeyPatch) -> None:
    counter = _Counting(most=1000)
    monkeypatch.setattr(job_cost, "TrainConfig", counter)
    variants = [f"v{i}" for i in range(3000)]
    rates = [1.0 + i for i in range(1000)]
    with pytest.raises(AttnInputError, match=r"3,000,000 runs and .* one Run may train at most 1,000,000"):
        job_cost.make_configs(variants, rates, "tiny", 10, 0)
    assert counter.built == 0


def test_make_configs_builds_each_distinct_pair_once(monkeypatch: pytest.MonkeyPatch) -> None:
    counter = _Counting(most=1000)
    monkeypatch.setattr(job_cost, "TrainConfig", counter)
    configs = job_cost.make_configs(["relu", "standard"] * 1500, [1.0, 0.003] * 500, "tiny", 10, 0)
    assert [(c["variant"], c["lr"]) for c in configs] == [("relu", 1.0), ("relu", 0.003), ("standard", 1.0),
                                                          ("standard", 0.003)]
    assert counter.built == 4


# ---------------------------------------------------------------------------- F1: memory one URL can make


def _peak_mib(script: str, **query: str) -> tuple[float, Any]:
    """Peak Python memory (tracemalloc, MiB) while ``script`` runs once in AppTest with ``query``."""
    gc.collect()
    tracemalloc.start()
    try:
        at = run_app(script, timeout=300, **query)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return peak / 2**20, at


HOSTILE_MIB = 8.0  # what a hostile URL may add to the plain one's peak before admission


def test_one_url_cannot_make_the_training_lab_allocate(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 32's F1 URL (scaled to 600 x 200 entries: the old code built their 120,000 configs on every
    run, measured here as a peak of 25.8 MiB against 2.8 MiB for the plain URL; the issue's 3,000 x 1,000
    took 650 MB) adds less than :data:`HOSTILE_MIB` to the page's peak Python memory: the repeats are
    dropped in the URL parser and the job's size is checked before anything is built."""
    monkeypatch.setenv("ATTNLAB_CACHE_DIR", str(tmp_path / "runs"))
    page = "pages/6_Training_lab.py"
    run_app(page, timeout=300, tr_var="relu", tr_lr="1")  # warm the caches (shipped results, corpus)
    plain, _ = _peak_mib(page, tr_var="relu", tr_lr="1")
    hostile, at = _peak_mib(page, tr_var=",".join(["relu"] * 600), tr_lr=",".join(["1"] * 200))
    print(f"peak Python memory: plain URL {plain:.1f} MiB, hostile URL {hostile:.1f} MiB")
    assert hostile - plain < HOSTILE_MIB, (plain, hostile)
    assert not at.exception
    assert at.query_params["tr_var"] == "relu" and at.query_params["tr_lr"] == "1"


# ---------------------------------------------------------------------------- F5: CSV cells are never formulas


def test_csv_cells_that_start_a_formula_are_text() -> None:
    df = pd.DataFrame({"corpus": ['=HYPERLINK("http://x","y").txt', "+1", "-x", "@SUM(A1)", "\tx", "\rx", "a=b"],
                       "loss": [-1.5, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0]})
    out = safe_csv_frame(df)
    assert list(out["corpus"]) == ['\'=HYPERLINK("http://x","y").txt', "'+1", "'-x", "'@SUM(A1)", "'\tx", "'\rx",
                                   "a=b"]
    assert list(out["loss"]) == [-1.5, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0]  # numbers stay numbers
    assert list(df["corpus"])[0].startswith("=")  # the page's own frame is not changed
    rows = list(csv.reader(io.StringIO(out.to_csv(index=False), newline="")))
    assert all(not cell.startswith(FORMULA_START) for row in rows[1:] for cell in row[:1])


def test_csv_download_writes_the_safe_frame(monkeypatch: pytest.MonkeyPatch) -> None:
    """The one CSV helper every page uses (checked below) hands the download the neutralised bytes."""
    got: dict[str, Any] = {}

    class Where:
        def download_button(self, label: str, *, data: Any, **kw: Any) -> None:
            got["data"] = data() if callable(data) else data

    df = pd.DataFrame({"corpus": ["=1+1"], "n": [1]})
    widgets.csv_download(df, "x.csv", where=Where())
    assert got["data"].decode() == "corpus,n\n'=1+1,1\n"
    widgets.csv_download(lambda: df, "x.csv", where=Where())
    assert got["data"].decode() == "corpus,n\n'=1+1,1\n"


def test_every_csv_goes_through_csv_download() -> None:
    root = Path(__file__).resolve().parents[1]
    for path in [*root.glob("pages/*.py"), *root.glob("ui/**/*.py"), root / "app.py"]:
        if path.name == "widgets.py" and path.parent.name == "ui":
            continue
        src = path.read_text(encoding="utf-8")
        assert "download_button(" not in src and ".to_csv(" not in src, path


# ---------------------------------------------------------------------------- F3, F4, F9: the job queue


class _Result:
    def __init__(self, cfg: TrainConfig) -> None:
        self.config = cfg

    def curves(self) -> dict[str, Any]:
        return {"config": self.config.to_dict(), "batch_loss": [1.0], "cancelled": False}


def _until_cancelled(cfg: TrainConfig, text: str, *, device: str, progress: Any, cancel: Any) -> _Result:
    """Stands in for train(): one 'step' every 10 ms until the queue says stop."""
    step = 0
    while not cancel():
        step += 1
        progress(step, cfg.steps, 1.0, None)
        time.sleep(0.01)
    return _Result(cfg)


def _quick(cfg: TrainConfig, text: str, *, device: str, progress: Any, cancel: Any) -> _Result:
    progress(1, cfg.steps, 1.0, 1.0)
    return _Result(cfg)


CFG = TrainConfig(steps=10, warmup=0, eval_every=5, **job_cost.SIZES["tiny"])
TEXT = "abc" * 10_000


def _running(q: jobs.JobQueue, job: jobs.Job) -> None:
    deadline = time.monotonic() + 30
    while job.state != "running" and time.monotonic() < deadline:
        time.sleep(0.01)
    assert job.state == "running"


def test_one_active_job_per_session(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    q = jobs.JobQueue(train_fn=_until_cancelled, store=tmp_path)
    a = q.submit([CFG], TEXT, corpus="c", device="cpu", owner="s1")
    with pytest.raises(AttnInputError, match="already has 1 training job queued or running"):
        q.submit([CFG], TEXT, corpus="c", device="cpu", owner="s1")
    b = q.submit([CFG], TEXT, corpus="c", device="cpu", owner="s2")  # another session may
    monkeypatch.setenv(jobs.JOBS_PER_SESSION_ENV, "2")
    c = q.submit([CFG], TEXT, corpus="c", device="cpu", owner="s1")  # configurable
    for j in (a, b, c):
        q.cancel(j)
        assert q.wait(j, 30)
    q.submit([CFG], TEXT, corpus="c", device="cpu", owner="s1")  # its jobs ended: it may run again
    assert q.shutdown(30)


def test_a_closed_sessions_jobs_are_cancelled(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    gone: set[str] = set()
    monkeypatch.setattr(jobs, "ENDED_GRACE_S", 0.0)
    monkeypatch.setattr(jobs, "ALIVE_CHECK_S", 0.0)
    q = jobs.JobQueue(train_fn=_until_cancelled, store=tmp_path, alive=lambda sid: sid not in gone)
    running = q.submit([CFG], TEXT, corpus="c", device="cpu", owner="s1")
    _running(q, running)
    queued = q.submit([CFG], TEXT, corpus="c", device="cpu", owner="s2")
    gone.update({"s1", "s2"})
    q.submit([CFG], TEXT, corpus="c", device="cpu", owner="s3")  # a new submission prunes the queue
    assert queued.state == "cancelled" and queued.stop_reason == "the page that started it was closed"
    assert q.wait(running, 30) and running.state == "cancelled"
    assert running.stop_reason == "the page that started it was closed"
    assert q.shutdown(30)


def test_a_reloaded_page_keeps_its_job(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    gone: set[str] = set()
    monkeypatch.setattr(jobs, "ENDED_GRACE_S", 0.2)
    monkeypatch.setattr(jobs, "ALIVE_CHECK_S", 0.0)
    q = jobs.JobQueue(train_fn=_until_cancelled, store=tmp_path, alive=lambda sid: sid not in gone)
    job = q.submit([CFG], TEXT, corpus="c", device="cpu", owner="old-tab")
    _running(q, job)
    gone.add("old-tab")
    q.adopt(job, "reloaded-tab")  # the reloaded page found its job in the URL
    time.sleep(0.5)  # longer than the grace: the job still runs
    assert job.state == "running" and q.owned("reloaded-tab") == [job]
    assert q.shutdown(30)


def test_a_job_stops_at_its_time_cap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(jobs, "job_seconds", lambda: 0.2)
    q = jobs.JobQueue(train_fn=_until_cancelled, store=tmp_path)
    job = q.submit([CFG, CFG], TEXT, corpus="c", device="cpu", owner="s1")
    assert q.wait(job, 30) and job.state == "cancelled"
    assert job.stop_reason == "it reached the time limit of 0 s per job on this server"
    assert len(job.records) == 1  # the run it was in is kept; the next one never starts


def test_job_seconds_and_jobs_per_session_read_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    assert (jobs.jobs_per_session(), jobs.job_seconds()) == (1, 900.0)
    monkeypatch.setenv(jobs.JOBS_PER_SESSION_ENV, "3")
    monkeypatch.setenv(jobs.JOB_SECONDS_ENV, "60")
    assert (jobs.jobs_per_session(), jobs.job_seconds()) == (3, 60.0)
    monkeypatch.setenv(jobs.JOBS_PER_SESSION_ENV, "zero")
    monkeypatch.setenv(jobs.JOB_SECONDS_ENV, "-5")
    assert (jobs.jobs_per_session(), jobs.job_seconds()) == (1, 1.0)


def test_a_finished_job_drops_its_corpus_text(tmp_path: Path) -> None:
    q = jobs.JobQueue(train_fn=_quick, store=tmp_path)
    done = q.submit([CFG], TEXT, corpus="c", device="cpu", owner="s1", upload=True)
    assert q.wait(done, 30) and done.state == "done"
    assert done.text == "" and done.records[0]["corpus_chars"] == len(TEXT)
    assert done.records[0]["corpus_kind"] == "upload"
    stopped = q.submit([CFG], TEXT, corpus="c", device="cpu", owner="s1")
    q.cancel(stopped)
    assert q.wait(stopped, 30) and stopped.text == ""
    assert q.shutdown(30)


def test_shutdown_stops_and_joins_the_worker(tmp_path: Path) -> None:
    q = jobs.JobQueue(train_fn=_until_cancelled, store=tmp_path)
    running = q.submit([CFG], TEXT, corpus="c", device="cpu", owner="s1")
    queued = q.submit([CFG], TEXT, corpus="c", device="cpu", owner="s2")
    _running(q, running)
    thread = q._thread
    assert q.shutdown(30)
    assert thread is not None and not thread.is_alive()
    assert running.state == "cancelled" and running.stop_reason == "the server stopped"
    assert queued.state == "cancelled" and queued.records == []
    with pytest.raises(AttnInputError, match="shutting down"):
        q.submit([CFG], TEXT, corpus="c", device="cpu", owner="s3")


def test_a_kept_runs_corpus_name_is_its_owners() -> None:
    """F5: an upload's name is shown to the session whose job made the run, never to another one."""
    from ui.views import training_runs as runs_view

    up = {"job": "j1", "corpus": "=secret.txt", "corpus_kind": "upload"}
    server = {"job": "j2", "corpus": "Python standard library source (x.py)", "corpus_kind": "server"}
    old = {"job": "j3", "corpus": "notes.txt"}
    assert runs_view.shown_corpus(up, {"j1"}) == "=secret.txt"
    assert runs_view.shown_corpus(up, {"j2"}) == runs_view.OTHER_UPLOAD
    assert runs_view.shown_corpus(server, set()) == server["corpus"]
    assert runs_view.shown_corpus(old, set()) == runs_view.UNMARKED and runs_view.shown_corpus(old, {"j3"}) == "notes.txt"
    assert runs_view.shown_corpus(up, None) == "=secret.txt"  # a script, no session
    rec = {"id": "r", "label": "standard · lr 0.003", "batch_loss": [1.0], "created_utc": "", "steps": [],
           "val_loss": [], "config": {"variant": "standard", "lr": 0.003, "n_layer": 1, "n_head": 2,
                                      "d_model": 32, "context": 32, "batch": 8, "steps": 1}, **up}
    assert list(runs_view.runs_table([rec], own_jobs={"other"})["corpus"]) == [runs_view.OTHER_UPLOAD]


# ---------------------------------------------------------------------------- F11: slow work queues for admission


@pytest.fixture()
def fresh_limiter(monkeypatch: pytest.MonkeyPatch) -> admission.Limiter:
    lim = admission.Limiter(capacity_bytes=8 * 1024**3, slots=4)
    monkeypatch.setattr(admission, "_LIMITER", lim)
    return lim


def test_the_time_estimates_calibration_runs_inside_admission(fresh_limiter: admission.Limiter,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[admission.Snapshot] = []

    def calibrations(configs: Any, text: str, device: str, train_fn: Any) -> list[Any]:
        seen.append(fresh_limiter.snapshot())
        return []

    monkeypatch.setattr(job_panel, "calibrations_for", calibrations)
    q = jobs.JobQueue(store=None)
    line = job_panel.time_estimate(q, [CFG], TEXT, "cpu", _quick, timing="a few steps")
    assert line == ""  # the fake measured nothing: no estimate
    (snap,) = seen
    assert snap.running == 1 and snap.bytes_running == jobs.TRAINING_BYTES


def test_a_slow_evidence_measurement_runs_inside_admission(fresh_limiter: admission.Limiter,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    from attncore import evidence

    seen: list[tuple[str, int]] = []

    def evaluate(claim: Any, setting: Any) -> Any:
        seen.append((claim.key, fresh_limiter.snapshot().running))
        return types.SimpleNamespace(measurement=claim.key)

    monkeypatch.setattr(evidence, "evaluate", evaluate)
    slow = next(c for c in evidence.CLAIMS if c.slow)
    fast = next(c for c in evidence.CLAIMS if not c.slow)
    cached_results.evidence_measurement.clear()
    try:
        for c in (slow, fast):
            assert cached_results.evidence_measurement(c.key, "cpu", 12345, "float32", 0.0).value == c.key
    finally:
        cached_results.evidence_measurement.clear()
    assert seen == [(slow.key, 1), (fast.key, 0)]  # light work does not queue


def test_a_calibration_is_measured_once_per_what_it_depends_on() -> None:
    """F11: the estimate timed new steps for every new corpus; its time depends on the model, the path and
    the vocabulary's band (d_model x vocab), not on the corpus's text or size; and two sessions asking
    at once measured twice."""
    calls: list[int] = []
    gate = threading.Event()

    def timed(cfg: TrainConfig, text: str, *, device: str, progress: Any) -> None:
        calls.append(len(set(text)))
        gate.wait(10)
        for step in range(1, cfg.steps + 1):
            progress(step, cfg.steps, 1.0, None)

    cfg = TrainConfig(steps=10, warmup=0, eval_every=5, d_model=24, **{k: v for k, v in job_cost.SIZES["tiny"].items()
                                                                      if k != "d_model"})
    a = "".join(chr(65 + i) for i in range(40)) * 50  # 40 distinct characters
    b = "".join(chr(65 + i) for i in range(50)) * 900  # 50, a longer corpus: the same band (64)
    out: list[Any] = []
    threads = [threading.Thread(target=lambda t=t: out.append(job_cost.calibrate(cfg, t, "cpu", train_fn=timed)))
               for t in (a, b)]
    for t in threads:
        t.start()
    time.sleep(0.2)
    gate.set()
    for t in threads:
        t.join(30)
    assert len(calls) == 1 and out[0] is out[1]
    assert job_cost.vocab_band(40) == job_cost.vocab_band(64) == 64 and job_cost.vocab_band(65) == 128
    job_cost.calibrate(cfg, "".join(chr(65 + i) for i in range(100)), "cpu", train_fn=timed)  # another band
    assert len(calls) == 2


# ---------------------------------------------------------------------------- F2 on a page: a repeat draws nothing more


def test_repeated_temperatures_draw_the_curves_of_the_distinct_ones() -> None:
    """F2: 200 repeated ``ent_taus`` drew 2,416 traces; now the page draws what the distinct list draws and
    writes the distinct list back to the URL."""
    page = "pages/2_Entropy_vs_length.py"
    small = {"ent_vary": "temperature", "ent_hi": "8", "ent_q": "4"}
    plain = run_app(page, timeout=300, **small, ent_taus="0.5,2")
    repeated = run_app(page, timeout=300, **small, ent_taus=",".join(["0.5", "2"] * 200))
    assert not plain.exception and not repeated.exception
    count = lambda at: [(f["layout"]["meta"]["view"], len(f["data"])) for f in figures(at)]  # noqa: E731
    assert count(repeated) == count(plain) and count(plain)
    assert repeated.query_params["ent_taus"] == "0.5,2"
