"""ui.views.training_league: the league's and the sweep's tables, charts and sentences hold the numbers they
are given (issue 43 items 2-3)."""

from __future__ import annotations

import pytest

from attncore.citations import quoted
from attncore.training.league_verdict import REFERENCE_ORDERINGS, ordered_cells
from attncore.training.wd_sweep import WD_SWEEP
from ui.views import training_league as view


def _stat(mean: float | None, half: float | None, n: int) -> dict:
    return {"mean": mean, "half": half, "n": n}


def _cell(variant: str, rate: float | None, half: float | None = None, n: int = 3, lr: float = 1e-3) -> dict:
    s = _stat(rate, half, n)
    return {"variant": variant, "label": variant, "lr": lr, "seeds": list(range(n)), "diverged": [],
            **{k: s for k in view.MEASURES}}


CELLS = [_cell("softpick", 0.0, 0.0), _cell("standard", 0.5, 0.25), _cell("gated", None, n=0),
         _cell("softmax1", 0.125), _cell("relu", 0.9, lr=1e-2)]


def test_cells_are_ordered_by_sink_rate_and_drawn_as_given() -> None:
    cells = ordered_cells(CELLS, 1e-3)
    assert [c["variant"] for c in cells] == ["standard", "softmax1", "softpick", "gated"]
    fig = view.league_figure(cells)
    assert list(fig.data[0].x) == [0.5, 0.125, 0.0, 0.0] and fig.data[0].orientation == "h"
    assert list(fig.data[0].error_x.array) == [0.25, 0.0, 0.0, 0.0]
    assert fig.layout.meta["means"] == [0.5, 0.125, 0.0, None]
    frame = view.cells_frame(cells)
    assert list(frame["rank"]) == [1, 2, 3, 4] and list(frame["variant"])[0] == "softmax"
    assert frame.iloc[0]["sink rate (ε = 0.3)"] == "0.500 ± 0.250 (3 seeds)"
    assert frame.iloc[3]["sink rate (ε = 0.3)"] == "—"


def test_sentences_come_from_the_numbers() -> None:
    header = {"command": "python -m attncore.training.league --out out --threads 1", "machine": "AMD EPYC",
              "git_commit": "0123456789abcdef", "corpus": {"name": "tiny.txt", "sha256": "ab" * 32}}
    text = view.status_text("league.partial.jsonl", 15, 48, header)
    assert text.startswith("15 of the league's 48 runs are in (the league was still running")
    assert "0123456789" in text and "tiny.txt" in text and "abababababab…" in text
    assert "(complete)" in view.status_text("league.jsonl", 48, 48, header)
    wd = [{"weight_decay": 0.0, "lr": 1e-3, "seeds": [0, 1], "sink_rate": _stat(0.375, 0.1, 2)},
          {"weight_decay": 5.0, "lr": 1e-3, "seeds": [0], "sink_rate": _stat(0.0, None, 1)}]
    assert view.wd_text(wd, 15) == ("Sink rate at ε = 0.3 (3 of the sweep's 15 runs in): weight decay 0: "
                                    "0.375 ± 0.100 (2 seeds); weight decay 5: 0.000 (1 seed).")
    curves = [{"seed": 0, "steps": [0, 50], "bos": [0.1, 0.4], "nowhere": [0, 0], "loss": [4.0, 1.7],
               "sink_rate": 0.375}]
    assert view.curves_text(curves, "standard", 1e-3) == (
        "softmax at lr 0.001: seed 0: sink rate 0.375, last mean weight on BOS 0.400, held-out loss 1.700.")
    ref = view.reference_text(REFERENCE_ORDERINGS["zuhri2025.t3"])
    assert "softmax > softmax1" in ref and "not shown" in ref and quoted("zuhri2025.softpick0").label in ref
    gu = view.gu_setting_text(WD_SWEEP["base"])
    assert quoted("gu2024.decay.model").printed in gu and quoted("gu2024.tokens").printed in gu
    assert "not shown" in gu and "2 layers x 4 heads" in gu and "1,000 steps" in gu


def test_wd_figure_and_curves_figure_hold_the_numbers() -> None:
    wd = [{"weight_decay": w, "lr": 1e-3, "seeds": [0], "sink_rate": _stat(r, h, 2)}
          for w, r, h in ((0.0, 0.5, 0.1), (0.5, 0.25, None), (5.0, 0.0, 0.0))]
    fig = view.wd_figure(wd)
    assert list(fig.data[0].y) == pytest.approx([0.5, 0.25, 0.0])
    assert list(fig.data[0].x) == pytest.approx([0.0, 0.5, 5.0]) and fig.layout.xaxis.type == "category"
    curves = [{"seed": s, "steps": [0, 50, 100], "bos": [0.1, None, 0.2 + s], "loss": [1, 1, 1],
               "sink_rate": 0.0} for s in (0, 1)]
    cf = view.curves_figure(curves, "softpick", 1e-2)
    assert cf.layout.meta["seeds"] == [0, 1] and cf.layout.meta["bos"][1] == [0.1, None, 1.2]
