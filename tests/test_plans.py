"""Plans (attncore.plan), their admission (ui.admission.run_plan: the model first, then a place) and the
byte-capped cache of the real models' results (ui.cached.ByteCache, Planned). No model is loaded: the
plans here wrap small functions and a stand-in module."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch

from attncore.errors import ResourceLimitError
from attncore.models import modules
from attncore.plan import Plan
from ui import admission, cached
from ui.admission import Limiter, run_plan

GB = 1 << 30


def test_a_plan_runs_its_work_holding_its_model_and_refuses_an_estimate_over_the_budget(
        monkeypatch: pytest.MonkeyPatch) -> None:
    model = torch.nn.Linear(1, 1)
    held: list[bool] = []

    def work() -> int:
        lock = modules._LOCKS[model]
        held.append(lock._is_owned())  # type: ignore[attr-defined]
        return 7

    assert Plan("x", 10, 0.1, work, model=model).run() == 7 and held == [True]
    monkeypatch.setenv("ATTNCORE_MAX_BYTES", str(1 << 20))
    with pytest.raises(ResourceLimitError):
        Plan("a big pass", 2 << 20, 0.1, work, model=model).run()
    assert held == [True]  # refused before the work


class _SpyLock:
    """A model lock that says when a thread asks for it (before it blocks)."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.asked: dict[str, threading.Event] = {}

    def __enter__(self) -> _SpyLock:
        name = threading.current_thread().name
        if name in self.asked:
            self.asked[name].set()
        self.lock.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.lock.release()


def test_a_session_waiting_for_a_busy_model_holds_no_admission_place(monkeypatch: pytest.MonkeyPatch) -> None:
    """F5: with two places, A runs on the model and B waits for the same model; C (another computation)
    must get the second place at once. Before the fix B waited for the model inside its place and C queued
    behind two sessions, one of them doing nothing."""
    lim = Limiter(capacity_bytes=10 * GB, slots=2)
    monkeypatch.setattr(admission, "_LIMITER", lim)
    model = torch.nn.Linear(1, 1)
    spy = _SpyLock()
    spy.asked["B"] = threading.Event()
    monkeypatch.setitem(modules._LOCKS, model, spy)  # type: ignore[arg-type]
    order: list[str] = []
    a_running, release_a = threading.Event(), threading.Event()

    def work_a() -> str:
        order.append("A starts")
        a_running.set()
        assert release_a.wait(120)
        order.append("A ends")
        return "A"

    plans = {"A": Plan("A", GB, 1.0, work_a, model=model),
             "B": Plan("B", GB, 1.0, lambda: order.append("B") or "B", model=model),
             "C": Plan("C", GB, 1.0, lambda: order.append("C") or "C")}
    results: dict[str, str] = {}
    threads = {k: threading.Thread(target=lambda k=k: results.__setitem__(k, run_plan(plans[k])), name=k,
                                   daemon=True) for k in plans}
    threads["A"].start()
    assert a_running.wait(120)
    threads["B"].start()
    assert spy.asked["B"].wait(120)  # B asks for the model A holds
    snap = lim.snapshot()
    assert (snap.running, snap.waiting) == (1, 0)  # B holds no place while it waits for the model
    threads["C"].start()
    threads["C"].join(120)
    assert not threads["C"].is_alive() and results.get("C") == "C"
    assert order == ["A starts", "C"]  # C ran while A held the model and B waited for it
    release_a.set()
    for t in threads.values():
        t.join(120)
    assert order == ["A starts", "C", "A ends", "B"]
    assert results == {"A": "A", "B": "B", "C": "C"}
    assert lim.snapshot().running == 0


def test_value_bytes_counts_tensors_arrays_and_shared_storage_once() -> None:
    t = torch.zeros(1000)  # 4,000 bytes
    view = t[10:20]
    a = np.zeros(100)  # 800 bytes
    assert cached.value_bytes(t) == 4000
    assert cached.value_bytes((t, view, {"a": a})) == 4000 + 800 + 1
    r = cached.Timed(value=(t, "abc"), seconds=1.0)
    assert cached.value_bytes(r) == 4003


def test_the_byte_cache_keeps_at_most_its_bytes_least_recently_used_out_first() -> None:
    c = cached.ByteCache(10_000)
    for i in range(3):
        c.put(("k", i), torch.zeros(1000))  # 4,000 bytes each
    assert len(c) == 2 and c.nbytes == 8000
    assert c.get(("k", 0)) is None and c.get(("k", 1)) is not None
    c.put(("k", 3), torch.zeros(1000))  # evicts 2, the least recently used (1 was just read)
    assert c.get(("k", 2)) is None and c.get(("k", 1)) is not None and c.nbytes == 8000
    c.put(("big",), torch.zeros(5000))  # 20,000 bytes: over the whole cap, not kept, nothing evicted
    assert c.get(("big",)) is None and len(c) == 2
    c.clear("k")
    assert len(c) == 0 and c.nbytes == 0


def test_a_planned_result_is_computed_once_and_kept_within_the_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(admission, "_LIMITER", Limiter(capacity_bytes=10 * GB, slots=2))
    store = cached.ByteCache(3 * 4000)
    monkeypatch.setattr(cached, "result_cache", lambda: store)
    runs: list[int] = []

    def make(n: int) -> Plan[torch.Tensor]:
        def work() -> torch.Tensor:
            runs.append(n)
            return torch.full((1000,), float(n))
        return Plan(f"plan {n}", 4000, 0.01, work)

    p = cached.Planned("test", make)
    assert p.peek(1) is None
    first = p(1)
    assert p(1) is first and runs == [1] and p.peek(1) is first
    for n in range(2, 6):
        p(n)
    assert store.nbytes <= 3 * 4000 and len(store) == 3
    assert p.peek(1) is None  # the oldest went
    long = "x" * 1000
    assert p.key(long) == ("test", cached.text_key(long))  # a long text is keyed by its digest
