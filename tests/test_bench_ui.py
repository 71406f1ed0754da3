"""bench.ui's table without a browser: ratios, verdicts, the floor and before/now lines, n/a for what an
older commit lacks, and which pages a checkout has (no timing is measured or asserted here)."""

from __future__ import annotations

import math

import pytest

from bench import ui
from bench.ui import Bench, NotHere, Row, Sample, Server


def sample(chart: float, settled: float) -> Sample:
    return Sample(chart, settled, 0.1, 0.2, 1, 3)


def test_ratio_and_its_text() -> None:
    assert ui.ratio(3.0, 1.5) == 2.0
    assert math.isnan(ui.ratio(float("nan"), 1.0))
    assert math.isnan(ui.ratio(1.0, 0.0))
    assert ui.ratio_text("floor", sample(1.0, 30.0), sample(0.5, 2.0)) == "   floor ×2.00/×15"
    assert ui.ratio_text("floor", sample(float("nan"), 1.0), sample(0.5, 2.0)) == "   floor ×-/×0.50"
    assert ui.ratio_text("floor", sample(1.0, 1.0), None) == ""


def test_verdict_against_targets() -> None:
    assert ui._verdict([(0.3, 0.5), (0.9, 1.0)]) == "PASS"
    assert ui._verdict([(0.3, 0.5), (1.1, 1.0)]) == "over"
    assert ui._verdict([(float("nan"), 0.5), (2.0, None)]) == ""
    row = ui.line("x", sample(1.6, 2.0), ui.MOVE_CHART_S, ui.MOVE_SETTLED_S, floor=sample(0.4, 0.5))
    assert "over" in row and "<= 1.5" in row and "<= 2.5" in row and row.endswith("floor ×4.00/×4.00")


def test_issue_34_targets() -> None:
    assert (ui.NEW_TAB_S, ui.COLD_SERVER_S, ui.MOVE_CHART_S, ui.MOVE_SETTLED_S, ui.CLICK_S, ui.SLIDER_CHART_S) == \
        (3.0, 5.0, 1.5, 2.5, 0.3, 0.5)


def test_block_prints_before_beside_now_and_na(capsys: pytest.CaptureFixture[str]) -> None:
    now, before = Server("now", "http://now", ui.ROOT), Server("before abc1234", "http://before", ui.ROOT)
    bench = Bench(now, before, floor={"nav": sample(0.5, 0.5)})
    order: list[str] = []

    def measure(srv: Server) -> list[Row]:
        order.append(srv.name)
        rows = [Row("a", "-> A", sample(1.0, 2.0), 1.5, 2.5, floor="nav")]
        if srv is now:
            rows.append(Row("b", "-> B", sample(1.0, 1.0), 1.5, 2.5, floor="nav"))
            return rows
        return [Row("a", "-> A", sample(2.0, 4.0), 1.5, 2.5, floor="nav")]

    bench.block("nav", measure)
    bench.block("again", lambda srv: (order.append(srv.name), measure(srv))[1])
    out = capsys.readouterr().out.splitlines()
    assert order[:2] == ["now", "before abc1234"] and order[2:] == ["before abc1234"] * 2 + ["now"] * 2
    assert out[1].startswith("  -> A") and out[1].endswith("floor ×2.00/×4.00")
    assert "before abc1234" in out[2] and "over" in out[2] and out[2].endswith("now/before ×0.50/×0.50")
    assert "n/a" in out[4] and "not at this commit" in out[4]

    def missing(srv: Server) -> list[Row]:
        if srv is before:
            raise NotHere("no Tour at this commit")
        return [Row("s2", "Next -> step 2", sample(0.4, 0.5), 1.5, 2.5)]

    bench.block("tour", missing)
    out = capsys.readouterr().out.splitlines()
    assert "PASS" in out[1] and "n/a" in out[2] and "no Tour at this commit" in out[2]


def test_has_page(tmp_path) -> None:
    (tmp_path / "pages").mkdir()
    (tmp_path / "pages" / "1_Heatmaps.py").write_text("")
    (tmp_path / "app.py").write_text("")
    assert ui.has_page(tmp_path, "Heatmaps") and ui.has_page(tmp_path, "")
    assert not ui.has_page(tmp_path, "Tour")
    assert ui.has_page(ui.ROOT, "Tour")
