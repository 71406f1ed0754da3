"""Issue 41 item 7a: the server warms itself at start (serve.warm_pages -> ui.warmup.run in a background
thread, inside Streamlit's runtime) and says when it is ready (its output and ATTNLAB_READY_FILE, which the
Kubernetes readinessProbe tests). The real-model test: after the warm-up's Tour step, the Tour's real-decoder
step computes nothing (every pass a cache hit)."""

from __future__ import annotations

import json
import sys
import threading
import types
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

import serve

ROOT = Path(__file__).resolve().parents[1]


def _fake_warmup(monkeypatch: pytest.MonkeyPatch, failed: list[tuple[str, str]]) -> list[str]:
    calls: list[str] = []

    def run(report, stop):  # noqa: ANN001, ANN202
        for i, name in enumerate(("model", "tour")):
            report(name, i, 2)
            calls.append(name)
        report("", 2, 2)
        return failed

    monkeypatch.setitem(sys.modules, "ui.warmup", types.SimpleNamespace(run=run))
    return calls


def test_ready_file_is_written_only_after_the_warm_up(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    calls = _fake_warmup(monkeypatch, [("tour", "AttnInputError: no model")])
    ready = tmp_path / "ready"
    up = iter([False, False, True])
    seen_before: list[bool] = []

    def runtime_exists() -> bool:
        seen_before.append(ready.exists())
        return next(up)

    failed = serve.warm_pages(threading.Event(), ready, runtime_exists)
    assert seen_before == [False, False, False] and calls == ["model", "tour"]  # waited for the runtime
    assert failed == [("tour", "AttnInputError: no model")]
    assert json.loads(ready.read_text()) == {"ready": True, "warmup_s": pytest.approx(0.4, abs=5),
                                             "failed": ["tour"]}
    out = capsys.readouterr().out
    assert "warm-up 1/2: model" in out and "warm-up 2/2: tour" in out
    assert "step failed (tour): AttnInputError: no model" in out and "Attention Lab: ready" in out


def test_stopped_before_the_runtime_exists_is_never_ready(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _fake_warmup(monkeypatch, [])
    stop = threading.Event()
    stop.set()
    assert serve.warm_pages(stop, tmp_path / "ready", lambda: False) == []
    assert not (tmp_path / "ready").exists() and calls == []


def test_main_removes_a_stale_ready_file_and_warms_only_when_asked(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    import streamlit.web.cli as cli

    ready = tmp_path / "ready"
    ready.write_text("{}")  # left by the container's previous run
    monkeypatch.setenv(serve.READY_FILE_ENV, str(ready))
    monkeypatch.setattr(serve, "warm", lambda: 0.1)
    monkeypatch.setattr(sys, "argv", ["serve.py"])
    state: dict[str, object] = {}

    def fake_main() -> None:
        state["ready_at_start"] = ready.exists()
        state["threads"] = sorted(t.name for t in threading.enumerate() if t.name in ("attnlab-warmup", "attnlab-ready"))  # not other tests' job threads
        raise SystemExit(0)

    monkeypatch.setattr(cli, "main", fake_main)
    monkeypatch.setenv(serve.WARM_ENV, "1")
    assert serve.main([]) == 0
    assert state == {"ready_at_start": False, "threads": ["attnlab-warmup"]}
    monkeypatch.setenv(serve.WARM_ENV, "0")
    assert serve.main([]) == 0
    assert state["threads"] == ["attnlab-ready"]
    assert not ready.exists()  # the runtime never came up in this test: never ready


@pytest.mark.parametrize("variant", ["deployment.yaml", "gpu/deployment.yaml"])
def test_manifests_warm_and_probe_the_ready_file(variant: str) -> None:
    dep = yaml.safe_load((ROOT / "deploy" / "k8s" / variant).read_text())
    (c,) = [c for c in dep["spec"]["template"]["spec"]["containers"] if c["name"] == "app"]
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert env[serve.WARM_ENV] == "1"
    path = env[serve.READY_FILE_ENV]
    mounts = [m["mountPath"] for m in c["volumeMounts"]]
    # on a writable volume (the root filesystem is read-only), and not on the cache's
    assert any(path.startswith(m.rstrip("/") + "/") and path.count("/") == m.rstrip("/").count("/") + 1
               for m in mounts), (path, mounts)
    assert c["readinessProbe"]["exec"]["command"] == ["test", "-f", path]
    assert c["livenessProbe"]["httpGet"]["path"] == "/_stcore/health"  # alive while it warms


def test_a_model_that_does_not_load_skips_the_steps_that_read_it(monkeypatch: pytest.MonkeyPatch) -> None:
    from ui import warmup

    ran: list[str] = []

    def broken() -> None:
        raise OSError("no such file: the converted copy\nsecond line")

    fake = [warmup.Step("model", broken), warmup.Step("tour", lambda: ran.append("tour")),
            warmup.Step("sinks", lambda: ran.append("sinks"))]
    monkeypatch.setattr(warmup, "steps", lambda device: fake)
    reported: list[tuple[str, int, int]] = []
    failed = warmup.run(lambda *a: reported.append(a), device="cpu")
    assert ran == [] and reported == [("model", 0, 3), ("", 3, 3)]
    assert failed == [("model", "OSError: no such file: the converted copy"),
                      ("tour", "skipped: the model did not load"), ("sinks", "skipped: the model did not load")]


@pytest.mark.slow
@pytest.mark.usefixtures("one_torch_thread")
def test_warm_up_makes_the_tours_real_step_a_cache_hit(monkeypatch: pytest.MonkeyPatch) -> None:
    from ui import model_queue, tour, warmup
    from ui.cached import result_cache

    every = warmup.steps("cpu")
    monkeypatch.setattr(warmup, "steps", lambda device: every[:2])  # the model and the Tour's step
    reported: list[tuple[str, int, int]] = []
    assert warmup.run(lambda *a: reported.append(a), device="cpu") == []
    assert [r[1] for r in reported] == [0, 1, 2] and reported[-1][0] == ""
    cache = result_cache()
    entries, held = len(cache), cache.nbytes
    measured = {k: model_queue.QUEUE.times.measured(k)
                for k in ("decoder_sinks", "decoder_deletion", "decoder_ablations")}
    shown = tour.show_real_sink(SimpleNamespace(device="cpu"), None)
    assert shown.figures and shown.numbers["sink_heads"] is not None
    assert (len(cache), cache.nbytes) == (entries, held)  # nothing new computed or stored
    assert measured == {k: model_queue.QUEUE.times.measured(k) for k in measured}
