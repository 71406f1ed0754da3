"""AppTest: a sink that forms in training, on its two pages.

The Training lab's tab "4 · A sink forms" (the shipped null_attention result: charts equal
:func:`attncore.training.null_attention.summarise` and the models' own maps; live runs of the task
through the real queue, equal to a direct call of ``train_and_test``; bad corpora, bounds, divergence
and Stop) and the Attention sinks page's part "a sink learned here" (maps and weights on BOS equal
:func:`attncore.training.bbm.sequence_view`; every control). The result files are made here by the
real command at ``--scale tiny`` (seconds).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from streamlit.testing.v1 import AppTest

import attncore.training.io as training_io
from attncore.synthetic import make_generator
from attncore.training import bbm_train as bbm_train_mod
from attncore.training import load_result
from attncore.training.bbm import BigramBackcopy, bbm_label, eval_sequences, sequence_view
from attncore.training.experiments import main as experiments_main
from attncore.training.null_attention import SHIPPED, shipped_model, shipped_task, summarise, train_and_test
from attncore.training.null_verdicts import verdicts
from tests import test_apptest_training as training_tests
from tests.chart_data import all_data, decode, figure, figures, no_errors, run_app, traces_named
from ui import corpus as corpora
from ui import learned
from ui.jobs import QUEUE
from ui.learned import MAPS_OPEN
from ui.views import learned_sinks as view
from ui.views.training import TAB_TITLES

LAB = "pages/6_Training_lab.py"
SINKS = "pages/4_Attention_sinks.py"
SHAKESPEARE = Path(__file__).resolve().parents[2] / "shared" / "data" / "tinyshakespeare.txt"
if not SHAKESPEARE.is_file():
    SHAKESPEARE = Path("/work/shared/data/tinyshakespeare.txt")

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def run_lab(**query: str) -> AppTest:
    """The Training lab with its tab "4 · A sink forms" open (only the open tab is drawn)."""
    return run_app(LAB, tr_tab=TAB_TITLES["null_attention"], **query)


cache = training_tests.cache  # fixture: runs are kept in a temporary folder
_queue_idle = training_tests._queue_idle  # autouse: every test leaves the process-wide queue idle


@pytest.fixture(scope="module")
def tiny_results(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("results")
    small = out / "small.txt"
    small.write_text(SHAKESPEARE.read_text(encoding="utf-8")[:30_000], encoding="utf-8")
    rc = experiments_main(["null_attention", "--out", str(out), "--scale", "tiny", "--corpus", str(small),
                           "--threads", "1", "--device", "cpu"])
    assert rc in (0, None)
    return out


@pytest.fixture()
def results(tiny_results: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    monkeypatch.setattr(training_io, "RESULTS_DIR", tiny_results)
    return load_result("null_attention", tiny_results)


def texts(at: AppTest, kind: str) -> list[str]:
    return [e.value for e in getattr(at, kind)]


def markdown_text(at: AppTest) -> str:
    return "\n".join(m.value for m in at.markdown)


# ---------------------------------------------------------------------------- the shipped tab


def test_sink_tab_charts_equal_the_summary_and_the_models(results, cache) -> None:
    at = run_lab()
    no_errors(at)
    sm = summarise(results["runs"])
    fig = figure(at, "sk-curves")
    for label, s in sm.items():
        lines = [t for t in traces_named(fig, label) if t.get("mode", "lines+markers") != "none"
                 and t.get("fill") is None]
        assert len(lines) == 2  # non-trigger and trigger panels
        for t, key in zip(lines, ("bos_other_curve", "bos_trigger_curve"), strict=True):
            np.testing.assert_allclose(decode(t["x"]), s["curves"][key]["steps"])
            np.testing.assert_allclose(decode(t["y"]), s["curves"][key]["mean"], rtol=1e-6)
        bands = [t for t in traces_named(fig, label) if t.get("fill") == "toself"]
        c = s["curves"]["bos_other_curve"]
        np.testing.assert_allclose(decode(bands[0]["y"]), [*c["max"], *c["min"][::-1]], rtol=1e-6)
    nowhere = figure(at, "sk-nowhere")
    np.testing.assert_allclose(decode(nowhere["data"][0]["y"]), [s["nowhere_other"]["mean"] for s in sm.values()],
                               rtol=1e-5, atol=1e-7)
    value = figure(at, "sk-value")
    np.testing.assert_allclose(decode(value["data"][0]["y"]), [s["value_ratio"]["mean"] for s in sm.values()],
                               rtol=1e-5)
    gate = figure(at, "sk-gate")
    g = sm["gated"]
    np.testing.assert_allclose(decode(gate["data"][0]["y"]), [g["gate_other"]["mean"], g["gate_trigger"]["mean"]],
                               rtol=1e-5)
    # every shipped model's head on the first held-out sequence
    task = shipped_task()
    ids = eval_sequences(task, results["sizes"]["config"]["context"], n=1)[0, :-1]
    # the seven maps are computed and sent only once their expander is opened
    assert "sk-maps" not in [(f["layout"].get("meta") or {}).get("view") for f in figures(at)]
    at.session_state[MAPS_OPEN] = True
    at.run()
    no_errors(at)
    maps = figure(at, "sk-maps")
    heat = [t for t in maps["data"] if t["type"] == "heatmap"]
    for t, name in zip(heat, SHIPPED, strict=True):
        w = sequence_view(shipped_model(name), task, ids).weights[0, 0].numpy()
        np.testing.assert_allclose(decode(t["z"]), np.asarray(w), rtol=1e-5, atol=1e-7)
    trig = [i for i, r in enumerate(task.roles(ids[None])[0].tolist()) if r == 2]
    marks = [t for t in maps["data"] if t["type"] == "scatter"]
    assert len(marks) == len(SHIPPED) and all(list(decode(t["y"])) == trig for t in marks)
    # the verdicts and the table are the attncore functions' own output
    judged = verdicts(sm, results["sizes"]["window"])
    md = markdown_text(at)
    assert "**At the shipped setting** (rotary, lr 0.01, 6 steps). " + judged["overall"][0] in md
    assert view.measured_text(sm) in md
    for label, lines in judged.items():
        if label != "overall":
            for line in lines:
                assert line in md, line
    table = [df.value for df in at.dataframe if "sink seeds" in df.value.columns][0]
    assert list(table["variant"]) == list(sm)
    assert list(table["sink seeds"]) == [f"{s['n_sink']}/{s['n']}" for s in sm.values()]
    # every column the table shows is explained under it: 'sink share' is Gu et al.'s metric, not the verdicts'
    (key,) = [c for c in texts(at, "caption") if c.startswith("Sink share: ")]
    assert "exceeds 0.3: Gu et al.'s metric" in key and "non-trigger positions' weight instead" in key
    for label, s in sm.items():
        shown = table.loc[table["variant"] == label, "sink share"].iloc[0]
        assert abs(float(shown.split("±")[0]) - s["sink_share"]["mean"]) <= 0.005, (label, shown)
    # the file and the provenance line name the seeds the runs used (tiny: 2), not the command's --seeds
    assert results["seeds"] == sorted({r["config"]["seed"] for r in results["runs"]}) == [0, 1]
    (line,) = [c for c in texts(at, "caption") if c.startswith("Made by `python -m attncore.training.experiments "
                                                                   "null_attention")]
    assert "seeds 0, 1." in line and "Models: 1 layer, 1 head," in line, line


# ---------------------------------------------------------------------------- live runs


def plan(at: AppTest) -> str:
    (line,) = [c for c in texts(at, "caption") if "training tokens of the task built from" in c]
    return line


def test_live_controls_change_the_plan_and_the_url(results, cache) -> None:
    at = run_lab()
    no_errors(at)
    assert plan(at).startswith("2 runs × 600 steps = 4,915,200 training tokens")  # softmax and softmax1
    at.multiselect(key="sk_vars").set_value(["standard", "sink_logit", "relu"]).run()
    at.number_input(key="sk_seeds").set_value(2).run()
    at.slider(key="sk_steps").set_value(100).run()
    at.number_input(key="sk_b0").set_value(-3.0).run()
    at.slider(key="sk_layers").set_value(2).run()
    at.selectbox(key="sk_heads").set_value("2").run()
    at.selectbox(key="sk_lr").set_value("0.003").run()
    no_errors(at)
    assert plan(at).startswith("6 runs × 100 steps = 2,457,600 training tokens")
    q = at.query_params
    assert q["sk_vars"] == "standard,sink_logit,relu" and q["sk_seeds"] == "2" and q["sk_steps"] == "100"
    assert q["sk_b0"] == "-3" and q["sk_layers"] == "2" and q["sk_heads"] == "2" and q["sk_lr"] == "0.003"
    configs = learned.live_configs({"variants": ["standard", "sink_logit", "relu"], "b0": -3.0, "seeds": 2,
                                    "steps": 100, "layers": 2, "heads": 2, "lr": 0.003}, 0)
    assert [c.sink_init for c in configs] == [0.0, -3.0, 0.0] * 2 and [c.seed for c in configs] == [0] * 3 + [1] * 3
    assert {c.n_layer for c in configs} == {2} and {c.n_head for c in configs} == {2}
    assert not at.button(key="sk_run").disabled
    took = [r["wall_s"] + r["test_s"] for r in results["runs"]]
    assert f"The shipped runs (this size, 6 steps) took {min(took):.0f}–{max(took):.0f} s each" in markdown_text(at)


def test_bad_input_gives_plain_messages(results, cache, tmp_path, monkeypatch) -> None:
    folder = tmp_path / "corpora"
    folder.mkdir()
    (folder / "two.txt").write_text("ab" * 5000, encoding="utf-8")
    monkeypatch.setenv(corpora.CORPUS_DIRS_ENV, str(folder))
    at = run_lab(tr_corpus="folder")
    no_errors(at)
    assert any("the Bigram-Backcopy task needs at least 4" in w for w in texts(at, "warning")), texts(at, "warning")
    assert at.button(key="sk_run").disabled
    # out-of-range URL values are clamped, with a notice
    at = run_lab(sk_steps="99999", sk_seeds="0", sk_layers="9")
    no_errors(at)
    assert at.slider(key="sk_steps").value == 2000 and at.number_input(key="sk_seeds").value == 1
    assert at.slider(key="sk_layers").value == 3
    # too much work for one Run: refused before it starts
    at = run_lab(sk_vars="standard,softmax1,sink_logit,sigmoid,gated,relu", sk_seeds="5", sk_steps="2000",
                 sk_layers="3")
    no_errors(at)
    assert any("one Run may take at most" in w for w in texts(at, "warning"))
    assert at.button(key="sk_run").disabled
    at = run_lab(sk_vars="")
    assert any("Pick at least one variant" in w for w in texts(at, "warning"))


def start(at: AppTest) -> Any:
    at.button(key="sk_run").click().run()
    no_errors(at)
    job = QUEUE.get(at.session_state[learned.JOB_KEY])
    assert job is not None
    return job


def test_live_run_equals_attncore_and_is_kept(results, cache) -> None:
    at = run_lab(sk_vars="standard", sk_steps="50")
    job = start(at)
    assert QUEUE.wait(job, 300) and job.state == "done", (job.state, job.error)
    at.run()
    no_errors(at)
    (rec,) = job.records
    cfg = learned.live_configs({"variants": ["standard"], "b0": 0.0, "seeds": 1, "steps": 50, "layers": 1,
                                "heads": 1, "lr": 0.01}, 0)[0]
    assert rec["config"] == cfg.to_dict() and rec["label"] == bbm_label(cfg) and rec["task"] == "bbm"
    direct = train_and_test(cfg, corpora.stdlib_corpus().text, device="cpu")
    (t,) = traces_named(figure(at, "sk-job"), rec["label"])
    np.testing.assert_allclose(decode(t["x"]), direct.result.steps)
    np.testing.assert_allclose(decode(t["y"]), [p["bos_other"][0][0] for p in direct.result.probes], rtol=1e-4,
                               atol=1e-6)
    assert rec["ablation"]["bigram_delta"] == pytest.approx(direct.ablation["bigram_delta"], rel=1e-3, abs=1e-5)
    assert (cache / f"{rec['id']}.json").is_file()
    md = markdown_text(at)
    best = rec["probes"][-1]["bos_other"][0][0]
    assert f"**{rec['label']}**: after 50 steps, weight on BOS from non-trigger positions {best:.3f}" in md
    one = verdicts(summarise([rec]), 16)
    assert "**What these runs show.** " + one["overall"][0] in md
    assert one["softmax"][0] in md


def test_divergence_stops_the_curve_and_no_nan(results, cache, monkeypatch) -> None:
    monkeypatch.setattr(bbm_train_mod, "divergence_threshold", lambda v: 0.0)
    at = run_lab(sk_vars="relu", sk_steps="50")
    job = start(at)
    assert QUEUE.wait(job, 120) and job.state == "done"
    (rec,) = job.records
    assert rec["diverged_at"] == 1 and rec["ablation"] is None
    at.run()
    no_errors(at)
    assert f"**{rec['label']}**: diverged at step 1; its curve stops there" in markdown_text(at)
    (t,) = traces_named(figure(at, "sk-job"), f"{rec['label']} (diverged at step 1)")
    assert list(decode(t["x"])) == [0]
    for arr in all_data(at):
        assert np.isfinite(arr).all()
    assert "nan" not in markdown_text(at).lower()


def test_stop_mid_run_keeps_what_was_trained(results, cache) -> None:
    at = run_lab(sk_vars="standard", sk_steps="2000")
    job = start(at)
    while job.snapshot()["step"] < 30:
        assert job.active, (job.state, job.error)
        QUEUE.wait(job, 0.05)
    at.run()
    no_errors(at)
    assert at.get("progress")
    live = figure(at, "sk-live")
    assert len(decode(live["data"][0]["x"])) >= 1  # the evaluation points so far (every 166 steps: step 0 too)
    at.button(key="sk_stop").click().run()
    assert QUEUE.wait(job, 120) and job.state == "cancelled"
    (rec,) = job.records
    assert rec["cancelled"] and 30 <= len(rec["batch_loss"]) < 2000 and rec["ablation"] is None
    assert (cache / f"{rec['id']}.json").is_file()
    at.run()
    no_errors(at)
    assert "Stopped: 1 of 1 runs kept" in " ".join(texts(at, "caption"))
    assert "(stopped)" in markdown_text(at)


# ---------------------------------------------------------------------------- Attention sinks: learned here


def test_learned_part_equals_the_models_on_the_sequence(results) -> None:
    at = run_app(SINKS, snk_view="learned")
    no_errors(at)
    task = shipped_task()
    ids = task.sample(1, 64, make_generator(0))[0]
    for key, name in (("soft", "softmax"), ("fix", "softmax1")):
        v = sequence_view(shipped_model(name), task, ids)
        fig = figure(at, f"snk-learned-{key}")
        np.testing.assert_allclose(decode(fig["data"][0]["z"]), np.asarray(v.weights[0, 0].numpy()), rtol=1e-5,
                                   atol=1e-7)
        assert fig["data"][0]["y"][0] == "0:BOS"
        trig = [lab for lab, r in zip(fig["data"][0]["y"], v.roles.tolist(), strict=True) if r == 2]
        assert trig and all(lab.endswith("▸") for lab in trig)
        (t,) = [t for t in traces_named(figure(at, "sk-bospos"), name)]
        np.testing.assert_allclose(decode(t["y"]), v.bos[0, 0].numpy()[1:], rtol=1e-5, atol=1e-7)
    # the verdict over settings is the Training lab's (the same function of the same files)
    from attncore.training.sink_grid import load_grid
    from attncore.training.sink_verdicts import sink_claims

    claims = sink_claims(*load_grid(), results)
    assert learned.settings_note(claims) in markdown_text(at)
    assert "Both are seed 0 of the shipped run (rotary, lr 0.01, 6 steps): one setting." in markdown_text(at)
    metrics = {m.label: m.value for m in at.metric}
    v = sequence_view(shipped_model("softmax"), task, ids)
    other = v.roles.numpy() == 1
    assert metrics["softmax: on BOS from non-trigger"] == f"{v.bos[0, 0].double().numpy()[other].mean():.3f}"


def test_learned_part_controls(results) -> None:
    at = run_app(SINKS, snk_view="learned")
    at.selectbox(key="snk_lfix").set_value("relu").run()
    no_errors(at)
    task = shipped_task()
    ids = task.sample(1, 64, make_generator(0))[0]
    relu = sequence_view(shipped_model("relu"), task, ids)
    np.testing.assert_allclose(decode(figure(at, "snk-learned-fix")["data"][0]["z"]),
                               np.asarray(relu.weights[0, 0].numpy()), rtol=1e-5, atol=1e-7)
    assert at.query_params["snk_lfix"] == "relu"
    at.slider(key="snk_llen").set_value(100).run()
    no_errors(at)
    assert len(figure(at, "snk-learned-soft")["data"][0]["y"]) == 100
    at.number_input(key="seed").set_value(7).run()
    no_errors(at)
    seven = task.sample(1, 100, make_generator(7))[0]
    labels = view.seq_labels(task.chars(seven), task.roles(seven[None])[0].tolist())
    assert figure(at, "snk-learned-soft")["data"][0]["y"] == [f"{i}:{t}" for i, t in enumerate(labels)]
    at.radio(key="snk_lsrc").set_value("text").run()
    at.text_area(key="snk_ltext").input("Speak, speak! é").run()
    no_errors(at)
    ids, dropped = task.encode("Speak, speak! é")
    assert dropped == 1 and any("1 character outside the corpus's vocabulary was dropped" in c
                                for c in texts(at, "caption"))
    assert len(figure(at, "snk-learned-soft")["data"][0]["y"]) == len(ids)
    at.text_area(key="snk_ltext").input("ééé").run()
    assert any("type at least one character the corpus has" in e for e in texts(at, "error"))
    assert not at.exception
    at.text_area(key="snk_ltext").input("").run()  # F11: an empty box says what to type, as an info box
    no_errors(at)
    assert any("Type characters in the sidebar's box" in i for i in texts(at, "info")), texts(at, "info")


def test_missing_shipped_models_give_a_plain_message(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(training_io, "RESULTS_DIR", tmp_path)
    at = run_app(SINKS, snk_view="learned")
    no_errors(at)
    assert any("no shipped Bigram-Backcopy task" in w for w in texts(at, "warning")), texts(at, "warning")


def test_sequence_view_refuses_bad_sequences(results) -> None:
    task = shipped_task()
    m = shipped_model("softmax")
    with pytest.raises(Exception, match="starts with BOS"):
        sequence_view(m, task, torch.tensor([1, 2, 3]))
    other = BigramBackcopy.from_text("abcdefgh" * 10)
    with pytest.raises(Exception, match="vocabulary differs"):
        sequence_view(m, other, torch.tensor([other.bos, 1, 2]))


def test_learned_part_gated_caption_says_what_the_gate_does() -> None:
    """With the gated model beside softmax (the shipped models), the caption said 'gated sends -0.000 of the
    non-trigger positions' weight nowhere and -0.000 of the trigger positions' ... Its rows sum to 1 too':
    float32 noise printed as a signed zero, and a softmax head described as sending weight nowhere."""
    at = run_app(SINKS, snk_view="learned", snk_lfix="gated")
    no_errors(at)
    task = shipped_task()
    ids = task.sample(1, 64, make_generator(0))[0]
    v = sequence_view(shipped_model("gated"), task, ids)
    np.testing.assert_allclose(v.weights[0, 0].double().sum(-1).numpy(), 1.0, atol=1e-5)  # rows sum to 1
    roles = v.roles.numpy()
    g = v.gates[0, 0].double().numpy()
    (cap,) = [c for c in texts(at, "caption") if "gate" in c]
    assert cap == ("gated's weights are a softmax: its rows sum to 1 too, so no weight goes nowhere; instead "
                   f"its output gate scales what the head writes: {g[roles == 1].mean():.3f} at non-trigger "
                   f"positions and {g[roles == 2].mean():.3f} at trigger positions."), cap
    assert g[roles == 1].mean() < 0.01 < 0.5 < g[roles == 2].mean()  # closed where not needed (seed 0)
    assert not any("-0.000" in c or "gated sends" in c for c in texts(at, "caption"))
    # another variant keeps its sentence on the weight sent nowhere
    at.selectbox(key="snk_lfix").set_value("softmax1").run()
    sm1 = sequence_view(shipped_model("softmax1"), task, ids)
    now = sm1.nowhere[0, 0].numpy()
    assert any(c.startswith(f"softmax1 sends {now[roles == 1].mean():.3f} of the non-trigger positions' weight "
                            f"nowhere and {now[roles == 2].mean():.3f} of the trigger positions'.")
               for c in texts(at, "caption"))
