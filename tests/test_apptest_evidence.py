"""AppTest: the Evidence page. Every control changed (the two filters, from the widgets and from the URL, and
the sidebar's seed), the overview chart and the table equal attncore.evidence's numbers, and every row's
link opens its view with the state it names."""

from __future__ import annotations

import ast
import re
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from attncore.evidence import CLAIMS, SOURCES, VERDICTS, Judgement, Measurement, Row, Setting, evaluate
from tests.chart_data import ROOT, decode, figure, no_errors, page_device, run_app
from ui.nav import PAGES
from ui.text import plain
from ui.views import evidence as view

pytestmark = pytest.mark.usefixtures("one_torch_thread")

PAGE = "pages/7_Evidence.py"
TIMED = {"flash_speed", "flash_memory"}  # not reproducible from run to run


def rows(seed: int = 0) -> tuple[Row, ...]:
    """Every claim judged on the device a page computes on now (keyed by it: a test run that changes
    ATTNCORE_DEVICE before this is first called must not leave one device's rows for another's page)."""
    return _rows(seed, page_device())


@lru_cache(maxsize=4)
def _rows(seed: int, device: str) -> tuple[Row, ...]:
    return tuple(evaluate(c, Setting(device=device, seed=seed)) for c in CLAIMS)


def table(at: AppTest) -> Any:
    assert len(at.table) == 1, [t.value for t in at.table]
    return at.table[0].value


def keys_shown(at: AppTest) -> list[str]:
    """The claims in the page's table (in CLAIMS order), each row identified by its quote and its test (two
    rows can quote the same sentence: the live 1,024-token StreamingLLM row and the shipped 2,048-token one)."""
    df = table(at)
    shown = set()
    for claim_cell, test_cell in zip(df["claim and verdict"], df["tested by"], strict=True):
        match = [c.key for c in CLAIMS if f"“{plain(c.quote)}”" in claim_cell and plain(c.test) in test_cell]
        assert len(match) == 1, (match, claim_cell[:120])
        shown.add(match[0])
    return [c.key for c in CLAIMS if c.key in shown]


def untimed(keys: list[str]) -> list[str]:
    """The keys whose verdicts do not depend on this run's timings."""
    return [k for k in keys if k not in TIMED]


def verdicts_shown(at: AppTest) -> list[str]:
    """The verdict badge of each row of the page's table."""
    out = []
    for cell in table(at)["claim and verdict"]:
        m = re.match(r":\w+-badge\[([^\]]+)\]", cell)
        assert m, cell
        out.append(m.group(1))
    return out


def summary_line(at: AppTest) -> str:
    found = [m.value for m in at.markdown if m.value.startswith("**All five texts:**")]
    assert len(found) == 1
    return found[0]


@pytest.fixture(scope="module")
def default() -> AppTest:
    at = run_app(PAGE, timeout=900)
    no_errors(at)
    return at


def test_default_view_lists_every_claim_with_attncores_verdicts(default: AppTest) -> None:
    df = table(default)
    assert len(df) == len(CLAIMS) >= 30
    for (_, cell), r in zip(df.iterrows(), rows(), strict=True):
        assert f"“{plain(r.claim.quote)}”" in cell["claim and verdict"]
        assert f"]({view.link(r.claim.key)})" in cell["claim and verdict"]
        if r.claim.key not in TIMED:
            assert cell["claim and verdict"].startswith(f":{view.BADGES[r.judgement.verdict]}-badge[{r.judgement.verdict}]")
            assert cell["measured here"].endswith(plain(r.measured)), r.claim.key
            assert cell["caveat"] == plain(r.judgement.caveat)
            assert plain(r.claim.tolerance) in cell["tested by"]
    assert set(verdicts_shown(default)) <= set(VERDICTS)
    as_shown = [Row(c, Measurement(), "", Judgement(v, ""), 0.0) for c, v in zip(CLAIMS, verdicts_shown(default),
                                                                                  strict=True)]
    line = summary_line(default)
    assert line == (f"**All five texts:** {view.summary(as_shown)} A claim that several texts make counts once here "
                    "and under each text in the chart."), line
    assert any(b.label == "Download the table (CSV)" for b in default.get("download_button"))


def test_overview_chart_counts_equal_attncores_verdicts(default: AppTest) -> None:
    fig = figure(default, "ev-verdicts")
    # the page's own verdicts (the timing rows' may differ from this process's run), attncore's elsewhere
    shown = verdicts_shown(default)
    for r, v in zip(rows(), shown, strict=True):
        assert r.claim.key in TIMED or v == r.judgement.verdict, r.claim.key
    by = {s: dict.fromkeys(VERDICTS, 0) for s in SOURCES}
    for c, v in zip(CLAIMS, shown, strict=True):
        for s in c.sources:
            by[s][v] += 1
    labels = [SOURCES[s].short for s in reversed(list(SOURCES))]
    assert [t["name"] for t in fig["data"]] == list(VERDICTS)
    for t in fig["data"]:
        assert list(t["y"]) == labels
        got = decode(t["x"]).astype(int).tolist()
        assert got == [by[s][t["name"]] for s in reversed(list(SOURCES))], t["name"]
    total = sum(int(np.sum(decode(t["x"]))) for t in fig["data"])
    assert total == sum(len(c.sources) for c in CLAIMS)


def test_filters_from_the_widgets_follow_the_url_and_the_rows(default: AppTest) -> None:
    at = default
    assert at.pills(key="ev_src").value == []  # none chosen: all five
    at.pills(key="ev_src").set_value(["graphcore"]).run()  # one click: one source
    no_errors(at)
    want = [r.claim.key for r in rows() if "graphcore" in r.claim.sources]
    assert keys_shown(at) == want and len(want) >= 5
    assert at.query_params["ev_src"] == "graphcore"
    assert f"**Shown:** {view.summary([r for r in rows() if r.claim.key in want])}" in summary_line(at)
    # verdict filter on top: Graphcore has no misprint
    at.multiselect(key="ev_v").set_value(["misprint"]).run()
    no_errors(at)
    assert len(at.table) == 0 and any("No claim matches" in i.value for i in at.info)
    assert at.query_params["ev_v"] == "misprint"
    # every source again: the two misprints of the "Why √d" tutorial
    at.pills(key="ev_src").set_value([]).run()
    assert untimed(keys_shown(at)) == [r.claim.key for r in rows() if r.judgement.verdict == "misprint in the source"]
    assert "ev_src" not in at.query_params  # the default (none chosen: all) is left out of the URL
    at.pills(key="ev_src").set_value(list(SOURCES)).run()  # every source chosen: the same rows
    assert untimed(keys_shown(at)) == [r.claim.key for r in rows() if r.judgement.verdict == "misprint in the source"]
    # an empty selection means all
    at.multiselect(key="ev_v").set_value([]).run()
    assert len(table(at)) == len(CLAIMS)


@pytest.mark.parametrize(("query", "check"), [
    ({"ev_v": "fails,untestable"}, lambda r: r.judgement.verdict in ("does not hold here", "not testable here")),
    ({"ev_src": "d2l,sdpa", "ev_v": "holds"},
     lambda r: bool({"d2l", "sdpa"} & set(r.claim.sources)) and r.judgement.verdict == "holds"),
    ({"ev_src": "notes"}, lambda r: "notes" in r.claim.sources),
])
def test_filters_from_the_url(query: dict[str, str], check: Any) -> None:
    at = run_app(PAGE, timeout=900, **query)
    no_errors(at)
    assert untimed(keys_shown(at)) == untimed([r.claim.key for r in rows() if check(r)])
    for k, v in query.items():
        assert at.query_params[k] == v


def test_a_bad_url_value_is_a_plain_notice_and_the_default() -> None:
    at = run_app(PAGE, timeout=900, ev_v="perhaps,[x](http://evil)")
    no_errors(at)
    assert any("ev_v" in w.value for w in at.warning)
    assert len(table(at)) == len(CLAIMS)


def test_seed_changes_the_live_rows_and_only_them(default: AppTest) -> None:
    at = run_app(PAGE, timeout=900, seed="1")
    no_errors(at)
    df, base = table(at), table(default)
    for i, (r0, r1) in enumerate(zip(rows(0), rows(1), strict=True)):
        if r0.claim.key in TIMED:
            continue
        assert df["measured here"].iloc[i].endswith(plain(r1.measured)), r1.claim.key
    changed = {c.key for i, c in enumerate(CLAIMS) if df["measured here"].iloc[i] != base["measured here"].iloc[i]}
    assert {"xy_variance", "dot_variance", "underscaled", "entropy_grows"} <= changed
    # exact and shipped rows do not draw anything
    assert not changed & {"peaked_example", "scaled_example", "saturation", "sharp_needs_log_n", "fully_scaled_worse"}


# --------------------------------------------------------------------------- links into the views


def param_names(script: str) -> set[str]:
    """URL names of every Param a page declares (read from its source), plus the shared sidebar's."""
    names = {"device", "seed", "dtype", "present"}
    for node in ast.walk(ast.parse((ROOT / script).read_text())):
        if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "Param" and node.args and \
                isinstance(node.args[0], ast.Constant):
            names.add(node.args[0].value)
    return names


def test_every_link_names_a_page_and_its_own_parameters() -> None:
    pages = {e.path for e in PAGES}
    assert set(view.LINKS) == {c.key for c in CLAIMS}
    for key, (script, query) in view.LINKS.items():
        assert script in pages, key
        unknown = set(query) - param_names(script)
        assert not unknown, (key, unknown)
        assert view.link(key).startswith("/" + Path(script).stem.split("_", 1)[1]), key


UNIQUE_LINKS = sorted({(s, tuple(sorted(q.items()))) for s, q in view.LINKS.values() if q})


@pytest.mark.parametrize(("script", "query"), UNIQUE_LINKS, ids=[f"{Path(s).stem}:{dict(q)}" for s, q in UNIQUE_LINKS])
def test_each_link_opens_its_view_with_that_state(script: str, query: tuple[tuple[str, str], ...]) -> None:
    at = run_app(script, timeout=900, **dict(query))
    assert not at.exception, [e.value for e in at.exception]
    notes = [w.value for w in at.warning if "URL value" in w.value or "limit" in w.value or "not one of" in w.value]
    assert not notes, notes
    for k, v in query:
        got = at.session_state[k]
        if isinstance(got, (list, tuple)):
            assert list(got) == v.split(","), (k, got, v)
        elif isinstance(got, bool):
            assert got == (v == "1"), (k, got, v)
        elif isinstance(got, (int, float)):
            assert got == pytest.approx(float(v)), (k, got, v)
        else:
            assert got == v, (k, got, v)


def test_a_new_tab_draws_the_chart_and_table_once_when_the_slow_rows_are_measured(
        default: AppTest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 34: the fast rows are drawn before the slower claims only while this server has not measured
    them yet; a new session (tab) at a measured setting draws the chart and the table once (every new tab
    drew both twice: the first time without the slower rows)."""
    from ui import cached_results

    calls: list[int] = []
    real = view.verdict_figure
    monkeypatch.setattr(view, "verdict_figure", lambda rows: calls.append(len(rows)) or real(rows))
    at = run_app(PAGE, timeout=900)  # a second session: the slower rows come from the server's cache
    no_errors(at)
    assert calls == [len(CLAIMS)]
    assert len(table(at)) == len(CLAIMS)
    calls.clear()
    cached_results.evidence_slow_measured().clear()  # as on a fresh server: the fast rows first, then every row
    no_errors(run_app(PAGE, timeout=900))
    assert calls == [len([c for c in CLAIMS if not c.slow]), len(CLAIMS)]
