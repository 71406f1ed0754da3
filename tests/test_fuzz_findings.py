"""Issue 26: what an independent fuzz of every page found, each as a test that failed before its fix.

The markup findings (shortcodes in error texts, corpus file names as markdown) are also covered, for
every page and payload, by ``tests/test_text_injection.py``; here are the issue's own reproductions,
and the Training lab's upload type, queue and cache messages and the too-short corpus wording.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from attncore.errors import AttnInputError
from attncore.training.train import min_corpus_chars, split_text
from tests.chart_data import no_errors, run_app
from tests.streamlit_markdown import visible
from ui import corpus as corpora
from ui import jobs, learned
from ui.job_cost import SIZES
from ui.jobs import QUEUE, JobQueue
from ui.views.training import TAB_TITLES

TRAINING = "pages/6_Training_lab.py"
ICON = ":material/home:"


@pytest.fixture()
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(jobs.CACHE_DIR_ENV, str(tmp_path / "runs"))
    monkeypatch.delenv(corpora.CORPUS_DIRS_ENV, raising=False)
    (tmp_path / "models").mkdir()
    monkeypatch.setenv("ATTNLAB_MODEL_DIRS", str(tmp_path / "models"))
    return tmp_path / "runs"


def shown(at: Any) -> list[str]:
    """What the reader sees of every message box (the renderer model of tests.streamlit_markdown)."""
    return [visible(e.value) for e in (*at.error, *at.warning, *at.info)]


# ---------------------------------------------------------------------------- 2. shortcodes in messages

SHORTCODE_CASES = [
    ("pages/1_Heatmaps.py", {"L": ICON}),
    ("pages/1_Heatmaps.py", {"mask": "padding2d", "vlens": ICON}),
    ("pages/3_Saturation_and_gradients.py", {"sat_tab": "Saturation", "sat_scores": ICON}),
    ("pages/1_Heatmaps.py", {"rt_src": "real", "rt_model": "local", "rt_path": ICON}),
    ("pages/4_Attention_sinks.py", {"snk_view": "model", "snk_model": "local", "snk_path": ICON}),
]


@pytest.mark.parametrize(("script", "query"), SHORTCODE_CASES, ids=[next(reversed(q)) for _, q in SHORTCODE_CASES])
def test_an_icon_shortcode_in_a_url_value_is_quoted_not_drawn(script: str, query: dict[str, str], cache) -> None:
    """`/Heatmaps?L=:material/home:` showed a home icon inside "URL value L=... is not valid"."""
    at = run_app(script, **query)
    assert not at.exception
    quoting = [s for s in shown(at) if ICON in s]
    assert quoting, shown(at)
    assert not any("⟦" in s.split(ICON)[0][-3:] for s in quoting)  # nothing drawn just before it


# ---------------------------------------------------------------------------- 4. an upload of another type


@pytest.mark.parametrize("name", ["x.exe", "notes.md", "archive.txt.gz", "noext"])
def test_an_upload_of_another_type_says_which_types_are_accepted(name: str, cache) -> None:
    """A file the uploader does not accept (sent past the browser's filter) ended in Streamlit's
    generic "This app has encountered an error" box; now the page names the accepted type."""
    at = run_app(TRAINING, tr_corpus="upload")
    at.get("file_uploader")[0].set_value((name, b"plain words " * 100, "application/octet-stream")).run()
    assert not at.exception, [e.value for e in at.exception]
    no_errors(at)
    (msg,) = [s for s in shown(at) if name in s]
    assert f"{name} is not a .txt file; the uploader accepts plain-text .txt files" in msg
    assert at.button(key="tr_run").disabled
    assert "text/plain" in at.get("file_uploader")[0].proto.type  # the browser still offers .txt files


def test_a_txt_upload_in_capitals_is_accepted(cache) -> None:
    at = run_app(TRAINING, tr_corpus="upload", tr_var="standard")
    at.get("file_uploader")[0].set_value(("SONNET.TXT", b"Shall I compare thee? " * 40, "text/plain")).run()
    no_errors(at)
    assert not at.button(key="tr_run").disabled


# ---------------------------------------------------------------------------- 5. the queue right after Run


RUN_BUTTONS = [  # the live runs, and the tab "A sink forms" (the same job panel, ui.job_panel)
    ("tr_run", "tr_job", {"tr_var": "standard", "tr_steps": "10"}, "standard · lr 0.003"),
    ("sk_run", "sk_job", {"sk_vars": "standard", "sk_steps": "50", "tr_tab": TAB_TITLES["null_attention"]},
     "softmax · seed 0"),
]


@pytest.mark.parametrize(("button", "job_key", "query", "label"), RUN_BUTTONS, ids=[b[0] for b in RUN_BUTTONS])
def test_run_on_an_idle_queue_says_it_is_starting_not_waiting(cache, monkeypatch: pytest.MonkeyPatch, button: str,
                                                              job_key: str, query: dict[str, str],
                                                              label: str) -> None:
    """Right after Run on an idle queue the page said "Your run waits in the queue: 0 jobs ahead of it".
    The page gets a queue of its own whose worker never starts, so the job is seen in exactly that
    moment (queued, nothing ahead) whatever the process-wide worker is doing."""

    class Idle:  # stands in for the worker thread: alive, so submit starts none
        def is_alive(self) -> bool:
            return True

    queue = JobQueue(store=cache)
    queue._thread = Idle()  # type: ignore[assignment]
    monkeypatch.setattr(jobs, "QUEUE", queue)  # the page imports it from ui.jobs on every run
    monkeypatch.setattr(learned, "QUEUE", queue)  # the sink tab's module holds it from its one import
    at = run_app(TRAINING, **query)
    at.button(key=button).click().run()
    no_errors(at)
    job = queue.get(at.session_state[job_key])
    assert job is not None and job.state == "queued" and queue.position(job) == 0
    assert not any("waits in the queue" in s for s in shown(at)), shown(at)
    (bar,) = at.get("progress")
    assert bar.proto.text == f"run 1 of 1 ({label}): starting…"


# ---------------------------------------------------------------------------- 6. wording


@pytest.mark.parametrize("ctx_len", [1, 7, 16, 32, 64, 100, 256])
def test_the_too_short_message_names_the_length_that_is_needed(ctx_len: int) -> None:
    """At context 32 the message said "at least 330 characters" while 321 suffice (and 328 were
    accepted): the number must be the boundary, checked on both sides of it."""
    need = min_corpus_chars(ctx_len)
    assert need == 10 * ctx_len + 1  # the last tenth holds context + 1 characters from 10·context + 1 on
    assert split_text(need, ctx_len) == int(need * 0.9)
    with pytest.raises(AttnInputError, match=f"at least {need:,} characters are needed"):
        split_text(need - 1, ctx_len)
    for n in range(need, need + 40):  # and every longer corpus is accepted
        split_text(n, ctx_len)


def test_the_upload_at_the_boundary_is_accepted_and_one_less_is_refused_with_that_number(cache) -> None:
    context = SIZES["tiny"]["context"]
    need = min_corpus_chars(context)
    at = run_app(TRAINING, tr_corpus="upload", tr_var="standard")
    body = ("abcdefghij" * 100)[: need - 1]
    at.get("file_uploader")[0].set_value(("short.txt", body.encode(), "text/plain")).run()
    no_errors(at)
    assert any(f"so at least {need:,} characters are needed" in s for s in shown(at)), shown(at)
    assert at.button(key="tr_run").disabled
    at.get("file_uploader")[0].set_value(("enough.txt", (body + "k").encode(), "text/plain")).run()
    no_errors(at)
    assert not any("too short" in s for s in shown(at)), shown(at)
    assert not at.button(key="tr_run").disabled


def test_a_cache_folder_that_refuses_runs_is_not_called_their_keeper(tmp_path, monkeypatch) -> None:
    """With a cache folder that cannot be written the warning said the run could not be kept while the
    caption said "1 kept run in <folder>". The caption now counts the refused runs apart."""
    blocker = tmp_path / "a-file"  # the folder's parent is a file: nothing can be written there
    blocker.write_text("not a folder")
    folder = blocker / "runs"
    monkeypatch.setenv(jobs.CACHE_DIR_ENV, str(folder))
    monkeypatch.delenv(corpora.CORPUS_DIRS_ENV, raising=False)
    at = run_app(TRAINING, tr_var="standard", tr_steps="10")
    at.button(key="tr_run").click().run()
    job = QUEUE.get(at.session_state["tr_job"])
    assert job is not None and QUEUE.wait(job, 120) and job.state == "done", (job and job.state)
    at.run()
    no_errors(at)
    assert any("could not be kept in the server's run folder" in s for s in shown(at))
    (line,) = [visible(c.value) for c in at.caption if "choose some under Compare" in c.value]
    held = len({r["id"] for r in QUEUE.unsaved()})  # this server's refused runs (earlier tests' too)
    assert held >= 1 and "kept run" not in line, line
    assert line == (f"{held} run{'s' if held != 1 else ''} that could not be kept on this server, listed until the "
                    "server restarts: choose some under Compare in the sidebar to overlay their curves."), line
