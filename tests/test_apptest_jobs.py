"""AppTest: the Training lab's jobs seen from the page, after issue 32.

A reloaded page (a new session) finds its running job through the URL and takes it back (F6); the
'Another session's job' caption never names one of this session's own jobs, the Training lab's or
the "A sink forms" tab's (F7); the kept-runs table shows no other session's upload name (F5); the
Run button says plainly when the session already has its one job (F3).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from streamlit.testing.v1 import AppTest

from attncore.training import TrainConfig
from tests.chart_data import no_errors, run_app
from ui import corpus as corpora
from ui import jobs
from ui.job_cost import SIZES
from ui.jobs import QUEUE
from ui.views import training as view
from ui.views import training_runs as runs_view

pytestmark = pytest.mark.usefixtures("one_torch_thread")

PAGE = "pages/6_Training_lab.py"
SINK_TAB = view.TAB_TITLES["null_attention"]  # the sink live runs live in this tab, drawn only when open
LONG = {"tr_var": "standard", "tr_size": "tiny", "tr_steps": "1000"}  # trains long enough to be seen running


@pytest.fixture(autouse=True)
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    d = tmp_path / "runs"
    monkeypatch.setenv(jobs.CACHE_DIR_ENV, str(d))
    monkeypatch.delenv(corpora.CORPUS_DIRS_ENV, raising=False)
    yield d
    for j in list(QUEUE._jobs.values()):  # every test leaves the process-wide queue idle
        if j.active:
            QUEUE.cancel(j)
            assert QUEUE.wait(j, 120)


def captions(at: AppTest) -> list[str]:
    return [c.value for c in at.caption]


def other_caption(at: AppTest) -> list[str]:
    return [c for c in captions(at) if c.startswith("Another session's job")]


def start(at: AppTest, key: str = "tr_run") -> jobs.Job:
    """Press a Run button; the job it queued."""
    before = set(QUEUE._jobs)
    at.button(key=key).click().run()
    no_errors(at)
    (job,) = [j for i, j in QUEUE._jobs.items() if i not in before]
    return job


def test_a_reloaded_page_takes_its_running_job_back() -> None:
    """F6: the old page called its own job 'Another session's job', offered no Stop and enabled Run."""
    first = run_app(PAGE, **LONG)
    job = start(first)
    assert first.query_params["tr_job"] == job.id  # the job's id is in the URL
    owner = job.owner
    reloaded = run_app(PAGE, **LONG, tr_job=job.id)  # the same URL in a new session
    no_errors(reloaded)
    assert job.active and job.owner != owner and job.owner.endswith(reloaded.session_state["_attnlab_session_token"])
    assert not other_caption(reloaded)
    assert reloaded.button(key="tr_run").disabled  # no second identical job
    reloaded.button(key="tr_stop").click().run()
    assert QUEUE.wait(job, 120) and job.state == "cancelled"
    reloaded.run()
    no_errors(reloaded)
    assert any(c.startswith("Stopped: ") for c in captions(reloaded))  # its outcome is shown
    assert not reloaded.button(key="tr_run").disabled


def test_a_bad_job_id_in_the_url_is_a_notice() -> None:
    at = run_app(PAGE, tr_job="x" * 100)
    no_errors(at)
    notes = [w.value for w in at.warning if w.value.startswith("URL value tr_job=")]
    assert notes and len(notes[0]) < 120


def test_the_caption_never_names_this_sessions_own_sink_job() -> None:
    """F7: with this session's "A sink forms" job running, the old page said another session's job was
    training (only the Training lab's own job key was compared)."""
    at = run_app(PAGE, tr_tab=SINK_TAB, sk_steps="2000", sk_seeds="1", sk_vars="standard")
    job = start(at, key="sk_run")
    while job.state == "queued":
        QUEUE.wait(job, 0.05)
    at.run()
    no_errors(at)
    assert job.state == "running" and not other_caption(at)
    other = run_app(PAGE, tr_tab=SINK_TAB)  # another session does see it, with its step
    (line,) = other_caption(other)
    assert f"({job.snapshot()['label']}, step " in line


def test_one_job_per_session_is_said_plainly() -> None:
    """F3: a second Run of the same session while its job runs (here from the sink tab) is refused in words."""
    at = run_app(PAGE, **LONG, tr_tab=SINK_TAB, sk_steps="2000", sk_seeds="1", sk_vars="standard")
    first = start(at)
    at.button(key="sk_run").click().run()
    no_errors(at)
    assert any("already has 1 training job queued or running" in w.value for w in at.warning)
    assert [j for j in QUEUE._jobs.values() if j.active] == [first]


def _other_sessions_upload(name: str) -> dict[str, Any]:
    cfg = TrainConfig(steps=5, warmup=0, eval_every=5, **SIZES["tiny"])
    job = QUEUE.submit([cfg], corpora.stdlib_corpus().text, corpus=name, device="cpu", owner="other:1",
                       upload=True)
    assert QUEUE.wait(job, 120) and job.state == "done", job.error
    return job.records[0]


def test_another_sessions_upload_name_is_not_shown() -> None:
    """F5: every session saw everyone's upload names in the kept-runs table (and its CSV)."""
    name = '=HYPERLINK("http://e.x","click").txt'
    rec = _other_sessions_upload(name)
    at = run_app(PAGE, tr_cmp=rec["id"])
    no_errors(at)
    df = at.dataframe[-1].value
    assert list(df["corpus"]) == [runs_view.OTHER_UPLOAD]
    shown = "\n".join(str(x) for x in [*captions(at), *(m.value for m in at.markdown)])
    assert "HYPERLINK" not in shown
