"""The Tour's step "What survives in the cache": its lesson is made from the shipped run's numbers (fed other
numbers, it says other things) and its charts equal attncore's."""

from __future__ import annotations

import numpy as np
import torch

from attncore.decoder import eviction_read as er
from attncore.decoder.eviction_run import load_eviction_run
from attncore.evidence.eviction import shipped_run_path
from tests.chart_data import decode
from ui import tour
from ui.eviction_tour import keep_lesson, keep_parts


def _pl(window: float, streaming: float) -> er.PolicyLosses:
    g = torch.Generator().manual_seed(0)
    dense = 2.0 + 0.05 * torch.randn(640, generator=g, dtype=torch.float64)
    rows = {}
    for p, d in (("window", window), ("streaming", streaming)):
        x = dense.clone()
        x[64:] += d + 0.05 * torch.randn(576, generator=g, dtype=torch.float64)
        rows[(p, 64)] = x
    return er.PolicyLosses("t", 641, dense, rows, {})


def test_lesson_follows_the_numbers() -> None:
    a = keep_lesson("4 of 34 decodes; the rest still to be computed.", _pl(1.0, 0.2))
    assert a.startswith("The shipped eviction run holds 4 of 34 decodes; the rest still to be computed. At 64 "
                        "keys window + first 4 is lowest")
    assert "is context the window lacks" in a
    b = keep_lesson("all 34 decodes.", _pl(0.1, 0.5))
    assert "At 64 keys window is lowest" in b
    assert "None of the prose is decoded yet." in keep_lesson("0 of 34 decodes; the rest still to be computed.",
                                                               None)


def test_step_is_registered_and_reads_the_shipped_run() -> None:
    (step,) = [s for s in tour.STEPS if s.key == "keep"]
    assert step.title == "What survives in the cache" and step.params == ()
    shown = step.show(None, None)
    run = load_eviction_run(shipped_run_path())
    pl = er.from_run(run, "prose")
    assert shown.lesson == keep_lesson(er.run_progress(run), pl)
    assert shown.query == {"snk_view": "decoder"}
    budget = shown.figures[0].to_plotly_json()
    for d in budget["data"][:-1]:
        p = next(k for k, v in er.POLICY_NAMES.items() if v == d["name"])
        np.testing.assert_allclose(decode(d["y"]), [pl.ratio(p, int(b)) for b in decode(d["x"])], rtol=1e-12)
    assert len(shown.figures) == 1  # one screen: the map of what is kept is on the page
    assert "/work" not in shown.lesson and "/work" not in shown.caption
    assert keep_parts(None, None)[1] == shown.lesson
