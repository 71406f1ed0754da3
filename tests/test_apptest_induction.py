"""AppTest: the Training lab's "An induction head forms".

The shipped run's charts equal attncore's numbers (a results file made here by attncore's own training, 3
seeds at a tiny size), every sentence is the one :mod:`ui.views.induction` makes from
:func:`attncore.training.induction.summarize`, every control moves what it should, and the live run goes
through the real queue: its curves equal a direct :func:`train_induction`, Stop keeps what was trained.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

import attncore.training.io as training_io
from attncore.training.induction import FILE, load_runs, run_record, summarize, train_induction
from attncore.training.induction_model import induction_config
from tests import test_apptest_training as training_tests
from tests.chart_data import decode, figure, figures, no_errors, page_device, run_app, traces_named
from ui import induction
from ui.jobs import QUEUE
from ui.views import induction as view

LAB = "pages/6_Training_lab.py"
TINY = {"copy": 8, "d_model": 64, "batch": 64, "steps": 120, "lr": 2e-2, "eval_every": 20}

pytestmark = pytest.mark.usefixtures("one_torch_thread")
cache = training_tests.cache  # fixture: runs are kept in a temporary folder
_queue_idle = training_tests._queue_idle  # autouse: every test leaves the process-wide queue idle


@pytest.fixture(scope="module")
def tiny_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("results")
    header = {"kind": "header", "experiment": "induction", "config": induction_config(0, **TINY).to_dict(),
              "command": "python -m attncore.training.induction --out attncore/training/results",
              "machine": "test machine", "git_commit": "0123456789abcdef"}
    lines = [json.dumps(header)]
    for seed in (2, 0, 1):  # any order in the file: read back by seed
        lines.append(json.dumps(run_record(train_induction(induction_config(seed, **TINY)))))
    (out / FILE).write_text("\n".join(lines) + "\n", encoding="utf-8")
    return out


@pytest.fixture()
def shipped(tiny_file: Path, monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    monkeypatch.setattr(training_io, "RESULTS_DIR", tiny_file)
    return load_runs(tiny_file / FILE)[1]


def md(at: AppTest) -> str:
    return "\n".join(m.value for m in at.markdown)


def views(at: AppTest) -> list[str]:
    return [f["layout"]["meta"]["view"] for f in figures(at)]


def test_section_is_off_by_default_and_says_how_to_open_it(shipped) -> None:
    at = run_app(LAB)
    no_errors(at)
    assert not any(v.startswith("tr-ind") for v in views(at))
    assert any("Turn on **Show it**" in c.value for c in at.caption)
    at.toggle(key="tr_ind").set_value(True).run()
    no_errors(at)
    assert "tr-ind-curves" in views(at) and at.query_params["tr_ind"] == "1"


def test_shipped_curves_equal_attncore(shipped) -> None:
    at = run_app(LAB, tr_ind="1")
    no_errors(at)
    s = summarize(shipped)
    fig = figure(at, "tr-ind-curves")
    for name in ("loss_first", "loss_second", "induction", "previous"):
        (mean,) = traces_named(fig, f"{view.NAMES[name]}, mean of 3 seeds")
        np.testing.assert_allclose(decode(mean["x"]), shipped[0]["steps"])
        np.testing.assert_allclose(decode(mean["y"]), np.mean([view.series(r, name) for r in shipped], axis=0),
                                   rtol=1e-5)
        for r in shipped:
            (one,) = traces_named(fig, f"{view.NAMES[name]}, seed {r['seed']}")
            np.testing.assert_allclose(decode(one["y"]), view.series(r, name), rtol=1e-5)
    (ind_mean,) = traces_named(fig, f"{view.NAMES['induction']}, mean of 3 seeds")
    firsts = [r["induction"][0][r["ind_head"][0]][r["ind_head"][1]] for r in shipped]
    assert decode(ind_mean["y"])[0] == pytest.approx(np.mean(firsts), rel=1e-5)
    lines = [sh["x0"] for sh in fig["layout"]["shapes"] if sh.get("xref") == "x"]
    assert sorted(lines) == sorted(x["phase_step"] for x in s["seeds"])
    text = md(at)
    assert f"**Verdict.** {view.verdict_sentence(s)}" in text
    assert view.phase_sentence(s) in text and view.scores_sentence(s, TINY['copy']) in text


@pytest.mark.parametrize("seed", [0, 2])
def test_maps_follow_the_seed_control(shipped, seed: int) -> None:
    at = run_app(LAB, tr_ind="1")
    at.selectbox(key="tr_ind_seed").set_value(seed).run()
    no_errors(at)
    assert at.query_params.get("tr_ind_seed", "0") == str(seed)
    rec = next(r for r in shipped if r["seed"] == seed)
    fig = figure(at, "tr-ind-maps")
    zs = [decode(t["z"]) for t in fig["data"] if t.get("type") == "heatmap"]
    want = [rec["maps"]["before"]["prev"], rec["maps"]["after"]["prev"], rec["maps"]["before"]["ind"],
            rec["maps"]["after"]["ind"]]
    assert len(zs) == 4
    for got, w in zip(zs, want, strict=True):
        np.testing.assert_allclose(np.asarray(got, dtype=float).reshape(np.shape(w)), w, atol=1e-6)
    assert any(f"Seed {seed}, the first evaluation sequence" in c.value for c in at.caption)


def test_missing_file_is_a_plain_message(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(training_io, "RESULTS_DIR", tmp_path)
    at = run_app(LAB, tr_ind="1")
    no_errors(at)
    assert any("No shipped induction run" in i.value for i in at.info)


def test_steps_control_moves_the_plan_and_the_url(shipped, cache) -> None:
    at = run_app(LAB, tr_ind="1", tr_ind_steps="300")
    no_errors(at)
    assert any(c.value.startswith("One run of 300 steps × 32 sequences of 32 tokens") for c in at.caption)
    at.slider(key="tr_ind_steps").set_value(500).run()
    assert at.query_params["tr_ind_steps"] == "500"
    assert any(c.value.startswith("One run of 500 steps") and "Estimated time" in c.value for c in at.caption)


def test_smollm2_link_points_at_the_real_decoders_induction_heads(shipped) -> None:
    at = run_app(LAB, tr_ind="1")
    links = [e for e in at.get("page_link") if "SmolLM2" in e.proto.label]
    assert len(links) == 1 and links[0].proto.page.endswith("Attention_sinks")
    assert "snk_view=decoder" in links[0].proto.query_string


def start(at: AppTest) -> Any:
    at.button(key="tr_ind_run").click().run()
    no_errors(at)
    job = QUEUE.get(at.session_state[induction.JOB_KEY])
    assert job is not None
    return job


def test_live_run_equals_attncore_and_is_kept(shipped, cache) -> None:
    at = run_app(LAB, tr_ind="1", tr_ind_steps="100")
    job = start(at)
    assert QUEUE.wait(job, 300) and job.state == "done", (job.state, job.error)
    at.run()
    no_errors(at)
    (rec,) = job.records
    direct = train_induction(induction.live_config(100, 0), device=page_device())
    assert rec["config"] == direct.config.to_dict()
    fig = figure(at, "tr-ind-job")
    (t,) = traces_named(fig, f"{view.NAMES['loss_second']}")
    np.testing.assert_allclose(decode(t["x"]), direct.steps)
    np.testing.assert_allclose(decode(t["y"]), direct.loss_second, rtol=1e-5)
    assert (cache / f"{rec['id']}.json").is_file()
    from attncore.training.induction import seed_summary
    assert view.live_outcome(rec, seed_summary(rec)) in md(at)


def test_stop_mid_run_keeps_what_was_trained(shipped, cache) -> None:
    at = run_app(LAB, tr_ind="1", tr_ind_steps="3000")
    job = start(at)
    while job.snapshot()["step"] < 30:
        assert job.active, (job.state, job.error)
        QUEUE.wait(job, 0.05)
    at.run()
    no_errors(at)
    assert at.get("progress")
    live = figure(at, "tr-ind-live")
    assert len(decode(live["data"][0]["x"])) >= 1
    at.button(key="tr_ind_stop").click().run()
    assert QUEUE.wait(job, 120) and job.state == "cancelled"
    (rec,) = job.records
    assert rec["cancelled"] and 30 <= len(rec["batch_loss"]) < 3000
    at.run()
    no_errors(at)
    assert any("Stopped: 1 of 1 runs kept" in c.value for c in at.caption)
