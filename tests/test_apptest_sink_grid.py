"""AppTest: the sink experiment over settings in the Training lab's tab "4 · A sink forms": the map's
numbers, the verdict and the picked cell's curves equal attncore.training.sink_verdicts' on the file (the
shipped snapshot, and a counterfactual partial grid written here), the cell controls and the URL."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import attncore.training.io as training_io
from attncore.training.io import load_result
from attncore.training.null_attention import summarise
from attncore.training.sink_grid import FILE, load_grid
from attncore.training.sink_verdicts import Setting, sink_claims, streaming_claim_sentence
from tests.chart_data import decode, figure, no_errors, run_app
from tests.test_sink_verdicts import NONE, SINK, VARIANTS, grun
from ui import sink_grid as section
from ui.views import sink_grid as view
from ui.views.training import TAB_TITLES

LAB = "pages/6_Training_lab.py"

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def md(at: Any) -> str:
    return "\n".join(m.value for m in at.markdown)


def check_grid(at: Any, claims: Any) -> None:
    """The map's cells, colours and labels are the rules' numbers."""
    fig = figure(at, "sk-grid")
    rows, cols = view.axes(claims.cells)
    assert fig["layout"]["meta"]["rows"] == rows and fig["layout"]["meta"]["cols"] == [s.key() for s in cols]
    by = {(c.label, c.setting): c for c in claims.cells}
    z = np.array(decode(fig["data"][0]["z"]), dtype=float).reshape(len(rows), len(cols))  # blanks: None
    text = fig["data"][0]["text"]
    for i, r in enumerate(rows):
        for j, s in enumerate(cols):
            c = by.get((r, s))
            if c is None or not c.learned or c.end["mean"] is None:
                assert np.isnan(z[i, j]) and fig["layout"]["meta"]["z"][i][j] is None
            else:
                assert z[i, j] == pytest.approx(c.end["mean"], rel=1e-9)
            if c is not None:
                assert text[i][j] == view.cell_text(c)
    assert section.verdict_text(claims) in md(at) and section.details_text(claims) in md(at)


def check_cell(at: Any, claims: Any, label: str, setting: Setting) -> None:
    """The picked cell's chart: one line per seed equal to its BOS-weight curve."""
    cell = next(c for c in claims.cells if (c.label, c.setting) == (label, setting))
    fig = figure(at, "sk-grid-cell")
    assert fig["layout"]["meta"]["label"] == label and fig["layout"]["meta"]["setting"] == setting.key()
    seeds = [t for t in fig["data"] if str(t.get("name", "")).startswith("seed ")]
    assert len(seeds) == len(cell.per_seed)
    for t, f in zip(seeds, cell.per_seed, strict=True):
        np.testing.assert_allclose(decode(t["x"]), f["steps"])
        np.testing.assert_allclose(decode(t["y"]), [np.nan if v is None else v for v in f["curve"]], rtol=1e-6)
        assert t["name"].startswith(f"seed {f['seed']}: ")


def test_the_shipped_grid_and_its_verdicts() -> None:
    header, runs = load_grid()
    null = load_result("null_attention")
    claims = sink_claims(header, runs, null)
    at = run_app(LAB, timeout=600, tr_tab=TAB_TITLES["null_attention"])
    no_errors(at)
    check_grid(at, claims)
    text = md(at)
    soft = summarise(null["runs"])["softmax"]
    assert streaming_claim_sentence(soft, null["sizes"]["window"]) in text
    assert "The toy does not reproduce StreamingLLM's claim" in text
    assert "**At the shipped setting** (rotary, lr 0.01, 600 steps). " in text
    default = Setting("rotary", 1e-3, 1200)
    cell = next(c for c in claims.cells if (c.label, c.setting) == ("softmax1", default))
    if cell.seeds:
        check_cell(at, claims, "softmax1", default)
    ran = sum(c.n_run for c in claims.cells if c.source == "grid")
    prov = [c.value for c in at.caption if c.value.startswith("The grid: ")]
    assert prov and prov[0].startswith(f"The grid: {ran} of its 54 runs so far, made by `python -m "
                                       "attncore.training.sink_grid")


@pytest.fixture()
def partial_results(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The shipped results with a partial grid written here: seed 0 of every cell and seeds 1, 2 of the
    rotary ones at 1e-3; softmax1 keeps a sink with learned positions at lr 0.01."""
    out = tmp_path / "results"
    shutil.copytree(training_io.RESULTS_DIR, out, ignore=shutil.ignore_patterns(FILE))
    header = {"kind": "header", "experiment": "sink_grid", "command": "python -m attncore.training.sink_grid "
              "--out here", "machine": "a test", "git_commit": "0123456789abc", "started": "today",
              "grid": {"base": {"steps": 1200}, "lrs": [0.001, 0.003, 0.01], "positions": ["rotary", "learned"],
                       "variants": VARIANTS, "seeds": [0, 1, 2]}}
    runs = []
    for s in range(3):
        for pos in ("rotary", "learned"):
            for lr in (0.001, 0.003, 0.01):
                if s and (pos, lr) != ("rotary", 0.001):
                    continue
                for v in ("standard", "softmax1", "sink_logit"):
                    keep = v == "standard" or (v, pos, lr) == ("softmax1", "learned", 0.01)
                    runs.append(grun(v, s, lr, pos, SINK if keep else NONE, steps=1200))
    lines = [json.dumps(header)] + [json.dumps(r) for r in runs]
    (out / FILE).write_text("\n".join(lines) + "\n" + lines[-1][:40], encoding="utf-8")  # a cut-off last line
    monkeypatch.setattr(training_io, "RESULTS_DIR", out)
    return out


def test_a_partial_counterfactual_grid_and_the_cell_controls(partial_results: Path) -> None:
    header, runs = load_grid(partial_results / FILE)
    claims = sink_claims(header, runs, load_result("null_attention", partial_results))
    assert claims.fixes.kind == "some"
    at = run_app(LAB, timeout=600, tr_tab=TAB_TITLES["null_attention"], sk_gvar="softmax1", sk_gset="learned_0.01_1200")
    no_errors(at)
    check_grid(at, claims)
    text = md(at)
    assert "Kept: softmax1 at learned, lr 0.01, 1,200 steps (a sink in 1 of 1 seed, 1 of 3 seeds run" in text
    assert "The grid is partial: 24 of the 54 runs of softmax, softmax1, sink logit b₀=0 so far" in text
    check_cell(at, claims, "softmax1", Setting("learned", 0.01, 1200))
    (cap,) = [c.value for c in at.caption if c.value.startswith("softmax1 at learned, lr 0.01, 1,200 steps, 1 of 3")]
    assert "seed 0: end weight 0.800, a sink." in cap
    # the cell controls: another setting, the URL follows
    at.selectbox(key="sk_gset").set_value("learned_0.003_1200").run()
    no_errors(at)
    check_cell(at, claims, "softmax1", Setting("learned", 0.003, 1200))
    assert at.query_params.get("sk_gset") in ("learned_0.003_1200", ["learned_0.003_1200"])
    at.selectbox(key="sk_gset").set_value("rotary_0.001_1200").run()  # the default leaves the URL
    check_cell(at, claims, "softmax1", Setting("rotary", 0.001, 1200))
    assert "sk_gset" not in at.query_params
    at.selectbox(key="sk_gvar").set_value("gated").run()  # gated ran only at the shipped setting
    no_errors(at)
    assert any("gated at rotary, lr 0.001, 1,200 steps: this variant was not trained at this setting" in i.value
               for i in at.info)
    at.selectbox(key="sk_gset").set_value("rotary_0.01_600").run()
    check_cell(at, claims, "gated", Setting("rotary", 0.01, 600))
    at.selectbox(key="sk_gvar").set_value("softmax").run()
    at.selectbox(key="sk_gset").set_value("learned_0.003_1200").run()
    no_errors(at)
    check_cell(at, claims, "softmax", Setting("learned", 0.003, 1200))


def test_the_grid_table_shows_a_dash_where_a_cell_has_no_number() -> None:
    """Issue 44 item 10: a cell without a number (not learned, diverged, not run) reads "—" in the table,
    never "None" (st.dataframe prints a null as "None" whatever its Styler, so those columns are text); its
    status says why. Checked on the shipped grid and on a counterfactual with no runs."""
    import pyarrow as pa

    header, runs = load_grid()
    claims = sink_claims(header, runs, load_result("null_attention"))
    empty = sink_claims(header, [], load_result("null_attention"))  # every grid cell "not run"
    for cells in (claims.cells, empty.cells):
        frame, shown = view.grid_frame(cells), view.grid_table(cells)
        assert not shown.isna().any().any()
        pa.Table.from_pandas(shown)  # one type per column
        for col, fmt in view.GRID_FORMATS.items():
            for v, cell, status in zip(frame[col], shown[col], frame["status"], strict=True):
                if v is None or (isinstance(v, float) and np.isnan(v)):
                    assert cell == "—" and status in ("not run", "diverged", "not learned"), (col, status)
                else:
                    assert cell == fmt.format(v)
    assert (view.grid_frame(empty.cells)["status"] == "not run").any()
    assert set(view.GRID_CONFIG) == set(view.GRID_FORMATS)
