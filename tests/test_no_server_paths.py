"""Nothing of the server is shown (issue 34): no file-system path (the checkout, the run cache, the home
folder, the Python installation) in any page's text, chart strings included, nor in the messages attncore
and ui raise for missing or unreadable files and models.

Every page is found through ``ui.nav.PAGES`` (``tests.page_probe.ALL_PAGES``), so a new page is checked
without being listed here.
"""

from __future__ import annotations

import io
import json
import os
import re
import sys
import sysconfig
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest

from attncore.errors import AttnInputError
from tests.chart_data import ROOT, run_app
from tests.page_probe import ALL_PAGES, element_texts
from ui import corpus as corpora
from ui import jobs


def server_paths(*extra: Path) -> list[str]:
    """The folders of this server a page must never name (longest first, so a hit names the deepest)."""
    found = {str(ROOT), str(Path.home()), str(jobs.cache_dir()), sys.prefix, sys.base_prefix,
             sysconfig.get_paths()["purelib"], sysconfig.get_paths()["stdlib"], *map(str, extra)}
    found |= {str(Path(p).resolve()) for p in found}  # .venv may be a link to another checkout's
    return sorted((p for p in found if len(p) > 1), key=len, reverse=True)


def leaks(text: str, paths: list[str]) -> list[str]:
    return [p for p in paths if p in text]


# Folders of a build or server machine a shipped file must not name (issue 44, item 9): the checkouts and
# data (/work/), home folders (/root/, /home/) and scratch space (/tmp/). The deployment manifests name the
# container's own home, /home/app (the image's user, made by the Dockerfile), on purpose, and so does the
# teachers' guide that explains them (the warm-up's ready file lives there).
MACHINE_PATH = re.compile(rb"/(?:work|root|home|tmp)/[^\s\"'`)]*")
CONTAINER_PATHS = {"deploy": (b"/home/app",), "docs": (b"/home/app",)}
SHIPPED = ("attncore", "docs", "deploy", "ui", "pages")  # what the image and the repository ship


def machine_paths(data: bytes, allowed: tuple[bytes, ...] = ()) -> list[str]:
    """The machine paths in ``data``: in a zip archive (.npz, a torch .pt) in each member, read whole."""
    if data[:4] == b"PK\x03\x04":
        with zipfile.ZipFile(io.BytesIO(data)) as z:
            return [hit for name in z.namelist() for hit in machine_paths(z.read(name), allowed)]
    return [m.group().decode("utf-8", "replace") for m in MACHINE_PATH.finditer(data)
            if not any(m.group().startswith(a) for a in allowed)]


def test_the_shipped_file_check_can_fail() -> None:
    assert machine_paths(b'"command": "x --corpus /work/shared/data/t.txt"') == ["/work/shared/data/t.txt"]
    assert machine_paths(b"--out /tmp/gpu --home /home/me/x") == ["/tmp/gpu", "/home/me/x"]
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("header.npy", b"--out /root/runs/stream.npz")
    assert machine_paths(buf.getvalue()) == ["/root/runs/stream.npz"]
    assert machine_paths(b"mountPath: /home/app/.cache", CONTAINER_PATHS["deploy"]) == []
    assert not machine_paths(b"--corpus tinyshakespeare.txt --out attncore/training/results")


def test_no_shipped_file_names_a_machine_path() -> None:
    """Every file under attncore/ (results, models, their headers), docs/, deploy/, ui/ and pages/: the
    training results recorded the build machine's --corpus and the sink grid's --out folder."""
    files = [p for top in SHIPPED for p in sorted((ROOT / top).rglob("*"))
             if p.is_file() and "__pycache__" not in p.parts]
    assert len(files) > 100
    bad = {str(p.relative_to(ROOT)): hits for p in files
           if (hits := machine_paths(p.read_bytes(), CONTAINER_PATHS.get(p.relative_to(ROOT).parts[0], ())))}
    assert not bad, json.dumps(bad, indent=1)[:3000]


def test_shipped_results_name_their_corpus_by_name_and_sha256() -> None:
    """The corpus a shipped result read, by file name and content (no folder), and a command a user can
    run from a checkout."""
    from attncore.training.io import RESULTS_DIR
    from attncore.training.sink_grid import load_grid

    docs = [json.loads(p.read_text()) for p in sorted(RESULTS_DIR.glob("*.json"))]
    header, _ = load_grid()
    assert len(docs) >= 4 and header
    for d in [*docs, header]:
        c = d["corpus"]
        assert c["name"] == "tinyshakespeare.txt" and re.fullmatch(r"[0-9a-f]{64}", c["sha256"]), c
        assert "path" not in c
        assert d["command"].startswith("python -m attncore.training.")
        assert not machine_paths(d["command"].encode()), d["command"]


def test_a_result_header_records_no_folder_of_the_machine(tmp_path: Path) -> None:
    """The code that writes the headers: the command as typed from a checkout, the corpus by name and
    SHA-256 (an absolute --corpus and --out were recorded as given)."""
    import hashlib

    from attncore.provenance import file_record, portable_command, portable_path

    corpus = tmp_path / "deep" / "my corpus.txt"
    corpus.parent.mkdir()
    corpus.write_text("abcab", encoding="utf-8")
    argv = ["lr_sweep", "--out", str(tmp_path / "out"), f"--corpus={corpus}", "--threads", "1"]
    cmd = portable_command("python -m attncore.training.experiments", argv)
    assert cmd == "python -m attncore.training.experiments lr_sweep --out out '--corpus=my corpus.txt' --threads 1"
    assert portable_path(str(ROOT / "attncore" / "training" / "results")) == "attncore/training/results"
    assert portable_path("attncore/training/results") == "attncore/training/results"
    rec = file_record(corpus, "abcab")
    assert rec == {"name": "my corpus.txt", "sha256": hashlib.sha256(b"abcab").hexdigest(), "chars": 5,
                   "vocab": 3}
    assert str(tmp_path) not in json.dumps(rec) + cmd


def test_the_check_can_fail() -> None:
    paths = server_paths()
    assert leaks(f"Finished runs are kept in {jobs.cache_dir()}.", paths)
    assert leaks(f"see {ROOT}/attncore", paths)
    assert not leaks("Finished runs are kept on this server.", paths)


@pytest.fixture()
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh (empty) run cache in a folder of its own, no corpus folders."""
    monkeypatch.setenv(jobs.CACHE_DIR_ENV, str(tmp_path / "runs"))
    monkeypatch.delenv(corpora.CORPUS_DIRS_ENV, raising=False)
    return tmp_path / "runs"


@pytest.mark.parametrize("script", ALL_PAGES)
def test_no_page_names_a_server_path(script: str, cache: Path) -> None:
    at = run_app(script, timeout=900)  # the page's text is read, not its speed (the machine may be loaded)
    assert not at.exception, [e.value for e in at.exception]
    paths = server_paths(cache, cache.parent)
    texts = [(f"{ft.element}.{ft.field}", ft.text) for ft in element_texts(at)]
    assert len(texts) > 20, "the page's text was read"
    bad = [f"{where}: {leaks(text, paths)} in {text[:200]!r}" for where, text in texts if leaks(text, paths)]
    # nor a folder of the machine that made a shipped result (the Training lab quoted the build's --corpus)
    bad += [f"{where}: {hits} in {text[:200]!r}" for where, text in texts if (hits := machine_paths(text.encode()))]
    assert not bad, "\n".join(bad[:10])


def test_the_kept_runs_line_names_no_folder(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With kept runs the Compare caption counted them 'in <folder>'."""
    runs = [{"id": f"run{i}", "label": "standard", "config": {"n_layer": 2, "d_model": 64},
             "batch_loss": [3.0, 2.5], "created_utc": f"2026-01-0{i + 1}T10:00:00"} for i in range(2)]
    monkeypatch.setattr(jobs, "list_runs", lambda directory=None: list(runs))
    at = run_app("pages/6_Training_lab.py")
    assert not at.exception, [e.value for e in at.exception]
    (line,) = [c.value for c in at.caption if "choose some under Compare" in c.value]
    assert line.startswith("2 kept runs"), line
    assert not leaks(line, server_paths(cache, cache.parent)), line


# ---------------------------------------------------------------------------- messages for missing files

def message(call: Callable[[], object]) -> str:
    with pytest.raises(AttnInputError) as got:
        call()
    return str(got.value)


def test_messages_for_missing_files_name_no_folder(tmp_path: Path) -> None:
    from attncore.training import io
    from attncore.training.bbm import BigramBackcopy
    from attncore.training.null_attention import shipped_model

    where = tmp_path / "deep" / "results"
    where.mkdir(parents=True)
    (where / "scaling.json").write_bytes(b"\xff\xfe not json")
    (where / "lr_sweep.json").mkdir()  # a folder where the file should be: the read fails with an OSError
    unreadable = tmp_path / "task.json"
    unreadable.mkdir()
    paths = server_paths(where, tmp_path)
    cases = {
        "model folder missing": lambda: io.load_model(where / "nope"),
        "result missing": lambda: io.load_result("sinks", where),
        "result not JSON": lambda: io.load_result("scaling", where),
        "shipped model missing": lambda: shipped_model("softmax", directory=where),
        "task unreadable": lambda: BigramBackcopy.load(unreadable),
        "task missing": lambda: BigramBackcopy.load(where / "task.json"),
    }
    msgs = {name: message(call) for name, call in cases.items()}
    # lr_sweep.json is a folder: is_file() is False, so it reads as missing
    msgs["result is a folder"] = message(lambda: io.load_result("lr_sweep", where))
    bad = {name: m for name, m in msgs.items() if leaks(m, paths)}
    assert not bad, json.dumps(bad, indent=1)
    assert "nope" in msgs["model folder missing"] and "sinks.json" in msgs["result missing"]


def test_the_stdlib_corpus_message_names_no_folder(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    paths = server_paths(tmp_path)
    monkeypatch.setattr(corpora.sysconfig, "get_paths", lambda: {"stdlib": str(tmp_path / "no-stdlib")})
    m = message(corpora.stdlib_corpus)
    assert "standard library" in m and not leaks(m, paths), m


def test_a_refused_run_folder_is_not_named(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    with pytest.raises(jobs.StoreError) as got:
        jobs.save_run({"id": "x1"}, blocker / "runs")
    assert jobs.CACHE_DIR_ENV in str(got.value)
    assert not leaks(str(got.value), server_paths(tmp_path, blocker)), str(got.value)


def test_a_bundled_model_that_fails_to_load_names_no_folder(monkeypatch: pytest.MonkeyPatch) -> None:
    from attncore import models

    def broken(*args: object, **kwargs: object) -> object:
        raise OSError(f"Can't load tokenizer for '{args[0]}'.")

    import transformers
    monkeypatch.setattr(transformers.AutoConfig, "from_pretrained", broken)
    m = message(lambda: models.load_model(models.BUNDLED, "cpu"))
    assert not leaks(m, server_paths()), m
    assert os.sep in str(ROOT)


def test_git_commit_names_the_checkout_or_says_unknown(tmp_path: Path) -> None:
    """attncore.provenance.git_commit, the one home of a result header's commit: this checkout's HEAD (40 hex
    digits, perhaps with the uncommitted-changes note), and "unknown" outside a git checkout."""
    from attncore.provenance import git_commit

    assert re.fullmatch(r"[0-9a-f]{40}( \(with uncommitted changes\))?", git_commit())
    assert git_commit(tmp_path) == "unknown"
