"""AppTest: the Training lab page, its views, corpora and the background job runner.

The shipped-experiment views are checked against result files made here by a tiny real run of
``python -m attncore.training.experiments all --scale tiny`` (seconds), and against the shipped
files when they are complete. Live runs go through the real process-wide queue and
``attncore.training.train``; their charts are compared with a direct call of ``train``.
"""

from __future__ import annotations

import copy
import errno
import json
import os
import re
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

import attncore.training.io as training_io
from attncore.errors import AttnInputError
from attncore.training import RESULT_NAMES, TrainConfig, load_result, train
from attncore.training.experiments import main as experiments_main
from tests.chart_data import all_data, decode, figure, no_errors, run_app, traces_named
from tests.test_null_attention import check_null_attention_verdicts
from ui import corpus as corpora
from ui import jobs
from ui.jobs import QUEUE, SIZES, JobQueue, job_tokens, make_configs
from ui.views import training as view

PAGE = "pages/6_Training_lab.py"
SHAKESPEARE = Path(__file__).resolve().parents[2] / "shared" / "data" / "tinyshakespeare.txt"
if not SHAKESPEARE.is_file():
    SHAKESPEARE = Path("/work/shared/data/tinyshakespeare.txt")


# ---------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def tiny_results(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Result files of all three experiments at --scale tiny, made by the real experiments command."""
    out = tmp_path_factory.mktemp("results")
    small = out / "small.txt"
    small.write_text(SHAKESPEARE.read_text(encoding="utf-8")[:30_000], encoding="utf-8")
    rc = experiments_main(["all", "--out", str(out), "--scale", "tiny", "--corpus", str(small),
                           "--threads", "1", "--device", "cpu"])
    assert rc in (0, None)
    for name in RESULT_NAMES:
        assert (out / f"{name}.json").is_file(), name
    return out


@pytest.fixture()
def results(tiny_results: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, dict[str, Any]]:
    """The page reads the tiny results; returns them."""
    monkeypatch.setattr(training_io, "RESULTS_DIR", tiny_results)
    return {n: load_result(n, tiny_results) for n in RESULT_NAMES}


@pytest.fixture()
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    d = tmp_path / "runs"
    monkeypatch.setenv(jobs.CACHE_DIR_ENV, str(d))
    monkeypatch.delenv(corpora.CORPUS_DIRS_ENV, raising=False)
    return d


@pytest.fixture(autouse=True)
def _queue_idle():
    """Every test leaves the process-wide queue idle."""
    yield
    for j in list(QUEUE._jobs.values()):
        if j.active:
            QUEUE.cancel(j)
            assert QUEUE.wait(j, 120)


def markdown_text(at: AppTest) -> str:
    return "\n".join(m.value for m in at.markdown)


def texts(at: AppTest, kind: str) -> list[str]:
    return [e.value for e in getattr(at, kind)]


def ys(fig: dict) -> list[np.ndarray]:
    return [decode(t["y"]) for t in fig["data"]]


# ---------------------------------------------------------------------------- shipped experiments


def test_shipped_experiments_charts_equal_the_result_files(results, cache) -> None:
    at = run_app(PAGE)
    no_errors(at)
    lr, sc, sk = results["lr_sweep"], results["scaling"], results["sinks"]
    # 1: final training loss against lr, one line per variant
    fig = figure(at, "tr-lr")
    for v in ("standard", "fully_scaled", "fully_scaled_rows"):
        runs = sorted((r for r in lr["runs"] if r["variant"] == v and r["diverged_at"] is None),
                      key=lambda r: r["lr"])
        (t,) = traces_named(fig, v)
        np.testing.assert_allclose(decode(t["x"]), [r["lr"] for r in runs], rtol=1e-6)
        np.testing.assert_allclose(decode(t["y"]), [r["final_train_loss"] for r in runs], rtol=1e-6)
    fig = figure(at, "tr-lr-curves")
    for v, b in lr["best"].items():
        run = next(r for r in lr["runs"] if r["variant"] == v and r["lr"] == b["lr"])
        (t,) = traces_named(fig, f"{v} (lr {b['lr']:g}) training")
        np.testing.assert_allclose(decode(t["y"]), run["train_loss"], rtol=1e-6)
        (t,) = traces_named(fig, f"{v} (lr {b['lr']:g}) validation")
        np.testing.assert_allclose(decode(t["y"]), run["val_loss"], rtol=1e-6)
    # 2: per head dim, validation loss panels then saturation panels (standard, unscaled in each)
    fig = figure(at, "tr-scaling")
    dhs = sorted({r["d_head"] for r in sc["runs"]})
    got = ys(fig)
    assert len(got) == 4 * len(dhs)
    for i, dh in enumerate(dhs):
        for j, variant in enumerate(("standard", "unscaled")):
            run = next(r for r in sc["runs"] if r["d_head"] == dh and r["variant"] == variant)
            np.testing.assert_allclose(got[2 * i + j], run["val_loss"], rtol=1e-6)
            np.testing.assert_allclose(got[2 * len(dhs) + 2 * i + j], run["saturated_share"], atol=1e-7)
    # 3: α₀ per layer and head, and the StreamingLLM bars
    for run in sk["runs"]:
        z = decode(figure(at, f"tr-sinks-{run['label']}")["data"][0]["z"])
        np.testing.assert_allclose(z, run["sink_alpha"], rtol=1e-6)
    fig = figure(at, "tr-streaming")
    for key, name in view.STREAM_KEYS:
        (t,) = traces_named(fig, name)
        np.testing.assert_allclose(decode(t["y"]), [r["streaming"][key] for r in sk["runs"]], rtol=1e-6)
    # the claims, this run's measurements and the verdicts are on the page, with the sizes used
    text = markdown_text(at)
    for d, verdict, measured in ((lr, view.lr_sweep_verdict, view.lr_sweep_measured),
                                 (sc, view.scaling_verdict, view.scaling_measured),
                                 (sk, view.sinks_verdict, view.sinks_measured)):
        assert d["claim"] in text
        assert measured(d) in text
        for sentence in verdict(d):
            assert sentence in text, sentence
    captions = "\n".join(texts(at, "caption"))
    for d in (lr, sc, sk):
        assert view.provenance(d) in captions
        c = d["sizes"]["config"]
        assert f"{c['n_layer']} layers" in view.provenance(d) and f"{c['steps']} steps" in view.provenance(d)
        assert d["machine"]["cpu"] in view.provenance(d) and d["command"] in view.provenance(d)


def shown(x: float) -> float:
    """A number as the page prints it (3 decimals)."""
    return round(float(f"{x:.3f}"), 3)


def check_lr_verdict(d: dict[str, Any], *, real: bool = True) -> None:
    out = view.lr_sweep_verdict(d)
    s, f = d["best"]["standard"]["final_train_loss"], d["best"]["fully_scaled"]["final_train_loss"]
    first = out[0]
    assert first.index(f"{f:.3f}") < first.index(f"{s:.3f}") or f"{f:.3f}" == f"{s:.3f}"
    fs, ss = shown(f), shown(s)
    if fs > ss:
        assert f"worse by {fs - ss:.3f}" in first and "the ordering the Graphcore post reports" in first
    elif fs < ss:
        assert f"better by {ss - fs:.3f}" in first and "does not reproduce" in first
    else:
        assert "the same to three decimals" in first
    r = d["best"]["fully_scaled_rows"]["final_train_loss"]
    word = "higher than" if shown(r) > fs else "lower than" if shown(r) < fs else "the same as"
    assert out[1] == (f"The causal-aware per-row form (each row scaled by the keys it sees) ended at {r:.3f}, "
                      f"{word} the key-length form ({f:.3f}).")
    lrs = sorted({x["lr"] for x in d["runs"]})
    for v, b in d["best"].items():
        edge = [x for x in out if x.startswith(f"For {v} the best rate")]
        assert bool(edge) == (b["lr"] in (lrs[0], lrs[-1]))
        if not real:
            continue
        # the best rate really is the lowest final training loss of that variant
        finals = [x["final_train_loss"] for x in d["runs"] if x["variant"] == v and x["diverged_at"] is None]
        assert b["final_train_loss"] == min(finals)


def check_scaling_verdict(d: dict[str, Any]) -> None:
    out = view.scaling_verdict(d)
    gaps = []
    for dh in sorted({r["d_head"] for r in d["runs"]}):
        s = next(r for r in d["runs"] if r["d_head"] == dh and r["variant"] == "standard")
        u = next(r for r in d["runs"] if r["d_head"] == dh and r["variant"] == "unscaled")
        (line,) = [x for x in out if x.startswith(f"At d_head {dh}, ")]
        sv, uv = s["final_val_loss"], u["final_val_loss"]
        us_, ss_ = shown(uv), shown(sv)
        gaps.append(us_ - ss_)
        assert f"{uv:.3f} against {sv:.3f}" in line
        if us_ > ss_:
            assert f"worse by {us_ - ss_:.3f}" in line
        elif us_ < ss_:
            assert f"better by {ss_ - us_:.3f}" in line
        else:
            assert "the same to three decimals" in line
        assert f"{u['saturated_share'][-1]:.1%} of its attention rows" in line
        assert f"against {s['saturated_share'][-1]:.1%}." in line
    grows = all(b - a > 0.0005 for a, b in zip(gaps, gaps[1:], strict=False))
    assert any(("The gap grows" in x) == grows and "gap" in x for x in out)
    assert not any("The gap grows" in x for x in out) or grows


def check_sinks_verdict(d: dict[str, Any]) -> None:
    out = view.sinks_verdict(d)
    counts = {}
    for r in d["runs"]:
        a = np.asarray(r["sink_alpha"])
        k = int((a > r["sink_eps"]).sum())
        counts[r["label"]] = k
        assert f"{r['label']}: {k} of {a.size} heads are sink heads" in " ".join(out)
        assert f"the mean α₀ is {a.mean():.3f}" in " ".join(out)
    for fix in ("softmax1", "sink_logit"):
        (line,) = [x for x in out if x.startswith(f"{fix} has ")]
        k, base = counts[fix], counts["softmax"]
        assert f"({k} against {base})" in line
        assert ("fewer" in line) == (k < base) and ("more sink" in line) == (k > base)
    top = max(float(np.max(r["sink_alpha"])) for r in d["runs"])
    uni = d["alpha_uniform"]
    said = [x for x in out if x.startswith("Every head of every model")]
    assert bool(said) == (shown(top) < shown(uni))
    if said:
        assert f"largest α₀ {top:.3f} against {uni:.3f}" in said[0]
    s = d["runs"][[r["label"] for r in d["runs"]].index("softmax")]["streaming"]
    (line,) = [x for x in out if x.startswith("With softmax")]
    w, ws = s["window_beyond"], s["window_sinks_beyond"]
    assert f"scores {w:.3f}" in line and f"full cache {s['full_beyond']:.3f}" in line
    if shown(w) > shown(ws):
        assert f"lowers it to {ws:.3f}" in line
    elif shown(w) < shown(ws):
        assert f"raises it to {ws:.3f}" in line
    else:
        assert f"leaves it at {ws:.3f}" in line
    worse = [x for x in out if x.startswith("Past the training context the full cache")]
    assert bool(worse) == (shown(s["full_beyond"]) > max(shown(w), shown(ws)))


def test_verdict_sentences_are_true_of_the_numbers(results) -> None:
    lr, sc, sk = (copy.deepcopy(results[n]) for n in ("lr_sweep", "scaling", "sinks"))
    check_lr_verdict(lr)
    check_scaling_verdict(sc)
    check_sinks_verdict(sk)
    # Every branch: move the real numbers so that each ordering occurs.
    for delta in (0.2, -0.2, 0.0):
        d = copy.deepcopy(lr)
        d["best"]["fully_scaled"]["final_train_loss"] = d["best"]["standard"]["final_train_loss"] + delta
        d["best"]["fully_scaled_rows"]["final_train_loss"] = d["best"]["fully_scaled"]["final_train_loss"] - delta
        check_lr_verdict(d, real=False)
    d = copy.deepcopy(sc)
    for r in d["runs"]:
        if r["variant"] == "unscaled":
            r["final_val_loss"] += 0.1 * r["d_head"] ** 0.5
            r["saturated_share"][-1] = 0.25
    check_scaling_verdict(d)
    assert any("The gap grows with every step up" in x for x in view.scaling_verdict(d))
    d = copy.deepcopy(sk)
    for r in d["runs"]:
        if r["label"] == "softmax":
            r["sink_alpha"] = [[0.9] * len(row) for row in r["sink_alpha"]]
            r["streaming"]["window_beyond"] += 0.5
            r["streaming"]["full_beyond"] = r["streaming"]["window_beyond"] + 1.0
    check_sinks_verdict(d)
    assert any(x.startswith("Past the training context") for x in view.sinks_verdict(d))
    assert not any(x.startswith("Every head of every model") for x in view.sinks_verdict(d))
    assert any("fewer sink heads than softmax" in x for x in view.sinks_verdict(d))


@pytest.mark.parametrize("name", RESULT_NAMES)
def test_shipped_result_verdicts_are_true(name: str) -> None:
    """The files that ship with the app (when complete) give true verdicts too."""
    try:
        d = load_result(name)
    except AttnInputError:
        pytest.skip(f"{name}.json is not shipped yet")
    if not d.get("complete"):
        pytest.skip(f"{name}.json is still being written")
    {"lr_sweep": check_lr_verdict, "scaling": check_scaling_verdict, "sinks": check_sinks_verdict,
     "null_attention": check_null_attention_verdicts}[name](d)


# ---------------------------------------------------------------------------- controls


def plan_caption(at: AppTest) -> str:
    (line,) = [c for c in texts(at, "caption") if "training tokens on" in c]
    return line


def expected_plan(variants, lrs, size, steps, corpus: corpora.Corpus) -> str:
    configs = make_configs(variants, [float(x) for x in lrs], size, steps, 0)
    n = len(configs)
    return (f"{n} run{'s' if n > 1 else ''} × {steps} steps = {job_tokens(configs):,} training tokens on "
            f"{corpus.name} ({len(corpus.text):,} characters, {len(set(corpus.text))} distinct) on CPU")


def test_every_control_changes_the_plan_and_the_url(results, cache, tmp_path, monkeypatch) -> None:
    folder = tmp_path / "corpora"
    folder.mkdir()
    (folder / "a.txt").write_text("the quick brown fox jumps over the lazy dog.\n" * 200, encoding="utf-8")
    (folder / "b.txt").write_text("to be or not to be, that is the question.\n" * 300, encoding="utf-8")
    monkeypatch.setenv(corpora.CORPUS_DIRS_ENV, str(folder))
    at = run_app(PAGE)
    no_errors(at)
    std = corpora.stdlib_corpus()
    state = {"tr_var": ["standard", "fully_scaled"], "tr_lr": ["0.003"], "tr_size": "tiny", "tr_steps": 200}
    assert expected_plan(state["tr_var"], state["tr_lr"], "tiny", 200, std) in plan_caption(at)
    changes = [("multiselect", "tr_var", ["standard", "softmax1", "gated"]),
               ("multiselect", "tr_lr", ["0.001", "0.01"]),
               ("slider", "tr_steps", 50),
               ("selectbox", "tr_size", "small")]
    for kind, key, value in changes:
        before = plan_caption(at)
        getattr(at, kind)(key=key).set_value(value)
        at.run()
        no_errors(at)
        state[key] = value
        assert plan_caption(at) != before, key
        assert expected_plan(state["tr_var"], state["tr_lr"], state["tr_size"], state["tr_steps"], std) \
            in plan_caption(at)
        url = ",".join(value) if isinstance(value, list) else str(value)
        assert at.query_params[key] == url, key
    # the folder corpus and its file choice
    at.radio(key="tr_corpus").set_value("folder").run()
    no_errors(at)
    assert at.query_params["tr_corpus"] == "folder"
    assert at.selectbox(key="tr_file").options == ["0/a.txt", "0/b.txt"]
    a = corpora.read_folder_file("0/a.txt")
    assert expected_plan(state["tr_var"], state["tr_lr"], "small", 50, a) in plan_caption(at)
    at.selectbox(key="tr_file").set_value("0/b.txt").run()
    no_errors(at)
    assert at.query_params["tr_file"] == "0/b.txt"
    b = corpora.read_folder_file("0/b.txt")
    assert b.name == "corpora/b.txt"
    assert expected_plan(state["tr_var"], state["tr_lr"], "small", 50, b) in plan_caption(at)
    # upload: nothing uploaded yet -> a plain note, Run disabled
    at.radio(key="tr_corpus").set_value("upload").run()
    no_errors(at)
    assert at.query_params["tr_corpus"] == "upload"
    assert any("Upload a .txt file" in x for x in texts(at, "info"))
    assert at.button(key="tr_run").disabled
    # a URL reproduces the plan
    at2 = run_app(PAGE, tr_var="standard,softmax1,gated", tr_lr="0.001,0.01", tr_size="small", tr_steps="50")
    assert expected_plan(["standard", "softmax1", "gated"], ["0.001", "0.01"], "small", 50, std) \
        in plan_caption(at2)
    # too much work for one Run -> a plain message, Run disabled
    at3 = run_app(PAGE, tr_var="standard,softmax1,gated,ssmax", tr_lr="0.001,0.01", tr_size="medium",
                  tr_steps="1000")
    no_errors(at3)
    assert any("one Run may train at most 1,000,000" in w for w in texts(at3, "warning"))
    assert at3.button(key="tr_run").disabled


BAD_UPLOADS = [
    ("empty.txt", b"", "is empty"),
    ("binary.txt", b"abc\x00\x01\x02" * 100, "looks binary"),
    ("latin1.txt", "caf\xe9 ".encode("latin-1") * 100, "is not UTF-8 text"),
    ("huge.txt", b"a" * (corpora.MAX_CORPUS_BYTES + 1), "the limit is 5 MB"),
    ("short.txt", b"hello world\n" * 5, "too short for a context of 32"),
]


@pytest.mark.parametrize(("name", "data", "message"), BAD_UPLOADS, ids=[b[0] for b in BAD_UPLOADS])
def test_bad_uploads_give_a_plain_message(results, cache, name, data, message) -> None:
    at = run_app(PAGE, tr_corpus="upload")
    at.get("file_uploader")[0].set_value((name, data, "text/plain"))
    at.run()
    no_errors(at)
    assert any(message in w for w in texts(at, "warning")), texts(at, "warning")
    assert at.button(key="tr_run").disabled
    assert not any("Traceback" in m for m in texts(at, "markdown"))


def test_good_upload_is_the_corpus(results, cache) -> None:
    at = run_app(PAGE, tr_corpus="upload", tr_var="standard")
    text = "Shall I compare thee to a summer's day?\n" * 100
    at.get("file_uploader")[0].set_value(("sonnet.txt", text.encode("utf-8"), "text/plain"))
    at.run()
    no_errors(at)
    assert expected_plan(["standard"], ["0.003"], "tiny", 200, corpora.Corpus("sonnet.txt", text)) \
        in plan_caption(at)
    assert not at.button(key="tr_run").disabled


def test_corpus_folders_refuse_paths_outside(tmp_path, monkeypatch) -> None:
    inside, outside = tmp_path / "in", tmp_path / "out"
    inside.mkdir()
    outside.mkdir()
    (inside / "ok.txt").write_text("fine text\n" * 10, encoding="utf-8")
    (inside / "data.bin").write_bytes(b"\x00\x01")
    (outside / "secret.txt").write_text("secret\n", encoding="utf-8")
    (inside / "link.txt").symlink_to(outside / "secret.txt")
    monkeypatch.setenv(corpora.CORPUS_DIRS_ENV, f"{inside}{os.pathsep}{tmp_path / 'missing'}")
    assert corpora.folder_files() == ["0/ok.txt"]
    assert corpora.read_folder_file("0/ok.txt").text == "fine text\n" * 10
    for bad in ("0/link.txt", "0/../out/secret.txt", "1/ok.txt", "x/ok.txt", "0/data.bin", "0/..", "0/"):
        with pytest.raises(AttnInputError):
            corpora.read_folder_file(bad)


def test_stdlib_corpus_is_deterministic_source_text() -> None:
    a, b = corpora.stdlib_corpus(), corpora.stdlib_corpus()
    assert a == b
    assert "def " in a.text and "class " in a.text and len(a.text) > 100_000
    assert all(m in a.name for m in corpora.STDLIB_MODULES)


# ---------------------------------------------------------------------------- live runs through the page


def start(at: AppTest) -> Any:
    at.button(key="tr_run").click().run()
    no_errors(at)
    job = QUEUE.get(at.session_state["_tr_job"])
    assert job is not None
    return job


def test_live_run_curves_equal_attncore_and_are_kept(results, cache) -> None:
    at = run_app(PAGE, tr_var="standard,softmax1", tr_lr="0.003", tr_steps="20")
    no_errors(at)
    job = start(at)
    assert QUEUE.wait(job, 120) and job.state == "done", (job.state, job.error)
    at.run()
    no_errors(at)
    fig = figure(at, "tr-job")
    text = corpora.stdlib_corpus().text
    for rec, cfg in zip(job.records, make_configs(["standard", "softmax1"], [0.003], "tiny", 20, 0), strict=True):
        assert rec["config"] == cfg.to_dict()
        direct = train(cfg, text, device="cpu")  # seeded: the same curves
        (t,) = traces_named(fig, rec["label"])
        np.testing.assert_allclose(decode(t["x"]), direct.steps)
        np.testing.assert_allclose(decode(t["y"]), direct.val_loss, rtol=1e-5)
        np.testing.assert_allclose(rec["val_loss"], direct.val_loss, rtol=1e-5)
        assert f"**{rec['label']}**: final training loss {rec['final_train_loss']:.3f}, validation " \
               f"{rec['final_val_loss']:.3f} after 20 steps" in markdown_text(at)
        kept = json.loads((cache / f"{rec['id']}.json").read_text())
        assert kept["val_loss"] == rec["val_loss"] and kept["config"] == rec["config"]
    # the kept runs are listed for comparison; choosing them overlays their curves
    ids = [r["id"] for r in job.records]
    assert {view.record_name(r) for r in job.records} <= set(at.multiselect(key="tr_cmp").options)
    at.multiselect(key="tr_cmp").set_value(ids).run()
    no_errors(at)
    assert at.query_params["tr_cmp"] == ",".join(ids)
    fig = figure(at, "tr-compare")
    for rec, t in zip(job.records, fig["data"], strict=True):
        assert t["name"] == view.record_name(rec)
        np.testing.assert_allclose(decode(t["y"]), rec["val_loss"], rtol=1e-6)
    df = at.dataframe[-1].value
    assert list(df["final val loss"]) == [r["final_val_loss"] for r in job.records]
    # the time estimate now scales from this kept run (same size), by FLOPs
    est = jobs.estimate_seconds(make_configs(["standard", "softmax1"], [0.003], "tiny", 20, 0),
                                [{**r, "label": "x"} for r in jobs.list_runs()], 98)
    assert est is not None and est.reference_tokens_per_s == jobs.list_runs()[0]["tokens_per_s"]
    at.run()
    line = plan_caption(at)
    assert f"Estimated time: about {est.seconds:.0f} s" in line if est.seconds >= 1 else \
        "Estimated time: under 1 s" in line
    assert f"from your kept run {view.record_name(jobs.list_runs()[0])} " \
           f"({est.reference_tokens_per_s:,.0f} tokens/s)" in line


def test_divergence_is_shown_as_a_step_and_no_nan(results, cache) -> None:
    at = run_app(PAGE, tr_var="standard", tr_lr="10", tr_steps="40")
    job = start(at)
    assert QUEUE.wait(job, 120) and job.state == "done"
    (rec,) = job.records
    k = rec["diverged_at"]
    assert k is not None and k <= 40
    assert len(rec["batch_loss"]) == k - 1  # the curve stops before the step that diverged
    at.run()
    no_errors(at)
    assert f"**{rec['label']}**: diverged at step {k}" in markdown_text(at)
    (t,) = [t for t in figure(at, "tr-job")["data"]]
    assert t["name"] == f"{rec['label']} (diverged at step {k})"
    for arr in all_data(at):
        assert np.isfinite(arr).all()
    assert "nan" not in markdown_text(at).lower()


def test_two_sessions_queue_and_stop_keeps_what_was_trained(results, cache) -> None:
    first = run_app(PAGE, tr_var="standard", tr_size="small", tr_steps="900")
    second = run_app(PAGE, tr_var="gated", tr_steps="20")
    a = start(first)
    b = start(second)
    assert QUEUE.position(a) == 0 and QUEUE.position(b) == 1
    second.run()
    assert any("1 job ahead of it" in x for x in texts(second, "info")), texts(second, "info")
    # the first session sees its progress while the job runs
    while a.snapshot()["step"] < 3:
        assert a.active
        QUEUE.wait(a, 0.05)
    other_page = run_app("pages/1_Heatmaps.py")  # other pages answer while the job trains
    no_errors(other_page)
    assert a.active and figure(other_page, "weights")
    first.run()
    no_errors(first)
    assert first.get("progress")
    figure(first, "tr-live")
    first.button(key="tr_stop").click().run()
    assert QUEUE.wait(a, 120) and a.state == "cancelled"
    (rec,) = a.records
    assert rec["cancelled"] and 3 <= len(rec["batch_loss"]) < 900
    assert rec["val_loss"] and np.isfinite(rec["val_loss"]).all()  # what was trained is measured and kept
    assert (cache / f"{rec['id']}.json").is_file()
    assert QUEUE.wait(b, 120) and b.state == "done"
    first.run()
    no_errors(first)
    assert f"after {len(rec['batch_loss'])} steps (stopped)" in markdown_text(first)


# ---------------------------------------------------------------------------- the job runner itself


def tiny(steps: int, **kw: Any) -> TrainConfig:
    return TrainConfig(steps=steps, eval_every=max(1, steps // 4), warmup=0, **{**SIZES["tiny"], **kw})


def test_queue_cancel_a_waiting_job_and_two_positions(tmp_path) -> None:
    q = JobQueue(store=tmp_path)
    text = corpora.stdlib_corpus().text
    a = q.submit([tiny(100_000)], text, corpus="stdlib", device="cpu")
    b = q.submit([tiny(5)], text, corpus="stdlib", device="cpu")
    c = q.submit([tiny(5)], text, corpus="stdlib", device="cpu")
    while a.state != "running":
        q.wait(a, 0.02)
    assert (q.position(a), q.position(b), q.position(c)) == (0, 1, 2)
    q.cancel(b)  # waiting: never starts, nothing trained
    assert b.state == "cancelled" and q.position(c) == 1 and q.position(b) is None
    q.cancel(a)
    assert q.wait(a, 60) and q.wait(c, 60)
    assert b.records == [] and c.state == "done" and len(c.records) == 1
    assert a.records[0]["cancelled"] and len(list(tmp_path.glob("*.json"))) == 2


def test_queue_limit_and_bad_corpus_fail_plainly(tmp_path) -> None:
    q = JobQueue(store=tmp_path)
    with pytest.raises(AttnInputError, match="at least one variant"):
        q.submit([], "x", corpus="", device="cpu")
    job = q.submit([tiny(5)], "too short", corpus="short", device="cpu")
    assert q.wait(job, 60) and job.state == "failed" and "too short" in job.error


def test_a_full_queue_refuses_plainly(tmp_path) -> None:
    release = threading.Event()

    def blocked(cfg, text, **kw):  # stands in for train() so that jobs stay queued
        release.wait(60)
        return train(cfg, text, device="cpu")

    q = JobQueue(train_fn=blocked, store=tmp_path)
    text = corpora.stdlib_corpus().text
    queued = [q.submit([tiny(2)], text, corpus="stdlib", device="cpu") for _ in range(jobs.MAX_QUEUE)]
    with pytest.raises(AttnInputError, match=f"{jobs.MAX_QUEUE} training jobs are already queued"):
        q.submit([tiny(2)], text, corpus="stdlib", device="cpu")
    assert [q.position(j) for j in queued] == list(range(jobs.MAX_QUEUE))
    release.set()
    assert all(q.wait(j, 120) for j in queued)
    assert all(j.state == "done" for j in queued)


def test_unwritable_cache_folder_keeps_the_run_in_memory(tmp_path, monkeypatch) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    monkeypatch.setenv(jobs.CACHE_DIR_ENV, str(blocker / "runs"))
    job = QUEUE.submit([tiny(5)], corpora.stdlib_corpus().text, corpus="stdlib", device="cpu")
    assert QUEUE.wait(job, 60) and job.state == "done"
    (note,) = job.notes
    assert "could not be kept in the cache folder" in note and str(blocker / "runs") in note
    assert job.records[0]["id"] in [r["id"] for r in jobs.list_runs()]  # still listed on this server


def test_read_only_cache_folder_gives_a_plain_message(results, tmp_path, monkeypatch) -> None:
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        probe = ro / "probe"
        try:
            probe.write_text("x")
        except OSError:
            pass
        else:
            probe.unlink()
            pytest.skip("this user (root) can write into a read-only folder; see the next test")
        monkeypatch.setenv(jobs.CACHE_DIR_ENV, str(ro))
        at = run_app(PAGE, tr_var="standard", tr_steps="10")
        job = start(at)
        assert QUEUE.wait(job, 60) and job.state == "done"
        at.run()
        no_errors(at)
        assert any("could not be kept in the cache folder" in w for w in texts(at, "warning"))
        figure(at, "tr-job")  # the run is still shown
    finally:
        ro.chmod(0o700)


def test_full_cache_folder_gives_a_plain_message_and_the_run_is_shown(results, cache, monkeypatch) -> None:
    real_write = Path.write_text

    def full(self: Path, *args: Any, **kw: Any) -> int:
        if self.parent == cache:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_write(self, *args, **kw)

    monkeypatch.setattr(Path, "write_text", full)
    at = run_app(PAGE, tr_var="standard", tr_steps="10")
    job = start(at)
    assert QUEUE.wait(job, 60) and job.state == "done"
    at.run()
    no_errors(at)
    (w,) = [w for w in texts(at, "warning") if "could not be kept" in w]
    assert "No space left on device" in w
    assert list(cache.glob("*")) == []
    fig = figure(at, "tr-job")
    np.testing.assert_allclose(decode(fig["data"][0]["y"]), job.records[0]["val_loss"], rtol=1e-6)
    assert view.record_name(job.records[0]) in at.multiselect(key="tr_cmp").options


def test_estimate_scales_by_flops() -> None:
    cfg = make_configs(["standard"], [0.001], "small", 100, 0)
    ref = {"label": "r", "tokens_per_s": 1000.0, "config": make_configs(["standard"], [0.001], "tiny", 10, 0)[0]
           .to_dict(), "vocab_size": 65}
    est = jobs.estimate_seconds(cfg, [ref], 65)
    tokens = 100 * 16 * 64
    expect = tokens * jobs.flops_per_token(cfg[0], 65) / (1000.0 * jobs.flops_per_token(ref["config"], 65))
    assert est is not None and est.tokens == tokens and est.seconds == pytest.approx(expect)
    assert jobs.estimate_seconds(cfg, [], 65) is None


def test_record_names_are_unique_and_readable(results) -> None:
    run = results["lr_sweep"]["runs"][0]
    rec = {**run, "id": "20260101-000000-abcdef-0", "label": "standard · lr 0.001", "batch_loss": [1.0] * 6,
           "created_utc": "2026-01-01T00:00:00+00:00"}
    assert view.record_name(rec) == "standard · lr 0.001 · 1×16 · 6 steps · 00:00 UTC · abcdef-0"
    assert re.fullmatch(r"[A-Za-z0-9-]+", rec["id"])


def test_incomplete_or_malformed_result_files_give_plain_notes(tiny_results, tmp_path, cache,
                                                               monkeypatch) -> None:
    for name in RESULT_NAMES:
        d = json.loads((tiny_results / f"{name}.json").read_text())
        if name == "lr_sweep":  # still being written: no table, no verdict yet
            d = {k: v for k, v in d.items() if k not in ("best", "table", "summary", "claim", "finding")}
            d["complete"] = False
        if name == "scaling":
            del d["table"]
        (tmp_path / f"{name}.json").write_text(json.dumps(d))
    monkeypatch.setattr(training_io, "RESULTS_DIR", tmp_path)
    at = run_app(PAGE)
    no_errors(at)
    assert any("still running (6 runs so far)" in x for x in texts(at, "info")), texts(at, "info")
    assert any("scaling.json is not in the form this page reads" in w for w in texts(at, "warning"))
    figure(at, "tr-streaming")  # the intact one is still drawn
    (tmp_path / "sinks.json").unlink()
    at = run_app(PAGE)
    no_errors(at)
    assert any("no result file for sinks" in w for w in texts(at, "warning"))
